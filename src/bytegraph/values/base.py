"""The base of every symbolic value, and the stack's NULL marker.

A *value* stands for one Python object of the traced program.  It knows the
Python type it stands for, how it behaves under attribute access, calls,
iteration and truth testing (raising :class:`~bytegraph.errors.Unsupported`
where it cannot), which other values it refers to (for reachability), and how
to rebuild the object in the transformed bytecode (``reconstruct``).
"""

from __future__ import annotations

from typing import Iterable, Iterator, List, Optional

from ..errors import Unsupported
from ..sources import Source


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin types, whose dicts never change


class Value:
    """Abstract symbolic Python object.

    ``source`` is set for objects that existed before the trace (arguments,
    globals, closure contents, attributes of those): it is how guards and
    codegen reach the real object.  Values created during the trace have none.
    """

    __slots__ = ("source",)

    def __init__(self, source: Optional[Source] = None):
        self.source = source

    # -- what it is -------------------------------------------------------
    def python_type(self) -> type:
        raise NotImplementedError(type(self).__name__)

    def is_constant(self) -> bool:
        """True if this value is a known Python constant (``as_constant`` works)."""
        return False

    def reads_caller_frame(self) -> bool:
        """Whether calling this may look at the frame that calls it (its
        locals, globals, line or callers: ``eval``, ``locals()``,
        ``sys._getframe``, ``warnings.warn``, any Python function).  A graph
        break at a call of a value that does not may run the call from the
        compiled root's code instead of the calling frame's (see
        ``BreakEmitter._runs_call_first``).  Unknown kinds answer yes."""
        return True

    def real_object(self):
        """``(obj,)`` when this value stands for one known real object (``is``
        and ``id()`` compare it), ``None`` for objects made in the trace or
        known only by their type.  Kinds that wrap a real object override it."""
        return (self.as_constant(),) if self.is_constant() else None

    def as_constant(self):
        raise Unsupported(f"{self} is not a Python constant", kind="not_constant")

    def type_name(self) -> str:
        try:
            return self.python_type().__qualname__
        except NotImplementedError:
            return type(self).__name__

    # -- behaviour --------------------------------------------------------
    def get_attr(self, tx, name: str) -> "Value":
        if name == "__class__":
            # the type (a class is callable, but ``obj.__class__`` is no method)
            try:
                cls = self.python_type()
            except NotImplementedError:
                cls = None
            if cls is not None and type(cls).__getattribute__ is type.__getattribute__ and \
                    "__class__" not in vars(cls) and getattr(cls, "__module__", "") == "builtins":
                return tx.wrap(cls, None)
        if type(self).call_method is not Value.call_method:
            try:
                has = callable(getattr(self.python_type(), name, None))
            except NotImplementedError:
                has = False
            if has:
                return MethodCallValue(self, name)
        raise Unsupported(f"attribute {name!r} of {self.type_name()} object",
                          kind="unsupported_attribute",
                          hint="bytegraph cannot read this attribute symbolically")

    def set_attr(self, tx, name: str, value: "Value") -> None:
        raise Unsupported(f"setting attribute {name!r} on {self.type_name()} object",
                          kind="unsupported_setattr")

    def del_attr(self, tx, name: str) -> None:
        raise Unsupported(f"deleting attribute {name!r} of {self.type_name()} object",
                          kind="unsupported_setattr")

    def call(self, tx, args: List["Value"], kwargs: dict) -> "Value":
        raise Unsupported(f"calling a {self.type_name()} object", kind="unsupported_call")

    def call_method(self, tx, name: str, args: List["Value"], kwargs: dict) -> "Value":
        """``self.name(*args, **kwargs)`` for kinds that model their methods directly."""
        raise Unsupported(f"method {name}() of {self.type_name()} object", kind="unsupported_method")

    def get_iter(self, tx) -> "Value":
        """``iter(self)``: an iterator value (by default over ``unpack``'s items)."""
        from .containers import IteratorValue
        return IteratorValue(self.unpack(tx))

    def unpack(self, tx) -> List["Value"]:
        """The items iteration would produce, as a finite list."""
        raise Unsupported(f"iterating over a {self.type_name()} object", kind="unsupported_iter")

    def truth(self, tx) -> bool:
        try:
            cls = self.python_type()
        except NotImplementedError:
            cls = None
        if cls is not None and cls.__flags__ & _IMMUTABLE_TYPE and not any(
                "__bool__" in k.__dict__ or "__len__" in k.__dict__ for k in cls.__mro__):
            # a builtin type without __bool__/__len__ (a function, a method):
            # its objects are always true, and no program code can change that
            return True
        raise Unsupported(f"truth value of a {self.type_name()} object", kind="unsupported_truth")

    def has_len(self) -> bool:
        return False

    # -- structure --------------------------------------------------------
    def children(self) -> Iterable["Value"]:
        """Values this one refers to (reachability for pruning and codegen)."""
        return ()

    def reconstruct(self, cg) -> None:
        """Emit bytecode that pushes the real object this value stands for."""
        if self.source is not None:
            self.source.emit_load(cg)
            return
        raise Unsupported(f"cannot rebuild a {self.type_name()} object after the graph",
                          kind="unreconstructable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MethodCallValue(Value):
    """A method looked up on a value that models its methods itself
    (``lst.append``, ``d.items``): calling it is ``receiver.call_method(name)``.
    Reconstructs as the attribute of the rebuilt receiver."""

    __slots__ = ("receiver", "name")

    def __init__(self, receiver: Value, name: str):
        super().__init__()
        self.receiver = receiver
        self.name = name

    def python_type(self):
        import types
        return types.BuiltinMethodType

    def call(self, tx, args, kwargs):
        return self.receiver.call_method(tx, self.name, args, kwargs)

    def children(self):
        return (self.receiver,)

    def reconstruct(self, cg):
        cg.reconstruct(self.receiver)
        cg.emit("LOAD_ATTR", self.name)


class NullValue(Value):
    """The NULL that ``PUSH_NULL``/``LOAD_GLOBAL``/``LOAD_METHOD`` leave below a callable."""

    __slots__ = ()

    def reconstruct(self, cg) -> None:
        cg.emit("PUSH_NULL")


NULL = NullValue()



def reachable(values: Iterable[Optional[Value]]) -> Iterator[Value]:
    """Each value ``values`` refer to, directly or through ``children()``, once.

    Example::

        >>> from bytegraph.values.containers import TupleValue
        >>> from bytegraph.values.constants import const
        >>> one = const(1)
        >>> len(list(reachable([TupleValue([one, one])])))
        2
    """
    seen, todo = set(), list(values)
    while todo:
        v = todo.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        todo.extend(v.children())


def all_constant(values: Iterable[Value]) -> bool:
    return all(v.is_constant() for v in values)


class UnrealizedLocal(Value):
    """A root-frame local nobody has read yet (an argument, or an entry of a
    resume function's state dict), handed on untouched (e.g. by ``locals()``).

    It reconstructs from its source without any guard; any other use reads
    the local for real (wrapping it, with its guards) and forwards to that.
    """

    __slots__ = ("frame", "name", "_real")

    def __init__(self, frame, name: str):
        super().__init__(frame.unrealized[name][1])
        self.frame = frame
        self.name = name
        self._real = None
        if frame.state_source is not None:
            # an entry of a state dict: handed on, it is read from the dict of
            # later calls too, where the local may be unbound (absent)
            from ..guards import Guard
            frame.guards.add(Guard("DICT_CONTAINS", frame.state_source, (name, True)))

    def realize(self) -> Value:
        if self._real is None:
            self._real = self.frame.load_local(self.name)
        return self._real

    def python_type(self):
        return self.realize().python_type()

    def is_constant(self):
        return self.realize().is_constant()

    def as_constant(self):
        return self.realize().as_constant()

    def get_attr(self, tx, name):
        return self.realize().get_attr(tx, name)

    def set_attr(self, tx, name, value):
        return self.realize().set_attr(tx, name, value)

    def del_attr(self, tx, name):
        return self.realize().del_attr(tx, name)

    def call(self, tx, args, kwargs):
        return self.realize().call(tx, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self.realize().call_method(tx, name, args, kwargs)

    def unpack(self, tx):
        return self.realize().unpack(tx)

    def truth(self, tx):
        return self.realize().truth(tx)

    def has_len(self):
        return self.realize().has_len()

    def children(self):
        return (self._real,) if self._real is not None else ()

    def reconstruct(self, cg):
        if self._real is not None:
            return cg.reconstruct(self._real)
        self.source.emit_load(cg)


def check_release(value: Optional[Value]) -> None:
    """Refuse to trace dropping a reference to ``value`` when that could run
    code at once: a pre-existing object whose class has ``__del__`` or that
    has weak references with callbacks.  Eager runs the finalizer at the
    write (``d[k] = None`` may free the old value); the trace replays writes
    later and could not know whether it was the last reference, so the
    write breaks and runs natively."""
    if value is None:
        return
    obj = finalizer_reachable(value)
    if obj is None:
        return
    raise Unsupported(f"dropping a reference to a {type(obj).__qualname__} object, which has a finalizer",
                      kind="finalizer", hint="the write runs natively, where the finalizer runs on time")


#: values a release check walks at most; past it, dropping is assumed to run code
_MAX_RELEASE_WALK = 10_000


def finalizer_reachable(value: Value):
    """A real object with a finalizer that dropping a reference to ``value``
    may free, else None: ``value``'s own object, or, for an object made in
    the trace (a list, a dict, a tuple, a closure...), one it holds: eager
    frees the made object, and with it what only it held, at the drop."""
    stack, seen, n = [value], set(), 0
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        n += 1
        if n > _MAX_RELEASE_WALK:
            return v  # (too big to check: as if it had one)
        if v.is_constant():
            continue  # an immutable constant (reading it would guard it)
        real = v.real_object()
        if real is not None:
            if has_finalizer(real[0]):
                return real[0]
            if v.source is not None:
                continue  # pre-existing: held where it was read
        if v.source is None:
            stack.extend(c for c in v.children() if c is not None)
    return None


def has_finalizer(obj) -> bool:
    """``obj`` runs code when it dies: ``__del__``, or weakref callbacks."""
    import types
    t = type(obj)  # (by type: ``isinstance`` may read a program's ``__class__`` property)
    if issubclass(t, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType)):
        # classes, functions and modules live as long as their module; weakrefs
        # to them are caches and subclass lists
        return False
    import torch
    if issubclass(t, (torch.Tensor, torch.nn.Module)):
        # their weakref callbacks are torch's bookkeeping (fake-tensor memos,
        # hook handles), not program code
        return False
    if any("__del__" in k.__dict__ for k in type(obj).__mro__):  # (no descriptor runs)
        return True
    import weakref
    try:
        refs = weakref.getweakrefs(obj)
    except TypeError:
        return False
    return any(_program_callback(getattr(r, "__callback__", None)) for r in refs)


def _program_callback(cb) -> bool:
    """A weakref callback of the program, not bytegraph's or torch's own
    bookkeeping (guards drop their cache entry when a guarded object dies)."""
    if cb is None:
        return False
    module = getattr(cb, "__module__", None) or getattr(getattr(cb, "__func__", None), "__module__", None) or ""
    return not (module.startswith("bytegraph") or module.startswith("torch"))


class _PlainClass:
    pass


class _PlainAnnotatedClass(Exception):
    a: int


#: The names a class body without code of its own puts in the class's dict,
#: asked of the running interpreter (3.13 adds ``__firstlineno__`` and
#: ``__static_attributes__``): none of them changes how instances behave.
PLAIN_CLASS_BODY_NAMES = frozenset(vars(_PlainClass)) | frozenset(vars(_PlainAnnotatedClass)) | frozenset(
    {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__"})
del _PlainClass, _PlainAnnotatedClass

"""Exceptions made or raised by the traced program, and their tracebacks.

An exception object's visible state is more than its ``args``: Python sets
``__traceback__`` when it is raised, ``__context__`` when it is raised while
another exception is being handled, ``__cause__``/``__suppress_context__``
for ``raise ... from ...``, and ``add_note`` and attribute writes fill its
``__dict__``.  :class:`ExceptionValue` models all of it, exactly, or raises
``Unsupported``; it is rebuilt after the graph with the same state.

A traceback cannot be rebuilt: the frames it lists were inlined.  It is a
:class:`TracebackValue`, which can be held, passed, tested for truth, given to
``with_traceback`` and to ``traceback.clear_frames`` (a no-op here: the frames
it would clear are inlined callees that do not exist, or the running frame,
which ``clear_frames`` skips); every other use is a clean ``Unsupported``.
"""

from __future__ import annotations

import types
from typing import Dict, List, Optional

from ..errors import Unsupported
from .base import PLAIN_CLASS_BODY_NAMES, Value
from .constants import NONE, LITERAL_TYPES, ConstantValue, const, is_none

#: class-body names of a user exception class that do not change how its instances behave
_PLAIN_CLASS_NAMES = PLAIN_CLASS_BODY_NAMES
#: what a builtin exception class may define and still keep all its state in ``args``
_PLAIN_BUILTIN_NAMES = frozenset({"__init__", "__new__", "__doc__", "__str__"})


def plain_exception_class(cls: type) -> bool:
    """Is an instance of ``cls`` fully described by its ``args`` (plus the
    state every exception has)?  Not so for builtins that keep more members
    (``OSError.errno``, ``StopIteration.value``, ``AttributeError.name``) nor
    for user classes with their own ``__init__``, ``__new__``, ``__str__``,
    ``__setattr__``, slots, properties...; those are not modelled."""
    if type(cls) is not type:
        return False
    for klass in cls.__mro__:
        if klass is BaseException or klass is object:
            continue
        names = set(klass.__dict__)
        if klass.__module__ == "builtins":
            if names - _PLAIN_BUILTIN_NAMES:
                return False
        elif any(n.startswith("__") and n.endswith("__") and n not in _PLAIN_CLASS_NAMES for n in names):
            return False
    return True


class TracebackValue(Value):
    """The ``__traceback__`` of an exception raised in the trace: not None,
    made of frames that do not exist in the compiled code.  Truth, identity
    and ``traceback.clear_frames`` are exact; anything else is unsupported."""

    __slots__ = ()

    def python_type(self):
        return types.TracebackType

    def truth(self, tx):
        return True

    def reconstruct(self, cg):
        raise Unsupported("the traceback of an exception raised in the compiled code", kind="unsupported_traceback",
                          hint="its frames were inlined; the frame runs natively")


class HandledAtEntryValue(Value):
    """The exception being handled when the compiled frame was called
    (``sys.exc_info()[1]`` of its caller), unknown at trace time: the
    ``__context__`` of an exception raised outside every handler of the
    trace.  Rebuilt by reading ``sys.exc_info()`` in the transformed code,
    which runs outside any handler of its own; any other use is unsupported."""

    __slots__ = ()

    def python_type(self):
        raise Unsupported("the exception the caller is handling", kind="unsupported_exception")

    def type_name(self):
        return "exception being handled by the caller"

    def reconstruct(self, cg):
        import sys
        cg.push_callable(sys.exc_info)
        cg.call(0)
        cg.load_object(1)
        cg.emit("BINARY_SUBSCR")


HANDLED_AT_ENTRY = HandledAtEntryValue()


class ExceptionValue(Value):
    """An exception instance made or raised by the traced program.

    ``exc_type`` is its class.  ``args`` are its arguments, or None when they
    are not known as values (an exception raised by a builtin at trace time
    whose arguments are not literals; ``real`` is then that exception, which
    answers ``str()`` and reads of its other members).  ``rebuild`` is the
    class and arguments that make the same object afresh (None: cannot be
    rebuilt).  ``traceback``, ``context``, ``cause``, ``suppress_context``
    and ``attrs`` (its ``__dict__``, ``__notes__`` included) are its state.
    """

    __slots__ = ("exc_type", "args", "real", "rebuild", "traceback", "context", "cause", "suppress_context",
                 "attrs", "fresh")

    def __init__(self, exc_type: type, args: Optional[List[Value]], real: Optional[BaseException] = None,
                 rebuild=None):
        super().__init__()
        self.exc_type = exc_type
        self.args = args
        self.real = real
        #: (class, positional values, keyword values) to call to make it again
        self.rebuild = rebuild
        self.traceback: Value = NONE
        self.context: Value = NONE
        self.cause: Value = NONE
        self.suppress_context = False
        self.attrs: Dict[str, Value] = {}
        #: raised where no frame was at hand: the first frame it unwinds through calls ``raised``
        self.fresh = False

    @staticmethod
    def from_real(exc: BaseException) -> "ExceptionValue":
        """An exception a builtin raised at trace time."""
        literal = all(type(a) in LITERAL_TYPES for a in exc.args)
        args = [const(a) for a in exc.args] if literal else None
        rebuild = (type(exc), args, {}) if literal and plain_exception_class(type(exc)) and not exc.__dict__ \
            else None
        return ExceptionValue(type(exc), args, real=exc, rebuild=rebuild)

    def python_type(self):
        return self.exc_type

    def children(self):
        out = list(self.args or ())
        if self.rebuild is not None:
            out += [*self.rebuild[1], *self.rebuild[2].values()]
        return out + [self.traceback, self.context, self.cause, *self.attrs.values()]

    # -- raising -------------------------------------------------------------
    def raised(self, tx) -> None:
        """Python's bookkeeping when the program raises this exception (not a
        bare re-raise): a new traceback, and the exception being handled as
        its ``__context__`` (cutting the chain where it would loop back)."""
        self.traceback = TracebackValue()
        handled = handled_exception(tx)
        if handled is self:
            return
        if isinstance(handled, ExceptionValue):
            seen, o = set(), handled
            while isinstance(o, ExceptionValue) and id(o) not in seen:
                seen.add(id(o))
                if o.context is self:
                    o.context = NONE
                    break
                o = o.context
        self.context = handled

    # -- attributes ------------------------------------------------------------
    def get_attr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name == "args":
            if self.args is None:
                raise Unsupported(f"the arguments of a {self.exc_type.__name__} raised by a builtin",
                                  kind="unsupported_exception")
            from .containers import TupleValue
            return TupleValue(list(self.args))
        if name == "__class__":
            from .objects import ClassValue
            return ClassValue(self.exc_type)
        if name == "value" and issubclass(self.exc_type, StopIteration) and self.args is not None:
            from .constants import NONE
            return self.args[0] if self.args else NONE  # (what a generator's return gave)
        if name == "__traceback__":
            return self.traceback
        if name == "__context__":
            return self.context
        if name == "__cause__":
            return self.cause
        if name == "__suppress_context__":
            return const(self.suppress_context)
        if name in ("with_traceback", "add_note"):
            from .base import MethodCallValue
            return MethodCallValue(self, name)
        if self.real is not None and name in _MEMBERS_OF_REAL and hasattr(self.real, name):
            attr = getattr(self.real, name)
            if type(attr) in LITERAL_TYPES:
                return const(attr)
        if not hasattr(self.exc_type, name) and (self.real is None or not hasattr(self.real, name)):
            tx.raise_python_exception(AttributeError(
                f"'{self.exc_type.__name__}' object has no attribute '{name}'", name=name))
        raise Unsupported(f"attribute {name!r} of a {self.exc_type.__name__} exception",
                          kind="unsupported_attribute")

    def set_attr(self, tx, name, value):
        if name == "__traceback__":
            if not (is_none(value) or isinstance(value, TracebackValue)):
                tx.raise_python_exception(TypeError("__traceback__ must be a traceback or None"))
            self.traceback = value
        elif name in ("__context__", "__cause__"):
            if not (is_none(value) or isinstance(value, ExceptionValue)):
                what = "context" if name == "__context__" else "cause"
                tx.raise_python_exception(TypeError(f"exception {what} must be None or derive from BaseException"))
            if name == "__context__":
                self.context = value
            else:
                self.cause = value
                self.suppress_context = True
        elif name == "__suppress_context__":
            if not (value.is_constant() and type(value.as_constant()) is bool):
                raise Unsupported("setting __suppress_context__ to a non-bool", kind="unsupported_setattr")
            self.suppress_context = value.as_constant()
        elif name == "args" or self.real is not None or hasattr(self.exc_type, name) \
                or not plain_exception_class(self.exc_type):
            raise Unsupported(f"setting {name!r} on a {self.exc_type.__name__} exception",
                              kind="unsupported_setattr")
        else:
            self.attrs[name] = value

    def call_method(self, tx, name, args, kwargs):
        if name == "with_traceback" and len(args) == 1 and not kwargs:
            self.set_attr(tx, "__traceback__", args[0])
            return self
        if name == "add_note" and len(args) == 1 and not kwargs:
            note = args[0]
            if not (note.is_constant() and isinstance(note.as_constant(), str)):
                if note.is_constant() or note.python_type() is not str:
                    tx.raise_python_exception(TypeError(f"note must be a str, not '{note.type_name()}'"))
                raise Unsupported("add_note() of a non-constant string", kind="unsupported_method")
            from .containers import ListValue
            notes = self.attrs.get("__notes__")
            if notes is None:
                notes = self.attrs["__notes__"] = ListValue([])
            if not isinstance(notes, ListValue) or type(notes) is not ListValue:
                tx.raise_python_exception(TypeError("Cannot add note: __notes__ is not a list"))
            notes.items.append(note)
            return NONE
        return super().call_method(tx, name, args, kwargs)

    # -- str / repr ----------------------------------------------------------------
    def text(self, tx, fn) -> Value:
        """``str(exc)`` or ``repr(exc)``: computed by a real exception of the same class and arguments."""
        if self.real is not None:
            return const(fn(self.real))
        if self.args is not None and all(a.is_constant() for a in self.args) and \
                plain_exception_class(self.exc_type):
            return const(fn(self.exc_type(*[a.as_constant() for a in self.args])))
        raise Unsupported(f"{fn.__name__}() of a {self.exc_type.__name__} with non-constant arguments",
                          kind="unsupported_builtin")

    # -- after the graph ---------------------------------------------------------------
    def reconstruct(self, cg):
        if self.rebuild is None:
            raise Unsupported(f"a {self.exc_type.__name__} raised by a builtin, after the graph",
                              kind="unreconstructable")
        cls, args, kwargs = self.rebuild
        cg.push_callable(_remake)
        cg.push_callable(cls)
        cg.call_with(args, kwargs)
        for part in (self.traceback, self.context, self.cause):
            cg.reconstruct(part)
        cg.load_object(self.suppress_context)
        from .containers import DictValue, str_key
        state = DictValue()
        for k, v in self.attrs.items():
            state.entries[str_key(k)] = (const(k), v)
        cg.reconstruct(state)
        cg.call(6)

    def __repr__(self):
        return f"ExceptionValue({self.exc_type.__name__})"


#: members of builtin exceptions read from the real exception a builtin raised
_MEMBERS_OF_REAL = frozenset({"errno", "strerror", "filename", "filename2", "winerror", "characters_written",
                              "value", "code", "name", "path", "msg", "lineno", "offset", "text", "end_lineno",
                              "end_offset", "encoding", "start", "end", "reason"})


def _remake(exc, traceback, context, cause, suppress_context, attrs):
    """The transformed code's way to give a new exception the state it had in the trace."""
    exc.__traceback__ = traceback
    exc.__context__ = context
    exc.__cause__ = cause
    exc.__suppress_context__ = suppress_context
    for k, v in attrs.items():
        setattr(exc, k, v)
    return exc


def handled_exception(tx) -> Value:
    """The exception being handled where ``tx`` runs (``sys.exc_info()[1]``):
    the innermost of the frame and its callers, or the caller's at entry."""
    frame = tx
    while frame is not None:
        if frame.exc_stack:
            return frame.exc_stack[-1]
        frame = frame.parent
    return HANDLED_AT_ENTRY


def construct_exception(tx, cls: type, args: List[Value], kwargs: Dict[str, Value]) -> Value:
    """``cls(*args, **kwargs)`` for an exception class."""
    if all(a.is_constant() for a in [*args, *kwargs.values()]) and cls.__module__ == "builtins":
        # a builtin constructor with constant arguments: run it, so its
        # validation, its members and its class (OSError(2, ...) is a
        # FileNotFoundError) are exactly Python's
        try:
            real = cls(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
        except Exception as e:
            tx.raise_python_exception(e)
        value = ExceptionValue.from_real(real)
        if value.args is not None:
            value.rebuild = (cls, list(args), dict(kwargs))
            if type(real) is not cls or kwargs or not plain_exception_class(cls):
                # state beyond args (errno, name=...): str and members come from ``real``;
                # the same call makes it again
                return value
            value.real = None
        return value
    if not plain_exception_class(cls):
        raise Unsupported(f"constructing a {cls.__qualname__} (an exception class with its own constructor "
                          "or state)", kind="unsupported_class_call")
    if kwargs:
        try:
            cls(**{k: None for k in kwargs})
        except TypeError as e:
            tx.raise_python_exception(e)
        raise Unsupported(f"{cls.__qualname__}() with keyword arguments", kind="unsupported_class_call")
    return ExceptionValue(cls, list(args), rebuild=(cls, list(args), {}))

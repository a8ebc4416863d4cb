"""Python modules, classes, user objects and torch's grad-mode context
managers (exceptions are in ``exceptions.py``)."""

from __future__ import annotations

import types
import weakref
from typing import List, Optional

import torch

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource
from .base import Value, check_release, has_finalizer
from .constants import NONE, ConstantValue, const, is_none
from .exceptions import ExceptionValue  # noqa: F401 - re-exported


class PythonModuleValue(Value):
    """An imported module object (``torch``, ``math``, ``torch.nn.functional``).

    Attribute reads are guarded through the module's source.  Reconstructs
    through its source or as a constant.
    """

    __slots__ = ("module",)

    def __init__(self, module: types.ModuleType, source=None):
        super().__init__(source)
        self.module = module

    def real_object(self):
        return (self.module,)

    def python_type(self):
        return types.ModuleType

    def is_constant(self):
        return True

    def as_constant(self):
        return self.module

    def get_attr(self, tx, name):
        # A module's attributes are its globals: a write made earlier in this
        # trace (``mod.K = 5``, or ``global K`` in one of its functions) is
        # pending in the side-effect table and is what Python would read.
        pending = tx.side_effects.pending_global(self.module.__dict__, name)
        if pending is not None:
            if pending is DELETED:
                tx.raise_python_exception(AttributeError(
                    f"module '{self.module.__name__}' has no attribute '{name}'"))
            return pending
        try:
            attr = getattr(self.module, name)
        except AttributeError as e:
            tx.raise_python_exception(e)
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(attr, src)

    def set_attr(self, tx, name, value):
        if type(self.module) is not types.ModuleType or self.source is None:
            super().set_attr(tx, name, value)
        tx.side_effects.store_global(self.module.__dict__, name, value)

    def del_attr(self, tx, name):
        if type(self.module) is not types.ModuleType or self.source is None:
            super().del_attr(tx, name)
        self.get_attr(tx, name)  # AttributeError if absent, as Python
        tx.side_effects.delete_global(self.module.__dict__, name)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.module)

    def __repr__(self):
        return f"PythonModuleValue({self.module.__name__})"


class ClassValue(Value):
    """A class object (user classes, builtin types, exception classes).

    Class attribute reads are guarded through its source; calling a builtin
    type or an exception class is modelled, user classes are not yet.
    """

    __slots__ = ("cls",)

    def __init__(self, cls: type, source=None):
        super().__init__(source)
        self.cls = cls

    def real_object(self):
        return (self.cls,)

    def python_type(self):
        return type(self.cls)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.cls

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return const(getattr(self.cls, name))
        try:
            attr = getattr(self.cls, name)
        except AttributeError as e:
            tx.raise_python_exception(e)
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(attr, src)

    def call(self, tx, args, kwargs):
        from .builtins_table import call_type
        return call_type(tx, self.cls, args, kwargs)

    def truth(self, tx):
        if type(self.cls) is type:
            return True
        return bool(self.cls)  # a metaclass __bool__/__len__ (e.g. an Enum class's member count)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.cls)

    def __repr__(self):
        return f"ClassValue({self.cls.__qualname__})"


class UserObjectValue(Value):
    """An instance of a user class that existed before the trace.

    Attribute reads look the attribute up on the real object (instance dict
    first, then the class: methods become bound methods, properties are
    inlined) and guard what they read; writes are buffered side effects.
    The object itself is guarded by type; ``is`` comparisons add an identity
    guard (``guard_set``).
    """

    __slots__ = ("obj", "guard_set")

    def __init__(self, obj, source=None, guard_set=None):
        super().__init__(source)
        self.obj = obj
        self.guard_set = guard_set

    def real_object(self):
        return (self.obj,)

    def python_type(self):
        return type(self.obj)

    def _instance_dict_value(self, tx):
        """The dict value of ``obj.__dict__`` if the trace read it as one, else None."""
        inst_dict = getattr(self.obj, "__dict__", None)
        return tx.side_effects.existing(inst_dict) if type(inst_dict) is dict else None

    def get_attr(self, tx, name):
        if name == "__dict__" and tx.side_effects.attr_writes.get(self):
            # its attribute writes are buffered apart: a dict value of the
            # instance dict would not show them
            raise Unsupported(f"{type(self.obj).__name__}.__dict__ after attribute writes",
                              kind="unsupported_attribute")
        pending = tx.side_effects.pending_attr(self, name)
        if pending is not None:
            if pending is DELETED:
                tx.raise_python_exception(AttributeError(
                    f"'{type(self.obj).__name__}' object has no attribute '{name}'"))
            return pending
        if name != "__dict__" and self._instance_dict_value(tx) in tx.side_effects.mutated:
            # changed through obj.__dict__: attribute reads look at the real object
            raise Unsupported(f"reading {type(self.obj).__name__}.{name} after writes to its __dict__",
                              kind="unsupported_attribute")
        return lookup_attr(tx, self, self.obj, name)

    def set_attr(self, tx, name, value):
        if self._instance_dict_value(tx) is not None:
            raise Unsupported(f"setting {type(self.obj).__name__}.{name} while its __dict__ is held as a dict",
                              kind="unsupported_setattr")
        if _has_data_descriptor(type(self.obj), name) or _has_custom_setattr(type(self.obj)):
            raise Unsupported(f"setting {type(self.obj).__name__}.{name} (descriptor or __setattr__)",
                              kind="unsupported_setattr")
        self._release_attr(tx, name)
        tx.side_effects.store_attr(self, name, value)

    def _release_attr(self, tx, name) -> None:
        """The value an attribute write or delete drops (see check_release)."""
        pending = tx.side_effects.pending_attr(self, name)
        if pending is not None and pending is not DELETED:
            check_release(pending)
        elif pending is None:
            old = getattr(self.obj, "__dict__", {}).get(name)
            if old is not None and has_finalizer(old):
                raise Unsupported(f"replacing {type(self.obj).__name__}.{name}, whose value has a finalizer",
                                  kind="finalizer", hint="the write runs natively, where the finalizer runs on time")

    def del_attr(self, tx, name):
        cls = type(self.obj)
        if _has_data_descriptor(cls, name) or _has_custom_setattr(cls) or not hasattr(self.obj, "__dict__") \
                or self._instance_dict_value(tx) is not None:
            raise Unsupported(f"deleting {cls.__name__}.{name}", kind="unsupported_setattr")
        self._release_attr(tx, name)
        se = tx.side_effects
        pending = se.pending_attr(self, name)
        had = name in self.obj.__dict__
        _guard_in_dict(tx, AttrSource(self.source, "__dict__"), name, had)
        if pending is DELETED or (pending is None and not had):
            # ``del`` removes an instance attribute; a class attribute does not count
            tx.raise_python_exception(AttributeError(name))
        if had:
            se.store_attr(self, name, DELETED)
        else:
            se.forget_attr(self, name)  # set in this call, deleted again: nothing to replay

    # Python-level dunders of the object's class are inlined.
    def dunder(self, tx, name: str):
        """``type(obj).name`` bound to this object, if it is a Python function."""
        from .functions import BoundMethodValue
        fn = getattr(type(self.obj), name, None)
        if not isinstance(fn, types.FunctionType):
            return None
        return BoundMethodValue(tx.wrap(fn, AttrSource(AttrSource(self.source, "__class__"), name)), self)

    def truth(self, tx):
        return dunder_truth(tx, type(self.obj), lambda name: self.dunder(tx, name))

    def get_iter(self, tx):
        from .modules import iterator_from
        cls = type(self.obj)
        method = self.dunder(tx, "__iter__")
        if method is not None:
            return iterator_from(tx, method.call(tx, [], {}))
        if not hasattr(cls, "__iter__") and self.dunder(tx, "__getitem__") is not None:
            # the sequence protocol: obj[0], obj[1], ... until IndexError (len() is not asked)
            from .generators import SequenceIteratorValue
            return SequenceIteratorValue(self)
        if getattr(cls, "__iter__", None) is None and not hasattr(cls, "__getitem__"):
            tx.raise_python_exception(TypeError(f"'{cls.__name__}' object is not iterable"))
        raise Unsupported(f"iterating over a {cls.__name__} object", kind="unsupported_iter")

    def unpack(self, tx):
        return self.get_iter(tx).unpack(tx)

    def getitem(self, tx, key):
        method = self.dunder(tx, "__getitem__")
        if method is None:
            raise Unsupported(f"indexing a {type(self.obj).__name__} object", kind="unsupported_method")
        return method.call(tx, [key], {})

    def call(self, tx, args, kwargs):
        method = self.dunder(tx, "__call__")
        if method is None:
            return super().call(tx, args, kwargs)
        return method.call(tx, args, kwargs)

    def has_len(self):
        return hasattr(type(self.obj), "__len__")

    def call_method(self, tx, name, args, kwargs):
        if name == "with_traceback" and isinstance(self.obj, BaseException) and len(args) == 1 and not kwargs \
                and type(self.obj).with_traceback is BaseException.with_traceback:
            # an exception from native code (e.g. given to __exit__): the
            # write is replayed after the graph like any attribute write
            tb = args[0]
            from .exceptions import TracebackValue
            if isinstance(tb, TracebackValue):
                raise Unsupported("giving an exception from native code a traceback made in the trace",
                                  kind="unsupported_exception")
            if not (is_none(tb) or tb.python_type() is types.TracebackType):
                tx.raise_python_exception(TypeError("__traceback__ must be a traceback or None"))
            tx.side_effects.store_attr(self, "__traceback__", tb)
            return self
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"UserObjectValue({type(self.obj).__name__})"


DELETED = ConstantValue(object())

#: what special_lookup returns for an absent name
NO_ATTR = _MISSING = object()


def special_lookup(cls: type, name: str):
    """``name`` looked up on the type only, as the interpreter looks up special methods."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def dunder_truth(tx, cls: type, bound) -> bool:
    """``bool(obj)`` for an object of a Python class: ``__bool__`` (which must
    return a bool), else ``__len__`` (checked as by ``len``), else true.
    ``bound(name)`` is the Python method ``type(obj).name`` bound to the
    object, or None when it is not a Python function."""
    for name in ("__bool__", "__len__"):
        attr = special_lookup(cls, name)
        if attr is _MISSING:
            continue
        if attr is None:
            tx.raise_python_exception(TypeError("'NoneType' object is not callable"))
        method = bound(name)
        if method is None:
            raise Unsupported(f"{cls.__name__}.{name} is not a Python function", kind="unsupported_truth")
        if name == "__len__":
            n = checked_len(tx, method.call(tx, [], {}))
            return n.truth(tx)
        result = method.call(tx, [], {})
        if result.is_constant() and type(result.as_constant()) is bool:
            return result.as_constant()
        try:
            rtype = result.python_type()
        except NotImplementedError:
            rtype = None
        if rtype is bool:
            return result.truth(tx)
        if rtype is not None:
            tx.raise_python_exception(TypeError(f"__bool__ should return bool, returned {rtype.__name__}"))
        raise Unsupported(f"the result of {cls.__name__}.__bool__", kind="unsupported_truth")
    return True


def checked_len(tx, result: Value) -> Value:
    """The result of a Python ``__len__`` as ``len()`` checks it: an integer
    (by ``__index__``) that is not negative and fits in a ``Py_ssize_t``."""
    import sys
    from .symbolic import SymIntValue
    if isinstance(result, SymIntValue):
        return result  # a size: never negative
    if not result.is_constant():
        raise Unsupported(f"__len__ returning a {result.type_name()}", kind="unsupported_builtin")
    n = result.as_constant()
    if type(n) not in (int, bool):
        if isinstance(n, (float, str, bytes, complex, type(None), tuple)):
            tx.raise_python_exception(TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer"))
        raise Unsupported(f"__len__ returning a {type(n).__name__}", kind="unsupported_builtin")
    n = int(n)
    if n < 0:
        tx.raise_python_exception(ValueError("__len__() should return >= 0"))
    if n > sys.maxsize:
        tx.raise_python_exception(OverflowError("cannot fit 'int' into an index-sized integer"))
    return const(n)


def _has_data_descriptor(cls, name) -> bool:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")
    return False


def _has_custom_setattr(cls) -> bool:
    """``__setattr__`` or ``__delattr__`` of its own: writes must run it."""
    return cls.__setattr__ is not object.__setattr__ or cls.__delattr__ is not object.__delattr__


def _guard_in_dict(tx, dict_source, name: str, present: bool) -> None:
    if dict_source.base is not None:
        tx.guards.add(Guard("DICT_CONTAINS", dict_source, (name, present)))


def _guard_not_in_dict(tx, dict_source, name: str) -> None:
    if dict_source.base is not None:
        tx.guards.add(Guard("DICT_CONTAINS", dict_source, (name, False)))


def lookup_attr(tx, value: Value, obj, name: str) -> Value:
    """Symbolic ``getattr(obj, name)`` for a pre-existing object with a source."""
    from .functions import BoundMethodValue
    cls = type(obj)
    src = value.source
    class_attr = None
    for klass in cls.__mro__:
        if name in klass.__dict__:
            class_attr = klass.__dict__[name]
            break
    if isinstance(class_attr, property):
        if class_attr.fget is None:
            tx.raise_python_exception(AttributeError(f"property {name!r} has no getter"))
        fget = tx.wrap(class_attr.fget, AttrSource(AttrSource(AttrSource(src, "__class__"), name), "fget"))
        return fget.call(tx, [value], {})
    inst_dict = getattr(obj, "__dict__", None)
    if inst_dict is not None and name in inst_dict and not (class_attr is not None and hasattr(type(class_attr), "__set__")):
        return tx.wrap(inst_dict[name], AttrSource(src, name))
    if inst_dict is not None and class_attr is not None and not hasattr(type(class_attr), "__set__"):
        # read from the class: an instance attribute set later would shadow it
        _guard_not_in_dict(tx, AttrSource(src, "__dict__"), name)
    if isinstance(class_attr, types.FunctionType):
        fn = tx.wrap(class_attr, AttrSource(AttrSource(src, "__class__"), name))
        return BoundMethodValue(fn, value)
    if isinstance(class_attr, staticmethod):
        return tx.wrap(class_attr.__func__, AttrSource(AttrSource(src, "__class__"), name))
    if isinstance(class_attr, classmethod) and isinstance(class_attr.__func__, types.FunctionType):
        fn = tx.wrap(class_attr.__func__, AttrSource(AttrSource(AttrSource(src, "__class__"), name), "__func__"))
        return BoundMethodValue(fn, tx.wrap(cls, AttrSource(src, "__class__")))
    if class_attr is not None and not hasattr(type(class_attr), "__get__"):
        return tx.wrap(class_attr, AttrSource(src, name))
    descriptor_get = getattr(type(class_attr), "__get__", None) if class_attr is not None else None
    if isinstance(descriptor_get, types.FunctionType):
        # a descriptor written in Python: run its __get__ in the trace, so it
        # sees the object as the program has changed it so far
        class_src = AttrSource(src, "__class__")
        desc_src = ItemSource(AttrSource(class_src, "__dict__"), name)
        desc = tx.wrap(class_attr, desc_src)
        get = tx.wrap(descriptor_get, AttrSource(AttrSource(desc_src, "__class__"), "__get__"))
        return get.call(tx, [desc, value, tx.wrap(cls, class_src)], {})
    if getattr(cls, "__getattr__", None) is not None and class_attr is None and \
            (inst_dict is None or name not in inst_dict):
        raise Unsupported(f"{cls.__name__}.__getattr__", kind="unsupported_attribute")
    try:
        attr = getattr(obj, name)
    except AttributeError as e:
        # absent now: the entry holds only while it stays absent
        if inst_dict is not None:
            _guard_not_in_dict(tx, AttrSource(src, "__dict__"), name)
        _guard_not_in_dict(tx, AttrSource(AttrSource(src, "__class__"), "__dict__"), name)
        tx.raise_python_exception(e)
    except Exception as e:
        # a C getter that ran user code which raised: the read must happen in Python
        raise Unsupported(f"reading {cls.__name__}.{name} raises {type(e).__name__}",
                          kind="unsupported_attribute") from None
    if isinstance(attr, types.MethodType) and attr.__self__ is obj:
        fn = tx.wrap(attr.__func__, AttrSource(AttrSource(src, name), "__func__"))
        return BoundMethodValue(fn, value)
    return tx.wrap(attr, AttrSource(src, name))


class GradModeValue(Value):
    """``torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled(b)``
    used as a context manager (or ``set_grad_enabled`` as a call).

    Entering records ``torch._C._set_grad_enabled`` in the graph and switches
    the tracer's real grad mode so fake tensors get the right
    ``requires_grad``; leaving restores the previous mode.
    """

    __slots__ = ("enabled", "previous")

    def __init__(self, enabled: bool):
        super().__init__()
        self.enabled = enabled
        self.previous: Optional[bool] = None

    def python_type(self):
        return {False: torch.no_grad, True: torch.enable_grad}[self.enabled]

    def enter(self, tx) -> Value:
        self.previous = torch.is_grad_enabled()
        tx.set_grad_mode(self.enabled)
        return NONE

    def exit(self, tx) -> Value:
        tx.set_grad_mode(self.previous)
        return NONE

    def reconstruct(self, cg):
        cg.push_callable(torch.enable_grad if self.enabled else torch.no_grad)
        cg.call(0)


class WithExitValue(Value):
    """The bound ``__exit__`` that ``BEFORE_WITH`` leaves on the stack."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: Value):
        super().__init__()
        self.ctx = ctx

    def python_type(self):
        return types.MethodType

    def children(self):
        return (self.ctx,)

    def call(self, tx, args, kwargs):
        self.ctx.exit(tx)
        return NONE

    def reconstruct(self, cg):
        # Across a graph break the context is re-entered natively; its
        # __exit__ stays on the stack.  A grad-mode context must restore the
        # mode it found when first entered, not the one at re-entry (the
        # frame may itself have started inside the context), so that mode is
        # set first.
        previous = getattr(self.ctx, "previous", None)
        if previous is not None:
            cg.push_callable(torch._C._set_grad_enabled)
            cg.load_object(previous)
            cg.call(1)
            cg.emit("POP_TOP")
        cg.reconstruct(self.ctx)
        cg.emit("BEFORE_WITH")
        cg.emit("POP_TOP")


class HookHandleValue(Value):
    """The ``RemovableHandle`` a hook registration returns.

    The real handle exists only once the registration is replayed after the
    graph; codegen keeps it in a temporary, which is how it is reconstructed.
    Calling ``remove()`` during the trace is not supported.
    """

    __slots__ = ()

    def python_type(self):
        from torch.utils.hooks import RemovableHandle
        return RemovableHandle


class OpaqueValue(Value):
    """A pre-existing object bytegraph cannot model (a C function outside torch,
    an ``nn.Module`` for now, ...).  Holding it is fine; using it is a graph
    break.  Reconstructs through its source."""

    __slots__ = ("obj", "why", "kind", "hint")

    def __init__(self, obj, source, why: str, kind: str, hint: str):
        super().__init__(source)
        self.obj = obj
        self.why = why
        self.kind = kind
        self.hint = hint

    def real_object(self):
        return (self.obj,)

    def python_type(self):
        return type(self.obj)

    def _fail(self):
        raise Unsupported(self.why, kind=self.kind, hint=self.hint)

    def call(self, tx, args, kwargs):
        self._fail()

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__") and type(self.obj) not in (weakref.ProxyType, weakref.CallableProxyType) \
                and hasattr(self.obj, name):
            return const(getattr(self.obj, name))
        self._fail()

    def truth(self, tx):
        self._fail()

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.obj)

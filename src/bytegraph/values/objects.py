"""Classes, user objects and torch's grad-mode context managers (modules
are in ``python_modules.py``, exceptions in ``exceptions.py``, objects held
but not modelled in ``opaque.py``)."""

from __future__ import annotations

import types
from typing import List, Optional

import torch

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, GenericAttrSource, ItemSource, ObjectSource, TypeSource
from .base import Value, check_release, has_finalizer
from .constants import NONE, ConstantValue, const, is_none
from .exceptions import ExceptionValue  # noqa: F401 - re-exported
from .grad_mode import GradModeValue, WithExitValue  # noqa: F401 - re-exported
from .class_attrs import check_instance_write, check_not_dirty
from .object_protocol import BOUND_SLOTS


def _runs_program_code(attr) -> bool:
    """Whether reading ``attr`` from a class dict calls a Python ``__get__``."""
    get = special_lookup(type(attr), "__get__")
    return isinstance(get, types.FunctionType)


def _check_plain_class_lookup(cls, name: str) -> None:
    """Raise Unsupported when ``getattr(cls, name)`` would run program code
    at trace time: a descriptor of the metaclass (a property or
    ``cached_property`` there), a metaclass ``__getattribute__``/``__getattr__``,
    or a class attribute whose type has a Python ``__get__``."""
    meta = type(cls)
    if meta is not type:
        found = special_lookup(meta, name) is not _MISSING or (
            isinstance(cls, type) and special_lookup(cls, name) is not _MISSING)
        if special_lookup(meta, "__getattribute__") is not type.__dict__["__getattribute__"] or \
                (special_lookup(meta, "__getattr__") is not _MISSING and not found):
            # (a metaclass __getattr__ runs only when the ordinary lookup fails)
            raise Unsupported(f"attribute {name} of a class whose metaclass customizes attribute access",
                              kind="unsupported_attribute")
        attr = special_lookup(meta, name)
        if attr is not _MISSING and _runs_program_code(attr):
            raise Unsupported(f"attribute {name} of a class, a descriptor of its metaclass {meta.__qualname__}",
                              kind="unsupported_attribute")
    if not isinstance(cls, type):
        return
    attr = special_lookup(cls, name)
    if attr is not _MISSING and _runs_program_code(attr):
        raise Unsupported(f"class attribute {name} of {cls.__qualname__}, a descriptor with a Python __get__",
                          kind="unsupported_attribute")


def _enum_news():
    import enum
    new = enum.Enum.__dict__["__new__"]
    # EnumType sets each enum class's __new__ to Enum.__new__'s function after creation
    return (new, getattr(new, "__func__", new))


_ENUM_NEWS = _enum_news()


def _pybind_getattribute(slot) -> bool:
    """``slot`` is pybind11's C ``__getattribute__`` of the classes it makes
    (torch.distributed's ``ReduceOp``): it reads the class's attributes (its
    static properties and enum members) without running Python code."""
    return isinstance(slot, types.WrapperDescriptorType) and \
        getattr(getattr(slot, "__objclass__", None), "__name__", "") == "pybind11_type"


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
        from . import class_attrs
        if class_attrs.dirty_in_mro(self.cls, name):
            self._check_lookup_runs_no_code(tx, name, on_class=False)
            return class_attrs.class_get(tx, self, name)
        if name == "__dict__" and class_attrs.any_dirty(self.cls):
            raise Unsupported(f"{self.cls.__qualname__}.__dict__ read after the trace assigned class attributes",
                              kind="class_attr_written")
        self._check_lookup_runs_no_code(tx, name)
        try:
            attr = getattr(self.cls, name)
        except AttributeError as e:
            tx.raise_python_exception(e)
        # A class met without a source (``type(x)``, ``self.__class__`` of an
        # object made in the trace) is still the one real class: what its
        # attribute holds is guarded and its mutations replayed through it
        base = self.source if self.source is not None else ObjectSource(self.cls, self.cls.__qualname__)
        return tx.wrap(attr, AttrSource(base, name))

    def _check_lookup_runs_no_code(self, tx, name, on_class: bool = True) -> None:
        """``type.__getattribute__(cls, name)`` may call a descriptor's
        ``__get__`` or the metaclass's ``__getattr__``: when that is the
        program's code, reading it now would run it at trace time (and again
        in every guard check), so it is traced or refused instead."""
        cls, meta = self.cls, type(self.cls)
        for klass in (*type.__dict__["__mro__"].__get__(cls), *meta.__mro__):
            if not klass.__flags__ & _IMMUTABLE_TYPE and any(type(k) is not str for k in klass.__dict__):
                # looking a name up in it may call that key's __eq__
                raise Unsupported(f"a class whose __dict__ has a key that is not a string ({klass.__name__})",
                                  kind="unsupported_attribute")
        getattribute = special_lookup(meta, "__getattribute__")
        if getattribute is not type.__dict__["__getattribute__"] and not _pybind_getattribute(getattribute):
            raise Unsupported(f"a class whose metaclass {meta.__name__} defines __getattribute__",
                              kind="unsupported_attribute")
        meta_attr = special_lookup(meta, name)
        if meta_attr is not _MISSING and _runs_code_on_get(meta_attr):
            raise Unsupported(f"{meta.__name__}.{name}, a descriptor written in Python", kind="unsupported_attribute")
        if not on_class:
            return  # (the class's own dicts are read by the caller, see class_attrs.class_get)
        try:
            class_attr = special_lookup(cls, name)
        except (AttributeError, TypeError):
            return  # not a class with an MRO (rare metaclass tricks): getattr decides
        if class_attr is not _MISSING:
            if _runs_code_on_get(class_attr):
                raise Unsupported(f"{cls.__name__}.{name}, a descriptor whose __get__ is written in Python",
                                  kind="unsupported_attribute")
            return
        if meta_attr is _MISSING and special_lookup(meta, "__getattr__") is not _MISSING:
            raise Unsupported(f"{cls.__name__}.{name} through {meta.__name__}.__getattr__",
                              kind="unsupported_attribute")

    def set_attr(self, tx, name, value):
        from .class_attrs import set_class_attr
        if not isinstance(self.cls, type):
            return super().set_attr(tx, name, value)
        set_class_attr(tx, self.cls, name, value)

    def del_attr(self, tx, name):
        from .class_attrs import del_class_attr
        if not isinstance(self.cls, type):
            return super().del_attr(tx, name)
        del_class_attr(tx, self.cls, name)

    def call(self, tx, args, kwargs):
        member = self._enum_lookup(tx, args, kwargs)
        if member is not None:
            return member
        from .builtins_table import call_type
        return call_type(tx, self.cls, args, kwargs)

    def _enum_lookup(self, tx, args, kwargs) -> Optional[Value]:
        """``EnumClass(value)`` for a literal value that names a member:
        ``EnumType.__call__`` -> ``Enum.__new__`` -> ``cls._value2member_map_[value]``
        (read with the tracer's guarded reads).  Anything else (a value
        that is no member's, which goes on to ``_missing_``, functional API
        calls, overridden ``__call__``/``__new__``) is left to ``call_type``."""
        import enum
        cls, meta = self.cls, type(self.cls)
        if not isinstance(cls, enum.EnumMeta) or len(args) != 1 or kwargs or not args[0].is_constant() \
                or special_lookup(meta, "__call__") is not enum.EnumMeta.__dict__["__call__"] \
                or special_lookup(cls, "__new__") not in _ENUM_NEWS \
                or not cls.__dict__.get("_member_names_"):
            return None
        value = args[0].as_constant()
        if type(value) not in (int, str, bool, float, bytes, type(None)) or type(value) is float and value != value:
            return None
        table = self.get_attr(tx, "_value2member_map_")
        from .containers import DictValue, key_of
        if type(table) is not DictValue:
            return None
        found = table.entries.get(key_of(ConstantValue(value)))
        if found is None:
            return None  # not a member's value (or an unhashable one): _missing_ and friends
        return found[1]

    def unpack(self, tx):
        """``iter(EnumClass)``: ``EnumType.__iter__`` is
        ``(cls._member_map_[name] for name in cls._member_names_)``, done here
        with the tracer's own (guarded) reads of those two attributes."""
        import enum
        meta = type(self.cls)
        if isinstance(self.cls, enum.EnumMeta) and \
                special_lookup(meta, "__iter__") is enum.EnumMeta.__dict__["__iter__"]:
            from .operators import getitem
            names = self.get_attr(tx, "_member_names_").unpack(tx)
            members = self.get_attr(tx, "_member_map_")
            return [getitem(tx, members, n) for n in names]
        return super().unpack(tx)

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

    def get_attr(self, tx, name):
        from .object_protocol import with_getattr_fallback
        return with_getattr_fallback(tx, self, type(self.obj), name, lambda: self._getattribute(tx, name))

    def _getattribute(self, tx, name):
        """``type(obj).__getattribute__(obj, name)``."""
        cls = type(self.obj)
        hook = python_getattribute(cls)
        if hook is not None:
            # run the class's own hook in the trace (its ``super().__getattribute__``
            # reads come back to ``generic_get_attr``)
            guard_class_lookup(tx, cls, "__getattribute__", owner_of(cls, "__getattribute__"))
            fn = tx.wrap(hook, AttrSource(TypeSource(self.source), "__getattribute__"))
            return fn.call(tx, [self, const(name)], {})
        return self.generic_get_attr(tx, name)

    def generic_get_attr(self, tx, name):
        """``object.__getattribute__(obj, name)``."""
        pending = tx.side_effects.pending_attr(self, name)
        if pending is not None:
            if pending is DELETED:
                tx.raise_python_exception(AttributeError(
                    f"'{type(self.obj).__name__}' object has no attribute '{name}'", name=name))
            return pending
        held = self._held_dict(tx)
        if held is not None and held in tx.side_effects.mutated and not _has_data_descriptor(type(self.obj), name):
            # the trace holds ``obj.__dict__`` and changed it: that dict value is
            # the instance's state, read by name here as Python reads it
            key = const(name)
            if held.contains(key):
                return held.getitem(tx, key)
            if name in _instance_dict(self.obj):
                raise Unsupported(f"{type(self.obj).__name__}.{name} removed through its __dict__",
                                  kind="unsupported_attribute")
        else:
            self._check_dict_coherent(tx, name, writing=False)
        return lookup_attr(tx, self, self.obj, name, generic=True)

    def _held_dict(self, tx):
        """The dict value the trace holds for ``obj.__dict__``, if any."""
        inst_dict = _instance_dict(self.obj)
        return tx.side_effects.existing(inst_dict) if inst_dict is not None else None

    def _check_dict_coherent(self, tx, name, writing: bool) -> None:
        """The instance dict and the attributes are one state, modelled twice:
        attribute writes are pending in the side-effect table, while
        ``obj.__dict__`` is a dict value of its own.  Neither sees the
        other's changes, so mixing them in one trace is not modelled."""
        se = tx.side_effects
        if name == "__dict__":
            if se.attr_writes.get(self):
                raise Unsupported(f"reading {type(self.obj).__name__}.__dict__ after attribute writes",
                                  kind="unsupported_attribute")
            return
        inst_dict = _instance_dict(self.obj)
        if inst_dict is not None and se.dict_view_conflict(inst_dict, writing):
            raise Unsupported(f"attribute of a {type(self.obj).__name__} object whose __dict__ the trace holds",
                              kind="unsupported_attribute")

    def set_attr(self, tx, name, value):
        from .object_protocol import call_attr_hook
        if call_attr_hook(tx, self, type(self.obj), "__setattr__", [const(name), value]):
            return  # the class's own __setattr__ ran (its object.__setattr__ came back below)
        self.generic_set_attr(tx, name, value)

    def generic_set_attr(self, tx, name, value):
        """``object.__setattr__(obj, name, value)``: buffered, and replayed as
        that same call when the class has a hook of its own (a ``STORE_ATTR``
        would run the hook again)."""
        cls = type(self.obj)
        check_instance_write(tx, cls, name)
        if _has_data_descriptor(cls, name, written_ok=True):
            raise Unsupported(f"setting {cls.__name__}.{name} (a data descriptor)", kind="unsupported_setattr")
        if _instance_dict(self.obj) is None:
            raise Unsupported(f"setting {cls.__name__}.{name} (an object without __dict__)",
                              kind="unsupported_setattr")
        held = self._held_dict(tx)
        if held is not None and name != "__dict__" and not tx.side_effects.attr_writes.get(self):
            # the trace holds ``obj.__dict__``: the write is an item of that dict
            # (what object.__setattr__ does with no data descriptor), so reads
            # through either view see it
            from .operators import setitem
            setitem(tx, held, const(name), value)
            return
        self._check_dict_coherent(tx, name, writing=True)
        self._release_attr(tx, name)
        tx.side_effects.store_attr(self, name, value, generic=_has_custom_setattr(cls))

    def _release_attr(self, tx, name) -> None:
        """The value an attribute write or delete drops (see check_release)."""
        pending = tx.side_effects.pending_attr(self, name)
        if pending is not None and pending is not DELETED:
            check_release(pending)
        elif pending is None:
            old = (_instance_dict(self.obj) or {}).get(name)
            if old is not None and has_finalizer(old):
                raise Unsupported(f"replacing {type(self.obj).__name__}.{name}, whose value has a finalizer",
                                  kind="finalizer", hint="the write runs natively, where the finalizer runs on time")

    def del_attr(self, tx, name):
        from .object_protocol import call_attr_hook
        if call_attr_hook(tx, self, type(self.obj), "__delattr__", [const(name)]):
            return
        self.generic_del_attr(tx, name)

    def generic_del_attr(self, tx, name):
        """``object.__delattr__(obj, name)`` (replayed as that call, see generic_set_attr)."""
        cls = type(self.obj)
        check_instance_write(tx, cls, name)
        if _has_data_descriptor(cls, name, written_ok=True) or _instance_dict(self.obj) is None:
            raise Unsupported(f"deleting {cls.__name__}.{name}", kind="unsupported_setattr")
        self._check_dict_coherent(tx, name, writing=True)
        self._release_attr(tx, name)
        se = tx.side_effects
        pending = se.pending_attr(self, name)
        had = name in _instance_dict(self.obj)
        _guard_in_dict(tx, instance_dict_source(self.source, cls), name, had)
        if pending is DELETED or (pending is None and not had):
            # ``del`` removes an instance attribute; a class attribute does not count
            tx.raise_python_exception(AttributeError(name))
        if had:
            se.store_attr(self, name, DELETED, generic=_has_custom_setattr(cls))
        else:
            se.forget_attr(self, name)  # set in this call, deleted again: nothing to replay

    # Python-level dunders of the object's class are inlined.
    def dunder(self, tx, name: str):
        """``type(obj).name`` bound to this object, if it is a Python function."""
        from .functions import BoundMethodValue
        cls = type(self.obj)
        fn = special_lookup(cls, name)  # (not getattr: a descriptor's __get__ would run now)
        guard_class_lookup(tx, cls, name, owner_of(cls, name))
        if not isinstance(fn, types.FunctionType):
            return None
        return BoundMethodValue(tx.wrap(fn, AttrSource(TypeSource(self.source), name)), self)

    def truth(self, tx):
        return dunder_truth(tx, type(self.obj), lambda name: self.dunder(tx, name))

    def get_iter(self, tx):
        from .modules import iterator_from
        cls = type(self.obj)
        method = self.dunder(tx, "__iter__")
        if method is not None:
            return iterator_from(tx, method.call(tx, [], {}))
        declared = special_lookup(cls, "__iter__")
        guard_class_lookup(tx, cls, "__iter__", owner_of(cls, "__iter__"))
        if declared is NO_ATTR and self.dunder(tx, "__getitem__") is not None:
            # the sequence protocol: obj[0], obj[1], ... until IndexError (len() is not asked)
            from .generators import SequenceIteratorValue
            return SequenceIteratorValue(self)
        if declared is None or (declared is NO_ATTR and special_lookup(cls, "__getitem__") is NO_ATTR):
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
        return special_lookup(type(self.obj), "__len__") is not NO_ATTR

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
    check_not_dirty(cls, name)
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin types, whose dicts never change


def guard_class_lookup(tx, cls: type, name: str, owner=None) -> None:
    """Guard that ``name`` looked up on ``cls``'s MRO still resolves to
    ``owner`` (the class whose dict had it at trace time; None: to nothing).

    The MRO is the same tuple (assigning ``__bases__`` makes a new one), and
    no class before ``owner`` has gained the name since: a lookup the trace
    did once must not be served stale by a later call."""
    guards = tx.guards
    cls_src = ObjectSource(cls, cls.__qualname__)
    guards.add(Guard("ID_MATCH", AttrSource(cls_src, "__mro__"), cls.__mro__))
    for klass in cls.__mro__:
        if klass is owner:
            break
        if klass.__flags__ & _IMMUTABLE_TYPE:
            continue
        src = cls_src if klass is cls else ObjectSource(klass, klass.__qualname__)
        guards.add(Guard("DICT_CONTAINS", AttrSource(src, "__dict__"), (name, False)))


def _runs_code_on_get(attr) -> bool:
    """Whether reading ``attr`` as a class attribute calls the program's code:
    its type's ``__get__`` is not a C slot (functions, classmethods,
    properties and member descriptors have C ones)."""
    get = special_lookup(type(attr), "__get__")
    return get is not _MISSING and not isinstance(get, types.WrapperDescriptorType)


def owner_of(cls: type, name: str):
    """The class of ``cls.__mro__`` whose dict holds ``name``, or None."""
    check_not_dirty(cls, name)
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass
    return None


def python_getattribute(cls: type):
    """The class's ``__getattribute__`` when it is a Python function whose
    reads can be traced (the class's ``__class__`` is object's), else None."""
    fn = special_lookup(cls, "__getattribute__")
    if isinstance(fn, types.FunctionType) and special_lookup(cls, "__class__") is object.__dict__["__class__"]:
        return fn
    return None


def has_attribute_hooks(cls: type) -> bool:
    """Whether ``obj.name`` on an instance of ``cls`` may run the program's
    code besides the generic lookup: a ``__getattribute__`` that is not
    ``object``'s, or a ``__getattr__`` (``nn.Module``'s own only reads the
    module's dicts, so it does not count)."""
    if special_lookup(cls, "__getattribute__") is not object.__dict__["__getattribute__"]:
        return True
    getattr_hook = special_lookup(cls, "__getattr__")
    return getattr_hook is not _MISSING and getattr_hook is not _MODULE_GETATTR


_MODULE_GETATTR = torch.nn.Module.__dict__["__getattr__"]


def attr_source(src, cls: type, name: str):
    """The source of what the generic lookup (``object.__getattribute__``)
    found for ``name`` on an object of ``cls`` read from ``src``.

    ``src.name`` is that read only when the class has no attribute hooks:
    otherwise it would run them, in every guard check and every reload,
    and might not even give the value the trace saw."""
    if has_attribute_hooks(cls):
        return GenericAttrSource(src, name)
    return AttrSource(src, name)


def instance_dict_source(src, cls: type):
    """The source of the object's own instance dict (see attr_source)."""
    return attr_source(src, cls, "__dict__")


def dict_entry_source(src, cls: type, name: str):
    """The source of entry ``name`` of the object's instance dict, read by
    the generic lookup (no data descriptor of the class shadows it)."""
    if has_attribute_hooks(cls):
        return ItemSource(GenericAttrSource(src, "__dict__"), name)
    return AttrSource(src, name)


def intercepts_attribute_reads(cls: type) -> bool:
    """Whether reading any attribute of a ``cls`` instance runs the program's
    code: a ``__getattribute__`` not written in C, or a ``__class__`` of its
    own (which even ``isinstance`` reads).  Such an object is only held by
    the tracer: touching it with getattr, hasattr or isinstance would run
    that code at trace time."""
    getattribute = special_lookup(cls, "__getattribute__")
    if type(getattribute) is not types.WrapperDescriptorType:
        return True
    return special_lookup(cls, "__class__") is not object.__dict__["__class__"]


def length_hint(tx, v: Value) -> None:
    """The ``__len__`` (else ``__length_hint__``) call that ``list(obj)``,
    ``tuple(obj)`` and ``[*obj]`` make on a user object before iterating it:
    its result only sizes the buffer, but the call is the program's code."""
    from ..errors import UserException
    from .modules import NewObjectValue
    if not isinstance(v, (UserObjectValue, NewObjectValue)):
        return
    cls = v.python_type()
    for name in ("__len__", "__length_hint__"):
        if special_lookup(cls, name) is _MISSING:
            guard_class_lookup(tx, cls, name)
            continue
        method = v.dunder(tx, name) if isinstance(v, UserObjectValue) else v._dunder(tx, name)
        if method is None:
            raise Unsupported(f"{cls.__name__}.{name} is not a Python function", kind="unsupported_builtin")
        try:
            result = method.call(tx, [], {})
        except UserException:
            # (a TypeError from __len__ is swallowed, others propagate)
            raise Unsupported(f"{cls.__name__}.{name} raising while sizing a list", kind="unsupported_builtin")
        if not (result.is_constant() and type(result.as_constant()) is int and result.as_constant() >= 0):
            raise Unsupported(f"{cls.__name__}.{name} returning a {result.type_name()}", kind="unsupported_builtin")
        return


def dunder_truth(tx, cls: type, bound) -> bool:
    """``bool(obj)`` for an object of a Python class: ``__bool__`` (which must
    return a bool), else ``__len__`` (checked as by ``len``), else true.
    ``bound(name)`` is the Python method ``type(obj).name`` bound to the
    object, or None when it is not a Python function."""
    for name in ("__bool__", "__len__"):
        attr = special_lookup(cls, name)
        guard_class_lookup(tx, cls, name, owner_of(cls, name))
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


def _instance_dict(obj):
    """``obj.__dict__`` when it is the object's plain instance dict, else None.

    Read through the type's own ``__dict__`` descriptor when that is the C
    one (a ``__dict__`` the class defines would run code at trace time).
    A dict holding keys that are not strings is not modelled: looking a name
    up in it may run their ``__eq__``."""
    desc = special_lookup(type(obj), "__dict__")
    if desc is _MISSING:
        return None
    if type(desc) not in (types.GetSetDescriptorType, types.MemberDescriptorType):
        raise Unsupported(f"{type(obj).__name__}.__dict__ is a {type(desc).__name__}", kind="unsupported_attribute")
    try:
        d = desc.__get__(obj, type(obj))
    except AttributeError:
        return None
    if type(d) is not dict:
        return None
    for k in d:
        if type(k) is not str:
            raise Unsupported(f"a {type(obj).__name__} object whose __dict__ has a key that is not a string",
                              kind="unsupported_attribute")
    return d


def _has_data_descriptor(cls, name, written_ok: bool = False) -> bool:
    """(``written_ok``: the caller checked a name the trace wrote on the class, see check_instance_write)"""
    if not written_ok:
        check_not_dirty(cls, name)
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


def lookup_attr(tx, value: Value, obj, name: str, generic: bool = False) -> Value:
    """Symbolic ``getattr(obj, name)`` for a pre-existing object with a source
    (``generic``: ``object.__getattribute__``, bypassing the class's own)."""
    from .functions import BoundMethodValue
    cls = type(obj)
    src = value.source
    from . import class_attrs
    if class_attrs.dirty_in_mro(cls, name):
        def own():
            d = _instance_dict(obj)
            if d is None:
                return None
            _guard_in_dict(tx, instance_dict_source(src, cls), name, name in d)
            return tx.wrap(d[name], dict_entry_source(src, cls, name)) if name in d else None
        found = class_attrs.instance_get(tx, value, cls, name, own)
        if found is not None:
            return found
    class_attr = None
    for klass in cls.__mro__:
        if name in klass.__dict__:
            class_attr = klass.__dict__[name]
            break
    if class_attr is not None and hasattr(type(class_attr), "__set__") and not hasattr(type(class_attr), "__get__"):
        # a data descriptor without __get__: the instance dict's value, else the
        # descriptor itself, as the object is at the time (not modelled)
        raise Unsupported(f"{cls.__name__}.{name}, a data descriptor without __get__", kind="unsupported_attribute")
    if isinstance(class_attr, property):
        if class_attr.fget is None:
            tx.raise_python_exception(AttributeError(f"property {name!r} has no getter"))
        fget = tx.wrap(class_attr.fget, AttrSource(AttrSource(TypeSource(src), name), "fget"))
        return fget.call(tx, [value], {})
    inst_dict = _instance_dict(obj)
    if inst_dict is not None and name in inst_dict and not (class_attr is not None and hasattr(type(class_attr), "__set__")):
        return tx.wrap(inst_dict[name], dict_entry_source(src, cls, name))
    if inst_dict is not None and class_attr is not None and not hasattr(type(class_attr), "__set__"):
        # read from the class: an instance attribute set later would shadow it
        _guard_not_in_dict(tx, instance_dict_source(src, cls), name)
    if isinstance(class_attr, types.FunctionType):
        fn = tx.wrap(class_attr, AttrSource(TypeSource(src), name))
        return BoundMethodValue(fn, value)
    if name in BOUND_SLOTS and class_attr is object.__dict__[name]:
        # object's own C method (``x.__reduce_ex__``): its model, bound to the value
        from .object_protocol import ObjectSlotValue
        guard_class_lookup(tx, cls, name, object)
        return ObjectSlotValue(name, value)
    if isinstance(class_attr, staticmethod):
        return tx.wrap(class_attr.__func__, AttrSource(TypeSource(src), name))
    if isinstance(class_attr, classmethod) and isinstance(class_attr.__func__, types.FunctionType):
        fn = tx.wrap(class_attr.__func__, AttrSource(AttrSource(TypeSource(src), name), "__func__"))
        return BoundMethodValue(fn, tx.wrap(cls, TypeSource(src)))
    if class_attr is not None and not hasattr(type(class_attr), "__get__"):
        return tx.wrap(class_attr, attr_source(src, cls, name))
    descriptor_get = getattr(type(class_attr), "__get__", None) if class_attr is not None else None
    if isinstance(descriptor_get, types.FunctionType):
        # a descriptor written in Python: run its __get__ in the trace, so it
        # sees the object as the program has changed it so far
        class_src = TypeSource(src)
        desc_src = ItemSource(AttrSource(class_src, "__dict__"), name)
        desc = tx.wrap(class_attr, desc_src)
        get = tx.wrap(descriptor_get, AttrSource(TypeSource(desc_src), "__get__"))
        return get.call(tx, [desc, value, tx.wrap(cls, class_src)], {})
    if descriptor_get is not None and not isinstance(descriptor_get, types.WrapperDescriptorType):
        # a __get__ that is some other callable (a Mock, a partial, a callable
        # object): reading the attribute now would run the program's code at
        # trace time, and again for every guard check
        raise Unsupported(f"reading {cls.__name__}.{name}, a descriptor whose __get__ is a "
                          f"{type(descriptor_get).__name__}", kind="unsupported_attribute")
    if class_attr is None and (inst_dict is None or name not in inst_dict):
        if not generic and special_lookup(cls, "__getattr__") is not _MISSING:
            raise Unsupported(f"{cls.__name__}.__getattr__", kind="unsupported_attribute")
        # absent from the class and its bases (and which __getattr__ the caller
        # falls back to, if any): while that holds
        guard_class_lookup(tx, cls, name)
        guard_class_lookup(tx, cls, "__getattr__", owner_of(cls, "__getattr__"))
    try:
        # (the generic lookup only: getattr() would also run a __getattr__ now)
        attr = object.__getattribute__(obj, name) if generic or has_attribute_hooks(cls) else getattr(obj, name)
    except AttributeError as e:
        # absent now: the entry holds only while it stays absent
        if inst_dict is not None:
            _guard_not_in_dict(tx, instance_dict_source(src, cls), name)
        if class_attr is None:
            _guard_not_in_dict(tx, AttrSource(TypeSource(src), "__dict__"), name)
        else:
            # (an unset slot: its descriptor raised)
            guard_class_lookup(tx, cls, name, owner_of(cls, name))
        tx.raise_python_exception(e)
    except Exception as e:
        # a C getter that ran user code which raised: the read must happen in Python
        raise Unsupported(f"reading {cls.__name__}.{name} raises {type(e).__name__}",
                          kind="unsupported_attribute") from None
    if isinstance(attr, types.MethodType) and attr.__self__ is obj:
        fn = tx.wrap(attr.__func__, AttrSource(attr_source(src, cls, name), "__func__"))
        return BoundMethodValue(fn, value)
    return tx.wrap(attr, attr_source(src, cls, name))


# at the end: python_modules reads DELETED, _MISSING and special_lookup from here
from .python_modules import PythonModuleValue  # noqa: E402,F401 - re-exported
from .opaque import HookHandleValue, OpaqueValue  # noqa: E402,F401 - re-exported

"""``isinstance`` and ``issubclass`` in the trace.

They follow CPython's order: the exact-type shortcut, then the class's
``__instancecheck__``/``__subclasscheck__`` (traced when it is the program's
code, answered at trace time only for the ABC machinery when no hook of the
program can run, and then guarded by ``abc.get_cache_token()``), then the
type's MRO.  A proxy's ``__class__`` or a ``__bases__`` the program computes
is read in the trace, so its exceptions are the program's.
"""

from __future__ import annotations

import types

from ..errors import Unsupported, UserException
from .base import Value
from .constants import ConstantValue, const
from .containers import TupleValue

def _isinstance(tx, args, kwargs):
    _exactly_two(tx, "isinstance", args, kwargs)
    return const(_instance_check(tx, args[0], args[1]))


def _classes(tx, v: Value):
    """A class or a (nested) tuple of classes, as ``isinstance``/``issubclass`` take it."""
    return v.as_constant() if v.is_constant() else tuple(_classes(tx, c) for c in v.unpack(tx))


def _issubclass(tx, args, kwargs):
    _exactly_two(tx, "issubclass", args, kwargs)
    return const(_subclass_check(tx, args[0], args[1]))


def _exactly_two(tx, name, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError(f"{name}() takes no keyword arguments"))
    if len(args) != 2:
        tx.raise_python_exception(TypeError(f"{name} expected 2 arguments, got {len(args)}"))


def _class_items(tx, v: Value):
    """The items of a tuple of classes (values), or None if ``v`` is not a tuple."""
    if isinstance(v, TupleValue):
        return list(v.items)
    if v.is_constant() and isinstance(v.as_constant(), tuple):
        return [tx.wrap(c, None) if isinstance(c, type) else const(c) for c in v.as_constant()]
    return None


#: modules whose __instancecheck__/__subclasscheck__ are answered at trace time (ABCs, typing,
#: and torch below): their answers depend only on the classes involved
_TRACE_TIME_CHECKERS = ("abc", "_py_abc", "typing", "collections.abc")


_STATIC = object()


def _checker(tx, cls_value: Value, cls, name: str):
    """``type(cls).name`` when it is a Python function to inline; ``_STATIC``
    for the ABC and typing checkers (answered by the real ``issubclass`` of
    the object's type); None for the built-in rule."""
    meta = type(cls)
    if meta is type:
        return None
    from .objects import NO_ATTR, special_lookup
    fn = special_lookup(meta, name)
    if fn is NO_ATTR or fn is type.__dict__[name]:
        return None
    if not isinstance(fn, types.FunctionType):
        raise Unsupported(f"{name} of {meta.__qualname__}", kind="unsupported_builtin")
    module = fn.__module__ or ""
    if module in _TRACE_TIME_CHECKERS or module.partition(".")[0] == "torch":
        # (torch's _ParameterMeta answers by the tensor's class, as the type says)
        return _STATIC
    from ..sources import AttrSource, ObjectSource
    from .functions import BoundMethodValue
    owner = next(k for k in meta.__mro__ if name in k.__dict__)
    return BoundMethodValue(tx.wrap(fn, AttrSource(ObjectSource(owner, owner.__qualname__), name)), cls_value)


#: modules whose ``__subclasshook__``s only read the classes' MROs and dicts
_PURE_HOOK_MODULES = _TRACE_TIME_CHECKERS + ("_collections_abc", "os", "contextlib", "builtins")


def _check_abc_is_pure(tx, derived, cls) -> None:
    """Raise Unsupported unless the real ``issubclass(derived, cls)`` of an
    ABC runs no program code: ``ABCMeta.__subclasscheck__`` calls the
    ``__subclasshook__`` and ``__subclasses__()`` of ``cls`` and of every
    class under it (its subclasses and registered classes, recursively); a
    program's hook runs at trace time otherwise (reading a cell the trace has
    not written yet, raising, or answering differently from run to run)."""
    if not isinstance(derived, type):
        raise Unsupported("issubclass() of a non-class against an ABC", kind="unsupported_builtin")
    import abc as _abc
    from ..guards import state_guard
    # the answer holds until the next ABC registration anywhere
    tx.guards.add(state_guard("ABC_CACHE_TOKEN"))
    seen, work = set(), [cls]
    while work:
        k = work.pop()
        if id(k) in seen:
            continue
        seen.add(id(k))
        if not isinstance(k, type):
            raise Unsupported("an ABC check reaching a non-class", kind="unsupported_builtin")
        meta = type(k)
        for owner in meta.__mro__:
            if owner.__module__ not in _PURE_HOOK_MODULES and (
                    "__subclasscheck__" in owner.__dict__ or "__subclasses__" in owner.__dict__):
                raise Unsupported(f"issubclass() against {k.__qualname__}, whose metaclass checks in "
                                  "program code", kind="unsupported_builtin")
        for owner in k.__mro__:
            if "__subclasses__" in owner.__dict__ or (
                    "__subclasshook__" in owner.__dict__ and owner.__module__ not in _PURE_HOOK_MODULES):
                raise Unsupported(f"issubclass() against {k.__qualname__}, which has its own "
                                  "__subclasshook__ or __subclasses__", kind="unsupported_builtin")
        if isinstance(k, _abc.ABCMeta):
            work.extend(type.__subclasses__(k))
            try:
                registry = _abc._get_dump(k)[0]
            except (TypeError, AttributeError):
                raise Unsupported("an ABC without the C implementation's state", kind="unsupported_builtin")
            work.extend(r() for r in registry if r() is not None)


def _instance_check(tx, obj: Value, cls_value: Value) -> bool:
    """``isinstance(obj, cls)`` as ``PyObject_IsInstance``: the exact type, a
    tuple (or union) item by item, the metaclass's ``__instancecheck__``, then
    the type (or ``obj.__class__``) against ``cls``."""
    items = _class_items(tx, cls_value)
    if items is not None:
        return any(_instance_check(tx, obj, c) for c in items)
    cls = _class_object(cls_value, "isinstance")
    t = type(obj.value) if isinstance(obj, ConstantValue) else obj.python_type()
    if t is cls:
        return True
    if type(cls) is types.UnionType:  # (not isinstance: it reads cls.__class__, which may run code)
        return any(_instance_check(tx, obj, tx.wrap(c, None)) for c in cls.__args__)
    checker = _checker(tx, cls_value, cls, "__instancecheck__")
    if checker is _STATIC:
        if isinstance(cls, type):
            _check_abc_is_pure(tx, t, cls)
        if isinstance(obj, ConstantValue):
            return _constant_isinstance(tx, obj.value, cls)
        if _checker_reads(tx, obj, t, cls):
            # (ABCMeta's check got type(obj) from obj.__class__: it asks about that class only)
            return _type_check(tx, t, cls, obj, class_read=True)
        return _type_check(tx, t, cls)
    if checker is not None:
        return checker.call(tx, [obj], {}).truth(tx)
    if not issubclass(type(cls), type):
        if not _has_bases(tx, cls_value):
            tx.raise_python_exception(TypeError("isinstance() arg 2 must be a type, a tuple of types, or a union"))
        raise Unsupported(f"isinstance() against a {type(cls).__name__}", kind="unsupported_builtin")
    if isinstance(obj, ConstantValue):
        return _constant_isinstance(tx, obj.value, cls)
    return _type_check(tx, t, cls, obj)


def _checker_reads(tx, obj: Value, t: type, cls) -> bool:
    """The attribute reads of a trace-time checker, when the object's class
    hooks them: ``ABCMeta.__instancecheck__`` reads ``obj.__class__`` first
    (run in the trace, which must find ``type(obj)``); typing's protocol
    checks also ask ``hasattr`` for each member, which a hook answers --
    not modelled."""
    from .objects import has_attribute_hooks, special_lookup
    reads_class = special_lookup(t, "__getattribute__") not in _GENERIC_GETATTRIBUTE or \
        special_lookup(t, "__class__") is not object.__dict__["__class__"]
    if not reads_class and not has_attribute_hooks(t):
        return False
    module = getattr(special_lookup(type(cls), "__instancecheck__"), "__module__", None)
    if module not in ("abc", "_py_abc"):
        raise Unsupported(f"isinstance() of a {t.__name__}, whose class hooks attribute reads, against "
                          f"{getattr(cls, '__qualname__', cls)}", kind="unsupported_builtin")
    if reads_class:
        icls = _traced_class_attr(tx, obj, t)
        if not (icls.is_constant() and icls.as_constant() is t):
            raise Unsupported(f"isinstance() of a {t.__name__} whose __class__ is not its type against an ABC",
                              kind="unsupported_builtin")
    return reads_class


def _traced_class_attr(tx, obj: Value, t: type) -> Value:
    """``obj.__class__`` run in the trace, when the class's own
    ``__getattribute__`` is a Python function the tracer runs."""
    from .modules import NewObjectValue
    from .objects import UserObjectValue, python_getattribute
    if type(obj) not in (UserObjectValue, NewObjectValue) or python_getattribute(t) is None:
        raise Unsupported(f"isinstance() of a {t.__name__} that overrides __class__", kind="unsupported_builtin")
    return obj.get_attr(tx, "__class__")


def _constant_isinstance(tx, value, cls) -> bool:
    """``isinstance`` of a constant, whose check may raise (a ``typing.Union``
    over a ``TypeVar``): that error is the program's."""
    try:
        return isinstance(value, cls)
    except Exception as e:  # noqa: BLE001 - re-raised in the program
        tx.raise_python_exception(e)


#: ``__getattribute__`` slots whose ``obj.__class__`` is ``type(obj)``: the
#: builtin types' own (each static type that sets the slot has a wrapper in
#: its dict: object's, int's, str's...; type's finds the metaclass's data
#: descriptors first; super's answers its own class for ``__class__``) and
#: module's.  (A weakref proxy's, which answers the referent's class, is not
#: a builtin name.)
_GENERIC_GETATTRIBUTE = frozenset(
    t.__dict__["__getattribute__"] for t in [*vars(__import__("builtins")).values(), types.ModuleType]
    if isinstance(t, type) and "__getattribute__" in t.__dict__) | {
    # ``int | None``: C code that forwards only ``__module__`` to the type
    types.UnionType.__dict__["__getattribute__"],
    # generators: PyObject_GenericGetAttr set on the type itself up to 3.12
    # (``Counter(gen)`` asks ``isinstance(gen, Mapping)``)
    types.GeneratorType.__dict__.get("__getattribute__", object.__getattribute__)}


def _has_bases(tx, v: Value) -> bool:
    """Whether ``v.__bases__`` is a tuple, as ``abstract_get_bases`` asks: the
    attribute is read in the trace (a user's property may raise, and its
    exception is the call's; a class intercepting reads is traced or breaks);
    only an AttributeError means "no bases"."""
    try:
        bases = v.get_attr(tx, "__bases__")
    except UserException as e:
        if issubclass(e.value.python_type(), AttributeError):
            return False
        raise
    return issubclass(bases.python_type(), tuple)


def _type_check(tx, t: type, cls, obj: Value = None, class_read: bool = False) -> bool:
    """``isinstance`` by the object's type ``t``.  When that says no, Python
    also reads ``obj.__class__`` (given ``obj``, that read runs in the trace,
    and a class other than ``t`` is checked by its MRO; an AttributeError
    means no) -- unless the checker read it already (``class_read``)."""
    try:
        if issubclass(t, cls):
            return True
    except TypeError as e:
        tx.raise_python_exception(e)
    if class_read:
        return False
    from .objects import special_lookup
    if special_lookup(t, "__class__") is not object.__dict__["__class__"] or \
            special_lookup(t, "__getattribute__") not in _GENERIC_GETATTRIBUTE:
        # (looked up in the class dicts: ``int.__getattribute__`` is a fresh
        # wrapper object on every access, never ``object``'s by identity)
        if obj is None or not isinstance(cls, type):
            raise Unsupported(f"isinstance() of a {t.__name__} that overrides __class__",
                              kind="unsupported_builtin")
        try:
            icls = _traced_class_attr(tx, obj, t)
        except UserException as e:
            if issubclass(e.value.python_type(), AttributeError):
                return False
            raise
        if not icls.is_constant():
            if issubclass(icls.python_type(), type):
                raise Unsupported("isinstance() of an object whose __class__ is not known",
                                  kind="unsupported_builtin")
            return False  # not a class: ignored
        k = icls.as_constant()
        if k is t or not isinstance(k, type):
            return False
        return cls in type.__dict__["__mro__"].__get__(k)  # (the MRO only, no __subclasscheck__)
    return False


def _class_object(v: Value, fn: str):
    """The real class (or other object) a class argument stands for."""
    if v.is_constant():
        return v.as_constant()
    real = v.real_object()
    if real is None:
        raise Unsupported(f"{fn}() against a {v.type_name()}", kind="unsupported_builtin")
    return real[0]


def _subclass_check(tx, derived: Value, cls_value: Value) -> bool:
    """``issubclass(derived, cls)`` as ``PyObject_IsSubclass``."""
    d = _class_object(derived, "issubclass")
    items = _class_items(tx, cls_value)
    if items is not None:
        return any(_subclass_check(tx, derived, c) for c in items)
    cls = _class_object(cls_value, "issubclass")
    if type(cls) is types.UnionType:
        return any(_subclass_check(tx, derived, tx.wrap(c, None)) for c in cls.__args__)
    checker = _checker(tx, cls_value, cls, "__subclasscheck__")
    if checker is _STATIC:
        if isinstance(cls, type):
            _check_abc_is_pure(tx, d, cls)
        try:
            return issubclass(d, cls)
        except TypeError as e:
            tx.raise_python_exception(e)
    if checker is not None:
        return checker.call(tx, [derived], {}).truth(tx)
    d_type, cls_type = issubclass(type(d), type), issubclass(type(cls), type)
    if not d_type or not cls_type:
        if not d_type and not _has_bases(tx, derived):
            tx.raise_python_exception(TypeError("issubclass() arg 1 must be a class"))
        if not cls_type and not _has_bases(tx, cls_value):
            tx.raise_python_exception(TypeError(
                "issubclass() arg 2 must be a class, a tuple of classes, or a union"))
        raise Unsupported("issubclass() of objects that are not classes", kind="unsupported_builtin")
    try:
        return issubclass(d, cls)
    except TypeError as e:
        tx.raise_python_exception(e)

"""Writes to the attributes of classes that existed before the trace:
``C.scale = 3``, ``setattr(C, "x", v)``, ``del C.x``, ``type(self).n += 1``.

Like every write to a pre-existing object, the write is buffered in the
side-effect table and replayed after the graph, in program order with the
other effects (as a ``STORE_ATTR``/``DELETE_ATTR`` on the class).  The table
entry is kept on one canonical :class:`ClassValue` per class, whichever value
(``type(x)``, a global, an attribute) the write came through.

Until the replay, the real class dict still holds the old state, and most of
the tracer reads class dicts directly (method lookup, descriptors, special
methods).  So a written ``(class, name)`` is marked *dirty* for the running
trace: the attribute reads that know about pending writes (the class's own
attribute, an instance's attribute through the MRO, ``super()``) consult
:func:`resolve`; every other lookup of a dirty name through
``special_lookup``/``owner_of`` breaks (``class_attr_written``) instead of
reading the stale dict.

What is refused (a clean break, kind ``class_setattr``): dunder names (they
are type slots, and ``__name__``/``__bases__``... are data descriptors of
``type``), classes whose metaclass has its own ``__setattr__``/``__delattr__``
or defines the name (a descriptor there would run), and classes whose dict
has keys that are not strings.  Builtin (immutable) types raise CPython's
``TypeError`` in the trace.
"""

from __future__ import annotations

import threading
import types
from typing import Optional

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource, ObjectSource
from .base import Value, check_release, has_finalizer
from .constants import const

_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE

_local = threading.local()


def _active():
    """The dirty table of the innermost trace running on this thread (or None)."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class tracing_writes:
    """Context manager a trace runs under: its class writes are the active ones."""

    def __init__(self, side_effects):
        self.side_effects = side_effects

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self.side_effects)
        return self

    def __exit__(self, *exc):
        _local.stack.pop()
        return False


def _dirty_classes(cls):
    """``(written names per class id, cls's MRO)`` while the running trace
    wrote class attributes, else None."""
    se = _active()
    if se is None or not se.class_dirty:
        return None
    try:
        return se.class_dirty, type.__dict__["__mro__"].__get__(cls)
    except TypeError:
        return None


def dirty_in_mro(cls, name: str) -> bool:
    """Whether the running trace wrote ``name`` on a class of ``cls``'s MRO."""
    found = _dirty_classes(cls)
    return found is not None and any(name in found[0].get(id(k), ()) for k in found[1])


def any_dirty(cls) -> bool:
    """Whether the running trace wrote any attribute of a class of ``cls``'s MRO."""
    found = _dirty_classes(cls)
    return found is not None and any(id(k) in found[0] for k in found[1])


def check_not_dirty(cls, name: str) -> None:
    """For lookups that read the real class dicts: refuse a name written in the trace."""
    if dirty_in_mro(cls, name):
        raise Unsupported(f"{getattr(cls, '__qualname__', cls)}.{name} looked up after the trace assigned it "
                          "on the class (this lookup reads the class as it was)", kind="class_attr_written")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _check_writable(tx, cls, name: str, what: str) -> None:
    if cls.__flags__ & _IMMUTABLE_TYPE:
        tx.raise_python_exception(TypeError(f"cannot set '{name}' attribute of immutable type '{cls.__name__}'"))
    if _is_dunder(name):
        raise Unsupported(f"{what} {cls.__qualname__}.{name} (a special name)", kind="class_setattr",
                          hint="the assignment runs natively between graphs")
    meta = type(cls)
    from .objects import NO_ATTR, special_lookup
    if special_lookup(meta, "__setattr__") is not type.__dict__["__setattr__"] or \
            special_lookup(meta, "__delattr__") is not type.__dict__["__delattr__"]:
        raise Unsupported(f"{what} {cls.__qualname__}.{name}: its metaclass {meta.__qualname__} has its own "
                          "__setattr__/__delattr__", kind="class_setattr")
    if special_lookup(meta, name) is not NO_ATTR:
        raise Unsupported(f"{what} {cls.__qualname__}.{name}: the metaclass {meta.__qualname__} defines {name}",
                          kind="class_setattr")
    for klass in cls.__mro__:
        if not klass.__flags__ & _IMMUTABLE_TYPE and any(type(k) is not str for k in klass.__dict__):
            raise Unsupported(f"{what} {cls.__qualname__}.{name}: a class dict with a key that is not a string",
                              kind="class_setattr")


def _class_src(cls):
    return ObjectSource(cls, cls.__qualname__)


def _guard_mro(tx, cls) -> None:
    tx.guards.add(Guard("ID_MATCH", AttrSource(_class_src(cls), "__mro__"), cls.__mro__))


def _release_old(tx, cls, name: str) -> None:
    """The value the write or delete drops (see check_release)."""
    pending = tx.side_effects.pending_class_attr(cls, name)
    from .objects import DELETED
    if pending is not None:
        if pending is not DELETED:
            check_release(pending)
        return
    old = cls.__dict__.get(name)
    if old is not None and has_finalizer(old):
        raise Unsupported(f"replacing {cls.__qualname__}.{name}, whose value has a finalizer", kind="finalizer",
                          hint="the write runs natively, where the finalizer runs on time")


def set_class_attr(tx, cls, name: str, value: Value) -> None:
    """``cls.name = value`` (``type.__setattr__``), buffered."""
    _check_writable(tx, cls, name, "setting")
    _release_old(tx, cls, name)
    tx.side_effects.store_class_attr(cls, name, value)


def del_class_attr(tx, cls, name: str) -> None:
    """``del cls.name`` (``type.__delattr__``): only the class's own dict counts."""
    from .objects import DELETED
    _check_writable(tx, cls, name, "deleting")
    se = tx.side_effects
    pending = se.pending_class_attr(cls, name)
    if pending is None:
        had = name in cls.__dict__
        tx.guards.add(Guard("DICT_CONTAINS", AttrSource(_class_src(cls), "__dict__"), (name, had)))
    else:
        had = pending is not DELETED
    if not had:
        tx.raise_python_exception(AttributeError(f"type object '{cls.__name__}' has no attribute '{name}'", name=name))
    _release_old(tx, cls, name)
    if pending is not None and name not in cls.__dict__:
        se.store_class_attr(cls, name, DELETED)
        se.forget_class_attr(cls, name)  # set in this call and deleted again: no net effect
    else:
        se.store_class_attr(cls, name, DELETED)


class Resolved:
    """Where ``name`` is found on an MRO with pending writes: ``klass`` (None:
    nowhere) and either the pending ``value`` or the real ``attr`` of its dict."""

    __slots__ = ("klass", "value", "attr", "passed_deleted")

    def __init__(self, klass, value: Optional[Value], attr, passed_deleted: bool):
        self.klass, self.value, self.attr, self.passed_deleted = klass, value, attr, passed_deleted


def resolve(tx, cls, name: str) -> Resolved:
    """Look ``name`` up on ``cls``'s MRO as it is after the trace's pending
    class writes, guarding what the entry state decided (the MRO, and which
    classes' dicts had the name)."""
    from .objects import DELETED
    se = tx.side_effects
    _guard_mro(tx, cls)
    passed_deleted = False
    for klass in cls.__mro__:
        pending = se.pending_class_attr(klass, name)
        if pending is DELETED:
            passed_deleted = True
            continue
        if pending is not None:
            return Resolved(klass, pending, None, passed_deleted)
        present = name in klass.__dict__
        if not klass.__flags__ & _IMMUTABLE_TYPE:
            tx.guards.add(Guard("DICT_CONTAINS", AttrSource(_class_src(klass), "__dict__"), (name, present)))
        if present:
            return Resolved(klass, None, klass.__dict__[name], passed_deleted)
    return Resolved(None, None, None, passed_deleted)


def _binds_on_get(value: Value) -> Optional[bool]:
    """For a pending class attribute: False when reading it gives the value
    itself, True for a plain function (bound on instances), None when its
    ``__get__`` would run in some other way (refused)."""
    from .functions import NestedFunctionValue, UserFunctionValue
    if isinstance(value, (NestedFunctionValue, UserFunctionValue)):
        return True
    try:
        t = value.python_type()
    except NotImplementedError:
        return None
    from .objects import NO_ATTR, special_lookup
    if special_lookup(t, "__get__") is NO_ATTR:
        return False
    return None


def _plain_real(tx, klass, name, attr) -> Value:
    """A real class-dict entry that reads as itself (no ``__get__``) or a plain function."""
    if isinstance(attr, types.FunctionType) or not hasattr(type(attr), "__get__"):
        return tx.wrap(attr, ItemSource(AttrSource(_class_src(klass), "__dict__"), name))
    raise Unsupported(f"{klass.__qualname__}.{name} (a {type(attr).__name__}) read after the trace changed the "
                      "attribute on the class", kind="class_attr_written")


def class_get(tx, cls_value, name: str) -> Value:
    """``C.name`` where the trace wrote ``name`` on a class of C's MRO."""
    cls = cls_value.cls
    found = resolve(tx, cls, name)
    if found.klass is None:
        from .objects import NO_ATTR, special_lookup
        if type(cls) is type and special_lookup(type, name) is NO_ATTR:
            tx.raise_python_exception(AttributeError(f"type object '{cls.__name__}' has no attribute '{name}'", name=name))
        raise Unsupported(f"{cls.__qualname__}.{name} deleted in the trace, looked up on the metaclass",
                          kind="class_attr_written")
    if found.value is not None:
        if _binds_on_get(found.value) is None:
            raise Unsupported(f"{cls.__qualname__}.{name}: a {found.value.type_name()} assigned in the trace, "
                              "read through its descriptor", kind="class_attr_written")
        return found.value  # a function read from the class is the function itself
    return _plain_real(tx, found.klass, name, found.attr)


def instance_get(tx, receiver: Value, cls, name: str, own):
    """``obj.name`` (the generic lookup) where the trace wrote ``name`` on a
    class of ``type(obj)``'s MRO.  ``own()`` is the instance's own attribute
    value (or None when it has none): a pending class value that is not a
    data descriptor comes after it."""
    from .functions import BoundMethodValue
    found = resolve(tx, cls, name)
    if found.value is None:
        if not found.passed_deleted:
            return None  # the pending write is shadowed: the ordinary lookup is exact
        # deleted from a class in the trace: what comes after it in the MRO (real)
        if found.klass is not None:
            attr = found.attr
            if hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__") or not (
                    isinstance(attr, types.FunctionType) or not hasattr(type(attr), "__get__")):
                raise Unsupported(f"{cls.__qualname__}.{name} (a {type(attr).__name__}) read through an instance "
                                  "after the trace deleted it from a class", kind="class_attr_written")
        mine = own()
        if mine is not None:
            return mine
        if found.klass is None:
            from .objects import guard_class_lookup, owner_of
            guard_class_lookup(tx, cls, "__getattr__", owner_of(cls, "__getattr__"))
            tx.raise_python_exception(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'", name=name))
        value = _plain_real(tx, found.klass, name, found.attr)
        return BoundMethodValue(value, receiver) if isinstance(found.attr, types.FunctionType) else value
    binds = _binds_on_get(found.value)
    if binds is None:
        raise Unsupported(f"{cls.__qualname__}.{name}: a {found.value.type_name()} assigned in the trace, "
                          "read through its descriptor", kind="class_attr_written")
    mine = own()
    if mine is not None:
        return mine
    return BoundMethodValue(found.value, receiver) if binds else found.value


def check_instance_write(tx, cls, name: str) -> None:
    """An instance write or delete where the trace wrote ``name`` on a class
    of the MRO: it goes to the instance dict, as the ordinary path does it,
    while the class attribute that now comes first is no data descriptor and
    no deleted entry is passed on the way (then the real dicts would mislead
    the ordinary path); refused otherwise."""
    if not dirty_in_mro(cls, name):
        return
    from .objects import DELETED
    se = tx.side_effects
    for klass in cls.__mro__:
        pending = se.pending_class_attr(klass, name)
        if pending is DELETED:
            break
        if pending is not None:
            if _binds_on_get(pending) is None or _real_data_descriptor(cls, name):
                break  # (the ordinary path would take the replaced descriptor)
            return
        if name in klass.__dict__:
            return
    else:
        return
    raise Unsupported(f"setting {cls.__qualname__}.{name} on an instance after the trace changed it on the class",
                      kind="class_attr_written")


def _real_data_descriptor(cls, name: str) -> bool:
    """Whether the real dicts (as the ordinary paths read them) show a data descriptor first."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            t = type(klass.__dict__[name])
            return hasattr(t, "__set__") or hasattr(t, "__delete__")
    return False


__all__ = ["set_class_attr", "del_class_attr", "class_get", "instance_get", "check_not_dirty", "dirty_in_mro",
           "any_dirty", "tracing_writes", "const"]

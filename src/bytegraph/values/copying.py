"""``copy.copy`` and ``copy.deepcopy`` modelled on symbolic values.

The model follows ``copy.py`` step by step, so the program's own hooks run
(traced) where Python runs them: ``__deepcopy__`` and ``__reduce_ex__`` are
looked up on the instance (a Python ``__getattribute__`` runs), ``__copy__``
on the class, and ``object.__reduce_ex__(4)`` is modelled as CPython's
``reduce_newobj``: ``(copyreg.__newobj__, (cls,), state)`` with the state
from ``__getstate__`` (the program's own, traced, or ``object``'s: the
instance dict, plus a dict of slot values).  ``_reconstruct`` then makes the
copy with ``cls.__new__(cls)`` -- a NewObjectValue, rebuilt by codegen like
any object made in the trace -- and fills it with ``__setstate__`` (traced)
or ``__dict__.update`` and ``setattr`` for slots.

The deep-copy memo is keyed by the real object for pre-existing values and
by the value otherwise (one object is one value), so shared sub-objects stay
shared and cycles end.  What is not modelled is refused: a program's own
``__deepcopy__`` (it takes the memo dict, keyed by ``id``), ``copyreg``
registrations, ``__getnewargs__``/custom ``__new__``, reducers returning
iterators, tensors, and objects whose copy is a new object bytegraph holds
only as a constant (``torch.device``, ``slice``, ``frozenset``...).
"""

from __future__ import annotations

import copy
import copyreg
import enum
import types

import torch

from ..errors import Unsupported, UserException
from ..guards import Guard
from ..sources import ObjectSource
from .base import UnrealizedLocal, Value
from .constants import NONE, const, is_none

#: types whose copies are the object itself (copy.py's atomic entries)
_DEEP_ATOMIC = frozenset(t for t, f in copy._deepcopy_dispatch.items() if f is copy._deepcopy_atomic)
_SHALLOW_ATOMIC = frozenset(t for t, f in copy._copy_dispatch.items() if f is copy._copy_immutable)
#: torch constants whose ``__reduce__`` returns a name: deepcopy and copy return them as they are
_NAMED_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)

_PY_HEAPTYPE = 1 << 9


def _unsupported(what):
    return Unsupported(what, kind="unsupported_call")


def _guard_tables(tx, cls: type) -> None:
    """The tables copy.py consults (``copy._deepcopy_dispatch``,
    ``copy._copy_dispatch``, ``copyreg.dispatch_table``) had no entry for
    ``cls`` at trace time: one registered later must retrace."""
    if not isinstance(cls, type) or type(cls).__hash__ is not type.__hash__ or \
            type(cls).__eq__ is not type.__eq__:
        raise _unsupported("copying an object whose class compares in its own way")
    for table, name in ((copy._deepcopy_dispatch, "copy._deepcopy_dispatch"),
                        (copy._copy_dispatch, "copy._copy_dispatch"),
                        (copyreg.dispatch_table, "copyreg.dispatch_table")):
        tx.guards.add(Guard("DICT_CONTAINS", ObjectSource(table, name), (cls, cls in table)))


def _try_attr(tx, obj: Value, name: str):
    """``getattr(obj, name, None)`` (the program's ``__getattribute__`` runs)."""
    try:
        return obj.get_attr(tx, name)
    except UserException as e:
        if issubclass(e.value.python_type(), AttributeError):
            return None
        raise


def _python_type(v: Value):
    try:
        return v.python_type()
    except NotImplementedError:
        raise _unsupported(f"copying a {type(v).__name__}") from None


def _is_slot(v: Value, name: str) -> bool:
    from .object_protocol import ObjectSlotValue
    return isinstance(v, ObjectSlotValue) and v.name == name


class Copier:
    """One ``copy.copy`` (``memo`` None) or ``copy.deepcopy`` call."""

    def __init__(self, tx, deep: bool):
        self.tx = tx
        self.memo = {} if deep else None

    @staticmethod
    def _key(v: Value):
        from .object_protocol import InstanceDictValue
        if isinstance(v, InstanceDictValue):
            return ("dict of", id(v.obj))  # (each read of ``obj.__dict__`` makes a view: one dict)
        real = v.real_object()
        return ("obj", id(real[0])) if real is not None else ("value", id(v))

    # -- shared by both --------------------------------------------------------
    def _constant_copy(self, v: Value, cls: type, atomic) -> Value:
        """A constant (immutable) value: returned as is where copy.py does."""
        if cls in atomic or issubclass(cls, type) or isinstance(v.as_constant(), _NAMED_CONSTANTS):
            return v
        if issubclass(cls, enum.Enum) and type(v.as_constant()).__deepcopy__ is enum.Enum.__deepcopy__ and \
                type(v.as_constant()).__copy__ is enum.Enum.__copy__:
            return v
        if cls is tuple:
            items = [self.copy(c) for c in _constant_items(v)]
            if all(i.is_constant() and i.as_constant() is o for i, o in zip(items, v.as_constant())):
                return v
        raise _unsupported(f"copying a {cls.__qualname__} (its copy is a new object)")

    def copy(self, v: Value) -> Value:
        """``copy.deepcopy(v, memo)`` or ``copy.copy(v)``."""
        from .containers import DictValue, ListValue, TupleValue
        from .object_protocol import InstanceDictValue, is_user_instance
        from .sets import SetValue
        from .tensors import TensorValue
        tx = self.tx
        if isinstance(v, UnrealizedLocal):
            v = v.realize()
        deep = self.memo is not None
        key = self._key(v)
        if deep and key in self.memo:
            return self.memo[key]
        cls = _python_type(v)
        if isinstance(v, TensorValue):
            raise _unsupported("copying a tensor")
        if v.is_constant():
            return self._constant_copy(v, cls, _DEEP_ATOMIC if deep else _SHALLOW_ATOMIC)
        if cls in (int, float, bool, str) and not isinstance(v, (ListValue, DictValue)):
            return v  # a symbolic int/float/bool: an immutable number in eager
        if issubclass(cls, type):
            return v
        if type(v) is ListValue and cls is list:
            out = ListValue([])
            if not deep:
                out.items = list(v.items)
                return out
            self.memo[key] = out
            out.items = [self.copy(i) for i in v.items]
            return out
        if type(v) is TupleValue and cls is tuple:
            if not deep:
                return v
            items = [self.copy(i) for i in v.items]
            if key in self.memo:
                return self.memo[key]  # the tuple was reached again through its items
            out = v if all(a is b for a, b in zip(items, v.items)) else TupleValue(items)
            if out is not v:
                self.memo[key] = out
            return out
        if type(v) is DictValue:
            return self._copy_dict(v, key)
        if isinstance(v, InstanceDictValue):
            return self._copy_dict(v.as_dict_value(), key)
        if type(v) is SetValue and cls is set:
            out = v.call_method(tx, "copy", [], {})
            if deep:
                for item in out.elements.values():
                    if self.copy(item) is not item:
                        raise _unsupported("copy.deepcopy of a set whose items copy to new objects")
                self.memo[key] = out
            return out
        if is_user_instance(v):
            return self._copy_instance(v, cls, key)
        raise _unsupported(f"copy.{'deepcopy' if deep else 'copy'} of a {v.type_name()}")

    def _copy_dict(self, v, key):
        from .containers import DictValue
        from .dict_methods import copy_of
        if self.memo is None:
            # (an OrderedDict with instance attributes is never a DictValue: its copy would have them)
            return copy_of(v)
        # a defaultdict's factory is deep-copied too (through its __reduce__)
        factory = v.default_factory
        if factory is not None and not is_none(factory) and self.copy(factory) is not factory:
            raise _unsupported("copy.deepcopy of a defaultdict whose default_factory copies to a new object")
        out = self.memo[key] = DictValue(cls=v.cls, default_factory=factory)
        for k, item in list(v.entries.values()):
            # keys are deep-copied too: only keys deepcopy returns as they are are modelled
            if self.copy(k) is not k:
                raise _unsupported(f"copy.deepcopy of a dict with a {k.type_name()} key")
            out.put(k, self.copy(item))
        return out

    # -- objects of Python classes -------------------------------------------------
    def _copy_instance(self, x: Value, cls: type, key):
        from .objects import ClassValue
        tx = self.tx
        deep = self.memo is not None
        if deep:
            copier = _try_attr(tx, x, "__deepcopy__")
            if copier is not None and not is_none(copier):
                raise _unsupported(f"copy.deepcopy of a {cls.__qualname__}, which has its own __deepcopy__ "
                                   "(it takes the id-keyed memo)")
        else:
            copier = _try_attr(tx, ClassValue(cls), "__copy__")  # (on the class, as copy.copy does)
            if copier is not None and not is_none(copier):
                return copier.call(tx, [x], {})
        _guard_tables(tx, cls)
        if cls in copyreg.dispatch_table or cls in copy._deepcopy_dispatch or cls in copy._copy_dispatch:
            raise _unsupported(f"copying a {cls.__qualname__} registered with copyreg or copy's tables")
        reductor = _try_attr(tx, x, "__reduce_ex__")
        if reductor is None or is_none(reductor):
            raise _unsupported(f"copying a {cls.__qualname__} without __reduce_ex__")
        if _is_slot(reductor, "__reduce_ex__") and reductor.receiver is x:
            rv = object_reduce_ex(tx, x, const(4))
        else:
            rv = reductor.call(tx, [const(4)], {})
        if rv.is_constant() and isinstance(rv.as_constant(), str):
            return x
        return self._reconstruct(x, key, rv)

    def _reconstruct(self, x, key, rv):
        """``copy._reconstruct(x, memo, *rv)``."""
        from .containers import TupleValue
        from .modules import NewObjectValue, check_constructible
        tx = self.tx
        deep = self.memo is not None
        if not isinstance(rv, TupleValue) or not 2 <= len(rv.items) <= 6:
            raise _unsupported(f"copying with a __reduce_ex__ result of type {rv.type_name()}")
        func, args, *rest = rv.items
        state, listiter, dictiter = (rest + [NONE, NONE, NONE])[:3]
        if not (is_none(listiter) and is_none(dictiter)):
            raise _unsupported("copying with a reducer that returns item iterators")
        if not isinstance(args, TupleValue):
            raise _unsupported("copying with reducer arguments that are not a tuple")
        if deep:
            args = TupleValue([self.copy(a) for a in args.items])
        if func.is_constant() and func.as_constant() is copyreg.__newobj__:
            if len(args.items) != 1 or not args.items[0].is_constant() or \
                    not isinstance(args.items[0].as_constant(), type):
                raise _unsupported("copying with copyreg.__newobj__ and constructor arguments")
            new_cls = args.items[0].as_constant()
            _check_plain_new(new_cls)
            check_constructible(new_cls)
            y = NewObjectValue(new_cls)
        else:
            y = func.call(tx, list(args.items), {})
        if deep:
            self.memo[key] = y
        if not is_none(state):
            if deep:
                state = self.copy(state)
            setstate = _try_attr(tx, y, "__setstate__")
            if setstate is not None:
                setstate.call(tx, [state], {})
            else:
                slotstate = None
                if isinstance(state, TupleValue) and len(state.items) == 2:
                    state, slotstate = state.items
                if not is_none(state) and state.truth(tx):
                    y.get_attr(tx, "__dict__").get_attr(tx, "update").call(tx, [state], {})
                if slotstate is not None and not is_none(slotstate):
                    from .containers import DictValue
                    if type(slotstate) is not DictValue or slotstate.cls is not dict:
                        raise _unsupported(f"copying with slot state of type {slotstate.type_name()}")
                    for k, v in list(slotstate.entries.values()):
                        if not (k.is_constant() and type(k.as_constant()) is str):
                            raise _unsupported("copying with a slot state key that is not a string")
                        y.set_attr(tx, k.as_constant(), v)
        return y


def _constant_items(v: Value):
    return [const(i) for i in v.as_constant()]


def _check_plain_new(cls: type) -> None:
    """``cls.__new__(cls)`` is ``object.__new__``'s (all of the class is Python code)."""
    from .objects import special_lookup
    if special_lookup(cls, "__new__") is not object.__dict__["__new__"]:
        raise _unsupported(f"copying a {cls.__qualname__} (custom __new__)")
    for klass in cls.__mro__[:-1]:
        if not klass.__flags__ & _PY_HEAPTYPE:
            raise _unsupported(f"copying a {cls.__qualname__} (a subclass of {klass.__qualname__})")


def _slot_names(cls: type):
    """``copyreg._slotnames(cls)`` without storing its cache on the class."""
    names = cls.__dict__.get("__slotnames__")
    if isinstance(names, list):
        return names
    names = []
    if hasattr(cls, "__slots__"):
        for c in cls.__mro__:
            if "__slots__" in c.__dict__:
                slots = c.__dict__["__slots__"]
                if isinstance(slots, str):
                    slots = (slots,)
                for name in slots:
                    if name in ("__dict__", "__weakref__"):
                        continue
                    elif name.startswith("__") and not name.endswith("__"):
                        stripped = c.__name__.lstrip("_")
                        names.append(f"_{stripped}{name}" if stripped else name)
                    else:
                        names.append(name)
    return names


def object_reduce_ex(tx, x: Value, protocol: Value, via_reduce: bool = False) -> Value:
    """``object.__reduce_ex__(x, protocol)`` (and ``object.__reduce__``) for
    an object of a Python class: CPython's ``reduce_newobj`` for protocol 2+."""
    from .containers import TupleValue
    from .objects import special_lookup, guard_class_lookup, owner_of
    cls = x.python_type()
    if not via_reduce:
        reduce = x.get_attr(tx, "__reduce__")  # (looked up on the instance first, as CPython does)
        guard_class_lookup(tx, cls, "__reduce__", owner_of(cls, "__reduce__"))
        if special_lookup(cls, "__reduce__") is not object.__dict__["__reduce__"]:
            return reduce.call(tx, [], {})
    if not (protocol.is_constant() and type(protocol.as_constant()) is int) or protocol.as_constant() < 2:
        raise _unsupported("object.__reduce_ex__ with a protocol below 2 (copyreg._reduce_ex)")
    _check_plain_new(cls)
    for name in ("__getnewargs_ex__", "__getnewargs__"):
        guard_class_lookup(tx, cls, name, owner_of(cls, name))
        if special_lookup(cls, name) is not _MISSING_ATTR():
            raise _unsupported(f"copying a {cls.__qualname__}, which has {name}")
    getstate = x.get_attr(tx, "__getstate__")
    if _is_slot(getstate, "__getstate__") and getstate.receiver is x:
        state = object_getstate(tx, x, required=True)
    else:
        state = getstate.call(tx, [], {})
    return TupleValue([const(copyreg.__newobj__), TupleValue([tx.wrap(cls, None)]), state, NONE, NONE])


def _MISSING_ATTR():
    from .objects import NO_ATTR
    return NO_ATTR


def object_getstate(tx, x: Value, required: bool) -> Value:
    """``object.__getstate__()``: None, the instance dict, or ``(dict or None,
    {slot: value})`` for the slots that are set."""
    from .containers import DictValue, TupleValue
    from .modules import NewObjectValue
    cls = x.python_type()
    _check_plain_new(cls)  # (``required``'s size check passes for classes made of Python code)
    slots = _slot_names(cls)
    if isinstance(x, NewObjectValue):
        dict_part = {k: v for k, v in x.attrs.items() if k not in slots}
    else:
        dict_part = _existing_dict_state(tx, x)
    state = DictValue.from_pairs([(const(k), v) for k, v in dict_part.items()]) if dict_part else NONE
    if slots:
        slot_values = []
        for name in slots:
            v = _try_attr(tx, x, name)
            if v is not None:
                slot_values.append((const(name), v))
        if slot_values:
            state = TupleValue([state, DictValue.from_pairs(slot_values)])
    return state


def _existing_dict_state(tx, x) -> dict:
    """The current instance dict of a pre-existing object: the real entries
    (their key set guarded) with the trace's pending writes applied."""
    from ..sources import ItemSource
    from .objects import DELETED, _instance_dict, instance_dict_source
    se = tx.side_effects
    inst = _instance_dict(x.obj)
    if inst is None:
        return {}
    if se.dict_view_conflict(inst, writing=False):
        raise _unsupported(f"copying a {type(x.obj).__name__} whose __dict__ the trace changed as a dict")
    writes = se.attr_writes.get(x, {})
    if any((id(x), n) in se.deleted_attrs for n in writes):
        # a deleted and re-added attribute moves to the end of the real dict
        raise _unsupported(f"copying a {type(x.obj).__name__} after deleting one of its attributes")
    dict_src = instance_dict_source(x.source, type(x.obj))
    tx.guards.add(Guard("DICT_KEYS", dict_src, tuple(inst)))
    out = {}
    for name in inst:
        pending = writes.get(name)
        # the entry itself: ``x.name`` may find a data descriptor of the class, or run its hooks
        out[name] = pending if pending is not None else tx.wrap(inst[name], ItemSource(dict_src, name))
    for name, value in writes.items():
        if name not in inst and value is not DELETED:
            out[name] = value
    return {k: v for k, v in out.items() if v is not DELETED}


def deepcopy_handler(tx, args, kwargs):
    """``copy.deepcopy(x)`` (a memo given by the program is not modelled)."""
    if kwargs or not 1 <= len(args) <= 2 or (len(args) == 2 and not is_none(args[1])):
        raise _unsupported("copy.deepcopy with a memo")
    return Copier(tx, deep=True).copy(args[0])


def copy_handler(tx, args, kwargs):
    """``copy.copy(x)``."""
    if kwargs or len(args) != 1:
        raise _unsupported("copy.copy with other arguments")
    return Copier(tx, deep=False).copy(args[0])

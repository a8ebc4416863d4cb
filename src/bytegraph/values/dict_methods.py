"""Methods and operators of dict, OrderedDict and defaultdict values.

A :class:`~.containers.DictValue` stands for an exact ``dict``,
``collections.OrderedDict`` or ``collections.defaultdict``.  The three share
a table of entries but differ where CPython's classes differ: which methods
accept keywords (OrderedDict's ``pop``/``setdefault``/``popitem`` do, dict's
do not), what ``copy()`` and ``|`` return (the defaultdict keeps its
``default_factory``, the OrderedDict its class), which end ``popitem`` takes
and its error message, and equality (order matters between two
OrderedDicts only).

Each handler's signature is the real method's (positional-only where the C
method is), so ``check_arity`` turns a call that does not fit into Python's
own ``TypeError``.
"""

from __future__ import annotations

import collections
from typing import Callable, Dict, Optional

from ..errors import Unsupported, UserException
from .base import check_release
from .constants import NONE, const
from .containers import DictValue, DictViewValue, TupleValue, check_arity, key_of

_MISSING = object()
OrderedDict = collections.OrderedDict
defaultdict = collections.defaultdict
Counter = collections.Counter


def raise_key_error(tx, key) -> None:
    """``raise KeyError(key)`` in the traced program (the key object itself as the argument)."""
    from .exceptions import construct_exception
    exc = construct_exception(tx, KeyError, [key], {})
    exc.raised(tx)
    raise UserException(exc)


def is_ordered(d: DictValue) -> bool:
    return issubclass(d.cls, OrderedDict)


# -- shared by the three classes ---------------------------------------------

def _keys(tx, d, /):
    return DictViewValue(d, "keys")


def _values(tx, d, /):
    return DictViewValue(d, "values")


def _items(tx, d, /):
    return DictViewValue(d, "items")


def _get(tx, d, key, default=NONE, /):
    hit = d.entries.get(d.hkey(tx, key))
    return hit[1] if hit else default


def _getitem(tx, d, key, /):
    return d.getitem(tx, key)


def _contains(tx, d, key, /):
    return const(d.contains(key, tx))


def _clear(tx, d, /):
    for k, v in d.entries.values():
        check_release(k)
        check_release(v)
    tx.side_effects.mutate(d)
    d.clear_entries()
    return NONE


def copy_of(d: DictValue) -> DictValue:
    """``d.copy()``: a dict of d's class (a defaultdict with d's factory)."""
    return DictValue(dict(d.entries), cls=d.cls, default_factory=d.default_factory)


def _dict_copy(tx, d, /):
    return DictValue(dict(d.entries), cls=dict)


def _copy(tx, d, /):
    return copy_of(d)


def _setdefault_impl(tx, d, key, default):
    # (never __missing__: setdefault asks the table only)
    hk = d.hkey(tx, key)
    hit = d.entries.get(hk)
    if hit is not None:
        return hit[1]
    d.store(tx, key, default, hk=hk)
    return default


def _dict_setdefault(tx, d, key, default=NONE, /):
    return _setdefault_impl(tx, d, key, default)


def _od_setdefault(tx, d, /, key, default=NONE):
    return _setdefault_impl(tx, d, key, default)


def _pop_impl(tx, d, key, default):
    hk = d.hkey(tx, key)
    hit = d.entries.get(hk)
    if hit is None:
        if default is _MISSING:
            raise_key_error(tx, key)
        return default
    check_release(hit[0])
    tx.side_effects.mutate(d)
    d.remove(hk)
    return hit[1]


def _dict_pop(tx, d, key, default=_MISSING, /):
    return _pop_impl(tx, d, key, default)


def _od_pop(tx, d, /, key, default=_MISSING):
    return _pop_impl(tx, d, key, default)


def _popitem_impl(tx, d, last: bool, empty_message: str):
    if not d.entries:
        tx.raise_python_exception(KeyError(empty_message))
    tx.side_effects.mutate(d)
    hk = next(reversed(d.entries)) if last else next(iter(d.entries))
    k, v = d.remove(hk)
    return TupleValue([k, v])


def _dict_popitem(tx, d, /):
    return _popitem_impl(tx, d, True, "popitem(): dictionary is empty")


def _od_popitem(tx, d, /, last=_MISSING):
    return _popitem_impl(tx, d, True if last is _MISSING else last.truth(tx), "dictionary is empty")


def _od_move_to_end(tx, d, /, key, last=_MISSING):
    d.move_to_end(tx, key, True if last is _MISSING else last.truth(tx))
    return NONE


def _update(tx, d, /, *args, **kwargs):
    if len(args) > 1:
        _real_type_error(tx, d, "update", args, kwargs)
    tx.side_effects.mutate(d)
    if args:
        update_from(tx, d, args[0], ordered_rules=is_ordered(d))
    for k, v in kwargs.items():
        d.put(const(k), v)
    return NONE


def update_from(tx, d: DictValue, other, ordered_rules: bool) -> None:
    """Merge ``other`` (a mapping, or an iterable of pairs) into ``d``, as
    ``dict.update`` (or, with ``ordered_rules``, ``OrderedDict.update``)
    does, in CPython's order: a mapping is read by ``keys()`` then
    ``other[key]``; anything else is iterated pair by pair, each pair stored
    before the next is pulled (so an error midway leaves the pairs before it
    stored, and a generator producing them sees the entries added before)."""
    if isinstance(other, DictValue):
        # dict, OrderedDict, defaultdict: their keys() and [] run no user code
        for k, v in list(other.entries.values()):
            d.put(k, v)
        return
    if _has_keys(tx, other):
        from .operators import getitem
        for k in other.get_attr(tx, "keys").call(tx, [], {}).unpack(tx):
            d.setitem(tx, k, getitem(tx, other, k))
        return
    from .. import config
    from .generators import iterate
    it = iterate(tx, other)
    n = 0
    while (item := it.next(tx)) is not None:
        pair = _ordered_pair(tx, item) if ordered_rules else _dict_pair(tx, item, n)
        d.setitem(tx, pair[0], pair[1])
        n += 1
        if n > config.max_generator_items:
            raise Unsupported("dict.update() from an endless iterator", kind="generator")


def _dict_pair(tx, item, n: int):
    """A pair as ``dict.update`` reads it: the whole item as a sequence."""
    from .containers import ListValue
    from .generators import iterate
    if type(item) in (ListValue, TupleValue) and item.python_type() in (list, tuple):
        pair = list(item.items)
    else:
        try:
            pair = iterate(tx, item).unpack(tx)
        except UserException as e:
            if not issubclass(e.value.python_type(), TypeError):
                raise
            tx.raise_python_exception(TypeError(
                f"cannot convert dictionary update sequence element #{n} to a sequence"))
    if len(pair) != 2:
        tx.raise_python_exception(ValueError(
            f"dictionary update sequence element #{n} has length {len(pair)}; 2 is required"))
    return pair


def _ordered_pair(tx, item):
    """A pair as ``OrderedDict.update`` reads it: at most three items pulled
    from the item's iterator (its TypeError as it is)."""
    from .generators import iterate
    it = iterate(tx, item)
    pair = []
    while len(pair) < 3 and (v := it.next(tx)) is not None:
        pair.append(v)
    if len(pair) == 3:
        tx.raise_python_exception(ValueError("too many values to unpack (expected 2)"))
    if len(pair) < 2:
        tx.raise_python_exception(ValueError(
            f"need more than {len(pair)} value{'s' if not pair else ''} to unpack"))
    return pair


def _has_keys(tx, v) -> bool:
    """Whether ``dict.update``/``dict()`` treats ``v`` as a mapping: CPython
    looks the attribute ``keys`` up on the object itself, so an instance
    attribute (or a ``__getattr__`` answer) counts too."""
    try:
        t = v.python_type()
    except NotImplementedError:
        raise Unsupported(f"dict.update() from a {type(v).__name__}", kind="unsupported_method") from None
    if hasattr(t, "keys"):
        return True
    if not (t.__flags__ & _HEAPTYPE) and not t.__dictoffset__:
        return False  # a builtin type whose instances have no attributes of their own
    try:
        v.get_attr(tx, "keys")
    except UserException as e:
        if issubclass(e.value.python_type(), AttributeError):
            return False
        raise
    return True


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def _real_type_error(tx, d: DictValue, name: str, args, kwargs):
    """Raise the TypeError the real method gives for this many arguments."""
    try:
        getattr(_scratch(d), name)(*[None] * len(args), **{k: None for k in kwargs})
    except TypeError as e:
        tx.raise_python_exception(e)
    raise Unsupported(f"{d.cls.__name__}.{name}() with these arguments", kind="unsupported_method")


def _scratch(d: DictValue):
    return d.cls() if d.cls is not defaultdict else defaultdict(None)


_DICT_METHODS: Dict[str, Callable] = {
    "keys": _keys, "values": _values, "items": _items, "get": _get, "__getitem__": _getitem,
    "__contains__": _contains, "copy": _dict_copy, "update": _update, "setdefault": _dict_setdefault,
    "pop": _dict_pop, "popitem": _dict_popitem, "clear": _clear,
}

#: what each class overrides (``move_to_end`` puts an OrderedDict's order out
#: of step with its dict's: ``DictValue.table``)
_CLASS_METHODS: Dict[type, Dict[str, Callable]] = {
    dict: _DICT_METHODS,
    defaultdict: {**_DICT_METHODS, "copy": _copy, "__copy__": _copy},
    OrderedDict: {**_DICT_METHODS, "copy": _copy, "setdefault": _od_setdefault, "pop": _od_pop,
                  "popitem": _od_popitem, "move_to_end": _od_move_to_end},
    # (what Counter defines in Python runs in the trace: values.counters)
    collections.Counter: _DICT_METHODS,
}


def call_dict_method(tx, d: DictValue, name: str, args, kwargs):
    """``d.name(*args, **kwargs)``, or None when the method is not modelled."""
    if d.cls is Counter:
        from .counters import call_counter_method
        out = call_counter_method(tx, d, name, args, kwargs)
        if out is not None:
            return out
    handler = _CLASS_METHODS.get(d.cls, {}).get(name)
    if handler is None:
        return None
    check_arity(tx, handler, getattr(_scratch(d), name), args, kwargs)
    return handler(tx, d, *args, **kwargs)


# -- operators ----------------------------------------------------------------

def dict_or(tx, a: DictValue, b: DictValue) -> DictValue:
    """``a | b`` of two dict values, by the method CPython picks: the right
    operand's ``__ror__`` first when its class is a proper subclass of the
    left's (``dict | OrderedDict`` is an OrderedDict, ``dict | defaultdict`` a
    defaultdict with the right operand's factory), else the left's ``__or__``."""
    owner = b if b.cls is not a.cls and issubclass(b.cls, a.cls) else a
    if issubclass(owner.cls, OrderedDict):
        od = a if issubclass(a.cls, OrderedDict) else b
        out = DictValue(dict(a.entries), cls=od.cls)     # type(od)(left), then update(right)
    elif issubclass(owner.cls, defaultdict):
        dd = a if issubclass(a.cls, defaultdict) else b
        out = DictValue(dict(a.entries), cls=dd.cls, default_factory=dd.default_factory)
    else:
        out = DictValue(dict(a.entries), cls=dict)       # dict.__or__ copies into an exact dict
    for k, v in b.entries.values():
        out.put(k, v)
    return out


def dict_equal(tx, a: DictValue, b: DictValue, equal_values) -> Optional[bool]:
    """``a == b`` (None: undecided).  Between two OrderedDicts the order of
    the keys counts too; against a plain dict it does not."""
    if set(a.entries) != set(b.entries):
        from .user_keys import has_user_keys
        if has_user_keys(a.entries) or has_user_keys(b.entries):
            # (equal keys of their own __eq__ may be other objects: each
            # lookup would run it)
            raise Unsupported("== of dicts with keys of their own __hash__", kind="unsupported_dict")
        return False
    for k, (_, v) in a.entries.items():
        e = equal_values(tx, v, b.entries[k][1], item=True)  # (an item is first compared by identity)
        if e is not True:
            return e
    if is_ordered(a) and is_ordered(b):
        return list(a.entries) == list(b.entries)
    return True

"""Dicts (``dict``, ``OrderedDict``, ``defaultdict``) and their views.

Split from :mod:`.containers`, which re-exports both classes.  Keys are
keyed by :func:`.containers.key_of` (user ``__hash__``/``__eq__`` keys by
:mod:`.user_keys`); a dict's methods are in :mod:`.dict_methods`.
"""

from __future__ import annotations

import collections
from typing import Dict, List, Optional

from .base import Value, check_release
from .constants import is_none
from .containers import TupleValue, key_of


class DictValue(Value):
    """A dict, ``OrderedDict`` or ``defaultdict`` (exactly that class: ``cls``).

    Keys must be constants or values compared by identity (tensors, functions).
    ``entries`` maps the key's hashable form to ``(key_value, value)`` in
    insertion order (an OrderedDict's order: one whose order differs from its
    dict's, or that dict's own methods put out of step, is not modelled); a
    defaultdict's ``default_factory`` fills missing keys.  The methods each
    class has are in ``dict_methods``.

    ``key_log`` lists the insertions and deletions of keys made in the
    trace, in order (``("ins", key)``, ``("del", key)``, ``("clear",)``).
    While it is empty every entry is where it was in the dict's table, which
    iterators over the dict rely on (see ``iterators.DictIteratorValue``);
    a pre-existing dict replays these operations, so its table (and a live
    iterator's walk over it) ends up as eager's, holes included.
    An OrderedDict's ``move_to_end`` changes its own order (``entries``) but
    not its dict's table: ``table`` then lists the entries' keys in the
    table's order (None while the two agree), which a rebuilt OrderedDict
    must reproduce (``dict.keys(od)`` shows it); ``("move", key, last)`` in
    ``key_log`` replays the move on a pre-existing one.
    """

    __slots__ = ("entries", "cls", "default_factory", "key_log", "table")

    def __init__(self, entries: Optional[Dict] = None, source=None, cls=dict, default_factory=None):
        super().__init__(source)
        self.entries: Dict[object, tuple] = dict(entries or {})
        self.cls = cls
        self.default_factory: Optional[Value] = default_factory
        self.key_log: List[tuple] = []
        self.table: Optional[List] = None

    @property
    def key_ops(self) -> int:
        return len(self.key_log)

    @property
    def od_state(self) -> int:
        """The keys added and removed one by one (an OrderedDict's
        ``od_state``: its ``clear`` leaves it alone, so its iterators then
        report a change of size, not a mutation)."""
        return sum(op[0] != "clear" for op in self.key_log)

    @staticmethod
    def from_pairs(pairs, source=None, cls=dict, tx=None) -> "DictValue":
        d = DictValue(source=source, cls=cls)
        for k, v in pairs:
            d.put(k, v, tx)
        return d

    def python_type(self):
        return self.cls

    def has_len(self):
        return True

    def truth(self, tx):
        return bool(self.entries)

    def children(self):
        if self.default_factory is not None:
            yield self.default_factory
        for k, v in self.entries.values():
            yield k
            yield v

    def keys(self) -> List[Value]:
        return [k for k, _ in self.entries.values()]

    def get_iter(self, tx):
        from .iterators import DictIteratorValue
        return DictIteratorValue(self, "keys")

    def unpack(self, tx):
        return self.keys()

    def getitem(self, tx, key: Value) -> Value:
        hit = self.entries.get(self.hkey(tx, key))
        if hit is None and self.cls is collections.Counter:
            from .counters import missing
            return missing(tx, self, key)  # (Counter.__missing__: 0, nothing stored)
        if hit is None:
            factory = self.default_factory
            if factory is not None and not is_none(factory):
                value = factory.call(tx, [], {})  # defaultdict.__missing__
                self.setitem(tx, key, value)
                return value
            from .dict_methods import raise_key_error
            raise_key_error(tx, key)
        return hit[1]

    def hkey(self, tx, key: Value):
        """``key_of(key)``, or with ``tx`` and a key of its own ``__hash__``
        (given or stored), the entry CPython's lookup lands on, its
        ``__hash__``/``__eq__`` calls traced (``user_keys``)."""
        if tx is not None:
            from .user_keys import has_user_keys, needs_user_hash, resolve_key
            if needs_user_hash(key) or tx.trace.user_keyed and has_user_keys(self.entries):
                return resolve_key(tx, self.entries, key)
        return key_of(key)

    def contains(self, key: Value, tx=None) -> bool:
        return self.hkey(tx, key) in self.entries

    def put(self, key: Value, value: Value, tx=None, hk=None) -> None:
        """``self[key] = value`` in the table: an equal key already there keeps
        its own key object (``{1: a, 1.0: b}`` is ``{1: b}``)."""
        hk = self.hkey(tx, key) if hk is None else hk
        old = self.entries.get(hk)
        if old is None and hk[0] == "u" and tx is not None:
            # where the frame breaks if this dict outlives the trace (compiler)
            tx.trace.user_key_steps.setdefault(id(self), (self, tx.step))
        if old is None:
            self.key_log.append(("ins", key))
            self.entries[hk] = (key, value)
            if self.table is not None:
                self.table.append(hk)
        else:
            self.entries[hk] = (old[0], value)

    def store(self, tx, key: Value, value: Value, hk=None) -> None:
        """``put`` as a mutation of this dict (replayed if it existed before the trace)."""
        if hk is None:
            hk = self.hkey(tx, key)  # (an unhashable key raises before anything changes)
        tx.side_effects.mutate(self)
        self.put(key, value, tx, hk)

    def setitem(self, tx, key: Value, value: Value):
        hk = self.hkey(tx, key)
        old = self.entries.get(hk)
        if old is not None:
            check_release(old[1])
        self.store(tx, key, value, hk=hk)

    def delitem(self, tx, key: Value):
        hk = self.hkey(tx, key)
        old = self.entries.get(hk)
        if old is None:
            from .dict_methods import raise_key_error
            raise_key_error(tx, key)
        check_release(old[0])
        check_release(old[1])
        tx.side_effects.mutate(self)
        self.remove(hk)

    def remove(self, hk) -> tuple:
        """Delete the entry of key form ``hk`` (a logged key deletion; the
        caller marked the mutation); returns its ``(key, value)``."""
        k, v = self.entries.pop(hk)
        self.key_log.append(("del", k))
        if self.table is not None:
            self.table.remove(hk)
        return k, v

    def move_to_end(self, tx, key: Value, last: bool) -> None:
        """``OrderedDict.move_to_end(key, last)``: its own order changes, its
        dict's table does not.  Moving the key already at that end changes
        nothing (CPython leaves the OrderedDict's state alone: its iterators
        go on); any other move makes them raise "mutated"."""
        hk = self.hkey(tx, key)
        if hk not in self.entries:
            from .dict_methods import raise_key_error
            raise_key_error(tx, key)
        order = list(self.entries)
        if order[-1 if last else 0] == hk:
            return
        tx.side_effects.mutate(self)
        if self.table is None:
            self.table = order
        entry = self.entries.pop(hk)
        if last:
            self.entries[hk] = entry
        else:
            self.entries = {hk: entry, **self.entries}
        self.key_log.append(("move", entry[0], last))

    def clear_entries(self) -> None:
        if self.entries:
            self.key_log.append(("clear",))
        self.entries.clear()
        self.table = None

    def get_attr(self, tx, name):
        if name == "default_factory" and self.cls is collections.defaultdict:
            return self.default_factory
        if name == "__class__":
            return tx.wrap(self.cls, None)  # (none of the modelled classes defines its own)
        return super().get_attr(tx, name)

    def set_attr(self, tx, name, value):
        if name == "default_factory" and self.cls is collections.defaultdict:
            # (any object: only the constructor checks that it is callable)
            check_release(self.default_factory)
            self.default_factory = value
            if self.source is not None:
                tx.side_effects.store_attr(self, name, value)
            return
        super().set_attr(tx, name, value)

    def call_method(self, tx, name, args, kwargs):
        from .dict_methods import call_dict_method
        out = call_dict_method(tx, self, name, args, kwargs)
        if out is None:
            return super().call_method(tx, name, args, kwargs)
        return out

    def reconstruct(self, cg):
        from .user_keys import refuse_rehashing
        refuse_rehashing(self)
        if self.table is not None and self.table != list(self.entries):
            # its dict's table in its own order, then the moves that give the
            # OrderedDict's order
            cg.push_callable(ordered_dict_moved)
            for hk in self.table:
                k, v = self.entries[hk]
                cg.reconstruct(k)
                cg.reconstruct(v)
            cg.emit("BUILD_MAP", arg=len(self.table))
            cg.load_object(tuple(self.table.index(hk) for hk in self.entries))
            cg.call(2)
            return
        if self.cls is not dict:
            cg.push_callable(self.cls)
            if self.default_factory is not None:
                cg.reconstruct(self.default_factory)
        for k, v in self.entries.values():
            cg.reconstruct(k)
            cg.reconstruct(v)
        cg.emit("BUILD_MAP", arg=len(self.entries))
        if self.cls is not dict:
            cg.call(1 + (self.default_factory is not None))

    def __repr__(self):
        return f"DictValue({list(self.entries.values())})"


class DictViewValue(Value):
    """``d.keys()``, ``d.values()`` or ``d.items()`` of a :class:`DictValue`."""

    __slots__ = ("dict_value", "kind")

    def __init__(self, dict_value: DictValue, kind: str):
        super().__init__()
        self.dict_value = dict_value
        self.kind = kind

    def python_type(self):
        return type(getattr(self.dict_value.cls(), self.kind)())  # (odict_keys for an OrderedDict)

    def has_len(self):
        return True

    def truth(self, tx):
        return bool(self.dict_value.entries)

    def children(self):
        return (self.dict_value,)

    def get_iter(self, tx):
        from .iterators import DictIteratorValue
        return DictIteratorValue(self.dict_value, self.kind)

    def unpack(self, tx):
        pairs = self.dict_value.entries.values()
        if self.kind == "keys":
            return [k for k, _ in pairs]
        if self.kind == "values":
            return [v for _, v in pairs]
        return [TupleValue([k, v]) for k, v in pairs]

    def reconstruct(self, cg):
        cg.reconstruct(self.dict_value)
        cg.call_method(self.kind, lambda: 0)


def ordered_dict_moved(table: dict, order: tuple) -> collections.OrderedDict:
    """An OrderedDict whose dict table holds ``table``'s items in that order
    and whose own order is ``order`` (indices into the table): what
    ``move_to_end`` calls leave (generated code calls it).

    Example::

        >>> od = ordered_dict_moved({"a": 1, "b": 2}, (1, 0))
        >>> list(od), list(dict.keys(od))
        (['b', 'a'], ['a', 'b'])
    """
    od = collections.OrderedDict(table)
    keys = list(table)
    for i in order:
        od.move_to_end(keys[i])
    return od

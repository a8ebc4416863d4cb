"""Iterators that follow their container: a list iterator reads the list as
it is at each step, dict and set iterators notice a change of size."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ..errors import Unsupported
from .containers import IteratorValue, TupleValue

if TYPE_CHECKING:
    from .containers import ListValue


class _SteppedIterator(IteratorValue):
    """An iterator whose ``unpack`` takes its items one ``next`` at a time
    (each step reads its container as it is then)."""

    __slots__ = ()

    def unpack(self, tx):
        out = []
        while (v := self.next(tx)) is not None:
            out.append(v)
        return out


class ListIteratorValue(_SteppedIterator):
    """``iter(lst)`` for a list value: each step reads the list as it is then
    (a loop that appends or pops sees it, as in Python).  Reconstructs as
    a real list iterator over the rebuilt list, at the same position."""

    __slots__ = ("lst", "done")

    def __init__(self, lst: "ListValue"):
        super().__init__([])
        self.lst = lst
        self.done = False

    def next(self, tx):
        if self.done or self.pos >= len(self.lst.items):
            self.done = True  # an exhausted list iterator stays exhausted
            return None
        v = self.lst.items[self.pos]
        self.pos += 1
        return v

    def children(self):
        return (self.lst,)

    def reconstruct(self, cg):
        cg.push_callable(list_iterator_at)
        cg.reconstruct(self.lst)
        cg.load_object(-1 if self.done else self.pos)
        cg.call(2)


def list_iterator_at(lst: list, pos: int):
    """A real iterator over ``lst`` that has already yielded ``pos`` items
    (``pos == -1``: exhausted, so it ignores items appended later)."""
    if pos < 0:
        it = iter([])
        next(it, None)
        return it
    it = iter(lst)
    it.__setstate__(pos)
    return it


class SequenceIteratorAtValue(IteratorValue):
    """``iter(seq)`` for an immutable sequence (a str, bytes, tuple or range
    constant, or a tuple value) over its items.  Reconstructs as a real
    iterator of the sequence's own kind at the same position; once
    exhausted, as CPython's, it no longer refers to the sequence."""

    __slots__ = ("seq", "it_type", "empty", "done")

    def __init__(self, items, seq, it_type, empty):
        super().__init__(items)
        self.seq, self.it_type, self.empty, self.done = seq, it_type, empty, False

    def python_type(self):
        return self.it_type

    def next(self, tx):
        v = None if self.done else super().next(tx)
        self.done = v is None
        return v

    def unpack(self, tx):
        out = [] if self.done else super().unpack(tx)
        self.done = True
        return out

    def children(self):
        return () if self.done else (self.seq,)

    def reconstruct(self, cg):
        if self.done:
            cg.push_callable(exhausted_iterator)
            cg.load_object(self.empty)
            cg.call(1)
            return
        cg.push_callable(list_iterator_at)
        cg.reconstruct(self.seq)
        cg.load_object(self.pos)
        cg.call(2)


def exhausted_iterator(empty):
    """A real iterator of ``empty``'s kind that has already said it is exhausted."""
    it = iter(empty)
    next(it, None)
    return it


class NewRangeIteratorValue(SequenceIteratorAtValue):
    """``iter(r)`` for a range value: each item is made when it is pulled, so
    ``zip(short, range(2**30))`` or a loop that breaks early costs only the
    items it takes.  Reconstructs like the other sequence iterators."""

    __slots__ = ("range",)

    def __init__(self, seq):
        super().__init__([], seq, type(iter(range(0))), range(0))
        self.range = seq.value

    def next(self, tx):
        from .constants import const
        if self.done or self.pos >= len(self.range):
            self.done = True
            return None
        self.pos += 1
        return const(self.range[self.pos - 1])

    def unpack(self, tx):
        from .constants import const
        out = [] if self.done else [const(i) for i in self.range[self.pos:]]
        self.pos, self.done = len(self.range), True
        return out


def sequence_iterator(seq, items, real) -> IteratorValue:
    """The iterator value of immutable sequence value ``seq`` (standing for ``real``, or a tuple)."""
    return SequenceIteratorAtValue(items, seq, type(iter(real)), type(real)() if not isinstance(real, range)
                                   else range(0))


class ListReversedIteratorValue(_SteppedIterator):
    """``reversed(lst)`` for a list value: like CPython's, it keeps an index
    that counts down and reads the list as it is at each step.  Reconstructs
    as a real ``list_reverseiterator`` over the rebuilt list at that index."""

    __slots__ = ("lst", "index")

    def __init__(self, lst: "ListValue"):
        super().__init__([])
        self.lst = lst
        self.index = len(lst.items) - 1

    def python_type(self):
        return type(reversed([]))

    def next(self, tx):
        if 0 <= self.index < len(self.lst.items):
            v = self.lst.items[self.index]
            self.index -= 1
            return v
        self.index = -1  # exhausted for good
        return None

    def children(self):
        return (self.lst,)

    def reconstruct(self, cg):
        cg.push_callable(list_reversed_at)
        cg.reconstruct(self.lst)
        cg.load_object(self.index)
        cg.call(2)


def list_reversed_at(lst: list, index: int):
    """A real ``reversed(lst)`` whose next item is ``lst[index]`` (-1: exhausted)."""
    it = reversed(lst)
    if index < 0:
        it = reversed([])
        next(it, None)
        return it
    it.__setstate__(index)
    return it


class SizedIteratorValue(_SteppedIterator):
    """An iterator over a set (``kind="set"``): like Python's, it raises
    ``RuntimeError`` when the set changed size under it.  Reconstructs as a
    real iterator of the rebuilt set advanced to the same position."""

    __slots__ = ("container", "size_of", "what", "size", "kind", "done", "shape")

    def __init__(self, items, container, size_of, what: str, kind: str = "keys"):
        super().__init__(items)
        self.container, self.size_of, self.what, self.kind = container, size_of, what, kind
        self.size = size_of()
        self.done = False
        self.shape = self._shape()

    def _shape(self):
        """What must not change under the iterator besides its size: the
        set's count of elements added and removed (one removed and another
        added leave the size as it was, and CPython then walks a table the
        items snapshot does not describe)."""
        return getattr(self.container, "version", None)

    def python_type(self):
        return type(iter(set()))

    def next(self, tx):
        if self.done:
            return None
        if self.size_of() != self.size:
            self.size = -1  # stays broken, as a real iterator does
            what = "Set" if self.what == "set" else self.what  # (CPython's capital)
            tx.raise_python_exception(RuntimeError(f"{what} changed size during iteration"))
        if self._shape() != self.shape:
            raise Unsupported(f"iterating a {self.what} whose elements were replaced during the iteration",
                              kind="unsupported_iter", hint="CPython then follows its hash table's holes")
        v = super().next(tx)
        if v is None:
            self.done = True  # exhausted: it no longer looks at its container
        return v

    def children(self):
        return (self.container,)

    def reconstruct(self, cg):
        if not self.done and (self.size_of() != self.size or self._shape() != self.shape):
            raise Unsupported(f"an iterator over a {self.what} that changed gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        if not self.done and getattr(self.container, "existing", None) is not None and self.container.recipe:
            # rebuilt before the replay changes the real set, it would walk its table as it was
            raise Unsupported(f"an iterator over a pre-existing {self.what} the trace changed gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(container_iterator_at)
        cg.reconstruct(self.container)
        cg.load_object(self.kind)
        cg.load_object(-1 if self.done else self.pos)
        cg.call(3)


class DictIteratorValue(_SteppedIterator):
    """``iter()`` (or ``reversed()``: ``reverse``) of a dict value or of one of
    its views (``kind``: keys, values or items).  Like CPython's, each step
    reads the entry at the iterator's position in the dict as it is then (a
    value replaced in the loop is seen), with CPython's checks:

    - a plain dict's iterator raises ``RuntimeError`` once the dict changed
      size, and keeps raising; keys inserted and deleted leaving the size as
      it was (CPython then follows its table's holes) are not modelled;
    - an OrderedDict's iterator is done once it has yielded its last key;
      before that, it raises "mutated" once keys were added or removed
      (and is then done), or "changed size" (sticky; after ``clear`` up to
      3.12, see ``dicts.ODICT_CLEAR_MUTATES``).

    Reconstructs as a real iterator of the rebuilt dict at the same position.
    """

    __slots__ = ("dict_value", "kind", "reverse", "size", "key_ops", "state", "order", "done")

    def __init__(self, dict_value, kind: str, pos: int = 0, size: int = None, reverse: bool = False):
        super().__init__([])
        self.dict_value, self.kind, self.reverse, self.pos = dict_value, kind, reverse, pos
        #: the dict's size when the iterator was made (CPython's di_used); -1: broken for good
        self.size = len(dict_value.entries) if size is None else size
        self.key_ops, self.state = dict_value.key_ops, dict_value.od_state
        #: the keys in the order it walks them (fixed while ``key_ops`` does not move)
        self.order = list(reversed(dict_value.entries) if reverse else dict_value.entries)
        self.done = False

    def python_type(self):
        return _dict_iterator_type(self.dict_value.cls, self.kind, self.reverse)

    def _ordered(self) -> bool:
        return issubclass(self.dict_value.cls, collections.OrderedDict)

    def _keys_moved(self) -> bool:
        return self.dict_value.key_ops != self.key_ops

    def next(self, tx):
        if self.done:
            return None
        d = self.dict_value
        if self._ordered():
            if self.pos >= len(self.order):
                self.done = True  # (its next key is none: it looks at nothing more)
                return None
            if d.od_state != self.state:
                self.done = True
                tx.raise_python_exception(RuntimeError("OrderedDict mutated during iteration"))
            if len(d.entries) != self.size:
                self.size = -1
                tx.raise_python_exception(RuntimeError("OrderedDict changed size during iteration"))
        else:
            if len(d.entries) != self.size:
                self.size = -1  # stays broken, as a real iterator does
                tx.raise_python_exception(RuntimeError("dictionary changed size during iteration"))
            if self._keys_moved():
                raise Unsupported("iterating a dict whose keys were replaced during the iteration",
                                  kind="unsupported_iter", hint="CPython then follows its hash table's holes")
            if self.pos >= len(self.order):
                self.done = True  # exhausted: it no longer looks at its dict
                return None
        k, v = d.entries[self.order[self.pos]]
        self.pos += 1
        return k if self.kind == "keys" else v if self.kind == "values" else TupleValue([k, v])

    def needs_replayed_container(self) -> bool:
        """Whether it must be rebuilt after the side effects are replayed: its
        dict is a pre-existing one whose keys the trace inserted or deleted
        (``Codegen.stage_value`` leaves it to the continuation)."""
        return not self.done and self.dict_value.source is not None and bool(self.dict_value.key_log)

    def children(self):
        return () if self.done else (self.dict_value,)

    def reconstruct(self, cg):
        if not self.done and (self.size != len(self.dict_value.entries) or self._keys_moved()):
            raise Unsupported("an iterator over a dict that changed during the iteration gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        if self.needs_replayed_container() and not cg.replayed:
            # rebuilt before the replay inserts and deletes the keys, it would
            # walk the real dict's table as it was, not as eager's iterator does
            raise Unsupported("an iterator over a pre-existing dict whose keys the trace changed gets out of the "
                              "trace", kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(dict_iterator_at)
        if self.done:
            cg.load_object(self.dict_value.cls)  # (an exhausted iterator no longer refers to its dict)
        else:
            cg.reconstruct(self.dict_value)
        cg.load_object(self.kind)
        cg.load_object(self.reverse)
        cg.load_object(-1 if self.done else self.pos)
        cg.call(4)


def _dict_iterator_type(cls, kind: str, reverse: bool):
    view = getattr(cls(), kind)()
    return type(reversed(view) if reverse else iter(view))


def dict_iterator_at(d, kind: str, reverse: bool, pos: int):
    """A real iterator over dict ``d``'s ``kind`` view (reversed: ``reverse``)
    that has yielded ``pos`` items.  ``pos == -1``: an exhausted iterator
    of that kind, ``d`` then being the dict's class."""
    if pos < 0:
        d = d()
    view = getattr(d, kind)()
    it = reversed(view) if reverse else iter(view)
    for _ in range(max(pos, 0)):
        next(it)
    if pos < 0:
        next(it, None)
    return it


def container_iterator_at(container, kind: str, pos: int):
    """A real iterator over set ``container`` (``kind``: "set") that has
    yielded ``pos`` items (-1: exhausted)."""
    it = iter(container)
    if pos < 0:
        for _ in it:
            pass
        return it
    for _ in range(pos):
        next(it)
    return it

"""Iterators that follow their container: a list iterator reads the list as
it is at each step, dict and set iterators notice a change of size."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ..errors import Unsupported
from .constants import const
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
    """An iterator over a dict (its keys, values or items: ``kind``) or a
    set (``kind="set"``): like Python's, it raises ``RuntimeError`` when the
    container changed size under it.  Reconstructs as a real iterator of the
    rebuilt container advanced to the same position."""

    __slots__ = ("container", "size_of", "what", "size", "kind", "done", "version_of", "version")

    def __init__(self, items, container, size_of, what: str, kind: str = "keys"):
        super().__init__(items)
        self.container, self.size_of, self.what, self.kind = container, size_of, what, kind
        self.size = size_of()
        self.done = False
        #: the container's count of elements added and removed, if it keeps one
        self.version_of, self.version = None, None

    def python_type(self):
        return type(iter(set())) if self.kind == "set" else type(iter(getattr({}, self.kind)()))

    def next(self, tx):
        if self.done:
            return None
        if self.size_of() != self.size:
            self.size = -1  # stays broken, as a real iterator does
            what = "Set" if self.what == "set" else self.what  # (CPython's capital)
            tx.raise_python_exception(RuntimeError(f"{what} changed size during iteration"))
        if self.version_of is not None and self.version_of() != self.version:
            # elements added and removed, the size kept: where the real
            # iterator goes on depends on the hash table's layout
            raise Unsupported(f"iterating a {self.what} whose elements changed without a change of size",
                              kind="unsupported_iter")
        v = super().next(tx)
        if v is None:
            self.done = True  # exhausted: it no longer looks at its container
        return v

    def children(self):
        return (self.container,)

    def reconstruct(self, cg):
        if not self.done and (self.size_of() != self.size or
                              self.version_of is not None and self.version_of() != self.version):
            raise Unsupported(f"an iterator over a {self.what} that changed size gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(container_iterator_at)
        cg.reconstruct(self.container)
        cg.load_object(self.kind)
        cg.load_object(-1 if self.done else self.pos)
        cg.call(3)


def container_iterator_at(container, kind: str, pos: int):
    """A real iterator over ``container`` (a dict's ``kind`` view, or a set)
    that has yielded ``pos`` items (-1: exhausted)."""
    it = iter(container) if kind in ("set", "keys") else iter(getattr(container, kind)())
    if pos < 0:
        for _ in it:
            pass
        return it
    for _ in range(pos):
        next(it)
    return it


class DictIteratorValue(_SteppedIterator):
    """``iter()`` (or ``reversed()``: ``reverse``) of a dict value or of one of
    its views (``kind``: keys, values or items).  Each step reads the dict as
    it is then (a value written meanwhile is seen), with CPython's checks:

    - a plain dict's iterator raises once the dict changed size, and keeps
      raising; keys added and removed without a change of size leave it
      wherever the dict's table layout says: not modelled;
    - an OrderedDict's iterator is done once it has yielded its last key;
      before that, it raises "mutated" once keys were added or removed
      (and is then done), or "changed size" (sticky).

    Reconstructs as a real iterator of the rebuilt dict at the same position.
    """

    __slots__ = ("d", "kind", "reverse", "order", "size", "version", "done")

    def __init__(self, d, kind: str, reverse: bool = False):
        super().__init__([])
        self.d, self.kind, self.reverse = d, kind, reverse
        self.order = list(reversed(d.entries) if reverse else d.entries)
        self.size, self.version = len(d.entries), d.version
        self.done = False

    def python_type(self):
        return _dict_iterator_type(self.d.cls, self.kind, self.reverse)

    def _ordered(self) -> bool:
        return issubclass(self.d.cls, collections.OrderedDict)

    def next(self, tx):
        if self.done:
            return None
        d = self.d
        if self._ordered():
            if self.pos >= len(self.order):
                self.done = True  # (its next key is none: it looks at nothing more)
                return None
            if d.version != self.version:
                self.done = True
                tx.raise_python_exception(RuntimeError("OrderedDict mutated during iteration"))
            if len(d.entries) != self.size:
                self.size = -1
                tx.raise_python_exception(RuntimeError("OrderedDict changed size during iteration"))
        else:
            if len(d.entries) != self.size:
                self.size = -1  # stays broken, as a real iterator does
                tx.raise_python_exception(RuntimeError("dictionary changed size during iteration"))
            if d.version != self.version:
                raise Unsupported("iterating a dict whose keys changed without a change of size",
                                  kind="unsupported_iter")
            if self.pos >= len(self.order):
                self.done = True
                return None
        k, v = d.entries[self.order[self.pos]]
        self.pos += 1
        return k if self.kind == "keys" else v if self.kind == "values" else TupleValue([k, v])

    def children(self):
        return () if self.done else (self.d,)

    def reconstruct(self, cg):
        if self.done:
            cg.push_callable(dict_iterator_at)
            cg.load_object(self.d.cls)
            cg.load_object(self.kind)
            cg.load_object(self.reverse)
            cg.load_object(-1)
            cg.call(4)
            return
        if len(self.d.entries) != self.size or self.d.version != self.version:
            raise Unsupported("an iterator over a dict changed under it gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(dict_iterator_at)
        cg.reconstruct(self.d)
        cg.load_object(self.kind)
        cg.load_object(self.reverse)
        cg.load_object(self.pos)
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


RANGE_ITERATOR = type(iter(range(0)))


class RangeIteratorValue(_SteppedIterator):
    """A range iterator that existed before the trace (e.g. the iterator of a
    ``for`` loop a resume function starts inside).  Its range and position
    are guarded; each step yields the next int.  Advancing it changes a
    pre-existing object: after the graph the real iterator is moved to the
    new position (``__setstate__``), so it stays the same object."""

    __slots__ = ("rng", "index")

    def __init__(self, rng: range, index: int, source):
        super().__init__([])
        self.source = source
        self.rng = rng
        self.index = index

    def python_type(self):
        return RANGE_ITERATOR

    def next(self, tx):
        if self.index >= len(self.rng):
            return None
        v = const(self.rng[self.index])
        self.index += 1
        tx.side_effects.mutate(self)
        return v

    def children(self):
        return ()

    def apply_new_state(self, cg) -> None:
        """Move the real iterator to this value's position."""
        cg.load_target(self)

        def position():
            cg.load_object(min(self.index, len(self.rng)))
            return 1
        cg.call_method("__setstate__", position)
        cg.emit("POP_TOP")

"""Iterators that follow their container: a list iterator reads the list as
it is at each step, dict and set iterators notice a change of size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .constants import const
from .containers import IteratorValue

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

    __slots__ = ("container", "size_of", "what", "size", "kind", "done")

    def __init__(self, items, container, size_of, what: str, kind: str = "keys"):
        super().__init__(items)
        self.container, self.size_of, self.what, self.kind = container, size_of, what, kind
        self.size = size_of()
        self.done = False

    def python_type(self):
        return type(iter(set())) if self.kind == "set" else type(iter(getattr({}, self.kind)()))

    def next(self, tx):
        if self.done:
            return None
        if self.size_of() != self.size:
            self.size = -1  # stays broken, as a real iterator does
            tx.raise_python_exception(RuntimeError(f"{self.what} changed size during iteration"))
        v = super().next(tx)
        if v is None:
            self.done = True  # exhausted: it no longer looks at its container
        return v

    def children(self):
        return (self.container,)

    def reconstruct(self, cg):
        if not self.done and self.size_of() != self.size:
            from ..errors import Unsupported
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

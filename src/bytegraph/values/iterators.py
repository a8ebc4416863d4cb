"""Iterators that follow their container: a list iterator reads the list as
it is at each step, dict and set iterators notice a change of size."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    """An iterator over a dict (its keys, values or items: ``kind``) or a
    set (``kind="set"``): like Python's, it raises ``RuntimeError`` when the
    container changed size under it.  Reconstructs as a real iterator of the
    rebuilt container advanced to the same position."""

    __slots__ = ("container", "size_of", "what", "size", "kind", "done", "shape")

    def __init__(self, items, container, size_of, what: str, kind: str = "keys"):
        super().__init__(items)
        self.container, self.size_of, self.what, self.kind = container, size_of, what, kind
        self.size = size_of()
        self.done = False
        self.shape = self._shape()

    def _shape(self):
        """What must not change under the iterator besides its size: the
        operations applied to the set (an element removed and another added
        leave the size as it was, and CPython then walks a table the items
        snapshot does not describe)."""
        return getattr(self.container, "ops", None)

    def python_type(self):
        return type(iter(set())) if self.kind == "set" else type(iter(getattr({}, self.kind)()))

    def next(self, tx):
        if self.done:
            return None
        if self.size_of() != self.size:
            self.size = -1  # stays broken, as a real iterator does
            tx.raise_python_exception(RuntimeError(f"{self.what} changed size during iteration"))
        if self._shape() != self.shape:
            from ..errors import Unsupported
            raise Unsupported(f"iterating a {self.what} whose elements were replaced during the iteration",
                              kind="unsupported_iter", hint="CPython then follows its hash table's holes")
        v = super().next(tx)
        if v is None:
            self.done = True  # exhausted: it no longer looks at its container
        return v

    def children(self):
        return (self.container,)

    def reconstruct(self, cg):
        from ..errors import Unsupported
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
    """``iter(d)``, ``iter(d.values())`` or ``iter(d.items())`` (``kind``)
    of a dict value.  Like CPython's, each step reads the entry at the
    iterator's position in the dict as it is then (a value replaced in the
    loop is seen), and a change of the dict's size makes every later step
    raise ``RuntimeError``.  Keys inserted and deleted leaving the size as it
    was (CPython then follows its table's holes) are not modelled:
    Unsupported.  Reconstructs as a real iterator of the rebuilt dict
    advanced to the same position."""

    __slots__ = ("dict_value", "kind", "size", "key_ops", "order", "done")

    def __init__(self, dict_value, kind: str, pos: int = 0, size: int = None):
        super().__init__([])
        self.dict_value, self.kind, self.pos = dict_value, kind, pos
        #: the dict's size when the iterator was made (CPython's di_used); -1: broken for good
        self.size = len(dict_value.entries) if size is None else size
        self.key_ops = dict_value.key_ops
        #: the keys in table order (fixed while ``key_ops`` does not move)
        self.order = list(dict_value.entries)
        self.done = False

    def python_type(self):
        return type(iter(getattr({}, self.kind)()))

    def _keys_moved(self) -> bool:
        return self.dict_value.key_ops != self.key_ops

    def next(self, tx):
        if self.done:
            return None
        entries = self.dict_value.entries
        if len(entries) != self.size:
            self.size = -1  # stays broken, as a real iterator does
            tx.raise_python_exception(RuntimeError("dictionary changed size during iteration"))
        if self._keys_moved():
            from ..errors import Unsupported
            raise Unsupported("iterating a dict whose keys were replaced during the iteration",
                              kind="unsupported_iter", hint="CPython then follows its hash table's holes")
        if self.pos >= len(self.order):
            self.done = True  # exhausted: it no longer looks at its dict
            return None
        k, v = entries[self.order[self.pos]]
        self.pos += 1
        if self.kind == "keys":
            return k
        if self.kind == "values":
            return v
        from .containers import TupleValue
        return TupleValue([k, v])

    def needs_replayed_container(self) -> bool:
        """Whether it must be rebuilt after the side effects are replayed: its
        dict is a pre-existing one whose keys the trace inserted or deleted
        (``Codegen.stage_value`` leaves it to the continuation)."""
        return not self.done and self.dict_value.source is not None and bool(self.dict_value.key_log)

    def children(self):
        return () if self.done else (self.dict_value,)

    def reconstruct(self, cg):
        from ..errors import Unsupported
        if not self.done and (self.size != len(self.dict_value.entries) or self._keys_moved()):
            raise Unsupported("an iterator over a dict that changed during the iteration gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        if self.needs_replayed_container() and not cg.replayed:
            # rebuilt before the replay inserts and deletes the keys, it would
            # walk the real dict's table as it was, not as eager's iterator does
            raise Unsupported("an iterator over a pre-existing dict whose keys the trace changed gets out of the "
                              "trace", kind="unreconstructable", hint="the frame runs eagerly")
        if self.done:
            cg.push_callable(exhausted_dict_iterator)
            cg.load_object(self.kind)
            cg.call(1)
            return
        cg.push_callable(container_iterator_at)
        cg.reconstruct(self.dict_value)
        cg.load_object(self.kind)
        cg.load_object(self.pos)
        cg.call(3)


def exhausted_dict_iterator(kind: str):
    """A real iterator over a dict's ``kind`` view that has said it is exhausted."""
    it = iter(getattr({}, kind)())
    next(it, None)
    return it


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

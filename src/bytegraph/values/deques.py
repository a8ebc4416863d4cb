"""``collections.deque``: made in the trace, or an existing one read and
changed (its new contents written back in place after the graph)."""

from __future__ import annotations

import collections
from typing import List, Optional

from ..errors import Unsupported
from .base import Value, check_release
from .constants import NONE, const
from .containers import check_arity
from .generators import LazyIteratorValue


#: items a deque may hold in the trace
MAX_TRACED_ITEMS = 1000


class DequeValue(Value):
    """A ``collections.deque``: its items (values, held in a real deque that
    gets the program's operations one for one, so an iterator over it fails
    exactly when CPython's would) and ``maxlen``.  A pre-existing deque
    carries a source and is rewritten in place (``clear`` + ``extend``) when
    the trace changed it."""

    __slots__ = ("items", "maxlen", "changes", "reshaped")

    def __init__(self, items: List[Value], maxlen: Optional[int], source=None):
        super().__init__(source)
        # (a real deque of values: both ends O(1), as the program's)
        self.items, self.maxlen = collections.deque(items), maxlen
        #: operations of the trace that changed it (an iterator made before
        #: one cannot be rebuilt)
        self.changes = 0
        #: an operation other than ``d[i] = v`` changed it (CPython's deque
        #: state moved: its live iterators fail from then on)
        self.reshaped = False

    def python_type(self):
        return collections.deque

    def real_object(self):
        return None  # one real deque is one value (side-effect table)

    # -- state ------------------------------------------------------------
    def _changed(self, tx, reshaping: bool = True):
        self.changes += 1
        self.reshaped |= reshaping
        tx.side_effects.mutate(self)

    def _push(self, tx, v: Value, left: bool) -> None:
        if self.maxlen == 0:
            return
        if len(self.items) >= MAX_TRACED_ITEMS:
            # (a big queue filled in a loop: tracing every step would cost more
            # than running the loop natively)
            raise Unsupported(f"a deque of more than {MAX_TRACED_ITEMS} items", kind="unsupported_method",
                              hint="it runs natively")
        if left:
            self.items.appendleft(v)
        else:
            self.items.append(v)
        if self.maxlen is not None and len(self.items) > self.maxlen:
            check_release(self.items.pop() if left else self.items.popleft())

    def _pull_all(self, tx, iterable: Value) -> List[Value]:
        from .generators import iterate
        if iterable is self:
            return list(self.items)  # (CPython copies a deque extended by itself)
        return iterate(tx, iterable).unpack(tx)

    def call_method(self, tx, name, args, kwargs):
        handler = _METHODS.get(name)
        if handler is None:
            raise Unsupported(f"method {name}() of deque", kind="unsupported_method")
        check_arity(tx, handler, getattr(collections.deque(), name), args, kwargs)
        return handler(tx, self, *args, **kwargs)

    def get_attr(self, tx, name):
        if name == "maxlen":
            return const(self.maxlen)
        return super().get_attr(tx, name)

    # -- protocols --------------------------------------------------------
    def has_len(self):
        return True

    def truth(self, tx):
        return bool(self.items)

    def unpack(self, tx):
        return list(self.items)

    def get_iter(self, tx):
        return DequeIteratorValue(self)

    def _index(self, tx, index: Value) -> int:
        i = index.as_constant()
        if type(i) is not int and not hasattr(type(i), "__index__"):
            tx.raise_python_exception(TypeError(f"sequence index must be integer, not '{type(i).__name__}'"))
        i = i.__index__()
        n = len(self.items)
        if not -n <= i < n:
            tx.raise_python_exception(IndexError("deque index out of range"))
        return i % n

    def getitem(self, tx, index):
        return self.items[self._index(tx, index)]

    def setitem(self, tx, index, value):
        i = self._index(tx, index)
        check_release(self.items[i])
        self._changed(tx, reshaping=False)
        self.items[i] = value

    def delitem(self, tx, index):
        i = self._index(tx, index)
        check_release(self.items[i])
        self._changed(tx)
        del self.items[i]

    def children(self):
        return list(self.items)

    def reconstruct(self, cg):
        cg.push_callable(collections.deque)
        for item in self.items:
            cg.reconstruct(item)
        cg.emit("BUILD_LIST", arg=len(self.items))
        cg.load_object(self.maxlen)
        cg.call(2)

    # (codegen's replay protocol for a changed pre-existing deque)
    def staged_items(self):
        return list(self.items)

    def apply_staged(self, cg, temp: str) -> None:
        if not self.reshaped:
            # only items assigned: so in place, one by one, as eager (a live
            # iterator over the deque stays valid, which clear + extend would end)
            cg.push_callable(_assign_items)
            cg.load_target(self)
            cg.emit("LOAD_FAST", temp)
            cg.call(2)
            cg.emit("POP_TOP")
            return
        cg.load_target(self)
        cg.call_method("clear", lambda: 0)
        cg.emit("POP_TOP")
        cg.load_target(self)

        def push_temp():
            cg.emit("LOAD_FAST", temp)
            return 1
        cg.call_method("extend", push_temp)
        cg.emit("POP_TOP")

    def __repr__(self):
        return f"DequeValue({self.items}, maxlen={self.maxlen})"


class DequeIteratorValue(LazyIteratorValue):
    """``iter(deque)``: a real iterator over the value's real deque of items,
    which raises ``RuntimeError`` when the deque changed as CPython's does."""

    __slots__ = ("dq", "it", "at_change", "taken")

    def __init__(self, dq: DequeValue):
        super().__init__()
        self.dq, self.it = dq, iter(dq.items)
        self.at_change, self.taken = dq.changes, 0

    def python_type(self):
        return type(iter(collections.deque()))

    def next(self, tx):
        try:
            v = next(self.it, None)
        except RuntimeError as e:
            tx.raise_python_exception(RuntimeError(*e.args))
        self.taken += v is not None
        return v

    def children(self):
        return (self.dq,)

    def reconstruct(self, cg):
        # A new iterator over the rebuilt deque, advanced as far: only while
        # the deque is as it was when the iterator was made (else the real
        # one is poisoned), and a pre-existing deque is not rewritten after
        # the graph (that would poison the new one).
        if self.dq.changes != self.at_change or self.dq.source is not None and self.dq.changes:
            raise Unsupported("an iterator of a deque changed in the trace outlives it", kind="generator_object")
        cg.push_callable(_iterator_at)
        cg.reconstruct(self.dq)
        cg.load_object(self.taken)
        cg.call(2)


def _assign_items(d: collections.deque, items: list) -> None:
    """``d[i] = items[i]`` for each index (run by the compiled code)."""
    for i, v in enumerate(items):
        d[i] = v


def _iterator_at(d: collections.deque, taken: int):
    """``iter(d)`` advanced by ``taken`` items (run by the compiled code)."""
    it = iter(d)
    for _ in range(taken):
        next(it)
    return it


def _append(tx, dq, v):
    dq._changed(tx)
    dq._push(tx, v, left=False)
    return NONE


def _appendleft(tx, dq, v):
    dq._changed(tx)
    dq._push(tx, v, left=True)
    return NONE


def _extend(tx, dq, iterable):
    items = dq._pull_all(tx, iterable)
    dq._changed(tx)
    for v in items:
        dq._push(tx, v, left=False)
    return NONE


def _extendleft(tx, dq, iterable):
    items = dq._pull_all(tx, iterable)
    dq._changed(tx)
    for v in items:
        dq._push(tx, v, left=True)
    return NONE


def _pop(tx, dq, left=False):
    if not dq.items:
        tx.raise_python_exception(IndexError("pop from an empty deque"))
    dq._changed(tx)
    v = dq.items.popleft() if left else dq.items.pop()
    check_release(v)
    return v


def _rotate(tx, dq, n=None):
    k = 1 if n is None else n.as_constant()
    if type(k) is not int:
        raise Unsupported("deque.rotate by a non-int", kind="unsupported_method")
    dq._changed(tx)
    dq.items.rotate(k)
    return NONE


def _clear(tx, dq):
    dq._changed(tx)
    for v in dq.items:
        check_release(v)
    dq.items.clear()
    return NONE


def _copy(tx, dq):
    return DequeValue(list(dq.items), dq.maxlen)


def _reverse(tx, dq):
    dq._changed(tx)
    dq.items.reverse()
    return NONE


def _equal_item(tx, a: Value, b: Value) -> bool:
    from .operators import _equal, same_object
    if same_object(tx, a, b):
        return True
    eq = _equal(tx, a, b, item=True)
    if eq is None:
        raise Unsupported(f"deque item comparison of {a.type_name()} and {b.type_name()}",
                          kind="unsupported_operator")
    return eq


def _scan(tx, dq, x, start: int = 0, stop=None, changed=RuntimeError):
    """``(index, item == x)`` for the items from ``start`` to ``stop``, as
    CPython's deque searches run: the item asked first (``item == x``), and
    a search whose comparison changed the deque fails with ``changed`` (a
    real iterator over the real deque of items tells, as CPython's state
    counter does; a match ends the search before that check)."""
    it = iter(dq.items)
    for _ in range(start):
        next(it)
    n = len(dq.items) if stop is None else stop
    for i in range(start, n):
        try:
            v = next(it)
        except RuntimeError:
            tx.raise_python_exception(changed("deque mutated during iteration"))
        except StopIteration:  # (shrunk without a state change: cannot happen in CPython)
            raise Unsupported("a deque search over a deque changed under it", kind="unsupported_method")
        eq = _equal_item(tx, v, x)
        yield i, eq
        if i + 1 < n:
            continue
        # CPython checks the state after the last comparison too
        try:
            next(it, None)
        except RuntimeError:
            tx.raise_python_exception(changed("deque mutated during iteration"))


def _not_in(tx, x):
    if not x.is_constant():
        raise Unsupported(f"the message of deque's ValueError names a {x.type_name()}", kind="unsupported_method")
    tx.raise_python_exception(ValueError(f"{x.as_constant()!r} is not in deque"))


def _count(tx, dq, x):
    return const(sum(eq for _, eq in _scan(tx, dq, x)))


def _slice_index(tx, v: Value, n: int) -> int:
    i = v.as_constant() if v.is_constant() else None
    if i is None or not hasattr(type(i), "__index__") or isinstance(i, float):
        raise Unsupported("deque.index bounds that are not ints", kind="unsupported_method")
    i = i.__index__()
    if i < 0:
        i = max(i + n, 0)
    return i


def _index(tx, dq, x, start=None, stop=None):
    n = len(dq.items)
    lo = 0 if start is None else _slice_index(tx, start, n)
    hi = n if stop is None else min(_slice_index(tx, stop, n), n)
    lo = min(lo, hi)
    for i, eq in _scan(tx, dq, x, lo, hi):
        if eq:
            return const(i)
    _not_in(tx, x)


def _remove(tx, dq, x):
    # (3.11: IndexError when a comparison changed the deque)
    for i, eq in _scan(tx, dq, x, changed=IndexError):
        if eq:
            dq._changed(tx)
            check_release(dq.items[i])
            del dq.items[i]
            return NONE
    _not_in(tx, x)


def _contains(tx, dq, x):
    for _, eq in _scan(tx, dq, x):
        if eq:
            return const(True)
    return const(False)


def _insert(tx, dq, i, x):
    if dq.maxlen is not None and len(dq.items) >= dq.maxlen:
        tx.raise_python_exception(IndexError("deque already at its maximum size"))
    dq._changed(tx)
    dq.items.insert(i.as_constant(), x)
    return NONE


def _popleft(tx, dq):
    return _pop(tx, dq, left=True)


def _pop_right(tx, dq):
    return _pop(tx, dq)


def _len(tx, dq):
    return const(len(dq.items))


def _getitem(tx, dq, i):
    return dq.getitem(tx, i)


def _setitem(tx, dq, i, v):
    dq.setitem(tx, i, v)
    return NONE


def _delitem(tx, dq, i):
    dq.delitem(tx, i)
    return NONE


_METHODS = {
    "__len__": _len, "__getitem__": _getitem, "__setitem__": _setitem, "__delitem__": _delitem,
    "append": _append, "appendleft": _appendleft, "extend": _extend, "extendleft": _extendleft,
    "pop": _pop_right, "popleft": _popleft, "rotate": _rotate, "clear": _clear, "copy": _copy,
    "reverse": _reverse, "count": _count, "index": _index, "remove": _remove, "insert": _insert,
    "__contains__": _contains,
}


def construct_deque(tx, args, kwargs) -> Value:
    """``collections.deque([iterable[, maxlen]])``."""
    if len(args) > 2 or set(kwargs) - {"iterable", "maxlen"}:
        raise Unsupported("collections.deque with these arguments", kind="unsupported_class_call")
    iterable = args[0] if args else kwargs.get("iterable")
    maxlen = args[1] if len(args) > 1 else kwargs.get("maxlen")
    m = None if maxlen is None else maxlen.as_constant()
    if m is not None and (type(m) is not int or m < 0):
        try:
            collections.deque((), m)
        except (TypeError, ValueError) as e:
            tx.raise_python_exception(e)
        raise Unsupported("deque maxlen that is not an int", kind="unsupported_class_call")
    dq = DequeValue([], m)
    if iterable is not None:
        _extend(tx, dq, iterable)
    return dq


def wrap_existing_deque(tx, obj: collections.deque, source) -> DequeValue:
    """A deque from outside: guarded by type, length and maxlen; items read by index."""
    from ..guards import Guard
    from ..sources import AttrSource, ItemSource
    tx.guards.add(Guard("TYPE_MATCH", source, collections.deque))
    tx.guards.add(Guard("LEN_MATCH", source, len(obj)))
    tx.guards.add(Guard("CONSTANT_MATCH", AttrSource(source, "maxlen"), obj.maxlen))
    value = DequeValue([], obj.maxlen, source)
    tx.side_effects.track_existing(obj, value)
    value.items = collections.deque(tx.wrap(item, ItemSource(source, i)) for i, item in enumerate(obj))
    return value


def deque_compare(tx, op: str, a: DequeValue, b: DequeValue) -> Value:
    """``a op b`` for two deques, as CPython's deque_richcompare: ``==``/``!=``
    decided by identity and length first, then the items walked pairwise
    (``==`` asked first; the first unequal pair decides with ``op``), then the
    lengths.  A comparison that changes either deque fails as its iterator does."""
    from .operators import compare, same_object
    if op in ("==", "!="):
        if same_object(tx, a, b) or len(a.items) != len(b.items):
            eq = same_object(tx, a, b)
            return const(eq if op == "==" else not eq)
    ia, ib = DequeIteratorValue(a), DequeIteratorValue(b)
    while True:
        x = ia.next(tx)
        y = ib.next(tx)
        if x is None or y is None:
            break
        if not _equal_item(tx, x, y):
            return compare(tx, op, x, y)
    na, nb = x is not None, y is not None   # (which one has items left)
    return const({"<": nb and not na, "<=": not na, "==": not na and not nb, "!=": na or nb,
                  ">": na and not nb, ">=": not nb}[op])

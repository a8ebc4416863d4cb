"""``itertools.count``, ``repeat``, ``cycle``, ``compress`` and ``groupby`` made in the
trace: each pulls from its inputs exactly when and what CPython's pulls, and
an object that outlives the trace is rebuilt in its current state where
that state is expressible by a constructor call (count, repeat), else only
while nothing was asked of it (cycle, compress)."""

from __future__ import annotations

import itertools
import numbers

from ..errors import Unsupported
from .constants import const
from .containers import TupleValue
from .generators import LazyIteratorValue, _Untouched, iterate


class CountValue(LazyIteratorValue):
    """``itertools.count(start, step)`` over constant numbers (endless)."""

    __slots__ = ("cur", "step_by")

    def __init__(self, start, step):
        super().__init__()
        self.cur, self.step_by = start, step

    def python_type(self):
        return itertools.count

    def next(self, tx):
        v = self.cur
        self.cur = self.cur + self.step_by  # (repeated addition, as CPython's count does)
        return const(v)

    def unpack(self, tx):
        raise Unsupported("draining an endless itertools.count", kind="generator")

    def reconstruct(self, cg):
        # count(cur, step) is the same object state: its next item and step
        cg.push_callable(itertools.count)
        cg.load_object(self.cur)
        cg.load_object(self.step_by)
        cg.call(2)


class RepeatValue(LazyIteratorValue):
    """``itertools.repeat(obj[, times])``: ``obj`` itself each time."""

    __slots__ = ("obj", "left")

    def __init__(self, obj, times):
        super().__init__()
        self.obj, self.left = obj, times  # None: endless

    def python_type(self):
        return itertools.repeat

    def next(self, tx):
        if self.left is not None:
            if self.left <= 0:
                return None
            self.left -= 1
        return self.obj

    def children(self):
        return (self.obj,)

    def reconstruct(self, cg):
        cg.push_callable(itertools.repeat)
        cg.reconstruct(self.obj)
        if self.left is None:
            cg.call(1)
        else:
            cg.load_object(max(self.left, 0))
            cg.call(2)


class CycleValue(_Untouched):
    """``itertools.cycle(iterable)``: the first pass pulls the input and keeps
    each item; later passes repeat the kept items."""

    __slots__ = ("it", "saved", "pos")

    def __init__(self, tx, args):
        super().__init__(itertools.cycle, args)
        self.it, self.saved, self.pos = iterate(tx, args[0]), [], 0

    def step(self, tx):
        if self.it is not None:
            v = self.it.next(tx)
            if v is not None:
                self.saved.append(v)
                return v
            self.it = None
        if not self.saved:
            return None
        v = self.saved[self.pos % len(self.saved)]
        self.pos += 1
        return v

    def unpack(self, tx):
        raise Unsupported("draining an endless itertools.cycle", kind="generator")


class CompressValue(_Untouched):
    """``itertools.compress(data, selectors)``: one datum, then one selector,
    per step, until either runs out."""

    __slots__ = ("data", "selectors")

    def __init__(self, tx, args):
        super().__init__(itertools.compress, args)
        self.data, self.selectors = iterate(tx, args[0]), iterate(tx, args[1])

    def step(self, tx):
        while True:
            datum = self.data.next(tx)
            if datum is None:
                return None
            selector = self.selectors.next(tx)
            if selector is None:
                return None
            if selector.truth(tx):
                return datum


_UNSET = object()


class GroupbyValue(LazyIteratorValue):
    """``itertools.groupby(iterable, key)``: CPython's state machine (the
    current item and key, the key of the group being handed out, and which
    grouper is current), so items are pulled, keys computed and compared in
    its order.  Not rebuilt if it outlives the trace."""

    __slots__ = ("it", "keyfunc", "tgtkey", "currkey", "currvalue", "current")

    def __init__(self, it, keyfunc):
        super().__init__()
        self.it, self.keyfunc = it, keyfunc
        self.tgtkey = self.currkey = self.currvalue = _UNSET
        self.current = None

    def python_type(self):
        return itertools.groupby

    def advance(self, tx) -> bool:
        v = self.it.next(tx)
        if v is None:
            return False
        self.currkey = v if self.keyfunc is None else self.keyfunc.call(tx, [v], {})
        self.currvalue = v
        return True

    def keys_equal(self, tx) -> bool:
        from .operators import _equal
        eq = _equal(tx, self.tgtkey, self.currkey, item=True)
        if eq is None:
            raise Unsupported(f"groupby keys {self.tgtkey.type_name()} and {self.currkey.type_name()} compared",
                              kind="unsupported_operator")
        return eq

    def next(self, tx):
        self.current = None
        while True:
            if self.currkey is _UNSET:
                if not self.advance(tx):
                    return None
            elif self.tgtkey is _UNSET or not self.keys_equal(tx):
                break
            elif not self.advance(tx):
                return None
        self.tgtkey = self.currkey
        self.current = GrouperValue(self, self.tgtkey)
        return TupleValue([self.currkey, self.current])

    def reconstruct(self, cg):
        raise Unsupported("an itertools.groupby object outlives the trace", kind="generator_object")


class GrouperValue(LazyIteratorValue):
    """One group of a :class:`GroupbyValue`: valid while it is the current one."""

    __slots__ = ("parent", "tgtkey")

    def __init__(self, parent: GroupbyValue, tgtkey):
        super().__init__()
        self.parent, self.tgtkey = parent, tgtkey

    def python_type(self):
        return type(next(itertools.groupby([1]))[1])

    def next(self, tx):
        gb = self.parent
        if gb.current is not self:
            return None
        if gb.currvalue is _UNSET:
            if not gb.advance(tx):
                return None
        from .operators import _equal
        eq = _equal(tx, self.tgtkey, gb.currkey, item=True)
        if eq is None:
            raise Unsupported("groupby keys compared", kind="unsupported_operator")
        if not eq:
            return None
        v, gb.currvalue = gb.currvalue, _UNSET
        return v

    def reconstruct(self, cg):
        raise Unsupported("an itertools.groupby group outlives the trace", kind="generator_object")


def _groupby(tx, args, kwargs):
    if len(args) + len(kwargs) not in (1, 2) or set(kwargs) - {"iterable", "key"}:
        raise Unsupported("itertools.groupby with these arguments", kind="unsupported_builtin")
    iterable = args[0] if args else kwargs["iterable"]
    key = args[1] if len(args) > 1 else kwargs.get("key")
    if key is not None and key.is_constant() and key.as_constant() is None:
        key = None
    return GroupbyValue(iterate(tx, iterable), key)


def _number(v) -> bool:
    return v.is_constant() and issubclass(type(v.as_constant()), numbers.Number)


def _count(tx, args, kwargs):
    names = ("start", "step")
    if len(args) > 2 or set(kwargs) - set(names) or any(n in kwargs for n in names[:len(args)]):
        raise Unsupported("itertools.count with these arguments", kind="unsupported_builtin")
    bound = dict(zip(names, args), **kwargs)
    start, step = bound.get("start", const(0)), bound.get("step", const(1))
    if not (_number(start) and _number(step)):
        try:
            itertools.count(start.as_constant(), step.as_constant())
        except TypeError as e:  # CPython's own check
            tx.raise_python_exception(e)
        raise Unsupported("itertools.count of values that are not numbers", kind="unsupported_builtin")
    return CountValue(start.as_constant(), step.as_constant())


def _repeat(tx, args, kwargs):
    if len(args) + len(kwargs) not in (1, 2) or set(kwargs) - {"object", "times"}:
        raise Unsupported("itertools.repeat with these arguments", kind="unsupported_builtin")
    obj = args[0] if args else kwargs["object"]
    times = args[1] if len(args) > 1 else kwargs.get("times")
    if times is not None:
        if not (times.is_constant() and type(times.as_constant()) is int):
            raise Unsupported("itertools.repeat with a count that is not an int constant",
                              kind="unsupported_builtin")
        times = max(times.as_constant(), 0)
    return RepeatValue(obj, times)


def _cycle(tx, args, kwargs):
    if len(args) != 1 or kwargs:
        raise Unsupported("itertools.cycle with these arguments", kind="unsupported_builtin")
    return CycleValue(tx, args)


def _compress(tx, args, kwargs):
    if kwargs or len(args) != 2:
        raise Unsupported("itertools.compress with these arguments", kind="unsupported_builtin")
    return CompressValue(tx, args)


MORE_ITERTOOLS_HANDLERS = {
    itertools.count: _count, itertools.repeat: _repeat, itertools.cycle: _cycle,
    itertools.compress: _compress, itertools.groupby: _groupby,
}

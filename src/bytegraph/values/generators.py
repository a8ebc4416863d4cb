"""Lazy iterators: generators backed by a paused tracer frame, and the
``map``/``filter``/``zip``/``enumerate``/``itertools`` objects over them.

Each produces one item per ``next`` and pulls from its inputs only what that
item needs, in Python's order, so side effects of producing items (and the
state the producer reads) happen exactly when Python would have them.

An object that must exist for real after the trace is rebuilt only when that
is exact: a generator never started is the generator function called again
with the same arguments (calling one runs no user code); ``map``/``filter``/
``zip``/``enumerate`` objects hold nothing but their inputs (and a count), so
they are rebuilt over their rebuilt inputs.  Anything else (a generator paused
inside its body) raises ``Unsupported(kind="generator_object")``: the frame runs
eagerly and gets the real object.
"""

from __future__ import annotations

import itertools
import types
from typing import List, Optional

from .. import config
from ..errors import Unsupported, UserException
from .base import Value
from .constants import NONE, const, is_none
from .containers import IteratorValue, TupleValue


class LazyIteratorValue(IteratorValue):
    """Base of the iterators that compute each item when asked (``next``
    returns the item, or None when exhausted).  Draining one (``list(it)``)
    asks item by item, with a bound for endless producers."""

    __slots__ = ()

    def __init__(self):
        super().__init__([])

    def unpack(self, tx):
        return drain(tx, self.next)

    def truth(self, tx):
        return True  # no __bool__ or __len__

    def children(self):
        return ()


def drain(tx, next_item) -> list:
    """Every item ``next_item(tx)`` gives until it gives None (``list(it)``).

    Past ``config.max_python_loop_iterations`` items with no tensor operation
    recorded, the call draining it runs natively (break kind
    ``long_iteration``), as a long loop of pure Python does (tracer/frame.py):
    thousands of traced ``__next__`` calls buy a backend nothing and cost
    seconds.  Past ``config.max_generator_items`` it is taken for endless."""
    out = []
    ops = tx.trace.graph.op_count
    while (v := next_item(tx)) is not None:
        out.append(v)
        if len(out) == config.max_python_loop_iterations and tx.trace.graph.op_count == ops:
            raise Unsupported(f"draining an iterator of more than {len(out)} items with no tensor operation",
                              kind="long_iteration",
                              hint="the call runs natively (config.max_python_loop_iterations sets the limit)")
        if len(out) > config.max_generator_items:
            raise Unsupported(f"an iterator yields more than {config.max_generator_items} items",
                              kind="generator", hint="endless iterators cannot be drained in a trace")
    return out


def iterate(tx, v: Value) -> IteratorValue:
    """``iter(v)`` as an iterator value (an iterator is its own iterator)."""
    if isinstance(v, IteratorValue):
        return v
    it = v.get_iter(tx)
    if not isinstance(it, IteratorValue):
        raise Unsupported(f"iterating a {v.type_name()}", kind="unsupported_iter")
    return it


def _stop_iteration_error(exc: Value) -> Value:
    """PEP 479: a ``StopIteration`` leaving a generator's frame becomes a ``RuntimeError``."""
    from .objects import ExceptionValue
    if isinstance(exc, ExceptionValue) and issubclass(exc.exc_type, StopIteration):
        return ExceptionValue(RuntimeError, [const("generator raised StopIteration")])
    return exc


class GeneratorValue(LazyIteratorValue):
    """The generator object a generator function (or generator expression)
    returned in the trace: ``frame`` is its code, paused at its last
    ``yield`` (``state``: "created", "suspended" or "done").  ``next``,
    ``send``, ``throw`` and ``close`` resume the frame until its next ``yield``
    or its end; the frame is resumed as a callee of the frame that resumes it.

    ``call`` is ``(function, args, kwargs)`` of the call that made it: a
    generator never started is rebuilt by that call.  One that has started
    cannot be rebuilt (kind ``generator_object``: the frame runs eagerly).
    """

    __slots__ = ("frame", "call", "state", "running", "count", "result", "origin")

    def __init__(self, frame, call):
        super().__init__()
        #: where it was made (tracer.frame.GeneratorOrigin)
        self.origin = None
        self.frame = frame
        self.call = call
        self.state = "created"
        self.running = False
        self.count = 0
        #: the value of the StopIteration the last resume ended with
        self.result: Value = NONE

    def python_type(self):
        return types.GeneratorType

    # -- resuming --------------------------------------------------------------
    def next(self, tx) -> Optional[Value]:
        return self.send(tx, NONE)

    def send(self, tx, value: Value) -> Optional[Value]:
        """Resume with ``value`` as the result of the paused ``yield``; the next
        yielded value, or None when the generator returned (``result``)."""
        if self.state == "done":
            self._check_running(tx)
            self.result = NONE
            return None
        if self.state == "created":
            if not is_none(value):
                tx.raise_python_exception(TypeError("can't send non-None value to a just-started generator"))
            return self._run(tx, self.frame.run)
        frame = self.frame

        def resume():
            frame.stack[-1] = value
            frame.resume()
        return self._run(tx, resume)

    def throw(self, tx, exc: Value) -> Optional[Value]:
        """Raise ``exc`` at the paused ``yield`` (through a ``yield from`` first)."""
        self._check_running(tx)
        if self.state == "done":
            raise UserException(exc)
        if self.state == "created":
            # raised before the first instruction: no handler can see it
            self.state = "done"
            raise UserException(_stop_iteration_error(exc))
        frame = self.frame
        delegate = frame.yield_from_delegate()
        if delegate is not None:
            if issubclass(exc.python_type(), GeneratorExit):
                exc = self._close_delegate(tx, delegate, exc)
            elif isinstance(delegate, GeneratorValue):
                self.running = True
                try:
                    item = delegate.throw(tx, exc)
                except UserException as e:
                    exc = e.value  # raised at our own yield from
                else:
                    if item is not None:  # the delegate yielded: we stay paused in the yield from
                        frame.yielded_value = item
                        return item
                    result = delegate.result
                    self.running = False
                    return self._run(tx, lambda: frame.finish_yield_from(result))
                finally:
                    self.running = False
            elif not _is_plain(delegate):
                raise Unsupported(f"throw() through `yield from` a {delegate.type_name()}", kind="generator")
        return self._run(tx, lambda: frame.throw(exc))

    def close(self, tx) -> Value:
        from .objects import ExceptionValue
        self._check_running(tx)
        if self.state != "suspended":
            self.state = "done"
            return NONE
        try:
            item = self.throw(tx, ExceptionValue(GeneratorExit, []))
        except UserException as e:
            if issubclass(e.value.python_type(), (GeneratorExit, StopIteration)):
                return NONE
            raise
        if item is not None:
            tx.raise_python_exception(RuntimeError("generator ignored GeneratorExit"))
        return NONE

    def _close_delegate(self, tx, delegate, exc):
        """Closing while in ``yield from``: close the delegate first; what it
        raises is then raised at our own ``yield``, else ``exc``."""
        if isinstance(delegate, GeneratorValue):
            try:
                delegate.close(tx)
            except UserException as e:
                return e.value
            return exc
        if _is_plain(delegate):
            return exc  # no close() to call
        raise Unsupported(f"close() through `yield from` a {delegate.type_name()}", kind="generator")

    def _check_running(self, tx):
        if self.running:
            tx.raise_python_exception(ValueError("generator already executing"))

    def _run(self, tx, action) -> Optional[Value]:
        self._check_running(tx)
        frame = self.frame
        # resumed as a callee of the frame asking (as CPython links gi_frame)
        if tx.depth + 1 > config.max_inline_depth:
            raise Unsupported(f"call depth over {config.max_inline_depth} resuming a generator",
                              kind="recursion_limit")
        frame.parent = tx
        frame.depth = tx.depth + 1
        self.running = True
        try:
            action()
        except UserException as e:
            self.state = "done"
            exc = _stop_iteration_error(e.value)
            if exc is e.value:
                raise
            raise UserException(exc) from None
        finally:
            self.running = False
        if frame.suspended:
            self.state = "suspended"
            self.count += 1
            if self.count > config.max_generator_items:
                raise Unsupported(f"generator yields more than {config.max_generator_items} items",
                                  kind="generator", hint="infinite generators cannot be traced")
            return frame.yielded_value
        self.state = "done"
        self.result = frame.return_value
        return None

    # -- as an object ----------------------------------------------------------
    def get_attr(self, tx, name):
        if name == "gi_running":
            return const(self.running)
        if name == "gi_suspended":
            return const(self.state == "suspended")
        if name == "gi_code":
            from .constants import ConstantValue
            return ConstantValue(self.frame.code)
        if name in ("__name__", "__qualname__") and self.call is not None:
            return self.call[0].get_attr(tx, name)
        return super().get_attr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            return super().call_method(tx, name, args, kwargs)
        if name in ("__next__", "send") and len(args) == (name == "send"):
            item = self.send(tx, args[0] if args else NONE)
            if item is None:
                raise_stop_iteration(tx, self.result)
            return item
        if name == "throw" and 1 <= len(args) <= 3:
            item = self.throw(tx, _exception_to_throw(tx, args))
            if item is None:
                raise_stop_iteration(tx, self.result)
            return item
        if name == "close" and not args:
            return self.close(tx)
        if name == "__iter__" and not args:
            return self
        return super().call_method(tx, name, args, kwargs)

    def children(self):
        if self.state == "created" and self.call is not None:
            func, args, kwargs = self.call
            return [func, *args, *kwargs.values()]
        return ()

    def close_is_silent(self) -> bool:
        """Would closing it (as dropping it does) run no user code?  True when
        it is not paused, or paused where ``GeneratorExit`` passes only
        through ``except`` clauses that do not match it (in it and in what it
        delegates to).  Found by closing it with only the opcodes such a
        clause uses: the trace is over, so the generator is not used again."""
        if self.state != "suspended":
            return True
        frames, todo = [], [self]
        while todo:
            g = todo.pop()
            if g.state == "suspended":
                frames.append(g.frame)
                d = g.frame.yield_from_delegate()
                if isinstance(d, GeneratorValue):
                    todo.append(d)
                elif d is not None and not _is_plain(d):
                    return False
        from ..tracer.frame import SILENT_DISPATCH, TraceStopped
        for f in frames:
            f.dispatch = SILENT_DISPATCH
        trace = self.frame.trace
        saved = trace.stop_step
        trace.stop_step = trace.steps + _SILENT_CLOSE_STEPS  # a clause that loops is not silent
        try:
            self.close(self.frame.parent)
        except (Unsupported, UserException, TraceStopped):
            return False
        finally:
            trace.stop_step = saved
        return True

    def reconstruct(self, cg):
        if self.state != "created" or self.call is None:
            raise Unsupported("a generator that ran in the trace outlives it", kind="generator_object",
                              hint="the frame runs eagerly, so it gets a real generator")
        func, args, kwargs = self.call
        cg.begin_call()
        cg.reconstruct(func)
        cg.call_with(args, kwargs)

    def __repr__(self):
        return f"GeneratorValue({self.frame.fn_name}, {self.state})"


#: trace steps closing a generator silently may take
_SILENT_CLOSE_STEPS = 1000


def _is_plain(it: Value) -> bool:
    """An iterator with no ``send``/``throw``/``close`` (``yield from`` one just steps it)."""
    from .modules import UserIteratorValue
    return isinstance(it, IteratorValue) and not isinstance(it, (GeneratorValue, UserIteratorValue))


def raise_stop_iteration(tx, value: Value):
    """Raise ``StopIteration`` carrying a generator's return value (none for None, as CPython)."""
    from .objects import ExceptionValue
    raise UserException(ExceptionValue(StopIteration, [] if is_none(value) else [value]))


def _exception_to_throw(tx, args: List[Value]) -> Value:
    """The exception ``gen.throw(typ[, val[, tb]])`` raises."""
    from .objects import ClassValue, ExceptionValue
    typ = args[0]
    if len(args) == 3 and not is_none(args[2]):
        raise Unsupported("generator.throw() with a traceback", kind="generator")
    val = args[1] if len(args) > 1 else NONE
    if isinstance(typ, ExceptionValue):
        if not is_none(val):
            tx.raise_python_exception(TypeError("instance exception may not have a separate value"))
        return typ
    if isinstance(typ, ClassValue) and isinstance(typ.cls, type) and issubclass(typ.cls, BaseException):
        if isinstance(val, ExceptionValue) and issubclass(val.exc_type, typ.cls):
            return val
        if is_none(val):
            return ExceptionValue(typ.cls, [])
        if isinstance(val, TupleValue):
            return ExceptionValue(typ.cls, list(val.items))
        return ExceptionValue(typ.cls, [val])
    if typ.is_constant() and isinstance(typ.as_constant(), type) and issubclass(typ.as_constant(), BaseException):
        return _exception_to_throw(tx, [ClassValue(typ.as_constant())] + list(args[1:]))
    raise Unsupported(f"generator.throw() of a {typ.type_name()}", kind="generator")


class MapValue(LazyIteratorValue):
    """``map(fn, *iterables)``: each item pulls one item from every input (in
    order, stopping at the first exhausted one) and calls ``fn``.  Rebuilt as
    ``map(fn, *inputs)`` over its rebuilt inputs."""

    __slots__ = ("fn", "iters")

    def __init__(self, fn: Value, iters: List[IteratorValue]):
        super().__init__()
        self.fn, self.iters = fn, iters

    def python_type(self):
        return map

    def next(self, tx):
        args = []
        for it in self.iters:
            v = it.next(tx)
            if v is None:
                return None
            args.append(v)
        if not self.iters:
            return None
        return call_stopping(tx, self.fn, args)

    def children(self):
        return [self.fn, *self.iters]

    def reconstruct(self, cg):
        cg.push_callable(map)
        cg.call_with([self.fn, *self.iters], {})


def call_stopping(tx, fn: Value, args: List[Value]) -> Optional[Value]:
    """``fn(*args)`` inside an iterator's ``__next__``: a StopIteration it raises ends the iteration."""
    try:
        return fn.call(tx, args, {})
    except UserException as e:
        if issubclass(e.value.python_type(), StopIteration):
            return None
        raise


class FilterValue(LazyIteratorValue):
    """``filter(fn, iterable)``: pulls items until one passes.  Rebuilt as
    ``filter(fn, input)``."""

    __slots__ = ("fn", "it")

    def __init__(self, fn: Value, it: IteratorValue):
        super().__init__()
        self.fn, self.it = fn, it

    def python_type(self):
        return filter

    def next(self, tx):
        while True:
            v = self.it.next(tx)
            if v is None:
                return None
            if is_none(self.fn):
                keep = v
            else:
                keep = call_stopping(tx, self.fn, [v])
                if keep is None:
                    return None
            if keep.truth(tx):
                return v

    def children(self):
        return [self.fn, self.it]

    def reconstruct(self, cg):
        cg.push_callable(filter)
        cg.call_with([self.fn, self.it], {})


class ZipValue(LazyIteratorValue):
    """``zip(*iterables, strict=...)``: each item pulls one item from every
    input in order; the first exhausted input ends it (items already pulled
    from the inputs before it are lost, as in Python).  Rebuilt as ``zip``
    over its rebuilt inputs."""

    __slots__ = ("iters", "strict")

    def __init__(self, iters: List[IteratorValue], strict: bool):
        super().__init__()
        self.iters, self.strict = iters, strict

    def python_type(self):
        return zip

    def next(self, tx):
        if not self.iters:
            return None
        items = []
        for i, it in enumerate(self.iters):
            v = it.next(tx)
            if v is None:
                if self.strict:
                    self._check_strict(tx, i)
                return None
            items.append(v)
        return TupleValue(items)

    def _check_strict(self, tx, i: int):
        def plural(n):
            return " " if n == 1 else "s 1-"
        if i > 0:
            tx.raise_python_exception(ValueError(f"zip() argument {i + 1} is shorter than argument{plural(i)}{i}"))
        for j in range(1, len(self.iters)):
            if self.iters[j].next(tx) is not None:
                tx.raise_python_exception(ValueError(f"zip() argument {j + 1} is longer than argument{plural(j)}{j}"))

    def children(self):
        return list(self.iters)

    def reconstruct(self, cg):
        cg.push_callable(zip)
        for it in self.iters:
            cg.reconstruct(it)
        if self.strict:
            cg.load_object(True)
            cg.call(len(self.iters) + 1, kw_names=("strict",))
        else:
            cg.call(len(self.iters))


class EnumerateValue(LazyIteratorValue):
    """``enumerate(iterable, start)``: pairs the count with each pulled item.
    Rebuilt as ``enumerate(input, count)``."""

    __slots__ = ("it", "count")

    def __init__(self, it: IteratorValue, start: int):
        super().__init__()
        self.it, self.count = it, start

    def python_type(self):
        return enumerate

    def next(self, tx):
        v = self.it.next(tx)
        if v is None:
            return None
        out = TupleValue([const(self.count), v])
        self.count += 1
        return out

    def children(self):
        return [self.it]

    def reconstruct(self, cg):
        cg.push_callable(enumerate)
        cg.reconstruct(self.it)
        cg.load_object(self.count)
        cg.call(2)


class _Untouched(LazyIteratorValue):
    """An iterator rebuilt by calling its constructor again, as long as no item was asked of it."""

    __slots__ = ("ctor", "args", "started")

    def __init__(self, ctor, args: List[Value]):
        super().__init__()
        self.ctor, self.args, self.started = ctor, list(args), False

    def python_type(self):
        return self.ctor

    def next(self, tx):
        self.started = True
        return self.step(tx)

    def children(self):
        return list(self.args)

    def reconstruct(self, cg):
        if self.started:
            raise Unsupported(f"an itertools.{self.ctor.__name__} object advanced in the trace outlives it",
                              kind="generator_object", hint="the frame runs eagerly")
        cg.push_callable(self.ctor)
        cg.call_with(self.args, {})


class IsliceValue(_Untouched):
    """``itertools.islice(iterable, [start,] stop[, step])``, pulling exactly
    what CPython's islice pulls (it skips to ``start`` on the first item and
    never reads past ``stop``)."""

    __slots__ = ("it", "cnt", "next_at", "stop", "step_by")

    def __init__(self, it: IteratorValue, args, start: int, stop: Optional[int], step: int):
        super().__init__(itertools.islice, args)
        self.it, self.cnt, self.next_at, self.stop, self.step_by = it, 0, start, stop, step

    def step(self, tx):
        if self.it is None:
            return None
        while self.cnt < self.next_at:
            if self.it.next(tx) is None:
                self.it = None
                return None
            self.cnt += 1
        if self.stop is not None and self.cnt >= self.stop:
            self.it = None
            return None
        v = self.it.next(tx)
        if v is None:
            self.it = None
            return None
        self.cnt += 1
        self.next_at += self.step_by
        if self.stop is not None and self.next_at > self.stop:
            self.next_at = self.stop
        return v


class ChainValue(_Untouched):
    """``itertools.chain(*iterables)``: each input is iterated (``iter()``
    called) only when the previous one is exhausted."""

    __slots__ = ("pending", "active")

    def __init__(self, args):
        super().__init__(itertools.chain, args)
        self.pending, self.active = list(args), None

    def step(self, tx):
        while True:
            if self.active is None:
                if not self.pending:
                    return None
                self.active = iterate(tx, self.pending.pop(0))
            v = self.active.next(tx)
            if v is not None:
                return v
            self.active = None


class AccumulateValue(_Untouched):
    """``itertools.accumulate(iterable[, func], initial=...)``, one input item per item."""

    __slots__ = ("it", "func", "total", "initial")

    def __init__(self, it: IteratorValue, args, func: Optional[Value], initial: Optional[Value]):
        super().__init__(itertools.accumulate, args)
        self.it, self.func, self.total, self.initial = it, func, None, initial

    def step(self, tx):
        import operator
        from .operators import binary_op
        if self.initial is not None:
            self.total, self.initial = self.initial, None
            return self.total
        v = self.it.next(tx)
        if v is None:
            return None
        if self.total is None:
            self.total = v
        elif self.func is None:
            self.total = binary_op(tx, operator.add, self.total, v)
        else:
            self.total = self.func.call(tx, [self.total, v], {})
        return self.total

    def reconstruct(self, cg):
        raise Unsupported("an itertools.accumulate object outlives the trace", kind="generator_object",
                          hint="the frame runs eagerly")


class SequenceIteratorValue(LazyIteratorValue):
    """``iter(obj)`` for an object with ``__getitem__`` and no ``__iter__``:
    items ``obj[0]``, ``obj[1]``, ... until ``IndexError`` or ``StopIteration``
    (then it stays exhausted).  Rebuilt as ``iter(obj)`` before its first item."""

    __slots__ = ("obj", "index")

    def __init__(self, obj: Value):
        super().__init__()
        self.obj, self.index = obj, 0

    def python_type(self):
        return _SEQ_ITERATOR

    def next(self, tx):
        if self.obj is None:
            return None
        try:
            v = self.obj.getitem(tx, const(self.index))
        except UserException as e:
            if issubclass(e.value.python_type(), (IndexError, StopIteration)):
                self.obj = None
                return None
            raise
        self.index += 1
        return v

    def children(self):
        return [self.obj] if self.obj is not None else []

    def reconstruct(self, cg):
        if self.index != 0 or self.obj is None:
            raise Unsupported("a sequence iterator advanced in the trace outlives it", kind="generator_object",
                              hint="the frame runs eagerly")
        cg.push_callable(iter)
        cg.call_with([self.obj], {})


class _OldSequence:
    def __getitem__(self, i):
        raise IndexError


#: the type of ``iter()`` of an object iterated through ``__getitem__``
_SEQ_ITERATOR = type(iter(_OldSequence()))


class SnapshotIteratorValue(IteratorValue):
    """An iterator whose items were all computed when it was made, as Python
    does (``itertools.product``/``combinations``/``permutations`` read their
    inputs whole), standing for a ``cls`` object.  Only the frame's own code
    after a graph break may get a plain iterator over the remaining items."""

    __slots__ = ("cls",)

    def __init__(self, items, cls):
        super().__init__(items)
        self.cls = cls

    def python_type(self):
        return self.cls

    def truth(self, tx):
        return True

    def reconstruct(self, cg):
        if not cg.continuation:
            raise Unsupported(f"a {self.cls.__qualname__} object made in the trace outlives it",
                              kind="generator_object", hint="the frame runs eagerly")
        super().reconstruct(cg)

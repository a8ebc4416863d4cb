"""How many graphs a graph break costs (issue 13, category 10).

Two rules keep the count down, each checked here against eager Python
(results, side effects, exceptions, lifetimes) and by the graphs a counting
backend saw:

* A break inside inlined calls hands each inner frame's continuation to its
  caller's continuation (``config.compose_continuations``): the code after
  the break, in every frame of the chain, is one graph, where each frame's
  continuation used to make its own.
* A "graph" of Python number arithmetic only (a loop counter made dynamic,
  ``total += i`` in an outlined loop body) is not given to the backend: its
  own Python code runs.  A backend sees only graphs with tensor work.
"""

import gc
import weakref

import pytest
import torch

import bytegraph
from bytegraph import config
from conftest import CountingBackend, assert_same

LOG = []


def quiet_print(*args):
    print(*args, end="", file=_NullFile())


class _NullFile:
    def write(self, s):
        LOG.append(("printed", s))

    def flush(self):
        pass


class _Sink:
    """A file whose ``write`` records into LOG (print is a C function that
    cannot tell which frame calls it: the break's glue code may run it)."""

    def write(self, s):
        if s:
            LOG.append(("native", s))

    def flush(self):
        pass


class _RaisingSink(_Sink):
    def write(self, s):
        if s:
            LOG.append(("raise", s))
            raise ValueError(s)


SINK, RAISING_SINK = _Sink(), _RaisingSink()


def native(tag):
    """A graph break (print), recording the order of effects in LOG."""
    print(tag, end="", file=SINK)


def native_raising(tag):
    print(tag, end="", file=RAISING_SINK)


@pytest.fixture(autouse=True)
def _clear_log():
    LOG.clear()
    yield
    LOG.clear()


def run(fn, *args, graphs, breaks, calls=3, recompiles=0):
    """Compiled equals eager (result and LOG) on every call; then the counts."""
    LOG.clear()
    expected = fn(*args)
    expected_log = list(LOG)
    be = CountingBackend()
    compiled = bytegraph.compile(fn, backend=be)
    for _ in range(calls):
        LOG.clear()
        got = compiled(*args)
        assert repr(got) == repr(expected)
        assert LOG == expected_log
    stats = bytegraph.stats()
    assert (be.count, stats.graph_breaks) == (graphs, breaks), stats
    assert stats.eager_fallbacks == 0, stats
    if recompiles is not None:
        assert stats.recompiles == recompiles, stats
    return be


# -- a break inside inlined calls: one graph after it ----------------------

def helper(x):
    x = x + 2
    native("in helper")
    return x + 3


def test_code_after_a_break_in_a_helper_is_one_graph():
    def f(x):
        x = x + 1
        x = helper(x)
        return x + 4

    be = run(f, torch.ones(2), graphs=2, breaks=1)
    # before: x + 1, x + 2; after: x + 3 in the helper and x + 4 in the caller
    assert be.op_counts() == [2, 2]


def test_three_frames_deep():
    def h(x):
        x = x * 3
        native("h")
        return x - 1

    def g(x):
        return h(x + 2) * 5

    def f(x):
        return g(x + 1) + 6

    be = run(f, torch.ones(2), graphs=2, breaks=1)
    assert be.op_counts() == [3, 3]


def test_keyword_call_at_the_break():
    def inner(x):
        print("a", "b", sep="-", end="", file=SINK)   # keyword names on the native call
        return x + 1

    def f(x):
        return inner(x * 2) + 1

    be = run(f, torch.ones(2), graphs=2, breaks=1)
    assert be.op_counts() == [1, 2]
    assert LOG == [("native", "a"), ("native", "-"), ("native", "b")]


def test_method_call_at_the_break():
    def inner(x):
        n = len(x.tolist())            # a tensor method run natively (data-dependent)
        return x + n

    def f(x):
        return inner(x * 2) + 1

    be = run(f, torch.ones(3), graphs=2, breaks=1)
    assert be.op_counts() == [1, 2]


def test_side_effects_keep_their_order_across_frames():
    def inner(x, log):
        log.append("before")
        native("break")
        log.append("after")
        return x + len(log)

    def f(x, log):
        y = inner(x, log)
        log.append("outer")
        return y, list(log)

    compiled = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        eager_log, compiled_log = [], []
        want = f(torch.ones(2), eager_log)
        got = compiled(torch.ones(2), compiled_log)
        assert repr(got) == repr(want) and compiled_log == eager_log == ["before", "after", "outer"]
    assert bytegraph.stats().graph_breaks == 1


def test_an_exception_of_the_native_call_propagates_through_both_frames():
    def inner(x):
        x = x + 1
        native_raising("boom")
        return x

    def f(x):
        return inner(x) * 2

    compiled = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        LOG.clear()
        with pytest.raises(ValueError, match="boom"):
            compiled(torch.ones(2))
        assert LOG == [("raise", "boom")]


def test_an_exception_of_the_native_call_is_caught_by_the_callers_handler():
    def inner(x):
        x = x + 1
        native_raising("caught")
        return x

    def f(x):
        try:
            y = inner(x)
        except ValueError:
            native("handled")
            y = x - 1
        return y * 2

    # inside the caller's try block the glue cannot run the call: the inner
    # continuation runs (natively) inside the caller's continuation's block
    run(f, torch.ones(2), graphs=2, breaks=4)


def test_an_exception_after_the_break_in_the_inner_frame():
    def inner(x, k):
        native("n")
        if k:
            raise KeyError(k)
        return x

    def f(x, k):
        try:
            return inner(x + 1, k)
        except KeyError as e:
            return x * 0 + len(e.args)

    for k in ("", "key"):
        bytegraph.reset()
        LOG.clear()
        want = f(torch.ones(2), k)
        compiled = bytegraph.compile(f, backend="eager")
        assert torch.equal(compiled(torch.ones(2), k), want)


def test_a_second_break_in_the_inner_continuation():
    def inner(x):
        x = x + 1
        native("first")
        x = x * 2
        native("second")
        return x - 3

    def f(x):
        return inner(x) + 4

    # the caller's continuation cannot inline the inner one (it breaks again):
    # the inner continuation runs natively and breaks on its own; the first
    # attempt is not counted as a break of its own
    be = run(f, torch.ones(2), graphs=4, breaks=2)
    assert sum(be.op_counts()) == 4


def test_an_argument_deleted_after_the_break_is_collected():
    class T:
        pass

    def inner(obj, x):
        ref = weakref.ref(obj)
        native("n")
        del obj
        gc.collect()
        return x + 1, ref() is None

    def f(x):
        return inner(T(), x)

    assert f(torch.ones(2))[1] is True
    compiled = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        assert compiled(torch.ones(2))[1] is True


def test_an_inlined_continuation_does_not_keep_the_inner_frames_tensors():
    def inner(t, refs):
        refs.append(weakref.ref(t))   # the break (run by the glue code); t is only this frame's
        return t.sum()

    def f(x, refs):
        y = inner(x * 2, refs)
        return y, refs[0]() is None   # eager: inner returned, its t is gone

    compiled = bytegraph.compile(f, backend="eager")
    for _ in range(3):
        assert f(torch.ones(3), [])[1] is True
        assert compiled(torch.ones(3), [])[1] is True
    assert bytegraph.stats().eager_fallbacks == 0


def test_switched_off_each_frame_continues_on_its_own():
    def f(x):
        x = x + 1
        x = helper(x)
        return x + 4

    saved = config.compose_continuations
    config.compose_continuations = False
    try:
        run(f, torch.ones(2), graphs=3, breaks=2)
    finally:
        config.compose_continuations = saved


def test_generator_and_loop_frames_keep_their_own_continuations():
    def gen(x):
        for i in range(2):
            native(i)
            yield x + i

    def f(x):
        return sum(gen(x))

    assert_same(f, torch.ones(2), graphs=None, breaks=None)


# -- a break inside a loop: no "graph" for counter arithmetic --------------

def test_for_loop_with_a_break_gives_the_graphs_before_and_after_it():
    def f(x):
        y = x + 1
        total = 0
        for i in range(3):
            native(i)
            total += i
        return y, x + total

    be = run(f, torch.ones(4), graphs=2, breaks=2, recompiles=None)
    assert be.op_counts() == [1, 1]


def test_while_loop_counter_is_not_a_graph():
    def f(x):
        y = x + 1
        i = 0
        while i < 3:
            native(i)
            i += 1
        return y, x + i

    run(f, torch.ones(4), graphs=2, breaks=2, recompiles=None)


def test_loop_with_break_statement_and_else():
    def f(x):
        found = False
        r = 0
        for i in range(5):
            native(i)
            if i == 3:
                break
            r += i
        else:
            found = True
        return x + r, found

    run(f, torch.ones(4), graphs=1, breaks=2, recompiles=None)


def test_scalar_arithmetic_graph_is_never_given_to_inductor():
    def f(x, n):
        native("n")
        return n * 3 + 1, n // 2

    be = CountingBackend("inductor")
    compiled = bytegraph.compile(f, backend=be)
    assert compiled(torch.ones(2), 5) == (16, 2)
    assert compiled(torch.ones(2), 7) == (22, 3)   # n made dynamic
    assert compiled(torch.ones(2), 9) == (28, 4)
    assert be.count == 0


def test_tensor_work_in_the_loop_body_is_still_captured():
    def f(x):
        for i in range(3):
            native(i)
            x = x * 2 + i
        return x

    # (one body graph with i a constant, one with i dynamic)
    be = run(f, torch.ones(4), graphs=2, breaks=2, recompiles=1)
    assert be.op_counts() == [2, 2]


# -- callees that read their caller's frame run in the inlined frame's code --

def test_eval_in_a_helper_sees_the_helpers_locals():
    # CPython's test_decorators.test_dbcheck: eval with the caller's namespace
    def check(*args):
        if not eval("args[1] is not None"):
            raise KeyError(args)
        return args[0] + args[1]

    def f(x):
        return check(x, 1) * 2

    assert_same(f, torch.ones(2), graphs=None, breaks=None)


def test_sys_getframe_at_the_break_sees_the_helper():
    import sys

    def helper(x):
        name = sys._getframe().f_code.co_name
        return x + len(name)

    def f(x):
        return helper(x) * 2

    assert_same(f, torch.ones(2), graphs=None, breaks=None)


@torch.compiler.disable
def callers_name():
    import sys
    return sys._getframe(1).f_code.co_name


def test_a_python_function_run_natively_sees_the_same_caller_as_before():
    def helper(x):
        return x + len(callers_name())

    def f(x):
        return helper(x) * 2

    want = f(torch.ones(2))
    saved = config.compose_continuations
    try:
        for compose in (False, True):
            bytegraph.reset()
            config.compose_continuations = compose
            got = bytegraph.compile(f, backend="eager")(torch.ones(2))
            assert torch.equal(got, want), compose
    finally:
        config.compose_continuations = saved


def test_torch_graph_break_is_a_graph_break():
    import torch._dynamo

    def helper(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    def f(x):
        return helper(x) - 3

    be = run(f, torch.ones(2), graphs=2, breaks=1)
    assert be.op_counts() == [1, 2]

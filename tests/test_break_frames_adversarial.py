"""Adversarial differential tests for graph breaks inside inlined calls.

A break (``print``, any unsupported call) inside a function the compiled
function calls is split by continuing each frame of the chain in a
generated function (composed into one graph with
``config.compose_continuations``).  Each test here runs a program eagerly
and compiled and compares everything a program can see -- results, printed
output and its order against other effects, exceptions, identity, when
objects die, the frames code sees when it walks the stack -- then checks the
compiled frames really were compiled (graph and break counts).
"""

import contextlib
import gc
import inspect
import io
import sys
import warnings
import weakref

import pytest
import torch

import bytegraph
from bytegraph import config
from conftest import CountingBackend


def _outcome(fn, args):
    """``(result or exception, printed text)`` of one call."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            got = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001 - compared with eager's
            got = ("raised", type(e), e.args)
    return got, out.getvalue()


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and a.requires_grad == b.requires_grad and torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def check(fn, *arg_makers, graphs, breaks, calls=2, fallbacks=0):
    """Each ``arg_makers`` item makes a fresh argument tuple; eager and
    compiled runs on equal fresh arguments must agree (results, exceptions,
    printed output, the arguments afterwards) on every call.  Then the
    counts: graphs the backend saw, breaks, eager fallbacks."""
    be = CountingBackend()
    compiled = bytegraph.compile(fn, backend=be)
    for make in arg_makers:
        for _ in range(calls):
            eager_args, compiled_args = make(), make()
            want = _outcome(fn, eager_args)
            got = _outcome(compiled, compiled_args)
            assert _same(got, want), (got, want)
            assert _same(compiled_args, eager_args), "arguments differ afterwards"
    stats = bytegraph.stats()
    assert (be.count, stats.graph_breaks, stats.eager_fallbacks) == (graphs, breaks, fallbacks), stats
    return be


def ones():
    return (torch.ones(3),)


@pytest.fixture(params=[True, False], ids=["composed", "per_frame"])
def compose(request):
    saved = config.compose_continuations
    config.compose_continuations = request.param
    yield request.param
    config.compose_continuations = saved


# -- bugs found: locals read by name, frames walked from continuations -----

def test_eval_after_tensor_work_sees_a_local_no_instruction_reads(compose):
    # The break's native eval ran with only the locals bytecode liveness saw
    # (y is read by eval's string alone): NameError: name 'y' is not defined
    def f(x):
        y = x * 2
        return eval("y + 1")

    check(f, ones, graphs=1, breaks=1)


def test_eval_in_an_inlined_helper_sees_its_dead_locals(compose):
    def helper(x):
        y = x + 1
        return eval("y * 2")

    def f(x):
        return helper(x) - 1

    check(f, ones, graphs=2, breaks=2)


def test_eval_after_a_break_in_a_helper_sees_its_arguments(compose):
    # The helper's continuation after print was given its live locals only:
    # x, read only by eval's string, was not passed on
    def helper(x):
        print("before eval")
        return eval("x + 1")

    def f(x):
        return helper(x) * 2

    check(f, ones, graphs=1, breaks=2 if compose else 3)


def test_locals_and_vars_after_a_break_in_a_helper(compose):
    def helper(x, n):
        tmp = x * n
        print("b")
        return sorted(locals()), sorted(vars()), x + 1

    def f(x):
        return helper(x, 2)

    check(f, ones, graphs=2, breaks=1 if compose else 2)


def test_sys_getframe_1_after_a_break_in_a_helper_sees_its_caller(compose):
    # the helper's continuation was called by bytegraph's code: f_back was a
    # runner's frame (or the Continuation's caller), not f
    def helper(x):
        print("b")
        return x + len(sys._getframe(1).f_code.co_name)

    def f(x):
        return helper(x + 1) * 2

    # the call from f runs natively, between f's two graphs
    be = check(f, ones, graphs=2, breaks=1)
    assert be.op_counts() == [1, 1]


def test_inspect_currentframe_f_back_two_frames_deep(compose):
    def inner(x):
        x = x + 1
        print("b")
        return x, inspect.currentframe().f_back.f_back.f_code.co_name

    def mid(x):
        return inner(x * 2)

    def f(x):
        return mid(x - 1)[0] / 2, mid(x)[1]

    check(f, ones, graphs=2, breaks=2)


def test_warn_with_stacklevel_after_a_break_in_a_helper(compose):
    def helper(x):
        print("w")
        warnings.warn("careful", UserWarning, stacklevel=2)
        return x + 1

    def f(x):
        return helper(x) * 2     # the line the warning must name

    line = f.__code__.co_firstlineno + 1

    def where(fn):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with contextlib.redirect_stdout(io.StringIO()):
                fn(torch.ones(2))
        return [(x.filename, x.lineno) for x in w]

    assert where(f) == [(__file__, line)]
    be = CountingBackend()
    compiled = bytegraph.compile(f, backend=be)
    for _ in range(2):
        assert where(compiled) == [(__file__, line)]
    assert bytegraph.stats().graph_breaks == 1


def test_a_helper_that_does_not_walk_frames_still_composes():
    # (the frame-walking rule is per code: print's helper below has none)
    def helper(x):
        x = x + 2
        print("h")
        return x + 3

    def f(x):
        return helper(x + 1) + 4

    be = check(f, ones, graphs=2, breaks=1)
    assert be.op_counts() == [2, 2]


# -- bug found: the traceback of the call the break's glue code runs ----------

class _BadStr:
    def __str__(self):
        raise ValueError("no str", 7)


def _user_frames(fn, *args, root):
    """(file, function, line) of each traceback entry from ``root`` on."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            fn(*args)
    except ValueError as e:
        tb = [(f.filename, f.name, f.lineno) for f in __import__("traceback").extract_tb(e.__traceback__)]
        names = [name for _, name, _ in tb]
        return tb[names.index(root):], e.args
    raise AssertionError("did not raise")


def test_traceback_of_the_native_call_shows_the_inlined_frames():
    # (composed continuations only: per frame, each continuation is called
    # by the compiled frame's glue in turn, not nested; a traceback cannot
    # show the nesting)
    # The glue code ran the inner frame's print itself, at the inner frame's
    # position: the traceback showed f at a line of f's file that was the
    # helper's line number (another function's text), and no helper frames
    def inner(x):
        x = x + 1
        print(_BadStr())
        return x

    def mid(x):
        return inner(x * 2) - 1

    def f(x):
        y = x + 1
        return mid(y) * 3

    want = _user_frames(f, torch.ones(2), root="f")
    assert [name for _, name, _ in want[0]] == ["f", "mid", "inner", "__str__"]
    be = CountingBackend()
    compiled = bytegraph.compile(f, backend=be)
    for _ in range(2):
        assert _user_frames(compiled, torch.ones(2), root="f") == want
    assert be.count == 1 and bytegraph.stats().graph_breaks == 1


def test_traceback_with_keyword_and_method_calls_at_the_break():
    class Log:
        def __init__(self):
            self.parts = []

        def write(self, s):
            if s == "boom":
                raise ValueError("write failed", s)
            self.parts.append(s)

        def flush(self):
            pass

    def inner(x, log):
        x = x * 2
        print("a", "boom", sep="", file=log)   # keywords at the break
        return x

    def f(x, log):
        return inner(x + 1, log) + 1

    want = _user_frames(f, torch.ones(2), Log(), root="f")
    compiled = bytegraph.compile(f, backend=CountingBackend())
    got = _user_frames(compiled, torch.ones(2), Log(), root="f")
    assert got == want
    assert bytegraph.stats().graph_breaks == 1

"""A compiled function's call path (native.Dispatch in C, CompiledFunction.__call__
without it) behaves as the original function does: same results, errors,
keyword handling, tracing and warnings' caller, on both paths."""

import sys
import warnings

import pytest
import torch

import bytegraph
from bytegraph import native
from bytegraph.cache import CompiledFunction
from bytegraph.diagnostics import STATS
from conftest import CountingBackend


@pytest.fixture
def dispatch_mode(native_mode):
    """Compile with the native call path and with the Python one."""
    return native_mode


def _compile(fn, mode, backend=None):
    cf = bytegraph.compile(fn, backend=backend or CountingBackend())
    assert isinstance(cf, CompiledFunction)
    assert (native.load() is not None and isinstance(cf, native.load().Dispatch)) == (mode == "native")
    return cf


def f_kw(x, y=2.0, *, scale=1.0, **extra):
    return (x * y + len(extra)) * scale


def test_positional_keyword_and_default_calls_match_eager(dispatch_mode):
    backend = CountingBackend()
    cf = _compile(f_kw, dispatch_mode, backend)
    x = torch.randn(3)
    calls = [((x,), {}), ((x, 3.0), {}), ((x,), {"y": 4.0}), ((x,), {"scale": 2.0}),
             ((x, 1.5), {"scale": 0.5, "a": 1, "b": 2}), ((), {"x": x, "y": 0.5})]
    for _ in range(2):  # the second round runs cached entries
        for args, kwargs in calls:
            torch.testing.assert_close(cf(*args, **kwargs), f_kw(*args, **kwargs))
    assert len(backend.graphs) >= 1


def test_calls_that_do_not_bind_raise_eager_error(dispatch_mode):
    cf = _compile(f_kw, dispatch_mode)
    x = torch.randn(3)
    cf(x)
    for args, kwargs in [((), {}), ((x, 1.0, 2.0), {}), ((x,), {"x": x})]:
        with pytest.raises(TypeError) as eager:
            f_kw(*args, **kwargs)
        with pytest.raises(TypeError) as compiled:
            cf(*args, **kwargs)
        assert str(compiled.value) == str(eager.value)
        assert compiled.value.__cause__ is None and compiled.value.__context__ is None


def test_user_exception_propagates_without_bytegraph_context(dispatch_mode):
    def f(x, fail):
        y = x + 1
        if fail:
            raise ValueError("boom")
        return y

    cf = _compile(f, dispatch_mode)
    x = torch.randn(2)
    cf(x, False)
    cf(x, False)
    with pytest.raises(ValueError, match="boom") as info:
        cf(x, True)
    assert info.value.__context__ is None
    # a TypeError the user's code raises on a cached call is not taken for a binding failure
    def g(x):
        return x + "s"
    cg = _compile(g, dispatch_mode)
    with pytest.raises(TypeError):
        cg(torch.randn(2))
    with pytest.raises(TypeError):
        cg(torch.randn(2))


def test_cache_hits_are_counted(dispatch_mode):
    cf = _compile(lambda x: x.cos(), dispatch_mode)
    x = torch.randn(2)
    cf(x)
    before = STATS.cache_hits
    for _ in range(5):
        cf(x)
    assert STATS.cache_hits - before == 5


def test_a_line_tracer_sees_the_original_function(dispatch_mode):
    def f(x):
        y = x * 2
        return y + 1

    cf = _compile(f, dispatch_mode)
    x = torch.randn(2)
    cf(x)
    lines = []

    def tracer(frame, event, arg):
        if frame.f_code is f.__code__ and event == "line":
            lines.append(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    try:
        out = cf(x)
    finally:
        sys.settrace(None)
    torch.testing.assert_close(out, f(x))
    assert len(lines) == 2


def test_methods_and_identity_of_results(dispatch_mode):
    class M:
        def __init__(self):
            self.k = torch.ones(2)

        def f(self, x):
            return x + self.k, self

    m = M()
    cf = _compile(M.f, dispatch_mode)
    bound = cf.__get__(m, M)
    for _ in range(2):
        out, me = bound(torch.zeros(2))
        assert me is m
        torch.testing.assert_close(out, torch.ones(2))


def test_warning_stacklevel_2_names_the_callers_line(dispatch_mode):
    # eager: stacklevel=2 blames the line that called f; the compiled call must
    # not insert a frame of its own there, on the first (compiling) call or later
    # ones.  Only the native path can keep its frames out (the Python one is
    # itself a frame: a documented limit without the native module).
    if dispatch_mode == "python":
        pytest.xfail("the Python call path is a frame of its own")
    def f(x):
        warnings.warn("careful", UserWarning, stacklevel=2)
        return x + 1

    cf = _compile(f, dispatch_mode)
    x = torch.randn(2)
    with warnings.catch_warnings(record=True) as eager:
        warnings.simplefilter("always")
        f(x)
    with warnings.catch_warnings(record=True) as compiled:
        warnings.simplefilter("always")
        cf(x)
        cf(x)
    assert [w.filename for w in eager] == [__file__]
    assert [w.filename for w in compiled] == [__file__, __file__]


def test_entries_stay_a_list_the_python_side_shares(dispatch_mode):
    cf = _compile(lambda x: x + 1, dispatch_mode)
    cf(torch.randn(2))
    cf(torch.randn(3, dtype=torch.float64))
    assert isinstance(cf._entries, list) and len(cf._entries) == 2
    bytegraph.reset()
    assert cf._entries == []
    torch.testing.assert_close(cf(torch.ones(2)), torch.ones(2) + 1)
    assert len(cf._entries) == 1


def _breaking_program():
    log = []

    def f(x, n):
        total = x
        k = 0

        def bump():
            nonlocal k
            k += 1
            return k

        for i in range(n):
            total = total + i
            log.append(i)          # a side effect the trace replays
            print(i, end="", file=_SINK)   # a break inside the loop body
            total = total * bump()
        print("after", file=_SINK)   # a break after the loop
        return total + k, k

    return f, log


class _Sink:
    def write(self, s):
        return len(s)

    def flush(self):
        pass


_SINK = _Sink()


def test_continuations_match_eager_on_both_paths(dispatch_mode):
    # resume functions and outlined loop bodies run through FrameRunner.select
    # (native.Selector's hit path with the native module)
    f, log = _breaking_program()
    g, glog = _breaking_program()
    cg = _compile(g, dispatch_mode)
    from bytegraph import cache
    for n in (3, 3, 4, 0, 4):
        x = torch.randn(2)
        expected = f(x, n)
        actual = cg(x, n)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1] == expected[1]
        assert glog == log
    runners = [r for r in cache._RUNNERS.values() if r._entries]
    assert runners, "no continuation ran through a runner"
    native_cls = native.load().Selector if native.load() is not None else None
    assert all((native_cls is not None and isinstance(r, native_cls)) == (dispatch_mode == "native")
               for r in runners)


def test_a_tracer_set_inside_a_break_leaves_results_alone(dispatch_mode):
    # the continuation after the break sees the tracer (select returns the
    # generated function itself, which runs natively): same values as eager
    def f(x, n):
        y = x + n
        sys.settrace(tracer)       # a break
        z = y * 2
        for i in range(n):
            z = z + i
        return z

    def tracer(frame, event, arg):
        return None

    cf = _compile(f, dispatch_mode)
    for n in (2, 2, 3):
        x = torch.randn(2)
        try:
            expected = f(x, n)
        finally:
            sys.settrace(None)
        try:
            out = cf(x, n)
        finally:
            sys.settrace(None)
        torch.testing.assert_close(out, expected)

"""``@contextlib.contextmanager`` context managers are traced whole: the
generator runs symbolically up to its ``yield``, the body is captured, the exit
resumes the generator.  Every test compares results and side effects with
eager Python and asserts how many graphs and breaks there were."""

import contextlib
import io

import pytest
import torch

import bytegraph
from conftest import CountingBackend

LOG = []


@contextlib.contextmanager
def scaled(k, log=LOG):
    log.append(("enter", k))
    try:
        yield k * 2
    finally:
        log.append(("exit", k))


@contextlib.contextmanager
def no_grad_scope():
    with torch.no_grad():
        yield


@contextlib.contextmanager
def swallow(*kinds):
    try:
        yield
    except kinds:
        LOG.append("swallowed")


@contextlib.contextmanager
def noisy(tag):
    print("enter", tag)
    yield tag
    print("exit", tag)


def run(fn, *args, graphs, breaks=0, fullgraph=False):
    """Run ``fn`` eagerly, then compiled twice; compare outputs, LOG and stdout."""
    LOG.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        expected = fn(*args)
    expected_log, expected_out = list(LOG), out.getvalue()
    bytegraph.reset()
    be = CountingBackend()
    cf = bytegraph.compile(fn, backend=be, fullgraph=fullgraph)
    for _ in range(2):
        LOG.clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            got = cf(*args)
        _same(got, expected)
        assert LOG == expected_log
        assert out.getvalue() == expected_out
    assert be.count == graphs
    assert bytegraph.stats().graph_breaks == breaks
    assert bytegraph.stats().eager_fallbacks == 0
    return be


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    else:
        assert a == b


def test_with_contextmanager_is_one_graph():
    def f(x):
        with scaled(3) as k:
            y = x * k
        return y + 1

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_yielded_value_and_arguments_can_be_tensors():
    @contextlib.contextmanager
    def shifted(t, by):
        yield t + by

    def f(x):
        with shifted(x, x.sum()) as s:
            out = s * 2
        return out

    run(f, torch.arange(3.0), graphs=1, fullgraph=True)


def test_grad_mode_inside_the_generator():
    def f(x):
        with no_grad_scope():
            y = x * 2
        return y, x * 3

    x = torch.ones(2, requires_grad=True)
    run(f, x, graphs=1, fullgraph=True)


def test_nested_and_method_contextmanagers():
    class Box:
        def __init__(self):
            self.depth = 0

        @contextlib.contextmanager
        def deeper(self):
            self.depth += 1
            yield self.depth
            self.depth -= 1

    box = Box()

    def f(x):
        with scaled(1) as a, box.deeper() as d:
            with scaled(2) as b:
                x = x * a + b + d
        return x, box.depth

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_exception_in_body_reaches_the_generator_and_is_suppressed():
    def f(x):
        with swallow(KeyError):
            x = x + 1
            {}["missing"]
        return x * 2

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_exception_not_handled_by_generator_propagates_after_its_finally():
    def f(x):
        try:
            with scaled(5):
                x = x + 1
                raise ValueError("boom")
        except ValueError as e:
            return x, str(e)

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_return_inside_with_runs_the_exit():
    def f(x):
        with scaled(4) as k:
            return x * k

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_generator_that_does_not_yield_raises_like_python():
    @contextlib.contextmanager
    def broken():
        if False:
            yield

    def f(x):
        try:
            with broken():
                x = x + 1
        except RuntimeError as e:
            return x * 2, str(e)

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_break_in_the_body_runs_the_with_statement_natively():
    def f(x):
        y = x * 2
        with scaled(3) as k:
            y = y * k
            print("inside", k)
            y = y + 1
        return y - 1

    # the with statement's enter runs natively (a break), the body is captured
    # in a resume function that breaks at the print, and the real generator's
    # exit runs natively too: four graphs around three breaks
    run(f, torch.ones(2), graphs=4, breaks=3)


def test_break_in_the_generator_itself():
    def f(x):
        y = x * 2
        with noisy("a") as tag:
            y = y + len(tag)
        return y * 3

    # enter runs natively at the with statement; the real generator's exit
    # then runs natively too (a second break); three graphs around them
    run(f, torch.ones(2), graphs=3, breaks=2)


def test_break_reason_names_the_with_statement_and_fullgraph_names_the_cause():
    def f(x):
        with noisy("a"):
            x = x + 1
        return x

    report = bytegraph.explain(f)(torch.ones(2))
    first = report.break_reasons[0]
    assert "contextmanager" in first.explanation and "print" in first.explanation
    assert first.location.lineno == f.__code__.co_firstlineno + 1  # the with statement
    with pytest.raises(bytegraph.GraphBreakError, match="print"):
        with contextlib.redirect_stdout(io.StringIO()):
            bytegraph.compile(f, backend="eager", fullgraph=True)(torch.ones(2))


def test_contextmanager_object_created_but_not_entered_escapes():
    def f(x):
        cm = scaled(7)
        return x + 1, cm

    LOG.clear()
    be = CountingBackend()
    out, cm = bytegraph.compile(f, backend=be)(torch.ones(2))
    assert be.count == 1 and LOG == []
    with cm as k:
        assert k == 14
    assert LOG == [("enter", 7), ("exit", 7)]


def test_changing_the_generator_function_recompiles():
    calls = []

    def make(mult):
        @contextlib.contextmanager
        def cm():
            calls.append(mult)
            yield mult
        return cm

    holder = {"cm": make(2)}

    def f(x):
        with holder["cm"]() as m:
            return x * m

    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 2.0))
    holder["cm"] = make(5)
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 5.0))
    assert calls == [2, 5] and be.count == 2


def helper_with_break(x):
    with scaled(2) as k:
        x = x * k
        print("helper", k)
    return x + 1


def test_break_inside_a_with_in_an_inlined_call():
    def f(x):
        return helper_with_break(x * 3) - 1

    # the break moves to the helper's with statement, which splits both frames
    # (torch.compile runs the helper eagerly here: 2 graphs)
    run(f, torch.ones(2), graphs=4, breaks=4)


def test_with_inside_a_loop_with_a_break_in_the_generator():
    def f(x):
        for i in range(3):
            with noisy(i) as tag:
                x = x + tag
        return x

    # the loop body is outlined; in it the with statement runs natively
    # (torch.compile runs this frame eagerly: 0 graphs)
    run(f, torch.ones(2), graphs=2, breaks=4)


def test_exception_before_the_yield_propagates_from_the_with_statement():
    @contextlib.contextmanager
    def failing(x):
        LOG.append("start")
        raise KeyError("no")
        yield  # noqa: unreachable

    def f(x):
        try:
            with failing(x):
                LOG.append("body")
        except KeyError:
            return x * 2
        return x

    run(f, torch.ones(2), graphs=1, fullgraph=True)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_autocast_block_is_captured(backend):
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            with torch.autocast("cpu", enabled=False):
                z = x @ w
            inner = (y.dtype, z.dtype, torch.is_autocast_enabled("cpu"))
        return y, z, inner, torch.is_autocast_enabled("cpu")

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    be = CountingBackend(backend)
    cf = bytegraph.compile(f, backend=be, fullgraph=True)
    expected = f(x, w)
    for _ in range(2):
        got = cf(x, w)
        assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.float32
        torch.testing.assert_close(got[0], expected[0], atol=0.05, rtol=0.02)
        torch.testing.assert_close(got[1], expected[1])
        assert got[2:] == expected[2:]
    assert not torch.is_autocast_enabled("cpu")
    assert be.count == 1


def test_autocast_training_step_matches_eager():
    lin = torch.nn.Linear(4, 4)

    def step(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = lin(x).float().pow(2).mean()
        loss.backward()
        return loss

    x = torch.randn(3, 4)
    expected = step(x)
    grad = lin.weight.grad.clone()
    lin.weight.grad = None
    got = bytegraph.compile(step, backend="aot_eager")(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(lin.weight.grad, grad)


def test_autocast_default_dtype_is_guarded():
    def f(x):
        with torch.autocast("cpu"):
            return x @ x

    cf = bytegraph.compile(f, backend="inductor")
    x = torch.randn(4, 4)
    assert cf(x).dtype == f(x).dtype == torch.bfloat16
    old = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        assert cf(x).dtype == f(x).dtype == torch.float16
    finally:
        torch.set_autocast_dtype("cpu", old)
    assert bytegraph.stats().graphs == 2


def test_autocast_that_warns_runs_natively_and_warns_each_call():
    def f(x):
        with torch.autocast("cpu", dtype=torch.float32):  # unsupported: warns and disables itself
            return x * 2

    cf = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        with pytest.warns(UserWarning, match="Disabling autocast"):
            torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 2.0))
    assert bytegraph.stats().graph_breaks >= 1


class Recorder:
    """A context manager class instantiated inside the compiled function."""

    def __init__(self, tag):
        self.tag = tag

    def __enter__(self):
        LOG.append(("enter", self.tag))
        return self

    def __exit__(self, kind, value, tb):
        LOG.append(("exit", self.tag, kind.__name__ if kind else None))
        return kind is KeyError


def test_context_manager_object_made_in_the_trace():
    def f(x):
        with Recorder("a") as r:
            x = x * 2
            LOG.append(r.tag)
        with Recorder("b"):
            x = x + 1
            {}["missing"]  # suppressed by __exit__
        return x

    run(f, torch.ones(2), graphs=1, fullgraph=True)


def test_break_inside_a_context_manager_object_made_in_the_trace():
    def f(x):
        with Recorder("a"):
            x = x * 2
            print("inside")
            x = x + 1
        return x

    # enter in the first graph; the exit (a bound method of the rebuilt object) is captured after the break
    run(f, torch.ones(2), graphs=2, breaks=1)


def test_contextlib_nullcontext_and_suppress():
    def f(x, flag):
        ctx = contextlib.nullcontext(x) if flag else torch.no_grad()
        with ctx as got:
            y = x * 2
        with contextlib.suppress(IndexError):
            y = y + [1][5]
        with contextlib.suppress(IndexError):
            y = y + 1
        return y, got is x

    run(f, torch.ones(2), True, graphs=1, fullgraph=True)


def test_finfo_and_iinfo_are_constants():
    def f(x):
        return x.clamp(min=torch.finfo(x.dtype).min / 2, max=torch.iinfo(torch.int16).max)

    run(f, torch.randn(4) * 1e5, graphs=1, fullgraph=True)


def test_inference_mode_block_runs_natively_and_its_body_is_captured():
    def f(x):
        y = x * 2
        with torch.inference_mode():
            z = y + 1
            inside = (torch.is_inference_mode_enabled(), z.is_inference())
        return z * 3, inside

    # constructing the context, entering it and leaving it run natively
    run(f, torch.ones(2), graphs=3, breaks=3)

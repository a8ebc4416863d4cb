"""Capture breadth (issue #13): custom autograd Functions, NumPy in model
code, and data-dependent Python numbers.

Every test compares compiled with eager (results, gradients through
``torch.autograd.grad``, side effects) and asserts what was captured (graph
count, breaks), so a silently eager run fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd.function import once_differentiable

import bytegraph
from conftest import CountingBackend, assert_same

BACKENDS = ["eager", "aot_eager"]


def _grads_match(fn, make_args, backend, graphs=1, breaks=0, calls=2):
    """Run ``fn`` eagerly and compiled on equal leaf tensors requiring grad;
    compare the outputs and the gradients of every leaf, then the counts."""
    be = CountingBackend(backend)
    compiled = bytegraph.compile(fn, backend=be)
    for call in range(calls):
        torch.manual_seed(call)
        base = make_args()
        eager_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in base]
        comp_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                     for a in base]
        expected = fn(*eager_args)
        actual = compiled(*comp_args)
        exp_t = expected if isinstance(expected, tuple) else (expected,)
        act_t = actual if isinstance(actual, tuple) else (actual,)
        assert len(exp_t) == len(act_t)
        for e, a in zip(exp_t, act_t):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(a, e)
            else:
                assert a == e
        leaves_e = [a for a in eager_args if isinstance(a, torch.Tensor) and a.requires_grad]
        leaves_c = [a for a in comp_args if isinstance(a, torch.Tensor) and a.requires_grad]
        if leaves_e:
            diff_e = [t for t in exp_t if isinstance(t, torch.Tensor) and t.requires_grad]
            diff_a = [t for t in act_t if isinstance(t, torch.Tensor) and t.requires_grad]
            assert len(diff_e) == len(diff_a)
            ge = torch.autograd.grad(sum((t * (i + 1)).sum() for i, t in enumerate(diff_e)), leaves_e,
                                     allow_unused=True)
            ga = torch.autograd.grad(sum((t * (i + 1)).sum() for i, t in enumerate(diff_a)), leaves_c,
                                     allow_unused=True)
            for x, y in zip(ga, ge):
                assert (x is None) == (y is None)
                if x is not None:
                    torch.testing.assert_close(x, y)
    stats = bytegraph.stats()
    if graphs is not None:
        assert be.count == graphs, f"expected {graphs} graphs, got {be.count}; {stats}"
    if breaks is not None:
        assert stats.graph_breaks == breaks, stats
    assert stats.eager_fallbacks == 0, stats
    return be


# ---------------------------------------------------------------------------
# A. custom torch.autograd.Function


class ScaledSquare(torch.autograd.Function):
    """Backward deliberately not the true derivative: the custom one must be used."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 10 * ctx.k, None


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class SetupStyle(torch.autograd.Function):
    """The functorch style: forward without ctx, then setup_context."""

    @staticmethod
    def forward(x, y):
        return x * y, x + y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y = inputs
        ctx.save_for_backward(x, y)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, g, g_unused):
        x, y = ctx.saved_tensors
        return g * y * 3, g * x * 5


class NeedsGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, label):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, y)
        return x * y, label

    @staticmethod
    def backward(ctx, g, g_label):
        x, y = ctx.saved_tensors
        gx = gy = None
        if g is None:
            return None, None, None
        if ctx.needs_input_grad[0]:
            gx = g * y * 2
        if ctx.needs_input_grad[1]:
            gy = g * x * 7
        return gx, gy, None


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_custom_backward_is_used(backend):
    def f(x):
        return ScaledSquare.apply(x.sin(), 3).cos()

    be = _grads_match(f, lambda: [torch.randn(5, requires_grad=True)], backend)
    assert any("ScaledSquare" in str(n.target) for n in be.graphs[0].graph.nodes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_straight_through(backend):
    def f(x, w):
        return StraightThroughRound.apply(x * 3) @ w

    _grads_match(f, lambda: [torch.randn(2, 4, requires_grad=True), torch.randn(4, 3, requires_grad=True)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_setup_context_style(backend):
    def f(x, y):
        a, b = SetupStyle.apply(x, y)
        return a.exp(), b

    _grads_match(f, lambda: [torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("which", [(True, True), (True, False), (False, True)])
def test_autograd_function_needs_input_grad_and_non_tensor_output(backend, which):
    def f(x, y):
        out, label = NeedsGrad.apply(x, y, "tag")
        return out + 1, label

    _grads_match(f, lambda: [torch.randn(3, requires_grad=which[0]), torch.randn(3, requires_grad=which[1])],
                 backend)


class OverridesApply(ScaledSquare):
    """An ``apply`` of its own around torch's: the graph node must call torch's
    apply, not this override again (whose ``+ 1`` the trace already recorded)."""

    @classmethod
    def apply(cls, x, k):
        return super().apply(x, k) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_overridden_apply_calling_super(backend):
    def f(x):
        return OverridesApply.apply(x, 2) * 3

    _grads_match(f, lambda: [torch.randn(4, requires_grad=True)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["local", "argument", "across_break"])
def test_autograd_function_apply_as_a_value(backend, how):
    # ``apply`` is a Python classmethod on torch 2.13 and a C method on 2.14:
    # held in a variable, passed in, or kept across a graph break, it is the
    # same one graph node on both
    def local(x):
        ap = StraightThroughRound.apply
        return ap(x * 3).exp()

    def argument(x, ap=StraightThroughRound.apply):
        return ap(x * 3).exp()

    def across_break(x):
        ap = StraightThroughRound.apply
        y = x * 3
        bytegraph.graph_break()
        return ap(y).exp()

    fn = {"local": local, "argument": argument, "across_break": across_break}[how]
    graphs, breaks = (2, 1) if how == "across_break" else (1, 0)
    be = _grads_match(fn, lambda: [torch.randn(4, requires_grad=True)], backend, graphs=graphs, breaks=breaks)
    assert any("StraightThroughRound" in str(n.target) for n in be.graphs[-1].graph.nodes)


def test_autograd_function_under_no_grad_and_in_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return ScaledSquare.apply(self.lin(x), 2).sum(-1)

    m = M()
    x = torch.randn(2, 4)
    be = CountingBackend("aot_eager")
    cm = bytegraph.compile(m, backend=be)
    out = cm(x)
    ref = m(x)
    torch.testing.assert_close(out, ref)
    g = torch.autograd.grad(out.sum(), list(m.parameters()))
    gr = torch.autograd.grad(ref.sum(), list(m.parameters()))
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
    assert bytegraph.stats().graph_breaks == 0 and bytegraph.stats().eager_fallbacks == 0


# -- what must not be captured: effects, in-place, outside tensors --------

_log = []
_counter = 0
_outside = torch.ones(3)


class PrintsInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("forward ran")
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class GlobalWriteInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        global _counter
        _counter += 1
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class AppendsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        _log.append("backward")
        return g * 2


class Holder:
    pass


_holder = Holder()


class AttrWriteInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _holder.seen = True
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class MarksDirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class WritesInputWithoutMarking(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class ReadsGlobalTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * _outside

    @staticmethod
    def backward(ctx, g):
        return g * _outside


def test_autograd_function_print_in_forward_breaks(capsys):
    def f(x):
        return PrintsInForward.apply(x + 1) * 3

    be = CountingBackend("aot_eager")
    cf = bytegraph.compile(f, backend=be)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cf(x), f(x))
    assert capsys.readouterr().out.count("forward ran") == 4  # every call, compiled and eager
    assert bytegraph.stats().graph_breaks >= 1


def test_autograd_function_global_write_in_forward_breaks():
    global _counter

    def f(x):
        return GlobalWriteInForward.apply(x + 1) * 3

    cf = bytegraph.compile(f, backend="aot_eager")
    _counter = 0
    for _ in range(3):
        cf(torch.randn(3))
    assert _counter == 3
    assert bytegraph.stats().graph_breaks >= 1


def test_autograd_function_effect_in_backward_breaks():
    def f(x):
        return AppendsInBackward.apply(x + 1) * 3

    cf = bytegraph.compile(f, backend="aot_eager")
    _log.clear()
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        torch.autograd.grad(cf(x).sum(), x)
    assert _log == ["backward"] * 3
    assert bytegraph.stats().graph_breaks >= 1


def test_autograd_function_attribute_write_breaks():
    def f(x):
        return AttrWriteInForward.apply(x + 1)

    _holder.__dict__.clear()
    cf = bytegraph.compile(f, backend="aot_eager")
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 4.0))
    assert _holder.seen is True
    assert bytegraph.stats().graph_breaks >= 1


@pytest.mark.parametrize("cls", [MarksDirty, WritesInputWithoutMarking, ReadsGlobalTensor])
def test_autograd_function_unexact_cases_break_cleanly(cls):
    def f(x):
        y = x + 1
        return cls.apply(y), y

    assert_same(f, torch.randn(3), graphs=None, breaks=1, backend="aot_eager")


@pytest.mark.parametrize("cls", [PrintsInForward, GlobalWriteInForward, AppendsInBackward, AttrWriteInForward,
                                 MarksDirty, WritesInputWithoutMarking, ReadsGlobalTensor])
def test_autograd_function_breaks_at_the_apply_call(cls, capsys):
    def f(x):
        return cls.apply(x + 1) * 3

    report = bytegraph.explain(f, backend="aot_eager")(torch.randn(3, requires_grad=True))
    assert [b.kind for b in report.break_reasons] == ["autograd_function"]
    assert report.break_reasons[0].location.function.endswith(".f")  # not inside forward: apply runs whole


# ---------------------------------------------------------------------------
# B. NumPy on constants


np = pytest.importorskip("numpy")


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_ufunc_on_constant_is_folded(backend):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.d_model = 16

        def forward(self, x):
            x = x * 2
            x *= np.sqrt(self.d_model)       # ctrl: inputs_embeds *= np.sqrt(self.d_model_size)
            return x / np.log(np.float32(self.d_model)) + np.prod([2, 3])

    m = M()
    be = CountingBackend(backend)
    cm = bytegraph.compile(m, backend=be)
    for _ in range(2):
        x = torch.randn(3, 4)
        out, ref = cm(x), m(x)
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out, ref)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scalar", ["float64", "float32", "float16", "int64", "int32", "bool_"])
def test_numpy_scalar_promotion_matches_eager(backend, scalar):
    s = getattr(np, scalar)(3)

    def f(a, b, c):
        return (a * s, b + s, c * s, torch.full((2,), s), torch.tensor(s), torch.add(a, s, alpha=2))

    args = (torch.randn(2), torch.randn(2).half(), torch.arange(2, dtype=torch.int32))
    out, _ = assert_same(f, *args, backend=backend)
    expected = f(*args)
    assert [o.dtype for o in out] == [e.dtype for e in expected]


def test_numpy_scalar_argument_is_guarded_by_type_and_bits():
    def f(x, k):
        return x * k

    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    x = torch.ones(2)
    for k in [np.float64(2.0), np.float64(2.0), np.float32(2.0), np.float64(-0.0), np.float64(0.0),
              np.float64("nan"), np.float64("nan"), np.int64(2)]:
        out, ref = cf(x, k), f(x, k)
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out, ref, equal_nan=True)
        assert torch.equal(torch.signbit(out), torch.signbit(ref))
    # 2.0 twice and nan twice reuse their entry; the others are new
    assert be.count == 6


def test_numpy_fold_reports_warnings_natively():
    def f(x):
        return x * np.sqrt(-1.0)

    cf = bytegraph.compile(f, backend="eager")
    with pytest.warns(RuntimeWarning):
        out = cf(torch.ones(2))
    assert torch.isnan(out).all()
    assert bytegraph.stats().graph_breaks >= 1


def test_numpy_fold_raises_numpy_errors():
    def f(x):
        try:
            np.sqrt(1.0, 2.0, 3.0, 4.0)
        except TypeError as e:
            return x + 1, str(e)
        return x, ""

    assert_same(f, torch.ones(2))


def test_numpy_on_tensor_breaks_cleanly():
    def f(x):
        return torch.as_tensor(np.exp(x.numpy())) + 1

    assert_same(f, torch.rand(3), graphs=None, breaks=None)


# ---------------------------------------------------------------------------
# C. Data-dependent Python numbers (capture_scalar_outputs)


@pytest.fixture
def capture_scalars():
    saved = bytegraph.config.capture_scalar_outputs
    bytegraph.config.capture_scalar_outputs = True
    yield
    bytegraph.config.capture_scalar_outputs = saved


def _scalar_args():
    return (torch.randn(3), torch.tensor(2.5), torch.tensor(4), torch.tensor([1.5, -2.0, 3.0]))


def _item_arith(x, t, n, v):
    s = t.item()
    k = s * 2 + 1 - float(n) / 4
    m = int(n) + 1
    a, b, c = v.tolist()
    return x * k + a * b - c, torch.zeros(m) + s, k, m


def _bool_arith(x, t, n, v):
    flag = bool(n)
    return x * flag, n.item() * 3 + int(n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_item_arith, _bool_arith])
def test_scalar_outputs_captured(capture_scalars, backend, fn):
    be = CountingBackend(backend)
    cf = bytegraph.compile(fn, backend=be)
    for values in [(2.5, 4, [1.5, -2.0, 3.0]), (-1.0, 7, [0.0, 2.0, 1.0]), (0.0, 0, [3.0, 3.0, -3.0])]:
        x = torch.randn(3)
        args = (x, torch.tensor(values[0]), torch.tensor(values[1]), torch.tensor(values[2]))
        out, ref = cf(*args), fn(*args)
        assert len(out) == len(ref)
        for a, b in zip(out, ref):
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(a, b)
            else:
                assert type(a) is type(b) and a == b
    # one graph for all values: nothing was specialized
    assert be.count == 1, bytegraph.stats()
    assert bytegraph.stats().graph_breaks == 0 and bytegraph.stats().recompiles == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_on_unbacked_value_breaks(capture_scalars, backend):
    def f(x, t):
        s = t.item() * 2
        if s > 0:
            return x + s
        return x - s

    report = bytegraph.explain(f, backend=backend)(torch.randn(3), torch.tensor(1.0))
    assert [b.kind for b in report.break_reasons] == ["data_dependent_branch"]
    bytegraph.reset()
    cf = bytegraph.compile(f, backend=backend)
    for v in [1.0, -1.0, 3.0, -0.5]:
        x = torch.randn(3)
        torch.testing.assert_close(cf(x, torch.tensor(v)), f(x, torch.tensor(v)))


@pytest.mark.parametrize("read", ["item", "float", "int", "bool", "tolist"])
def test_scalar_reads_break_by_default(read):
    assert bytegraph.config.capture_scalar_outputs is False

    def f(x, t):
        v = {"item": lambda: t.item(), "float": lambda: float(t), "int": lambda: int(t),
             "bool": lambda: bool(t), "tolist": lambda: t.tolist()}[read]()
        return x + 1, v

    report = bytegraph.explain(f)(torch.randn(2), torch.tensor(3))
    assert report.break_reasons and report.break_reasons[0].kind in ("data_dependent", "data_dependent_branch")
    bytegraph.reset()
    assert_same(f, torch.randn(2), torch.tensor(3), graphs=None, breaks=None)


@pytest.mark.parametrize("read", ["item", "float", "int", "bool"])
def test_scalar_read_of_many_elements_raises_eager_error(capture_scalars, read):
    def f(x):
        try:
            {"item": lambda: x.item(), "float": lambda: float(x), "int": lambda: int(x),
             "bool": lambda: bool(x)}[read]()
        except (RuntimeError, ValueError) as e:
            return x + 1, type(e).__name__, str(e)
        return x, "", ""

    assert_same(f, torch.randn(2))
    bytegraph.reset()
    assert_same(f, torch.randn(0))


_made = None


class AppendsToGlobalList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _made.append(1)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class BuildsLocalList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        parts = [x * i for i in range(3)]
        parts.append(x)
        return torch.stack(parts).sum(0)

    @staticmethod
    def backward(ctx, g):
        return g * 4


class TakesAList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lst):
        lst.append(len(lst))
        return x * 2

    @staticmethod
    def backward(ctx, g, _):
        return g * 2, None


def test_autograd_function_mutating_a_list_made_in_the_trace_breaks():
    global _made

    def f(x):
        global _made
        lst = [0]
        _made = lst       # a pending global write of a list made in this trace
        return AppendsToGlobalList.apply(x + 1), lst

    _made = None
    out = bytegraph.compile(f, backend="eager")(torch.ones(2))
    assert out[1] == [0, 1] and _made is out[1]
    assert bytegraph.stats().graph_breaks >= 1

    def g(x):
        lst = []
        return TakesAList.apply(x, lst), lst

    out = bytegraph.compile(g, backend="eager")(torch.ones(2))
    assert out[1] == [0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_function_local_containers_in_forward_are_fine(backend):
    def f(x):
        return BuildsLocalList.apply(x * 3)

    _grads_match(f, lambda: [torch.randn(4, requires_grad=True)], backend)


@pytest.mark.parametrize("op", ["div0", "overflow", "abs_int8", "fine"])
def test_numpy_scalar_operators_warn_natively(op):
    def f(x, k):
        if op == "div0":
            v = k / 0
        elif op == "overflow":
            v = np.int8(100) + np.int8(k)
        elif op == "abs_int8":
            v = abs(np.int8(-128) + np.int8(k * 0))
        else:
            v = k * 2 + 1
        return x * float(v)

    k = np.float64(100.0) if op != "overflow" and op != "abs_int8" else 100
    cf = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        if op == "fine":
            torch.testing.assert_close(cf(torch.ones(2), k), f(torch.ones(2), k))
        else:
            with pytest.warns(RuntimeWarning):
                out = cf(torch.ones(2), k)
            with pytest.warns(RuntimeWarning):
                ref = f(torch.ones(2), k)
            torch.testing.assert_close(out, ref, equal_nan=True)
    assert (bytegraph.stats().graph_breaks == 0) == (op == "fine")


class RewritesGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        global _counter
        _counter = _counter + 10
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_autograd_function_rewriting_a_global_the_trace_wrote_breaks():
    global _counter

    def f(x):
        global _counter
        _counter = 1                  # a pending global write before the Function
        return RewritesGlobal.apply(x + 1)

    _counter = 0
    bytegraph.compile(f, backend="aot_eager")(torch.ones(2))
    assert _counter == 11
    assert bytegraph.stats().graph_breaks >= 1


class ReadsItemInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x.sum().item()

    @staticmethod
    def backward(ctx, g):
        return g


@pytest.mark.parametrize("capture", [False, True])
def test_autograd_function_reading_a_number_in_forward_breaks(capture):
    saved = bytegraph.config.capture_scalar_outputs
    bytegraph.config.capture_scalar_outputs = capture
    try:
        def f(x):
            return ReadsItemInForward.apply(x + 1)

        assert_same(f, torch.randn(3), graphs=None, breaks=1)
    finally:
        bytegraph.config.capture_scalar_outputs = saved


def test_numpy_frompyfunc_ufunc_is_not_folded():
    calls = []

    def py(v):
        calls.append(v)
        return v * 2

    uf = np.frompyfunc(py, 1, 1)

    def f(x):
        return x * float(uf(3.0))

    cf = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 6.0))
    assert calls == [3.0, 3.0]   # once per call, never at trace time

"""Differential tests: globals and closure reads, the aot_eager backend
(incl. backward), and frames bytegraph cannot capture (fallback / fullgraph)."""

import inspect
import os

import pytest
import torch
import torch.nn.functional as F

import bytegraph
from conftest import assert_same, compile_counting


def t(*shape, requires_grad=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + 5))
    return x.requires_grad_(requires_grad)


G_WEIGHT = torch.ones(3)
G_SCALE = 2.0
G_NAMES = ("a", "b")
G_TABLE = {"shift": 1.5, "n": 2}


def uses_globals(x):
    y = x * G_WEIGHT * G_SCALE
    for name in G_NAMES:
        y = y + len(name) * G_TABLE["shift"]
    return y


# ---------------------------------------------------------------------------
# globals and closures (read only)

def test_global_tensor_and_constants_read():
    assert_same(uses_globals, t(3))


def test_global_tensor_is_a_graph_input_not_a_constant():
    global G_WEIGHT
    compiled, be = compile_counting(uses_globals)
    x = t(3)
    saved = G_WEIGHT
    try:
        first = compiled(x)
        torch.testing.assert_close(first, uses_globals(x))
        G_WEIGHT = torch.full((3,), -4.0)          # a new tensor, same metadata
        torch.testing.assert_close(compiled(x), uses_globals(x))
        G_WEIGHT.mul_(0.5)                          # same tensor, new values
        torch.testing.assert_close(compiled(x), uses_globals(x))
        assert be.count == 1
        placeholders = [n for n in be.graphs[0].graph.nodes if n.op == "placeholder"]
        assert len(placeholders) == 2  # x and G_WEIGHT
    finally:
        G_WEIGHT = saved


def test_global_constant_change_is_seen():
    global G_SCALE
    compiled, be = compile_counting(uses_globals)
    x = t(3)
    saved = G_SCALE
    try:
        torch.testing.assert_close(compiled(x), uses_globals(x))
        G_SCALE = 5.0
        torch.testing.assert_close(compiled(x), uses_globals(x))
        G_SCALE = saved
        torch.testing.assert_close(compiled(x), uses_globals(x))
        assert be.count == 2  # one variant per guarded constant value
    finally:
        G_SCALE = saved


def test_global_dict_value_change_is_seen():
    compiled, be = compile_counting(uses_globals)
    x = t(3)
    torch.testing.assert_close(compiled(x), uses_globals(x))
    G_TABLE["shift"] = -10.0
    try:
        torch.testing.assert_close(compiled(x), uses_globals(x))
    finally:
        G_TABLE["shift"] = 1.5
    assert be.count == 2  # the guarded entry value changed: a second variant


def test_global_list_read():
    def f(x):
        return [x * v for v in G_LIST]

    assert_same(f, t(2))


G_LIST = [1, 2]


def test_list_length_change_recompiles():
    def f(xs):
        return sum(xs)

    compiled, be = compile_counting(f)
    for n in (2, 3, 2):
        xs = [t(2) for _ in range(n)]
        torch.testing.assert_close(compiled(xs), f(xs))
    assert be.count == 2


def test_closure_variables_read():
    scale = 3.0
    bias = torch.tensor([0.5, -0.5])
    names = ["u", "v"]

    def f(x):
        return {n: x * scale + bias for n in names}

    assert_same(f, t(2))


def test_closure_tensor_change_is_seen():
    w = torch.ones(2)

    def make(w):
        def f(x):
            return x * w
        return f

    f = make(w)
    compiled, be = compile_counting(f)
    x = t(2)
    torch.testing.assert_close(compiled(x), f(x))
    w.add_(10)  # same tensor object, new values: must not be baked in
    torch.testing.assert_close(compiled(x), f(x))
    assert be.count == 1


def test_module_attribute_reads():
    def f(x):
        return x.to(torch.float64) * torch.pi, os.sep, torch.float32.is_floating_point

    assert_same(f, t(2))


# ---------------------------------------------------------------------------
# aot_eager backend

AOT_CASES = [
    ("arith", lambda x, y: (x * y + 1).relu()),
    ("reductions_and_views", lambda x, y: (x.view(-1).softmax(0), y.sum(1, keepdim=True))),
    ("containers", lambda x, y: {"s": [x + y, (x - y,)], "n": x.shape[0]}),
    ("inplace_input", lambda x, y: x.add_(y).mul_(2)),
    ("setitem_input", lambda x, y: _setitem_then_mul(x, y)),
    ("no_grad_block", lambda x, y: _no_grad_mix(x, y)),
]


def _setitem_then_mul(x, y):
    x[0, :] = 0.0
    x[:, 1] = y[:, 0]
    return x * y


def _no_grad_mix(x, y):
    with torch.no_grad():
        a = x * 2
    return a + y, a.requires_grad


@pytest.mark.parametrize("name,fn", AOT_CASES, ids=[n for n, _ in AOT_CASES])
def test_aot_eager_backend(name, fn):
    assert_same(fn, t(2, 3), t(3, 2).T.contiguous(), backend="aot_eager")


def test_mutating_call_returning_none_is_kept():
    def f(x, y):
        x.__setitem__(0, 1.0)
        torch._foreach_mul_([y], 3.0)
        return x + y

    assert_same(f, t(2, 3), t(3, 2).T.contiguous())


def test_aot_eager_mixed_requires_grad_outputs():
    def f(x, y):
        return x * y, (x * 2).detach(), None

    out, _ = assert_same(f, t(2, requires_grad=True), t(2), backend="aot_eager")
    assert out[0].requires_grad and not out[1].requires_grad


def test_aot_eager_backward_matches_eager():
    def f(x, w, b):
        h = F.linear(x, w, b).tanh()
        return (h * h).mean(), h

    inputs = [t(4, 3, requires_grad=True), t(2, 3, requires_grad=True), t(2, requires_grad=True)]
    eager_in = [i.detach().clone().requires_grad_() for i in inputs]
    comp_in = [i.detach().clone().requires_grad_() for i in inputs]
    compiled, be = compile_counting(f, backend="aot_eager")
    e_loss, e_h = f(*eager_in)
    c_loss, c_h = compiled(*comp_in)
    torch.testing.assert_close(c_loss, e_loss)
    assert c_loss.requires_grad and c_h.requires_grad
    e_loss.sum().backward()
    c_loss.sum().backward()
    for e, c in zip(eager_in, comp_in):
        torch.testing.assert_close(c.grad, e.grad)
    assert be.count == 1


def test_aot_eager_backward_through_no_grad_part():
    def f(x):
        with torch.no_grad():
            scale = x.abs().max()
        return (x / scale).pow(2).sum()

    x1 = t(5, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    compiled, be = compile_counting(f, backend="aot_eager")
    f(x1).backward()
    compiled(x2).backward()
    torch.testing.assert_close(x2.grad, x1.grad)
    assert be.count == 1


# ---------------------------------------------------------------------------
# frames bytegraph cannot capture: fall back to eager, or raise under fullgraph

def prints(x):
    y = x * 2
    print("value:", y.shape)  # BREAK-LINE: print
    return y + 1


def branches_on_item(x):
    if x.sum().item() > 0:  # BREAK-LINE: item
        return x * 2
    return x - 2


def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def generates(x):
    yield x * 2  # a generator frame: bytegraph runs it eagerly as a whole
    yield x + 1


def test_uncapturable_frame_runs_eagerly():
    before = bytegraph.stats().eager_fallbacks
    compiled, be = compile_counting(generates)
    for x in (t(3), t(4)):
        expected = list(generates(x))
        actual = list(compiled(x))
        assert len(actual) == len(expected) == 2
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
    assert be.count == 0
    assert bytegraph.stats().eager_fallbacks > before


@pytest.mark.parametrize("fn", [prints, branches_on_item], ids=["print", "item_in_if"])
def test_frame_with_graph_break_keeps_eager_results(fn, capsys):
    before = bytegraph.stats().graph_breaks
    compiled, be = compile_counting(fn)
    for x in (t(3), -t(3).abs()):  # both sides of the data-dependent branch
        expected = fn(x)
        torch.testing.assert_close(compiled(x), expected)
    assert bytegraph.stats().graph_breaks > before
    assert be.count >= 1  # the tensor work around the break is still captured
    if fn is prints:
        assert capsys.readouterr().out.count("value:") == 4  # once per call, eager and compiled


@pytest.mark.parametrize("fn,marker", [(prints, "BREAK-LINE: print"), (branches_on_item, "BREAK-LINE: item")],
                         ids=["print", "item_in_if"])
def test_fullgraph_raises_graph_break_error_with_location(fn, marker):
    compiled = bytegraph.compile(fn, backend="eager", fullgraph=True)
    with pytest.raises(bytegraph.GraphBreakError) as info:
        compiled(t(3))
    msg = str(info.value)
    assert f"{os.path.basename(__file__)}:{_line_of(fn, marker)}" in msg, msg


def test_user_exception_escaping_the_frame_propagates():
    def f(x):
        if x.shape[0] > 1:
            raise ValueError(f"too long: {x.shape[0]}")  # RAISE-LINE
        return x + 1

    compiled, be = compile_counting(f)
    with pytest.raises(ValueError, match="too long: 3") as info:
        compiled(t(3))
    last = info.traceback[-1]
    assert os.path.samefile(str(last.path), __file__) and last.lineno + 1 == _line_of(f, "RAISE-LINE")
    torch.testing.assert_close(compiled(t(1)), t(1) + 1)  # other shapes still compile
    assert be.count == 1


def test_round_of_tensor_raises_like_python():
    def f(x):
        return round(x * 2)

    compiled, _ = compile_counting(f)
    with pytest.raises(TypeError):
        f(t(2))
    with pytest.raises(TypeError):
        compiled(t(2))


def test_divmod_of_tensor_raises_like_python():
    def f(x):
        return divmod(x, 2)

    compiled, be = compile_counting(f)
    with pytest.raises(TypeError, match="divmod"):
        f(t(2))
    with pytest.raises(TypeError, match="divmod"):
        compiled(t(2))
    assert be.count == 0


def test_builtin_max_of_tensors_is_not_torch_maximum():
    def f(a, b):
        return max(a, b)

    compiled, be = compile_counting(f)
    a, b = torch.tensor([1.0]), torch.tensor([2.0])
    assert compiled(a, b) is f(a, b) is b  # Python returns an operand itself
    with pytest.raises(RuntimeError):
        compiled(t(3), t(4)[:3])  # bool() of a multi-element tensor, as in eager
    assert be.count == 0


def test_repeated_calls_hit_the_cache():
    def f(x):
        return x.relu() + 1

    compiled, be = compile_counting(f)
    for _ in range(5):
        x = t(4)
        torch.testing.assert_close(compiled(x), f(x))
    assert be.count == 1
    assert bytegraph.stats().cache_hits == 4


def test_new_shape_recompiles():
    def f(x):
        return x.sum(0)

    compiled, be = compile_counting(f)
    for shape in ((2, 3), (4, 3), (2, 3)):
        x = t(*shape)
        torch.testing.assert_close(compiled(x), f(x))
    assert be.count == 2

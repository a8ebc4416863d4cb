"""Repeated layers compiled once (issue 17, bytegraph/layer_reuse.py).

Every test is differential (compiled equals eager, side effects included)
and checks how many layers were served by the recorded block, so reuse that
silently stopped happening fails, and so does reuse where a layer differs.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bytegraph
from bytegraph import config
from bytegraph.block_graphs import BlockCall

from conftest import assert_same, compile_counting


class Block(nn.Module):
    """A residual block with enough operations to be worth reusing."""

    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)
        self.scale = 0.5

    def forward(self, x, gain=1.0):
        h = self.ln(x)
        h = self.down(F.gelu(self.up(h)))
        h = h * self.scale * gain
        h = h.softmax(-1) * h.tanh() + h.sigmoid() - h.relu() * 0.1
        h = (h.sin() + h.cos()).abs().sqrt() + h.exp().clamp(max=3.0)
        if self.training:
            h = h * 2
        return x + h.mean(-1, keepdim=True) + h


class Stack(nn.Module):
    def __init__(self, n=6, d=16, block=Block):
        super().__init__()
        self.layers = nn.ModuleList(block(d) for _ in range(n))
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _model(n=6, block=Block):
    torch.manual_seed(0)
    return Stack(n, block=block).eval()


def _block_calls(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, BlockCall))


def test_repeated_blocks_are_traced_once_and_called_per_layer():
    with torch.no_grad():
        _, be = assert_same(_model(), torch.randn(3, 16))
    assert bytegraph.stats().layers_reused == 5
    assert _block_calls(be.graphs[0]) == 6        # the recorded layer is a block call too
    bytegraph.reset()
    # with grad, the first layer's input (no grad) and the others' (grad) are two variants
    assert_same(_model(), torch.randn(3, 16))
    assert bytegraph.stats().layers_reused == 4


def test_too_few_layers_stay_one_graph(monkeypatch):
    monkeypatch.setattr(config, "reuse_min_layers", 4)
    _, be = assert_same(_model(3), torch.randn(3, 16))
    assert bytegraph.stats().layers_reused == 0 and _block_calls(be.graphs[0]) == 0


def test_switched_off():
    config.reuse_blocks = False
    try:
        _, be = assert_same(_model(), torch.randn(3, 16))
    finally:
        config.reuse_blocks = True
    assert bytegraph.stats().layers_reused == 0 and _block_calls(be.graphs[0]) == 0


def test_a_layer_that_differs_at_trace_time_is_traced_on_its_own():
    model = _model()
    model.layers[3].scale = 2.0            # an attribute the block reads
    model.layers[4].train()                # a training flag the block branches on
    with torch.no_grad():
        assert_same(model, torch.randn(3, 16))
    assert bytegraph.stats().layers_reused == 3     # 1, 2 and 5 (3 and 4 traced as they are)


@torch.no_grad()
def test_a_structural_change_after_compiling_is_caught_by_a_guard():
    model = _model()
    x = torch.randn(3, 16)
    cf, be = compile_counting(model)
    assert torch.allclose(cf(x), model(x))
    assert bytegraph.stats().layers_reused == 5
    for change in (lambda m: setattr(m.layers[5], "scale", 3.0),            # an attribute
                   lambda m: m.layers[2].train(),                            # a training flag
                   lambda m: m.layers[4].register_forward_hook(lambda mod, a, out: out * 0.5),   # a hook
                   lambda m: setattr(m.layers[1], "ln", nn.Identity())):     # a submodule of another class
        compiles = bytegraph.stats().frames_compiled
        change(model)
        expected = model(x)
        assert torch.allclose(cf(x), expected, atol=1e-6)
        assert bytegraph.stats().frames_compiled == compiles + 1, "the changed layer must fail a guard"
        assert torch.allclose(cf(x), expected, atol=1e-6)    # and the new entry serves it
        assert bytegraph.stats().frames_compiled == compiles + 1


def test_replacing_a_parameter_of_one_layer_recompiles_or_reads_the_new_one():
    model = _model()
    x = torch.randn(3, 16)
    cf, _ = compile_counting(model)
    cf(x)
    with torch.no_grad():
        model.layers[3].up.weight.mul_(2.0)                  # in place: the graph reads it
    assert torch.allclose(cf(x), model(x), atol=1e-6)
    model.layers[2].down.weight = nn.Parameter(torch.randn(16, 32))   # a new object
    assert torch.allclose(cf(x), model(x), atol=1e-6)


def test_shared_parameters_between_layers():
    model = _model()
    model.layers[2].up = model.layers[1].up                   # one submodule in two layers
    model.layers[4].down.weight = model.layers[0].down.weight  # tied weights
    assert_same(model, torch.randn(3, 16))
    assert bytegraph.stats().layers_reused >= 1


class RecordingBlock(Block):
    """Writes a Python attribute on every call: a side effect per layer."""

    def forward(self, x, gain=1.0):
        out = super().forward(x, gain)
        self.last = out.sum()
        return out


def test_a_layer_that_mutates_a_python_attribute_is_not_reused():
    eager, compiled = _model(block=RecordingBlock), _model(block=RecordingBlock)
    x = torch.randn(3, 16)
    cf, _ = compile_counting(compiled)
    assert torch.equal(cf(x), eager(x))
    assert bytegraph.stats().layers_reused == 0
    for a, b in zip(compiled.layers, eager.layers):
        assert torch.equal(a.last, b.last)


class PrintingBlock(Block):
    def forward(self, x, gain=1.0):
        print("block")                          # a graph break inside the block
        return super().forward(x, gain)


def test_a_break_inside_a_block(capsys):
    model = _model(block=PrintingBlock)
    assert_same(model, torch.randn(3, 16), graphs=None, breaks=None)
    assert capsys.readouterr().out.count("block") == 24


class DropoutBlock(Block):
    def forward(self, x, gain=1.0):
        return F.dropout(super().forward(x, gain), p=0.5, training=True)


def test_random_numbers_keep_eagers_order():
    model = _model(block=DropoutBlock)
    x = torch.randn(3, 16)
    cf, _ = compile_counting(model)
    torch.manual_seed(5)
    expected = model(x)
    torch.manual_seed(5)
    assert torch.equal(cf(x), expected)
    assert bytegraph.stats().layers_reused == 0


class MaskedStack(Stack):
    def forward(self, x, gains):
        for layer, gain in zip(self.layers, gains):
            x = layer(x, gain=gain)
        return self.head(x)


def test_arguments_that_differ_between_layers():
    torch.manual_seed(0)
    model = MaskedStack().eval()
    gains = (1.0, 1.0, 2.0, 1.0, 1.0, 1.0)     # a constant argument one layer gets differently
    with torch.no_grad():
        assert_same(model, torch.randn(3, 16), gains)
    assert bytegraph.stats().layers_reused == 4      # layer 2 is a variant of its own


@pytest.mark.parametrize("grad", [False, True])
def test_aot_eager_calls_one_shared_subgraph(grad):
    model = _model()
    x = torch.randn(3, 16)
    expected = model(x)
    cf, be = compile_counting(model, backend="aot_eager")
    with torch.set_grad_enabled(grad):
        out = cf(x)
    assert torch.allclose(out, expected, atol=1e-5)
    assert bytegraph.stats().layers_reused == (4 if grad else 5)
    if grad:
        out.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).sum().backward()
        for g, p in zip(grads, model.parameters()):
            assert torch.allclose(g, p.grad, atol=1e-5)


def test_explain_and_logs_say_what_was_reused():
    from conftest import captured_logs
    with captured_logs("layer_reuse") as records:
        model = _model(block=RecordingBlock)
        bytegraph.compile(model, backend="eager")(torch.randn(3, 16))
    text = "\n".join(records)
    assert "RecordingBlock" in text and "side effects" in text

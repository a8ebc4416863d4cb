"""Cutting graphs at DDP's buckets, in one process: a stand-in for the DDP
module is made active (as DDP does around the call of the module it wraps),
so the cuts, the refused cuts and the pieces' results are checked against
eager without starting processes.  tests/test_distributed_ddp.py runs real DDP.
"""

from __future__ import annotations

import contextlib
import types

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import bytegraph
from bytegraph import config
from bytegraph.distributed.ddp import bucket_cuts
from bytegraph.distributed.graph_split import split_graph, valid_cut
from conftest import CountingBackend

WIDTH = 16
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4


@contextlib.contextmanager
def ddp_active(module, cap_bytes):
    """``module`` seen as wrapped by a DDP whose buckets hold ``cap_bytes``."""
    fake = types.SimpleNamespace(module=module, parameters_to_ignore=(), bucket_bytes_cap=cap_bytes,
                                 _bucket_config=types.SimpleNamespace(first_bucket_bytes_cap=cap_bytes))
    saved = DistributedDataParallel._active_ddp_module
    DistributedDataParallel._active_ddp_module = fake
    try:
        yield fake
    finally:
        DistributedDataParallel._active_ddp_module = saved


def mlp(layers=6, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(WIDTH, WIDTH), nn.Tanh())])


def train_steps(call, model, xs):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = call(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def compare_with_eager(make, xs, cap, backend="aot_eager"):
    eager = make()
    expected = train_steps(eager, eager, xs)
    model = make()
    counting = CountingBackend(backend)
    compiled = bytegraph.compile(model, backend=counting)
    with ddp_active(model, cap):
        got = train_steps(compiled, model, xs)
    assert got[0] == expected[0]
    for a, b in zip(got[1], expected[1]):
        assert torch.equal(a, b)
    return counting


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_one_graph_per_bucket_and_eager_results(backend):
    xs = [torch.randn(3, WIDTH) for _ in range(3)]
    counting = compare_with_eager(mlp, xs, 2 * LAYER_BYTES, backend)
    assert counting.count == 3 and bytegraph.stats().graphs == 3
    # each piece holds two layers: two linear ops (and their tanh)
    assert counting.op_counts() == [4, 4, 4]


def test_no_cut_outside_ddp_or_when_turned_off(monkeypatch):
    x = torch.randn(3, WIDTH)
    counting = CountingBackend("aot_eager")
    model = mlp()
    bytegraph.compile(model, backend=counting)(x)
    assert counting.count == 1
    monkeypatch.setattr(config, "ddp_bucket_split", False)
    counting = CountingBackend("aot_eager")
    with ddp_active(model, 2 * LAYER_BYTES):
        bytegraph.compile(model, backend=counting)(x)
    assert counting.count == 1


def test_weight_and_bias_share_a_bucket():
    """A bucket closing between a layer's weight and bias cannot be cut there: the
    layer's parameters fill the bucket together, and the cut is before the next layer."""
    model = mlp(4)
    counting = CountingBackend()
    bytegraph.compile(model, backend=counting)(torch.randn(2, WIDTH))
    gm = counting.graphs[0]
    inputs = [types.SimpleNamespace(example=p, node=n, source=types.SimpleNamespace(name=lambda n=n: n.name))
              for n, p in zip([n for n in gm.graph.nodes if n.op == "placeholder"][1:], model.parameters())]
    fake = types.SimpleNamespace(module=model, parameters_to_ignore=(), bucket_bytes_cap=WIDTH * WIDTH * 4 + 4,
                                 _bucket_config=types.SimpleNamespace(first_bucket_bytes_cap=WIDTH * WIDTH * 4 + 4))
    cuts, buckets = bucket_cuts(gm, inputs, fake)
    # every layer closes a bucket (weight + bias >= the cap): 4 buckets, cuts before layers 1, 2, 3
    assert [len(names) for names, _ in buckets] == [2, 2, 2, 2]
    assert len(cuts) == 3
    linears = [n for n in gm.graph.nodes if n.op == "call_function" and "linear" in str(n.target)]
    assert [c.node for c in cuts] == linears[1:]


class WithNorm(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(WIDTH, WIDTH)
        self.bn = nn.BatchNorm1d(WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)
        self.c = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.c(self.b(self.bn(self.a(x)).relu()).tanh())


def test_buffers_written_in_a_piece():
    xs = [torch.randn(4, WIDTH) for _ in range(3)]
    compare_with_eager(WithNorm, xs, LAYER_BYTES)
    eager, model = WithNorm(), WithNorm()
    train_steps(eager, eager, xs)
    with ddp_active(model, LAYER_BYTES):
        train_steps(bytegraph.compile(model, backend="aot_eager"), model, xs)
    assert torch.equal(eager.bn.running_mean, model.bn.running_mean)
    assert torch.equal(eager.bn.running_var, model.bn.running_var)
    assert eager.bn.num_batches_tracked == model.bn.num_batches_tracked


class NoGradMiddle(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = mlp(4)

    def forward(self, x):
        x = self.layers[1](self.layers[0](x))
        with torch.no_grad():
            x = self.layers[3](self.layers[2](x))    # a cut here would start a piece in no_grad
            x = self.layers[5](self.layers[4](x))
        return self.layers[7](self.layers[6](x))


def test_no_cut_inside_a_grad_mode_switch():
    xs = [torch.randn(3, WIDTH) for _ in range(2)]
    counting = compare_with_eager(NoGradMiddle, xs, LAYER_BYTES)
    # four one-layer buckets: cuts before layers 1, 2 and 3; the two that
    # would start a piece inside the no_grad block are refused
    assert counting.count == 2


def _graph_of(fn, *args):
    counting = CountingBackend()
    bytegraph.compile(fn, backend=counting)(*args)
    return counting.graphs[0]


def test_cut_refused_for_a_value_written_after_it():
    def f(x, w):
        h = x @ w
        g = h.sin()
        h.mul_(2)          # h crosses a cut before ``g``'s user and is written after it
        return g.cos() + h
    gm = _graph_of(f, torch.randn(3, 3), torch.randn(3, 3))
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    sin = next(n for n in nodes if n.name.startswith("sin"))
    after_sin = nodes[nodes.index(sin) + 1]
    assert not valid_cut(gm.graph, after_sin, True)
    assert valid_cut(gm.graph, sin, True) is False   # (``h`` crosses that cut too)


def test_cut_refused_for_a_non_tensor_value():
    def f(x):
        parts = torch.split(x, 2)
        return parts[0].sin() + parts[1].cos()
    gm = _graph_of(f, torch.randn(4, 3))
    split = next(n for n in gm.graph.nodes if "split" in str(n.target))
    first_getitem = next(iter(split.users))
    assert not valid_cut(gm.graph, first_getitem, True)


def test_pieces_compute_the_graph():
    def f(x, w):
        a = (x @ w).relu()
        b = a * 3 + x
        return b.sum(0), a
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    gm = _graph_of(f, x, w)
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    pieces = split_graph(gm, [nodes[2], nodes[4]])
    assert len(pieces) == 3
    from bytegraph.distributed.graph_split import PieceRunner
    runner = PieceRunner(gm, pieces, [p.gm.forward for p in pieces])
    for got, expected in zip(runner(x, w), gm.forward(x, w)):
        assert torch.equal(got, expected)


class Adversarial(nn.Module):
    """Cuts between layers while: a buffer is written early and read late, an
    early weight is used again at the end (tied), the result is a dict holding a
    view of an early intermediate, and the middle runs under autocast."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2, self.l3, self.l4 = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps.add_(1)
        h = self.l1(x).relu()
        g = self.l2(h).tanh()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            g = self.l3(g).float()
        out = self.l4(g) + torch.nn.functional.linear(g, self.l1.weight) * self.steps
        return {"out": out, "h_flat": h.view(-1), "h": h}


def test_adversarial_model_matches_eager():
    xs = [torch.randn(3, WIDTH) for _ in range(3)]

    def call(model):
        def run(x):
            d = model(x)
            return d["out"] + d["h_flat"].sum() + d["h"].mean()
        return run
    eager = Adversarial()
    expected = train_steps(call(eager), eager, xs)
    model = Adversarial()
    counting = CountingBackend("aot_eager")
    compiled = bytegraph.compile(model, backend=counting)
    with ddp_active(model, LAYER_BYTES):
        got = train_steps(call(compiled), model, xs)
    assert got[0] == expected[0]
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    assert torch.equal(model.steps, eager.steps)
    # l1 (first used first, then again last), l2, l3 (inside autocast: no cut before it), l4
    assert counting.count >= 2
    d = compiled(xs[0])
    assert d["h_flat"]._base is d["h"]          # the view's base is the returned tensor, as in eager



def test_class_with_a_raising_metaclass_eq_is_not_compared_with_dtensor_placements():
    # With torch.distributed.tensor loaded, a class met in a trace was looked up
    # among DTensor's placement classes with ``in`` (which compares by ``==``):
    # a metaclass's raising ``__eq__`` ran at trace time and the compile failed.
    # The semantics test of that class, run with the placement classes known:
    import torch.distributed.tensor  # noqa: F401
    from test_python_semantics import test_class_with_a_raising_metaclass_eq_is_wrapped_without_comparing as check
    check()


class TwoLayerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = self.a(x)
        for _ in range(4):
            h = h.tanh() * 0.5 + h.sigmoid()
        return x + self.b(h)


class Stack(nn.Module):
    """Four identical blocks: layer reuse records the first and reuses it."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList([TwoLayerBlock() for _ in range(4)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_buckets_closing_inside_reused_blocks_are_cut_there(backend):
    """DDP's buckets close parameter by parameter, here inside a block (three of the
    eight layers per bucket).  A reused block is one graph node, which no cut can
    split: under DDP's cuts the blocks are traced layer by layer, so every bucket
    gets its own piece (with reuse: two pieces of two blocks each, and a bucket's
    all-reduce waiting for the rest of its piece's backward)."""
    x = torch.randn(3, WIDTH)
    bytegraph.compile(Stack(), backend=CountingBackend(backend))(x)
    assert bytegraph.stats().layers_reused >= 2          # the model does hit layer reuse
    bytegraph.reset()
    xs = [torch.randn(3, WIDTH) for _ in range(3)]
    counting = compare_with_eager(Stack, xs, 3 * LAYER_BYTES, backend)
    assert bytegraph.stats().layers_reused == 0
    # buckets of 3, 3 and 2 layers (last used first): pieces of 2, 3 and 3 linear layers
    assert counting.count == 3
    linears = [sum("linear" in str(n.target) for n in g.graph.nodes) for g in counting.graphs]
    assert linears == [2, 3, 3]

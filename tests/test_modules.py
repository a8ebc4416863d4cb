"""nn.Module support (issue 5): module trees, hooks, guards and training."""

import copy
import dataclasses

import pytest
import torch
from torch import nn

import bytegraph
from conftest import CountingBackend


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.drop = nn.Dropout(0.0)
        self.scale = 2.0

    @property
    def width(self):
        return self.fc.out_features

    def forward(self, x):
        h = self.fc(self.ln(x))
        if self.training:
            h = self.drop(h)
        assert h.shape[-1] == self.width
        return x + h * self.scale


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    depth: int = 0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(8) for _ in range(3)])
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})
        self.bn = nn.BatchNorm1d(8)
        self.register_buffer("offset", torch.ones(4))

    def forward(self, x):
        x = self.bn(x)
        for i, blk in enumerate(self.blocks):
            x = blk(x) if i % 2 == 0 else self.blocks[i](x)
        y = self.seq(x) + self.offset
        outs = {k: h(y) for k, h in self.heads.items()}
        if isinstance(self.seq[1], nn.ReLU) and getattr(self, "missing", None) is None:
            y = y * 1
        return Output(outs["a"] + outs["b"], depth=len(self.blocks))


def pair(seed=0):
    torch.manual_seed(seed)
    net = Net()
    return net, copy.deepcopy(net)


def test_module_tree_compiles_to_one_graph_and_matches_eager():
    eager, other = pair()
    be = CountingBackend()
    compiled = bytegraph.compile(other, backend=be, fullgraph=True)
    x = torch.randn(5, 8)
    out, ref = compiled(x), eager(x)
    assert isinstance(out, Output) and out.depth == ref.depth == 3
    torch.testing.assert_close(out.logits, ref.logits)
    # batch-norm running statistics were updated in place, once
    torch.testing.assert_close(other.bn.running_mean, eager.bn.running_mean)
    assert int(other.bn.num_batches_tracked) == int(eager.bn.num_batches_tracked) == 1
    assert be.count == 1


def test_compiled_module_passes_everything_else_through():
    net = Net()
    compiled = bytegraph.compile(net, backend="eager")
    assert compiled.state_dict().keys() == net.state_dict().keys()
    assert list(compiled.parameters()) == list(net.parameters())
    assert [n for n, _ in compiled.named_modules()] == [n for n, _ in net.named_modules()]
    assert compiled.blocks is net.blocks
    compiled.eval()
    assert not net.training and not compiled.training
    compiled.to(torch.float64)
    assert net.seq[0].weight.dtype == torch.float64
    compiled.extra = 5
    assert net.extra == 5


def test_bound_forward_can_be_compiled():
    eager, other = pair()
    be = CountingBackend()
    fwd = bytegraph.compile(other.forward, backend=be, fullgraph=True)
    x = torch.randn(4, 8)
    torch.testing.assert_close(fwd(x).logits, eager(x).logits)
    assert be.count == 1


def test_training_flag_swapped_submodule_and_replaced_parameter_are_guarded():
    eager, other = pair()
    be = CountingBackend()
    compiled = bytegraph.compile(other, backend=be)
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x).logits, eager(x).logits)
    for m in (eager, other):
        m.eval()
    torch.testing.assert_close(compiled(x).logits, eager(x).logits)
    new_head = nn.Linear(4, 2)
    eager.heads["a"], other.heads["a"] = copy.deepcopy(new_head), new_head
    torch.testing.assert_close(compiled(x).logits, eager(x).logits)
    w = torch.randn(8, 8)
    eager.seq[0].weight = nn.Parameter(w.clone())
    other.seq[0].weight = nn.Parameter(w.clone())
    torch.testing.assert_close(compiled(x).logits, eager(x).logits)
    assert be.count == 4
    # in-place parameter updates need no recompile
    with torch.no_grad():
        for p, q in zip(eager.parameters(), other.parameters()):
            p.add_(0.5)
            q.add_(0.5)
    torch.testing.assert_close(compiled(x).logits, eager(x).logits)
    assert be.count == 4


def test_forward_pre_hooks_and_forward_hooks_run_as_in_eager():
    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
        log = []

        def pre(mod, args):
            log.append(("pre", type(mod).__name__))
            return (args[0] * 2,)

        def post(mod, args, out):
            log.append(("post", tuple(out.shape)))
            return out + 1

        def post_kw(mod, args, kwargs, out):
            log.append(("post_kw", len(kwargs)))

        model[0].register_forward_pre_hook(pre)
        model[2].register_forward_hook(post)
        model.register_forward_hook(post_kw, with_kwargs=True)
        return model, log

    x = torch.randn(3, 4)
    eager, eager_log = build()
    other, log = build()
    be = CountingBackend()
    compiled = bytegraph.compile(other, backend=be, fullgraph=True)
    torch.testing.assert_close(compiled(x), eager(x))
    assert log == eager_log and len(log) == 3
    assert be.count == 1
    # a hook added later is seen (hook dicts are guarded)
    other[1].register_forward_hook(lambda m, a, o: o * 0)
    eager[1].register_forward_hook(lambda m, a, o: o * 0)
    torch.testing.assert_close(compiled(x), eager(x))
    assert be.count == 2


def test_parameter_hook_registered_inside_forward():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            k = 3.0
            self.w.register_hook(lambda g: g * k)
            return (self.w * x).sum()

    for compiled in (False, True):
        m = Scaled()
        f = bytegraph.compile(m, backend="aot_eager", fullgraph=True) if compiled else m
        f(torch.arange(3.0)).backward()
        grads = m.w.grad.clone()
        if not compiled:
            expected = grads
    torch.testing.assert_close(grads, expected)
    torch.testing.assert_close(grads, torch.tensor([0.0, 3.0, 6.0]))


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_three_training_steps_match_eager(backend):
    eager, other = pair(1)
    compiled = bytegraph.compile(other, backend=backend)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(other.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(step))
        for model, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad()
            loss = model(x).logits.pow(2).mean()
            loss.backward()
            opt.step()
    for p, q in zip(eager.parameters(), other.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # float tolerance: same ops, fused by AOT


def test_backward_and_optimizer_step_inside_compiled_function_break_cleanly():
    eager, other = pair(2)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(other.parameters(), lr=0.1)

    def make_step(model, opt):
        def step(x):
            opt.zero_grad()
            loss = model(x).logits.sum()
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    compiled_step = bytegraph.compile(make_step(other, opt_c), backend="eager")
    eager_step = make_step(eager, opt_e)
    for i in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled_step(x), eager_step(x))
    for p, q in zip(eager.parameters(), other.parameters()):
        torch.testing.assert_close(p, q)
    assert bytegraph.stats().graphs >= 1


def test_compiled_container_module_keeps_its_protocol():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    compiled = bytegraph.compile(seq, backend="eager")
    assert compiled[0] is seq[0] and len(compiled) == 2 and list(compiled) == list(seq)
    assert seq[1] in compiled


def test_same_module_passed_twice_then_two_modules():
    def f(x, m1, m2):
        return m2(m1(x))

    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    cf = bytegraph.compile(f, backend=CountingBackend())
    x = torch.randn(1, 2)
    torch.testing.assert_close(cf(x, a, a), f(x, a, a))
    torch.testing.assert_close(cf(x, a, b), f(x, a, b))


def test_tied_weights_then_untied():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(3, 3, bias=False)
            self.dec = nn.Linear(3, 3, bias=False)
            self.dec.weight = self.enc.weight

        def forward(self, x):
            return self.dec(self.enc(x))

    m = Tied()
    cf = bytegraph.compile(m, backend=CountingBackend())
    x = torch.randn(2, 3)
    torch.testing.assert_close(cf(x), m(x))
    m.dec.weight = nn.Parameter(torch.randn(3, 3))
    torch.testing.assert_close(cf(x), m(x))

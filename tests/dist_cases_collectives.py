"""Collectives, DTensor and FSDP2 cases, run on two processes by tests/test_distributed_collectives.py.

Each case runs a function eagerly and compiled on equal inputs and reports
the largest difference, the graph and break counts and the break kinds.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

import bytegraph
from bytegraph.backends import lookup_backend
from distributed_harness import case


def diff(a, b) -> float:
    """Largest absolute difference of two (nested) results; inf if their structure differs."""
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return float("inf")
        return max([diff(x, y) for x, y in zip(a, b)] or [0.0])
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape:
            return float("inf")
        return (to_plain(a) - to_plain(b)).abs().max().item() if a.numel() else 0.0
    return 0.0 if a == b else float("inf")


def to_plain(t):
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        return t.full_tensor().detach()
    if isinstance(t, funcol.AsyncCollectiveTensor):
        return t.wait().detach()
    return t.detach()


class Counting:
    """A backend that records each graph's node targets, then runs it with ``inner``."""

    def __init__(self, inner="eager"):
        self.inner = lookup_backend(inner)[1]
        self.targets = []

    def __call__(self, gm, example_inputs):
        self.targets.append([str(getattr(n.target, "__name__", n.target)) for n in gm.graph.nodes
                             if n.op in ("call_function", "call_method")])
        return self.inner(gm, example_inputs)


def differential(fn, make_args, backend="eager", calls=1):
    """Run ``fn`` eagerly and compiled on fresh equal arguments; what they did, compared."""
    counting = Counting(backend)
    compiled = bytegraph.compile(fn, backend=counting)
    worst, worst_args = 0.0, 0.0
    for _ in range(calls):
        args_e, args_c = make_args(), make_args()
        expected = fn(*args_e)
        got = compiled(*args_c)
        worst = max(worst, diff(expected, got))
        worst_args = max(worst_args, diff(list(args_e), list(args_c)))
    report = bytegraph.explain(fn, backend="eager")(*make_args())
    s = bytegraph.stats()
    return {"diff": worst, "args_diff": worst_args, "graphs": len(counting.targets), "targets": counting.targets,
            "graph_breaks": s.graph_breaks, "eager_fallbacks": s.eager_fallbacks, "recompiles": s.recompiles,
            "break_kinds": sorted({b.kind for b in report.break_reasons}), "guards": report.guards}


def ones(rank, *shape):
    return lambda: (torch.arange(float(torch.Size(shape).numel())).reshape(shape) + 10 * rank,)


# -- functional collectives -------------------------------------------------------------------

@case
def funcol_in_graph(rank, world):
    def f(x):
        y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
        g = funcol.all_gather_tensor(x, 0, [0, 1])
        r = funcol.reduce_scatter_tensor(g, "sum", 0, dist.group.WORLD)
        b = funcol.broadcast(x + 1, 1, dist.group.WORLD)
        return y + 1, g * 2, r, b
    return differential(f, ones(rank, 4, 3))


@case
def funcol_aot_training(rank, world):
    """The autograd form of all_gather: backward reduce-scatters, through AOTAutograd."""
    def f(x):
        return (funcol.all_gather_tensor_autograd(x * x, 0, dist.group.WORLD).sin() * (rank_weight(x))).sum()

    def rank_weight(x):
        return torch.arange(1.0, 1.0 + 2 * x.shape[0]).reshape(-1, 1)

    def make():
        return (torch.arange(6.0).reshape(3, 2).add(rank).requires_grad_(),)
    xe, xc = make()[0], make()[0]
    f(xe).backward()
    counting = Counting("aot_eager")
    bytegraph.compile(f, backend=counting)(xc).backward()
    return {"grad_diff": diff(xe.grad, xc.grad), "graphs": len(counting.targets),
            "eager_fallbacks": bytegraph.stats().eager_fallbacks}


@case
def funcol_unused_result_still_runs(rank, world):
    """A collective whose result is unused stays in the graph: every rank must join it."""
    def f(x):
        funcol.all_reduce(x, "sum", dist.group.WORLD)
        return x + 1
    out = differential(f, ones(rank, 2))
    # the next collective pairs with the right one on the other rank
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    out["after"] = t.item()
    return out


# -- in-place c10d collectives ----------------------------------------------------------------

@case
def inplace_all_reduce(rank, world):
    def f(x):
        y = x * 2
        dist.all_reduce(y)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)   # an input, written in place
        return y + x
    return differential(f, ones(rank, 4), backend="aot_eager", calls=2)


@case
def inplace_variants(rank, world):
    def f(x, out, gathered, scattered):
        dist.broadcast(x, src=1)
        dist.all_gather_into_tensor(out, x)
        dist.all_gather(gathered, x * 3)
        dist.reduce_scatter_tensor(scattered, out)
        return x.sum(), out * 1, gathered[1] + 0, scattered

    def make():
        return (torch.arange(4.0) + rank, torch.zeros(8), [torch.zeros(4), torch.zeros(4)], torch.zeros(4))
    return differential(f, make)


@case
def async_collective_breaks(rank, world):
    def f(x):
        y = x * 2
        work = dist.all_reduce(y, async_op=True)
        work.wait()
        return y + 1
    return differential(f, ones(rank, 3))


@case
def barrier_breaks(rank, world):
    def f(x):
        y = x + 1
        dist.barrier()
        return y * 2
    return differential(f, ones(rank, 3))


# -- ranks as constants -----------------------------------------------------------------------

@case
def rank_constants(rank, world):
    def f(x):
        if dist.get_rank() == 0:          # a branch on the rank: each rank traces its own side
            x = x + 100
        return x * dist.get_world_size() + dist.get_rank()
    return differential(f, ones(rank, 3), calls=2)


@case
def rank_of_another_group(rank, world):
    """get_rank(group) per group: another group (another name) recompiles."""
    solo = [dist.new_group([r]) for r in range(world)][rank]   # every rank makes every group

    def f(x, group):
        return x * dist.get_world_size(group) + dist.get_rank(group)
    compiled = bytegraph.compile(f, backend="eager")
    x = torch.ones(2)
    results = [compiled(x, g).tolist() for g in (dist.group.WORLD, solo, dist.group.WORLD)]
    expected = [f(x, g).tolist() for g in (dist.group.WORLD, solo, dist.group.WORLD)]
    s = bytegraph.stats()
    return {"same": results == expected, "recompiles": s.recompiles, "graph_breaks": s.graph_breaks,
            "eager_fallbacks": s.eager_fallbacks}


# -- DTensor ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def mesh():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (dist.get_world_size(),))


def _dtensors():
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    torch.manual_seed(0)
    w = nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh(), [Shard(0)]))
    x = distribute_tensor(torch.randn(3, 4), mesh(), [Replicate()])
    return x, w


def _dtensor_fn(x, w):
    y = torch.nn.functional.linear(x, w)          # sharded along its columns
    total = y.relu().sum().full_tensor()          # a pending sum, all-reduced
    local = y.to_local()
    return total * 2 + local.sum() * 0.5, y.placements, tuple(y.shape)


def _dtensor_case(backend):
    (xe, we), (xc, wc) = _dtensors(), _dtensors()
    expected = _dtensor_fn(xe, we)
    counting = Counting(backend)
    got = bytegraph.compile(_dtensor_fn, backend=counting)(xc, wc)
    expected[0].backward()
    got[0].backward()
    s = bytegraph.stats()
    return {"diff": diff(list(expected), list(got)), "grad_diff": diff(we.grad, wc.grad),
            "graphs": len(counting.targets), "graph_breaks": s.graph_breaks, "eager_fallbacks": s.eager_fallbacks,
            "placements": str(got[1])}


@case
def dtensor_eager_backend(rank, world):
    return _dtensor_case("eager")


@case
def dtensor_aot(rank, world):
    return _dtensor_case("aot_eager")


@case
def dtensor_placement_guard(rank, world):
    """A DTensor with another placement fails the guard and recompiles; results stay eager's."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    torch.manual_seed(0)
    base = torch.randn(4, 6)

    def f(t):
        return (t * 2).sum(0).full_tensor()
    compiled = bytegraph.compile(f, backend="aot_eager")
    worst = 0.0
    for placement in (Shard(0), Shard(1), Replicate(), Shard(0)):
        t = distribute_tensor(base, mesh(), [placement])
        worst = max(worst, diff(f(t), compiled(t)))
    s = bytegraph.stats()
    report = bytegraph.explain(f)(distribute_tensor(base, mesh(), [Shard(0)]))
    return {"diff": worst, "recompiles": s.recompiles, "eager_fallbacks": s.eager_fallbacks,
            "subclass_guards": [g for g in report.guards if "flattening context" in g]}


@case
def dtensor_optimizer_step(rank, world):
    """An SGD step with momentum over DTensor parameters and gradients, compiled."""
    from torch.distributed.tensor import Shard, distribute_tensor

    def make():
        torch.manual_seed(0)
        params = [nn.Parameter(distribute_tensor(torch.randn(6, 4), mesh(), [Shard(0)])) for _ in range(2)]
        for p in params:
            p.grad = distribute_tensor(torch.randn(6, 4), mesh(), [Shard(0)])
        bufs = [torch.zeros_like(p) for p in params]
        return params, bufs

    @torch.no_grad()
    def step(params, bufs):
        for p, b in zip(params, bufs):
            b.mul_(0.9).add_(p.grad)
            p.add_(b, alpha=-0.1)

    (pe, be), (pc, bc) = make(), make()
    compiled = bytegraph.compile(step, backend="aot_eager")
    for _ in range(3):
        step(pe, be)
        compiled(pc, bc)
    s = bytegraph.stats()
    return {"diff": diff(pe + be, pc + bc), "graphs": s.graphs, "graph_breaks": s.graph_breaks,
            "eager_fallbacks": s.eager_fallbacks}


# -- FSDP2 --------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.a = nn.Linear(width, 2 * width)
        self.b = nn.Linear(2 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + self.b(self.a(self.norm(x)).relu())


class Stack(nn.Module):
    def __init__(self, blocks=3):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block() for _ in range(blocks)])
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def _fsdp_model(compile_blocks=None, **shard_kw):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = Stack()
    for block in model.blocks:
        fully_shard(block, mesh=mesh(), **shard_kw)
    fully_shard(model, mesh=mesh(), **shard_kw)
    if compile_blocks is not None:
        for i, block in enumerate(model.blocks):
            model.blocks[i] = bytegraph.compile(block, backend=compile_blocks)
    return model


def _fsdp_train(model, call, rank, steps=3):
    g = torch.Generator().manual_seed(50 + rank)
    xs = [torch.randn(4, 8, generator=g) for _ in range(steps)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = call(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.grad for p in model.parameters()], [p.detach() for p in model.parameters()]


def _fsdp_case(rank, backend="aot_eager", whole=True, **shard_kw):
    eager = _fsdp_model(**shard_kw)
    e = _fsdp_train(eager, eager, rank)
    if whole:
        model = _fsdp_model(**shard_kw)
        c = _fsdp_train(model, bytegraph.compile(model, backend=backend), rank)
    else:
        model = _fsdp_model(compile_blocks=backend, **shard_kw)
        c = _fsdp_train(model, model, rank)
    from torch.distributed.tensor import DTensor
    s = bytegraph.stats()
    return {"loss_diff": diff(e[0], c[0]), "grad_diff": diff(e[1], c[1]), "param_diff": diff(e[2], c[2]),
            "losses": [e[0], c[0]], "params_are_dtensors": all(isinstance(p, DTensor) for p in model.parameters()),
            "graphs": s.graphs, "graph_breaks": s.graph_breaks, "eager_fallbacks": s.eager_fallbacks,
            "frames_compiled": s.frames_compiled}


@case
def fsdp2_whole_model(rank, world):
    """fully_shard per block and on the root, the root compiled: blocks' forward traced between the hooks."""
    out = _fsdp_case(rank)
    model = _fsdp_model()
    report = bytegraph.explain(model, backend="eager")(torch.randn(4, 8))
    report.result.sum().backward()    # (FSDP expects the backward of its forward)
    out["break_kinds"] = sorted({b.kind for b in report.break_reasons})
    out["explain_graphs"] = report.graph_count
    return out


@case
def fsdp2_compiled_blocks(rank, world):
    """Each fully_shard-ed block compiled on its own (in place in the ModuleList)."""
    return _fsdp_case(rank, whole=False)


@case
def fsdp2_no_reshard_after_forward(rank, world):
    return _fsdp_case(rank, reshard_after_forward=False)


REPLICATED = None   # set by dtensor_redistribute (a placement list read from a global)


@case
def dtensor_redistribute(rank, world):
    """Methods of DTensor taking a mesh and placements (made in the trace, or read from a global)."""
    global REPLICATED
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    REPLICATED = [Replicate()]
    torch.manual_seed(0)
    w = distribute_tensor(torch.randn(8, 4), mesh(), [Shard(0)])
    m = mesh()

    def f(w):
        a = w.redistribute(m, [Replicate()]) * 2
        b = w.redistribute(m, REPLICATED).to_local() + 1
        c = w.redistribute(placements=(Shard(1),)) + 0
        return a, b, c, w.placements[0] == Shard(0)

    def g(t):
        return DTensor.from_local(t * 2, m, [Shard(0)]).full_tensor()
    out = {}
    for name, fn, args in (("redistribute", f, (w,)), ("from_local", g, (torch.ones(2, 3) * (rank + 1),))):
        for backend in ("eager", "aot_eager"):
            bytegraph.reset()
            counting = Counting(backend)
            got = bytegraph.compile(fn, backend=counting)(*args)
            s = bytegraph.stats()
            out[f"{name}_{backend}"] = {"diff": diff(fn(*args), got), "graphs": len(counting.targets),
                                        "graph_breaks": s.graph_breaks, "eager_fallbacks": s.eager_fallbacks}
    return out

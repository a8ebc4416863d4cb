"""DistributedDataParallel cases, run on two processes by tests/test_distributed_ddp.py.

Each case trains an eager DDP model and a bytegraph-compiled one from the
same initial weights on the same per-rank data, and reports losses,
gradients and parameters compared after 3 optimizer steps, plus graph and
bucket counts.
"""

from __future__ import annotations

import re
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import bytegraph
from bytegraph import config
from bytegraph.backends import lookup_backend
from distributed_harness import case

WIDTH = 64
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4
#: two layers per bucket: a bucket closes when it reaches its limit
TWO_LAYERS_MB = 2 * LAYER_BYTES / 2 ** 20


def mlp(layers=6, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])


def batches(rank, n=3, rows=4, width=WIDTH):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(rows, width, generator=g) for _ in range(n)]


class Counting:
    """A backend recording the parameters (by name) each graph reads."""

    def __init__(self, inner="aot_eager"):
        self.inner = lookup_backend(inner)[1]
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(param_names(gm))
        return self.inner(gm, example_inputs)


def param_names(gm):
    """The parameters a graph takes, named as in ``named_parameters()`` of the wrapped model."""
    out = []
    for n in gm.graph.nodes:
        src = n.meta.get("source", "") if n.op == "placeholder" else ""
        if "_parameters[" in src:
            name = re.sub(r"_(?:modules|parameters|buffers)\['([^']+)'\]", r"\1", src)
            out.append(name.split("module.", 1)[-1])
    return out


def train(model, xs, steps=3, opt_cls=torch.optim.SGD, **opt_kw):
    """losses, then gradients and parameters after the last step (cloned)."""
    opt = opt_cls(model.parameters(), lr=0.05, **opt_kw)
    losses = []
    for x in xs[:steps]:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    params = [p.detach().clone() for p in model.parameters()]
    return losses, grads, params


def max_diff(a, b):
    """Largest absolute difference of two lists of tensors (None must match None)."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if (x is None) != (y is None):
            return float("inf")
        if x is not None:
            worst = max(worst, (x - y).abs().max().item())
    return worst


def compare(eager, compiled):
    (le, ge, pe), (lc, gc, pc) = eager, compiled
    return {"losses": [le, lc], "loss_diff": max(abs(a - b) for a, b in zip(le, lc)),
            "grad_diff": max_diff(ge, gc), "param_diff": max_diff(pe, pc)}


def stats():
    return bytegraph.stats().as_dict()


# -- both wrappings --------------------------------------------------------------------------

def _wrapped_case(rank, backend, outer):
    xs = batches(rank)
    eager = train(DDP(mlp()), xs)
    model = bytegraph.compile(DDP(mlp()), backend=backend) if outer else DDP(bytegraph.compile(mlp(), backend=backend))
    out = compare(eager, train(model, xs))
    out.update(stats())
    return out


@case
def ddp_inner_eager(rank, world):
    """DDP(bytegraph.compile(model)), backend "eager"."""
    return _wrapped_case(rank, "eager", outer=False)


@case
def ddp_inner_aot(rank, world):
    """DDP(bytegraph.compile(model)), backend "aot_eager"."""
    return _wrapped_case(rank, "aot_eager", outer=False)


@case
def ddp_outer_aot(rank, world):
    """bytegraph.compile(DDP(model)), backend "aot_eager"."""
    return _wrapped_case(rank, "aot_eager", outer=True)


# -- buckets ---------------------------------------------------------------------------------

def _bucket_params(ddp):
    """Each DDP bucket's parameter names, in bucket order (read through a comm hook on one step)."""
    names = {id(p): n for n, p in ddp.module.named_parameters()}
    seen = {}
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(state, bucket):
        seen[bucket.index()] = sorted(names[id(p)] for p in bucket.parameters())
        return default_hooks.allreduce_hook(state, bucket)
    return seen, hook


@case
def bucket_graphs(rank, world):
    """Graph count == DDP's bucket count, and each graph holds exactly one bucket's parameters."""
    backend = Counting()
    inner = mlp()
    ddp = DDP(bytegraph.compile(inner, backend=backend), bucket_cap_mb=TWO_LAYERS_MB)
    xs = batches(rank)
    train(ddp, xs[:2], steps=2)            # DDP rebuilds its buckets in gradient order after step 1
    seen, hook = _bucket_params(ddp)
    ddp.register_comm_hook(None, hook)
    train(ddp, xs[2:], steps=1)
    buckets = [seen[i] for i in sorted(seen)]
    return {"graphs": stats()["graphs"], "backend_calls": len(backend.graphs),
            "ddp_buckets": len(buckets), "buckets": buckets,
            "graph_params": [sorted(g) for g in backend.graphs],
            "reducer_buckets": len(ddp.reducer._get_zeros_like_grad_buckets())}


@case
def bucket_graphs_default_cap(rank, world):
    """A model smaller than the default 25 MiB cap: one bucket, one graph (no cut)."""
    backend = Counting()
    ddp = DDP(bytegraph.compile(mlp(), backend=backend))
    train(ddp, batches(rank), steps=3)
    return {"graphs": stats()["graphs"], "reducer_buckets": len(ddp.reducer._get_zeros_like_grad_buckets())}


def _timed_backend(events):
    """aot_eager whose backward of piece k records ("bw_start"/"bw_end", k, time)."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    pieces = []

    def backend(gm, example_inputs):
        k = len(pieces)
        pieces.append(param_names(gm))

        def bw_compiler(bw_gm, _):
            def run(*args):
                events.append(("bw_start", k, time.perf_counter()))
                out = bw_gm(*args)
                events.append(("bw_end", k, time.perf_counter()))
                return out
            return make_boxed_func(run)
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: make_boxed_func(g.forward),
                                     bw_compiler=bw_compiler)
    return backend, pieces


def _hook_order(rank, split: bool):
    events = []
    backend, pieces = _timed_backend(events)
    config.ddp_bucket_split = split
    try:
        ddp = DDP(bytegraph.compile(mlp(), backend=backend), bucket_cap_mb=TWO_LAYERS_MB)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):
            events.append(("bucket", bucket.index(), time.perf_counter()))
            return default_hooks.allreduce_hook(state, bucket)
        ddp.register_comm_hook(None, hook)
        xs = batches(rank)
        train(ddp, xs[:2], steps=2)
        events.clear()
        train(ddp, xs[2:], steps=1)
    finally:
        config.ddp_bucket_split = True
    t0 = events[0][2]
    return {"pieces": len(pieces), "events": [(kind, k, round((t - t0) * 1e3, 3)) for kind, k, t in events]}


@case
def hooks_during_backward(rank, world):
    """With cuts, each bucket's hook fires between the backward pieces."""
    return _hook_order(rank, split=True)


@case
def hooks_without_cuts(rank, world):
    """config.ddp_bucket_split off: every bucket's hook fires after the one backward."""
    return _hook_order(rank, split=False)


# -- adversarial: DDP's modes and models that stress the cut --------------------------------

def _both(rank, make_ddp, xs=None, backend="aot_eager", steps=3, **train_kw):
    """Train eager DDP and compiled DDP (inner wrapping) made by ``make_ddp(module)``."""
    xs = xs or batches(rank)
    eager = train(make_ddp(mlp()), xs, steps=steps, **train_kw)
    compiled = train(make_ddp(bytegraph.compile(mlp(), backend=backend)), xs, steps=steps, **train_kw)
    out = compare(eager, compiled)
    out.update(stats())
    return out


@case
def static_graph(rank, world):
    return _both(rank, lambda m: DDP(m, static_graph=True, bucket_cap_mb=TWO_LAYERS_MB))


@case
def gradient_as_bucket_view(rank, world):
    """Gradients are views into DDP's buckets; momentum reads them after the all-reduce."""
    out = _both(rank, lambda m: DDP(m, gradient_as_bucket_view=True, bucket_cap_mb=TWO_LAYERS_MB),
                opt_cls=torch.optim.SGD, momentum=0.9)
    ddp = DDP(bytegraph.compile(mlp(), backend="aot_eager"), gradient_as_bucket_view=True,
              bucket_cap_mb=TWO_LAYERS_MB)
    train(ddp, batches(rank), steps=2)
    spans = []
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(state, bucket):
        buf = bucket.buffer()
        spans.append((buf.data_ptr(), buf.data_ptr() + buf.numel() * buf.element_size()))
        return default_hooks.allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, hook)
    train(ddp, batches(rank), steps=1)
    # every gradient still lies inside a bucket's buffer after compiled steps
    out["grads_in_buckets"] = bool(spans) and all(any(lo <= p.grad.data_ptr() < hi for lo, hi in spans)
                                                  for p in ddp.parameters())
    return out


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = mlp(4)
        self.unused = nn.Linear(WIDTH, WIDTH)
        self.aux = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        y = self.body(x)
        self.aux(y)          # computed, its result dropped: its parameters get no gradient
        return y


@case
def find_unused_parameters(rank, world):
    xs = batches(rank)

    def make(compiled):
        torch.manual_seed(0)
        m = WithUnused()
        return DDP(bytegraph.compile(m, backend="aot_eager") if compiled else m, find_unused_parameters=True,
                   bucket_cap_mb=TWO_LAYERS_MB)
    out = compare(train(make(False), xs), train(make(True), xs))
    out.update(stats())
    return out


@case
def no_sync_accumulation(rank, world):
    """Gradient accumulation: two micro-batches under no_sync(), then a synced one."""
    xs = batches(rank, n=6)

    def run(ddp):
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        losses = []
        for step in range(2):
            opt.zero_grad()
            for k, x in enumerate(xs[3 * step:3 * step + 3]):
                if k < 2:
                    with ddp.no_sync():
                        loss = ddp(x).square().mean()
                        loss.backward()
                else:
                    loss = ddp(x).square().mean()
                    loss.backward()
                losses.append(loss.item())
            opt.step()
        return losses, [p.grad.clone() for p in ddp.parameters()], [p.detach().clone() for p in ddp.parameters()]
    eager = run(DDP(mlp(), bucket_cap_mb=TWO_LAYERS_MB))
    compiled = run(DDP(bytegraph.compile(mlp(), backend="aot_eager"), bucket_cap_mb=TWO_LAYERS_MB))
    # the gradients of the no_sync steps are local: ranks differ until the synced step
    out = compare(eager, compiled)
    out.update(stats())
    return out


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.bn = nn.BatchNorm1d(WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.b(self.bn(self.a(x)).relu())


@case
def buffers_broadcast(rank, world):
    """BatchNorm's running statistics: DDP broadcasts rank 0's before each forward."""
    xs = batches(rank, rows=8)

    def make(compiled):
        torch.manual_seed(0)
        m = WithBatchNorm()
        return DDP(bytegraph.compile(m, backend="aot_eager") if compiled else m)   # buffers broadcast by default
    e, c = make(False), make(True)
    out = compare(train(e, xs), train(c, xs))
    out["buffer_diff"] = max_diff(list(e.module.buffers()), list(c.module.buffers()))
    # the other wrapping: DDP's forward (and its broadcast) natively around the compiled module
    torch.manual_seed(0)
    outer = bytegraph.compile(DDP(WithBatchNorm()), backend="aot_eager")
    outer_result = compare(train(make(False), xs), train(outer, xs))
    out["outer_diff"] = max(outer_result["loss_diff"], outer_result["grad_diff"], outer_result["param_diff"],
                            max_diff(list(e.module.buffers()), list(outer.module.buffers())))
    # an eval forward broadcasts rank 0's statistics and leaves them as they are
    c.eval()
    c(xs[0])
    c.train()
    gathered = [torch.zeros(WIDTH) for _ in range(world)]
    dist.all_gather(gathered, c.module.bn.running_mean)
    out["buffers_equal_across_ranks"] = all(torch.equal(gathered[0], g) for g in gathered)
    out.update(stats())
    return out


@case
def eval_then_train(rank, world):
    """Eval mode under no_grad (no reducer work), then training: same as eager."""
    xs = batches(rank)

    def run(ddp):
        ddp.eval()
        with torch.no_grad():
            evals = [ddp(x).sum().item() for x in xs]
        ddp.train()
        return evals, train(ddp, xs)
    ev_e, tr_e = run(DDP(WithBatchNorm_seeded()))
    ev_c, tr_c = run(DDP(bytegraph.compile(WithBatchNorm_seeded(), backend="aot_eager")))
    out = compare(tr_e, tr_c)
    out["eval_diff"] = max(abs(a - b) for a, b in zip(ev_e, ev_c))
    out.update(stats())
    return out


def WithBatchNorm_seeded():
    torch.manual_seed(0)
    return WithBatchNorm()


class BreakInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = mlp(3)
        self.second = mlp(3, seed=1)

    def forward(self, x):
        h = self.first(x)
        bytegraph.graph_break()
        return self.second(h)


@case
def graph_break_in_forward(rank, world):
    xs = batches(rank)

    def make(compiled):
        torch.manual_seed(0)
        m = BreakInForward()
        return DDP(bytegraph.compile(m, backend="aot_eager") if compiled else m, bucket_cap_mb=TWO_LAYERS_MB)
    out = compare(train(make(False), xs), train(make(True), xs))
    out.update(stats())
    return out


@case
def dynamic_batch(rank, world):
    """Batch sizes change every step: one static entry, then a dynamic one, cut as before."""
    g = torch.Generator().manual_seed(7 + rank)
    xs = [torch.randn(rows, WIDTH, generator=g) for rows in (4, 6, 8, 10)]
    out = _both(rank, lambda m: DDP(m, bucket_cap_mb=TWO_LAYERS_MB), xs=xs, steps=4)
    return out


@case
def compiled_step_calls_ddp(rank, world):
    """A compiled training step that calls a DDP module: DDP's forward runs natively (a break)."""
    xs = batches(rank)
    eager = train(DDP(mlp(), bucket_cap_mb=TWO_LAYERS_MB), xs)
    ddp = DDP(bytegraph.compile(mlp(), backend="aot_eager"), bucket_cap_mb=TWO_LAYERS_MB)

    @bytegraph.compile(backend="aot_eager")
    def step(x):
        return ddp(x).square().mean()

    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = step(x)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    compiled = (losses, [p.grad.clone() for p in ddp.parameters()], [p.detach().clone() for p in ddp.parameters()])
    out = compare(eager, compiled)
    out.update(stats())
    return out


# -- Inductor: the ranks share the compiling ---------------------------------------------------

@case
def shared_inductor_compile(rank, world):
    """backend "inductor", a fresh cache directory both ranks use: each rank compiles
    the pieces it claims and takes the others' from Inductor's cache
    (bytegraph.distributed.shared_compile)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from torch._dynamo.utils import counters
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    from bytegraph.distributed import shared_compile
    cache = Path(tempfile.gettempdir(), f"bg-shared-compile-{os.environ['MASTER_PORT']}")
    xs = batches(rank)
    eager = train(DDP(mlp(), bucket_cap_mb=TWO_LAYERS_MB), xs)
    counters.clear()
    before = len(shared_compile.rounds())
    try:
        with temporary_cache_dir(str(cache)):
            compiled = train(DDP(bytegraph.compile(mlp(), backend="inductor"), bucket_cap_mb=TWO_LAYERS_MB), xs)
    finally:
        dist.barrier()
        if rank == 0:
            shutil.rmtree(cache, ignore_errors=True)
    out = compare(eager, compiled)
    out.update(stats())
    out["rounds"] = shared_compile.rounds()[before:]
    out["aot_cache_hits"] = counters["aot_autograd"]["autograd_cache_hit"]
    out["aot_cache_misses"] = counters["aot_autograd"]["autograd_cache_miss"]
    return out

"""Ranks sharing the compiling of DDP's pieces (bytegraph.distributed.shared_compile),
in one process: two ranks are simulated by two plans on one in-memory store.
tests/test_distributed_ddp.py checks the real thing on two processes with
Inductor (case ``shared_inductor_compile``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import types

import pytest
import torch
import torch.fx as fx

from bytegraph import config
from bytegraph.distributed import shared_compile as sc


class MemoryStore:
    """The part of ``torch.distributed.Store`` the queue uses, in memory and thread-safe."""

    def __init__(self):
        self.data, self.cond = {}, threading.Condition()

    def add(self, key, n):
        with self.cond:
            self.data[key] = int(self.data.get(key, 0)) + n
            self.cond.notify_all()
            return self.data[key]

    def set(self, key, value):
        with self.cond:
            self.data[key] = value
            self.cond.notify_all()

    def get(self, key):
        return self.data[key]

    def wait(self, keys, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: all(k in self.data for k in keys), timeout.total_seconds()):
                raise RuntimeError("Socket Timeout")


def pieces(n, width=1):
    out = []
    for k in range(n):
        g = fx.Graph()
        x = g.placeholder("x")
        y = x
        for _ in range(k + 1):      # piece k has k + 1 nodes: the later, the costlier
            y = g.call_function(torch.sin, (y,))
        g.output((y,))
        out.append(types.SimpleNamespace(gm=fx.GraphModule(torch.nn.Module(), g), examples=[torch.ones(width)]))
    return out


@pytest.fixture
def store(monkeypatch):
    s = MemoryStore()
    monkeypatch.setattr(sc, "_default_store", lambda: s)
    monkeypatch.setattr(config, "shared_compile_timeout", 5.0)
    # (simulated ranks in threads would patch torch's config around each other)
    monkeypatch.setattr(sc, "_backward_with_forward", contextlib.nullcontext)
    return s


def run_ranks(compile_ones, piece_lists):
    """Each simulated rank compiles its pieces in its own thread; their results."""
    results, errors = [None] * len(compile_ones), []

    def rank(r):
        try:
            results[r] = sc.compile_pieces(piece_lists[r], compile_ones[r], "inductor")
        except Exception as e:     # pragma: no cover (reported below)
            errors.append(e)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(compile_ones))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def recording(log, rank, seconds=0.05):
    def compile_one(gm, examples):
        log.append((rank, len(gm.graph.nodes), time.monotonic()))
        time.sleep(seconds)
        return (rank, len(gm.graph.nodes))
    return compile_one


def test_two_ranks_split_the_pieces_and_each_compiles_every_one(store):
    log = []
    ps = pieces(4)
    results = run_ranks([recording(log, 0), recording(log, 1)], [ps, ps])
    # every rank has every piece compiled, in order
    for r in range(2):
        assert [res[1] for res in results[r]] == [len(p.gm.graph.nodes) for p in ps]
    rounds = sc.rounds()[-2:]
    claimed = [set(r["claimed"]) for r in rounds]
    assert claimed[0] & claimed[1] == set() and claimed[0] | claimed[1] == {0, 1, 2, 3}
    for r in rounds:
        assert sorted(r["claimed"] + r["waited"]) == [0, 1, 2, 3]
    # the costliest piece (most nodes) is claimed first
    first = min(log, key=lambda e: e[2])
    assert first[1] == max(len(p.gm.graph.nodes) for p in ps)
    # a piece another rank claimed is compiled here only after that rank compiled it
    finished = {}
    for rank, nodes, t in log:
        finished.setdefault(nodes, []).append((t, rank))
    for nodes, entries in finished.items():
        assert len(entries) == 2
        (t_owner, owner), (t_other, other) = sorted(entries)
        assert owner != other and t_other >= t_owner + 0.04


def test_ranks_with_other_pieces_share_nothing(store):
    log = []
    results = run_ranks([recording(log, 0), recording(log, 1)], [pieces(3), pieces(3, width=2)])
    for r, rd in zip(range(2), sc.rounds()[-2:]):
        assert sorted(rd["claimed"]) == [0, 1, 2] and rd["waited"] == []
        assert len(results[r]) == 3


def test_a_piece_whose_rank_never_compiles_it_is_compiled_here_after_the_timeout(store, monkeypatch):
    monkeypatch.setattr(config, "shared_compile_timeout", 0.2)
    ps = pieces(2)
    plan = sc.plan_sharing(ps, "inductor")
    assert plan.claim() == 1      # another "rank" claims the costlier piece and never finishes it
    log = []
    start = time.monotonic()
    out = sc.compile_pieces(ps, recording(log, 0, seconds=0.0), "inductor")
    assert [o[1] for o in out] == [3, 4]      # (sin nodes, placeholder and output)
    assert sc.rounds()[-1]["claimed"] == [0] and sc.rounds()[-1]["waited"] == [1]
    assert time.monotonic() - start >= 0.2


def test_an_error_while_compiling_releases_the_other_rank(store):
    ps = pieces(2)

    def failing(gm, examples):
        raise RuntimeError("backend failed")
    plan = sc.plan_sharing(ps, "inductor")
    with pytest.raises(RuntimeError, match="backend failed"):
        sc.compile_pieces(ps, failing, "inductor")
    # the failed rank (it claimed piece 1, the costliest) still marked it done: a waiter
    # compiles it at once instead of waiting for the timeout
    assert f"{plan.prefix}/done/1" in store.data


@pytest.mark.parametrize("why", ["eager backend", "turned off", "one piece", "no process group"])
def test_no_sharing_outside_its_conditions(monkeypatch, why):
    if why != "no process group":
        monkeypatch.setattr(sc, "_default_store", lambda: MemoryStore())
    backend, n = "inductor", 3
    if why == "eager backend":
        backend = "aot_eager"
    elif why == "turned off":
        monkeypatch.setattr(config, "ddp_shared_compile", False)
    elif why == "one piece":
        n = 1
    assert sc.plan_sharing([None] * n, backend) is None


def test_fingerprints_see_code_and_input_metadata():
    a, b = pieces(2)
    fa = sc.piece_fingerprint(a.gm, a.examples)
    assert fa == sc.piece_fingerprint(a.gm, [torch.zeros(1)])           # values do not matter
    assert fa != sc.piece_fingerprint(b.gm, b.examples)                # code does
    assert fa != sc.piece_fingerprint(a.gm, [torch.ones(2)])           # shapes do
    assert fa != sc.piece_fingerprint(a.gm, [torch.ones(1, dtype=torch.float64)])
    assert fa != sc.piece_fingerprint(a.gm, [torch.ones(1, requires_grad=True)])


def test_backwards_are_compiled_with_their_forwards_while_sharing():
    import torch._functorch.config as aot_config
    assert not aot_config.force_non_lazy_backward_lowering
    with sc._backward_with_forward():
        assert aot_config.force_non_lazy_backward_lowering
    assert not aot_config.force_non_lazy_backward_lowering

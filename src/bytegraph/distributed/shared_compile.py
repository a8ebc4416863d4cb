"""Ranks on one machine share the work of compiling DDP's graph pieces.

**Why.**  Under DDP every rank traces the same forward and cuts it into the
same bucket pieces (:mod:`bytegraph.distributed.ddp`), then compiles every
piece with Inductor: on one machine, *n* ranks do the same Python-side work
(AOTAutograd, Inductor's lowering and code generation) *n* times over, side
by side on the same cores.  Inductor keeps what it compiles in an on-disk
cache (its FX graph cache and AOTAutograd's cache, under one cache
directory), keyed by the graph, its inputs' metadata and the configuration;
a hit is exact.  So ranks that would write the same entries share a queue of
the pieces (costliest first): each rank claims the next unclaimed piece and
compiles it, until none is left; then, for each piece another rank claimed,
it waits until that rank has compiled it and compiles it too, which is now a
cache hit (tens of milliseconds instead of seconds).  The backward of each
piece is compiled with its forward (AOTAutograd otherwise compiles it at the
first backward, where it could not be shared).

**Sound by construction.**  Nothing compiled passes between processes except
through Inductor's own caches, whose keys decide a hit: sharing only orders
the work.  Every rank still compiles every piece itself, so when the other
rank is late (``config.shared_compile_timeout``), failed, or wrote a
different entry, the rank compiles the piece from scratch, as without
sharing.

**Who shares.**  Ranks whose signatures are equal: host name, Inductor cache
directory, and the fingerprints of the pieces (their code and their inputs'
metadata).  The queue lives in the process group's store
(``dist.distributed_c10d._get_default_store()``) under that signature; no
collective runs, so a rank that compiles other graphs (a rank-dependent
branch, another machine) shares with nobody and waits for nothing.

**When.**  ``config.ddp_shared_compile`` (on; ``BYTEGRAPH_SHARED_COMPILE=0``
turns it off), the backend ``"inductor"`` with its FX graph and AOTAutograd
caches on, a default process group of more than one rank, and more than one
piece.  The ``shared_compile`` log and :func:`rounds` show each round.

Example::

    >>> plan_sharing([None, None], "inductor") is None    # no process group: each compiles all
    True
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import os
import socket
from typing import Callable, List, Optional, Sequence

import torch

from .. import config
from ..diagnostics import enabled, log

#: the log family of the sharing decisions and waits
LOG_FAMILY = "shared_compile"


def piece_fingerprint(gm, examples) -> str:
    """A digest of a piece as Inductor's cache would see it: its code and its
    inputs' metadata (two ranks with equal fingerprints compile the same graph).

    Example::

        >>> import torch.fx as fx
        >>> g = fx.Graph(); x = g.placeholder("x"); _ = g.output((x,))
        >>> gm = fx.GraphModule(torch.nn.Module(), g)
        >>> piece_fingerprint(gm, [torch.ones(2)]) == piece_fingerprint(gm, [torch.zeros(2)])
        True
    """
    h = hashlib.sha256(gm.code.encode())
    for e in examples:
        if isinstance(e, torch.Tensor):
            h.update(repr((tuple(e.shape), e.stride(), str(e.dtype), str(e.device), e.requires_grad)).encode())
        else:
            h.update(repr((type(e).__name__, str(e))).encode())
    return h.hexdigest()[:32]


class SharingPlan:
    """A work queue of one graph's pieces, shared through the store by the ranks
    whose pieces have the same signature: :meth:`claim` hands out the next
    uncompiled piece; :meth:`compiled` tells the others a piece is in the
    cache; :meth:`wait_for` waits for that."""

    __slots__ = ("store", "prefix", "queue")

    def __init__(self, store, prefix: str, queue: List[int]):
        self.store = store
        self.prefix = prefix
        self.queue = queue

    def claim(self) -> Optional[int]:
        """The next piece no rank has claimed yet, now this rank's, or None."""
        try:
            i = int(self.store.add(f"{self.prefix}/next", 1)) - 1
        except Exception:   # the store went away: compile the rest on our own
            return None
        return self.queue[i] if i < len(self.queue) else None

    def compiled(self, k: int) -> None:
        """Tell the others piece ``k`` is in the cache (a rank that compiled a piece
        it did not claim says so too: whoever compiled it releases the waiters)."""
        try:
            self.store.set(f"{self.prefix}/done/{k}", "1")
        except Exception:   # the others time out and compile it themselves
            pass

    def wait_for(self, k: int) -> bool:
        """Whether piece ``k`` was compiled by another rank within ``config.shared_compile_timeout``."""
        try:
            self.store.wait([f"{self.prefix}/done/{k}"], datetime.timedelta(seconds=config.shared_compile_timeout))
            return True
        except Exception:
            return False


#: the recent rounds of sharing in this process, newest last (see :func:`rounds`)
_ROUNDS: "collections.deque" = collections.deque(maxlen=32)


def rounds() -> List[dict]:
    """This process's recent shared compiles, oldest first: for each, the number
    of pieces, the pieces this rank claimed and compiled first, and those it
    waited for (then took from the cache).

    Example::

        >>> isinstance(rounds(), list)
        True
    """
    return [dict(r) for r in _ROUNDS]


def _default_store():
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def plan_sharing(pieces: Sequence, backend_name) -> Optional[SharingPlan]:
    """This rank's :class:`SharingPlan` for ``pieces`` (each with ``gm`` and
    ``examples``), or None when it compiles every piece on its own (see the
    module docstring).

    Example::

        >>> plan_sharing([None], "inductor") is None    # one piece: nothing to share
        True
    """
    if not config.ddp_shared_compile or backend_name != "inductor" or len(pieces) < 2:
        return None
    import torch._functorch.config as aot_config
    import torch._inductor.config as inductor_config
    if not (inductor_config.fx_graph_cache and aot_config.enable_autograd_cache):
        return None     # a second compile would be a whole compile again
    store = _default_store()
    if store is None:
        return None
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    fingerprints = [piece_fingerprint(p.gm, p.examples) for p in pieces]
    costs = [len(p.gm.graph.nodes) for p in pieces]     # (a piece's compile time grows with its nodes)
    # ranks share a queue only when they compile the same pieces into the same cache
    signature = hashlib.sha256(repr((socket.gethostname(), os.path.realpath(cache_dir()),
                                     list(fingerprints))).encode()).hexdigest()[:32]
    # the costliest first: the ranks then finish close together (longest processing time first)
    queue = sorted(range(len(fingerprints)), key=lambda k: (-costs[k], k))
    return SharingPlan(store, f"bytegraph/shared_compile/{signature}", queue)


def compile_pieces(pieces, compile_one: Callable, backend_name) -> List[Callable]:
    """Each piece compiled with ``compile_one(piece.gm, piece.examples)``, the work
    shared with the other ranks when :func:`plan_sharing` allows (see the module
    docstring); the results in the pieces' order.

    Example::

        >>> import types
        >>> ps = [types.SimpleNamespace(gm=None, examples=[]) for _ in range(2)]
        >>> compile_pieces(ps, lambda gm, ex: "c", "eager")
        ['c', 'c']
    """
    plan = plan_sharing(pieces, backend_name)
    if plan is None:
        return [compile_one(p.gm, p.examples) for p in pieces]
    compiled: List[Optional[Callable]] = [None] * len(pieces)
    # AOTAutograd compiles a backward lazily, at its first call, and caches the
    # piece only then: every rank would compile every backward, one after the
    # other, during the first backward.  Compiled now, it is shared too.
    with _backward_with_forward():
        _compile_shared(pieces, compile_one, plan, compiled)
    return compiled


def _backward_with_forward():
    """AOTAutograd compiles each backward together with its forward, within the context."""
    import torch._functorch.config as aot_config
    return aot_config.patch(force_non_lazy_backward_lowering=True)


def _compile_one(pieces, compile_one, plan, compiled, k) -> None:
    try:
        compiled[k] = compile_one(pieces[k].gm, pieces[k].examples)
    finally:
        plan.compiled(k)


def _compile_shared(pieces, compile_one, plan, compiled) -> None:
    # first the pieces this rank claims, one at a time (a queue balances pieces of unequal cost)
    mine = []
    while (k := plan.claim()) is not None:
        mine.append(k)
        _compile_one(pieces, compile_one, plan, compiled, k)
    waited = [k for k in range(len(pieces)) if compiled[k] is None]
    _ROUNDS.append({"pieces": len(pieces), "claimed": mine, "waited": waited})
    if enabled(LOG_FAMILY):
        log(LOG_FAMILY, "compiled pieces %s of %d; %s from the cache once their ranks have", mine, len(pieces), waited)
    # then the others' pieces: a cache hit once their rank has compiled them
    for k in range(len(pieces)):
        if compiled[k] is None:
            if not plan.wait_for(k) and enabled(LOG_FAMILY):
                log(LOG_FAMILY, "piece %d was not compiled by another rank within %s s; compiling it here",
                    k, config.shared_compile_timeout)
            _compile_one(pieces, compile_one, plan, compiled, k)

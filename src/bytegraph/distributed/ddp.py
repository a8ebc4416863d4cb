"""DistributedDataParallel: graphs cut at DDP's gradient buckets, and DDP modules compiled.

**Why cut.**  DDP overlaps communication with backward: its reducer groups
parameters into buckets (``bucket_cap_mb``; parameters in the reverse order
of their use, the order their gradients appear in backward) and starts one
bucket's all-reduce as soon as all of its gradients are accumulated.  A
captured forward graph compiled through AOTAutograd is one autograd node
whose backward produces every gradient at once, at its very end: every
all-reduce would wait for the whole backward.  So under DDP the captured
graph is cut into one piece per bucket, each compiled by the backend on its
own: piece *k*'s backward yields exactly bucket *k*'s gradients, and their
all-reduce runs while the earlier pieces' backward computes.

**Where.**  :func:`bucket_cuts` replays the reducer's bucket assignment
(``torch.distributed._compute_bucket_assignment_by_size``: a bucket closes
when its size reaches the limit; the first bucket has its own, smaller limit
when ``bucket_cap_mb`` was left at its default) over the graph's DDP-managed
parameters, walked from the last first use to the first, node by node: the
parameters one node uses first (a linear layer's weight and bias) go into a
bucket together, since no cut can separate them.  A bucket that closes at
node *n* starts a new piece at *n*.  (DDP itself may close a bucket between
a weight and its bias; then its bucket count can differ from the piece
count by the buckets such splits add.)
A cut that :func:`~bytegraph.distributed.graph_split.valid_cut` refuses (a
non-tensor value handed across, open grad-mode or autocast switches, a value
written after the cut) is dropped: its two buckets share a piece.

**When.**  At compile time, when a DDP module's forward is running
(``DistributedDataParallel._get_active_ddp_module()``, which DDP sets while it
calls the module it wraps), and ``config.ddp_bucket_split`` is on (the
default).  Cutting never changes what the graph computes, so the entry needs
no guard for it: a graph compiled under DDP may run outside it, and back.

**Compiling a DDP module.**  ``bytegraph.compile(DDP(model))`` gives a
:class:`~bytegraph.distributed.ddp_module.DDPCompiledModule`: DDP's own forward (bucket rebuilding, buffer
broadcast, the reducer's ``prepare_for_backward``) runs natively on each
call, and the module it wraps runs compiled.  ``DDP(bytegraph.compile(model))``
needs nothing special: DDP calls the compiled module.  A DDP module called
inside a traced function is a graph break (:data:`BREAK_DDP_FORWARD`): its
forward runs natively, calling what it wraps, which should then be a compiled
module.

Example::

    >>> from bytegraph.distributed.ddp import active_ddp
    >>> active_ddp() is None          # outside a DDP forward
    True
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
import torch.fx as fx

from .. import config
from ..diagnostics import enabled, log
from .graph_split import PieceRunner, split_graph, valid_cut
from .shared_compile import compile_pieces

#: the break kind of a call to a DDP module inside a trace: DDP's forward runs natively
BREAK_DDP_FORWARD = "ddp_forward"

#: the log family of the cuts (torch's artifact of the same name shows torch.compile's)
LOG_FAMILY = "ddp_graphs"


def ddp_class():
    """``torch.nn.parallel.DistributedDataParallel``, or None without torch.distributed.

    Example::

        >>> ddp_class().__name__
        'DistributedDataParallel'
    """
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel


def is_ddp(obj) -> bool:
    """Whether ``obj`` is a DDP module.

    Example::

        >>> is_ddp(torch.nn.Linear(1, 1))
        False
    """
    cls = ddp_class()
    return cls is not None and isinstance(obj, cls)


def active_ddp():
    """The DDP module whose forward is running now (DDP sets it around the call
    of the module it wraps), or None.

    Example::

        >>> active_ddp() is None
        True
    """
    cls = ddp_class()
    if cls is None:
        return None
    getter = getattr(cls, "_get_active_ddp_module", None)
    return getter() if getter is not None else getattr(cls, "_active_ddp_module", None)


def bucket_limits(ddp) -> Tuple[int, int]:
    """``(first bucket's limit, every other bucket's limit)`` in bytes, as DDP's
    reducer uses them once it has rebuilt its buckets in gradient order.

    Example::

        >>> import types
        >>> bucket_limits(types.SimpleNamespace(bucket_bytes_cap=4 << 20, bucket_bytes_cap_default=False))
        (4194304, 4194304)
    """
    config_ = getattr(ddp, "_bucket_config", None)
    cap = int(ddp.bucket_bytes_cap)
    if config_ is not None and hasattr(config_, "first_bucket_bytes_cap"):
        return int(config_.first_bucket_bytes_cap), cap
    # (older torch: a default bucket_cap_mb gets the small first bucket)
    first = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES if getattr(ddp, "bucket_bytes_cap_default", False) else cap
    return int(first), cap


def managed_parameters(ddp) -> set:
    """ids of the parameters DDP's reducer all-reduces (trainable, not ignored).

    Example::

        >>> import types
        >>> lin = torch.nn.Linear(2, 2)
        >>> len(managed_parameters(types.SimpleNamespace(module=lin, parameters_to_ignore=["bias"])))
        1
    """
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return {id(p) for name, p in ddp.module.named_parameters() if p.requires_grad and name not in ignored}


class BucketCut:
    """One cut: the node a piece starts at, and the bucket (parameter names
    as the graph's sources spell them, and bytes) that closed there."""

    __slots__ = ("node", "params", "nbytes")

    def __init__(self, node: fx.Node, params: List[str], nbytes: int):
        self.node = node
        self.params = params
        self.nbytes = nbytes


def bucket_cuts(gm: fx.GraphModule, graph_inputs, ddp) -> Tuple[List[BucketCut], List[Tuple[List[str], int]]]:
    """The cuts (in graph order) and the buckets (last used first) of ``gm``
    under ``ddp``; ``graph_inputs`` are the trace's :class:`~bytegraph.graph.GraphInput` s.
    (tests/test_ddp_split.py shows it on a traced graph.)"""
    managed = managed_parameters(ddp)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    # the DDP-managed parameters the graph reads, grouped by the node that uses them first
    groups: dict = {}
    for inp in graph_inputs:
        t = inp.example
        if not isinstance(t, torch.Tensor) or id(t) not in managed:
            continue
        users = [u for u in inp.node.users if u.op != "output"]
        if users:
            node = min(users, key=order.__getitem__)
            groups.setdefault(node, []).append((inp.source.name(), t.numel() * t.element_size(), t))
    first_limit, limit = bucket_limits(ddp)
    # one running bucket per (dtype, device), as the reducer keeps them; a node's
    # parameters go into the bucket together (a piece cannot split a node)
    running: dict = {}
    buckets: List[Tuple[List[str], int]] = []
    cuts: List[BucketCut] = []
    nodes = sorted(groups, key=order.__getitem__, reverse=True)
    for k, node in enumerate(nodes):
        closed = None
        for name, nbytes, t in groups[node]:
            key = (t.dtype, t.device)
            names, size, cap = running.get(key, ([], 0, first_limit))
            running[key] = (names + [name], size + nbytes, cap)
        for key, (names, size, cap) in list(running.items()):
            if size >= cap:
                buckets.append((names, size))
                closed = closed or (names, size)
                running[key] = ([], 0, limit)
        if closed is not None and k + 1 < len(nodes):
            cuts.append(BucketCut(node, *closed))   # parameters used earlier: another piece
    for names, size, _ in running.values():
        if names:
            buckets.append((names, size))
    cuts.reverse()
    return cuts, buckets


def compile_split(backend_name: str, backend: Callable, gm: fx.GraphModule, graph, fake_mode,
                  compile_one: Callable) -> Optional[Tuple[Callable, List[fx.GraphModule]]]:
    """Under DDP: ``gm`` cut at its bucket boundaries, each piece compiled with
    ``compile_one(piece_gm, example_inputs)``; returns ``(runner, pieces)``, or
    None when there is nothing to cut (not under DDP, one bucket, cutting off).

    Example::

        >>> compile_split("eager", None, None, None, None, None) is None   # no DDP forward running
        True
    """
    if not config.ddp_bucket_split:
        return None
    ddp = active_ddp()
    if ddp is None:
        return None
    cuts, buckets = bucket_cuts(gm, graph.inputs, ddp)
    grad = torch.is_grad_enabled()
    kept = [c for c in cuts if valid_cut(gm.graph, c.node, grad)]
    if enabled(LOG_FAMILY):
        log(LOG_FAMILY, "DDP buckets of the graph (last used first): %s; cuts before %s%s",
            [(len(names), size) for names, size in buckets], [c.node.name for c in kept],
            "" if len(kept) == len(cuts) else f" ({len(cuts) - len(kept)} refused)")
    if not kept:
        return None
    pieces = split_graph(gm, [c.node for c in kept])
    # ranks on one machine split the compiling (distributed/shared_compile.py)
    compiled = compile_pieces(pieces, compile_one, backend_name)
    return PieceRunner(gm, pieces, compiled), [p.gm for p in pieces]

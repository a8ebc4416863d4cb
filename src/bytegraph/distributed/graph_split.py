"""Cutting one captured graph into consecutive pieces, each compiled on its own.

A piece is a run of the graph's nodes in their order.  Each piece becomes a
``GraphModule`` whose inputs are the values it reads from the graph's inputs
or from earlier pieces, and whose outputs (always a tuple, the backend
contract) are the values later pieces or the graph's result need.
:class:`PieceRunner` calls the compiled pieces in order, passing values along
and dropping each as soon as no later piece needs it.

Not every place is a valid cut.  :func:`valid_cut` refuses one where

* a value handed across it is not a tensor or a number (a tuple, a
  ``torch.Size``, an object): backends take tensors and symbolic numbers;
* grad mode or autocast was switched inside the graph and not switched back
  (each piece must start in the state the graph starts in);
* a value handed across it, or a tensor sharing its memory, is written after
  it: the earlier piece's backend would not know its output is mutated later.

Used by :mod:`bytegraph.distributed.ddp` (DDP's gradient buckets); nothing
here knows about DDP.

Example::

    >>> import torch, torch.fx as fx
    >>> g = fx.Graph()
    >>> x = g.placeholder("x"); a = g.call_function(torch.sin, (x,)); b = g.call_function(torch.cos, (a,))
    >>> _ = g.output((b,))
    >>> pieces = split_graph(fx.GraphModule(torch.nn.Module(), g), [b])
    >>> [len(p.inputs) for p in pieces], [len(p.outputs) for p in pieces]
    ([1, 1], [1, 1])
"""

from __future__ import annotations

import operator
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.fx as fx

from ..graph import GLOBAL_STATE_TARGETS


class Piece:
    """One piece: its graph module, the original nodes it takes as inputs and
    returns as outputs (in order), and its example inputs (the trace's fakes)."""

    __slots__ = ("gm", "inputs", "outputs", "examples")

    def __init__(self, gm: fx.GraphModule, inputs: List[fx.Node], outputs: List[fx.Node]):
        self.gm = gm
        self.inputs = inputs
        self.outputs = outputs
        self.examples = [n.meta.get("val") for n in inputs]


def _compute_nodes(graph: fx.Graph) -> List[fx.Node]:
    return [n for n in graph.nodes if n.op not in ("placeholder", "output")]


def _output_node(graph: fx.Graph) -> fx.Node:
    return next(n for n in reversed(graph.nodes) if n.op == "output")


def _passable(value) -> bool:
    """Whether a backend can take ``value`` as a graph input."""
    return isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _written_arg(node: fx.Node) -> Optional[fx.Node]:
    """The node ``node`` writes to (in-place method or function, ``out=``,
    setitem), or None."""
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if node.kwargs.get("out") is not None and isinstance(node.kwargs["out"], fx.Node):
        return node.kwargs["out"]
    if target is operator.setitem or (name.endswith("_") and not name.endswith("__")):
        first = node.args[0] if node.args else None
        return first if isinstance(first, fx.Node) else None
    return None


def _storage_key(node: fx.Node):
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        try:
            return val.untyped_storage()._cdata
        except Exception:
            return None
    return None


def valid_cut(graph: fx.Graph, before: fx.Node, grad_enabled: bool) -> bool:
    """Whether the graph may be cut right before ``before`` (see the module
    docstring); ``grad_enabled`` is the grad mode the graph starts in.

    Example::

        >>> import torch, torch.fx as fx
        >>> g = fx.Graph(); x = g.placeholder("x")
        >>> a = g.call_function(torch.sin, (x,)); a.meta["val"] = torch.ones(1)
        >>> b = g.call_function(torch.cos, (a,)); _ = g.output((b,))
        >>> valid_cut(g, b, True)
        True
    """
    nodes = list(graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    cut = position[before]
    grad, autocast_depth = grad_enabled, 0
    for n in nodes[:cut]:
        if n.target in GLOBAL_STATE_TARGETS:
            if n.target is torch._C._set_grad_enabled:
                grad = bool(n.args[0])
            elif getattr(n.target, "__name__", "") == "_enter_autocast":
                autocast_depth += 1
            else:
                autocast_depth -= 1
    if grad != grad_enabled or autocast_depth:
        return False
    crossing = [n for n in nodes[:cut] if n.op != "placeholder"
                and any(position[u] >= cut for u in n.users)]
    if not all(_passable(n.meta.get("val")) for n in crossing):
        return False
    storages = {_storage_key(n) for n in crossing} - {None}
    crossing_set = set(crossing)
    for n in nodes[cut:]:
        written = _written_arg(n)
        if written is not None and (written in crossing_set or _storage_key(written) in storages):
            return False
    return True


def split_graph(gm: fx.GraphModule, cuts: Sequence[fx.Node]) -> List[Piece]:
    """``gm`` cut right before each node of ``cuts`` (nodes of ``gm.graph``, in
    graph order): ``len(cuts) + 1`` pieces (see the module docstring's example)."""
    graph = gm.graph
    nodes = _compute_nodes(graph)
    output = _output_node(graph)
    starts = [0] + [nodes.index(c) for c in cuts] + [len(nodes)]
    piece_of: Dict[fx.Node, int] = {}
    for k in range(len(starts) - 1):
        for n in nodes[starts[k]:starts[k + 1]]:
            piece_of[n] = k
    pieces: List[Piece] = []
    for k in range(len(starts) - 1):
        members = nodes[starts[k]:starts[k + 1]]
        member_set = set(members)
        inputs: List[fx.Node] = []
        for n in members:
            for a in n.all_input_nodes:
                if a not in member_set and a not in inputs:
                    inputs.append(a)
        outputs = [n for n in members
                   if any(u is output or piece_of.get(u, k) > k for u in n.users)]
        new = fx.Graph()
        env: Dict[fx.Node, fx.Node] = {}
        for i, a in enumerate(inputs):
            p = new.placeholder(a.name if a.op == "placeholder" else f"{a.name}_in")
            p.meta.update(a.meta)
            env[a] = p
        for n in members:
            env[n] = new.node_copy(n, lambda a: env[a])
        new.output(tuple(env[n] for n in outputs))
        piece_gm = fx.GraphModule(torch.nn.Module(), new)
        pieces.append(Piece(piece_gm, inputs, outputs))
    return pieces


class PieceRunner:
    """Calls the compiled pieces in order; the callable the transformed code
    calls in place of the whole graph (graph inputs in, graph outputs out).

    Example::

        >>> import torch, torch.fx as fx
        >>> g = fx.Graph(); x = g.placeholder("x")
        >>> a = g.call_function(torch.sin, (x,)); b = g.call_function(torch.cos, (a,)); _ = g.output((b,))
        >>> gm = fx.GraphModule(torch.nn.Module(), g)
        >>> pieces = split_graph(gm, [b])
        >>> run = PieceRunner(gm, pieces, [p.gm.forward for p in pieces])
        >>> bool(run(torch.zeros(1))[0] == 1.0)
        True
    """

    __slots__ = ("_steps", "_n_slots", "_result", "__weakref__")

    def __init__(self, gm: fx.GraphModule, pieces: List[Piece], compiled: List[Callable]):
        slot: Dict[fx.Node, int] = {}
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                slot[n] = len(slot)
        n_inputs = len(slot)
        for p in pieces:
            for n in p.outputs:
                slot[n] = len(slot)
        output = _output_node(gm.graph)
        result = [slot[n] for n in output.args[0]]
        last_use: Dict[int, int] = {}
        for k, p in enumerate(pieces):
            for n in p.inputs:
                last_use[slot[n]] = k
        keep = set(result)
        steps = []
        for k, (p, fn) in enumerate(zip(pieces, compiled)):
            free = tuple(s for s, last in last_use.items() if last == k and s not in keep and s >= n_inputs)
            steps.append((fn, tuple(slot[n] for n in p.inputs), tuple(slot[n] for n in p.outputs), free))
        self._steps = tuple(steps)
        self._n_slots = len(slot)
        self._result = tuple(result)

    def __call__(self, *args):
        env = list(args)
        env.extend([None] * (self._n_slots - len(env)))
        for fn, ins, outs, free in self._steps:
            values = fn(*[env[i] for i in ins])
            for s, v in zip(outs, values):
                env[s] = v
            for s in free:
                env[s] = None
        return [env[i] for i in self._result]

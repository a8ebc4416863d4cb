"""Block calls in the graph: recording a block's region, reusing it, lowering.

The tracer side of layer reuse (:mod:`bytegraph.layer_reuse` decides when):

* :func:`record_block` runs the first call of a block inline, then checks
  what it did and cuts the nodes it made out of the graph into a subgraph,
  replaced by one :class:`BlockCall` node;
* :func:`reuse_block` makes the call of a sibling one more such node, with
  that sibling's parameters lifted as graph inputs and its guards added;
* :func:`lower_for_backend` turns the nodes into what a backend receives:
  for ``aot_eager`` and ``inductor``, torch's ``invoke_subgraph`` operator
  on one shared subgraph (AOTAutograd traces it once and Inductor compiles
  it once, as for ``torch.compiler.nested_compile_region``); for ``eager``
  and custom backends, a plain call of the subgraph's code, which runs as it
  is or is traced through.
"""

from __future__ import annotations

import operator
from typing import List, Optional

import torch
import torch.fx as fx

from . import config
from .guards import Guard
from .guard_compiler import _float_bits
from .logs import log
from .layer_reuse import (NotReusable, BlockCheck, BlockRecord, ambient_state, owned_objects, relative_guards,
                          resolve, _BLOCK)


class BlockCall:
    """The target of a block-call node: calls the block's subgraph.

    Example::

        >>> import torch, torch.fx as fx
        >>> g = fx.Graph(); x = g.placeholder("x"); _ = g.output((g.call_function(torch.neg, (x,)),))
        >>> BlockCall("b", fx.GraphModule(torch.nn.Module(), g))(torch.ones(1))
        (tensor([-1.]),)
    """

    __module__ = __name__

    def __init__(self, identifier: str, subgraph: fx.GraphModule):
        self.__name__ = self.__qualname__ = identifier
        self.subgraph = subgraph
        self._forward = subgraph.forward

    def __call__(self, *args):
        return self._forward(*args)

    def __repr__(self):
        return f"BlockCall({self.__name__})"


# -- arguments and results --------------------------------------------------

def flatten_args(args, kwargs):
    """``(spec, tensors)`` of a block call's arguments: the spec is hashable
    (constants by value, tensors by metadata and position among the
    tensors); tensors are the TensorValues in order.  Raises NotReusable for
    anything else (a list, an object, a symbolic size)."""
    from .values.tensors import TensorValue
    from .values.containers import TupleValue
    tensors: List = []

    def walk(v):
        if isinstance(v, TensorValue):
            for i, t in enumerate(tensors):
                if t is v:
                    return ("same", i)
            tensors.append(v)
            return ("t", _meta(v.fake))
        if type(v) is TupleValue:
            return ("tuple", tuple(walk(x) for x in v.items))
        if v.is_constant():
            c = v.as_constant()
            if type(c) is float:
                # by bits, as a guard compares them: 0.0 == -0.0, yet 1 / x tells them apart
                return ("c", float, _float_bits(c))
            if type(c) in (bool, int, str, type(None)):
                return ("c", type(c), c)
        raise NotReusable(f"an argument is a {v.type_name()}")
    spec = (tuple(walk(a) for a in args), tuple((k, walk(v)) for k, v in kwargs.items()))
    return spec, tensors


def _meta(fake: torch.Tensor) -> tuple:
    if any(isinstance(s, torch.SymInt) for s in tuple(fake.shape) + tuple(fake.stride())):
        raise NotReusable("an argument has a symbolic size")
    return (tuple(fake.shape), tuple(fake.stride()), fake.storage_offset(), fake.dtype, fake.device,
            fake.requires_grad)


def _flatten_result(result):
    """``(spec, tensor values)`` of a block's result: a tensor, or a tuple of
    tensors and constants."""
    from .values.tensors import TensorValue
    from .values.containers import TupleValue
    tensors: List = []

    def walk(v):
        if isinstance(v, TensorValue):
            if any(t is v for t in tensors):
                raise NotReusable("it returns one tensor twice")
            tensors.append(v)
            return ("t", len(tensors) - 1)
        if type(v) is TupleValue:
            return ("tuple", tuple(walk(x) for x in v.items))
        if v.is_constant():
            c = v.as_constant()
            if type(c) in (bool, int, float, str, type(None)):
                return ("c", c)
        raise NotReusable(f"it returns a {v.type_name()}")
    return walk(result), tensors


def _build_result(spec, tensors):
    from .values.containers import TupleValue
    from .values.constants import const
    kind = spec[0]
    if kind == "t":
        return tensors[spec[1]]
    if kind == "tuple":
        return TupleValue([_build_result(s, tensors) for s in spec[1]])
    return const(spec[1])


# -- recording ----------------------------------------------------------------

class _Snapshot:
    """What a block call must leave as it found it."""

    def __init__(self, tx):
        self.version = tx.side_effects.version
        self.order = len(tx.side_effects.order)
        g = tx.graph.graph
        self.last = g._root.prev if len(g.nodes) else None   # (the node list is circular around a sentinel)
        self.ambient = ambient_state()
        self.autocasts = len(tx.trace.open_autocasts)
        self.contexts = len(tx.trace.open_contexts)
        self.templates = len(tx.side_effects.templates)

    def why_changed(self, tx) -> Optional[str]:
        se = tx.side_effects
        if se.version != self.version or len(se.templates) != self.templates:
            new = [_describe_effect(se, key) for key in list(se.order)[self.order:]][:3]
            return f"its trace has side effects ({', '.join(new) or 'a write to an object already written'})"
        if ambient_state() != self.ambient or len(tx.trace.open_autocasts) != self.autocasts \
                or len(tx.trace.open_contexts) != self.contexts:
            return "it changes grad mode or autocast, or leaves a context open"
        return None


def _describe_effect(se, key) -> str:
    """A pending effect (a key of ``SideEffects.order``) in words."""
    kind = key[0]
    if kind == "global":
        return f"global {key[2]} written"
    if kind == "attr":
        return f"attribute {key[2]} written"
    if kind == "call":
        return "a library call run after the graph"
    for v in se.mutated:
        if id(v) == key[1]:
            return f"{v.source.name() if v.source is not None else v.type_name()} changed"
    return str(kind)


def _pending_writes(se, source) -> Optional[str]:
    """A pending write to an object reached through the block at ``source``
    (an attribute of one of its modules, a container it holds): the block
    would read it back unguarded, where a sibling reads its own object's real
    state.  Pending writes elsewhere (a shared context variable, a global)
    are the same for every layer while no new effect happens
    (``SideEffects.version``)."""
    from .layer_reuse import rebase
    from .values.cells import CellValue
    for v in list(se.attr_writes) + list(se.mutated):
        if v.source is not None and rebase(v.source, source, _BLOCK) is not None:
            return f"the trace has a pending write to {v.source.name()}"
    return None


def made_state(se) -> tuple:
    """The state of the objects made in the trace that the block can reach
    other than through its arguments: those stored in a global, an attribute
    or a cell (a context variable's value, a list a hook appends to).  Their
    changes are the objects' own state, not recorded effects, so a block is
    recorded only if it leaves this unchanged, and reused only while it is
    what the recorded block saw.  The fingerprint is each such object's
    children by identity."""
    from .values.base import reachable
    from .values.cells import CellValue
    roots = [value for _, _, value in se.global_writes.values()]
    roots += [value for names in se.attr_writes.values() for value in names.values()]
    roots += [v.contents for v in se.mutated if isinstance(v, CellValue)]
    out = []
    for v in reachable(roots):
        if v.source is None and not v.is_constant():
            out.append((id(v), tuple(id(c) for c in v.children())))
    return tuple(out)


def _region(graph: fx.Graph, last) -> List[fx.Node]:
    """The non-placeholder nodes made after ``last`` (placeholders are
    inserted among the first nodes, wherever the trace finds an input)."""
    start = last.next if last is not None else next(iter(graph.nodes), None)
    out = []
    node = start
    root = graph._root
    while node is not None and node is not root:
        if node.op != "placeholder":
            out.append(node)
        node = node.next
    return out


def record_block(reuse, tx, module_value, key, arg_spec, arg_tensors, inline):
    """Run the first call of a block and, if it can be reused, cut it out of
    the graph into a :class:`BlockRecord`."""
    from .graph import GLOBAL_STATE_TARGETS
    from .compiler import _SILENT_WRITERS
    module, source = module_value.obj, module_value.source
    graph = tx.graph
    try:
        why = _pending_writes(tx.side_effects, source)
        if why is None and graph.symbolic_inputs:
            why = "shapes are symbolic"
        if why is None and any(t.fake.is_inference() for t in arg_tensors):
            # (torch.inference_mode: no version counter tells whether it writes to them)
            why = "its arguments are inference tensors"
        if why is not None:
            raise NotReusable(why)
    except NotReusable as why:
        reuse.rejected[key] = str(why)
        reuse.note(f"{type(module).__qualname__} at {source.name()} not reused: {why}")
        return inline()
    snap = _Snapshot(tx)
    made_before = made_state(tx.side_effects)
    arg_versions = [t.fake._version for t in arg_tensors]
    reuse.recording = True
    reuse.random_op = None
    try:
        result = inline()
    finally:
        reuse.recording = False
    try:
        why = snap.why_changed(tx)
        if why is not None:
            raise NotReusable(why)
        if made_state(tx.side_effects) != made_before:
            raise NotReusable("it changes an object the trace made before it (stored in a global or attribute)")
        out_spec, outputs = _flatten_result(result)
        region = _region(graph.graph, snap.last)
        ops = [n for n in region if n.op in ("call_function", "call_method", "call_module")]
        if len(ops) < config.reuse_min_ops:
            raise NotReusable(f"it has {len(ops)} operations (config.reuse_min_ops is {config.reuse_min_ops})")
        if reuse.random_op is not None:
            raise NotReusable(f"it draws random numbers ({reuse.random_op})")
        in_region = set(region)
        for n in region:
            if n.target in GLOBAL_STATE_TARGETS:
                raise NotReusable("it switches grad mode or autocast")
            if any(n.target is f for f in _SILENT_WRITERS):
                raise NotReusable("it runs batch_norm, which may update statistics in place")
            if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in _vals(n)):
                raise NotReusable("it computes symbolic sizes")
        if [t.fake._version for t in arg_tensors] != arg_versions:
            raise NotReusable("it writes to its arguments")
        for t in outputs:
            if t.node not in in_region:
                raise NotReusable("it returns a tensor it did not compute (an argument or parameter)")
            if t.fake._base is not None:
                raise NotReusable("it returns a view")
        record = _make_record(reuse, tx, module, source, region, arg_tensors, outputs)
    except NotReusable as why:
        reuse.rejected[key] = str(why)
        reuse.note(f"{type(module).__qualname__} at {source.name()} not reused: {why}")
        return result
    record.arg_spec, record.output_spec = arg_spec, out_spec
    record.ambient = snap.ambient
    record.effects_version = tx.side_effects.version
    record.made_state = made_before
    reuse.records[key].append(record)
    reuse.note(f"{type(module).__qualname__} at {source.name()} recorded as {record.identifier} "
               f"({len(ops)} operations, {len(record.inputs)} inputs)")
    return result


def _vals(node: fx.Node):
    v = node.meta.get("val")
    return v if isinstance(v, (tuple, list)) else (v,)


def _make_record(reuse, tx, module, source, region, arg_tensors, outputs) -> BlockRecord:
    graph = tx.graph
    in_region = set(region)
    by_node = {inp.node: inp for inp in graph.inputs}
    arg_nodes = {t.node: i for i, t in enumerate(arg_tensors)}
    externals: List[fx.Node] = []
    for n in region:
        for x in n.all_input_nodes:
            if x not in in_region and x not in externals:
                externals.append(x)
    roles = []
    for x in externals:
        if x in arg_nodes:
            roles.append(("arg", arg_nodes[x]))
            continue
        inp = by_node.get(x)
        if inp is None or not isinstance(inp.example, torch.Tensor):
            raise NotReusable("it reads a value computed outside it that is not an argument")
        if inp.mutated():
            raise NotReusable("it writes to a parameter or input")
        from .layer_reuse import rebase
        rel = rebase(inp.source, source, _BLOCK)
        roles.append(("tensor", rel) if rel is not None else ("fixed", x))
    owned = owned_objects(module)
    relative = relative_guards(list(tx.guards), source, owned, module, tx.trace.blocks.identities)
    record = BlockRecord(sum(len(r) for r in reuse.records.values()), source, type(module))
    record.inputs = roles
    record.relative = relative
    record.check = BlockCheck(record.identifier, relative, tx.trace.fn.__globals__)
    if not record.check.matches(module):
        raise NotReusable(f"its own guards do not hold for it (internal: {record.check.why_not(module)})")
    record.output_fakes = [t.fake for t in outputs]
    record.subgraph = _cut(graph, region, externals, outputs, record)
    return record


def _cut(graph, region: List[fx.Node], externals: List[fx.Node], outputs, record) -> fx.GraphModule:
    """Move ``region`` into a subgraph taking ``externals``; in the main graph
    one block-call node (and a getitem per output) replaces it."""
    sub = fx.Graph()
    env = {}
    for k, x in enumerate(externals):
        p = sub.placeholder(f"in_{k}")
        p.meta.update({key: x.meta[key] for key in ("val", "example_value") if key in x.meta})
        env[x] = p
    for n in region:
        env[n] = sub.node_copy(n, lambda x: env[x])
    sub.output(tuple(env[t.node] for t in outputs))
    gm = fx.GraphModule(torch.nn.Module(), sub)
    gm.meta["bytegraph_block"] = record.identifier
    target = BlockCall(record.identifier, gm)
    record.target = target
    g = graph.graph
    where = region[0].meta.get("stack_trace")
    call = g.call_function(target, tuple(externals))
    call.meta["val"] = call.meta["example_value"] = tuple(t.fake for t in outputs)
    if where:
        call.meta["stack_trace"] = where
    items = []
    for i, t in enumerate(outputs):
        item = g.call_function(operator.getitem, (call, i))
        item.meta["val"] = item.meta["example_value"] = t.fake
        if where:
            item.meta["stack_trace"] = where
        items.append(item)
    for t, item in zip(outputs, items):
        t.node.replace_all_uses_with(item)
        t.node = item
    for n in reversed(region):
        g.erase_node(n)
    graph.op_count += 1 + len(items) - len(region)
    return gm


# -- reuse ------------------------------------------------------------------

def reuse_block(reuse, tx, record: BlockRecord, module_value, arg_tensors):
    """A sibling's call as one more call of ``record``'s subgraph (raises
    NotReusable when the sibling differs: the caller traces it instead)."""
    from .values.tensors import TensorValue
    module, source = module_value.obj, module_value.source
    why = _pending_writes(tx.side_effects, source)
    if why is not None:
        raise NotReusable(why)
    if tx.side_effects.version != record.effects_version:
        raise NotReusable("the program had side effects since the recorded layer")
    if made_state(tx.side_effects) != record.made_state:
        raise NotReusable("an object the trace made and stored changed since the recorded layer")
    if tx.graph.symbolic_inputs:
        raise NotReusable("shapes are symbolic")
    if ambient_state() != record.ambient:
        raise NotReusable("grad mode or autocast differs from the recorded layer's")
    if not record.check.matches(module):
        raise NotReusable(record.check.why_not(module))
    tx.guards.add(Guard("BLOCK_MATCH", source, record.check))
    nodes = []
    for role in record.inputs:
        if role[0] == "arg":
            nodes.append(arg_tensors[role[1]].node)
        elif role[0] == "fixed":
            nodes.append(role[1])
        else:
            from .layer_reuse import rebase
            rel = role[1]
            obj = resolve(rel, _BLOCK, module)
            full = rebase(rel, _BLOCK, source)
            if _is_module_tensor(rel):
                from .values.builder import wrap_parameter
                value = wrap_parameter(tx, obj, full, plain=True)
            else:
                value = tx.wrap(obj, full)
            if not isinstance(value, TensorValue):
                raise NotReusable(f"{full.name()} is no tensor input")
            nodes.append(value.node)
    graph = tx.graph
    fakes = [_like(graph, f) for f in record.output_fakes]
    call = graph.create_node("call_function", record.target, tuple(nodes), {}, tuple(fakes), where=tx)
    values = []
    for i, fake in enumerate(fakes):
        item = graph.create_node("call_function", operator.getitem, (call, i), {}, fake, where=tx)
        value = TensorValue(item, fake, torch.Tensor)
        graph.value_of_fake[id(fake)] = value
        values.append(value)
    record.layers += 1
    from .diagnostics import STATS
    STATS.layers_reused += 1
    return _build_result(record.output_spec, values)


def _is_module_tensor(rel) -> bool:
    """A relative source ``..._parameters[name]`` / ``..._buffers[name]``."""
    from .sources import AttrSource, ItemSource
    return isinstance(rel, ItemSource) and isinstance(rel.base, AttrSource) and \
        rel.base.attr in ("_parameters", "_buffers")


def _like(graph, fake: torch.Tensor) -> torch.Tensor:
    """A new fake tensor with ``fake``'s metadata (a non-leaf if it requires grad)."""
    with graph.fake_mode:
        out = torch.empty_strided(tuple(fake.shape), tuple(fake.stride()), dtype=fake.dtype, device=fake.device)
        if fake.requires_grad:
            with torch.enable_grad():
                out = out.requires_grad_().clone()
    return out


# -- lowering -----------------------------------------------------------------

def has_blocks(gm: fx.GraphModule) -> bool:
    return any(n.op == "call_function" and isinstance(n.target, BlockCall) for n in gm.graph.nodes)


def _block_outputs_need_grad(gm: fx.GraphModule) -> bool:
    return any(isinstance(v, torch.Tensor) and v.requires_grad
               for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, BlockCall)
               for v in n.meta.get("val", ()))


def lower_for_backend(gm: fx.GraphModule, backend_name: str) -> fx.GraphModule:
    """The graph a backend receives: ``gm`` itself (block calls run the
    subgraph's code), or, for ``aot_eager`` and ``inductor``, a copy whose
    block calls are ``invoke_subgraph`` on one submodule per block."""
    if backend_name not in ("aot_eager", "inductor") or not config.reuse_blocks_invoke_subgraph:
        return gm
    training = backend_name == "inductor" and _block_outputs_need_grad(gm)
    if training and not config.reuse_blocks_inductor_training:
        log("layer_reuse", "inductor: block outputs require grad and config.reuse_blocks_inductor_training is "
                           "off; the blocks are compiled inline")
        return gm
    from torch._higher_order_ops.invoke_subgraph import invoke_subgraph
    root = torch.nn.Module()
    graph = fx.Graph()
    env = {}
    subs = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, BlockCall):
            name = n.target.__name__
            if name not in subs:
                subs[name] = n.target.subgraph
                root.add_module(name, n.target.subgraph)
            attr = graph.get_attr(name)
            new = graph.call_function(invoke_subgraph, (attr, name, *[env[a] for a in n.args]))
            new.meta.update(n.meta)
            env[n] = new
        else:
            env[n] = graph.node_copy(n, lambda x: env[x])
    out = fx.GraphModule(root, graph)
    out.meta.update(gm.meta)
    if training:
        # Inductor (torch 2.13) overwrites tensors that a later
        # invoke_subgraph call's backward still reads, three ways, each found
        # after the one before was fixed: it reuses their buffers (one layer
        # traced on its own between reused ones, a weight transposed in
        # memory, was enough); the block's backward subgraph inherits the
        # outer backward's donated-buffer indices, which number other inputs,
        # and writes into a saved input (residual adds around alternate
        # layers); and a kernel writes its output into an input's buffer in
        # place (one block output feeding several later calls).  Each time
        # every earlier layer's gradients were wrong; with all three off they
        # are eager's (tests/test_layer_reuse_inductor.py).  Buffers are
        # still freed after their last use.  compile_fx applies the Inductor
        # patch to the backward's later compile too; the donated indices are
        # decided while the forward compiles.
        out.meta["inductor_config_patches"] = {"allow_buffer_reuse": False, "inplace_buffers": False}
        out.meta["functorch_config_patches"] = {"donated_buffer": False}
    return out

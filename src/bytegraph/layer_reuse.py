"""Repeated layers compiled once: a block traced once, called per layer.

Models are stacks of identical blocks (``for block in self.h: x = block(x)``).
Tracing each block again costs time linear in the depth, and a backend
compiling the one big graph pays again for every layer.  So the first call
of a block in a trace is *recorded*: traced as usual, then its nodes are cut
out of the graph into a subgraph (:class:`BlockRecord`) and replaced by one
block-call node.  A later call of a sibling block (same class, same
parameter shapes and dtypes, same hooks, same code path) is not traced: it
becomes another block-call node with that layer's parameters as inputs.

Soundness rests on the guards.  Everything the recorded trace depended on
is a guard on a source under the first block's source (its attributes,
training flag, hook dicts, parameters' metadata).  Each such guard is
re-rooted at the block (:func:`relative_guards`) and compiled once into a
:class:`BlockCheck`; a sibling is reused only if the check holds for it
*now*, and then a ``BLOCK_MATCH`` guard on the sibling's source (the same
check, one call per layer) joins the trace's guards, so the cache entry
still covers every layer's structure.  Objects that are
the block's own (its submodules, parameters, buffers) are matched by type
and position instead of identity; any other object it read (a shared
config, a function) must be the very same object.

A block is not reused -- it is traced like any call, and the reason logged
(``layer_reuse``) -- when its trace had side effects, changed grad mode or
autocast, drew random numbers (ran an aten operator tagged
``nondeterministic_seeded`` with its randomness on, :class:`RandomOpWatch`),
wrote to its inputs or parameters, returned anything but tensors and
constants, or a view; when shapes are symbolic; when it has fewer than ``config.reuse_min_ops`` operations or fewer than
``config.reuse_min_layers`` siblings; or when a sibling's check fails (a
different attribute, training flag, hook, code path).

How the block-call nodes reach the backend is :mod:`bytegraph.block_graphs`.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import config
from .guards import Guard, GuardSet, autocast_state
from .logs import enabled, log
from .sources import AttrSource, ItemSource, LocalSource, Source, chain, with_base

#: guard kinds a recorded block may depend on (others make it not reusable)
_REUSABLE_KINDS = frozenset({"TYPE_MATCH", "ID_MATCH", "FUNCTION_MATCH", "CONSTANT_MATCH", "LEN_MATCH",
                             "DICT_KEYS", "ODICT_KEYS", "DICT_CONTAINS", "SET_MATCH", "TENSOR_MATCH", "ALIAS",
                             "CELL_EMPTY"})

#: the root a block's own guards are re-rooted at (the check's one parameter)
_BLOCK = LocalSource("___bg_block")


# -- random numbers -----------------------------------------------------------
#
# A block that draws random numbers is not reused.  Its layers would all be
# calls of one subgraph, and each layer's draws would be eager's only while
# every backend runs that subgraph afresh, call after call, in eager's order
# (the eager and aot_eager backends do): nothing in a call says that its
# result depends on the generator, so a pass could take two calls with equal
# operands for one value, or a backend draw once for all of them.  Traced
# layer by layer, each random operator is a node of its own, which torch's
# passes know by its tag.
#
# What is random is decided by what the operator is, not by its name: the
# aten operators the recorded block really ran (its fake runs, watched by
# :class:`RandomOpWatch`, after Python functions such as ``F.dropout`` or
# ``F.scaled_dot_product_attention`` chose them: a dropout in eval runs
# none) tagged ``torch.Tag.nondeterministic_seeded`` (every aten operator
# that takes a generator is), unless an argument of the operator's own
# switches its randomness off (:data:`_RANDOM_SWITCHES`).

#: arguments of seeded aten operators that switch their randomness off when
#: literally False (train, training) or 0 (dropout_p, dropout): rrelu's
#: noise, native_dropout, the fused attention kernels, the RNN kernels.  A
#: dropout's ``p=0`` is no such switch: ``native_dropout(x, 0.0, True)``
#: still draws its mask (and moves the generator).
_RANDOM_SWITCHES = ("train", "training", "dropout_p", "dropout")


def draws_random(op, args=(), kwargs=None) -> bool:
    """Whether the aten operator ``op`` (an OpOverload), called with ``args``
    and ``kwargs``, draws random numbers: it is tagged
    ``nondeterministic_seeded`` and no switch of its own is off (a value
    that is not a literal, a symbolic float say, counts as on).

    Example::

        >>> import torch
        >>> aten, x = torch.ops.aten, torch.ones(2)
        >>> draws_random(aten.bernoulli.p, (x, 0.5)), draws_random(aten.add.Tensor, (x, x))
        (True, False)
        >>> rrelu = aten.rrelu_with_noise.default
        >>> draws_random(rrelu, (x, x, 0.1, 0.3, True)), draws_random(rrelu, (x, x))   # training=False by default
        (True, False)
    """
    if torch.Tag.nondeterministic_seeded not in getattr(op, "tags", ()):
        return False
    kwargs = kwargs or {}
    for i, arg in enumerate(op._schema.arguments):
        if arg.name in _RANDOM_SWITCHES:
            value = args[i] if i < len(args) else kwargs.get(arg.name, arg.default_value)
            if value is False or type(value) in (int, float) and value == 0:
                return False
    return True


class RandomOpWatch(TorchDispatchMode):
    """Entered over the fake run of an operation (``values/tensors.py``) of a
    graph that has drawn no random numbers yet, or of a block being recorded:
    notes in each holder's ``random_op`` the first aten operator that draws
    random numbers (:func:`draws_random`), or a higher-order operator, whose
    body it does not see (it counts as random: the block is traced layer by
    layer, and the graph compiled without common-subexpression elimination,
    which are always right)."""

    supports_higher_order_operators = True

    def __init__(self, *holders):
        super().__init__()
        #: objects with a ``random_op`` attribute to note it in (the block
        #: being recorded, the graph)
        self.holders = holders

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(h.random_op is None for h in self.holders) and (
                isinstance(func, torch._ops.HigherOrderOperator) or draws_random(func, args, kwargs)):
            for h in self.holders:
                if h.random_op is None:
                    h.random_op = str(func)
        return func(*args, **(kwargs or {}))


class NotReusable(Exception):
    """Why a block call is traced as usual (logged under ``layer_reuse``)."""


def rebase(source: Source, old: Source, new: Source) -> Optional[Source]:
    """``source`` with its prefix ``old`` replaced by ``new``; None when
    ``source`` is not under ``old``.

    Example::

        >>> from bytegraph.sources import AttrSource, LocalSource
        >>> s = AttrSource(AttrSource(LocalSource("m"), "a"), "w")
        >>> rebase(s, AttrSource(LocalSource("m"), "a"), LocalSource("b")).name()
        'b.w'
    """
    links = chain(source)
    for i, s in enumerate(links):
        if s == old:
            out = new
            for step in links[i + 1:]:
                out = with_base(step, out)
            return out
    return None


def resolve(source: Source, root: Source, obj):
    """The object ``source`` names when ``root`` holds ``obj``, read the way
    a guard reads it (``source`` must be under ``root``)."""
    return reader(source, root)(obj)


_READERS: Dict[tuple, object] = {}


def reader(source: Source, root: Source):
    """A function ``read(obj)``: what ``source`` names when ``root`` holds ``obj``
    (compiled once per source: every sibling reads the same path)."""
    key = (source, root)
    fn = _READERS.get(key)
    if fn is None:
        ns: dict = {}

        def bind(x) -> str:
            name = f"___k{len(ns)}"
            ns[name] = x
            return name
        links = chain(source)
        expr = "___obj"
        for step in links[links.index(root) + 1:]:
            expr = step.guard_expr(expr, bind)
        fn = eval(f"lambda ___obj: {expr}", ns)  # noqa: S307  (guard expressions bytegraph generated)
        if not ns:   # (a path through objects bound as keys would keep them alive: not cached)
            if len(_READERS) > 4096:
                _READERS.clear()
            _READERS[key] = fn
    return fn


def owned_objects(module: torch.nn.Module) -> Dict[int, object]:
    """id -> object of what belongs to ``module``: its submodules, parameters
    and buffers (matched by position between siblings, not by identity)."""
    out: Dict[int, object] = {}
    for m in module.modules():
        out[id(m)] = m
        for d in (m._parameters, m._buffers):
            for t in d.values():
                if t is not None:
                    out[id(t)] = t
    return out


def structure(module: torch.nn.Module) -> tuple:
    """What siblings must share to be candidates: class, submodule classes,
    parameter and buffer names with shape, dtype, device, requires_grad."""
    mods = tuple((name, type(m)) for name, m in module.named_modules())
    tensors = tuple((name, tuple(t.shape), t.dtype, t.device, t.requires_grad)
                    for name, t in list(module.named_parameters()) + list(module.named_buffers()))
    return (type(module), mods, tensors)


def relative_guards(guards, old: Source, owned: Dict[int, object], first, identities=()) -> List[Guard]:
    """The guards among ``guards`` that concern the block at ``old`` (the
    object ``first``), re-rooted at the block check's parameter.

    Owned objects (see :func:`owned_objects`) pinned by identity become
    type checks: a sibling has its own.  An ``ALIAS`` to a path outside the
    block becomes identity with the object that path held.  Raises
    :class:`NotReusable` on a guard kind the rebasing does not model, and
    when the trace used the identity of an owned object as a value
    (``identities``: the sources :func:`identity_observed` saw, such as
    ``id(self)``), which a sibling's own object would not share."""
    out = []
    for g in guards:
        sources = ((g.source,) if g.source is not None else ()) + tuple(g.others)
        moved = [rebase(s, old, _BLOCK) for s in sources]
        if not any(m is not None for m in moved):
            continue
        if g.kind not in _REUSABLE_KINDS:
            raise NotReusable(f"it depends on a {g.kind} guard ({g.describe()})")
        if g.kind == "ALIAS":
            # one object reached through two paths, at least one inside the block
            a, b = moved[0], moved[1]
            inside = a if a is not None else b
            target = resolve(inside, _BLOCK, first)
            if a is not None and b is not None:
                out.append(Guard("ALIAS", a, others=(b,)))
            elif id(target) in owned:
                raise NotReusable(f"a part of the block is also reached from outside it ({g.describe()})")
            else:
                out.append(Guard("ID_MATCH", inside, target))
            continue
        if g.kind in ("ID_MATCH", "FUNCTION_MATCH") and id(g.expected) in owned:
            if g.source in identities:
                raise NotReusable(f"it uses the identity of {g.source.name()} as a value (id(), a cache key)")
            out.append(Guard("TYPE_MATCH", moved[0], type(g.expected)))
            continue
        if any(m is None for m in moved):
            raise NotReusable(f"a guard relates the block to something outside it ({g.describe()})")
        out.append(Guard(g.kind, moved[0], g.expected, tuple(moved[1:])))
    return out


def identity_observed(tx, source: Optional[Source]) -> None:
    """Note that the trace turned the identity of the object at ``source``
    into a value (``id(obj)``, an ``lru_cache`` key): its ``ID_MATCH`` guard
    then says more than "a part of this class", so a block it belongs to is
    not reused for siblings (their parts are other objects).

    Example: ``id_`` in values/frame_builtins.py calls it before baking the number."""
    blocks = tx.trace.blocks
    if blocks is not None and source is not None:
        blocks.identities.add(source)


class BlockRecord:
    """One block traced once: its subgraph, how to feed it, and its check.

    ``inputs`` says where each subgraph input comes from: ``("arg", i)`` the
    i-th tensor among the call's arguments, ``("tensor", source)`` a tensor
    at that source relative to the block (a parameter or buffer), or
    ``("fixed", node)`` one graph value every layer reads (a global tensor).
    """

    def __init__(self, index: int, first_source: Source, module_type: type):
        self.index = index
        self.identifier = f"bytegraph_block_{index}"
        self.first_source = first_source
        self.module_type = module_type
        self.subgraph: Optional[torch.fx.GraphModule] = None
        self.inputs: List[tuple] = []
        self.arg_spec = None
        self.output_spec = None
        self.output_fakes: List[torch.Tensor] = []
        self.relative: List[Guard] = []
        self.check = None
        self.grad_mode = None
        self.autocast = None
        self.layers = 1

    def __repr__(self):
        return f"BlockRecord({self.module_type.__qualname__} at {self.first_source.name()}, {self.layers} layers)"


def _ddp_cuts_graphs() -> bool:
    """Whether the graph being traced will be cut at DDP's gradient buckets."""
    if not config.ddp_bucket_split or not torch.distributed.is_available():
        return False
    from .distributed.ddp import active_ddp
    return active_ddp() is not None


class BlockReuse:
    """The records of one trace, and the decision at each module call."""

    def __init__(self, trace):
        #: (only the name: a reference to the trace would keep it, and every
        #: object it met, alive past ``Trace.release``)
        self.function = trace.fn.__qualname__
        #: structure -> the recorded variants (one per argument spec: the first
        #: layer's input may differ from the others', say in requires_grad)
        self.records: Dict[tuple, List[BlockRecord]] = {}
        #: structure -> why blocks of it are traced as usual
        self.rejected: Dict[tuple, str] = {}
        #: a block being recorded (nothing inside it is reused)
        self.recording = False
        #: the first random operator the recording block ran (RandomOpWatch)
        self.random_op: Optional[str] = None
        self._siblings: Dict[Source, int] = {}
        #: sources whose object's identity became a value (identity_observed)
        self.identities: set = set()
        #: under a DDP forward whose graphs are cut at the gradient buckets
        #: (distributed/ddp.py) nothing is reused: a block call is one node,
        #: so a cut could only fall between layers, while DDP's buckets
        #: (parameter by parameter) close inside them; the buckets' pieces
        #: would then hold more than one bucket each, and the all-reduce of
        #: a bucket would wait for the whole of its piece's backward
        self.off_for_ddp = _ddp_cuts_graphs()

    # -- the decision -----------------------------------------------------
    def call(self, tx, module_value, args, kwargs, inline):
        """``module_value(*args, **kwargs)``: reused, recorded, or just ``inline()``."""
        if self.recording or not config.reuse_blocks or self.off_for_ddp:
            return inline()
        module = module_value.obj
        source = module_value.source
        if source is None or not module._parameters and not any(True for _ in module.parameters()):
            return inline()
        key = structure(module)
        if key in self.rejected:
            return inline()
        from .block_graphs import flatten_args, record_block, reuse_block
        records = self.records.setdefault(key, [])
        if not records and self._sibling_count(tx, source, key) < config.reuse_min_layers:
            return inline()
        try:
            spec, tensors = flatten_args(args, kwargs)
        except NotReusable as why:
            if not records:
                self.rejected[key] = str(why)
            self.note(f"{type(module).__qualname__} at {source.name()} not reused: {why}")
            return inline()
        record = next((r for r in records if r.arg_spec == spec), None)
        if record is None:
            if len(records) >= config.reuse_max_variants:
                self.note(f"{type(module).__qualname__} at {source.name()} traced again: its arguments match none "
                          f"of the {len(records)} recorded variants (config.reuse_max_variants)")
                return inline()
            return record_block(self, tx, module_value, key, spec, tensors, inline)
        try:
            return reuse_block(self, tx, record, module_value, tensors)
        except NotReusable as why:
            self.note(f"{type(module).__qualname__} at {source.name()} traced again: {why}")
            return inline()

    def note(self, message: str) -> None:
        if enabled("layer_reuse"):
            log("layer_reuse", "%s: %s", self.function, message)

    def _sibling_count(self, tx, source: Source, key: tuple) -> int:
        """Modules of structure ``key`` in the container ``source`` is an item of
        (``container._modules[name]``, a ModuleList or Sequential); 0 otherwise."""
        if not (isinstance(source, ItemSource) and isinstance(source.base, AttrSource)
                and source.base.attr == "_modules"):
            return 0
        parent = source.base.base
        hit = self._siblings.get((parent, key))
        if hit is not None:
            return hit
        from .values.modules import NNModuleValue
        count = 0
        for v in tx.side_effects.existing_values():
            if isinstance(v, NNModuleValue) and v.source == parent:
                if isinstance(v.obj, (torch.nn.ModuleList, torch.nn.Sequential)):
                    count = sum(1 for m in v.obj._modules.values() if m is not None and structure(m) == key)
                break
        self._siblings[(parent, key)] = count
        return count


def ambient_state() -> tuple:
    """The process-wide state a block's trace depended on: grad mode, autocast."""
    return (torch.is_grad_enabled(), autocast_state())


def _check_signature(___bg_block):
    """The signature a :class:`BlockCheck` is called with (outside a class
    body, where the parameter's name would be mangled)."""


class BlockCheck:
    """A record's relative guards compiled once into ``matches(block) -> bool``:
    the expected value of each layer's ``BLOCK_MATCH`` guard.

    Example::

        >>> import torch
        >>> from bytegraph.guards import Guard
        >>> check = BlockCheck("b", [Guard("CONSTANT_MATCH", AttrSource(_BLOCK, "training"), False)], {})
        >>> check.matches(torch.nn.Linear(1, 1).eval()), check.matches(torch.nn.Linear(1, 1))
        (True, False)
    """

    def __init__(self, identifier: str, relative: List[Guard], fn_globals: dict):
        from .guard_compiler import compile_guards
        gs = GuardSet()
        for g in relative:
            gs.add(g)
        self.identifier = identifier
        self.count = len(gs)
        self._compiled = compile_guards(gs, _check_signature, fn_globals)
        self.matches = self._compiled.check

    def why_not(self, block) -> str:
        """The first of the recorded conditions ``block`` fails, in words."""
        return self._compiled.why_failed((block,), {}) or "a recorded condition fails"

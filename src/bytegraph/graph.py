"""The output graph: a ``torch.fx.Graph`` recorded under ``FakeTensorMode``.

Tensor operations met while tracing become fx nodes; their metadata comes
from running the same operation on fake tensors.  Graph inputs are lifted
from sources (arguments, globals, closure contents, attributes): one
placeholder per distinct real tensor, whatever the number of paths to it.
At a graph exit the graph returns only the tensors the rest of the program
needs, and is handed to the backend.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Dict, List

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .sources import Source


class _NoStacks:
    """Stands in for the ``traceback`` module inside torch's fake_tensor
    module while bytegraph makes a FakeTensorMode: its constructor records
    ``traceback.extract_stack()`` for a debug message, which walks the whole
    stack and reads every frame's source line.  For code with no file on
    disk (``exec``'d, generated) each read searches ``sys.path`` again:
    about 5 ms per compiled frame, a fifth of the compile of a function with
    200 breaks.  The mode gets an empty stack instead."""

    def __init__(self, module):
        self._module = module

    def extract_stack(self, f=None, limit=None):
        return self._module.StackSummary()

    def __getattr__(self, name):
        return getattr(self._module, name)


def _new_fake_mode(shape_env) -> FakeTensorMode:
    """``FakeTensorMode(shape_env=shape_env)``, recording no creation stack (see _NoStacks)."""
    import torch._subclasses.fake_tensor as ft
    real = getattr(ft, "traceback", None)
    if real is None:  # (a torch whose module no longer has it)
        return FakeTensorMode(allow_non_fake_inputs=False, shape_env=shape_env)
    ft.traceback = _NoStacks(real)
    try:
        return FakeTensorMode(allow_non_fake_inputs=False, shape_env=shape_env)
    finally:
        ft.traceback = real


class GraphInput:
    """A placeholder and where its real value comes from at run time."""

    __slots__ = ("node", "source", "example", "fake", "version")

    def __init__(self, node: fx.Node, source: Source, example: torch.Tensor, fake):
        self.node = node
        self.source = source
        self.example = example
        self.fake = fake
        #: the fake's version counter when lifted (None: no counter, e.g. an inference tensor)
        self.version = fake._version if isinstance(fake, torch.Tensor) and not fake.is_inference() else None

    def real_example(self):
        """The real value a backend gets as this input's example: the value the
        trace read, or a copy when the graph may write to it (a backend that
        runs its graph on the examples must not change the program's tensors).

        Version counters do not see every write: batch_norm updates its
        running statistics without bumping them.  So every tensor is copied
        but parameters the graph does not visibly write (parameters are
        written, if at all, by ops that do bump the counter)."""
        x = self.example
        if isinstance(x, torch.Tensor) and (self.mutated() or not isinstance(x, torch.nn.Parameter)):
            # (requires_grad kept on non-leaves too: AOTAutograd picks a
            # training or an inference graph from the examples' flags)
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    def mutated(self) -> bool:
        """Whether the graph writes to this input (or through a view of it)."""
        if not isinstance(self.fake, torch.Tensor):
            return False
        return self.version is None or self.fake._version != self.version


class OutputGraph:
    """One fx graph under construction, with its fake tensor mode and inputs."""

    def __init__(self):
        # NOTE: imported here, not at module level: symbolic_shapes imports sympy
        # (0.2 s), which `import bytegraph` need not pay.
        self.graph = fx.Graph()
        self._shape_env = self._fake_mode = None
        #: inputs with symbolic sizes or values: (fake or SymInt, source) for the shape guards
        self.symbolic_inputs: List[tuple] = []
        self.inputs: List[GraphInput] = []
        self._input_by_id: Dict[int, Any] = {}   # id(real tensor) -> TensorValue
        self._keepalive: List[Any] = []
        self.value_of_fake: Dict[int, Any] = {}  # id(fake) -> TensorValue
        #: storages that NumPy operations of the trace made (values.ndarrays):
        #: storage id -> [a fake tensor on it, whether a tensor shares it now]
        self.numpy_storages: Dict[int, list] = {}
        self.op_count = 0
        #: the first aten operator drawing random numbers that a fake run of
        #: this graph's operations dispatched (values/tensors.py), or None
        self.random_op = None
        self._names = set()
        #: the frame whose instruction is adding nodes (see create_node)
        self.where = None

    # The fake-tensor machinery costs milliseconds to set up: made on first
    # use, so pure-Python frames (and resume functions without tensor work)
    # never pay for it.
    @property
    def shape_env(self):
        if self._shape_env is None:
            from torch.fx.experimental.symbolic_shapes import ShapeEnv
            # Ops whose output size depends on data (nonzero, masked_select) break
            # the graph: their unbacked sizes are not bound to graph values, and a
            # backend that retraces (aot_eager, inductor) fails on them.
            # ``item()`` is an unbacked number only when asked for (config.capture_scalar_outputs)
            from . import config
            self._shape_env = ShapeEnv(allow_dynamic_output_shape_ops=False,
                                       allow_scalar_outputs=config.capture_scalar_outputs)
        return self._shape_env

    @property
    def fake_mode(self):
        if self._fake_mode is None:
            self._fake_mode = _new_fake_mode(self.shape_env)
        return self._fake_mode

    # -- inputs -----------------------------------------------------------
    def input_for(self, real: torch.Tensor):
        """The TensorValue already lifted for this real tensor, if any."""
        return self._input_by_id.get(id(real))

    def _placeholder(self, source: Source, example) -> fx.Node:
        """A new placeholder after the existing ones (inputs are found mid-trace)."""
        name = _placeholder_name(source, len(self.inputs))
        if name in self._names:
            name = f"{name}_{len(self.inputs)}"
        self._names.add(name)
        if self.inputs:
            where = self.graph.inserting_after(self.inputs[-1].node)
        elif len(self.graph.nodes):
            where = self.graph.inserting_before(next(iter(self.graph.nodes)))
        else:
            where = contextlib.nullcontext()
        with where:
            node = self.graph.placeholder(name)
        node.meta["example_value"] = node.meta["val"] = example
        node.meta["source"] = source.name()
        return node

    def add_input(self, real: torch.Tensor, source: Source, make_value, dynamic_dims=(), plain: bool = False):
        """Lift ``real`` (read from ``source``) as a graph input; ``dynamic_dims`` get symbolic sizes.

        ``plain``: ``real`` owns its whole storage (no view, no offset), so
        its fake is a new tensor of its metadata, which costs a tenth of a
        full conversion (a repeated block's parameters, see block_graphs)."""
        if plain and not dynamic_dims and _owns_storage(real):
            fake = _plain_fake(self.fake_mode, real)
        elif dynamic_dims:
            from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

            from .dynamic import SymbolSource
            ctx = StatelessSymbolicContext(dynamic_sizes=[
                DimDynamic.DYNAMIC if d in dynamic_dims and real.shape[d] > 1 else DimDynamic.STATIC
                for d in range(real.dim())])
            fake = self.fake_mode.from_tensor(real, symbolic_context=ctx, source=SymbolSource(source.name()))
            self.symbolic_inputs.append((fake, source))
        else:
            fake = self.fake_mode.from_tensor(real, static_shapes=True)
        node = self._placeholder(source, fake)
        value = make_value(node, fake)
        self.inputs.append(GraphInput(node, source, real, fake))
        self._input_by_id[id(real)] = value
        self._keepalive.append(real)
        self.value_of_fake[id(fake)] = value
        return value

    def add_int_input(self, value: int, source: Source, make_value):
        """An int argument made symbolic: a graph input holding a SymInt."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        from .dynamic import SymbolSource
        sym = self.shape_env.create_unspecified_symint_and_symbol(value, SymbolSource(source.name()),
                                                                  DimDynamic.DYNAMIC)
        node = self._placeholder(source, sym)
        out = make_value(node, sym)
        self.inputs.append(GraphInput(node, source, value, sym))
        self.symbolic_inputs.append((sym, source))
        return out

    # -- nodes ------------------------------------------------------------
    def create_node(self, op: str, target, args: tuple, kwargs: dict, fake, where=None) -> fx.Node:
        """A node; ``where`` (or ``self.where``, set around a graph call) is the
        frame whose instruction makes it."""
        node = self.graph.create_node(op, target, args, kwargs)
        node.meta["example_value"] = fake
        node.meta["val"] = fake
        where = where or self.where
        if where is not None:
            # the user's lines, outermost first, as a traceback prints them
            # (torch.compile's node.meta["stack_trace"]: backends and
            # print_readable show it)
            node.meta["stack_trace"] = where.stack_trace()
        self.op_count += 1
        return node

    # -- output -----------------------------------------------------------
    def finish(self, outputs: List[fx.Node]) -> fx.GraphModule:
        """Close the graph with ``outputs`` and return it as a GraphModule."""
        self.graph.output(tuple(outputs))
        self._prune_unused_nodes()
        gm = fx.GraphModule(torch.nn.Module(), self.graph)
        gm.meta["bytegraph_sources"] = [i.source.name() for i in self.inputs]
        return gm

    def _prune_unused_nodes(self) -> None:
        # Pure nodes whose results nothing uses are dropped; in-place and
        # random ops are kept (they are observable).
        for node in reversed(list(self.graph.nodes)):
            if node.op in ("call_function", "call_method") and not node.users and not _is_impure(node):
                self.graph.erase_node(node)

    def example_inputs(self, real: bool = False) -> List[Any]:
        """The backend's ``example_inputs``: fake tensors (bytegraph's own
        backends), or real ones, as torch.compile gives custom backends."""
        if real:
            return [i.real_example() for i in self.inputs]
        return [i.fake for i in self.inputs]


def _plain_fake(fake_mode, real: torch.Tensor) -> torch.Tensor:
    """A fake tensor of ``real``'s metadata, made as torch's converter makes
    one (a meta tensor wrapped, dispatch off): a seventh of the cost of an
    ``empty_strided`` dispatched through the fake mode, which a deep model's
    reused blocks pay once per parameter."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._mode_utils import no_dispatch
    meta = torch.empty_strided(tuple(real.shape), tuple(real.stride()), dtype=real.dtype, device="meta")
    with no_dispatch():
        fake = FakeTensor(fake_mode, meta, real.device)
    if real.requires_grad:
        fake.requires_grad_(True)
    return fake


def _owns_storage(t: torch.Tensor) -> bool:
    """``t`` is a plain strided tensor that is its storage's only view."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and t._base is None \
        and t.storage_offset() == 0 and not t.is_inference() and not t.is_conj() and not t.is_neg() \
        and t.untyped_storage().nbytes() == t.numel() * t.element_size() and t.is_contiguous()


#: graph calls that switch process-wide state (grad mode, autocast): kept even
#: without users, and not mutations of any tensor
GLOBAL_STATE_TARGETS = frozenset({
    torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast,
})


def _is_impure(node: fx.Node) -> bool:
    if node.meta.get("impure"):
        return True
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name.endswith("_") and not name.endswith("__"):
        return True  # in-place method/function (add_, copy_, ...)
    if target is operator.setitem or target in GLOBAL_STATE_TARGETS:
        return True
    if node.kwargs.get("out") is not None:
        return True
    return False


def _placeholder_name(source: Source, index: int) -> str:
    raw = source.name()
    cleaned = "".join(c if c.isalnum() else "_" for c in raw).strip("_") or "input"
    if cleaned[0].isdigit():
        cleaned = "i" + cleaned
    cleaned = "_".join(p for p in cleaned.split("_") if p)
    return cleaned[-48:].lstrip("_0123456789") or "input"

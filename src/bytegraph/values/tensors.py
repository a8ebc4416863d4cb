"""Tensors, tensor methods, and torch functions: everything that becomes graph nodes.

A :class:`TensorValue` pairs an fx node with the fake tensor that carries its
metadata.  Operations on tensors (``torch.*`` functions, tensor methods,
Python operators) go through :func:`graph_call`, which runs the operation on
the fake tensors to learn the result's metadata and records a node.
Metadata reads (``shape``, ``dtype``, ``size()``, ``dim()``) are constants:
shapes are static for now, and inputs' metadata is guarded.
"""

from __future__ import annotations

import contextlib
import keyword
import operator
import re
import types
from typing import Any, Dict, List

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    FakeTensor,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)

from torch._dispatch.python import enable_python_dispatcher

from ..errors import Unsupported
from ..guards import STATE_QUERY_KINDS, Guard, state_guard
from ..sources import AttrSource
from .base import Value
from .constants import ConstantValue, NONE, const
from .containers import DictValue, ListValue, NamedTupleValue, SliceValue, TupleValue
from .numpy_values import is_numpy_scalar
from .symbolic import SYM_TYPES, SymIntValue, is_symbolic, sym_size


class SizeValue(TupleValue):
    """``x.shape`` / ``x.size()`` with symbolic dimensions: a ``torch.Size`` of
    constants and :class:`SymIntValue` values.  Reconstructs as ``torch.Size``."""

    __slots__ = ()

    def python_type(self):
        return torch.Size

    def getitem(self, tx, index):
        out = super().getitem(tx, index)
        return SizeValue(out.items) if isinstance(out, TupleValue) else out

    def call_method(self, tx, name, args, kwargs):
        if name == "numel" and not args:
            from .operators import binary_op
            acc = const(1)
            for item in self.items:
                acc = binary_op(tx, operator.mul, acc, item)
            return acc
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        cg.push_callable(torch.Size)
        for item in self.items:
            cg.reconstruct(item)
        cg.emit("BUILD_TUPLE", arg=len(self.items))
        cg.call(1)


class TensorValue(Value):
    """A ``torch.Tensor`` (or ``nn.Parameter``): an fx node plus its fake tensor.

    Graph inputs carry the source they were lifted from; tensors computed in
    the graph have none and are reconstructed from the graph's outputs.
    """

    __slots__ = ("node", "fake", "cls")

    def __init__(self, node, fake, cls=torch.Tensor, source=None):
        super().__init__(source)
        self.node = node
        self.fake = fake
        self.cls = cls

    def python_type(self):
        return self.cls

    def truth(self, tx):
        raise Unsupported("branching on the value of a tensor (data-dependent control flow)",
                          kind="data_dependent_branch",
                          hint="use torch.where / torch.cond, or move the branch out of the compiled function")

    def has_len(self):
        return True

    def unpack(self, tx):
        if self.fake.dim() == 0:
            tx.raise_python_exception(TypeError("iteration over a 0-d tensor"))
        return graph_call(tx, "call_method", "unbind", [self], {}).unpack(tx)

    def get_attr(self, tx, name):
        fake = self.fake
        if name == "shape" and is_symbolic(fake.shape):
            return SizeValue([sym_size(tx, self, d) for d in range(fake.dim())])
        if name == "nbytes" and is_symbolic(fake.shape):
            from .operators import binary_op
            return binary_op(tx, operator.mul, self.call_method(tx, "numel", [], {}), const(fake.itemsize))
        if name in _METADATA_ATTRS:
            return const(_specialized(getattr(fake, name)))
        if name in ("T", "mT", "H", "mH", "real", "imag"):
            return graph_call(tx, "call_function", getattr, [self, const(name)], {})
        if name == "grad" or name == "data":
            if self.source is not None and name == "grad":
                real = tx.graph_input_example(self)
                return tx.wrap(real.grad, AttrSource(self.source, "grad"))
            raise Unsupported(f"tensor.{name} inside a compiled function", kind="unsupported_tensor_attr",
                              hint=f"read .{name} outside the compiled function")
        if name in _UNSUPPORTED_METHODS:
            return TensorMethodValue(self, name)
        if callable(getattr(torch.Tensor, name, None)):
            return TensorMethodValue(self, name)
        if self.cls is not torch.Tensor and self.cls is not torch.nn.Parameter:
            from ..distributed.subclasses import subclass_attr
            found = subclass_attr(tx, self, name)   # DTensor's placements, to_local(), ...
            if found is not None:
                return found
        if not hasattr(torch.Tensor, name):
            return self._instance_attr(tx, name)
        raise Unsupported(f"tensor attribute {name!r}", kind="unsupported_tensor_attr")

    def _instance_attr(self, tx, name):
        """An attribute set on the tensor object itself (``w.my_flag = ...``):
        read from a pre-existing tensor's ``__dict__``, guarded there."""
        if self.source is not None:
            real = tx.graph_input_example(self)
            instance_dict = AttrSource(self.source, "__dict__")
            present = name in real.__dict__
            tx.guards.add(Guard("DICT_CONTAINS", instance_dict, (name, present)))
            if present:
                return tx.wrap(real.__dict__[name], AttrSource(self.source, name))
        # a tensor made in the trace has no instance attributes (setting one breaks)
        tx.raise_python_exception(AttributeError(f"'{self.python_type().__name__}' object has no attribute '{name}'", name=name))

    def set_attr(self, tx, name, value):
        if name == "requires_grad":
            graph_call(tx, "call_method", "requires_grad_", [self, value], {})
            return
        super().set_attr(tx, name, value)

    def call_method(self, tx, name, args, kwargs):
        return TensorMethodValue(self, name).call(tx, args, kwargs)

    def reconstruct(self, cg):
        cg.reconstruct_tensor(self)

    def __repr__(self):
        return f"TensorValue({self.node.name}, {tuple(self.fake.shape)}, {self.fake.dtype})"


_METADATA_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "is_sparse", "is_quantized", "is_meta",
    "layout", "requires_grad", "is_leaf", "is_mkldnn", "is_nested", "itemsize", "nbytes",
})

# Methods whose result is metadata only: computed on the fake tensor, no node.
_CONSTANT_METHODS = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
    "element_size", "is_floating_point", "is_complex", "get_device", "storage_offset",
    "__len__", "is_signed", "has_names",
})

_UNSUPPORTED_METHODS = {
    "item": "tensor.item() turns a tensor value into a Python number",
    "tolist": "tensor.tolist() turns tensor values into Python numbers",
    "numpy": "tensor.numpy() leaves torch",
    "data_ptr": "tensor.data_ptr() reads a real address",
    "backward": "tensor.backward() inside the compiled function",
    "__bool__": "branching on the value of a tensor",
    "__index__": "using a tensor value as a Python index",
    "__int__": "int(tensor) reads a tensor value",
    "__float__": "float(tensor) reads a tensor value",
}


#: tensor methods that read the tensor's value as Python numbers (see scalar_outputs)
_SCALAR_READS = {"item": "item", "tolist": "tolist", "__float__": "float", "__int__": "int", "__bool__": "bool"}


def _specialized(out):
    """``out`` with every symbolic number replaced by its value at trace time.

    Metadata such as ``x.stride()`` or ``x.storage_offset()`` of a tensor with
    symbolic sizes holds SymInts; as Python constants they must be real
    numbers, and asking for each value records the shape guard that keeps
    it valid (so the entry is only reused where the number is the same).
    """
    if isinstance(out, torch.SymInt):
        return int(out)
    if isinstance(out, torch.SymBool):
        return bool(out)
    if isinstance(out, torch.SymFloat):
        return float(out)
    if isinstance(out, (tuple, list)) and any(isinstance(o, SYM_TYPES) for o in out):
        return type(out)(_specialized(o) for o in out)
    return out


class TensorMethodValue(Value):
    """A bound tensor method (``x.add``), called later."""

    __slots__ = ("tensor", "name")

    def __init__(self, tensor: TensorValue, name: str):
        super().__init__()
        self.tensor = tensor
        self.name = name


    def reads_caller_frame(self) -> bool:
        from .frame_blind import c_function_reads_caller_frame
        return c_function_reads_caller_frame(getattr(torch.Tensor, self.name, None))

    def python_type(self):
        return types.BuiltinMethodType

    def children(self):
        return (self.tensor,)

    def call(self, tx, args, kwargs):
        name = self.name
        if name in _SCALAR_READS and not kwargs and not args:
            from .scalar_outputs import tensor_tolist, tensor_to_python
            if name == "tolist":
                return tensor_tolist(tx, self.tensor)
            return tensor_to_python(tx, self.tensor, _SCALAR_READS[name])
        if name == "numpy":
            from .ndarrays import tensor_numpy
            return tensor_numpy(tx, self.tensor, args, kwargs)
        if name in _UNSUPPORTED_METHODS:
            kind = "data_dependent" if name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__") \
                else "unsupported_tensor_method"
            raise Unsupported(_UNSUPPORTED_METHODS[name], kind=kind,
                              hint="keep this outside the compiled region")
        fake = self.tensor.fake
        if name in ("size", "numel", "nelement", "__len__") and is_symbolic(fake.shape):
            if name == "size" and not args and not kwargs:
                return SizeValue([sym_size(tx, self.tensor, d) for d in range(fake.dim())])
            if name == "size":
                dim = (args[0] if args else kwargs["dim"]).as_constant()
                return sym_size(tx, self.tensor, dim if dim >= 0 else dim + fake.dim())
            if name == "__len__":
                return sym_size(tx, self.tensor, 0)
            return graph_call(tx, "call_function", torch.ops.aten.sym_numel.default, [self.tensor], {})
        if name in _CONSTANT_METHODS:
            try:
                out = getattr(self.tensor.fake, name)(*[a.as_constant() for a in args],
                                                      **{k: v.as_constant() for k, v in kwargs.items()})
            except (IndexError, TypeError, RuntimeError) as e:
                tx.raise_python_exception(e)
            return const(_specialized(out))
        if name == "register_hook" and len(args) == 1 and not kwargs:
            if self.tensor.source is None:
                raise Unsupported("register_hook() on a tensor computed inside the graph",
                                  kind="unsupported_hook",
                                  hint="register hooks on inputs, or outside the compiled function")
            return tx.side_effects.register_tensor_hook(self.tensor, args[0])
        if name == "type" and not args and not kwargs:
            return const(self.tensor.fake.type())
        return graph_call(tx, "call_method", name, [self.tensor] + list(args), kwargs)

    def reconstruct(self, cg):
        cg.reconstruct(self.tensor)
        cg.emit("LOAD_ATTR", self.name)


#: Callable types from torch that are not plain Python functions.
TensorFunctionValueTypes = (torch._ops.OpOverloadPacket, torch._ops.OpOverload)


# Torch functions that must not run inside a graph (global side effects).
_TORCH_SIDE_EFFECTS = {
    torch.manual_seed, torch.seed, torch.set_rng_state, torch.save, torch.load,
    torch.set_default_dtype, torch.set_printoptions, torch.use_deterministic_algorithms,
    torch.set_num_threads, torch.set_default_device, torch.set_grad_enabled,
}


_GLOBAL_STATE_NAME = re.compile(r"^_?(set|clear|reset|increment|decrement|enable|disable|push|pop|add)_|autocast")


def _has_global_side_effect(fn) -> bool:
    """Whether calling ``fn`` changes process-wide state (see below).

    Wrappers are looked through: torch._dynamo, once imported (torch imports
    it lazily, for fake tensors among others), replaces ``torch.manual_seed``
    by a wrapper of it, which the table, made earlier, does not hold; the
    seed was then set at trace time, before the graph drew its numbers."""
    for _ in range(8):
        if fn in _TORCH_SIDE_EFFECTS or _mutates_global_state(fn):
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


def _mutates_global_state(fn) -> bool:
    """torch functions that change process-wide state (autocast, modes, flags).

    They must never run at trace time (the fake execution would really call
    them) nor be captured; each is a graph break and runs natively."""
    if isinstance(fn, types.FunctionType):
        return False
    mod = getattr(fn, "__module__", "") or ""
    name = getattr(fn, "__name__", "") or ""
    return (mod == "torch" or mod.startswith("torch._C")) and bool(_GLOBAL_STATE_NAME.search(name))


class TorchFunctionValue(Value):
    """A function from the ``torch`` namespace (``torch.add``, ``F.relu``,
    ``torch.Tensor.add``, ``torch.ops.aten.mm``).  Calls become graph nodes;
    calls whose result is metadata only (``torch.is_floating_point(x)``)
    become constants.  Reconstructs through its source or as a constant.
    """

    __slots__ = ("fn",)

    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def real_object(self):
        return (self.fn,)

    def python_type(self):
        return type(self.fn)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.fn

    def get_attr(self, tx, name):
        attr = getattr(self.fn, name, None)
        if attr is None:
            return super().get_attr(tx, name)
        from .builder import wrap_derived_constant
        return wrap_derived_constant(tx, attr, name)

    def call(self, tx, args, kwargs):
        fn = self.fn
        if fn in (torch.from_numpy, torch.as_tensor, torch.tensor) and args:
            from .ndarrays import NdarrayValue, tensor_of_ndarray
            if isinstance(args[0], NdarrayValue):
                return tensor_of_ndarray(tx, fn, args, kwargs)
        special = TORCH_SPECIAL.get(fn)
        if special is not None:
            if not args and "input" in kwargs:  # torch.is_floating_point(input=x)
                kwargs = dict(kwargs)
                args = [kwargs.pop("input")]
            return special(tx, args, kwargs)
        kind = STATE_QUERY_KINDS.get(fn)
        if kind is not None:
            tx.guards.add(state_guard(kind))  # the answer is baked into the capture
        if _has_global_side_effect(fn):
            raise Unsupported(f"call to {_fn_name(fn)}() (global side effect)", kind="unsupported_torch_function",
                              hint="call it outside the compiled function")
        return graph_call(tx, "call_function", fn, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.fn)

    def __repr__(self):
        return f"TorchFunctionValue({_fn_name(self.fn)})"


class InGraphFunctionValue(TorchFunctionValue):
    """A function the program allowed into the graph (``bytegraph.allow_in_graph``,
    ``torch.compiler.allow_in_graph``): each call is one graph node that the
    backend runs or retraces, never traced into here.  Reconstructs through
    its source or as a constant."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        return graph_call(tx, "call_function", self.fn, args, kwargs)

    def __repr__(self):
        return f"InGraphFunctionValue({_fn_name(self.fn)})"


def _fn_name(fn) -> str:
    mod = getattr(fn, "__module__", None) or "torch"
    return f"{mod}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _const_call(fn):
    def handler(tx, args, kwargs):
        return const(fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()}))
    return handler


TORCH_SPECIAL: Dict[Any, Any] = {
    torch.is_grad_enabled: lambda tx, a, k: const(torch.is_grad_enabled()),
    torch.is_tensor: lambda tx, a, k: const(isinstance(a[0], TensorValue)),
    torch.get_default_dtype: _const_call(torch.get_default_dtype),
    torch.is_floating_point: lambda tx, a, k: const(a[0].fake.is_floating_point()),
    torch.is_complex: lambda tx, a, k: const(a[0].fake.is_complex()),
    torch.numel: lambda tx, a, k: a[0].call_method(tx, "numel", [], {}),
    torch.promote_types: _const_call(torch.promote_types),
    torch.device: _const_call(torch.device),
    torch.Size: lambda tx, a, k: const(torch.Size([v.as_constant() for v in a[0].unpack(tx)]) if a else torch.Size()),
    torch.finfo: _const_call(torch.finfo),
    torch.iinfo: _const_call(torch.iinfo),
    # Queries of process-wide state: the tracer's real state is the program's
    # (the entry guards it on entry; traced blocks switch it as they go).
    torch.is_autocast_enabled: _const_call(torch.is_autocast_enabled),
    torch.get_autocast_dtype: _const_call(torch.get_autocast_dtype),
    torch.is_autocast_cache_enabled: _const_call(torch.is_autocast_cache_enabled),
    torch.is_inference_mode_enabled: _const_call(torch.is_inference_mode_enabled),
}


# ---------------------------------------------------------------------------
# graph_call: the one place tensor operations become nodes


def _to_node(tx, v: Value):
    if isinstance(v, (TensorValue, SymIntValue)):
        return v.node
    if isinstance(v, ConstantValue):
        return _constant_arg(tx, v.value)
    if isinstance(v, TupleValue):
        return tuple(_to_node(tx, x) for x in v.items)
    if isinstance(v, ListValue):
        return [_to_node(tx, x) for x in v.items]
    if isinstance(v, SliceValue):
        return slice(*[_to_node(tx, p) for p in v.parts])
    if isinstance(v, DictValue):
        return {k.as_constant(): _to_node(tx, x) for k, x in v.entries.values()}
    if v.is_constant():
        return v.as_constant()
    raise Unsupported(f"passing a {v.type_name()} object to a tensor operation", kind="unsupported_graph_arg")


def _unbacked_bindings(graph, out):
    """The unbacked symbols an op just made (``item()`` under
    capture_scalar_outputs), bound to its node: a backend that retraces the
    graph (aot_eager) looks them up there."""
    env = graph._shape_env
    if env is None or not env.pending_fresh_unbacked_symbols:
        return None
    from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings
    try:
        return compute_unbacked_bindings(env, out)
    except Exception as e:  # noqa: BLE001 - a number read inside an op (a custom Function's forward)
        env.pending_fresh_unbacked_symbols.clear()
        raise Unsupported(f"an operation reads a tensor value it does not return ({type(e).__name__})",
                          kind="data_dependent") from None


def _constant_arg(tx, value):
    """A constant as a node argument.  A NumPy scalar (``np.sqrt(d)``) is
    passed as the very object eager passes -- torch promotes it unlike a
    Python number in places (``torch.tensor(np.float64(2))`` is float64) --
    made by a node, since fx can only print Python literals."""
    if type(value).__module__ == "numpy" and is_numpy_scalar(value):
        return tx.graph.create_node("call_function", numpy_scalar, (type(value).__name__, value.tobytes()), {},
                                    value)
    if type(value) is tuple:
        return tuple(_constant_arg(tx, x) for x in value)
    return value


def numpy_scalar(type_name: str, raw: bytes):
    """The NumPy scalar of type ``numpy.<type_name>`` with bytes ``raw`` (a graph node)."""
    import numpy as np
    return np.frombuffer(raw, dtype=getattr(np, type_name))[0]


def _to_fake(v):
    import torch.fx as fx
    if isinstance(v, fx.Node):
        return v.meta["example_value"]
    if isinstance(v, tuple):
        return tuple(_to_fake(x) for x in v)
    if isinstance(v, list):
        return [_to_fake(x) for x in v]
    if isinstance(v, slice):
        return slice(_to_fake(v.start), _to_fake(v.stop), _to_fake(v.step))
    if isinstance(v, dict):
        return {k: _to_fake(x) for k, x in v.items()}
    return v


def graph_call(tx, kind: str, target, args: List[Value], kwargs: Dict[str, Value]) -> Value:
    """Record ``target(*args, **kwargs)`` (a function, or a method name for
    ``call_method``) as a graph node and return the symbolic result.

    Example (inside a handler)::

        out = graph_call(tx, "call_function", torch.add, [a, b], {})
    """
    # the user's stack for the nodes this call makes (node.meta["stack_trace"]);
    # the frame is not kept past the call (it holds the program's objects)
    graph = tx.graph
    graph.where = tx
    try:
        return _record_call(tx, kind, target, args, kwargs)
    finally:
        graph.where = None


def _random_watch(tx):
    """The watch over the aten operators a fake run dispatches, until the
    graph has drawn random numbers: a random one in a repeated block being
    recorded (layer reuse) makes it not reused, and one in the graph makes
    AOTAutograd compile it without CSE (compiler._without_cse)."""
    from ..layer_reuse import RandomOpWatch
    blocks = tx.trace.blocks
    graph = tx.trace.graph
    if blocks is not None and blocks.recording:
        return RandomOpWatch(blocks, graph)
    if graph.random_op is not None:
        return contextlib.nullcontext()
    return RandomOpWatch(graph)


def _record_call(tx, kind: str, target, args: List[Value], kwargs: Dict[str, Value]) -> Value:
    if _target_name(target) in _INPUT_METADATA_MUTATIONS and args and isinstance(args[0], TensorValue) \
            and args[0].source is not None:
        # A backend that functionalizes (aot_eager, inductor) compiles for the
        # inputs' metadata at trace time and would not apply this change to
        # the caller's tensor: the op runs natively between graphs.
        raise Unsupported(f"{_target_name(target)}() changes the shape, strides or requires_grad of an input "
                          "in place", kind="input_metadata_mutation",
                          hint="apply it to a copy, or outside the compiled function")
    node_args = tuple(_to_node(tx, a) for a in args)
    node_kwargs = {k: _to_node(tx, v) for k, v in kwargs.items()}
    if not _has_tensor(args, kwargs) and kind == "call_method":
        raise Unsupported(f"tensor method {target} without a tensor", kind="unsupported_graph_arg")
    fake_args = _to_fake(node_args)
    fake_kwargs = _to_fake(node_kwargs)
    graph = tx.graph
    # Mutation is detected by what the op did, not by its name: every tensor
    # argument's version counter (shared with its views and base) is compared
    # before and after the fake run.  F.relu(y, inplace=True), out=, setitem and
    # writes through views all bump it; such a node must never be pruned.
    versions = _versions(fake_args, fake_kwargs)
    try:
        # the Python dispatcher: decompositions that handle symbolic sizes
        # (meta kernels in C++ often insist on concrete ones)
        with graph.fake_mode, enable_python_dispatcher(), _no_user_saved_tensor_hooks(), _random_watch(tx):
            if kind == "call_method":
                out = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
            else:
                out = target(*fake_args, **fake_kwargs)
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        raise Unsupported(f"{_target_name(target)} has a data-dependent result ({type(e).__name__})",
                          kind="data_dependent", hint="keep this operation outside the compiled function")
    except UnsupportedOperatorException as e:
        raise Unsupported(f"operator {e} has no fake-tensor implementation", kind="unsupported_operator")
    except Unsupported:
        raise
    except Exception as e:  # the user's own error (shape mismatch, bad argument): Python would raise it too
        if _is_fake_tensor_limit(e):
            raise Unsupported(f"{_target_name(target)} cannot be run on fake tensors with symbolic sizes ({e})",
                              kind="fake_tensor_limit", hint="the operation runs natively between graphs")
        tx.raise_python_exception(e)
    bindings = _unbacked_bindings(graph, out)
    # inference tensors keep no version counter: any op on one may have written it
    mutated = any(v is None or t._version != v for t, v in versions)
    _check_no_new_grad_leaf(tx, out, versions)
    if any(_is_keyword(k) for k in node_kwargs):
        # fx writes ``x.random_(from=-10)``, which is not Python: call through
        # a helper that takes the keywords as a dict
        node_args = (node_args[0], target, node_args[1:], node_kwargs) if kind == "call_method" \
            else (target, None, node_args, node_kwargs)
        kind, target, node_kwargs = "call_function", call_with_keywords, {}
    if isinstance(out, SYM_TYPES):
        node = graph.create_node(kind, target, node_args, node_kwargs, out)
        if bindings:
            node.meta["unbacked_bindings"] = bindings
        return SymIntValue(node, out)
    if bindings:
        raise Unsupported(f"{_target_name(target)} made a number unknown while tracing", kind="data_dependent")
    if not _contains_tensor(out):
        if (out is None and _has_tensor(args, kwargs)) or mutated:
            # torch ops that return None mutate their arguments (x.__setitem__,
            # torch._foreach_mul_): the node must stay in the graph.
            node = graph.create_node(kind, target, node_args, node_kwargs, None)
            node.meta["impure"] = True
            return NONE if out is None else _wrap_constant_result(out, target)
        return _wrap_constant_result(out, target)
    node = graph.create_node(kind, target, node_args, node_kwargs, out)
    if mutated:
        node.meta["impure"] = True
    return wrap_graph_result(tx, node, out)


#: in-place ops that change a tensor's metadata rather than (only) its values
_INPUT_METADATA_MUTATIONS = frozenset({
    "squeeze_", "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "resize_", "resize_as_",
    "as_strided_", "set_", "requires_grad_", "detach_", "share_memory_",
})


def call_with_keywords(fn_or_self, method, args, kwargs):
    """``fn(*args, **kwargs)``, or ``self.method(*args, **kwargs)``: a graph
    node whose keyword names are not identifiers fx can print (``from``)."""
    fn = getattr(fn_or_self, method) if method is not None else fn_or_self
    return fn(*args, **kwargs)


def _is_keyword(name: str) -> bool:
    return keyword.iskeyword(name) or not name.isidentifier()


def _keep(t):
    return t


@contextlib.contextmanager
def _no_user_saved_tensor_hooks():
    """The user's saved-tensor hooks must see real tensors only: while an op
    runs on fake tensors, identity hooks sit on top of theirs."""
    if torch._C._autograd._top_saved_tensors_default_hooks(False) is None:
        yield
        return
    torch._C._autograd._push_saved_tensors_default_hooks(_keep, _keep)
    try:
        yield
    finally:
        torch._C._autograd._pop_saved_tensors_default_hooks()


def _check_no_new_grad_leaf(tx, out, versions) -> None:
    """A tensor made in the graph that becomes a leaf requiring grad
    (``torch.ones(2, requires_grad=True)``, ``t.requires_grad_()``) is a
    new autograd root: backends that trace autograd (aot_eager, inductor)
    cannot return one, so the op runs natively."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    made = [o for o in outs if isinstance(o, torch.Tensor)] + [t for t, _ in versions]
    for t in made:
        # (a view, even one made under no_grad, is no new leaf; reading its
        # grad_fn may raise, so _base is asked first)
        if t._base is None and t.requires_grad and t.grad_fn is None:
            value = tx.graph.value_of_fake.get(id(t))
            if value is None or value.source is None:
                raise Unsupported("creating a tensor that requires grad inside the graph", kind="new_grad_leaf",
                                  hint="the tensor is created natively between graphs")


def _is_fake_tensor_limit(e: Exception) -> bool:
    """An error of the fake-tensor machinery rather than of the program: the
    op needs concrete sizes, or guards on data it cannot see."""
    if isinstance(e, NotImplementedError):
        return True
    text = str(e)
    return any(marker in text for marker in _FAKE_LIMIT_MARKERS)


_FAKE_LIMIT_MARKERS = ("SymInt", "SymFloat", "SymBool", "symbolic", "concrete integers", "data-dependent",
                       "unbacked", "FakeTensor", "fake tensor", "meta tensor", "Meta tensor")


def _versions(fake_args, fake_kwargs) -> list:
    """(tensor, version counter) of every fake tensor among an op's arguments."""
    out = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            out.append((v, None if v.is_inference() else v._version))
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
    walk(fake_args)
    walk(fake_kwargs)
    return out


def _has_tensor(args, kwargs) -> bool:
    def walk(v):
        if isinstance(v, (TensorValue, SymIntValue)):
            return True
        if isinstance(v, (TupleValue, ListValue)):
            return any(walk(x) for x in v.items)
        return False
    return any(walk(a) for a in args) or any(walk(v) for v in kwargs.values())


def _target_name(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))


def _contains_tensor(out) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    if isinstance(out, (tuple, list)):
        return any(_contains_tensor(o) for o in out)
    return False


def _wrap_constant_result(out, target) -> Value:
    if isinstance(out, (int, float, bool, str, type(None), torch.dtype, torch.device, torch.Size, torch.layout)):
        return const(out)
    if isinstance(out, tuple) and all(isinstance(o, (int, float, bool)) for o in out):
        return const(out)
    raise Unsupported(f"{_target_name(target)} returned a {type(out).__name__}", kind="unsupported_graph_result")


def wrap_graph_result(tx, node, out) -> Value:
    """Turn a fake result into values, adding ``getitem`` nodes for tuple parts."""
    graph = tx.graph
    if isinstance(out, torch.Tensor):
        existing = graph.value_of_fake.get(id(out))
        if existing is not None:
            return existing  # in-place op or view returning its input object
        # (a subclass torch traces, a DTensor, keeps its class: its own attributes are read from it)
        cls = torch.Tensor if isinstance(out, FakeTensor) else type(out)
        value = TensorValue(node, out, cls)
        graph.value_of_fake[id(out)] = value
        return value
    if isinstance(out, SYM_TYPES):
        return SymIntValue(node, out)
    if isinstance(out, (tuple, list)):
        items = []
        for i, o in enumerate(out):
            if isinstance(o, (torch.Tensor,) + SYM_TYPES) or _contains_tensor(o):
                sub = graph.create_node("call_function", operator.getitem, (node, i), {}, o)
                items.append(wrap_graph_result(tx, sub, o))
            else:
                items.append(_wrap_constant_result(o, "getitem"))
        cls = type(out)
        if cls is list:
            return ListValue(items)
        if cls is tuple:
            return TupleValue(items)
        return NamedTupleValue(items, cls)
    if out is None:
        return NONE
    return _wrap_constant_result(out, node.target)

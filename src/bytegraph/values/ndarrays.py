"""NumPy arrays computed from tensors: ``x.numpy()``, ``np.sin(a)``, ``a + 1``,
``a.sum(axis=0)``, ``a[0]``, ``torch.from_numpy(a)``.

An array is recorded as the tensor holding its elements: ``x.numpy()`` *is*
``x``'s tensor (the array shares its memory), and each NumPy operation is a
graph node that runs it through torch's NumPy-compatible layer
``torch._numpy`` (:func:`numpy_op`).  That layer does not follow NumPy
everywhere (small integer types, integer true division, scalars), so every
operation is first run by NumPy itself on stand-in arrays of the same dtype,
shape and strides (:func:`_oracle`): the result's dtype, shape, kind (array
or NumPy scalar) and whether it is a view of an argument must agree with
``torch._numpy``'s, else the operation breaks.  Values can still differ
where NumPy's arithmetic does, so only listed operations are traced:

* NumPy reports floating-point errors (overflow, 0/0, log(0)) as warnings
  that depend on the data.  Operations that can raise such a flag are traced
  only while ``np.geterr()`` ignores every flag (guarded); the others (moves,
  comparisons, integer add/mul, ...) always.
* integer ``//`` and ``%`` only by a non-zero constant (NumPy gives 0 with a
  warning where torch raises), integer ``**`` only by a constant >= 0.
* a write through an array (``a += 1``, ``a[0] = 5``) bumps the version
  counter of its tensor in the graph, which NumPy's writes never do in eager
  (autograd would then refuse a backward that eager runs).  So writes are
  traced only into memory the trace's NumPy operations made and no tensor
  shares yet; ``torch.from_numpy(a)`` only of such memory (a view of it: a
  version counter no tensor of the program has).  Writes into ``x.numpy()``
  and ``torch.from_numpy(x.numpy())`` break.

An array that leaves the graph is ``t.numpy()`` of the graph's output (so
``x.numpy()`` of an input returned as-is shares ``x``'s memory); a NumPy
scalar is ``t.numpy()[()]``.
"""

from __future__ import annotations

import operator
import sys

import torch

from ..errors import Unsupported, UserException
from .base import Value
from .constants import ConstantValue, const
from .containers import ListValue, SliceValue, TupleValue
from .tensors import TensorValue, graph_call

# ---------------------------------------------------------------------------
# what is traced

#: operations that never raise a floating-point flag, on any data (checked
#: against NumPy on NaN, infinities and extremes): traced in any error state
_FLAG_FREE = frozenset({
    "negative", "positive", "absolute", "abs", "fabs", "isnan", "isinf", "isfinite", "signbit", "logical_not",
    "floor", "ceil", "trunc", "rint", "sign", "maximum", "minimum", "fmax", "fmin", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "neg", "pos", "eq", "ne", "lt", "le", "gt", "ge",
    "max", "min", "amax", "amin", "argmax", "argmin", "clip", "where",
    "copy", "reshape", "transpose", "T", "ravel", "flatten", "squeeze", "expand_dims", "swapaxes",
    "getitem", "setitem", "concatenate", "stack", "zeros_like", "ones_like", "all", "any",
})

#: operations that raise no flag on integers and bools (they wrap around silently)
_FLAG_FREE_INTEGER = frozenset({
    "add", "subtract", "multiply", "sum", "prod", "cumsum", "matmul", "dot", "square",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "and_", "or_", "xor", "invert", "mul", "sub",
    "iadd", "isub", "imul", "iand", "ior", "ixor", "floordiv", "mod", "floor_divide", "remainder", "pow",
    "power", "ifloordiv", "imod", "ipow",
})

#: NumPy functions (``np.<name>``) traced on arrays
_FUNCTIONS = frozenset({
    "add", "subtract", "multiply", "true_divide", "divide", "power", "negative", "positive", "absolute", "abs",
    "sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh",
    "arcsin", "arccos", "arctan", "arctan2", "floor", "ceil", "trunc", "rint", "sign", "square", "maximum",
    "minimum", "fmax", "fmin", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "logical_xor", "isnan", "isinf", "isfinite", "signbit",
    "fabs", "hypot", "exp2",
    "sum", "mean", "max", "min", "amax", "amin", "prod", "argmax", "argmin", "std", "var", "all", "any",
    "cumsum", "reshape", "transpose", "concatenate", "stack", "where", "clip", "matmul", "dot", "squeeze",
    "expand_dims", "swapaxes", "zeros_like", "ones_like", "ravel",
})

#: ndarray methods traced
_METHODS = frozenset({
    "reshape", "transpose", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "astype", "copy", "flatten",
    "ravel", "squeeze", "clip", "cumsum", "std", "var", "all", "any", "dot", "swapaxes",
})

#: ``operator`` functions traced on arrays, by name (in-place ones mutate the left array)
_OPERATORS = frozenset({
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor",
    "lt", "le", "eq", "ne", "gt", "ge", "neg", "pos", "abs", "invert",
    "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor",
    "getitem", "setitem",
})

_IN_PLACE = frozenset({"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor",
                       "setitem"})

#: operations whose NumPy loop on integer arrays first casts them to the
#: floating-point result type (int64 / int64 is float64, np.sin(int8) float16)
#: where torch._numpy computes in torch's default dtype: the arrays are cast
#: to NumPy's result type before
_FLOAT_LOOPS = frozenset({
    "truediv", "true_divide", "divide", "sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos",
    "tan", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan", "arctan2", "hypot", "exp2",
})

_INTEGER_DIVISION = frozenset({"floordiv", "mod", "floor_divide", "remainder", "ifloordiv", "imod"})
_POWER = frozenset({"pow", "power", "ipow"})

#: the NumPy stand-ins of a traced operation may be this big (elements)
_MAX_ORACLE_ELEMENTS = 1 << 22

_TORCH_TO_NUMPY = {
    torch.float16: "float16", torch.float32: "float32", torch.float64: "float64", torch.int8: "int8",
    torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool",
    torch.complex64: "complex64", torch.complex128: "complex128",
}


def numpy_dtype_name(dtype: torch.dtype):
    """NumPy's name of a torch dtype, or None where NumPy has no equal."""
    return _TORCH_TO_NUMPY.get(dtype)


def _np():
    return sys.modules["numpy"]


# ---------------------------------------------------------------------------
# the graph node


def _tnp():
    """``torch._numpy``, with NumPy's default dtypes (float64, int64).

    Its defaults are read from ``torch._dynamo.config`` on first use, which
    bytegraph never imports: they are set to NumPy's here first."""
    import torch._numpy as tnp
    from torch._numpy import _dtypes_impl as impl
    if impl._default_dtypes is None:
        impl._default_dtypes = impl.DefaultDTypes(float_dtype=torch.float64, complex_dtype=torch.complex128,
                                                  int_dtype=torch.int64)
    return tnp


def _defaults_are_numpys() -> bool:
    from torch._numpy import _dtypes_impl as impl
    _tnp()
    d = impl._default_dtypes
    return (d.float_dtype, d.complex_dtype, d.int_dtype) == (torch.float64, torch.complex128, torch.int64)


def _to_tnp(tnp, v):
    if isinstance(v, torch.Tensor):
        return tnp.ndarray(v)
    if isinstance(v, tuple):
        return tuple(_to_tnp(tnp, x) for x in v)
    if isinstance(v, list):
        return [_to_tnp(tnp, x) for x in v]
    return v


def numpy_op(kind: str, name: str, *args, **kwargs):
    """A NumPy operation on tensors (a graph node): ``np.<name>`` (kind
    ``function``), the ndarray method or attribute ``name`` of the first
    argument (``method`` / ``attr``) or ``operator.<name>`` (``operator``),
    run by ``torch._numpy`` on the tensors as arrays; the result's tensor.
    ``setitem`` returns the array it wrote to."""
    tnp = _tnp()
    args = _to_tnp(tnp, args)
    kwargs = {k: _to_tnp(tnp, v) for k, v in kwargs.items()}
    if kind == "function":
        out = getattr(tnp, name)(*args, **kwargs)
    elif kind == "method":
        out = getattr(args[0], name)(*args[1:], **kwargs)
    elif kind == "attr":
        out = getattr(args[0], name)
    elif name == "setitem":
        operator.setitem(*args)
        out = args[0]
    else:
        out = getattr(operator, name)(*args)
    return out.tensor if isinstance(out, tnp.ndarray) else out


# ---------------------------------------------------------------------------
# the value


class NdarrayValue(Value):
    """A ``numpy.ndarray`` (or, with ``scalar``, a NumPy scalar such as
    ``np.float64``) whose elements are the graph tensor ``tensor``: same
    dtype, shape and strides, same memory (``x.numpy()`` is ``x``'s tensor).
    Reconstructs as ``tensor.numpy()`` (``[()]`` for a scalar)."""

    __slots__ = ("tensor", "scalar")

    def __init__(self, tensor: TensorValue, scalar: bool = False):
        super().__init__()
        self.tensor = tensor
        self.scalar = scalar

    def python_type(self):
        np = _np()
        return np.dtype(numpy_dtype_name(self.tensor.fake.dtype)).type if self.scalar else np.ndarray

    def children(self):
        return (self.tensor,)

    def np_dtype(self):
        return _np().dtype(numpy_dtype_name(self.tensor.fake.dtype))

    def truth(self, tx):
        raise Unsupported("branching on the value of a NumPy array", kind="data_dependent_branch")

    def has_len(self):
        return not self.scalar

    def unpack(self, tx):
        raise Unsupported("iterating over a NumPy array", kind="numpy")

    def get_attr(self, tx, name):
        fake = self.tensor.fake
        if name in ("shape", "ndim", "size", "itemsize", "nbytes", "dtype"):
            if name == "dtype":
                return const(self.np_dtype())
            shape = _static_shape(fake)
            return const({"shape": shape, "ndim": len(shape), "size": _numel(shape),
                          "itemsize": fake.itemsize, "nbytes": _numel(shape) * fake.itemsize}[name])
        if name == "T":
            return numpy_call(tx, "attr", "T", [self], {})
        if name in _METHODS or name in ("item", "tolist", "__len__"):
            return NdarrayMethodValue(self, name)
        raise Unsupported(f"ndarray attribute {name!r}", kind="numpy")

    def call_method(self, tx, name, args, kwargs):
        return NdarrayMethodValue(self, name).call(tx, args, kwargs)

    def getitem(self, tx, index):
        return numpy_operator(tx, "getitem", self, index)

    def setitem(self, tx, index, value):
        numpy_operator(tx, "setitem", self, index, value)

    def to_python(self, tx, how: str) -> Value:
        """``float(a)``, ``int(a)``, ``a.item()``: the one element as a Python number."""
        from .scalar_outputs import tensor_to_python
        shape = _static_shape(self.tensor.fake)
        if how in ("float", "int") and shape != () or how == "item" and _numel(shape) != 1 or how == "bool":
            raise Unsupported(f"{how}() of a NumPy array of shape {shape}", kind="numpy")
        return tensor_to_python(tx, self.tensor, how)

    def reconstruct(self, cg):
        cg.push_callable(ndarray_of)
        cg.reconstruct(self.tensor)
        cg.load_object(self.scalar)
        cg.call(2)

    def __repr__(self):
        return f"NdarrayValue({self.tensor!r}{', scalar' if self.scalar else ''})"


def ndarray_of(tensor: torch.Tensor, scalar: bool):
    """The array (or NumPy scalar) whose elements a graph output holds."""
    out = tensor.numpy()
    return out[()] if scalar else out


class NdarrayMethodValue(Value):
    """A bound method of an array (``a.reshape``), called later."""

    __slots__ = ("array", "name")

    def __init__(self, array: NdarrayValue, name: str):
        super().__init__()
        self.array = array
        self.name = name

    def python_type(self):
        import types
        return types.BuiltinMethodType

    def children(self):
        return (self.array,)

    def call(self, tx, args, kwargs):
        name = self.name
        if name in ("item", "tolist") and not args and not kwargs:
            if name == "tolist":
                from .scalar_outputs import tensor_tolist
                return tensor_tolist(tx, self.array.tensor)
            return self.array.to_python(tx, "item")
        if name == "__len__" and not args and not kwargs:
            shape = _static_shape(self.array.tensor.fake)
            if not shape:
                tx.raise_python_exception(TypeError("len() of unsized object"))
            return const(shape[0])
        if name not in _METHODS:
            raise Unsupported(f"ndarray.{name}()", kind="numpy")
        return numpy_call(tx, "method", name, [self.array, *args], kwargs)

    def reconstruct(self, cg):
        cg.reconstruct(self.array)
        cg.emit("LOAD_ATTR", self.name)


def _static_shape(fake) -> tuple:
    shape = tuple(fake.shape)
    if not all(type(s) is int for s in shape):
        raise Unsupported("a NumPy array of symbolic shape", kind="numpy",
                          hint="NumPy arrays are traced with static shapes")
    return shape


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------------------
# tracing an operation


def has_ndarray(values) -> bool:
    for v in values:
        if isinstance(v, NdarrayValue):
            return True
        if isinstance(v, (TupleValue, ListValue)) and has_ndarray(v.items):
            return True
    return False


def tensor_numpy(tx, tensor: TensorValue, args, kwargs) -> Value:
    """``x.numpy()``: the array sharing ``x``'s memory; eager's errors for a
    tensor that requires grad."""
    force = (args[0] if args else kwargs.get("force", const(False)))
    if len(args) + len(kwargs) > 1 or set(kwargs) - {"force"} or not force.is_constant():
        raise Unsupported("tensor.numpy() with arguments", kind="numpy")
    fake = tensor.fake
    if force.as_constant() and fake.requires_grad:
        # numpy(force=True) is detach().numpy(): x's memory still
        tensor = graph_call(tx, "call_method", "detach", [tensor], {})
        fake = tensor.fake
    if fake.requires_grad:
        tx.raise_python_exception(RuntimeError(
            "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."))
    if fake.device.type != "cpu" or fake.layout != torch.strided or numpy_dtype_name(fake.dtype) is None \
            or fake.is_conj() or fake.is_neg() or type(fake).__name__ not in ("FakeTensor",):
        raise Unsupported(f"tensor.numpy() of a {fake.dtype} tensor on {fake.device}", kind="numpy")
    if any(type(s) is not int for s in (*fake.shape, *fake.stride())):
        raise Unsupported("tensor.numpy() of a tensor of symbolic shape", kind="numpy")
    return NdarrayValue(tensor)


def tensor_of_ndarray(tx, fn, args, kwargs) -> Value:
    """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` of a traced array: a
    new tensor object sharing the array's memory; ``torch.tensor(a)``: a copy."""
    array = args[0]
    if fn is torch.tensor:
        dtype = kwargs.get("dtype")
        if len(args) != 1 or set(kwargs) - {"dtype"} or dtype is not None and not dtype.is_constant():
            raise Unsupported("torch.tensor() of an array with arguments other than dtype", kind="numpy")
        out = graph_call(tx, "call_method", "clone", [array.tensor], {})
        if dtype is not None and dtype.as_constant() is not None:
            out = graph_call(tx, "call_method", "to", [out, dtype], {})
        return out
    if not array.scalar and not _owned(tx, array):
        raise Unsupported(f"{fn.__name__}() of an array sharing a tensor's memory", kind="numpy",
                          hint="the new tensor would share the tensor's version counter, which it does not in eager")
    if fn is torch.from_numpy and (len(args) != 1 or kwargs or array.scalar):
        if array.scalar:
            cls = array.python_type()
            tx.raise_python_exception(TypeError(f"expected np.ndarray (got {cls.__module__}.{cls.__name__})"))
        raise Unsupported("torch.from_numpy() with extra arguments", kind="numpy")
    dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
    if fn is torch.as_tensor and (len(args) > 2 or set(kwargs) - {"dtype"} or
                                  dtype is not None and not dtype.is_constant()):
        raise Unsupported("torch.as_tensor() of an array with a device", kind="numpy")
    t = array.tensor
    target = None if dtype is None else dtype.as_constant()
    if array.scalar:
        # a NumPy scalar is no memory one can share
        out = graph_call(tx, "call_method", "clone", [t], {})
    else:
        out = graph_call(tx, "call_method", "view", [t, const(t.fake.dtype)], {})
        tx.graph.numpy_storages[_storage_id(t.fake)][1] = True
    if target is not None and target != t.fake.dtype:
        out = graph_call(tx, "call_method", "to", [out, const(target)], {})
    return out


#: NumPy's array constructors traced on a traced array (np.asarray of a
#: tensor is not: NumPy 2 warns there about torch's ``__array__``)
CONSTRUCTORS = frozenset({"asarray", "array"})


def array_constructor(tx, name: str, args, kwargs) -> Value:
    """``np.asarray(a)`` (``a`` itself) or ``np.array(a)`` (a copy) of a traced array."""
    if len(args) != 1 or kwargs or not isinstance(args[0], NdarrayValue) or args[0].scalar:
        raise Unsupported(f"np.{name}() with arguments other than one array", kind="numpy")
    array = args[0]
    if name == "asarray":
        return array
    return _made(tx, NdarrayValue(graph_call(tx, "call_method", "clone", [array.tensor], {})))


def _storage_id(fake) -> int:
    return fake.untyped_storage()._cdata


def _made(tx, array: NdarrayValue) -> NdarrayValue:
    """``array``'s memory is new, made by the trace's NumPy operations."""
    fake = array.tensor.fake
    tx.graph.numpy_storages.setdefault(_storage_id(fake), [fake, False])
    return array


def _owned(tx, array: NdarrayValue) -> bool:
    """The trace's NumPy operations made ``array``'s memory."""
    return _storage_id(array.tensor.fake) in tx.graph.numpy_storages


def _check_write(tx, name, target: NdarrayValue) -> None:
    entry = tx.graph.numpy_storages.get(_storage_id(target.tensor.fake))
    if entry is None or entry[1]:
        raise Unsupported(f"in-place {name} on a NumPy array sharing a tensor's memory", kind="numpy_write",
                          hint="NumPy's writes do not bump the tensor's version counter; the graph's would")


def numpy_operator(tx, name: str, *operands: Value) -> Value:
    """``operator.<name>(*operands)`` where an operand is an array."""
    if name not in _OPERATORS:
        raise Unsupported(f"operator {name} on a NumPy array", kind="numpy")
    if name in ("getitem", "setitem"):
        index = operands[1]
        if has_ndarray([index]) or not _constant_index(index):
            raise Unsupported("indexing a NumPy array with an array or a non-constant", kind="numpy")
    if name in _IN_PLACE and name != "setitem" and not (isinstance(operands[0], NdarrayValue)
                                                         and not operands[0].scalar):
        name = name[1:]  # ``n += a`` on a number or NumPy scalar (immutable): n = n + a
    return numpy_call(tx, "operator", name, list(operands), {})


def _constant_index(v: Value) -> bool:
    if isinstance(v, TupleValue):
        return all(_constant_index(x) for x in v.items)
    if isinstance(v, SliceValue):
        return all(p.is_constant() for p in v.parts)
    return v.is_constant() and (v.as_constant() is None or v.as_constant() is Ellipsis or
                                type(v.as_constant()) in (int, slice, tuple))


def numpy_call(tx, kind: str, name: str, args: list, kwargs: dict) -> Value:
    """Trace one NumPy operation on arrays (see the module docstring)."""
    if not _defaults_are_numpys():
        raise Unsupported("torch._numpy's default dtypes are not NumPy's", kind="numpy")
    if "out" in kwargs or "where" in kwargs:
        raise Unsupported(f"{name}() with out=/where=", kind="numpy", hint="in-place forms are traced; out= is not")
    arrays = _arrays(args) + _arrays(list(kwargs.values()))
    if any(isinstance(v, TensorValue) for v in _leaves(args + list(kwargs.values()))):
        raise Unsupported(f"{name}() of a NumPy array and a tensor", kind="numpy")
    # (the arguments are vetted first: NumPy at trace time must meet no user object)
    node_args, node_kwargs = [_node_arg(tx, a) for a in args], {k: _node_arg(tx, v) for k, v in kwargs.items()}
    _check_values(tx, kind, name, args, kwargs, arrays)
    expected, views = _oracle(tx, kind, name, args, kwargs)
    if name in _FLOAT_LOOPS and isinstance(expected, (_np().ndarray, _np().generic)) \
            and expected.dtype.kind == "f" and not kwargs:
        target = getattr(torch, str(expected.dtype))
        node_args = [graph_call(tx, "call_method", "to", [a, const(target)], {})
                     if isinstance(a, TensorValue) and not a.fake.is_floating_point() else a for a in node_args]
    try:
        out = graph_call(tx, "call_function", numpy_op, [const(kind), const(name), *node_args], node_kwargs)
    except UserException:
        # NumPy accepted the operation (the stand-ins ran): an error here is torch._numpy's
        raise Unsupported(f"{name}() of NumPy arrays fails in torch._numpy", kind="numpy") from None
    in_place = name in _IN_PLACE
    if in_place:
        target = args[0]
        if out is not target.tensor:
            raise Unsupported(f"in-place {name} on an array made a new one", kind="numpy")
        return target
    if not isinstance(out, TensorValue):
        raise Unsupported(f"{name}() of a NumPy array returns a {out.type_name()}", kind="numpy")
    _compare(name, expected, out.fake)
    scalar = isinstance(expected, _np().generic)
    shared = [a for a in arrays if _same_storage(out.fake, a.tensor.fake)]
    if scalar or len(views) != len(shared) or any(a not in views for a in shared):
        if views and not scalar:
            raise Unsupported(f"{name}() makes a view in NumPy but a copy in torch._numpy", kind="numpy")
        if shared or any(out is a.tensor for a in arrays):
            # NumPy made a copy (a scalar is one): the array must not see later writes to its source
            out = graph_call(tx, "call_method", "clone", [out], {})
        shared = []
    result = NdarrayValue(out, scalar)
    return result if shared else _made(tx, result)


def _leaves(values):
    for v in values:
        if isinstance(v, (TupleValue, ListValue)):
            yield from _leaves(v.items)
        else:
            yield v


def _arrays(values) -> list:
    return [v for v in _leaves(values) if isinstance(v, NdarrayValue)]


def _same_storage(a, b) -> bool:
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


def _node_arg(tx, v: Value) -> Value:
    """An argument as the graph node takes it: an array as its tensor, a
    dtype as its name, a NumPy scalar constant as a 0-d tensor."""
    if isinstance(v, NdarrayValue):
        return v.tensor
    if isinstance(v, TupleValue):
        return TupleValue([_node_arg(tx, x) for x in v.items])
    if isinstance(v, ListValue):
        return ListValue([_node_arg(tx, x) for x in v.items])
    if isinstance(v, SliceValue):
        return v
    if v.is_constant():
        c = v.as_constant()
        np = _np()
        # (type() checks: isinstance could read a user object's __class__)
        if issubclass(type(c), np.generic):
            name = str(c.dtype)
            if name not in _TORCH_TO_NUMPY.values():
                raise Unsupported(f"a NumPy {name} scalar in an array operation", kind="numpy")
            return graph_call(tx, "call_function", torch.tensor, [const(c.item())],
                              {"dtype": const(getattr(torch, name))})
        if issubclass(type(c), np.dtype) or type(c) is type and issubclass(c, np.generic):
            return const(str(np.dtype(c)))
        if type(c) in (int, float, bool, str, type(None), complex, slice) or c is Ellipsis:
            return v
        if isinstance(c, tuple) and all(type(x) in (int, float, bool, type(None), slice) or x is Ellipsis
                                        for x in c):
            return v
    raise Unsupported(f"a {v.type_name()} in a NumPy operation", kind="numpy")


def _check_values(tx, kind, name, args, kwargs, arrays) -> None:
    """Break where torch._numpy's values could differ from NumPy's."""
    np = _np()
    dtypes = [a.tensor.fake.dtype for a in arrays]
    for a in arrays:
        if a.tensor.fake.numel() == 0 and name not in ("getitem", "reshape", "T", "transpose", "copy"):
            raise Unsupported(f"{name}() of an empty NumPy array", kind="numpy")
    integer = all(not (d.is_floating_point or d.is_complex) for d in dtypes) and not any(
        isinstance(v, ConstantValue) and isinstance(v.value, (float, complex, np.floating, np.complexfloating))
        for v in _leaves(args + list(kwargs.values())))
    if name in _IN_PLACE:
        _check_write(tx, name, args[0])
        target = args[0].tensor.fake
        if any(a is not args[0] and _same_storage(a.tensor.fake, target) for a in arrays):
            raise Unsupported(f"in-place {name} of a NumPy array with an operand sharing its memory", kind="numpy")
        if not (target.is_floating_point() or target.is_complex()) and not integer:
            raise Unsupported(f"in-place {name} writes floating-point values into an integer array", kind="numpy")
    if name == "sign" and not integer:
        raise Unsupported("np.sign of floating-point arrays (torch gives 0 for NaN, NumPy NaN)", kind="numpy")
    if name in _INTEGER_DIVISION or name in _POWER:
        other = args[1] if len(args) > 1 else None
        if not integer and name in _INTEGER_DIVISION:
            raise Unsupported(f"floating-point {name} on NumPy arrays (rounding differs from torch)", kind="numpy")
        if integer:
            if other is None or not other.is_constant() or isinstance(args[0], NdarrayValue) is False:
                raise Unsupported(f"integer {name} of NumPy arrays by an array", kind="numpy")
            c = other.as_constant()
            # (n // 0 is 0 in NumPy, an error in torch; INT_MIN // -1 overflows, with a warning)
            if name in _INTEGER_DIVISION and c in (0, -1) or name in _POWER and c < 0:
                raise Unsupported(f"integer {name} by {c}", kind="numpy")
            return
    if name == "astype":
        src = arrays[0].tensor.fake.dtype
        spec = args[1] if len(args) > 1 else kwargs.get("dtype")
        try:
            target = np.dtype(spec.as_constant())
        except (AttributeError, TypeError, ValueError):
            return  # NumPy's own error, which the stand-ins raise
        if (src.is_floating_point or src.is_complex) and target.kind in "iub":
            raise Unsupported("astype() from floating point to integer", kind="numpy")
        if target.kind == "f" and (not src.is_floating_point and target.itemsize < 4 or
                                   src.is_floating_point and target.itemsize < src.itemsize):
            _require_no_fp_reports(tx, name)
        return
    if name in _FLAG_FREE or integer and name in _FLAG_FREE_INTEGER:
        return
    _require_no_fp_reports(tx, name)


def _require_no_fp_reports(tx, name) -> None:
    """The operation may raise a floating-point flag on some data, which NumPy
    reports (a warning by default): traced only while NumPy ignores them."""
    from ..guards import _numpy_errstate, state_guard
    state = _numpy_errstate()
    if state is None or any(v != "ignore" for _, v in state):
        raise Unsupported(f"np {name}() may report a floating-point error (overflow, invalid, division by zero) "
                          "as NumPy's error state asks", kind="numpy_fp_errors",
                          hint="it runs natively; under np.errstate(all='ignore') it is traced")
    tx.guards.add(state_guard("NUMPY_ERRSTATE"))


def _stand_in(v: Value, mutated: bool):
    """What NumPy gets in place of an operand: an array of the same dtype,
    shape and strides (zeros), a NumPy scalar, or the constant itself."""
    np = _np()
    if isinstance(v, NdarrayValue):
        fake = v.tensor.fake
        dtype = np.dtype(numpy_dtype_name(fake.dtype))
        shape = _static_shape(fake)
        strides = tuple(fake.stride())
        offset = int(fake.storage_offset())
        extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if _numel(shape) else 1
        if extent > _MAX_ORACLE_ELEMENTS:
            raise Unsupported("a NumPy operation on a large array", kind="numpy")
        buf = np.ones(extent, dtype)
        arr = np.lib.stride_tricks.as_strided(buf[offset:], shape, tuple(s * dtype.itemsize for s in strides))
        return arr[()] if v.scalar else arr
    if isinstance(v, TupleValue):
        return tuple(_stand_in(x, mutated) for x in v.items)
    if isinstance(v, ListValue):
        return [_stand_in(x, mutated) for x in v.items]
    if isinstance(v, SliceValue):
        return slice(*[p.as_constant() for p in v.parts])
    return v.as_constant()


def _oracle(tx, kind, name, args, kwargs):
    """NumPy's result of the operation on stand-ins, and the array operands it
    is a view of.  NumPy's own errors (of shapes, dtypes, indices: never of
    the stand-ins' values) are the program's."""
    import warnings
    np = _np()
    pos = [_stand_in(a, False) for a in args]
    kw = {k: _stand_in(v, False) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with np.errstate(all="ignore"):
                if kind == "function":
                    out = getattr(np, name)(*pos, **kw)
                elif kind == "method":
                    out = getattr(pos[0], name)(*pos[1:], **kw)
                elif kind == "attr":
                    out = getattr(pos[0], name)
                elif name == "setitem":
                    operator.setitem(*pos)
                    out = pos[0]
                else:
                    out = getattr(operator, name)(*pos)
    except (TypeError, ValueError, IndexError, OverflowError) as e:
        if isinstance(e, Warning):
            raise Unsupported(f"{name}() of NumPy arrays warns: {e}", kind="numpy") from None
        tx.raise_python_exception(e)
    except Exception as e:  # noqa: BLE001 - a warning, an error of another kind: not sure it is the program's
        raise Unsupported(f"{name}() of NumPy arrays raised {type(e).__name__}", kind="numpy") from None
    if name in _IN_PLACE:
        if out is not pos[0]:
            raise Unsupported(f"in-place {name} made a new array", kind="numpy")
        return out, []
    if any(out is p for p in pos):
        raise Unsupported(f"{name}() returns its argument itself", kind="numpy")
    views = [a for a, p in zip(args, pos) if isinstance(a, NdarrayValue) and isinstance(out, np.ndarray)
             and isinstance(p, np.ndarray) and np.may_share_memory(out, p)]
    return out, views


def _compare(name, expected, fake) -> None:
    np = _np()
    if not isinstance(expected, (np.ndarray, np.generic)):
        raise Unsupported(f"{name}() of NumPy arrays returns a {type(expected).__name__}", kind="numpy")
    if str(expected.dtype) != numpy_dtype_name(fake.dtype) or tuple(expected.shape) != tuple(fake.shape):
        raise Unsupported(f"{name}(): torch._numpy gives {fake.dtype}{list(fake.shape)}, NumPy "
                          f"{expected.dtype}{list(expected.shape)}", kind="numpy",
                          hint="where torch._numpy differs from NumPy the operation runs natively")

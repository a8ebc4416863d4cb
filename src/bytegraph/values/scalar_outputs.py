"""Tensor values read as Python numbers (``t.item()``, ``float(t)``, ...)
under ``config.capture_scalar_outputs``.

The number is computed by the graph (an ``item`` node) and stands in the
trace for an *unbacked* symbol of the shape environment: its value is
unknown while tracing, so arithmetic on it and tensor operations that take
it are recorded, and anything that needs its value (a branch, a Python
constant) breaks cleanly there -- the shape environment refuses to guess
(``symbolic._ask``).  Without the switch each read is a ``data_dependent``
break.
"""

from __future__ import annotations

import operator

import torch

from .. import config
from ..errors import Unsupported
from .base import Value
from .constants import const
from .containers import ListValue

#: the eager errors of reading a tensor that has not exactly one element
_NOT_ONE_ELEMENT = {
    "item": lambda n: RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar"),
    "float": lambda n: ValueError("only one element tensors can be converted to Python scalars"),
    "int": lambda n: ValueError("only one element tensors can be converted to Python scalars"),
    "bool": lambda n: RuntimeError(f"Boolean value of Tensor with {'no values' if n == 0 else 'more than one value'}"
                                   " is ambiguous"),
}

#: tolist() of more elements than this is a break (a graph node per element)
_MAX_TOLIST = 1024


def _refuse(what: str) -> Unsupported:
    return Unsupported(f"{what} turns a tensor value into a Python number", kind="data_dependent",
                       hint="set bytegraph.config.capture_scalar_outputs = True to keep it in the graph, "
                            "or keep the value as a tensor")


def _numel(tx, tensor) -> int:
    n = tensor.fake.numel()
    if not isinstance(n, int):
        raise Unsupported("reading the value of a tensor whose element count is symbolic", kind="data_dependent")
    return n


def tensor_to_python(tx, tensor: Value, how: str) -> Value:
    """``t.item()`` (``how="item"``) or ``float(t)``/``int(t)``/``bool(t)``."""
    from .tensors import graph_call
    if not config.capture_scalar_outputs:
        raise _refuse(f"{how}() of a tensor" if how != "item" else "tensor.item()")
    fake = tensor.fake
    if fake.is_complex() or fake.is_quantized or fake.layout != torch.strided:
        raise Unsupported(f"{how}() of a {fake.dtype} tensor", kind="data_dependent")
    n = _numel(tx, tensor)
    if n != 1:
        tx.raise_python_exception(_NOT_ONE_ELEMENT[how](n))
    if how == "int" and fake.is_floating_point():
        # truncation of an unknown float (NaN, inf raise in eager) is not modelled
        raise Unsupported("int() of a floating-point tensor", kind="data_dependent")
    if how == "bool" and fake.dtype == torch.bool or how in ("item", "int") and fake.dtype != torch.bool \
            or how == "float" and fake.is_floating_point():
        return graph_call(tx, "call_method", "item", [tensor], {})
    if fake.dtype == torch.bool:
        raise Unsupported(f"{how}() of a bool tensor", kind="data_dependent")
    item = graph_call(tx, "call_method", "item", [tensor], {})
    if how == "float":
        return graph_call(tx, "call_function", torch.sym_float, [item], {})
    # bool(t) of a number: its truth, != 0 (NaN is true, as in Python)
    return graph_call(tx, "call_function", operator.ne, [item, const(0)], {})


def tensor_tolist(tx, tensor: Value) -> Value:
    """``t.tolist()``: nested lists of ``item()`` of each element."""
    from .operators import getitem
    if not config.capture_scalar_outputs:
        raise _refuse("tensor.tolist()")
    if _numel(tx, tensor) > _MAX_TOLIST:
        raise Unsupported(f"tolist() of more than {_MAX_TOLIST} elements", kind="data_dependent")
    fake = tensor.fake
    if fake.dim() == 0:
        return tensor_to_python(tx, tensor, "item")
    size = fake.shape[0]
    return ListValue([tensor_tolist(tx, getitem(tx, tensor, const(i))) for i in range(size)])

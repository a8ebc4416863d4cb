"""Tensor subclasses that torch can trace (``__tensor_flatten__`` /
``__tensor_unflatten__`` and ``__torch_dispatch__``: DTensor, FSDP2's
sharded parameters, AsyncCollectiveTensor) as graph inputs.

Such a tensor is lifted like any tensor: its placeholder's example is the
fake subclass instance torch's ``FakeTensorMode.from_tensor`` makes (fake
inner tensors, the same flattening context), so every operation on it runs
the subclass's own ``__torch_dispatch__`` on fakes while tracing -- DTensor's
sharding propagation, and the collectives a redistribution needs, which
appear as functional collectives in the backend's trace.  AOTAutograd
(``aot_eager``, ``inductor``) flattens subclass inputs and outputs into
their inner tensors; the ``eager`` backend runs the graph on the real
subclass instances.

Guards (all of them, since the trace specialized to each):

* the outer tensor's metadata (``TENSOR_MATCH``: exact type, dtype, device,
  global shape and strides, ``requires_grad``);
* :data:`GUARD_SUBCLASS_META`: the flattening context (for a DTensor its
  spec: mesh, placements, global shape and strides);
* each inner tensor's metadata (``x._local_tensor`` for a DTensor), and
  the identity of an inner object that is no tensor (its device mesh).

Sizes of a subclass input stay static (no automatic dynamic shapes for them).

Example::

    >>> import torch
    >>> traceable(torch.ones(1)), traceable(torch.nn.Parameter(torch.ones(1)))
    (False, False)
"""

from __future__ import annotations

import sys

import torch

from ..guards import Guard

#: the guard kind over a subclass's flattening context
GUARD_SUBCLASS_META = "SUBCLASS_META"


def traceable(t) -> bool:
    """Whether ``t`` is a tensor subclass the trace lifts (it flattens into inner tensors)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    return type(t) not in (torch.Tensor, torch.nn.Parameter) and is_traceable_wrapper_subclass(t)


def flatten_context(t) -> tuple:
    """``(type, flattening context)`` of subclass ``t``: what its guard compares.

    Example::

        >>> from torch.distributed._functional_collectives import AsyncCollectiveTensor
        >>> flatten_context(AsyncCollectiveTensor(torch.ones(1)))[1] is None
        True
    """
    return (type(t), t.__tensor_flatten__()[1])


def wrap_subclass_input(tx, t, source):
    """Lift subclass tensor ``t`` (read from ``source``) as a graph input, with
    its guards (the trace calls it for every such input; see the module docstring)."""
    from ..sources import AttrSource
    from ..values.tensors import TensorValue
    names, _ = t.__tensor_flatten__()
    tx.guards.add(Guard.tensor(source, t))
    tx.guards.add(Guard(GUARD_SUBCLASS_META, source, flatten_context(t)))
    for name in names:
        inner = getattr(t, name)
        if isinstance(inner, torch.Tensor):
            tx.guards.add(Guard.tensor(AttrSource(source, name), inner))
        else:   # an opaque inner object (DTensor's device mesh on torch 2.13)
            tx.guards.add(Guard("ID_MATCH", AttrSource(source, name), inner))
    return tx.graph.add_input(t, source, lambda node, fake: TensorValue(node, fake, type(t), source))


def subclass_attr(tx, value, name):
    """``value.name`` for a tensor of a traceable subclass where the subclass
    defines ``name`` itself (not ``torch.Tensor``): a property's value read
    from the fake (DTensor's ``placements``, ``device_mesh``), or a method
    whose calls become graph nodes (``to_local()``, ``full_tensor()``).
    None when the subclass does not define it."""
    cls = value.cls
    if name.startswith("__") or getattr(torch.Tensor, name, None) is not None:
        return None
    for klass in cls.__mro__:
        if klass is torch.Tensor or klass is torch._C.TensorBase:
            return None
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            break
    else:
        return None
    if isinstance(attr, property):
        from ..values.builder import wrap_derived_constant
        # (placements are immutable and fixed by the guarded inputs: constants)
        return wrap_derived_constant(tx, getattr(value.fake, name), name)
    if callable(attr) and not isinstance(attr, (staticmethod, classmethod)):
        return _subclass_method(value, name)
    return None


def _subclass_method(value, name):
    from ..values.tensors import TensorMethodValue

    class SubclassMethodValue(TensorMethodValue):
        """A method the subclass defines (DTensor's ``to_local``, ``redistribute``):
        a graph node; arguments that are objects the trace knows (a device
        mesh, placements) are bound into the node's function, guarded."""

        __slots__ = ()

        def call(self, tx, args, kwargs):
            if all(_is_plain(a) for a in list(args) + list(kwargs.values())):
                return super().call(tx, args, kwargs)
            from ..values.tensors import graph_call
            static_args = tuple(_static(tx, a) for a in args)
            static_kwargs = {k: _static(tx, v) for k, v in kwargs.items()}
            return graph_call(tx, "call_function", method_with(self.name, static_args, static_kwargs),
                              [self.tensor], {})
    return SubclassMethodValue(value, name)


def _is_plain(v) -> bool:
    """A graph argument fx can write: a tensor, a number, a literal."""
    from ..values.constants import ConstantValue
    from ..values.tensors import TensorValue
    from ..values.symbolic import SymIntValue
    if isinstance(v, (TensorValue, SymIntValue)):
        return True
    return isinstance(v, ConstantValue) and not is_placement(v.value)


def _static(tx, v):
    """The Python object a non-tensor argument stands for, guarded where it came from."""
    from ..errors import Unsupported
    from ..values.containers import ListValue, TupleValue
    if isinstance(v, (TupleValue, ListValue)):
        items = [_static(tx, x) for x in v.items]
        return tuple(items) if isinstance(v, TupleValue) else items
    if v.is_constant():
        return v.as_constant()
    real = v.real_object()
    if real is None or v.source is None:
        raise Unsupported(f"a {v.type_name()} made in the trace passed to a tensor subclass's method",
                          kind="unsupported_graph_arg")
    tx.guards.add(Guard("ID_MATCH", v.source, real[0]))   # (a device mesh: another one is another layout)
    return real[0]


def method_with(name: str, args: tuple, kwargs: dict):
    """A function calling ``t.name(*args, **kwargs)``: a graph node's target
    holding the objects fx cannot write as code.

    Example::

        >>> method_with("reshape", (2, 1), {})(torch.ones(2)).shape
        torch.Size([2, 1])
    """
    def call(t):
        return getattr(t, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = f"{name}_with_constants"
    return call


def _placement_types() -> tuple:
    types_ = sys.modules.get("torch.distributed.tensor.placement_types")
    return () if types_ is None else tuple(getattr(types_, n) for n in ("Shard", "Replicate", "Partial")
                                             if hasattr(types_, n))


def is_placement(obj) -> bool:
    """Whether ``obj`` is a DTensor placement (``Shard(0)``, ``Replicate()``,
    ``Partial()``): an immutable value the trace treats as a constant.

    Example::

        >>> is_placement(0)
        False
    """
    placements = _placement_types()
    # (by type: ``isinstance`` would read ``obj.__class__``, running a class's
    # own attribute hooks at trace time)
    return bool(placements) and issubclass(type(obj), placements)


def constructor_for(obj):
    """The trace's handler for constructing a placement class with constant
    arguments (a constant), or None."""
    # (by identity: ``in`` would compare with ``==``, running a metaclass's
    # ``__eq__`` at trace time)
    if not isinstance(obj, type) or not any(obj is p for p in _placement_types()):
        return None

    def construct(tx, args, kwargs):
        from ..values.builder import python_constant
        from ..values.constants import const
        return const(obj(*[python_constant(a, tx) for a in args],
                         **{k: python_constant(v, tx) for k, v in kwargs.items()}))
    return construct

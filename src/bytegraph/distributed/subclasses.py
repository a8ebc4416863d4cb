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
        return wrap_derived_constant(tx, getattr(value.fake, name), name)
    if callable(attr) and not isinstance(attr, (staticmethod, classmethod)):
        from ..values.tensors import TensorMethodValue
        return TensorMethodValue(value, name)
    return None

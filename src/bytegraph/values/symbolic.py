"""Python numbers that depend on symbolic sizes (dynamic shapes)."""

from __future__ import annotations

import torch

from .base import Value

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


class SymIntValue(Value):
    """An int (or float/bool) computed from symbolic sizes: ``x.shape[0]`` of a
    dynamic dimension, arithmetic on it, or an int argument made symbolic.

    Holds an fx node and the ``SymInt`` the fake mode produced.  Using it in
    tensor code keeps it symbolic; asking for its value in Python (``if n >
    4``, ``range(n)``) asks the shape environment, which records the guard
    that makes the answer valid.  Reconstructs from a graph output or its
    source.
    """

    __slots__ = ("node", "sym")

    def __init__(self, node, sym, source=None):
        super().__init__(source)
        self.node = node
        self.sym = sym

    @property
    def fake(self):
        return self.sym

    def python_type(self):
        if isinstance(self.sym, torch.SymBool):
            return bool
        if isinstance(self.sym, torch.SymFloat):
            return float
        return int

    def is_constant(self):
        return False

    def as_constant(self):
        t = self.python_type()
        return _ask(lambda: t(self.sym))  # specializes: the shape environment guards the value

    def truth(self, tx):
        return _ask(lambda: bool(self.sym))

    def reconstruct(self, cg):
        cg.reconstruct_tensor(self)

    def __repr__(self):
        return f"SymIntValue({self.sym})"


def _ask(question):
    """Ask the shape environment; when it cannot answer (sympy rejects an
    expression its range analysis made infinite) the frame breaks there."""
    from ..errors import Unsupported
    try:
        return question()
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - torch/sympy failures, not the program's
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
        if isinstance(e, GuardOnDataDependentSymNode):
            # a number read from a tensor (capture_scalar_outputs): unknown until the graph runs
            raise Unsupported("using the value of a number read from a tensor (branching on it, or needing "
                              "it as a Python constant)", kind="data_dependent_branch",
                              hint="use torch.where / torch.cond, or keep the decision outside") from None
        raise Unsupported(f"the shape environment could not decide a symbolic number: {type(e).__name__}: {e}",
                          kind="dynamic_shape") from e


def sym_size(tx, tensor_value, dim: int) -> Value:
    """``x.size(dim)`` as a graph value (constant when that dimension is static)."""
    from .constants import const
    size = tensor_value.fake.shape[dim]
    if not isinstance(size, torch.SymInt):
        return const(size)
    node = tx.graph.create_node("call_function", torch.ops.aten.sym_size.int, (tensor_value.node, dim), {}, size,
                                where=tx)
    return SymIntValue(node, size)


def is_symbolic(obj) -> bool:
    if isinstance(obj, SYM_TYPES):
        return True
    if isinstance(obj, (tuple, list, torch.Size)):
        return any(isinstance(o, SYM_TYPES) for o in obj)
    return False

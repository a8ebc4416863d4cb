"""Dynamic shapes: which dimensions and ints are symbolic, and their guards.

Policy (``automatic dynamic``): a frame is first traced with static shapes.
When a later call misses only because a tensor dimension (or an int
argument) changed, the frame is traced again with that dimension symbolic --
a ``SymInt`` from torch's ``ShapeEnv`` under the fake tensor mode -- so every
further size reuses the entry.  ``dynamic=True`` makes every dimension
symbolic from the start, ``dynamic=False`` never does; ``mark_dynamic`` and
``mark_static`` override per tensor dimension.

The shape environment's guards (``s0 > 1``, ``s0 == s1``, 0/1
specialization) are produced after the trace in terms of each input's guard
expression and compiled into the entry's guard function with the rest.
"""

from __future__ import annotations

from typing import Dict, Optional, Set

import torch
from torch._guards import GuardSource, Source as _TorchSource

_DYNAMIC_ATTR = "_bytegraph_dynamic_dims"
_STATIC_ATTR = "_bytegraph_static_dims"


def mark_dynamic(t: torch.Tensor, dim) -> None:
    """Make ``t``'s dimension(s) ``dim`` symbolic whenever bytegraph lifts ``t`` into a graph.

    Example::

        >>> import bytegraph, torch
        >>> x = torch.ones(4, 3)
        >>> bytegraph.mark_dynamic(x, 0)
    """
    _add_marks(t, _DYNAMIC_ATTR, dim)


def mark_static(t: torch.Tensor, dim) -> None:
    """Keep ``t``'s dimension(s) ``dim`` static even after they change between calls.

    Example::

        >>> import bytegraph, torch
        >>> x = torch.ones(4, 3)
        >>> bytegraph.mark_static(x, 1)
    """
    _add_marks(t, _STATIC_ATTR, dim)


def _add_marks(t: torch.Tensor, attr: str, dim) -> None:
    dims = {dim} if isinstance(dim, int) else set(dim)
    setattr(t, attr, getattr(t, attr, set()) | dims)


class DynamicPolicy:
    """What one frame cache has learned: the dims and ints that vary."""

    def __init__(self, mode: Optional[bool]):
        self.mode = mode                       # None (automatic), True (all), False (never)
        self.dims: Dict[str, Set[int]] = {}    # source name -> dynamic dims
        self.ints: Set[str] = set()            # source names of ints made symbolic
        self.seen_shapes: Dict[str, tuple] = {}
        self.seen_ints: Dict[str, int] = {}
        #: sources of real iterators found at another position than a trace
        #: guarded (see ``values.real_iterators``): traces leave them unstepped
        self.moving_iterators: Set[str] = set()
        #: source names of modules that died while an entry was specialized
        #: to them: modules there (and their submodules) are guarded by
        #: structure, their parameters and buffers as tensors, not by identity
        self.fresh_modules: Set[str] = set()

    def tensor_dims(self, t: torch.Tensor, source_name: str) -> Set[int]:
        static = getattr(t, _STATIC_ATTR, set())
        if self.mode is False:
            dims: Set[int] = set()
        elif self.mode is True:
            dims = set(range(t.dim()))
        else:
            dims = set(self.dims.get(source_name, ()))
        dims |= getattr(t, _DYNAMIC_ATTR, set())
        return {d for d in dims if d not in static and d < t.dim()}

    def module_is_fresh(self, source) -> bool:
        """Whether a module read from ``source`` is guarded by its structure
        (it, or a module it belongs to, was found made anew per call)."""
        if not self.fresh_modules:
            return False
        from .sources import chain
        return any(s.name() in self.fresh_modules for s in chain(source))

    def iterator_moves(self, source_name: str) -> bool:
        return source_name in self.moving_iterators

    def int_is_dynamic(self, source_name: str) -> bool:
        return self.mode is not False and source_name in self.ints

    def learn(self, shapes: Dict[str, tuple], ints: Dict[str, int]) -> bool:
        """Record a missed call's shapes and ints; True if something became dynamic."""
        if self.mode is False:
            return False
        changed = False
        for name, shape in shapes.items():
            old = self.seen_shapes.get(name)
            if old is not None and len(old) == len(shape):
                new_dims = {i for i, (a, b) in enumerate(zip(old, shape)) if a != b}
                if new_dims - self.dims.get(name, set()):
                    self.dims.setdefault(name, set()).update(new_dims)
                    changed = True
            self.seen_shapes.setdefault(name, shape)
        for name, value in ints.items():
            old = self.seen_ints.get(name)
            if old is not None and old != value and name not in self.ints and \
                    max(abs(old), abs(value)) < MAX_DYNAMIC_INT:
                self.ints.add(name)
                changed = True
            self.seen_ints.setdefault(name, value)
        return changed


#: ints this large stay specialized: the shape environment reasons about
#: sizes, and with huge values (bignum arithmetic) its range analysis
#: overflows to infinity and sympy fails (``Invalid NaN comparison``) or crawls
MAX_DYNAMIC_INT = 2 ** 31


class SymbolSource(_TorchSource):
    """A bytegraph source seen through torch's ``Source`` interface, so the
    shape environment names symbols after it and writes guards over ``expr``
    (the input's expression in the generated guard function)."""

    def __init__(self, expr: str):
        self.expr = expr

    @property
    def name(self) -> str:  # torch 2.13 reads it as a property
        return self.expr

    def guard_source(self):
        return GuardSource.LOCAL

    def reconstruct(self, codegen):  # pragma: no cover - torch never calls it for us
        raise NotImplementedError

    def __hash__(self):
        return hash(self.expr)

    def __eq__(self, other):
        return isinstance(other, SymbolSource) and other.expr == self.expr

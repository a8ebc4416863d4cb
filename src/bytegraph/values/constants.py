"""Known Python constants."""

from __future__ import annotations

from typing import List

from ..errors import Unsupported
from .base import Value

import torch

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

# Types whose values are immutable and rebuildable as code constants.
LITERAL_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), type(NotImplemented))


class ConstantValue(Value):
    """An immutable Python object whose value is known while tracing.

    Stands for ``None``, bools, numbers, strings, bytes, ``torch.dtype``,
    ``torch.device``, ``torch.Size``, tuples of constants, ``slice`` objects of
    constants, and other immutable objects such as ``torch.layout``.
    Reconstructs as ``LOAD_CONST`` (its value is a code constant).
    """

    __slots__ = ("_value", "_pending_guard")

    def __init__(self, value, source=None, guard=None):
        if isinstance(value, _SYMBOLIC):
            # A symbolic size must stay a graph value; baking it in would be stale.
            raise Unsupported("a symbolic size used as a constant", kind="internal")
        super().__init__(source)
        self._value = value
        #: ``(guard set, guard)`` installed on first use of the value: a
        #: constant that is only passed along (stored, returned, handed to a
        #: resume function) is reloaded from its source and guards nothing.
        self._pending_guard = guard

    @property
    def value(self):
        pending = self._pending_guard
        if pending is not None:
            self._pending_guard = None
            pending[0].add(pending[1])
        return self._value

    @property
    def is_unguarded(self) -> bool:
        return self._pending_guard is not None

    def python_type(self):
        pending = self._pending_guard
        if pending is not None:
            # asking for the type alone needs only the type to hold, not the value
            # (an unused loop variable must not make the capture one per key)
            from ..guards import Guard
            pending[0].add(Guard("TYPE_MATCH", self.source, type(self._value)))
        return type(self._value)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def truth(self, tx):
        return bool(self.value)

    def has_len(self):
        return hasattr(self.value, "__len__")

    def get_iter(self, tx):
        if type(self.value) in (str, bytes, tuple, range):
            from .iterators import sequence_iterator
            return sequence_iterator(self, self.unpack(tx), self.value)
        return super().get_iter(tx)

    def unpack(self, tx) -> List[Value]:
        try:
            items = list(self.value)
        except TypeError:
            return super().unpack(tx)
        return [ConstantValue(v) for v in items]

    def get_attr(self, tx, name):
        from .builder import wrap_derived_constant
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            tx.raise_python_exception(e)
        return wrap_derived_constant(tx, attr, name)

    def reconstruct(self, cg):
        if self._pending_guard is not None and self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_object(self.value)

    def __repr__(self):
        return f"ConstantValue({self.value!r})"


def const(value) -> ConstantValue:
    """Wrap a Python constant created during tracing.

    Example::

        >>> const(3).as_constant()
        3
    """
    return ConstantValue(value)


NONE = ConstantValue(None)


def is_none(v) -> bool:
    """Does ``v`` stand for ``None``?

    Example::

        >>> is_none(NONE), is_none(const(0))
        (True, False)
    """
    return v.is_constant() and v.as_constant() is None

"""Handlers for opcodes that only move values on the stack."""

from __future__ import annotations

import types

from ..errors import Unsupported
from ..values.base import NULL, finalizer_reachable
from .registry import serves
from ..values.constants import ConstantValue


_PLAIN_CONSTANTS = frozenset({int, float, bool, str, bytes, complex, tuple, frozenset, type(None),
                              type(Ellipsis), types.CodeType})


class StackOps:
    def NOP(self, ins):
        pass

    def RESUME(self, ins):
        pass

    @serves(until=(3, 11))
    def PRECALL(self, ins):
        pass

    def EXTENDED_ARG(self, ins):
        pass

    def POP_TOP(self, ins):
        value = self.stack.pop()
        if self.break_next is None and value is not NULL and finalizer_reachable(value) is not None:
            # Eager may free a discarded result at once (``lst.pop()``), running
            # its finalizer here; the trace cannot tell whether this was the
            # last reference: the code after it runs natively, where it is on time.
            self.break_next = Unsupported(
                f"discarding a {type(finalizer_reachable(value)).__qualname__} object, which has a finalizer",
                kind="finalizer", hint="the code after it runs natively, where the finalizer runs on time")

    def PUSH_NULL(self, ins):
        self.stack.append(NULL)

    def COPY(self, ins):
        self.stack.append(self.stack[-ins.arg])

    def SWAP(self, ins):
        s = self.stack
        s[-1], s[-ins.arg] = s[-ins.arg], s[-1]

    def LOAD_CONST(self, ins):
        value = ins.argval
        if type(value) in _PLAIN_CONSTANTS:
            self.stack.append(ConstantValue(value))
        else:  # objects bytegraph's own generated code embeds (builtins, sentinels)
            from ..values.builder import wrap_derived_constant
            self.stack.append(wrap_derived_constant(self, value, "constant"))

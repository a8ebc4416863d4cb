"""Handlers for opcodes that only move values on the stack."""

from __future__ import annotations

from ..values.base import NULL
from ..values.constants import ConstantValue


class StackOps:
    def NOP(self, ins):
        pass

    def RESUME(self, ins):
        pass

    def PRECALL(self, ins):
        pass

    def EXTENDED_ARG(self, ins):
        pass

    def POP_TOP(self, ins):
        self.stack.pop()

    def PUSH_NULL(self, ins):
        self.stack.append(NULL)

    def COPY(self, ins):
        self.stack.append(self.stack[-ins.arg])

    def SWAP(self, ins):
        s = self.stack
        s[-1], s[-ins.arg] = s[-ins.arg], s[-1]

    def LOAD_CONST(self, ins):
        self.stack.append(ConstantValue(ins.argval))

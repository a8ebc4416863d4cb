"""Handlers for jumps, loops, ``with`` blocks and exceptions.

Exceptions raised by the traced program are symbolic: a handler raises
``UserException``, and the run loop moves to the exception-table handler of
the raising instruction (3.11's static table), exactly as CPython would.
"""

from __future__ import annotations

import torch

from ..errors import Unsupported, UserException
from ..values.constants import NONE, const, is_none
from ..values.containers import IteratorValue
from ..values.contexts import AutocastValue, GeneratorContextExitValue, GeneratorContextValue
from ..values.modules import NewObjectValue
from ..values.objects import (ClassValue, ExceptionValue, GradModeValue, UserObjectValue, WithExitValue,
                              traceback_of)


# torch contexts whose enter/exit switch C++ state bytegraph does not model:
# the with statement runs natively (its body is still captured)
_NATIVE_CONTEXTS = (torch.inference_mode,)


def _python_method(obj, name: str) -> bool:
    """Is ``name`` a Python function on the class of a user object (pre-existing or made in the trace)?"""
    import types
    attr = getattr(obj.python_type(), name, None)
    return isinstance(attr, types.FunctionType)


class ControlOps:
    # -- jumps -----------------------------------------------------------------
    def JUMP(self, ins):
        self.jump_to(ins.target)

    JUMP_NO_INTERRUPT = JUMP

    def POP_JUMP_IF_TRUE(self, ins):
        if self.stack.pop().truth(self):
            self.jump_to(ins.target)

    def POP_JUMP_IF_FALSE(self, ins):
        if not self.stack.pop().truth(self):
            self.jump_to(ins.target)

    def POP_JUMP_IF_NONE(self, ins):
        if is_none(self.stack.pop()):
            self.jump_to(ins.target)

    def POP_JUMP_IF_NOT_NONE(self, ins):
        if not is_none(self.stack.pop()):
            self.jump_to(ins.target)

    def JUMP_IF_TRUE_OR_POP(self, ins):
        if self.stack[-1].truth(self):
            self.jump_to(ins.target)
        else:
            self.stack.pop()

    def JUMP_IF_FALSE_OR_POP(self, ins):
        if not self.stack[-1].truth(self):
            self.jump_to(ins.target)
        else:
            self.stack.pop()

    # -- iteration -------------------------------------------------------------
    def GET_ITER(self, ins):
        v = self.stack.pop()
        self.stack.append(v if isinstance(v, IteratorValue) else v.get_iter(self))

    def FOR_ITER(self, ins):
        it = self.stack[-1]
        if not isinstance(it, IteratorValue):
            raise Unsupported(f"iterating a {it.type_name()}", kind="unsupported_iter")
        item = it.next(self)
        if item is None:
            self.stack.pop()
            self.jump_to(ins.target)
        else:
            self.stack.append(item)

    # -- with ------------------------------------------------------------------
    def BEFORE_WITH(self, ins):
        ctx = self.stack[-1]
        if isinstance(ctx, (GradModeValue, AutocastValue)):
            self.stack.pop()
            self.stack.append(WithExitValue(ctx))
            self.stack.append(ctx.enter(self))
            return
        if isinstance(ctx, GeneratorContextValue):
            entered = ctx.enter(self)
            self.stack.pop()
            self.stack.append(GeneratorContextExitValue(ctx))
            self.stack.append(entered)
            return
        if isinstance(ctx, (UserObjectValue, NewObjectValue)) and _python_method(ctx, "__enter__") \
                and _python_method(ctx, "__exit__") and not issubclass(ctx.python_type(), _NATIVE_CONTEXTS):
            # A user context manager: __enter__ is inlined now, the bound
            # __exit__ waits on the stack like CPython's.
            exit_fn = ctx.get_attr(self, "__exit__")
            entered = ctx.get_attr(self, "__enter__").call(self, [], {})
            self.stack.pop()
            self.stack.append(exit_fn)
            self.stack.append(entered)
            return
        raise Unsupported(f"`with` on a {ctx.type_name()} object", kind="unsupported_context",
                          hint="the with statement's enter and exit run natively between graphs")

    def WITH_EXCEPT_START(self, ins):
        exit_fn = self.stack[-4]
        exc = self.stack[-1]
        self.stack.append(exit_fn.call(self, [ClassValue(exc.python_type()), exc, traceback_of(self, exc)], {}))

    # -- exceptions ----------------------------------------------------------------
    def PUSH_EXC_INFO(self, ins):
        exc = self.stack.pop()
        # (the previous exception's value is used only by POP_EXCEPT, and a
        # break re-creates the slot natively: see BreakEmitter._push_stack)
        self.exc_depths.append(len(self.stack))
        self.stack.append(self.exc_stack[-1] if self.exc_stack else NONE)
        self.exc_stack.append(exc)
        self.stack.append(exc)

    def POP_EXCEPT(self, ins):
        self.stack.pop()
        if self.exc_stack:
            self.exc_stack.pop()
            self.exc_depths.pop()

    def CHECK_EXC_MATCH(self, ins):
        match = self.stack.pop()
        exc = self.stack[-1]
        classes = match.as_constant() if match.is_constant() else tuple(c.as_constant() for c in match.unpack(self))
        for c in (classes if isinstance(classes, tuple) else (classes,)):
            if not (isinstance(c, type) and issubclass(c, BaseException)):
                self.raise_python_exception(TypeError(
                    "catching classes that do not inherit from BaseException is not allowed"))
        # (CPython matches by the MRO, never calling a metaclass's __subclasscheck__)
        mro = exc.python_type().__mro__
        self.stack.append(const(any(c in mro for c in (classes if isinstance(classes, tuple) else (classes,)))))

    def RERAISE(self, ins):
        exc = self.stack.pop()
        raise UserException(exc)

    def RAISE_VARARGS(self, ins):
        if ins.arg == 0:
            # the exception being handled: the innermost handler of this frame
            # or of a caller in the trace; with none, the one the compiled
            # function's own caller handles (unknown here): raise natively
            f = self
            while f is not None and not f.exc_stack:
                f = f.parent
            if f is None:
                raise Unsupported("a bare `raise` outside any handler of the trace", kind="bare_raise")
            raise UserException(f.exc_stack[-1])
        if ins.arg == 2:
            self.stack.pop()  # the cause: not modelled (tracebacks are not reconstructed)
        exc = self.stack.pop()
        if isinstance(exc, ClassValue) or exc.is_constant() and isinstance(exc.as_constant(), type):
            exc = exc.call(self, [], {})
        if not isinstance(exc, ExceptionValue):
            self.raise_python_exception(TypeError("exceptions must derive from BaseException"))
        raise UserException(exc)

    def LOAD_ASSERTION_ERROR(self, ins):
        self.stack.append(ClassValue(AssertionError))

"""Handlers for jumps, loops, ``with`` blocks and exceptions.

Exceptions raised by the traced program are symbolic: a handler raises
``UserException``, and the run loop moves to the exception-table handler of
the raising instruction (3.11's static table), exactly as CPython would.
"""

from __future__ import annotations

import types

import torch

from ..errors import Unsupported, UserException
from .registry import serves
from ..sources import AttrSource, ObjectSource, TypeSource
from ..values.constants import NONE, const, is_none
from ..values.containers import IteratorValue
from ..values.contexts import AutocastValue, GeneratorContextExitValue, GeneratorContextValue
from ..values.modules import NewObjectValue
from ..values.exceptions import HANDLED_AT_ENTRY, ExceptionValue, handled_exception
from ..values.functions import BoundMethodValue
from ..values.objects import NO_ATTR, ClassValue, GradModeValue, UserObjectValue, WithExitValue, special_lookup


# torch contexts whose enter/exit switch C++ state bytegraph does not model:
# the with statement runs natively (its body is still captured)
_NATIVE_CONTEXTS = (torch.inference_mode,)


def _class_attr_value(tx, obj, cls: type, name: str, fn):
    """The function ``cls.name`` as a value, read through the object's class where it has a source."""
    src = AttrSource(TypeSource(obj.source), name) if obj.source is not None else \
        AttrSource(ObjectSource(cls, cls.__qualname__), name)
    return tx.wrap(fn, src)


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

    @serves(since=(3, 13))
    def TO_BOOL(self, ins):
        # the truth test 3.13 splits off the jumps (a break here resumes at the jump)
        self.stack.append(const(self.stack.pop().truth(self)))

    @serves(until=(3, 11))
    def JUMP_IF_TRUE_OR_POP(self, ins):
        if self.stack[-1].truth(self):
            self.jump_to(ins.target)
        else:
            self.stack.pop()

    @serves(until=(3, 11))
    def JUMP_IF_FALSE_OR_POP(self, ins):
        if not self.stack[-1].truth(self):
            self.jump_to(ins.target)
        else:
            self.stack.pop()

    # -- iteration -------------------------------------------------------------
    @serves(since=(3, 12))
    def END_FOR(self, ins):
        # (only reached natively: an exhausted FOR_ITER skips it, see
        # bytecode.versions' for_iter_skips)
        raise Unsupported("END_FOR reached in the trace", kind="internal")

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
        if isinstance(ctx, (UserObjectValue, NewObjectValue)) and not issubclass(ctx.python_type(), _NATIVE_CONTEXTS):
            # A user context manager.  As CPython: both methods are looked up
            # on the type (a missing one is a TypeError) and bound, then
            # __enter__ is called (inlined) and the bound __exit__ waits on
            # the stack.
            cls = ctx.python_type()
            enter, exit_ = special_lookup(cls, "__enter__"), special_lookup(cls, "__exit__")
            if isinstance(enter, types.FunctionType) and isinstance(exit_, types.FunctionType):
                exit_fn = BoundMethodValue(_class_attr_value(self, ctx, cls, "__exit__", exit_), ctx)
                enter_fn = BoundMethodValue(_class_attr_value(self, ctx, cls, "__enter__", enter), ctx)
                entered = enter_fn.call(self, [], {})
                self.stack.pop()
                self.stack.append(exit_fn)
                self.stack.append(entered)
                return
        try:
            cls = ctx.python_type()
        except (NotImplementedError, Unsupported):
            cls = None
        if isinstance(cls, type):
            enter, exit_ = special_lookup(cls, "__enter__"), special_lookup(cls, "__exit__")
            if enter is NO_ATTR or exit_ is NO_ATTR:
                missed = "" if enter is NO_ATTR else " (missed __exit__ method)"
                self.raise_python_exception(TypeError(
                    f"'{cls.__name__}' object does not support the context manager protocol{missed}"))
        raise Unsupported(f"`with` on a {ctx.type_name()} object", kind="unsupported_context",
                          hint="the with statement's enter and exit run natively between graphs")

    def WITH_EXCEPT_START(self, ins):
        # __exit__(type(exc), exc, exc.__traceback__); the result's truth
        # (POP_JUMP_IF_TRUE next) decides whether the exception is swallowed
        exit_fn = self.stack[-4]
        exc = self.stack[-1]
        tb = exc.traceback if isinstance(exc, ExceptionValue) else exc.get_attr(self, "__traceback__")
        self.stack.append(exit_fn.call(self, [ClassValue(exc.python_type()), exc, tb], {}))

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
            # a bare ``raise`` re-raises the exception being handled, maybe by a caller
            handled = handled_exception(self)
            if handled is HANDLED_AT_ENTRY:
                raise Unsupported("a bare raise outside the handlers of the trace", kind="unsupported_exception",
                                  hint="it re-raises what the caller of the compiled function is handling")
            if is_none(handled):
                self.raise_python_exception(RuntimeError("No active exception to reraise"))
            raise UserException(handled)
        cause = self.stack.pop() if ins.arg == 2 else None
        exc = self._exception_instance(self.stack.pop(), "exceptions must derive from BaseException")
        if cause is not None:
            # ``raise exc from cause``: the cause is instantiated like exc (None clears it)
            if not is_none(cause):
                cause = self._exception_instance(cause, "exception causes must derive from BaseException")
            exc.cause = cause
            exc.suppress_context = True
        exc.raised(self)
        raise UserException(exc)

    def _exception_instance(self, v, error: str):
        """What ``raise v`` raises: ``v`` itself, or ``v()`` for an exception class."""
        if isinstance(v, ClassValue) or v.is_constant() and isinstance(v.as_constant(), type):
            cls = v.as_constant()
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                self.raise_python_exception(TypeError(error))
            v = v.call(self, [], {})
        if isinstance(v, ExceptionValue):
            return v
        try:
            is_exception = issubclass(v.python_type(), BaseException)
        except NotImplementedError:
            is_exception = True
        if is_exception:
            raise Unsupported(f"raising a {v.type_name()} exception object made before the trace",
                              kind="unsupported_exception")
        self.raise_python_exception(TypeError(error))

    def LOAD_ASSERTION_ERROR(self, ins):
        self.stack.append(ClassValue(AssertionError))

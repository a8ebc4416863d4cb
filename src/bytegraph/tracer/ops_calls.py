"""Handlers for calls, function creation and return."""

from __future__ import annotations

from ..bytecode import SPEC
from ..errors import Unsupported, UserException
from .registry import serves
from ..values.constants import NONE, is_none
from ..values.base import NullValue
from ..values.cells import CellValue
from ..values.containers import DictValue, TupleValue
from ..values.generators import GeneratorValue, iterate
from ..values.functions import NestedFunctionValue


def _is_user_callable(fn) -> bool:
    """Is ``fn``'s result the return value of the first user frame it inlines?

    Then a graph break inside that frame can split the caller at its CALL."""
    from ..values.functions import BoundMethodValue, PartialValue, UserFunctionValue
    from ..values.modules import NNModuleValue
    while isinstance(fn, (BoundMethodValue, PartialValue)):
        fn = fn.func
    if isinstance(fn, NNModuleValue):
        from ..distributed.hooks import hooks_run_natively
        m = fn.obj
        # (hooks run natively: the call's value is that of call_with_native_hooks, inlined first)
        return not (m._forward_hooks or m._forward_pre_hooks) or hooks_run_natively(m)
    return isinstance(fn, (UserFunctionValue, NestedFunctionValue))


def _is_plain_function(fn) -> bool:
    """Is calling ``fn`` one Python frame in eager, the frame the trace inlines
    (a function or a method of one; not a module, whose ``__call__`` frames
    the trace skips)?  (What ``warnings.warn``'s stacklevel counts.)"""
    from ..values.functions import BoundMethodValue, UserFunctionValue
    while isinstance(fn, BoundMethodValue):
        fn = fn.func
    return isinstance(fn, (UserFunctionValue, NestedFunctionValue))


class CallOps:
    @serves(until=(3, 12))
    def KW_NAMES(self, ins):
        self.kw_names = ins.argval

    @serves(since=(3, 13))
    def CALL_KW(self, ins):
        # the names are a tuple on the stack, above the arguments (a constant,
        # or, in a continuation resumed at this call, a tuple handed over)
        names = self.stack.pop()
        if not names.is_constant():
            items = names.unpack(self)
            if not all(i.is_constant() and type(i.as_constant()) is str for i in items):
                raise Unsupported("CALL_KW with keyword names that are not constants", kind="internal")
            self.kw_names = tuple(i.as_constant() for i in items)
        else:
            self.kw_names = names.as_constant()
        self.CALL(ins)

    def CALL(self, ins):
        argc = ins.arg
        args = self.popn(argc)
        second = self.stack.pop()   # callable or self, or NULL (above the callable from 3.13)
        first = self.stack.pop()    # NULL (below the callable up to 3.12) or callable or method
        if isinstance(first, NullValue):
            fn = second
        elif isinstance(second, NullValue):
            fn = first
        else:
            fn = first
            args = [second] + args
        kwargs = {}
        self.calling_directly = _is_user_callable(fn)
        self.calling_plain = _is_plain_function(fn)
        if self.kw_names:
            names = self.kw_names
            self.kw_names = ()
            kw_values = args[len(args) - len(names):]
            del args[len(args) - len(names):]
            kwargs = dict(zip(names, kw_values))
        self.stack.append(fn.call(self, args, kwargs))

    def CALL_FUNCTION_EX(self, ins):
        kwargs = self.stack.pop() if ins.arg & 1 else None
        args = self.stack.pop()
        fn = self.stack.pop()
        if isinstance(fn, NullValue):     # 3.13: the NULL sits above the callable
            fn = self.stack.pop()
        elif self.stack and isinstance(self.stack[-1], NullValue):
            self.stack.pop()
        arg_list = args.unpack(self)
        self.calling_directly = _is_user_callable(fn)
        self.calling_plain = _is_plain_function(fn)
        kw = {}
        if kwargs is not None:
            if not isinstance(kwargs, DictValue):
                raise Unsupported("**kwargs that is not a dict", kind="unsupported_call")
            for k, v in kwargs.entries.values():
                kw[k.as_constant()] = v
        self.stack.append(fn.call(self, arg_list, kw))

    def MAKE_FUNCTION(self, ins):
        flags = ins.arg or 0    # 3.13 sets the parts after (SET_FUNCTION_ATTRIBUTE)
        code = self.stack.pop().as_constant()
        closure = self.stack.pop() if flags & 0x08 else None
        annotations = self.stack.pop() if flags & 0x04 else None
        kwdefaults = self.stack.pop() if flags & 0x02 else None
        defaults = self.stack.pop() if flags & 0x01 else None
        self.stack.append(self._make_function(code, closure, annotations, kwdefaults, defaults))

    @serves(since=(3, 13))
    def SET_FUNCTION_ATTRIBUTE(self, ins):
        fn = self.stack.pop()
        value = self.stack.pop()
        if not isinstance(fn, NestedFunctionValue) or fn.made_parts is None:
            raise Unsupported("SET_FUNCTION_ATTRIBUTE on a function not just made", kind="internal")
        parts = dict(fn.made_parts)
        parts[ins.arg] = value
        new = self._make_function(fn.code, parts.get(0x08), parts.get(0x04), parts.get(0x02), parts.get(0x01))
        self.stack.append(new)

    def _make_function(self, code, closure, annotations, kwdefaults, defaults):
        cells = []
        if closure is not None:
            cells = closure.unpack(self)
            if not all(isinstance(c, CellValue) for c in cells):
                raise Unsupported("closure tuple of non-cells", kind="internal")
        if defaults is not None and not isinstance(defaults, TupleValue):
            defaults = TupleValue(defaults.unpack(self))
        if kwdefaults is not None and not isinstance(kwdefaults, DictValue):
            raise Unsupported("keyword defaults that are not a dict", kind="internal")
        fn = NestedFunctionValue(code, self.f_globals, defaults, kwdefaults, cells, code.co_qualname)
        fn.annotations = annotations
        # what 3.13's SET_FUNCTION_ATTRIBUTE may still add to it (the value is
        # made anew then: nothing has seen this one)
        fn.made_parts = {bit: part for bit, part in
                         ((0x08, closure), (0x04, annotations), (0x02, kwdefaults), (0x01, defaults))
                         if part is not None}
        return fn

    # -- generators (a frame paused at each yield, see GeneratorValue) ------------
    def RETURN_GENERATOR(self, ins):
        self.stack.append(NONE)

    def YIELD_VALUE(self, ins):
        if not self.suspendable:
            raise Unsupported("yield in the compiled frame itself", kind="generator")
        # pause: the run loop ends as if returned; resume() continues after this yield
        self.yielded_value = self.stack.pop()
        self.stack.append(NONE)  # what next() sends in (send() replaces it)
        self.yield_ins = ins
        self.suspended = self.returned = True

    def GET_YIELD_FROM_ITER(self, ins):
        v = self.stack.pop()
        self.stack.append(iterate(self, v))

    def SEND(self, ins):
        # ``yield from it``: the next item goes to the YIELD_VALUE that follows;
        # when ``it`` is exhausted, its return value replaces both and we jump.
        sent = self.stack.pop()
        it = self.stack[-1]
        if isinstance(it, GeneratorValue):
            item = it.send(self, sent)
            result = it.result
        else:
            if not is_none(sent):
                raise Unsupported("send() into a `yield from` of a non-generator", kind="generator")
            item = it.next(self)
            result = NONE
        if item is None:
            self.yield_from_returned(result, ins)
        else:
            self.stack.append(item)

    def yield_from_returned(self, result, send) -> None:
        """The delegate of ``yield from`` (on top of the stack) returned
        ``result``: go on after the ``SEND``."""
        if SPEC.has_op("END_SEND"):
            self.stack.append(result)   # 3.12+: END_SEND at the target drops the delegate
        else:
            self.stack[-1] = result
        self.jump_to(send.target)

    @serves(since=(3, 12))
    def END_SEND(self, ins):
        value = self.stack.pop()
        self.stack[-1] = value

    @serves(since=(3, 12))
    def CLEANUP_THROW(self, ins):
        # an exception thrown into a ``yield from``: the delegate's
        # StopIteration is its return value; anything else goes on
        exc = self.stack.pop()
        self.stack.pop()    # the value last sent
        self.stack.pop()    # the delegate
        from ..values.objects import ExceptionValue
        if isinstance(exc, ExceptionValue) and issubclass(exc.python_type(), StopIteration):
            self.stack.append(NONE)
            self.stack.append(exc.get_attr(self, "value"))
            return
        raise UserException(exc)

    @serves(since=(3, 12))
    def STOPITERATION_ERROR(self, ins):
        # a generator's body let StopIteration escape: Python makes it a
        # RuntimeError (PEP 479); 3.11 did this inside the interpreter
        exc = self.stack[-1]
        from ..values.objects import ExceptionValue
        if isinstance(exc, ExceptionValue) and issubclass(exc.python_type(), (StopIteration, StopAsyncIteration)):
            raise Unsupported("StopIteration escaping a generator", kind="generator")

    def RETURN_VALUE(self, ins):
        self.return_value = self.stack.pop()
        self.returned = True

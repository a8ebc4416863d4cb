"""Which real callables never look at the frame that calls them.

A graph break at a call inside inlined code may run that call from the
compiled root's transformed code rather than from the inlined function's own
frame (``BreakEmitter._runs_call_first``).  That is only the same as eager
when the callee is blind to its caller: a C function (it has no Python
frame to read its caller from) other than the few that read the calling
frame on purpose.  Python functions may call ``sys._getframe`` or
``inspect.currentframe``, and count as reading it.
"""

from __future__ import annotations

import builtins
import sys
import types
import warnings
from typing import Optional

_C_CALLABLE_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                     types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)

#: C functions that read the calling frame: its locals or globals (eval,
#: exec, locals, vars and dir without arguments, globals, zero-argument
#: super, __import__'s package, compile's inherited flags), the frame
#: itself (sys._getframe), its handled exception (sys.exc_info) or its
#: location (warnings.warn's stacklevel)
_READ_CALLER = {id(f) for f in (
    builtins.eval, builtins.exec, builtins.locals, builtins.globals, builtins.vars, builtins.dir,
    builtins.__import__, builtins.breakpoint, builtins.compile, sys._getframe, sys.exc_info,
    warnings.warn, warnings.warn_explicit,
)}
_READ_CALLER_TYPES = (super,)

#: C functions that read the calling frame's *locals* by name, which the
#: bytecode's liveness cannot see: ``eval("y + 1")`` reads ``y`` though no
#: instruction after it does (``sys._getframe().f_locals`` too)
_READ_CALLER_LOCALS = {id(f) for f in (
    builtins.eval, builtins.exec, builtins.locals, builtins.vars, builtins.dir, builtins.breakpoint,
    sys._getframe,
)}


def c_function_reads_caller_frame(fn) -> bool:
    """Whether calling ``fn`` may read its caller's frame.

    Example::

        >>> c_function_reads_caller_frame(print), c_function_reads_caller_frame(eval)
        (False, True)
        >>> c_function_reads_caller_frame(lambda: None)   # Python code: may
        True
    """
    if type(fn) not in _C_CALLABLE_TYPES:
        return not (isinstance(fn, type) and not issubclass(fn, _READ_CALLER_TYPES)
                    and type(fn).__call__ is type.__call__ and _c_construction(fn))
    if id(fn) in _READ_CALLER:
        return True
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, types.ModuleType) and owner.__name__ in ("sys", "_warnings", "inspect")


def reads_caller_locals(callee) -> bool:
    """Whether calling the value ``callee`` (a :class:`Value`) may read the
    calling frame's locals by name: then every bound local must be in the
    frame that runs the call, dead or not.  A C function that does
    (``eval``, ``locals``, ``sys._getframe``), or a Python function that
    walks to its callers' frames (``sys._getframe(1).f_locals``; see
    :func:`~bytegraph.break_plan.inspects_callers`): a break inside an
    inlined one runs its whole call natively from this frame.

    Example::

        >>> from bytegraph.values.functions import BuiltinValue, UserFunctionValue
        >>> reads_caller_locals(BuiltinValue(eval, None)), reads_caller_locals(BuiltinValue(print, None))
        (True, False)
        >>> reads_caller_locals(UserFunctionValue(lambda: sys._getframe(1).f_locals))
        True
    """
    code = _python_code(callee)
    if code is not None:
        from ..break_plan import inspects_callers
        return inspects_callers(code)
    obj = callee.real_object()
    return obj is not None and id(obj[0]) in _READ_CALLER_LOCALS


def _python_code(callee) -> Optional[types.CodeType]:
    """The code a call of the function value ``callee`` runs, when it is a
    Python function (plain, made in the trace, or a bound method of one)."""
    from .functions import BoundMethodValue, NestedFunctionValue
    if isinstance(callee, BoundMethodValue):
        callee = callee.func
    if isinstance(callee, NestedFunctionValue):
        return callee.code
    obj = callee.real_object()
    fn = obj[0] if obj is not None else None
    fn = getattr(fn, "__func__", fn)
    return fn.__code__ if isinstance(fn, types.FunctionType) else None


def _c_construction(cls: type) -> bool:
    """``cls(...)`` runs only C code: its ``__new__`` and ``__init__`` are C."""
    return all(type(getattr(cls, name, None)) in (types.BuiltinFunctionType, types.WrapperDescriptorType,
                                                  types.BuiltinMethodType)
               for name in ("__new__", "__init__"))


def is_explicit_break(handler) -> bool:
    """``bytegraph.graph_break()`` (and torch's): a call that does nothing."""
    from .builtins_table import _graph_break
    return handler is _graph_break

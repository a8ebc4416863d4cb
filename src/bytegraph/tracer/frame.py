"""The symbolic frame: stack, localsplus slots (cells included), and the
run loop that dispatches each instruction to the handler named after its opcode.

One class serves the root frame and inlined frames alike (DESIGN.md C2):
cells live in ``locals`` under their names, and ``LOAD_DEREF``/``STORE_DEREF``
go through the cell value in both.  Handlers live in the ``ops_*`` mixins,
one small method per opcode; :data:`DISPATCH` maps opnames to them.
"""

from __future__ import annotations

import builtins
import functools
import linecache
import os
import sysconfig
import types
from typing import Dict, List, Optional

from .. import config
from ..bytecode import decode
from ..errors import Unsupported, UserException, UserLocation
from ..values.base import Value
from ..values.cells import CellValue
from ..values.constants import const
from ..values.generators import GeneratorValue
from ..values.objects import ExceptionValue
from .ops_calls import CallOps
from .ops_control import ControlOps
from .ops_data import DataOps
from .ops_locals import LocalOps
from .ops_stack import StackOps
from .registry import serves_running

_CODE_INFO: Dict[types.CodeType, tuple] = {}


def code_info(code: types.CodeType):
    """Decoded instructions of ``code``, the index of each (by identity), and its loop heads."""
    info = _CODE_INFO.get(code)
    if info is None:
        from ..resume import loops_of
        instrs = decode(code)
        heads = frozenset(lp.head for lp in loops_of(code))
        info = (instrs, {id(ins): i for i, ins in enumerate(instrs)}, heads)
        _CODE_INFO[code] = info
    return info


class GeneratorOrigin:
    """Where a generator object was made: the call a graph break moves to
    when the generator, already running, would have to cross it."""

    __slots__ = ("frame", "index", "step", "location")

    def __init__(self, frame):
        self.frame = frame
        self.index = frame.ip - 1
        self.step = frame.step
        self.location = frame.location()


class TraceStopped(Exception):
    """The trace reached its planned stop (a graph break); ``frame`` is the innermost frame."""

    def __init__(self, frame):
        super().__init__()
        self.frame = frame


class Frame(StackOps, LocalOps, CallOps, ControlOps, DataOps):
    """One executing code object: the root frame or an inlined call."""

    def __init__(self, trace, code: types.CodeType, f_globals: dict, locals_: Dict[str, Value],
                 closure: List[CellValue], parent: Optional["Frame"] = None, fn_name: str = ""):
        self.trace = trace
        trace.frames.append(self)
        self.code = code
        self.instrs, self.index_of, self.loop_heads = code_info(code)
        self.ip = 0
        self.stack: List[Value] = []
        self.locals: Dict[str, Value] = dict(locals_)
        self.closure = closure
        self.f_globals = f_globals
        b = f_globals.get("__builtins__", builtins)
        self.f_builtins = b.__dict__ if isinstance(b, types.ModuleType) else b
        self.parent = parent
        self.depth = parent.depth + 1 if parent is not None else 0
        self.fn_name = fn_name or code.co_name
        self.kw_names: tuple = ()
        self.returned = False
        self.return_value: Optional[Value] = None
        self.current = None
        #: exceptions being handled by this frame's except/finally blocks,
        #: innermost last, and the stack index of each one's saved previous
        #: exception (the slot ``PUSH_EXC_INFO`` pushed): a break inside a
        #: handler re-establishes them there (breaks.BreakEmitter)
        self.exc_stack: List[Value] = []
        self.exc_depths: List[int] = []
        #: a generator frame that stops at each ``yield`` (see start_generator)
        self.suspendable = False
        self.suspended = False
        self.yielded_value: Optional[Value] = None
        self.yield_ins = None
        #: loop head index -> trace step of its first execution in this frame
        self.head_steps: Dict[int, int] = {}
        #: loop head index -> times it was reached in this frame (a loop run
        #: more than ``config.max_loop_iterations`` times is not unrolled)
        self.head_counts: Dict[int, int] = {}
        #: loop head index -> graph ops recorded when it was first reached (a
        #: loop that records none for ``config.max_python_loop_iterations``
        #: iterations runs natively)
        self.head_ops: Dict[int, int] = {}
        #: called straight from a CALL instruction, so its return value is that
        #: instruction's result (a graph break inside can split here)
        self.direct_call = False
        #: trace step of the instruction being executed
        self.step = -1
        #: a graph break to take before the next instruction (set by an
        #: instruction whose effect eager makes visible at once)
        self.break_next = None
        #: set by CALL just before calling a user function (consumed by inline_call)
        self.calling_directly = False
        #: set with it when the callee is a plain function (see ops_calls._is_plain_function)
        self.calling_plain = False
        #: called straight from a CALL of a plain function: one frame of eager's stack
        self.one_frame = False
        #: root arguments not read yet (wrapped lazily on first read, so unused
        #: arguments get no guards and no graph inputs)
        self.unrealized: Dict[str, tuple] = {}  # name -> (object, source)
        #: opcode handlers (a generator being closed silently gets fewer, see close_is_silent)
        self.dispatch = DISPATCH
        #: generated frames whose locals came in one dict: its source and keys
        self.state_source = None
        self.state_names: tuple = ()
        #: a class body's namespace (name -> value, in definition order), else None
        self.namespace: Optional[Dict[str, Value]] = None
        #: before 3.13, the dict ``locals()`` returned in this frame (each call
        #: refreshes and returns the same one), once made
        self.locals_dict = None

    # -- services used by values ---------------------------------------------
    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def graph(self):
        return self.trace.graph

    @property
    def side_effects(self):
        return self.trace.side_effects

    @property
    def guards(self):
        return self.trace.guards

    def wrap(self, obj, source) -> Value:
        return self.trace.wrap(self, obj, source)

    def wrap_parameter(self, obj, source) -> Value:
        from ..values.builder import wrap_parameter
        return wrap_parameter(self, obj, source)

    def raise_python_exception(self, exc: BaseException):
        """Raise ``exc`` inside the traced program (a symbolic exception)."""
        # ``exc`` is only a description (type and arguments): the tracer's own
        # frames in its traceback would hold this trace alive in a cycle
        exc.__traceback__ = exc.__context__ = exc.__cause__ = None
        if isinstance(exc, RecursionError):
            # the tracer's own stack ran out (constant folding, wrapping): the
            # program would not necessarily fail here
            raise Unsupported("Python's recursion limit reached while tracing", kind="recursion")
        value = ExceptionValue.from_real(exc)
        value.raised(self)
        raise UserException(value)

    def set_grad_mode(self, enabled: bool) -> None:
        self.trace.set_grad_mode(enabled)

    def graph_input_example(self, value):
        for inp in self.graph.inputs:
            if inp.node is value.node:
                return inp.example
        raise Unsupported("no example for a non-input tensor", kind="internal")

    def location(self) -> UserLocation:
        ins = self.current
        line = ins.positions.lineno if ins is not None and ins.positions is not None else self.code.co_firstlineno
        return UserLocation(self.code.co_filename, line, self.code.co_qualname)

    def stack_trace(self) -> str:
        """The user's stack at the current instruction, outermost frame first,
        formatted as a traceback's entries (the root frame down to this inlined one)."""
        chain = []
        frame = self
        while frame is not None:
            if not frame.code.co_filename.startswith(_OWN_DIR):   # (bytegraph's own wrappers: not the user's)
                chain.append(frame.location())
            frame = frame.parent
        return "".join(_traceback_entry(loc.filename, loc.lineno, loc.function) for loc in reversed(chain))

    def user_location(self) -> Optional[UserLocation]:
        """The innermost frame of the user's own code on the stack: not the
        standard library's, an installed package's (torch, transformers) or bytegraph's."""
        frame = self
        while frame is not None:
            if not _is_library(frame.code.co_filename):
                return frame.location()
            frame = frame.parent
        return None

    # -- inlining --------------------------------------------------------------
    def inline_call(self, code: types.CodeType, f_globals: dict, closure: List[CellValue],
                    bound: Dict[str, Value], name: str, call=None) -> Value:
        """Run a call of ``code`` in a child frame; ``call`` is ``(function,
        args, kwargs)`` as called (how a generator it makes is rebuilt)."""
        if code.co_flags & (0x80 | 0x100 | 0x200):  # coroutine, iterable coroutine, async generator
            raise Unsupported(f"calling coroutine function {name}()", kind="generator",
                              hint="coroutines are not supported inside compiled functions")
        child = self._child(code, f_globals, bound, closure, name)
        child.direct_call = self.calling_directly and not code.co_flags & 0x20
        child.one_frame = child.direct_call and self.calling_plain
        self.calling_directly = self.calling_plain = False
        if code.co_flags & 0x20:
            # Calling a generator function runs none of its code: the frame
            # waits, paused before its first instruction, until an item is asked.
            child.suspendable = True
            gen = GeneratorValue(child, call)
            gen.origin = GeneratorOrigin(self)
            self.trace.generators.append(gen)
            return gen
        return child.run()

    def start_generator(self, func: Value, args: List[Value], kwargs: Dict[str, Value]) -> "Frame":
        """A frame for calling generator function ``func`` that pauses at each
        ``yield`` instead of running to completion: ``run()`` to the first
        yield, then ``resume()`` or ``throw(exc)``; ``suspended`` and
        ``yielded_value`` say where it stopped."""
        from ..values.functions import UserFunctionValue
        fn = getattr(func, "fn", None)
        if not isinstance(func, UserFunctionValue) or not fn.__code__.co_flags & 0x20:
            raise Unsupported(f"a @contextmanager function that is not a plain generator ({func.type_name()})",
                              kind="unsupported_context")
        child = self._child(fn.__code__, fn.__globals__, func.bind(self, args, kwargs), func.closure_cells(self),
                            fn.__name__)
        child.suspendable = True
        return child

    def _child(self, code, f_globals, bound, closure, name) -> "Frame":
        """The frame of a call made from this one."""
        if self.depth + 1 > config.max_inline_depth:
            raise Unsupported(f"call depth over {config.max_inline_depth} inlining {name}()",
                              kind="recursion_limit")
        return Frame(self.trace, code, f_globals, bound, closure, parent=self, fn_name=name)

    def resume(self) -> None:
        """Continue a suspended generator frame (``next(gen)``)."""
        self.suspended = self.returned = False
        self.run()

    def throw(self, exc: Value) -> None:
        """Raise ``exc`` at the generator's ``yield`` (``gen.throw(exc)``); a
        ``UserException`` escapes if the generator does not handle it."""
        self.suspended = self.returned = False
        error = UserException(exc)
        if not self._unwind_to_handler(error, self.yield_ins):
            self.returned = True
            raise error
        self.run()

    def yield_from_delegate(self) -> Optional[Value]:
        """The iterator a generator paused in ``yield from`` delegates to (else None).

        Paused there, the stack ends ``iterator, sent-value`` and the yield
        follows the ``SEND`` of the loop."""
        ins = self.yield_ins
        if not self.suspended or ins is None:
            return None
        i = self.index_of[id(ins)]
        if i == 0 or self.instrs[i - 1].opname != "SEND":
            return None
        return self.stack[-2]

    def finish_yield_from(self, result: Value) -> None:
        """The delegate of the paused ``yield from`` returned ``result``
        (after a ``throw`` into it): continue after the ``yield from``."""
        send = self.instrs[self.index_of[id(self.yield_ins)] - 1]
        self.suspended = self.returned = False
        self.stack.pop()
        self.yield_from_returned(result, send)
        self.run()

    # -- run loop ----------------------------------------------------------------
    def run(self) -> Value:
        instrs = self.instrs
        trace = self.trace
        heads = self.loop_heads
        dispatch = self.dispatch
        while not self.returned:
            ip = self.ip
            if trace.steps == trace.stop_step:
                raise TraceStopped(self)
            long_loop = False
            if ip in heads:
                if ip not in self.head_steps:
                    self.head_steps[ip] = trace.steps
                    self.head_ops[ip] = trace.graph.op_count
                n = self.head_counts[ip] = self.head_counts.get(ip, 0) + 1
                # only where the break can take the whole loop (its body
                # outlined): in the root frame, outside try/with blocks; a
                # break elsewhere would split once per remaining iteration
                if self.parent is None and instrs[ip].exn is None:
                    long_loop = (n > config.max_python_loop_iterations
                                 or trace.steps - self.head_steps[ip] > config.max_python_loop_steps) \
                        and _python_loop(self, ip) or n > config.max_loop_iterations
            ins = instrs[ip]
            self.ip = ip + 1
            self.step = trace.steps
            self.current = ins
            handler = dispatch.get(ins.opname, _unsupported_opcode)
            if self.break_next is not None:
                handler = _raise_pending
            elif long_loop:
                handler = long_loop if callable(long_loop) else _long_loop
            elif trace.steps >= config.max_trace_steps:
                handler = _too_long
            elif trace.steps & 255 == 255 and trace.over_budget():
                handler = _over_budget
            trace.steps += 1
            try:
                handler(self, ins)
            except UserException as exc:
                trace.raise_steps.setdefault(id(exc.value), (exc.value, self.step))
                if getattr(exc.value, "fresh", False):
                    exc.value.fresh = False
                    exc.value.raised(self)
                if not self._unwind_to_handler(exc, ins):
                    raise
            except Unsupported as exc:
                if exc.location is None:
                    exc.location = self.location()
                    exc.stack, exc.user_location = self.stack_trace(), self.user_location()
                    exc.frame = self
                    exc.index = ip
                    # the step this instruction started at: a handler may have
                    # run inlined frames (a key function, a filter predicate)
                    # before it failed, and the retrace must stop before it
                    exc.step = self.step
                raise
        return self.return_value

    def _unwind_to_handler(self, exc: UserException, ins) -> bool:
        entry = ins.exn
        if entry is None:
            return False
        del self.stack[entry.depth:]
        if entry.lasti:
            self.stack.append(const(ins.offset if ins.offset is not None else -1))
        self.stack.append(exc.value)
        self.jump_to(entry.target)
        return True

    def jump_to(self, target) -> None:
        self.ip = self.index_of[id(target)]

    # -- stack helpers ---------------------------------------------------------
    def push(self, v: Value) -> None:
        self.stack.append(v)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, n: int) -> List[Value]:
        if n == 0:
            return []
        out = self.stack[-n:]
        del self.stack[-n:]
        return out


def _long_loop(frame, ins):
    raise Unsupported(f"a loop runs more than {config.max_loop_iterations} times in one trace",
                      kind="long_loop", hint="the loop runs with its body compiled once, not unrolled")


def _python_loop(frame, ip: int):
    """The break for a loop at ``ip`` that ran past
    ``config.max_python_loop_iterations`` without recording a tensor
    operation -- nor did any loop around it that the break would take (the
    outermost reached one, see break_plan) -- else None.

    Unrolling such a loop buys nothing a backend sees, and thousands of
    iterations (a queue filled in a loop) would cost seconds of tracing per
    retrace: it runs natively instead, body not compiled."""
    from ..resume import outermost_loop
    lp = outermost_loop(frame.code, ip, set(frame.head_steps))
    if lp is None or frame.head_ops.get(lp.head, -1) != frame.trace.graph.op_count:
        return None
    return _native_loop


def _native_loop(frame, ins):
    raise Unsupported(f"a loop ran {config.max_python_loop_iterations} times or "
                      f"{config.max_python_loop_steps} traced instructions in one trace with no tensor "
                      "operation", kind="python_loop",
                      hint="the loop runs natively (config.max_python_loop_iterations and "
                           "config.max_python_loop_steps set the limits)")


def _too_long(frame, ins):
    raise Unsupported(f"the trace ran {config.max_trace_steps} instructions", kind="trace_too_long",
                      hint="a loop over many known items unrolls; config.max_trace_steps sets the limit")


def _over_budget(frame, ins):
    raise Unsupported(f"the trace ran longer than its budget ({config.trace_budget_seconds:g} s, "
                      f"{frame.trace.steps} instructions)", kind="trace_budget",
                      hint="the rest of the frame runs in a continuation; config.trace_budget_seconds sets the "
                           "budget")


def _raise_pending(frame, ins):
    exc = frame.break_next
    frame.break_next = None
    try:
        raise exc
    finally:
        del exc  # no cycle through this frame: the trace's objects are freed as soon as it is dropped


#: the running interpreter's opcodes (after the decoder's renaming, see
#: ``bytecode.versions``) that no handler serves, and why: each one is a
#: break (``unsupported_opcode``); tests/test_tracer_opcodes.py checks that
#: every opcode is either handled or listed here
BREAKING_OPCODES = {
    "CACHE": "an inline cache slot, never decoded as an instruction",
    "ASYNC_GEN_WRAP": "async generators are not traced",
    "BEFORE_ASYNC_WITH": "async with is not traced (coroutines run eagerly)",
    "END_ASYNC_FOR": "async for is not traced (coroutines run eagerly)",
    "GET_AITER": "async for is not traced (coroutines run eagerly)",
    "GET_ANEXT": "async for is not traced (coroutines run eagerly)",
    "GET_AWAITABLE": "await is not traced (coroutines run eagerly)",
    "CHECK_EG_MATCH": "except* (exception groups) is not traced",
    "PREP_RERAISE_STAR": "except* (exception groups) is not traced",
    "IMPORT_STAR": "from m import * writes names the trace cannot know into the frame",
    "MATCH_CLASS": "class patterns in match statements are not traced (they call __match_args__ lookups "
                   "and isinstance natively)",
    "PRINT_EXPR": "only the interactive interpreter emits it",
    # 3.12+
    "CALL_INTRINSIC_1": "PEP 695 type parameters and aliases are not traced",
    "CALL_INTRINSIC_2": "PEP 695 type parameters are not traced",
    "INTERPRETER_EXIT": "never in a code object a program makes",
    "RESERVED": "never in a code object a program makes",
    # 3.13
    "ENTER_EXECUTOR": "the JIT's marker, never in co_code",
    "EXIT_INIT_CHECK": "only in specialized instructions, never in co_code",
}


def _unsupported_opcode(frame, ins):
    # run as a handler, so the break gets the instruction's location like any other
    raise Unsupported(f"opcode {ins.opname}", kind="unsupported_opcode",
                      hint=BREAKING_OPCODES.get(ins.opname, ""))


#: opname -> handler: every method of Frame named like an opcode that serves
#: the running interpreter (see :mod:`.registry`)
DISPATCH = {name: getattr(Frame, name) for name in dir(Frame)
            if name.isupper() and not name.startswith("_") and serves_running(getattr(Frame, name))}

#: what an ``except SomeError:`` clause runs before it re-raises an exception
#: it does not match: enough to close a generator paused inside one
SILENT_DISPATCH = {name: DISPATCH[name] for name in (
    "PUSH_EXC_INFO", "POP_EXCEPT", "RERAISE", "CHECK_EXC_MATCH", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_FAST",
    "LOAD_CONST", "BUILD_TUPLE", "COPY", "SWAP", "POP_TOP", "NOP", "PUSH_NULL", "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_TRUE", "TO_BOOL", "STOPITERATION_ERROR") if name in DISPATCH}


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: where code that is not the user's lives
_LIBRARY_DIRS = tuple(sorted({os.path.join(p, "") for p in (sysconfig.get_paths()[k] for k in (
    "stdlib", "platstdlib", "purelib", "platlib")) if p} | {_OWN_DIR}))


@functools.lru_cache(maxsize=1024)
def _is_library(filename: str) -> bool:
    """Is ``filename`` not the user's own code: the standard library, bytegraph,
    or an installed package (this environment's, or any ``site-packages`` /
    ``dist-packages`` directory: a system or user site, another environment)?"""
    return filename.startswith(_LIBRARY_DIRS) or any(
        f"{os.sep}{d}{os.sep}" in filename for d in ("site-packages", "dist-packages"))


@functools.lru_cache(maxsize=4096)
def _traceback_entry(filename: str, lineno: int, function: str) -> str:
    line = linecache.getline(filename, lineno).strip() if lineno else ""
    return f'  File "{filename}", line {lineno}, in {function}\n' + (f"    {line}\n" if line else "")

"""Where to split a frame that meets something the trace cannot capture.

:func:`plan_break` reads the first trace's failure and picks one of three
modes (DESIGN.md §5, §8):

* ``instr``: in the compiled frame itself -- stop before the instruction,
  run it natively, continue in a resume function for each successor;
* ``loop``: the instruction is inside a loop of the compiled frame -- stop
  at the loop's head and run the loop natively, calling an outlined body
  function per iteration (compiled in turn), so iterations never nest;
* ``chain``: inside inlined calls -- stop the innermost frame there and
  continue each active frame in its own resume function, innermost first,
  feeding each result to the next frame out.

:mod:`bytegraph.breaks` then writes the code around the split.

Example::

    >>> import torch, bytegraph
    >>> def f(x):
    ...     bytegraph.graph_break()
    ...     return x + 1
    >>> bytegraph.explain(f)(torch.ones(2)).graph_break_count
    1
"""

from __future__ import annotations

import dataclasses
import types
from typing import Optional

from .errors import BreakRecord, Unsupported
from .resume import Loop, origin_of, outermost_loop, super_needs_own_frame
from .values.base import NullValue, Value
from .values.cells import CellValue


@dataclasses.dataclass
class BreakPlan:
    step: int                    # trace step before which the retrace stops
    mode: str                    # "instr", "loop" or "chain"
    record: BreakRecord
    loop: Optional[Loop] = None
    #: the split moved out of an inlined continuation (a resume function run
    #: through a :class:`~bytegraph.resume.Continuation`) to the call of it:
    #: that continuation, run natively, compiles and breaks on its own, where
    #: the break is counted and reported
    delegated: bool = False


#: the kind of the refusal to split a frame that looks at its own or its callers' frames
FRAME_WALKING = "frame_walking"


def plan_break(exc: Unsupported) -> BreakPlan:
    """Decide where to split, from the first trace's failure."""
    frame = getattr(exc, "frame", None)
    if frame is None:
        raise exc
    _refuse_splitting_a_frame_walker(exc, frame)
    index, step = exc.index, exc.step
    record = exc.record()
    delegated = False
    while True:
        origin = origin_of(frame.code)
        if origin is not None and index < origin.prologue and frame.parent is None:
            raise exc  # inside bytegraph's own prologue: splitting there would only recurse
        if frame.parent is None and super_needs_own_frame(frame.code):
            raise exc  # no generated function can continue it: the frame runs eagerly
        visited = set(frame.head_steps)
        lp = outermost_loop(frame.code, index, visited)
        if frame.parent is None:
            if lp is not None:
                return BreakPlan(frame.head_steps[lp.head], "loop", record, lp, delegated)
            return BreakPlan(step, "instr", record, None, delegated)
        root = frame
        while root.parent is not None:
            root = root.parent
        root_loop = outermost_loop(root.code, root.ip - 1, set(root.head_steps))
        if root_loop is not None:
            # The compiled frame's call in progress is inside one of its loops:
            # run that loop natively with its body outlined, as for a break in
            # the loop's own code (a chain would resume mid-loop, and that
            # continuation would then break at the loop to outline it).
            return BreakPlan(root.head_steps[root_loop.head], "loop", record, root_loop, delegated)
        # Splitting inside inlined calls needs every active call to be a plain
        # CALL whose result is the callee's return value.  A call inside a
        # try/with block of its caller is resumed *inside* that block: the
        # caller's continuation re-runs its call instruction on a thunk of the
        # callee's continuation (see _emit_chain), so the caller's
        # except/finally/__exit__ see what the callee raises.
        outermost_indirect = None
        inspecting = False
        f = frame
        while f.parent is not None:
            if not f.direct_call or (_deferred(f) and not _is_plain_call(f.parent)):
                outermost_indirect = f
            inspecting = inspecting or inspects_callers(f.code) or super_needs_own_frame(f.code)
            if inspecting and f.parent.parent is None:
                # Continuations of inlined frames are called by bytegraph's
                # code, not by their caller's frame: code that walks up the
                # stack from one would see the wrong frames.  The whole call
                # from the compiled frame runs natively instead, as in eager.
                outermost_indirect = f
            f = f.parent
        if outermost_indirect is None:
            stop = frame.head_steps[lp.head] if lp is not None else step
            return BreakPlan(stop, "chain", record, None, delegated)
        delegated = origin_of(outermost_indirect.code) is not None
        frame = outermost_indirect.parent
        index, step = frame.ip - 1, frame.step


#: names whose use in a function suggests it looks at the frames that called
#: it (``sys._getframe(1)``, ``inspect.currentframe().f_back``,
#: ``traceback.extract_stack()``) or at those an exception passed through
#: (``e.__traceback__.tb_next``, ``traceback.format_exc()``)
_FRAME_WALKING_NAMES = frozenset({"_getframe", "currentframe", "f_back", "getouterframes", "getframeinfo",
                                  "extract_stack", "format_stack", "print_stack", "walk_stack",
                                  # a traceback lists the frames an exception passed through
                                  "tb_next", "extract_tb", "format_tb", "print_tb", "walk_tb",
                                  "format_exc", "print_exc", "format_exception", "print_exception",
                                  "TracebackException", "getinnerframes"})


def inspects_callers(code) -> bool:
    """Whether ``code`` may look at its callers' frames: it names a
    frame-walking function or attribute (``inspect.stack``), or passes a
    ``stacklevel`` keyword (``warnings.warn``, ``logging``), which reports
    a caller's location.  A static, conservative reading of the code alone
    (not of the functions it calls).

    Example::

        >>> import sys
        >>> inspects_callers((lambda: sys._getframe(1)).__code__), inspects_callers((lambda x: x).__code__)
        (True, False)
    """
    names = set(code.co_names)
    return bool(names & _FRAME_WALKING_NAMES) or _reports_a_callers_place(code, names)


def _reports_a_callers_place(code, names) -> bool:
    """``inspect.stack()``, or a call with a ``stacklevel`` keyword."""
    return ("inspect" in names and "stack" in names) or \
        any(isinstance(c, tuple) and "stacklevel" in c for c in code.co_consts)


def _after_fillers(instrs, j: int) -> int:
    """The index of the first instruction from ``j`` on that is not a NULL push or a NOP."""
    while j + 1 < len(instrs) and instrs[j].opname in ("PUSH_NULL", "NOP"):
        j += 1
    return j


def _refuse_splitting_a_frame_walker(exc: Unsupported, frame) -> None:
    """A compiled frame whose code looks at frames (``sys._getframe()``,
    ``inspect.currentframe()``, ``inspect.stack()``, ``f_back``, a
    ``stacklevel``) is not split: after a break it would continue in a
    resume function, another frame, called from the transformed one.  A
    frame object taken before the break would then stop following the code
    (``f_lineno``, and from 3.13 ``f_locals``, a live view that can also
    write), and a walk up the stack from the continuation would meet one
    frame more than eager does.  The frame runs eagerly.  (An inlined
    function that walks frames is handled by the chain plan: its whole call
    runs natively.)"""
    root = frame
    while root.parent is not None:
        root = root.parent
    if _walks_frames_across(root) or _calls_a_frame_walker(root):
        refused = Unsupported(f"{exc.explanation}, in {root.code.co_name}, which looks at its own or its "
                              "callers' frames (sys._getframe, inspect, stacklevel): a continuation after a "
                              "break would be another frame", kind=FRAME_WALKING,
                              hint="the frame runs eagerly; move the frame inspection into a function of its own")
        refused.location = exc.location
        refused.stack = exc.stack
        refused.user_location = exc.user_location
        raise refused from None


#: names that hand out a frame object, which may be kept and read after a break
_FRAME_TAKING_NAMES = frozenset({"_getframe", "currentframe"})


def _walks_frames_across(frame) -> bool:
    """``frame`` (the compiled one, stopped at ``frame.ip``) took a frame
    object before the break or takes one there (it may be kept and read
    later), or may walk the stack after it (see :func:`inspects_callers`)."""
    if not inspects_callers(frame.code):
        return False
    taking, walking = [], []
    for i, ins in enumerate(frame.instrs):
        v = ins.argval
        if isinstance(v, str) and (v in _FRAME_WALKING_NAMES or v == "stack"):
            (taking if v in _FRAME_TAKING_NAMES else walking).append(i)
        elif isinstance(v, tuple) and "stacklevel" in v:
            walking.append(i)
    if any(i <= frame.ip and not _discarded_at_once(frame.instrs, i) for i in taking):
        return True
    from .break_locals import may_reach_site
    sites = taking + walking
    return bool(sites) and may_reach_site(frame.code, frame.ip, sites)


def _discarded_at_once(instrs, i: int) -> bool:
    """The frame object loaded at ``instrs[i]`` (``sys._getframe``) is called
    with constant arguments and its result popped: nothing keeps it."""
    from .bytecode import emit
    j = _after_fillers(instrs, i + 1)
    while j < len(instrs) and instrs[j].opname in ("LOAD_CONST", "LOAD_SMALL_INT", "PRECALL"):
        j = _after_fillers(instrs, j + 1)
    return j + 1 < len(instrs) and emit.is_call(instrs[j]) and instrs[j + 1].opname == "POP_TOP"


def _walks_callers(code) -> bool:
    """Like :func:`inspects_callers`, without the code that only takes its own
    frame (``sys._getframe()``, ``sys._getframe(0)``, ``inspect.currentframe()``
    with no ``f_back``): what a call of ``code`` would see of its callers."""
    names = set(code.co_names)
    if names & (_FRAME_WALKING_NAMES - _FRAME_TAKING_NAMES) or _reports_a_callers_place(code, names):
        return True
    if "_getframe" not in names:
        return False
    from .bytecode import decode, emit
    instrs = decode(code)
    for i, ins in enumerate(instrs[:-1]):
        if ins.argval == "_getframe":
            nxt = instrs[_after_fillers(instrs, i + 1)]
            own = (nxt.opname in ("LOAD_CONST", "LOAD_SMALL_INT") and nxt.argval == 0) or \
                nxt.opname == "PRECALL" or emit.is_call(nxt)
            if not own:
                return True
    return False


def _calls_a_frame_walker(frame) -> bool:
    """``frame``'s code names a global Python function that looks at its
    callers' frames (a ``caller_name()`` helper that reads
    ``sys._getframe(2)``): called from a continuation, it would see the
    transformed frame where eager has the frame's caller.  A static reading
    of the frame's globals; methods and deeper calls are not followed."""
    f_globals = getattr(frame, "f_globals", None)
    if not isinstance(f_globals, dict):
        return False
    walkers = set()
    for name in frame.code.co_names:
        fn = f_globals.get(name)
        if isinstance(fn, types.FunctionType) and _walks_callers(fn.__code__):
            walkers.add(name)
    if not walkers:
        return False
    # only a call the continuation may make: a load after the break, or in a loop around it
    from .break_locals import may_reach_site
    sites = [i for i, ins in enumerate(frame.instrs)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in walkers]
    return bool(sites) and may_reach_site(frame.code, frame.ip, sites)


def _is_plain_call(frame) -> bool:
    """``frame``'s call in progress is a call instruction (CALL, 3.13's
    CALL_KW, CALL_FUNCTION_EX), whose result is the callee's return value."""
    from .bytecode import emit
    if frame.ip <= 0:
        return False
    ins = frame.instrs[frame.ip - 1]
    return emit.is_call(ins) or ins.opname == "CALL_FUNCTION_EX"


def continued_by_caller(frame) -> bool:
    """Whether ``frame``'s continuation goes to its caller's continuation as
    a :class:`~bytegraph.resume.Continuation` that the caller's call
    instruction runs, rather than running first with its result passed on.

    Inside a caller's try/with block it must (see :func:`_deferred`);
    elsewhere it may, where the caller's call in progress is a plain call
    (``config.compose_continuations``): compiling the caller's continuation
    then inlines this one.
    """
    from . import config
    return _deferred(frame) or (config.compose_continuations and _is_plain_call(frame.parent))


def _deferred(frame) -> bool:
    """Whether ``frame``'s continuation must run as a thunk, from its caller's
    continuation re-running the call (see BreakEmitter._emit_chain): some
    caller up the chain is inside a try/with block, whose handler must see
    what the continuations inside it raise."""
    g = frame.parent
    while g is not None:
        if _in_protected_block(g):
            return True
        g = g.parent
    return False


def _in_protected_block(frame) -> bool:
    """Whether ``frame``'s current instruction (a call in progress) is inside
    a try, with or except block (it has an exception-table entry)."""
    if frame.ip <= 0:
        return False
    entry = frame.instrs[frame.ip - 1].exn
    return entry is not None and not entry.transparent


def frame_chain(innermost) -> list:
    out = []
    f = innermost
    while f is not None:
        out.append(f)
        f = f.parent
    return out[::-1]


def _first_local(frame) -> Value:
    """The value of ``frame``'s first argument now (what ``super()`` would use)."""
    from .values.base import UnrealizedLocal
    from .values.cells import EMPTY, UNREAD
    name = frame.code.co_varnames[0]
    value = frame.locals.get(name)
    if value is None and name in frame.unrealized:
        return UnrealizedLocal(frame, name)
    if isinstance(value, CellValue):
        value = value.contents if value.contents not in (EMPTY, UNREAD) else None
    if value is None or isinstance(value, NullValue):
        raise Unsupported("super() in code whose first argument is unbound or in a cell", kind="internal")
    return value


def _call_index(frame) -> int:
    """Where ``frame`` resumes to re-run its call in progress (inside its
    try/with block): the call instruction, with what belongs to it before
    (3.11's PRECALL, a KW_NAMES)."""
    from .bytecode import emit
    return emit.call_lead(frame.instrs, frame.ip - 1)


def _resume_index(frame) -> int:
    """Where a frame stopped at a call resumes natively.

    A keyword call's ``KW_NAMES`` ran in the trace already; resuming at the
    call itself would lose the names (``Cache(config=c)`` called as
    ``Cache(c)``).  The names instruction leaves the stack as it is, so the
    continuation starts there instead.
    """
    if not frame.kw_names:
        return frame.ip
    for j in range(frame.ip - 1, max(frame.ip - 3, -1), -1):
        if frame.instrs[j].opname == "KW_NAMES":
            return j
    raise Unsupported("a keyword call whose KW_NAMES instruction was not found", kind="internal")

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


def plan_break(exc: Unsupported) -> BreakPlan:
    """Decide where to split, from the first trace's failure."""
    frame = getattr(exc, "frame", None)
    if frame is None:
        raise exc
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
#: ``traceback.extract_stack()``)
_FRAME_WALKING_NAMES = frozenset({"_getframe", "currentframe", "f_back", "getouterframes", "getframeinfo",
                                  "extract_stack", "format_stack", "print_stack", "walk_stack"})


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
    if names & _FRAME_WALKING_NAMES or ("inspect" in names and "stack" in names):
        return True
    return any(isinstance(c, tuple) and "stacklevel" in c for c in code.co_consts)


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

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
from .resume import Loop, origin_of, outermost_loop


@dataclasses.dataclass
class BreakPlan:
    step: int                    # trace step before which the retrace stops
    mode: str                    # "instr", "loop" or "chain"
    record: BreakRecord
    loop: Optional[Loop] = None


def plan_break(exc: Unsupported) -> BreakPlan:
    """Decide where to split, from the first trace's failure."""
    frame = getattr(exc, "frame", None)
    if frame is None:
        raise exc
    index, step = exc.index, exc.step
    record = exc.record()
    while True:
        origin = origin_of(frame.code)
        if origin is not None and index < origin.offset:
            raise exc  # inside bytegraph's own prologue: splitting there would only recurse
        visited = set(frame.head_steps)
        lp = outermost_loop(frame.code, index, visited)
        if frame.parent is None:
            if lp is not None:
                return BreakPlan(frame.head_steps[lp.head], "loop", record, lp)
            return BreakPlan(step, "instr", record)
        # Splitting inside inlined calls needs every active call to be a plain
        # CALL whose result is the callee's return value.  A call inside a
        # try/with block of its caller is resumed *inside* that block: the
        # caller's continuation re-runs its call instruction on a thunk of the
        # callee's continuation (see _emit_chain), so the caller's
        # except/finally/__exit__ see what the callee raises.
        outermost_indirect = None
        f = frame
        while f.parent is not None:
            if not f.direct_call or (_deferred(f) and not _is_plain_call(f.parent)):
                outermost_indirect = f
            f = f.parent
        if outermost_indirect is None:
            stop = frame.head_steps[lp.head] if lp is not None else step
            return BreakPlan(stop, "chain", record)
        frame = outermost_indirect.parent
        index, step = frame.ip - 1, frame.step


def _is_plain_call(frame) -> bool:
    """``frame``'s call in progress is a CALL or CALL_FUNCTION_EX instruction."""
    return frame.ip > 0 and frame.instrs[frame.ip - 1].opname in ("CALL", "CALL_FUNCTION_EX")


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
    return frame.ip > 0 and frame.instrs[frame.ip - 1].exn is not None


def frame_chain(innermost) -> list:
    out = []
    f = innermost
    while f is not None:
        out.append(f)
        f = f.parent
    return out[::-1]

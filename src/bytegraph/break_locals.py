"""Which locals a frame's continuation takes after a graph break.

Those live at the resume point (bytecode liveness), those a later read by
name may see (``eval``, ``locals()``: every bound local), and dead ones that
still hold an object whose lifetime a program can observe (see
:func:`_keeps_alive`).  Also the frame's locals as the break's native
instruction sees them (:func:`locals_from_slots`), and the frames whose one
``locals()`` dict (before 3.13) a split would duplicate.
"""

from __future__ import annotations

import weakref
from typing import List, Optional, Tuple

from .bytecode import decode, live_locals
from .errors import Unsupported
from .resume import base_position, origin_of, uses_zero_arg_super
from .values.base import NullValue, Value
from .values.cells import CellValue


def _bound_plain_locals(frame, names) -> List[Tuple[str, Value]]:
    """``(name, value)`` for each name bound in ``frame`` (untouched root locals stay unrealized)."""
    from .values.base import UnrealizedLocal
    out = []
    for name in names:
        v = frame.locals.get(name)
        if v is not None:
            # (``names`` are plain locals: a CellValue here is a cell object the
            # user's code holds, e.g. ``c = f.__closure__[0]``, not a frame cell)
            out.append((name, v))
        elif v is None and name in frame.unrealized:
            out.append((name, UnrealizedLocal(frame, name)))
    return out


def _live_at(frame, index: int):
    base, _ = base_position(frame.code, index)
    origin = origin_of(base)
    if origin is not None and origin.kind == "loop_body":
        # an outlined loop body ends with locals(): every bound local is live
        return frozenset(frame.code.co_varnames)
    live = _LIVE.get(frame.code)
    if live is None:
        # (per code object: every break and restart in it asks again)
        if _reads_own_locals_by_name(base):
            # ``eval("y")`` reads ``y`` where no instruction does: every local
            # may be read at any point, as the frame still holds it in eager
            everything = frozenset(frame.code.co_varnames)
            live = _LIVE[frame.code] = [everything] * len(decode(frame.code))
        else:
            live = _LIVE[frame.code] = live_locals(decode(frame.code))
    return live[index]


def user_live_at(code, index: int) -> frozenset:
    """The locals the user's code may still read at ``index`` of ``code``
    (a generated code's position mapped back to the user's code it was
    copied from): plain liveness, where a loop body's final ``locals()``
    does not count, but the code after the loop does."""
    origin = origin_of(code)
    while origin is not None:
        index -= origin.offset
        code = origin.base
        origin = origin_of(code)
    instrs = decode(code)
    if not 0 <= index < len(instrs) or _reads_own_locals_by_name(code):
        return frozenset(code.co_varnames)
    live = _USER_LIVE.get(code)
    if live is None:
        live = _USER_LIVE[code] = live_locals(instrs)
    return live[index]


#: builtins and attributes that read a frame's locals by name
_LOCALS_BY_NAME = frozenset({"eval", "exec", "locals", "vars", "dir", "breakpoint", "_getframe",
                             "currentframe", "f_locals"})


#: names whose use reads the frame's one locals dict (before 3.13, see
#: BreakEmitter._refuse_splitting_a_frames_locals_dict)
_FRAME_DICT_NAMES = frozenset({"eval", "exec", "locals", "vars", "dir", "f_locals"})
_NAME_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_METHOD", "LOAD_DEREF"})


def frame_dict_sites(code) -> Tuple[int, ...]:
    """Indexes of ``code``'s instructions loading a name that reads the
    frame's locals dict (``locals``, ``eval``, ``.f_locals``, ...)."""
    sites = _SITES.get(code)
    if sites is None:
        if _FRAME_DICT_NAMES.isdisjoint(code.co_names):
            sites = ()
        else:
            sites = tuple(i for i, ins in enumerate(decode(code))
                          if ins.opname in _NAME_LOADS and ins.argval in _FRAME_DICT_NAMES)
        _SITES[code] = sites
    return sites


def may_reach_site(code, index: int, sites) -> bool:
    """A site of ``sites`` may run after instruction ``index`` of ``code``:
    one lies after it, or a loop closing after it starts at or before one."""
    if any(s > index for s in sites):
        return True
    instrs = decode(code)
    pos = {id(ins): k for k, ins in enumerate(instrs)}
    return any(ins.opname.startswith("JUMP_BACKWARD") and k > index and ins.target is not None
               and pos.get(id(ins.target), k) <= max(sites)
               for k, ins in enumerate(instrs))


def _reads_own_locals_by_name(code) -> bool:
    """``code`` names a function that reads locals by name (``eval``,
    ``locals``, ``sys._getframe().f_locals``): liveness cannot tell which."""
    return not _LOCALS_BY_NAME.isdisjoint(code.co_names)


#: code object -> live locals at each instruction index
_LIVE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: code object -> frame_dict_sites
_SITES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: the user's code object -> plain liveness (see user_live_at)
_USER_LIVE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _keeps_alive(v) -> bool:
    """A dead local still holds its object until the frame rebinds it or
    returns (a weakref or ``__del__`` sees when it goes): the continuation
    takes it too.  Graph tensors are the exception: outputting every dead
    intermediate would cost memory, and only weakrefs to them could tell."""
    from .values.tensors import TensorValue
    if v is None or isinstance(v, (TensorValue, CellValue)):
        return False
    # A class counts as a constant, but while it lives it is in its bases'
    # ``__subclasses__()``, which a later ``__bases__`` assignment walks.
    # (its type is enough to tell: an unused str loop variable guards nothing more)
    return not v.is_constant() or issubclass(v.python_type(), type)


def _callee_at(frame) -> Optional[Value]:
    """The callable of ``frame``'s current instruction, a call the break
    stopped before (None for other instructions)."""
    from .bytecode import emit
    ins = frame.instrs[frame.ip]
    if emit.is_call(ins):
        n = emit.call_operands(ins)
    elif ins.opname == "CALL_FUNCTION_EX":
        n = 2 + (ins.arg & 1) + 1
    else:
        return None
    if len(frame.stack) < n:
        return None
    first, second = frame.stack[-n], frame.stack[-n + 1]
    return second if isinstance(first, NullValue) else first   # (a NULL on either side)


def _reads_locals_natively(frame) -> bool:
    """The break's native instruction in ``frame`` is a call that reads the
    frame's locals by name (``eval``, ``locals()``, see
    :func:`~bytegraph.values.frame_blind.reads_caller_locals`): every bound
    local must be in the frame that runs it, not only the live ones."""
    from .values.frame_blind import reads_caller_locals
    callee = _callee_at(frame)
    return callee is not None and reads_caller_locals(callee)


class NativeSlotValue(Value):
    """A local of the transformed frame as the break's native instruction
    (a ``STORE_FAST``) left it: read from the slot when the continuation is
    called, after that instruction, never staged before it."""

    __slots__ = ()
    read_late = True

    def __init__(self, name: str):
        from .sources import LocalSource
        super().__init__(LocalSource(name))

    def reconstruct(self, cg):
        self.source.emit_load(cg)


def locals_from_slots(cg, root, st, ins):
    """Make the frame look like the user's to its native instruction, and
    take the locals back from their slots after it.

    The instruction may read the frame's locals by name (``eval``,
    ``locals()``, a callee's ``sys._getframe(1).f_locals``): bytegraph's
    own temporaries and parameters must not be among them, so they are
    unbound first.  From 3.13 (PEP 667) a callee may also write them
    through ``f_locals``: the continuation takes each local from its slot
    (where ``BreakEmitter._store_locals`` put it), as the instruction left it.

    Returns the locals for the continuation, or None where something
    after the instruction still reads a temporary (a handler's saved
    exception, a cell made in the trace, the first argument for
    zero-argument ``super()``): then nothing changes."""
    code = root.code
    if st.exc_levels or any(not (isinstance(c, CellValue) and c.is_root_cell) for c in st.cells) \
            or uses_zero_arg_super(code) or ins.opname == "LOAD_FAST":
        return None
    names = [f"___bg_tmp{i}" for i in range(cg._n_temps)]
    names += [n for n in code.co_varnames if n.startswith("___bg_") and n not in names]
    for name in names:
        # (bound or not: a store first makes the delete safe)
        cg.emit("LOAD_CONST", None)
        cg.emit("STORE_FAST", name)
        cg.emit("DELETE_FAST", name)
    cg._temps.clear()
    cg._tensor_temps.clear()
    return [(n, NativeSlotValue(n)) for n, _ in st.locals]


def refuse_splitting_a_frames_locals_dict(frames, plan) -> None:
    """Before 3.13 a frame has one ``locals()`` dict, which every read of
    its locals by name refreshes and returns (``locals()``, ``vars()``,
    ``dir()``, ``exec``/``eval`` without a mapping).  A continuation is
    another frame, with a dict of its own: if the frame made its dict
    before the break (in the trace, or by the break's native instruction)
    and may read it again, or an outlined loop reads it per iteration,
    the frame runs eagerly."""
    for f in frames:
        sites = frame_dict_sites(f.code)
        if not sites:
            continue
        made = f.locals_dict is not None or _reads_locals_natively(f)
        again = may_reach_site(f.code, f.ip, sites)
        per_iteration = plan.mode == "loop" and f.parent is None and any(i in plan.loop.members for i in sites)
        if (made and again) or per_iteration:
            refused = Unsupported(f"{plan.record.explanation}, in a frame that reads its locals() dict "
                                  "again after it (before 3.13 one dict per frame)", kind="frame_locals",
                                  hint="the frame runs eagerly")
            refused.location = plan.record.location
            raise refused

"""Code that continues a frame after a graph break.

Two kinds of generated code objects, both built from a *base* code object
(the user's code, or an outlined loop body) and cached:

* a **resume function** (:func:`resume_code`) is the base code with a short
  prologue: take the live stack values and locals as arguments, push the
  stack (``PUSH_NULL`` for NULL slots), jump to the resume instruction.
  Because 3.11's exception table is static, ``try`` regions stay valid in the
  copy.  Every cell of the base frame arrives through the closure (C9):
  ``co_freevars`` lists them all and ``co_cellvars`` is empty.
* an **outlined loop body** (:func:`loop_body_code`) runs one iteration of a
  loop and returns ``(status, payload, locals())``: status 0 continue,
  1 leave the loop (payload: exit index and the stack there), 2 return
  ``payload``.  The loop itself
  stays native in the caller, so a break inside the body never makes
  iterations nest (DESIGN.md §8).

Both receive locals either as named arguments (resume functions made by a
traced break, where the bound locals are known) or as one ``state`` dict
(around outlined loops, where later iterations may bind more names).
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import types
from typing import Dict, List, Optional, Sequence, Tuple

from . import config
from .bytecode import SPEC, assemble, copy_instrs, decode, emit, instr, natural_loops, stack_depths, successors
from .errors import InternalError


class _Unbound:
    """Marks a local with no value in a state dict."""

    __repr__ = lambda self: "<unbound>"  # noqa: E731


UNBOUND = _Unbound()

STATE_ARG = "___bg_state"
ITEM_ARG = "___bg_item"
EXC_ARG = "___bg_exc"


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a generated code object's instructions come from."""

    base: types.CodeType   # the base code (never itself a resume function)
    offset: int            # generated index minus base index, for the base's instructions the code holds
    kind: str              # "resume" or "loop_body"
    loop_exits: Tuple[int, ...] = ()   # loop bodies: base index of each exit
    #: ``(start, end)`` of the prologue block that unpacks the state dict
    state_block: Optional[Tuple[int, int]] = None
    #: instructions of bytegraph's own prologue (the base's code follows them)
    prologue: int = 0


_ORIGINS: Dict[types.CodeType, Origin] = {}
_CACHE: Dict[tuple, types.CodeType] = {}


def base_position(code: types.CodeType, index: int) -> Tuple[types.CodeType, int]:
    """Map an instruction index of ``code`` to ``(base code, index in base)``."""
    origin = _ORIGINS.get(code)
    if origin is not None and origin.kind == "resume":
        return origin.base, index - origin.offset
    return code, index


def origin_of(code: types.CodeType) -> Optional[Origin]:
    return _ORIGINS.get(code)


def cell_names(code: types.CodeType) -> Tuple[str, ...]:
    """Every cell of ``code``'s frame, in the order generated code receives them."""
    out = list(code.co_cellvars)
    out += [n for n in code.co_freevars if n not in out]
    return tuple(out)


def plain_locals(code: types.CodeType) -> List[str]:
    """The user's non-cell locals of ``code`` (bytegraph's own ``___bg_*`` names excluded)."""
    cells = set(cell_names(code))
    return [n for n in code.co_varnames if n not in cells and not n.startswith("___bg_")]


#: the leading parameter of generated code whose base uses zero-argument super()
SUPER_SELF_ARG = "___bg_self"


class Continuation:
    """The rest of an inner frame after a graph break, called by its caller.

    When a break stops a chain of inlined calls, the caller's continuation
    resumes *at* its call instruction with one of these in place of the
    callee (the arguments left on the stack are placeholders it ignores).
    Run natively, it calls the inner frame's resume function through its
    runner; traced (when the caller's continuation is compiled), the resume
    function is inlined, so the code after the break in both frames makes
    one graph.  It is called once, and drops its references then: the resume
    function's frame is the only holder of the inner frame's values, as the
    one eager frame was.

    Example::

        >>> c = Continuation(lambda fn, *a: fn(*a), lambda a, b: a + b, 1, 2)
        >>> c(None, None)     # the caller's call re-run: placeholders ignored
        3
    """

    __slots__ = ("runner", "fn", "args")

    def __init__(self, runner, fn, *args):
        self.runner, self.fn, self.args = runner, fn, args

    def __call__(self, /, *_placeholders, **_keywords):
        if not hasattr(self.runner, "select"):
            runner, fn, args = self.runner, self.fn, self.args
            self.release()
            return runner(fn, *args)
        return _continuation_caller(len(self.args))(self)

    def release(self) -> None:
        """Drop the references (once run, or once a compiled caller inlined it)."""
        self.runner = self.fn = self.args = None


_CALLERS: Dict[int, object] = {}


def _continuation_caller(n: int):
    """``call(cont)`` for a continuation of ``n`` arguments: empties ``cont``,
    then calls its resume function with the arguments moved onto the stack
    one by one (each local rebound to None once pushed), so that the resume
    function's frame holds them alone, as the one eager frame did: a ``del``
    or an exhausted iterator there frees the object, as in eager.  (A
    ``*args`` call would keep a tuple of them alive for the whole call.)"""
    call = _CALLERS.get(n)
    if call is None:
        names = [f"a{i}" for i in range(n)]
        unpack = "".join(f"{a}, " for a in names)
        moved = ", ".join(f"({a}, {a} := None)[0]" for a in names)
        src = (f"def call(cont):\n"
               f"    runner, fn, ({unpack}) = cont.runner, cont.fn, cont.args\n"
               f"    cont.release()\n"
               f"    target = runner.select(fn, {', '.join(names)})\n"
               f"    return target({moved})\n")
        namespace: dict = {}
        exec(compile(src, "<bytegraph continuation>", "exec"), namespace)
        call = _CALLERS[n] = namespace["call"]
    return call


def uses_zero_arg_super(code: types.CodeType) -> bool:
    """``code`` may call ``super()`` without arguments (which reads its first local).

    Example::

        >>> class A:
        ...     def f(self):
        ...         return super().__repr__()
        >>> uses_zero_arg_super(A.f.__code__), uses_zero_arg_super((lambda: 0).__code__)
        (True, False)
    """
    return "__class__" in code.co_freevars and "super" in code.co_names and code.co_argcount > 0


def super_needs_own_frame(code: types.CodeType) -> bool:
    """``code`` may call ``super()`` without arguments and has no positional
    parameter: CPython answers "super(): no arguments" there, but in a
    generated function (which takes parameters) it would read one of those.
    Or it rebinds its first argument, which ``super()`` reads.  Such code is
    never continued in a generated function.

    Example::

        >>> class A:
        ...     def f():
        ...         super()
        >>> super_needs_own_frame(A.f.__code__)
        True
    """
    if "__class__" not in code.co_freevars or "super" not in code.co_names:
        return False
    return code.co_argcount == 0 or _rebinds_first_argument(code)


def _rebinds_first_argument(code: types.CodeType) -> bool:
    """``code`` assigns or deletes its first argument (``self = self.other``).
    Zero-argument ``super()`` reads that local's value *now*; a generated
    function would hand it the value at the break (``___bg_self``)."""
    from .bytecode import decode
    first = code.co_varnames[0]
    return any(ins.opname in ("STORE_FAST", "DELETE_FAST", "STORE_DEREF", "DELETE_DEREF",
                              "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST")
               and (ins.argval == first or (isinstance(ins.argval, tuple) and first in ins.argval))
               for ins in decode(code))


def _identifier_params(params: List[str]) -> List[str]:
    """Parameters renamed where a local's name is not an identifier.

    Tools give locals such names (pytest's assertion rewriting makes
    ``@py_assert1``, a 3.11 comprehension has ``.0``); a local is fine, but a
    parameter must be an identifier for ``inspect.signature`` and the
    generated guard.  The prologue moves each renamed parameter into the
    local of the user's name (see ``_Builder.assemble``), so ``locals()``
    shows the user's name and the code keeps using it.
    """
    return [p if p.isidentifier() else f"___bg_p{i}" for i, p in enumerate(params)]


_FAST_OPS = frozenset({"LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"})


class _Builder:
    """Shared mechanics: copy the base, add a prologue, assemble."""

    def __init__(self, base: types.CodeType, start: int = 0, keep=None):
        self.base = base
        #: the base's instructions from ``start`` on (a resume function holds only
        #: what can run after its resume point); ``keep``: the indexes that can
        #: run, others become NOPs
        self.first = start
        self.body = copy_instrs(decode(base)[start:])
        if keep is not None:
            for k, ins in enumerate(self.body, start):
                if k not in keep:
                    ins.opname, ins.argval, ins.arg, ins.target, ins.exn = "NOP", None, None, None, None
                    ins.opcode = SPEC.default_opcode["NOP"]
        for ins in self.body:
            if ins.opname in ("MAKE_CELL", "COPY_FREE_VARS", "RESUME"):
                ins.opname, ins.argval, ins.arg = "NOP", None, None
            else:
                break
        # From 3.12 a plain LOAD_FAST trusts the compiler's proof that the
        # local is bound; entered in the middle, with locals handed over, the
        # proof no longer holds: every load checks (an unbound local raises
        # instead of crashing the interpreter).
        checked = SPEC.default_opcode["LOAD_FAST"]
        for ins in self.body:
            if ins.opname == "LOAD_FAST":
                ins.opcode = checked
        first = next((i.positions for i in self.body if i.positions and i.positions.lineno), None)
        self.positions = first
        self.prologue: list = []
        self.epilogue: list = []
        self.params: List[str] = []
        self.state_start = self.state_end = None
        #: zero-argument super() reads the frame's first local: a generated
        #: function of such code takes the original first argument first
        self.super_self = uses_zero_arg_super(base)

    def own_cells_stay_local(self) -> None:
        """Keep ``UnboundLocalError`` for the base frame's own empty cells.

        Generated code receives every cell through its closure (free
        variables), and CPython reports an empty free variable as a
        ``NameError``.  Each read or delete of one of the base's own cells
        gets a handler that raises the ``UnboundLocalError`` the base code
        would have raised there (same line; the NameError is dropped before
        it becomes anyone's context), into the instruction's own handler.
        """
        own = set(self.base.co_cellvars)
        if not own:
            return
        depths = _depths_of(self.base)
        from .bytecode import ExnEntry
        for k, ins in enumerate(self.body, self.first):
            if ins.opname not in ("LOAD_DEREF", "DELETE_DEREF") or ins.argval not in own or depths[k] < 0:
                continue
            pos = ins.positions
            block = [instr("POP_TOP", positions=pos, exn=ins.exn),
                     *emit.with_null([instr("LOAD_CONST", UnboundLocalError, positions=pos, exn=ins.exn)],
                                     positions=pos, exn=ins.exn),
                     instr("LOAD_CONST", f"cannot access local variable '{ins.argval}' where it is not "
                                         "associated with a value", positions=pos, exn=ins.exn),
                     *emit.call(1, positions=pos, exn=ins.exn),
                     instr("RAISE_VARARGS", arg=1, positions=pos, exn=ins.exn)]
            self.epilogue.extend(block)
            ins.exn = ExnEntry(block[0], depths[k], False)

    def emit(self, opname, argval=None, *, arg=None, target=None, into=None):
        ins = instr(opname, argval, arg=arg, target=target, positions=self.positions)
        (self.prologue if into is None else into).append(ins)
        return ins

    def start(self) -> None:
        n_cells = len(cell_names(self.base))
        if n_cells:
            self.emit("COPY_FREE_VARS", arg=n_cells)
        self.emit("RESUME", arg=0)

    def unpack_state(self) -> None:
        """Prologue: bind each plain local from the state dict (unbound if absent).

        The tracer skips this block and reads the dict's entries lazily (see
        ``Trace._enter_with_state``); it runs as written only natively."""
        self.state_start = len(self.prologue)
        for name in plain_locals(self.base):
            self.emit("LOAD_FAST", STATE_ARG)
            self.emit("LOAD_METHOD", "get")
            self.emit("LOAD_CONST", name)
            self.emit("LOAD_CONST", UNBOUND)
            self.prologue.extend(emit.call(2, positions=self.positions))
            self.emit("STORE_FAST", name)
            self.emit("LOAD_FAST", name)
            self.emit("LOAD_CONST", UNBOUND)
            self.emit("IS_OP", arg=0)
            skip = instr("NOP", positions=self.positions)
            self.emit("POP_JUMP_IF_FALSE", target=skip)
            self.emit("DELETE_FAST", name)
            self.prologue.append(skip)
        self.emit("DELETE_FAST", STATE_ARG)
        self.state_end = len(self.prologue)

    def push_stack(self, null_mask: Sequence[bool], names: Sequence[Optional[str]], exc_slots=()) -> None:
        """Push the stack from the parameters; each slot of ``exc_slots`` (a
        handler's saved previous exception) is made by ``PUSH_EXC_INFO`` of
        the handled exception, its parameter ``___bg_exc<j>``: the frame is
        inside that handler again, as when the break happened."""
        for i, (is_null, name) in enumerate(zip(null_mask, names)):
            if i in exc_slots:
                exc = f"{EXC_ARG}{exc_slots.index(i)}"
                self.emit("LOAD_FAST", exc)
                self.emit("DELETE_FAST", exc)
                self.emit("PUSH_EXC_INFO")
                self.emit("POP_TOP")
            elif is_null:
                self.emit("PUSH_NULL")
            elif name is None:
                self.emit("LOAD_CONST", None)
            else:
                self.emit("LOAD_FAST", name)
                self.emit("DELETE_FAST", name)

    def assemble(self, name: str, origin_kind: str, loop_exits=()) -> types.CodeType:
        # (``co_name`` stays the base's: tracebacks and ``f_code.co_name`` show
        # the user's function; the qualified name tells the generated part)
        base = self.base
        cells = cell_names(base)
        params = ([SUPER_SELF_ARG] if self.super_self else []) + list(self.params)
        original = params
        params = _identifier_params(params)
        moves = []
        for user, param in zip(original, params):
            if user != param:
                moves += [instr("LOAD_FAST", param, positions=self.positions),
                          instr("STORE_FAST", user, positions=self.positions),
                          instr("DELETE_FAST", param, positions=self.positions)]
        if moves:
            at = next(k for k, ins in enumerate(self.prologue) if ins.opname == "RESUME") + 1
            self.prologue[at:at] = moves
            if self.state_start is not None and self.state_start >= at:
                self.state_start += len(moves)
                self.state_end += len(moves)
        instrs = self.prologue + self.body + self.epilogue
        varnames = params + [n for n in base.co_varnames if n not in cells and n not in params]
        flags = base.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
        if cells:
            flags |= inspect.CO_NESTED
        code = assemble(instrs, base,
                        co_varnames=tuple(varnames), co_cellvars=(), co_freevars=cells,
                        co_argcount=len(params), co_posonlyargcount=0, co_kwonlyargcount=0,
                        co_flags=flags, co_name=base.co_name, co_qualname=f"{base.co_qualname}.<{name}>")
        block = (self.state_start, self.state_end) if self.state_start is not None else None
        if config.raise_on_error and len(decode(code)) != len(instrs):
            # positions in ``code`` map to the base's by a fixed offset: the
            # assembler must not have added or dropped instructions
            raise InternalError(f"{name} of {base.co_qualname}: {len(instrs)} instructions assembled into "
                                f"{len(decode(code))}")
        _ORIGINS[code] = Origin(base, len(self.prologue) - self.first, origin_kind, tuple(loop_exits), block,
                                len(self.prologue))
        return code


def resume_code(code: types.CodeType, index: int, null_mask: Tuple[bool, ...],
                local_names: Optional[Tuple[str, ...]], exc_slots: Tuple[int, ...] = ()) -> types.CodeType:
    """Resume ``code`` at instruction ``index`` with a stack of ``len(null_mask)`` slots.

    ``local_names`` are the locals passed as arguments after the stack values;
    ``None`` means one state dict instead.  ``exc_slots``: stack slots of the
    handlers the frame resumes inside (see ``_Builder.push_stack``); the
    handled exceptions are passed after the stack values, instead of them.

    Example (the arguments of the function this returns)::

        resume_code(f.__code__, 12, (False,), ("x", "y"))  # (___bg_s0, x, y)
        resume_code(f.__code__, 30, (False, False), ("x",), (0,))  # (___bg_s1, ___bg_exc0, x)
    """
    base, base_index = base_position(code, index)
    if not 0 <= base_index < len(decode(base)):
        # a handler of bytegraph's own epilogue (see own_cells_stay_local):
        # no instruction of the base to resume at
        from .errors import Unsupported
        raise Unsupported("a break whose handler is bytegraph's own code", kind="generated_handler")
    key = ("resume", base, base_index, null_mask, local_names, exc_slots)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    start, keep = _runnable_from(base, base_index)
    b = _Builder(base, start, keep)
    b.own_cells_stay_local()
    stack_names = [None if is_null or i in exc_slots else f"___bg_s{i}" for i, is_null in enumerate(null_mask)]
    b.params = [n for n in stack_names if n is not None]
    b.params += [f"{EXC_ARG}{j}" for j in range(len(exc_slots))]
    b.start()
    if local_names is None:
        b.params.append(STATE_ARG)
        b.unpack_state()
    else:
        b.params.extend(local_names)
    b.push_stack(null_mask, stack_names, exc_slots)
    b.emit("JUMP", target=b.body[base_index - start])
    out = b.assemble(f"resume_at_{base_index}", "resume")
    _CACHE[key] = out
    return out


_DEPTHS: Dict[types.CodeType, list] = {}


def _depths_of(code: types.CodeType) -> list:
    """``stack_depths`` of ``code``'s instructions (per code: every resume
    function made from it asks again)."""
    hit = _DEPTHS.get(code)
    if hit is None:
        if len(_DEPTHS) > 1024:
            _DEPTHS.clear()
        hit = _DEPTHS[code] = stack_depths(decode(code))
    return hit


def _runnable_from(base: types.CodeType, index: int):
    """``(start, keep)``: the first instruction a resume function at ``index``
    of ``base`` needs, and the indexes it can reach (jumps, fall-through and
    exception handlers).  Resuming never runs what comes before in straight
    code, so a frame with N breaks does not copy (and decode, analyse,
    assemble) its whole code N times: each resume function holds the part
    of the code that can still run."""
    from .bytecode.analysis import _reachable
    instrs = decode(base)
    at = {id(ins): k for k, ins in enumerate(instrs)}
    keep = _reachable(instrs, at, index, True)
    # The ``END_FOR`` pad (3.12+) in front of a kept FOR_ITER's exit never
    # runs, but it must stay where it is: without it the assembler inserts a
    # pad of its own (and a jump over it), which would shift every later
    # instruction off the position ``base_position`` maps it to.
    for k in [k for k in keep if instrs[k].opname == "FOR_ITER"]:
        target = at[id(instrs[k].target)]
        keep.update(range(max(0, target - SPEC.for_iter_skips), target))
    start = min(keep)
    return start, keep


# --------------------------------------------------------------------------
# loops


@dataclasses.dataclass(frozen=True)
class Loop:
    head: int          # loop head (FOR_ITER for ``for`` loops)
    end: int           # the loop's last instruction in layout order
    is_for: bool
    #: the loop's instructions (see bytecode.natural_loops): from 3.12 they
    #: need not be contiguous
    members: frozenset = frozenset()

    def __contains__(self, index: int) -> bool:
        return index in self.members


_LOOPS: Dict[int, tuple] = {}


def loops_of(code: types.CodeType) -> List[Loop]:
    """The loops of ``code``, outermost first."""
    hit = _LOOPS.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    instrs = decode(code)
    loops = [Loop(h, max(m), instrs[h].opname == "FOR_ITER", m) for h, m in natural_loops(instrs)]
    if len(_LOOPS) > 4096:
        _LOOPS.clear()
    _LOOPS[id(code)] = (code, loops)
    return loops


def outermost_loop(code: types.CodeType, index: int, visited_heads) -> Optional[Loop]:
    """The outermost outlinable loop of ``code`` containing ``index`` whose head this frame reached."""
    for lp in loops_of(code):
        if index in lp and lp.head in visited_heads and _outlinable(code, lp):
            return lp
    return None


def _outlinable(code: types.CodeType, lp: Loop) -> bool:
    instrs = decode(code)
    index = {id(i): k for k, i in enumerate(instrs)}
    for k in lp.members:
        ins = instrs[k]
        if ins.opname in ("YIELD_VALUE", "RETURN_GENERATOR", "SEND"):
            return False
        if ins.exn is not None and not ins.exn.transparent and index[id(ins.exn.target)] not in lp:
            return False  # a try/with around the loop: its handler lives outside the body
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return False
    return not _leaves_inside_a_with(instrs, lp, index)


def _leaves_inside_a_with(instrs, lp: Loop, index) -> bool:
    """Whether some way out of ``lp`` leaves a ``with`` statement of the loop
    before its ``__exit__`` is called, the bound exit still on the stack.

    The body would hand that exit to its caller in the exit's payload, and the
    exit of a ``@contextmanager`` entered in the trace cannot be rebuilt.  It
    happens in the do-while loop CPython makes of a ``while`` body: a
    ``continue`` inside a ``with`` goes back to the loop's test at the top, so
    the exit call before that jump lies outside the body's natural loop.
    """
    depths = stack_depths(instrs)
    # BEFORE_WITH leaves the exit where the context manager was
    exit_slots = [depths[k] - 1 for k in lp.members if instrs[k].opname == "BEFORE_WITH"]
    if not exit_slots:
        return False
    first = lp.head + 1 if lp.is_for else lp.head
    # the ways out of normal flow (a handler re-raising with the exit on the
    # stack leaves by exception, which a caller's trace never rebuilds)
    seen, work = set(), [first]
    while work:
        k = work.pop()
        if k in seen or k not in lp:
            continue
        seen.add(k)
        for t in successors(instrs, index, k, with_exn=False):
            if t == lp.head or (t in lp and t >= first):
                work.append(t)
            elif any(depths[t] > slot for slot in exit_slots):
                return True
    return False


def loop_body_code(code: types.CodeType, lp: Loop, null_mask: Tuple[bool, ...]) -> types.CodeType:
    """One iteration of loop ``lp`` of ``code`` as a function.

    Arguments: the stack slots below the loop (``null_mask``; for ``for``
    loops the iterator slot is passed as None and never touched), the
    iteration's item (``for`` loops), and the state dict.  Returns
    ``(status, payload, locals())``.  ``Origin.loop_exits`` lists the base
    index of each exit, the payload of status 1.
    """
    key = ("loop", code, lp, null_mask)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if any(null_mask):
        # the body's exits hand the stack back in a tuple, which cannot hold NULL
        from .errors import Unsupported
        raise Unsupported("a loop with a NULL stack slot below it", kind="internal")
    b = _Builder(code)
    b.own_cells_stay_local()
    instrs = b.body
    depths = stack_depths(decode(code))
    index = {id(i): k for k, i in enumerate(instrs)}
    first = lp.head + 1 if lp.is_for else lp.head
    stack_names = [None if is_null else f"___bg_s{i}" for i, is_null in enumerate(null_mask)]
    b.params = [n for n in stack_names if n is not None]
    if lp.is_for:
        stack_names[-1] = None  # the iterator: the loop header stays in the caller
        b.params = [n for n in stack_names if n is not None] + [ITEM_ARG]
    b.params.append(STATE_ARG)
    b.start()
    b.unpack_state()
    b.push_stack(null_mask, stack_names)
    if lp.is_for:
        b.emit("LOAD_FAST", ITEM_ARG)
        b.emit("DELETE_FAST", ITEM_ARG)
    b.emit("JUMP", target=instrs[first])

    exits: List[int] = []
    blocks: Dict[object, object] = {}

    def leave(status: int, payload_index: Optional[int], depth: int):
        """A block that empties the stack and returns ``(status, payload, locals())``.

        Leaving to an exit (status 1), the payload is ``(exit index, stack)``:
        the stack the exit expects, as the body has it.  The caller's copy of
        the slots below the loop is not enough: a jump out of an inner loop of
        an already outlined body may carry a value in them (its ``return``
        value, moved below the popped iterators by ``SWAP``)."""
        key2 = (status, payload_index)
        if key2 in blocks:
            return blocks[key2]
        start = b.emit("NOP", into=b.epilogue)
        if status == 1:
            b.emit("BUILD_TUPLE", arg=depth, into=b.epilogue)
            b.emit("LOAD_CONST", payload_index, into=b.epilogue)
            b.emit("SWAP", arg=2, into=b.epilogue)
            b.emit("BUILD_TUPLE", arg=2, into=b.epilogue)
            b.emit("LOAD_CONST", status, into=b.epilogue)
            b.emit("SWAP", arg=2, into=b.epilogue)
        else:
            for _ in range(depth):
                b.emit("POP_TOP", into=b.epilogue)
            b.emit("LOAD_CONST", status, into=b.epilogue)
            b.emit("LOAD_CONST", payload_index, into=b.epilogue)
        b.epilogue.extend(emit.with_null([instr("LOAD_CONST", builtins.locals, positions=b.positions)],
                                         positions=b.positions))
        b.epilogue.extend(emit.call(0, positions=b.positions))
        b.emit("BUILD_TUPLE", arg=3, into=b.epilogue)
        b.emit("RETURN_VALUE", into=b.epilogue)
        blocks[key2] = start
        return start

    def exit_to(target_index: int):
        if target_index not in exits:
            exits.append(target_index)
        return leave(1, exits.index(target_index), depths[target_index])

    falls_out = []
    for k in sorted(lp.members):
        if k < first:
            continue
        ins = instrs[k]
        if ins.target is not None and ins.is_jump:
            t = index[id(ins.target)]
            if t == lp.head:
                ins.target = leave(0, None, depths[lp.head])
            elif t not in lp or t < first:
                ins.target = exit_to(t)
        elif ins.opname == "RETURN_VALUE":
            ret = b.emit("STORE_FAST", "___bg_ret", into=b.epilogue)
            for _ in range(depths[k] - 1):
                b.emit("POP_TOP", into=b.epilogue)
            b.emit("LOAD_CONST", 2, into=b.epilogue)
            b.emit("LOAD_FAST", "___bg_ret", into=b.epilogue)
            b.emit("LOAD_CONST", None, into=b.epilogue)
            b.emit("BUILD_TUPLE", arg=3, into=b.epilogue)
            b.emit("RETURN_VALUE", into=b.epilogue)
            ins.opname, ins.argval, ins.arg, ins.target = "JUMP", None, None, ret
        if ins.opname not in SPEC.terminators and k + 1 not in lp:
            falls_out.append(k)   # (a conditional back-edge falls through out of the loop)
    for k in reversed(falls_out):
        b.body.insert(k + 1, b.emit("JUMP", target=exit_to(k + 1), into=[]))
    out = b.assemble(f"loop_body_at_{lp.head}", "loop_body", exits)
    _CACHE[key] = out
    return out

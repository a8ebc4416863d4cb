"""Graph breaks: the code around a split.

:func:`bytegraph.break_plan.plan_break` decides where the compiled frame
stops (``instr``, ``loop`` or ``chain``; DESIGN.md §5, §8).  The trace is
then run again from the start with a stop at that step (restart, not
unwind: the second pass stops *before* the instruction with a consistent
state), and :class:`BreakEmitter` writes the transformed code: the graph's
results put back into the frame's slots and stack, the instruction run
natively (or the loop run natively with an outlined body per iteration, or
the chain of inlined frames continued innermost first), and the calls of
the resume functions that carry on after it.
"""

from __future__ import annotations

import inspect
import types
from typing import List, Optional, Tuple

from .bytecode import SPEC, decode, emit, instr, stack_effect
from .break_locals import (NativeSlotValue, _bound_plain_locals, _keeps_alive, _live_at, _reads_locals_natively,
                           locals_from_slots, refuse_splitting_a_frames_locals_dict, user_live_at)
from .call_frames import stand_in
from .break_plan import BreakPlan, _call_index, _first_local, _resume_index, continued_by_caller, frame_chain
from .errors import Unsupported
from .resume import (STATE_ARG, SUPER_SELF_ARG, Continuation, cell_names, loop_body_code, origin_of, plain_locals,
                     resume_code)
from .values.base import NullValue, Value
from .values.functions import _make_function



class FrameState:
    """What one frame hands to its continuation: stack slots, locals, cells."""

    def __init__(self, frame, index: int, stack: List[Value], local_names=None, state_dict=False,
                 all_locals=False):
        self.frame = frame
        self.index = index
        self.stack = stack
        self.null_mask = tuple(isinstance(v, NullValue) for v in stack)
        cells = set(cell_names(frame.code))
        if all_locals:
            # (the continuation runs a call that reads them by name)
            local_names = [n for n in plain_locals(frame.code) if n not in cells]
        if local_names is None:
            live = _live_at(frame, index)
            local_names = [n for n in plain_locals(frame.code) if n not in cells and (
                n in live or n in frame.unrealized or _keeps_alive(frame.locals.get(n)))]
        self.locals = _bound_plain_locals(frame, local_names)
        if frame.state_source is not None:
            # A local the user's code may still read but that is unbound here
            # was absent from the state dict: a later call's dict may hold it
            # (bound by an earlier iteration of an outlined loop), and the
            # continuation would lose it, so that call must not reuse this entry.
            from .guards import Guard
            bound = {n for n, _ in self.locals}
            live = user_live_at(frame.code, index)
            for name in local_names:
                if name not in bound and name not in frame.state_names and name in live:
                    frame.guards.add(Guard("DICT_CONTAINS", frame.state_source, (name, False)))
        self.state_dict = state_dict
        #: a local the native instruction deletes: bound in the frame's slot
        #: for it (see BreakEmitter._store_locals), not handed on
        self.deleted_natively: List[Tuple[str, Value]] = []
        self.cells = [frame.locals[n] for n in cell_names(frame.code)]
        #: ``(stack index of the saved previous exception, exception)`` of each
        #: handler the frame is in, outermost first (see Frame.exc_depths)
        self.exc_levels = list(zip(frame.exc_depths, frame.exc_stack))

    def values(self) -> List[Value]:
        out = [v for v in self.stack if not isinstance(v, NullValue)]
        out += [v for _, v in self.locals]
        out += [v for _, v in self.deleted_natively]
        out += self.cells
        out += [exc for _, exc in self.exc_levels]
        return out


class BreakEmitter:
    """Writes the part of the transformed code after the graph for one plan."""

    def __init__(self, cg, trace, plan: BreakPlan, runner_for):
        self.cg = cg
        self.trace = trace
        self.plan = plan
        self.runner_for = runner_for
        self.root = trace.root
        self.frames = frame_chain(trace.stopped_frame)
        #: the chain's glue runs the innermost frame's call (see _runs_call_first)
        self.call_first = False

    # -- what must survive --------------------------------------------------
    def states(self) -> List[FrameState]:
        plan = self.plan
        handling = [f for f in self.frames[1:] if f.exc_stack] if plan.mode == "chain" else \
            ([self.root] if plan.mode == "loop" and self.root.exc_stack else [])
        if handling:
            # Only the root frame's own handlers are re-established (_emit_instr):
            # inlined frames' continuations would each need theirs around the
            # calls of the frames inside them.
            inside = Unsupported(f"{plan.record.explanation}, inside an exception handler of an inlined call",
                                 kind="break_in_handler",
                                 hint="the frame runs eagerly; move the construct out of the except/finally block")
            inside.location = plan.record.location
            raise inside
        if not SPEC.locals_snapshot:
            refuse_splitting_a_frames_locals_dict(self.frames if plan.mode == "chain" else [self.root], plan)
        if plan.mode == "chain":
            # each frame resumes at its current instruction; outer frames get the
            # inner frame's result as an extra stack slot at run time (_emit_chain)
            self.call_first = self._runs_call_first()
            inner = self.frames[-1]
            return [FrameState(f, _call_index(f) if f is not inner and continued_by_caller(self.frames[i + 1])
                               else inner.ip + 1 if self.call_first and f is inner
                               else _resume_index(f), list(f.stack),
                               all_locals=f is inner and not self.call_first and _reads_locals_natively(f))
                    for i, f in enumerate(self.frames)]
        root = self.root
        if plan.mode == "loop":
            return [FrameState(root, root.ip, list(root.stack), plain_locals(root.code), state_dict=True)]
        # instr: locals the native instruction reads (a break may land on a
        # LOAD_FAST, see Frame.break_next), and those live at any successor (or
        # the handler)
        names = set(_live_at(root, root.ip))
        for s in self._successors():
            names |= _live_at(root, s)
        ins = root.instrs[root.ip]
        if ins.exn is not None:
            names |= _live_at(root, root.index_of[id(ins.exn.target)])
        cells = set(cell_names(root.code))
        if _reads_locals_natively(root):
            names |= set(plain_locals(root.code))
        # The native instruction may itself write a local (a break left
        # pending by the previous instruction lands on ``STORE_FAST`` or
        # ``DELETE_FAST``): the continuation gets that slot as the native
        # instruction left it, not the trace's value from before it.
        written = ins.argval if ins.opname in ("STORE_FAST", "DELETE_FAST") else None
        local_names = [n for n in plain_locals(root.code) if n not in cells and n != written and (
            n in names or n in root.unrealized or _keeps_alive(root.locals.get(n)))]
        st = FrameState(root, root.ip, list(root.stack), local_names)
        if ins.opname == "STORE_FAST" and (written in names or _keeps_alive(root.stack[-1] if root.stack else None)):
            # (dead, it still holds what it stores until the frame rebinds it:
            # ``a, b = b, a`` then ``a = None`` frees the old ``b`` only there)
            st.locals.append((written, NativeSlotValue(written)))
        elif ins.opname == "DELETE_FAST" and (written in root.locals or written in root.unrealized):
            st.deleted_natively = _bound_plain_locals(root, [written])
        return [st]

    def _runs_call_first(self) -> bool:
        """Whether the chain's glue code runs the innermost frame's unsupported
        call itself, so that frame's continuation starts after it.

        A continuation that started at the unsupported call would break at
        once wherever it was inlined; starting after it, it can be inlined
        into its caller's (see :func:`~bytegraph.break_plan.continued_by_caller`)
        and the code after the break in all the frames makes one graph.  Only
        where nothing could catch an exception of the call (no try/with block
        around it in any frame of the chain, no handler being run): the glue
        code is outside those blocks.  And only where the callee cannot tell
        which frame called it (see :meth:`Value.reads_caller_frame`): ``eval``
        or ``sys._getframe`` there must see the inlined function's frame, so
        they run in its own continuation, as before."""
        from . import config
        from .break_plan import _in_protected_block
        inner = self.frames[-1]
        ins = inner.instrs[inner.ip]
        if not (config.compose_continuations and emit.is_call(ins) and (ins.exn is None or ins.exn.transparent)
                and not any(_in_protected_block(f) or f.exc_stack for f in self.frames[:-1])
                and not inner.exc_stack and len(inner.stack) >= emit.call_operands(ins)):
            return False
        callee, _ = _callee_and_args(inner.stack[-emit.call_operands(ins):], ins)
        return not callee.reads_caller_frame()

    def _call_first(self, st: "FrameState") -> Tuple[Tuple[bool, ...], List[Optional[str]]]:
        """Run the innermost frame's call natively (see :meth:`_runs_call_first`):
        its operands from the trace, then the call.  Returns the null mask and
        temporaries of that frame's stack after the call (the result on top)."""
        cg = self.cg
        frame = st.frame
        ins = frame.instrs[frame.ip]
        n = emit.call_operands(ins)   # callable and NULL (or method and self), the arguments (, names)
        below, operands = st.stack[:-n], st.stack[-n:]
        temps = self._stack_into_temps(below)
        # Called through a stand-in frame per inlined frame (see
        # call_frames): a traceback of what it raises shows eager's frames.
        # A method call's (method, self) pair is the function and its first
        # argument there.
        callee, args = _callee_and_args(operands, ins)
        callee_args = [callee] + args
        kw_names = tuple(frame.kw_names or ())
        if ins.opname == "CALL_KW":
            kw_names = operands[-1].as_constant()
        inlined = self.frames[1:]
        stand_ins = [stand_in(f.code, f.instrs[f.ip - 1].positions, len(inlined) - k + len(callee_args) - 1,
                              f_globals=f.f_globals)
                     for k, f in enumerate(inlined[:-1], 1)]
        stand_ins.append(stand_in(frame.code, ins.positions, len(callee_args) - 1, kw_names,
                                  f_globals=frame.f_globals))
        cg.begin_call()
        for fn in stand_ins:
            cg.load_object(fn)
        for v in callee_args:
            cg.reconstruct(v)
        argc = len(stand_ins) - 1 + len(callee_args)
        pos = self.root.instrs[self.root.ip - 1].positions
        cg.call(argc, positions=pos)
        result = cg.new_temp()
        cg.emit("STORE_FAST", result)
        return tuple(st.null_mask[:-n]) + (False,), temps + [result]

    def _stack_into_temps(self, stack: List[Value], skip=frozenset()) -> List[Optional[str]]:
        """Each stack value evaluated into a temporary (None for NULL slots
        and the slots in ``skip``)."""
        cg = self.cg
        temps: List[Optional[str]] = []
        for i, v in enumerate(stack):
            if isinstance(v, NullValue) or i in skip:
                temps.append(None)
            else:
                t = cg.new_temp()
                cg.reconstruct(v)
                cg.emit("STORE_FAST", t)
                temps.append(t)
        return temps

    def _successors(self) -> List[int]:
        return [s for s, _ in self._successor_edges()]

    # -- helpers -------------------------------------------------------------
    def stage(self, states: List[FrameState]) -> None:
        """Evaluate every carried value into temporaries before side effects replay."""
        cg = self.cg
        for st in states:
            for v in st.values():
                cg.stage_value(v)

    def make_function(self, frame, code: types.CodeType) -> None:
        """Push a function for generated ``code`` closing over ``frame``'s cells (C9)."""
        cg = self.cg
        cells = [frame.locals[n] for n in cell_names(frame.code)]
        if frame.f_globals is cg.root_globals:
            if cells:
                for c in cells:
                    cg.reconstruct(c)
                cg.emit("BUILD_TUPLE", arg=len(cells))
            cg.load_object(code)
            cg.make_function(0x08 if cells else 0)
            return
        cg.push_callable(_make_function)
        cg.load_object(code)
        cg.load_object(frame.f_globals)
        cg.load_object(None)
        cg.load_object(None)
        cg.load_object(None)
        for c in cells:
            cg.reconstruct(c)
        cg.emit("BUILD_TUPLE", arg=len(cells))
        cg.call(6)

    def call_generated(self, frame, code, args_emit, thunk: bool = False, native: bool = False) -> None:
        """``runner(fn, *args)``: a generated function, compiled through the
        dispatcher; with ``thunk``, a callable that makes that call later
        (whatever it is called with); with ``native``, ``fn(*args)`` itself."""
        cg = self.cg
        if native:
            cg.begin_call()
            self.make_function(frame, code)
            extra = 0
            if code.co_argcount and code.co_varnames[0] == SUPER_SELF_ARG:
                cg.reconstruct(_first_local(frame))
                extra = 1
            cg.call(extra + args_emit())
            return
        if thunk:
            cg.push_callable(Continuation)
            cg.load_object(self.runner_for(code))
            self.make_function(frame, code)
            extra = 0
            if code.co_argcount and code.co_varnames[0] == SUPER_SELF_ARG:
                cg.reconstruct(_first_local(frame))
                extra = 1
            argc = args_emit()
            cg.call(1 + extra + argc + 1)
            return
        # select(fn, *args)(*args): the arguments go to the callee's frame
        # straight from this frame's stack, so nothing else holds them
        # during the call (see FrameRunner.select).  The function is made
        # before the arguments: a tail call's ``args_emit`` clears the
        # temporaries, among them those holding cells its closure takes
        # (a 3.12+ inlined comprehension's own cell, made in the trace).
        cg.begin_call()
        cg.push_callable(self.runner_for(code).select)
        self.make_function(frame, code)
        extra = 0
        if code.co_argcount and code.co_varnames[0] == SUPER_SELF_ARG:
            cg.reconstruct(_first_local(frame))
            extra = 1
        argc = extra + args_emit()
        temps = [cg.new_temp() for _ in range(argc)]
        for t in reversed(temps):
            cg.emit("STORE_FAST", t)
        for t in temps:
            cg.emit("LOAD_FAST", t)
        cg.call(1 + argc)
        for t in temps:
            cg.emit("LOAD_FAST", t)
        for t in temps:
            cg.emit("LOAD_CONST", None)
            cg.emit("STORE_FAST", t)
        cg.call(argc)

    def save_native_stack(self, null_mask, drop=()) -> List[Optional[str]]:
        """Pop the native stack into temporaries; NULL slots get a dummy.
        Slots in ``drop`` (saved previous exceptions, which the resume
        prologue makes again) are popped: a temporary would keep the
        exception, and all its traceback reaches, alive past its handler."""
        cg = self.cg
        temps = [None if i in drop else cg.new_temp() for i in range(len(null_mask))]
        for t in reversed(temps):
            cg.emit("POP_TOP" if t is None else "STORE_FAST", t)
        return temps

    def call_resume(self, frame, index: int, null_mask, stack_temps, locals_, state_temp=None,
                    thunk: bool = False, tail: bool = False, exc_levels=(), keep=()) -> None:
        """Call the resume function of ``frame`` at ``index``.  With ``tail``
        (the call's result is returned at once), bytegraph's own temporaries
        and generated parameters are cleared once the arguments are loaded:
        in eager they were stack values the native instruction consumed, and
        holding them for the rest of the call would keep objects alive.
        ``exc_levels`` (see FrameState) are the handlers it resumes inside:
        their saved previous exceptions are not passed, the resume prologue
        makes them again with ``PUSH_EXC_INFO`` of each exception (passed
        instead).  ``keep``: temporaries a tail call leaves bound (read after
        it by an exception handler of the transformed code)."""
        cg = self.cg
        local_names = None if state_temp is not None else tuple(n for n, _ in locals_)
        exc_slots = tuple(d for d, _ in exc_levels)
        code = resume_code(frame.code, index, tuple(null_mask), local_names, exc_slots)

        def args():
            n = 0
            for i, (is_null, t) in enumerate(zip(null_mask, stack_temps)):
                if not is_null and i not in exc_slots:
                    cg.emit("LOAD_FAST", t)
                    n += 1
            for _, exc in exc_levels:
                cg.reconstruct(exc)
                n += 1
            if state_temp is not None:
                cg.emit("LOAD_FAST", state_temp)
                n += 1
            else:
                for name, v in locals_:
                    cg.reconstruct(v)
                n += len(locals_)
            if tail:
                self._clear_own_names(keep)
            return n
        self.call_generated(frame, code, args, thunk)

    def _clear_own_names(self, keep=()) -> None:
        """Drop this frame's references before its tail call: the arguments
        moved the live values (and the still-bound dead ones, see
        :func:`_keeps_alive`) into the continuation, which from now on is the
        only holder, as the one eager frame was.  Cells are shared, not held."""
        cg = self.cg
        code = cg.root_code
        names = [f"___bg_tmp{i}" for i in range(cg._n_temps)]
        names += [n for n in code.co_varnames if n not in code.co_cellvars]
        for name in dict.fromkeys(names):
            if name in keep:
                continue
            cg.emit("LOAD_CONST", None)
            cg.emit("STORE_FAST", name)

    def release_rebound_arguments(self) -> None:
        """Clear each argument of the root frame that the trace rebound or
        deleted.  The transformed code never writes user locals, so such an
        argument would otherwise keep its old object alive while the
        continuation runs (``x = None`` before a break frees ``x`` in eager).
        Runs after side effects are replayed and every carried value is staged
        in a temporary, so nothing reads the argument afterwards."""
        from .sources import LocalSource
        root, cg = self.root, self.cg
        code = root.code
        n_args = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
            + bool(code.co_flags & inspect.CO_VARKEYWORDS)
        for name in code.co_varnames[:n_args]:
            if name in code.co_cellvars or name in root.unrealized or name == STATE_ARG:
                continue  # (the state dict is read by the native instruction, see _native_copy)
            v = root.locals.get(name)
            if v is not None and v.source == LocalSource(name):
                continue
            cg.emit("LOAD_CONST", None)
            cg.emit("STORE_FAST", name)

    # -- modes -------------------------------------------------------------------
    def emit(self, states: List[FrameState]) -> None:
        getattr(self, "_emit_" + self.plan.mode)(states)

    def _push_stack(self, st: FrameState) -> Optional[str]:
        """Push ``st``'s stack.  Inside handlers, each saved previous exception
        is made by ``PUSH_EXC_INFO`` of the handled exception, as the
        handler's own entry did: the native instruction then sees the
        exception being handled (bare ``raise``, ``sys.exc_info()``, the
        ``__context__`` of what it raises).  Returns the temporary holding
        the exception the caller was handling (None outside handlers)."""
        cg = self.cg
        prev_at = dict(st.exc_levels)
        outer_prev = None
        for i, v in enumerate(st.stack):
            if i not in prev_at:
                cg.reconstruct(v)
                continue
            cg.reconstruct(prev_at[i])
            cg.emit("PUSH_EXC_INFO")
            cg.emit("POP_TOP")
            if outer_prev is None:
                outer_prev = cg.new_temp()
                cg.emit("COPY", arg=1)
                cg.emit("STORE_FAST", outer_prev)
        return outer_prev

    def _store_locals(self, st: FrameState) -> None:
        """Bind the frame's own local slots to the locals the trace bound.

        The native instruction runs in this frame: ``exec``, ``eval``,
        ``locals()`` or a callee's ``sys._getframe(1)`` read its locals,
        which the transformed code otherwise never writes."""
        from .sources import LocalSource
        cg = self.cg
        for name, v in st.locals + st.deleted_natively:
            if v.source == LocalSource(name):
                continue  # the argument, still in its slot
            cg.reconstruct(v)
            cg.emit("STORE_FAST", name)

    def _restore_exc_info(self, outer_prev: Optional[str]) -> None:
        """Leave the handlers entered by _push_stack (the resume function enters them again)."""
        if outer_prev is not None:
            self.cg.emit("LOAD_FAST", outer_prev)
            self.cg.emit("POP_EXCEPT")

    def _emit_instr(self, states) -> None:
        cg, root = self.cg, self.root
        (st,) = states
        ins = root.instrs[root.ip]
        if st.exc_levels and ins.exn is None:
            # (never from CPython's compiler: a handler's body is covered by its cleanup)
            raise Unsupported("a break inside a handler with no cleanup entry", kind="break_in_handler")
        self._store_locals(st)
        outer_prev = self._push_stack(st)
        slot_locals = locals_from_slots(self.cg, self.root, st, ins)
        depth = len(st.stack)
        handler = exn = None
        if ins.exn is not None:
            handler = instr("NOP", positions=cg.positions)
            exn = _exn_like(ins.exn, handler)
        native = self._native_copy(ins, exn)
        if exn is not None:
            native = emit.under_handler(native, exn)
        cg.instrs.extend(native)
        paths = []
        for s, is_jump in self._successor_edges():
            after = depth + _native_effect(ins, is_jump)
            paths.append((s, is_jump, self._mask_after(ins, st.null_mask, after, is_jump)))
        # fall-through path first (it follows the native instruction), then the jump target
        for s, is_jump, mask in sorted(paths, key=lambda p: p[1]):
            label = instr("NOP", positions=cg.positions)
            if is_jump:
                native[-1].target = label
            cg.instrs.append(label)
            levels = [(d, exc) for d, exc in st.exc_levels if d < len(mask)]
            temps = self.save_native_stack(mask, drop={d for d, _ in levels})
            self._restore_exc_info(outer_prev)
            self.call_resume(root, s, mask, temps, st.locals if slot_locals is None else slot_locals,
                             tail=True, exc_levels=levels)
            cg.emit("RETURN_VALUE")
        if handler is not None:
            cg.instrs.append(handler)
            e = ins.exn
            mask = tuple(st.null_mask[:e.depth]) + ((False,) if e.lasti else ()) + (False,)
            levels = [(d, exc) for d, exc in st.exc_levels if d < e.depth]
            temps = self.save_native_stack(mask, drop={d for d, _ in levels})
            self._restore_exc_info(outer_prev)
            target = root.index_of[id(e.target)]
            handler_locals = FrameState(root, target, []).locals
            if slot_locals is not None:
                handler_locals = [(n, NativeSlotValue(n)) for n, _ in handler_locals]
            self.call_resume(root, target, mask, temps, handler_locals, tail=True, exc_levels=levels)
            cg.emit("RETURN_VALUE")

    def _successor_edges(self) -> List[Tuple[int, bool]]:
        root = self.root
        ins = root.instrs[root.ip]
        out = []
        if ins.opname not in _NO_FALLTHROUGH:
            out.append((root.ip + 1, False))
        if ins.target is not None and ins.is_jump:
            out.append((root.index_of[id(ins.target)], True))
        return out

    def discard_native(self, mask) -> None:
        """Drop the top ``len(mask)`` native stack slots (NULL slots cannot be POP_TOPped)."""
        cg = self.cg
        for is_null in reversed(mask):
            if is_null:
                cg.emit("STORE_FAST", "___bg_discard")
            else:
                cg.emit("POP_TOP")

    def _native_copy(self, ins, exn) -> list:
        pos = ins.positions
        if ins.opname == "LOAD_FAST" and ins.argval in self.root.unrealized \
                and self.root.state_source is not None and ins.argval in self.root.state_names:
            # a local of a generated frame still in its state dict (it broke
            # while being wrapped): the transformed code never unpacked it
            return [instr("LOAD_FAST", STATE_ARG, positions=pos, exn=exn),
                    instr("LOAD_CONST", ins.argval, positions=pos, exn=exn),
                    instr("BINARY_SUBSCR", positions=pos, exn=exn)]
        if ins.opname == "CALL":
            # what ran symbolically before it (3.11's PRECALL, a KW_NAMES)
            # runs natively with it
            return emit.call(ins.arg, tuple(self.root.kw_names or ()), positions=pos, exn=exn)
        if ins.opname in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"):
            # (3.13's jumps compare with True/False: the value must be a bool)
            return emit.truth(positions=pos, exn=exn) + [
                instr(ins.opname, target=ins.target, positions=pos, exn=exn)]
        if ins.opname == "LOAD_METHOD":
            # LOAD_METHOD leaves a NULL and the bound attribute, or the method
            # and self, depending on the object; the continuation needs a
            # known layout: the attribute with its NULL.
            return emit.attribute_with_null(ins.argval, positions=pos, exn=exn)
        if ins.opname == "LOAD_SUPER_ATTR" and ins.arg & 1:
            # (3.12+) likewise for ``super().name`` loaded for a call: the
            # attribute, then its NULL
            return [instr("LOAD_SUPER_ATTR", ins.argval, arg=ins.arg & ~1, positions=pos, exn=exn)] + \
                emit.null_beside(positions=pos, exn=exn)
        return [instr(ins.opname, ins.argval, arg=ins.arg, target=ins.target, positions=pos, exn=exn)]

    @staticmethod
    def _mask_after(ins, before, after: int, is_jump: bool) -> Tuple[bool, ...]:
        pushes = _PUSHED.get(ins.opname, 1)
        if ins.opname.startswith("POP_JUMP") or ins.opname.startswith("STORE_") or ins.opname.startswith("DELETE_"):
            pushes = 0
        elif ins.opname in ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"):
            pushes = 1 if is_jump else 0
        elif ins.opname == "FOR_ITER":
            pushes = 0 if is_jump else 2
        elif ins.opname == "UNPACK_SEQUENCE":
            pushes = ins.arg
        elif ins.opname == "UNPACK_EX":
            pushes = (ins.arg & 0xFF) + (ins.arg >> 8) + 1
        elif ins.opname in ("LOAD_GLOBAL", "LOAD_SUPER_ATTR"):
            pushes = 2 if (ins.arg or 0) & 1 else 1
        kept = after - pushes
        mask = tuple(before[:kept]) + (False,) * pushes
        if ins.opname == "LOAD_METHOD":
            mask = tuple(before[:kept]) + emit.NULL_SLOTS
        elif ins.opname in ("LOAD_GLOBAL", "LOAD_SUPER_ATTR") and (ins.arg or 0) & 1:
            mask = tuple(before[:kept]) + emit.NULL_SLOTS
        elif ins.opname == "PUSH_NULL":
            mask = tuple(before[:kept]) + (True,)  # (a break may land on it: see Frame.break_next)
        return mask

    def _emit_loop(self, states) -> None:
        cg, root, lp = self.cg, self.root, self.plan.loop
        (st,) = states
        state_temp = cg.new_temp()
        for name, v in st.locals:
            cg.load_object(name)
            cg.reconstruct(v)
        cg.emit("BUILD_MAP", arg=len(st.locals))
        cg.emit("STORE_FAST", state_temp)
        outer = st.stack
        slot_temps = []
        for v in outer:
            if isinstance(v, NullValue):
                slot_temps.append(None)
                cg.emit("PUSH_NULL")
            else:
                t = cg.new_temp()
                cg.reconstruct(v)
                cg.emit("COPY", arg=1)
                cg.emit("STORE_FAST", t)
                slot_temps.append(t)
        body = loop_body_code(root.code, lp, st.null_mask)
        exits = origin_of(body).loop_exits
        status, payload, item = cg.new_temp(), cg.new_temp(), cg.new_temp()
        head = instr("NOP", positions=cg.positions)
        exhausted = instr("NOP", positions=cg.positions)
        cg.instrs.append(head)
        if lp.is_for:
            cg.emit("FOR_ITER", target=exhausted)
            cg.emit("STORE_FAST", item)

        def args():
            n = 0
            slots = slot_temps[:-1] if lp.is_for else slot_temps
            for t in slots:
                if t is not None:
                    cg.emit("LOAD_FAST", t)
                    n += 1
            if lp.is_for:
                cg.emit("LOAD_FAST", item)
                n += 1
            cg.emit("LOAD_FAST", state_temp)
            return n + 1
        # a loop that recorded no tensor work for thousands of iterations
        # (frame._python_loop): its body runs as it is, not through the
        # dispatcher (guards per iteration, recompiles as its values move)
        self.call_generated(root, body, args, native=self.plan.record.kind == "python_loop")
        cg.emit("UNPACK_SEQUENCE", arg=3)
        cg.emit("STORE_FAST", status)
        cg.emit("STORE_FAST", payload)
        cg.emit("STORE_FAST", state_temp)
        cg.emit("LOAD_FAST", status)
        cg.emit("LOAD_CONST", 0)
        cg.emit("COMPARE_OP", "==")
        cg.emit("POP_JUMP_IF_TRUE", target=head)
        cg.emit("LOAD_FAST", status)
        cg.emit("LOAD_CONST", 2)
        cg.emit("COMPARE_OP", "==")
        leave = instr("NOP", positions=cg.positions)
        cg.emit("POP_JUMP_IF_FALSE", target=leave)
        self.discard_native(st.null_mask)
        cg.emit("LOAD_FAST", payload)
        cg.emit("RETURN_VALUE")
        cg.instrs.append(leave)
        depths = _depths(root.code)
        for j, target in enumerate(exits):
            nxt = instr("NOP", positions=cg.positions)
            if j < len(exits) - 1:
                cg.emit("LOAD_FAST", payload)
                cg.emit("LOAD_CONST", 0)
                cg.emit("BINARY_SUBSCR")
                cg.emit("LOAD_CONST", j)
                cg.emit("COMPARE_OP", "==")
                cg.emit("POP_JUMP_IF_FALSE", target=nxt)
            self._exit_loop_to(target, st.null_mask, depths[target], payload, state_temp)
            cg.instrs.append(nxt)
        if not exits:
            cg.emit("LOAD_CONST", None)
            cg.emit("RETURN_VALUE")
        cg.instrs.append(exhausted)
        if lp.is_for:
            end = root.index_of[id(root.instrs[lp.head].target)]
            self._leave_loop_to(end, len(outer) - 1, depths[end], st.null_mask, state_temp)

    def _exit_loop_to(self, target: int, null_mask, depth_there: int, payload: str, state_temp) -> None:
        """Continue at loop exit ``target`` with the stack the body handed back
        (``payload[1]``, see :func:`resume.loop_body_code`)."""
        cg = self.cg
        self.discard_native(tuple(null_mask))
        cg.emit("LOAD_FAST", payload)
        cg.emit("LOAD_CONST", 1)
        cg.emit("BINARY_SUBSCR")
        cg.emit("UNPACK_SEQUENCE", arg=depth_there)
        mask = (False,) * depth_there
        temps = [cg.new_temp() for _ in mask]
        for t in temps:   # UNPACK_SEQUENCE leaves the first item on top
            cg.emit("STORE_FAST", t)
        self.call_resume(self.root, target, mask, temps, [], state_temp=state_temp, tail=True)
        cg.emit("RETURN_VALUE")

    def _leave_loop_to(self, target: int, depth_now: int, depth_there: int, null_mask, state_temp) -> None:
        cg = self.cg
        self.discard_native(tuple(null_mask[depth_there:depth_now]))
        mask = tuple(null_mask[:depth_there])
        temps = self.save_native_stack(mask)
        self.call_resume(self.root, target, mask, temps, [], state_temp=state_temp, tail=True)
        cg.emit("RETURN_VALUE")

    def _emit_chain(self, states) -> None:
        """Innermost frame first.  Where the caller's call in progress is a
        plain call (see :func:`~bytegraph.break_plan.continued_by_caller`),
        the callee's continuation goes to the caller's as a
        :class:`~bytegraph.resume.Continuation`: the caller resumes at that
        call instruction, which runs it -- inside the caller's try/with block
        if there is one, and inlined when the caller's continuation is
        compiled, so the frames' code after the break makes one graph.
        Otherwise the callee's continuation runs first and its result is the
        value of the call in progress."""
        cg = self.cg
        carried = None   # (kind, temp): "result" of the inner continuation, or its "thunk"
        levels = states[0].exc_levels
        outer_prev = cleanup = None
        if levels:
            # The root is inside handlers: the inner frames' continuations run
            # (before the root's) with its exception being handled.  Leaving
            # by an exception, the section restores the caller's, as the
            # root's handler cleanup would have.
            outer_prev = cg.new_temp()
            for j, (_, exc) in enumerate(levels):
                cg.reconstruct(exc)
                cg.emit("PUSH_EXC_INFO")
                cg.emit("POP_TOP")
                cg.emit("STORE_FAST" if j == 0 else "POP_TOP", outer_prev if j == 0 else None)
            cleanup = instr("NOP", positions=cg.positions)
            protected_from = len(cg.instrs)
        for st in reversed(states):
            frame = st.frame
            index = st.index
            if frame is states[-1].frame and self.call_first:
                mask, stack_temps = self._call_first(st)
            else:
                prev_slots = {d for d, _ in st.exc_levels} if frame is self.root else set()
                stack_temps = self._stack_into_temps(st.stack, prev_slots)
                mask = st.null_mask
            if carried is not None and carried[0] == "result":
                mask += (False,)
                stack_temps.append(carried[1])
            elif carried is not None:
                call_mask, call_temps = self._call_slots(frame, carried[1])
                mask += call_mask
                stack_temps += call_temps
            if frame is self.root:
                if levels:
                    from .bytecode import ExnEntry
                    entry = ExnEntry(cleanup, 0, False)
                    for ins in cg.instrs[protected_from:]:
                        if ins.exn is None:
                            ins.exn = entry
                    self._restore_exc_info(outer_prev)
                # a tail call: the root frame's own references (its locals, the
                # temporaries) go, as eager's one frame would hold each object
                # only once; the exception being handled stays for the cleanup
                self.call_resume(frame, index, mask, stack_temps, st.locals, exc_levels=levels, tail=True,
                                 keep=(outer_prev,) if outer_prev is not None else ())
                cg.emit("RETURN_VALUE")
                if levels:
                    cg.instrs.append(cleanup)
                    self._restore_exc_info(outer_prev)
                    cg.emit("RERAISE", arg=0)
                continue
            thunk = continued_by_caller(frame)
            self.call_resume(frame, index, mask, stack_temps, st.locals, thunk=thunk)
            temp = cg.new_temp()
            cg.emit("STORE_FAST", temp)
            carried = ("thunk" if thunk else "result", temp)

    def _call_slots(self, frame, thunk_temp: str):
        """The stack slots ``frame``'s call in progress takes when it is re-run
        on a thunk (see :func:`_call_index`): the thunk with a NULL, dummy
        arguments (the thunk ignores them; 3.13's CALL_KW gets no names)."""
        cg = self.cg
        call = frame.instrs[frame.ip - 1]
        if call.opname == "CALL_FUNCTION_EX":
            dummies = [()] + ([{}] if call.arg & 1 else [])
        else:
            dummies = [None] * call.arg + ([()] if call.opname == "CALL_KW" else [])
        temps = [None, thunk_temp] if emit.NULL_SLOTS[0] else [thunk_temp, None]
        for d in dummies:
            t = cg.new_temp()
            if isinstance(d, dict):
                cg.emit("BUILD_MAP", arg=0)
            else:
                cg.load_object(d)
            cg.emit("STORE_FAST", t)
            temps.append(t)
        return emit.NULL_SLOTS + (False,) * len(dummies), temps


_NO_FALLTHROUGH = ("JUMP", "JUMP_NO_INTERRUPT", "RETURN_VALUE", "RAISE_VARARGS", "RERAISE")

#: how many values an instruction run natively at a break pushes (1 if not listed)
_PUSHED = {"CALL": 1, "CALL_KW": 1, "CALL_FUNCTION_EX": 1, "LOAD_METHOD": 2, "POP_TOP": 0, "RERAISE": 0,
           "RAISE_VARARGS": 0, "RETURN_VALUE": 0, "PRINT_EXPR": 0, "SETUP_ANNOTATIONS": 0,
           "IMPORT_STAR": 0, "BEFORE_WITH": 2, "NOP": 0, "PRECALL": 0, "KW_NAMES": 0, "END_FOR": 0,
           "END_SEND": 1}


def _native_effect(ins, is_jump: bool) -> int:
    if ins.opname == "CALL":
        # with what ran symbolically before it (3.11's PRECALL)
        return sum(stack_effect(i, False) for i in emit.call(ins.arg))
    return stack_effect(ins, is_jump)


def _callee_and_args(operands, ins):
    """The callable and positional arguments of a call instruction's operands
    (a NULL beside the callable on either side, or a method and its self)."""
    if ins.opname == "CALL_KW":
        operands = operands[:-1]
    first, second = operands[0], operands[1]
    if isinstance(first, NullValue):
        return second, list(operands[2:])
    if isinstance(second, NullValue):
        return first, list(operands[2:])
    return first, list(operands[1:])


def _exn_like(entry, handler):
    from .bytecode import ExnEntry
    return ExnEntry(handler, entry.depth, entry.lasti)


def _depths(code):
    from .bytecode import stack_depths
    return stack_depths(decode(code))

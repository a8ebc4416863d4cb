"""Flow analyses over instruction lists: stack effects, max stack depth, liveness.

All analyses work on the normalized ``Instr`` model and follow three kinds of
control-flow edges: fall-through (unless the op is a terminator), jump to
``target``, and the exception edge to ``exn.target``.
"""

from __future__ import annotations

import dis

from .versions import ARG_FORMAT, ARG_INT, ARG_NAME, ARG_NONE, SPEC

_effect_cache: dict = {}


def _effect(op: int, arg, jump: bool) -> int:
    key = (op, arg, jump)
    e = _effect_cache.get(key)
    if e is None:
        e = _effect_cache[key] = dis.stack_effect(op, arg, jump=jump)
    return e


def _effect_arg(ins):
    """The part of the raw oparg that can influence the stack effect."""
    kind = SPEC.arg_kind[ins.opname]
    forced = SPEC.forced_arg.get(ins.opname)
    if kind == ARG_NONE:
        return forced
    if kind == ARG_INT:
        return ins.argval if ins.argval is not None else (ins.arg or 0)
    if kind == ARG_NAME:
        bits = SPEC.name_flag_bits.get(ins.opname, 0)
        flags = (ins.arg or 0) & ((1 << bits) - 1)
        return flags if forced is None else (flags & ~1) | forced
    if kind == ARG_FORMAT:
        if ins.argval is None:
            return ins.arg or 0
        conv, spec = ins.argval
        return SPEC.format_converters.index(conv) | (4 if spec else 0)
    # Const/local/compare/jump args never change the stack effect.
    return 0


def stack_effect(ins, jump: bool) -> int:
    """Net value-stack change of ``ins`` on its jump (``jump=True``) or
    fall-through (``jump=False``) edge."""
    override = SPEC.effect_overrides.get(ins.opname)
    if override is not None:
        return override
    if jump:
        override = SPEC.jump_effect_overrides.get(ins.opname)
        if override is not None:
            return override
    return _effect(SPEC.effect_opcode(ins.opname), _effect_arg(ins), bool(jump))


def _index_map(instrs) -> dict:
    return {id(ins): k for k, ins in enumerate(instrs)}


def _lookup(index, ins, what):
    try:
        return index[id(ins)]
    except KeyError:
        raise ValueError(f"{what} {ins!r} is not in the instruction list") from None


def max_stack_depth(instrs, effects=None, index=None) -> int:
    """Maximum value-stack depth reachable from the first instruction.

    ``effects`` optionally gives ``(fall_through, jump)`` effects per
    instruction (the assembler passes the ones of the final opcodes).
    Exception handlers start at ``exn.depth + 1 (+1 if lasti)``.  When two
    paths reach an instruction with different depths (invalid bytecode), the
    larger one wins so the result stays an upper bound.
    """
    n = len(instrs)
    if not n:
        return 0
    if index is None:
        index = _index_map(instrs)
    if effects is None:
        effects = [(stack_effect(i, False), stack_effect(i, True) if i.is_jump else 0)
                   for i in instrs]
    terminators = SPEC.terminators
    depth = [-1] * n
    maxd = 0
    work = [(0, 0)]
    while work:
        k, d = work.pop()
        while k < n:
            if d < 0:
                raise ValueError(f"stack underflow at instruction {k}: {instrs[k]!r}")
            if depth[k] >= d:
                break
            depth[k] = d
            ins = instrs[k]
            e = ins.exn
            if e is not None:
                hd = e.depth + 1 + (1 if e.lasti else 0)
                maxd = max(maxd, hd)
                work.append((_lookup(index, e.target, "exception handler"), hd))
            fall, jmp = effects[k]
            if ins.target is not None and ins.is_jump:
                td = d + jmp
                maxd = max(maxd, td)
                work.append((_lookup(index, ins.target, "jump target"), td))
            d += fall
            if d > maxd:
                maxd = d
            if ins.opname in terminators:
                break
            k += 1
    return maxd


def live_locals(instrs, prefix: str = "") -> list:
    """Live-in local variable names at each instruction index.

    ``LOAD_FAST`` reads, ``STORE_FAST`` kills, ``DELETE_FAST`` reads then
    kills (deleting an unbound local raises, so its value matters).  Cell and
    free variables are shared with other frames, so every deref-style op
    counts as a read and none kills.  An instruction covered by an exception
    entry may jump to the handler before it has any effect, so the handler's
    live set flows in without the kill.  With ``prefix``, only names starting
    with it are tracked (the others are never live).
    """
    n = len(instrs)
    index = _index_map(instrs)
    bit_of: dict = {}
    names: list = []

    def bit(name):
        b = bit_of.get(name)
        if b is None:
            b = bit_of[name] = 1 << len(names)
            names.append(name)
        return b

    reads, writes, deletes, cells = (SPEC.local_reads, SPEC.local_writes,
                                     SPEC.local_deletes, SPEC.cell_ops)
    terminators = SPEC.terminators
    gen = [0] * n
    kill = [0] * n
    succ = [()] * n
    handler = [-1] * n
    preds = [[] for _ in range(n)]
    for k, ins in enumerate(instrs):
        op = ins.opname
        if prefix and (op in reads or op in cells or op in writes or op in deletes) \
                and not ins.argval.startswith(prefix):
            pass
        elif op in reads or op in cells:
            gen[k] = bit(ins.argval)
        elif op in writes:
            kill[k] = bit(ins.argval)
        elif op in deletes:
            gen[k] = kill[k] = bit(ins.argval)
        s = []
        if op not in terminators and k + 1 < n:
            s.append(k + 1)
        if ins.target is not None and ins.is_jump:
            s.append(_lookup(index, ins.target, "jump target"))
        succ[k] = s
        for j in s:
            preds[j].append(k)
        if ins.exn is not None:
            h = handler[k] = _lookup(index, ins.exn.target, "exception handler")
            preds[h].append(k)

    live = [0] * n
    # Backward problem: start from the end so most nodes settle in one pass.
    work = list(range(n))
    queued = [True] * n
    while work:
        k = work.pop()
        queued[k] = False
        out = 0
        for j in succ[k]:
            out |= live[j]
        new = gen[k] | (out & ~kill[k])
        h = handler[k]
        if h >= 0:
            new |= live[h]
        if new != live[k]:
            live[k] = new
            for p in preds[k]:
                if not queued[p]:
                    queued[p] = True
                    work.append(p)

    sets: dict = {}
    result = []
    for mask in live:
        fs = sets.get(mask)
        if fs is None:
            fs = sets[mask] = frozenset(name for name, b in bit_of.items() if mask & b)
        result.append(fs)
    return result


def stack_depths(instrs) -> list:
    """Value-stack depth on entry to each instruction (``-1`` where unreachable).

    Resume functions and outlined loop bodies need the depth at the point
    where they enter or leave a copy of the original code.
    """
    n = len(instrs)
    index = _index_map(instrs)
    depth = [-1] * n
    terminators = SPEC.terminators
    work = [(0, 0)] if n else []
    while work:
        k, d = work.pop()
        while k < n and depth[k] < 0:
            depth[k] = d
            ins = instrs[k]
            if ins.exn is not None:
                work.append((index[id(ins.exn.target)], ins.exn.depth + 1 + (1 if ins.exn.lasti else 0)))
            if ins.target is not None and ins.is_jump:
                work.append((index[id(ins.target)], d + stack_effect(ins, True)))
            if ins.opname in terminators:
                break
            d += _runtime_effect(ins)
            k += 1
    return depth


def _runtime_effect(ins) -> int:
    """The fall-through effect as the interpreter runs it: ``PRECALL`` leaves
    the stack alone and ``CALL`` pops the callable (or NULL), ``self`` and the
    arguments.  (The compiler's split, ``-arg`` then ``-1``, is the same over
    the pair, but a resume function enters at the ``CALL`` itself, with the
    whole call on the stack: the depths after it must still be exact.)"""
    if ins.opname == "PRECALL":
        return 0
    if ins.opname == "CALL":
        return -(ins.arg + 1)
    return stack_effect(ins, False)


def find_loops(instrs) -> list:
    """Loops as ``(head, backedge)`` index pairs, one per backward jump.

    ``head`` is the backward jump's target (a ``FOR_ITER`` for ``for``
    loops); the loop region is ``head..backedge`` inclusive.  Several
    back-edges to one head (``continue``) give several pairs; callers merge.
    """
    index = _index_map(instrs)
    loops = []
    for k, ins in enumerate(instrs):
        if ins.target is not None and ins.is_jump:
            t = index[id(ins.target)]
            if t <= k:
                loops.append((t, k))
    return loops


def successors(instrs, index, k, with_exn: bool) -> list:
    """Indexes control can go to after instruction ``k``: the next one, a jump's
    target and, with ``with_exn``, its exception handler.  ``index`` maps
    ``id(instruction)`` to its position."""
    ins = instrs[k]
    out = []
    if ins.opname not in SPEC.terminators and k + 1 < len(instrs):
        out.append(k + 1)
    if ins.target is not None and ins.is_jump:
        out.append(index[id(ins.target)])
    if with_exn and ins.exn is not None:
        out.append(index[id(ins.exn.target)])
    return out


def _reachable(instrs, index, start: int, with_exn: bool) -> set:
    seen = set()
    work = [start]
    while work:
        k = work.pop()
        if k in seen:
            continue
        seen.add(k)
        work.extend(successors(instrs, index, k, with_exn))
    return seen


def natural_loops(instrs) -> list:
    """The loops of ``instrs`` as ``(head, members)``: for each loop head
    (the target of backward jumps; a ``FOR_ITER`` for ``for`` loops), the
    instruction indexes of the loop, however the compiler laid them out.

    Members are the reachable instructions from which a back-edge is
    reachable without passing the head, plus the exception handlers they
    jump to that only exception edges reach and that keep the loop's stack
    (from 3.12 CPython lays a ``with`` block's cleanup out after the loop:
    it is still the body's).
    Loops that share instructions without one holding the other (a
    ``while`` loop whose ``continue`` jumps to a copy of its test) are one
    loop, entered at the first head.  Outermost first.
    """
    n = len(instrs)
    if not n:
        return []
    index = _index_map(instrs)
    depth = stack_depths(instrs)
    preds = [[] for _ in range(n)]
    for k in range(n):
        if depth[k] < 0:
            continue
        for s in successors(instrs, index, k, True):
            preds[s].append(k)
    back = {}
    for head, src in find_loops(instrs):
        if depth[src] >= 0:
            back.setdefault(head, []).append(src)
    loops = []
    for head, sources in back.items():
        # on a cycle through the head: reached from it, and reaching a
        # back-edge without passing it.  A backward jump whose source the
        # head does not reach is no loop (from 3.12, a ``with`` block's
        # handler jumping back to the code after the block).
        ahead = _reachable(instrs, index, head, True)
        members = {head}
        work = [s for s in sources if s in ahead]
        if not work:
            continue
        while work:
            k = work.pop()
            if k in members or k not in ahead:
                continue
            members.add(k)
            work.extend(preds[k])
        loops.append([head, members])
    # one loop for overlapping ones that do not nest
    merged = True
    while merged:
        merged = False
        loops.sort(key=lambda lp: lp[0])
        for i, (h1, m1) in enumerate(loops):
            for j, (h2, m2) in enumerate(loops):
                if i != j and m1 & m2 and not (m1 <= m2 or m2 <= m1):
                    loops[i] = [min(h1, h2), m1 | m2]
                    del loops[j]
                    merged = True
                    break
            if merged:
                break
    # code only exception edges reach from the loop: its handlers
    normal = _reachable(instrs, index, 0, False)
    out = []
    for head, members in loops:
        extra = set()
        # (a handler that unwinds below the loop's own stack handles the
        # whole loop, as a try around it: 3.12's inlined comprehensions)
        def handler(k):
            e = instrs[k].exn
            if e is not None and not e.transparent and e.depth >= depth[head]:
                return [index[id(e.target)]]
            return []

        work = [t for k in members for t in handler(k)]
        while work:
            k = work.pop()
            if k in members or k in extra or k in normal or depth[k] < 0:
                continue
            extra.add(k)
            work.extend(successors(instrs, index, k, False) + handler(k))
        out.append((head, frozenset(members | extra)))
    out.sort(key=lambda lp: (lp[0], -len(lp[1])))
    return out

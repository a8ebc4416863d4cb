"""Assembling :class:`~.instr.Instr` lists back into code objects.

Steps (see :func:`assemble`): resolve names/locals/constants to indices,
pick each jump's real opcode from its direction, lay the code out with as
many EXTENDED_ARG prefixes as needed (iterated to a fixpoint, since prefixes
shift offsets and so change jump distances), then emit ``co_code``, the
location table, the exception table and ``co_stacksize``.
"""

from __future__ import annotations

import math

from .analysis import _effect, _index_map, _lookup, max_stack_depth
from .tables import encode_exception_table, encode_linetable
from .instr import Instr
from .versions import (ARG_COMPARE, ARG_CONST, ARG_FORMAT, ARG_INT, ARG_JUMP, ARG_LOCAL,
                       ARG_LOCAL_PAIR, ARG_NAME, ARG_NONE, SPEC, localsplus_names)

# Keyword arguments forwarded to code.replace (co_nlocals is always derived).
_REPLACEABLE = frozenset({
    "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_stacksize", "co_flags",
    "co_firstlineno", "co_consts", "co_names", "co_varnames", "co_freevars", "co_cellvars",
    "co_filename", "co_name", "co_qualname", "co_consts_prefix",
})

# Constant types whose value (with the type) identifies them.
_SIMPLE = (int, bool, str, bytes, type(None), type(Ellipsis))


def _const_key(v):
    """Dedup key for constants: by (type, value) for simple immutable values,
    by identity otherwise.  The type keeps 1 and True apart; the sign keeps
    0.0 and -0.0 apart (they compare equal)."""
    t = type(v)
    if t in _SIMPLE:
        return (t, v)
    if t is float:
        return (t, v, math.copysign(1.0, v))
    if t is complex:
        return (t, v, math.copysign(1.0, v.real), math.copysign(1.0, v.imag))
    if t is tuple:
        return (t, tuple(_const_key(x) for x in v))
    if t is frozenset:
        return (t, frozenset(_const_key(x) for x in v))
    return (object, id(v))


def _ext_count(arg: int) -> int:
    if arg < 0x100:
        return 0
    if arg < 0x10000:
        return 1
    if arg < 0x1000000:
        return 2
    if arg < 0x100000000:
        return 3
    raise ValueError(f"oparg {arg} does not fit in 32 bits")


class _Pools:
    """Index lookups for co_consts / co_names / localsplus, growing as needed."""

    def __init__(self, consts, names):
        self.consts = list(consts)
        self.const_idx = {}
        for k, c in enumerate(self.consts):
            self.const_idx.setdefault(_const_key(c), k)
        self.names = list(names)
        self.name_idx = {}
        for k, n in enumerate(self.names):
            self.name_idx.setdefault(n, k)

    def const(self, v) -> int:
        key = _const_key(v)
        k = self.const_idx.get(key)
        if k is None:
            k = self.const_idx[key] = len(self.consts)
            self.consts.append(v)
        return k

    def name(self, n) -> int:
        k = self.name_idx.get(n)
        if k is None:
            if not isinstance(n, str):
                raise TypeError(f"name operand must be a str, got {n!r}")
            k = self.name_idx[n] = len(self.names)
            self.names.append(n)
        return k


def _local_resolver(localsplus, template):
    """Map a local/cell/free op to its localsplus index.

    Names are unique in localsplus except in one corner: a class body that
    both defines a ``__class__`` cell and reads an enclosing ``__class__``
    free variable.  For such names the occurrence (first = the cell, second =
    the free variable) is recovered from ``ins.arg`` read against the
    template's layout; instructions without a matching arg get the first.
    """
    first = {}
    slots = {}
    for k, nm in enumerate(localsplus):
        first.setdefault(nm, k)
        slots.setdefault(nm, []).append(k)
    dupes = {nm: ks for nm, ks in slots.items() if len(ks) > 1}
    if not dupes:
        return lambda ins: first[ins.argval]
    old = localsplus_names(template.co_varnames, template.co_cellvars, template.co_freevars)

    def resolve(ins):
        nm = ins.argval
        ks = dupes.get(nm)
        if ks is None:
            return first[nm]
        a = ins.arg
        if a is not None and a < len(old) and old[a] == nm:
            rank = sum(1 for x in old[:a] if x == nm)
            if rank < len(ks):
                return ks[rank]
        return ks[0]

    return resolve


def _resolve_arg(ins, kind, pools, local_idx) -> int:
    """Raw oparg of a non-jump instruction, computed from its argval."""
    name = ins.opname
    forced = SPEC.forced_arg.get(name)
    if kind == ARG_NONE:
        return forced or 0
    argval = ins.argval
    if kind == ARG_INT:
        if argval is None:
            if ins.arg is None:
                raise ValueError(f"{name} needs an argument")
            return ins.arg
        if ins.arg is not None and ins.arg != argval:
            raise ValueError(f"{name}: arg {ins.arg} and argval {argval!r} disagree; "
                             "argval is authoritative, update both")
        return int(argval)
    if kind == ARG_CONST:
        return pools.const(argval)
    if kind == ARG_NAME:
        bits = SPEC.name_flag_bits.get(name, 0)
        flags = (ins.arg or 0) & ((1 << bits) - 1)
        if forced is not None:
            flags = (flags & ~1) | forced   # the method bit says which op this is
        return (pools.name(argval) << bits) | flags
    if kind == ARG_LOCAL:
        return local_idx(ins)
    if kind == ARG_LOCAL_PAIR:
        return ins.arg   # computed when the pair was fused (see _fuse)
    if kind == ARG_COMPARE:
        if argval is None:
            return ins.arg
        shift = SPEC.compare_shift
        low = (ins.arg or 0) & ((1 << shift) - 1) if ins.arg is not None else SPEC.compare_masks.get(argval, 0)
        return (SPEC.cmp_op.index(argval) << shift) | low
    if kind == ARG_FORMAT:
        if argval is None:
            return ins.arg
        conv, has_spec = argval
        return SPEC.format_converters.index(conv) | (4 if has_spec else 0)
    raise AssertionError(kind)


def _fuse(instrs, local_idx):
    """Fuse back the instruction pairs the decoder split (``VersionSpec.splits``)
    where they are still intact: adjacent, the second not a jump target or
    handler, same location and handler, and (for packed locals) both indexes
    below 16.  Returns the new list and ``{id(first half): fused Instr}``."""
    splits = SPEC.splits
    if not splits or not any(ins.fused for ins in instrs):
        return instrs, {}
    targets = set()
    for ins in instrs:
        if ins.target is not None:
            targets.add(id(ins.target))
        if ins.exn is not None:
            targets.add(id(ins.exn.target))
    out, fused = [], {}
    n = len(instrs)
    k = 0
    while k < n:
        ins = instrs[k]
        name = ins.fused
        if name and k + 1 < n:
            one = _fuse_pair(name, ins, instrs[k + 1], targets, local_idx)
            if one is not None:
                fused[id(ins)] = one
                out.append(one)
                k += 2
                continue
        out.append(ins)
        k += 1
    return out, fused


_PLAIN_LOAD_FAST = SPEC.opmap["LOAD_FAST"]
_PAD = ("END_FOR", "POP_TOP")[:SPEC.for_iter_skips]


def _pad_for_iter(instrs):
    """Make sure each FOR_ITER's target has the ``END_FOR`` pad in front of
    it that the exhausted FOR_ITER skips (3.12+; see
    ``VersionSpec.for_iter_skips``).  Decoded code has it; generated code
    gets one, with a jump over it where the code before falls through."""
    if not _PAD:
        return instrs
    out = None
    for ins in instrs:
        if ins.opname != "FOR_ITER":
            continue
        seq = out if out is not None else instrs
        t = next((k for k, x in enumerate(seq) if x is ins.target), None)
        if t is None:
            continue   # (reported as a bad jump target later)
        if t >= len(_PAD) and tuple(x.opname for x in seq[t - len(_PAD):t]) == _PAD:
            continue
        if out is None:
            out = list(instrs)
            seq = out
        pos = ins.positions
        pad = [_pad_instr(name, pos) for name in _PAD]
        prev = seq[t - 1] if t else None
        if prev is not None and prev.opname not in SPEC.terminators:
            pad.insert(0, Instr("JUMP", SPEC.default_opcode["JUMP"], None, None, ins.target,
                                None, pos, None))
        seq[t:t] = pad
    return out if out is not None else instrs


def _pad_instr(name, positions):
    return Instr(name, SPEC.default_opcode[name], None, None, None, None, positions, None)


_INVERSE = {"POP_JUMP_IF_TRUE": "POP_JUMP_IF_FALSE", "POP_JUMP_IF_FALSE": "POP_JUMP_IF_TRUE",
            "POP_JUMP_IF_NONE": "POP_JUMP_IF_NOT_NONE", "POP_JUMP_IF_NOT_NONE": "POP_JUMP_IF_NONE"}


def _forward_conditionals(instrs):
    """From 3.12 conditional jumps only go forward: a backward one becomes
    the inverse jump over an unconditional ``JUMP`` back.  Returns the list
    and ``{id(original jump): its replacement}``."""
    if all(SPEC.jump_variants.get(name, (None, None))[1] is not None for name in _INVERSE):
        return instrs, {}
    where = None
    turned = {}
    for k, ins in enumerate(instrs):
        if ins.opname not in _INVERSE:
            continue
        if where is None:
            where = {id(x): j for j, x in enumerate(instrs)}
        t = where.get(id(ins.target))
        if t is None or t > k:
            continue
        if k + 1 >= len(instrs):
            raise ValueError(f"{ins!r} is the last instruction and jumps backwards")
        inverse = _INVERSE[ins.opname]
        turned[id(ins)] = Instr(inverse, SPEC.default_opcode[inverse], None, None, instrs[k + 1], None,
                                ins.positions, ins.exn)
    if not turned:
        return instrs, {}
    result = []
    for ins in instrs:
        rep = turned.get(id(ins))
        if rep is None:
            result.append(ins)
        else:
            result += [rep, Instr("JUMP", SPEC.default_opcode["JUMP"], None, None, ins.target, None,
                                  ins.positions, ins.exn)]
    return result, turned


def _fuse_pair(name, a, b, targets, local_idx):
    if (a.opname, b.opname) != SPEC.splits[name] or id(b) in targets or b.fused:
        return None
    if a.positions != b.positions or a.exn != b.exn:
        return None
    op = SPEC.opmap[name]
    if name == "RETURN_CONST":
        return Instr(name, op, None, a.argval, None, None, a.positions, a.exn)
    if name in ("BINARY_SLICE", "STORE_SLICE"):
        if (a.argval if a.argval is not None else a.arg) != 2:
            return None
        return Instr(name, op, None, None, None, None, a.positions, a.exn)
    # packed locals: only plain (unchecked) loads, as CPython's compiler does
    if any(x.opname == "LOAD_FAST" and x.opcode != _PLAIN_LOAD_FAST for x in (a, b)):
        return None
    i, j = local_idx(a), local_idx(b)
    if i >= 16 or j >= 16:
        return None
    return Instr(name, op, i << 4 | j, (a.argval, b.argval), None, None, a.positions, a.exn)


def assemble(instrs, template, **replace):
    """Build a code object from ``instrs``, taking unspecified fields from ``template``.

    ``replace`` may override any ``co_*`` field accepted by ``code.replace``
    except the ones computed here (co_code, co_linetable, co_exceptiontable,
    co_nlocals; co_stacksize is computed unless given).  Constants start from
    ``co_consts_prefix`` (alias ``co_consts``; default ``template.co_consts``,
    which keeps the docstring at index 0) and names from ``co_names`` (default
    the template's); missing ones are appended.  Fast locals not present in
    varnames/cellvars/freevars are appended to ``co_varnames``; cell and free
    variable lists must be passed explicitly when they change (and the
    MAKE_CELL / COPY_FREE_VARS prologue kept in sync by the caller).

    For name ops with flag bits below the name index (3.11: LOAD_GLOBAL's
    "push NULL" bit), the flag bits are taken from ``ins.arg``.
    The input instructions are not modified.
    """
    spec = SPEC
    unknown = set(replace) - _REPLACEABLE
    if unknown:
        raise TypeError(f"assemble() got unsupported fields: {sorted(unknown)}")
    instrs = list(instrs)
    n = len(instrs)
    if not n:
        raise ValueError("cannot assemble an empty instruction list")

    consts = replace.pop("co_consts_prefix", None)
    if consts is None:
        consts = replace.pop("co_consts", template.co_consts)
    else:
        replace.pop("co_consts", None)
    pools = _Pools(consts, replace.pop("co_names", template.co_names))
    varnames = list(replace.pop("co_varnames", template.co_varnames))
    cellvars = tuple(replace.get("co_cellvars", template.co_cellvars))
    freevars = tuple(replace.get("co_freevars", template.co_freevars))
    firstlineno = replace.get("co_firstlineno", template.co_firstlineno)

    arg_kind = spec.arg_kind
    kinds = []
    try:
        for ins in instrs:
            kinds.append(arg_kind[ins.opname])
    except KeyError:
        raise ValueError(f"unknown opname {ins.opname!r}") from None

    # New fast locals become extra varnames (before building localsplus,
    # since varnames come first and shift the cell/free indices).
    known = set(varnames) | set(cellvars) | set(freevars)
    fast_ops = spec.local_reads | spec.local_writes | spec.local_deletes
    for ins, kind in zip(instrs, kinds):
        if kind == ARG_LOCAL and ins.argval not in known:
            if ins.opname not in fast_ops:
                raise ValueError(f"{ins.opname} {ins.argval!r}: not a cell/free variable "
                                 "(pass co_cellvars/co_freevars)")
            if not isinstance(ins.argval, str):
                raise TypeError(f"local name must be a str, got {ins.argval!r}")
            varnames.append(ins.argval)
            known.add(ins.argval)
    local_idx = _local_resolver(localsplus_names(varnames, cellvars, freevars), template)

    instrs, fused = _fuse(instrs, local_idx)
    lowered, turned = _forward_conditionals(instrs)
    fused.update(turned)
    padded = _pad_for_iter(lowered)
    if fused or padded is not instrs:
        instrs = padded
        n = len(instrs)
        kinds = [arg_kind[ins.opname] for ins in instrs]

    # Opcodes and args; jumps get their opcode from direction, arg from layout.
    index = _index_map(instrs)
    for half, ins in fused.items():
        index[half] = index[id(ins)]   # jumps and handlers name the first half
    ops = [0] * n
    args = [0] * n
    ext = [0] * n
    units = [0] * n
    jumps = []
    cache_counts = spec.cache_counts
    default_opcode = spec.default_opcode
    variant_opcodes = spec.variant_opcodes
    for k, (ins, kind) in enumerate(zip(instrs, kinds)):
        if kind == ARG_JUMP:
            if ins.target is None:
                raise ValueError(f"jump {ins!r} has no target")
            t = _lookup(index, ins.target, "jump target")
            # Direction only depends on order, so the opcode is fixed now.
            op, _ = spec.encode_jump(ins.opname, 0 if t > k else spec.code_unit, 0)
            ops[k] = op
            jumps.append((k, t))
        else:
            op = ins.opcode
            if op not in variant_opcodes.get(ins.opname, ()):
                op = default_opcode[ins.opname]
            ops[k] = op
            a = args[k] = _resolve_arg(ins, kind, pools, local_idx)
            ext[k] = _ext_count(a)
        units[k] = ext[k] + 1 + cache_counts[ops[k]]

    # Layout fixpoint: EXTENDED_ARG counts only ever grow, so this terminates.
    unit = spec.code_unit
    while True:
        offs = [0] * (n + 1)
        acc = 0
        for k in range(n):
            offs[k] = acc
            acc += units[k]
        offs[n] = acc
        changed = False
        for k, t in jumps:
            land = offs[t]
            if instrs[k].opname == "FOR_ITER":
                land -= spec.for_iter_skips   # the END_FOR pad (see _pad_for_iter)
            op, a = spec.encode_jump(instrs[k].opname, (offs[k] + units[k]) * unit,
                                     land * unit)
            ops[k] = op
            args[k] = a
            need = _ext_count(a)
            if need > ext[k]:
                units[k] += need - ext[k]
                ext[k] = need
                changed = True
        if not changed:
            break

    code = bytearray()
    ext_op = spec.extended_arg
    for k in range(n):
        a = args[k]
        for s in range(ext[k], 0, -1):
            code.append(ext_op)
            code.append((a >> (8 * s)) & 0xFF)
        code.append(ops[k])
        code.append(a & 0xFF)
        code.extend(b"\0\0" * cache_counts[ops[k]])

    linetable = encode_linetable(((ins.positions, units[k]) for k, ins in enumerate(instrs)),
                                 firstlineno, spec.merge_locations)
    exn_rows = []
    cur = None
    cur_start = 0
    for k, ins in enumerate(instrs + [None]):
        e = None if ins is None else ins.exn
        key = None if e is None else (id(e.target), e.depth, e.lasti)
        curkey = None if cur is None else (id(cur.target), cur.depth, cur.lasti)
        if key != curkey:
            if cur is not None:
                h = offs[_lookup(index, cur.target, "exception handler")]
                exn_rows.append((cur_start, offs[k], h, cur.depth, cur.lasti))
            cur = e
            cur_start = offs[k]
    exntable = encode_exception_table(exn_rows)

    if "co_stacksize" not in replace:
        have_arg = spec.have_argument
        overrides = spec.effect_overrides
        jump_overrides = spec.jump_effect_overrides
        effects = []
        for k, ins in enumerate(instrs):
            op = ops[k]
            a = args[k] if op >= have_arg else None
            o = overrides.get(ins.opname)
            if o is not None:
                effects.append((o, o))
            else:
                j = 0
                if kinds[k] == ARG_JUMP:
                    j = jump_overrides.get(ins.opname)
                    if j is None:
                        j = _effect(op, a, True)
                effects.append((_effect(op, a, False), j))
        replace["co_stacksize"] = max_stack_depth(instrs, effects, index)

    return template.replace(
        co_code=bytes(code),
        co_consts=tuple(pools.consts),
        co_names=tuple(pools.names),
        co_varnames=tuple(varnames),
        co_nlocals=len(varnames),
        co_linetable=linetable,
        co_exceptiontable=exntable,
        **replace,
    )

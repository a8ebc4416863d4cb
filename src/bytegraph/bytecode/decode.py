"""Decoding code objects into :class:`~.instr.Instr` tuples, with a per-code cache.

The tracer decodes every function it inlines, often the same ones again and
again, so :func:`decode` memoizes its result per code object.  The cache is
keyed by ``id(code)`` and guarded by a weak reference: code objects compare
(and hash) by value, and hashing one recursively hashes its constants, which
is too slow for a hot path.  When a code object dies, its entry is dropped.

The decoder reads ``co_code`` directly instead of going through
``dis.get_instructions`` (which formats reprs for every instruction).
"""

from __future__ import annotations

import dis
import weakref

from .instr import ExnEntry, Instr
from .tables import parse_exception_table
from .versions import (ARG_COMPARE, ARG_CONST, ARG_FORMAT, ARG_INT, ARG_JUMP, ARG_LOCAL,
                       ARG_LOCAL_PAIR, ARG_NAME, ARG_NONE, SPEC, localsplus_names)

_LOAD_FAST = SPEC.opmap["LOAD_FAST"]

_cache: dict = {}


def _evict(key, ref):
    entry = _cache.get(key)
    if entry is not None and entry[0] is ref:
        del _cache[key]


def decode(code) -> tuple:
    """Return the normalized instructions of ``code``.

    The tuple (and its Instr objects) is shared by all callers: treat it as
    read-only and use :func:`~.instr.copy_instrs` before editing.
    """
    key = id(code)
    entry = _cache.get(key)
    if entry is not None and entry[0]() is code:
        return entry[1]
    instrs = _decode(code)
    ref = weakref.ref(code, lambda r, key=key: _evict(key, r))
    _cache[key] = (ref, instrs)
    return instrs


def clear_cache() -> None:
    """Forget all cached decodes (mainly for tests and benchmarks)."""
    _cache.clear()


def _decode(code) -> tuple:
    spec = SPEC
    raw = code.co_code
    consts = code.co_consts
    names = code.co_names
    localsplus = localsplus_names(code.co_varnames, code.co_cellvars, code.co_freevars)
    norm_name = spec.norm_name
    arg_kind = spec.arg_kind
    cache_counts = spec.cache_counts
    flag_bits = spec.name_flag_bits
    have_arg = spec.have_argument
    ext_op = spec.extended_arg
    cmp_op = spec.cmp_op
    cmp_shift = spec.compare_shift
    converters = spec.format_converters
    unit = spec.code_unit
    aliases = spec.aliases
    alias_masks = spec.alias_masks
    splits = spec.splits
    default_opcode = spec.default_opcode
    for_iter_skips = spec.for_iter_skips

    positions = list(code.co_positions())
    interned = {}
    make_pos = tuple.__new__  # dis.Positions(*p) without the namedtuple overhead
    Positions = dis.Positions
    exn_rows = parse_exception_table(code.co_exceptiontable)
    n_rows = len(exn_rows)
    row = 0

    instrs = []
    row_of = []          # exception-table row index per instr, or -1
    by_unit = {}         # code-unit index of an instruction's first unit -> Instr
    jumps = []           # (Instr, target unit)
    nunits = len(raw) // 2
    i = 0
    start = -1
    ext = 0
    while i < nunits:
        op = raw[2 * i]
        oparg = raw[2 * i + 1]
        if start < 0:
            start = i
        if op == ext_op:
            ext = (ext | oparg) << 8
            i += 1
            continue
        name = norm_name[op]
        if name is None:
            raise ValueError(f"unexpected opcode {spec.opname[op]} at offset {2 * i}")
        end = i + 1 + cache_counts[op]
        p = positions[i]
        pos = interned.get(p)
        if pos is None:
            pos = interned[p] = make_pos(Positions, p)
        if op < have_arg:
            arg = argval = None
        else:
            arg = ext | oparg
            mask = alias_masks.get(op)
            if mask is not None:
                name = aliases.get((op, arg & mask), name)
            kind = arg_kind[name]
            if kind == ARG_INT:
                argval = arg
            elif kind == ARG_CONST:
                argval = consts[arg]
            elif kind == ARG_NAME:
                argval = names[arg >> flag_bits.get(name, 0)]
            elif kind == ARG_LOCAL:
                argval = localsplus[arg]
            elif kind == ARG_JUMP:
                argval = None
                tgt = spec.jump_target_offset(op, arg, end * unit) // unit
                if name == "FOR_ITER":
                    tgt += for_iter_skips   # past END_FOR (see VersionSpec.for_iter_skips)
                jumps.append((len(instrs), tgt))
            elif kind == ARG_COMPARE:
                argval = cmp_op[arg >> cmp_shift]
            elif kind == ARG_FORMAT:
                argval = (converters[arg & 3], bool(arg & 4))
            elif kind == ARG_LOCAL_PAIR:
                argval = (localsplus[arg >> 4], localsplus[arg & 15])
            else:
                assert kind == ARG_NONE   # an alias whose argument picked the operation
                arg = argval = None
        parts = splits.get(name)
        if parts is None:
            ins = Instr(name, op, arg, argval, None, start * unit, pos, None)
            first = (ins,)
        else:
            first = _split(name, parts, op, arg, argval, start * unit, pos, default_opcode)
            ins = first[0]
        by_unit[start] = ins
        for part in first:
            instrs.append(part)
        # Exception-table rows are sorted and disjoint: advance a cursor.
        while row < n_rows and exn_rows[row][1] <= start:
            row += 1
        r = row if row < n_rows and exn_rows[row][0] <= start else -1
        row_of.extend((r,) * len(first))
        start = -1
        ext = 0
        i = end

    for idx, tgt in jumps:
        try:
            instrs[idx].target = by_unit[tgt]
        except KeyError:
            raise ValueError(f"jump at offset {instrs[idx].offset} lands mid-instruction "
                             f"(offset {tgt * unit})") from None

    entries = {}
    row_entry = [None] * n_rows
    for r, (_, _, tgt, depth, lasti) in enumerate(exn_rows):
        handler = by_unit.get(tgt)
        if handler is None:
            raise ValueError(f"exception handler at offset {tgt * unit} is not an instruction")
        key = (tgt, depth, lasti)
        e = entries.get(key)
        if e is None:
            e = entries[key] = ExnEntry(handler, depth, lasti)
        row_entry[r] = e
    for ins, r in zip(instrs, row_of):
        if r >= 0:
            ins.exn = row_entry[r]
    return tuple(instrs)


def _split(name, parts, op, arg, argval, offset, pos, default_opcode):
    """The two normalized instructions one fused real instruction stands for
    (see ``VersionSpec.splits``); the first remembers the fused name."""
    a, b = parts
    if name == "RETURN_CONST":
        args = ((arg, argval), (None, None))
    elif name in ("BINARY_SLICE", "STORE_SLICE"):
        args = ((2, 2), (None, None))
    else:   # two locals packed in one oparg (3.13)
        args = ((arg >> 4, argval[0]), (arg & 15, argval[1]))
    first = Instr(a, default_opcode[a], args[0][0], args[0][1], None, offset, pos, None, name)
    # a split LOAD_FAST was never a checked one: the compiler only fuses plain LOAD_FASTs
    second = Instr(b, default_opcode[b], args[1][0], args[1][1], None, offset, pos, None)
    for ins in (first, second):
        if ins.opname == "LOAD_FAST":
            ins.opcode = _LOAD_FAST
    return first, second

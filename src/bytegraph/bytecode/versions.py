"""CPython-version knowledge for the bytecode layer.

Everything that differs between interpreter versions lives here, so that the
decoder, assembler and analyses are version-free and adding 3.12/3.13 means
adding one table builder below:

* which real opcodes map to which *normalized* opname (3.12-style,
  direction-free jumps: ``JUMP``, ``POP_JUMP_IF_TRUE``, ...), and back;
* how each normalized op's argument is interpreted (constant index, name
  index with flag bits, localsplus index, jump, comparison, ...);
* inline cache sizes, EXTENDED_ARG, how relative jumps are measured;
* which ops end a basic block, and which ops touch locals/cells (for
  liveness).

The table for the running interpreter is exposed as :data:`SPEC`.

Porting notes for the next versions (what a new builder must provide):
3.12 puts a method flag in LOAD_ATTR's low bit and two flags in
LOAD_SUPER_ATTR (``name_flag_bits``), shifts COMPARE_OP's index left by 4
(``compare_shift``), adds RETURN_CONST (a terminator), has only forward
POP_JUMP_IF_* and drops JUMP_IF_*_OR_POP; 3.13 packs two locals into
LOAD_FAST_LOAD_FAST & co (their argval would become a tuple of names) and
uses a compare shift of 5.  The table formats in :mod:`.tables` are the
same for 3.11-3.13.
"""

from __future__ import annotations

import dis
import opcode as _opcode
import sys
from dataclasses import dataclass

# Argument kinds: how ``Instr.argval`` relates to the raw oparg.
ARG_NONE = "none"        # op takes no argument; arg/argval are None
ARG_INT = "int"          # argval == arg (counts, flags, BINARY_OP's nb-op, ...)
ARG_CONST = "const"      # index into co_consts; argval is the constant
ARG_NAME = "name"        # index into co_names (maybe shifted, see name_flag_bits)
ARG_LOCAL = "local"      # index into localsplus; argval is the variable name
ARG_JUMP = "jump"        # relative jump; argval None, Instr.target used
ARG_COMPARE = "compare"  # index into dis.cmp_op; argval is the operator string
ARG_FORMAT = "format"    # FORMAT_VALUE: argval == (converter|None, has_spec)


@dataclass(frozen=True)
class VersionSpec:
    version: tuple
    opname: tuple            # real opcode -> real name
    opmap: dict              # real name -> real opcode
    extended_arg: int        # opcode of EXTENDED_ARG
    have_argument: int       # opcodes >= this take an argument
    cache_counts: tuple      # real opcode -> number of inline CACHE units
    norm_name: tuple         # real opcode -> normalized name (None: never an Instr)
    # normalized jump name -> (forward real opcode | None, backward real opcode | None)
    jump_variants: dict
    backward_opcodes: frozenset   # real opcodes whose jump arg counts backwards
    default_opcode: dict     # normalized name -> real opcode used for new Instrs
    arg_kind: dict           # normalized name -> ARG_* constant
    name_flag_bits: dict     # normalized name op -> number of flag bits below the index
    cmp_op: tuple
    compare_shift: int       # COMPARE_OP oparg = index << shift | flag bits (kept from arg)
    format_converters: tuple  # FORMAT_VALUE low-2-bit converter objects
    terminators: frozenset   # normalized names with no fall-through successor
    local_reads: frozenset   # ops reading a fast local named by argval
    local_writes: frozenset  # ops (re)binding a fast local
    local_deletes: frozenset  # ops unbinding a fast local (also a read: raises if unbound)
    cell_ops: frozenset      # ops on cell/free variables (all treated as reads)
    # normalized name -> stack effect replacing dis.stack_effect's (both edges)
    effect_overrides: dict
    code_unit: int = 2       # bytes per code unit (and jump/exn-table unit)

    def jump_target_offset(self, real_opcode: int, arg: int, end_offset: int) -> int:
        """Byte offset a jump lands on; ``end_offset`` is just after its caches."""
        if real_opcode in self.backward_opcodes:
            return end_offset - arg * self.code_unit
        return end_offset + arg * self.code_unit

    def encode_jump(self, name: str, end_offset: int, target_offset: int):
        """Return ``(real_opcode, arg)`` for a jump laid out at ``end_offset``."""
        fwd, bwd = self.jump_variants[name]
        delta = target_offset - end_offset
        if delta >= 0 and fwd is not None:
            return fwd, delta // self.code_unit
        if delta < 0 and bwd is not None:
            return bwd, -delta // self.code_unit
        if delta < 0:
            raise ValueError(f"{name} cannot jump backwards on Python {self.version}")
        # Forward target but only a backward variant exists (e.g. JUMP_NO_INTERRUPT
        # in 3.11): fall back to the plain forward jump, which never checks for
        # interrupts in 3.11 anyway.
        return self.encode_jump("JUMP", end_offset, target_offset)

    def effect_opcode(self, name: str) -> int:
        """Real opcode whose stack effect stands for the normalized ``name``."""
        return self.default_opcode[name]


def _arg_kinds(norm_name, opmap):
    """Classify each normalized op's argument using the running ``opcode`` module."""
    kinds = {}
    for real, op in opmap.items():
        name = norm_name[op]
        if name is None:
            continue
        if op < _opcode.HAVE_ARGUMENT:
            kind = ARG_NONE
        elif op in _opcode.hasconst:
            kind = ARG_CONST
        elif op in _opcode.hasname:
            kind = ARG_NAME
        elif op in _opcode.hasjrel or op in _opcode.hasjabs:
            kind = ARG_JUMP
        elif op in _opcode.haslocal or op in _opcode.hasfree:
            kind = ARG_LOCAL
        elif op in _opcode.hascompare:
            kind = ARG_COMPARE
        elif real == "FORMAT_VALUE":
            kind = ARG_FORMAT
        else:
            kind = ARG_INT
        prev = kinds.setdefault(name, kind)
        assert prev == kind, (name, prev, kind)
    return kinds


def _build_311() -> VersionSpec:
    opmap = dict(_opcode.opmap)
    opname = tuple(_opcode.opname)
    # 3.11 jumps are direction specific; 3.12-style names hide the direction.
    renames = {
        "JUMP_FORWARD": "JUMP",
        "JUMP_BACKWARD": "JUMP",
        "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_NO_INTERRUPT",
    }
    for cond in ("TRUE", "FALSE", "NONE", "NOT_NONE"):
        renames[f"POP_JUMP_FORWARD_IF_{cond}"] = f"POP_JUMP_IF_{cond}"
        renames[f"POP_JUMP_BACKWARD_IF_{cond}"] = f"POP_JUMP_IF_{cond}"
    norm_name = [None] * 256
    for real, op in opmap.items():
        if real in ("CACHE", "EXTENDED_ARG"):
            continue
        norm_name[op] = renames.get(real, real)
    norm_name = tuple(norm_name)

    jump_variants = {}
    backward = set()
    for op in sorted(set(_opcode.hasjrel) | set(_opcode.hasjabs)):
        real = opname[op]
        fwd, bwd = jump_variants.get(norm_name[op], (None, None))
        if "BACKWARD" in real:
            bwd = op
            backward.add(op)
        else:
            fwd = op
        jump_variants[norm_name[op]] = (fwd, bwd)

    default_opcode = {}
    for real, op in opmap.items():
        name = norm_name[op]
        if name is None:
            continue
        if name in jump_variants:
            fwd, bwd = jump_variants[name]
            default_opcode[name] = fwd if fwd is not None else bwd
        else:
            default_opcode[name] = op

    cache = list(_opcode._inline_cache_entries)
    cache += [0] * (256 - len(cache))
    return VersionSpec(
        version=(3, 11),
        opname=opname,
        opmap=opmap,
        extended_arg=_opcode.EXTENDED_ARG,
        have_argument=_opcode.HAVE_ARGUMENT,
        cache_counts=tuple(cache),
        norm_name=norm_name,
        jump_variants=jump_variants,
        backward_opcodes=frozenset(backward),
        default_opcode=default_opcode,
        arg_kind=_arg_kinds(norm_name, opmap),
        # LOAD_GLOBAL's oparg is (name index << 1) | push_null.
        name_flag_bits={"LOAD_GLOBAL": 1},
        cmp_op=tuple(dis.cmp_op),
        compare_shift=0,
        format_converters=tuple(c for c, _ in dis.FORMAT_VALUE_CONVERTERS),
        terminators=frozenset(
            {"RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "JUMP", "JUMP_NO_INTERRUPT"}),
        local_reads=frozenset({"LOAD_FAST"}),
        local_writes=frozenset({"STORE_FAST"}),
        local_deletes=frozenset({"DELETE_FAST"}),
        cell_ops=frozenset({"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE",
                            "MAKE_CELL", "LOAD_CLASSDEREF"}),
        # dis says 0, but when the generator is first resumed the sent value
        # (None) is pushed right after RETURN_GENERATOR and popped by the
        # POP_TOP that follows; CPython's compiler never sees this prologue
        # when it computes co_stacksize.
        effect_overrides={"RETURN_GENERATOR": 1},
    )


# Only 3.11 is filled in; 3.12/3.13 builders slot in here.
_BUILDERS = {(3, 11): _build_311}


def spec_for(version=None) -> VersionSpec:
    version = tuple(version or sys.version_info[:2])
    try:
        builder = _BUILDERS[version]
    except KeyError:
        raise RuntimeError(
            f"bytegraph.bytecode does not support Python {version[0]}.{version[1]}"
        ) from None
    return builder()


SPEC = spec_for()


def localsplus_names(varnames, cellvars, freevars) -> tuple:
    """Names in localsplus order (3.11+): locals, then cells that are not
    also locals, then free variables.  Local/cell/free opargs index this."""
    if cellvars:
        vs = set(varnames)
        cellvars = tuple(c for c in cellvars if c not in vs)
    return tuple(varnames) + tuple(cellvars) + tuple(freevars)

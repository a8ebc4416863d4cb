"""CPython-version knowledge for the bytecode layer.

Everything that differs between interpreter versions (3.11, 3.12, 3.13)
lives here, so that the decoder, assembler and analyses are version-free:

* which real opcodes map to which *normalized* opname (3.12-style,
  direction-free jumps: ``JUMP``, ``POP_JUMP_IF_TRUE``, ...), and back;
* *aliases*: a real opcode with certain argument bits that decodes as its
  own normalized op (3.12's ``LOAD_ATTR`` with the method bit is
  ``LOAD_METHOD``; ``CALL_INTRINSIC_1`` 6 is ``LIST_TO_TUPLE``), so the
  tracer has one handler per operation whatever the spelling;
* *splits*: one real instruction that decodes as two normalized ones
  (``RETURN_CONST`` = ``LOAD_CONST`` + ``RETURN_VALUE``, 3.13's
  ``LOAD_FAST_LOAD_FAST`` = two ``LOAD_FAST``, ``BINARY_SLICE`` =
  ``BUILD_SLICE 2`` + ``BINARY_SUBSCR``); the assembler fuses them back
  where the decoder split them, so round trips stay byte-identical;
* jump targets where execution lands: from 3.12 an exhausted ``FOR_ITER``
  skips the ``END_FOR`` (3.13: ``END_FOR, POP_TOP``) its oparg points at, so
  the decoded target is the instruction after them and the assembler keeps
  that pad in front of it (``for_iter_skips``);
* how each normalized op's argument is interpreted (constant index, name
  index with flag bits, localsplus index, jump, comparison, ...);
* inline cache sizes, EXTENDED_ARG, how relative jumps are measured;
* which ops end a basic block, and which ops touch locals/cells (for
  liveness);
* the calling convention: where the NULL of a call sits relative to the
  callable (below it up to 3.12, above it from 3.13).

The table for the running interpreter is exposed as :data:`SPEC`.  Emitting
*operations* (a call, a method load, a function with a closure) for the
running version is :mod:`.emit`'s job, built on this table.
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
ARG_LOCAL_PAIR = "local pair"  # two 4-bit localsplus indexes (3.13); argval is (name, name)
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
    #: (real opcode, oparg bits) -> normalized name: a real op whose argument
    #: selects another operation (see module docstring); ``alias_masks`` gives
    #: the bits of the oparg that select it
    aliases: dict = None
    alias_masks: dict = None
    #: normalized name -> fixed oparg (or flag bits) its real opcode carries
    forced_arg: dict = None
    #: real fused name -> (first normalized op, second normalized op)
    splits: dict = None
    #: compare operator -> the low oparg bits CPython's compiler gives it
    compare_masks: dict = None
    #: whether a call's NULL sits above the callable (3.13) rather than below
    null_after_callable: bool = False
    #: whether ``locals()`` in a function is a new snapshot dict per call (3.13,
    #: PEP 667) rather than the frame's one dict, refreshed by each call
    locals_snapshot: bool = False
    #: whether CALL needs a PRECALL before it (3.11)
    has_precall: bool = False
    #: whether keyword names go in a KW_NAMES before CALL (3.11, 3.12) or as
    #: a tuple on the stack for CALL_KW (3.13)
    kw_names_op: bool = True
    #: whether MAKE_FUNCTION takes flags (3.11, 3.12) or attributes are set one
    #: by one with SET_FUNCTION_ATTRIBUTE (3.13)
    make_function_flags: bool = True
    #: how many instructions follow FOR_ITER's exhaustion target that the
    #: exhausted FOR_ITER skips (0 in 3.11; END_FOR in 3.12; END_FOR, POP_TOP in 3.13)
    for_iter_skips: int = 0
    #: normalized name -> stack effect on its jump edge replacing dis's
    jump_effect_overrides: dict = None
    #: COMPARE_OP's flag bit asking for the result as a bool (3.13: the
    #: compiler drops the TO_BOOL of ``if a < b``), or 0
    compare_bool_bit: int = 0
    #: whether the location table merges consecutive instructions at one
    #: location into shared entries (3.12+)
    merge_locations: bool = False
    #: normalized name -> the real opcodes it may keep from ``Instr.opcode``
    #: when assembled (LOAD_FAST vs LOAD_FAST_CHECK)
    variant_opcodes: dict = None

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

    def has_op(self, name: str) -> bool:
        """Whether the normalized op ``name`` exists on this version.

        >>> SPEC.has_op("LOAD_FAST")
        True
        """
        return name in self.default_opcode


def _cache_counts(opmap):
    raw = _opcode._inline_cache_entries
    cache = [0] * 256
    if isinstance(raw, dict):       # 3.13: by name
        for name, n in raw.items():
            op = opmap.get(name)
            if op is not None and op < 256:
                cache[op] = n
    else:
        for op, n in enumerate(raw[:256]):
            cache[op] = n
    return tuple(cache)


def _takes_arg(op):
    has_arg = getattr(dis, "hasarg", None)
    if has_arg is not None:
        return op in has_arg
    return op >= _opcode.HAVE_ARGUMENT


def _arg_kinds(norm_name, opmap):
    """Classify each normalized op's argument using the running ``opcode`` module."""
    kinds = {}
    for real, op in opmap.items():
        name = norm_name[op]
        if name is None:
            continue
        if not _takes_arg(op):
            kind = ARG_NONE
        elif op in _opcode.hasconst:
            kind = ARG_CONST
        elif op in _opcode.hasname:
            kind = ARG_NAME
        elif op in _opcode.hasjrel or op in getattr(_opcode, "hasjabs", ()):
            kind = ARG_JUMP
        elif real in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"):
            kind = ARG_LOCAL_PAIR
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


def _compare_masks(shift):
    """The low COMPARE_OP bits the running compiler gives each operator in
    a plain expression (3.12+ use them to specialize: a wrong mask gives a
    wrong answer once the instruction is specialized)."""
    masks = {}
    if not shift:
        return masks
    for op in dis.cmp_op:
        code = compile(f"a {op} b", "<probe>", "eval")
        for ins in dis.get_instructions(code):
            if ins.opname == "COMPARE_OP":
                masks[op] = ins.arg & ((1 << shift) - 1)
    return masks


#: 3.12+'s intrinsic functions that stand for 3.11 opcodes (or new ops of
#: their own): CALL_INTRINSIC_1/2 with these opargs decode as these names
_INTRINSICS_1 = {
    "INTRINSIC_PRINT": "PRINT_EXPR",
    "INTRINSIC_IMPORT_STAR": "IMPORT_STAR",
    "INTRINSIC_STOPITERATION_ERROR": "STOPITERATION_ERROR",
    "INTRINSIC_ASYNC_GEN_WRAP": "ASYNC_GEN_WRAP",
    "INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE",
    "INTRINSIC_LIST_TO_TUPLE": "LIST_TO_TUPLE",
}
_INTRINSICS_2 = {"INTRINSIC_PREP_RERAISE_STAR": "PREP_RERAISE_STAR"}


def _build() -> VersionSpec:
    version = tuple(sys.version_info[:2])
    # Pseudo-opcodes (3.12+ number them 256 and up) never appear in co_code.
    opmap = {n: o for n, o in _opcode.opmap.items() if o < 256}
    opname = tuple(_opcode.opname[:256])
    # 3.11 jumps are direction specific; 3.12-style names hide the direction.
    renames = {
        "JUMP_FORWARD": "JUMP",
        "JUMP_BACKWARD": "JUMP",
        "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_NO_INTERRUPT",
        # 3.12+: only the compiler tells these apart from LOAD_FAST
        "LOAD_FAST_CHECK": "LOAD_FAST",
    }
    for cond in ("TRUE", "FALSE", "NONE", "NOT_NONE"):
        renames[f"POP_JUMP_FORWARD_IF_{cond}"] = f"POP_JUMP_IF_{cond}"
        renames[f"POP_JUMP_BACKWARD_IF_{cond}"] = f"POP_JUMP_IF_{cond}"
    norm_name = [None] * 256
    for real, op in opmap.items():
        if real in ("CACHE", "EXTENDED_ARG") or real.startswith("INSTRUMENTED_"):
            continue
        norm_name[op] = renames.get(real, real)
    norm_name = tuple(norm_name)
    # From 3.12 LOAD_FAST trusts the compiler that the local is bound; new
    # code gets the checking variant, decoded code keeps the one it had.
    keep_opcode = {"LOAD_FAST": opmap.get("LOAD_FAST_CHECK", opmap["LOAD_FAST"])}
    variant_opcodes = {"LOAD_FAST": frozenset(
        opmap[n] for n in ("LOAD_FAST", "LOAD_FAST_CHECK") if n in opmap)}

    jump_variants = {}
    backward = set()
    for op in sorted(set(_opcode.hasjrel) | set(getattr(_opcode, "hasjabs", ()))):
        if op >= 256:
            continue
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
        elif name not in keep_opcode:
            default_opcode[name] = op
    default_opcode.update(keep_opcode)
    arg_kind = _arg_kinds(norm_name, opmap)

    name_flag_bits = {"LOAD_GLOBAL": 1}
    aliases, alias_masks, forced_arg = {}, {}, {}
    if "LOAD_SUPER_ATTR" in opmap:      # 3.12+
        # LOAD_ATTR's low bit asks for a method load: that is 3.11's LOAD_METHOD
        name_flag_bits.update({"LOAD_ATTR": 1, "LOAD_METHOD": 1, "LOAD_SUPER_ATTR": 2})
        aliases[(opmap["LOAD_ATTR"], 1)] = "LOAD_METHOD"
        alias_masks[opmap["LOAD_ATTR"]] = 1
        default_opcode["LOAD_METHOD"] = opmap["LOAD_ATTR"]
        arg_kind["LOAD_METHOD"] = ARG_NAME
        forced_arg["LOAD_METHOD"] = 1
        forced_arg["LOAD_ATTR"] = 0
    for table, real in ((_INTRINSICS_1, "CALL_INTRINSIC_1"), (_INTRINSICS_2, "CALL_INTRINSIC_2")):
        if real not in opmap:
            continue
        descs = getattr(_opcode, "_intrinsic_1_descs" if real.endswith("1") else "_intrinsic_2_descs")
        alias_masks[opmap[real]] = -1
        for k, desc in enumerate(descs):
            name = table.get(desc)
            if name is not None:
                aliases[(opmap[real], k)] = name
                default_opcode[name] = opmap[real]
                arg_kind[name] = ARG_NONE
                forced_arg[name] = k

    splits = {}
    for real, parts in (("RETURN_CONST", ("LOAD_CONST", "RETURN_VALUE")),
                        ("BINARY_SLICE", ("BUILD_SLICE", "BINARY_SUBSCR")),
                        ("STORE_SLICE", ("BUILD_SLICE", "STORE_SUBSCR")),
                        ("LOAD_FAST_LOAD_FAST", ("LOAD_FAST", "LOAD_FAST")),
                        ("STORE_FAST_STORE_FAST", ("STORE_FAST", "STORE_FAST")),
                        ("STORE_FAST_LOAD_FAST", ("STORE_FAST", "LOAD_FAST"))):
        if real in opmap:
            splits[real] = parts

    compare_shift = {(3, 11): 0, (3, 12): 4}.get(version, 5)
    if "FORMAT_VALUE" in opmap:
        converters = tuple(c for c, _ in dis.FORMAT_VALUE_CONVERTERS)
    else:
        converters = ()
    for_iter_skips = 0
    if "END_FOR" in opmap:
        for_iter_skips = 1 if version == (3, 12) else 2
    terminators = {"RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "JUMP", "JUMP_NO_INTERRUPT"}
    if "RETURN_CONST" in opmap:
        terminators.add("RETURN_CONST")
    return VersionSpec(
        version=version,
        opname=opname,
        opmap=opmap,
        extended_arg=_opcode.EXTENDED_ARG,
        have_argument=_opcode.HAVE_ARGUMENT,
        cache_counts=_cache_counts(opmap),
        norm_name=norm_name,
        jump_variants=jump_variants,
        backward_opcodes=frozenset(backward),
        default_opcode=default_opcode,
        arg_kind=arg_kind,
        # LOAD_GLOBAL's oparg is (name index << 1) | push_null.
        name_flag_bits=name_flag_bits,
        cmp_op=tuple(dis.cmp_op),
        compare_shift=compare_shift,
        format_converters=converters,
        terminators=frozenset(terminators),
        local_reads=frozenset({"LOAD_FAST"}),
        local_writes=frozenset({"STORE_FAST"}),
        # LOAD_FAST_AND_CLEAR (3.12+ inlined comprehensions) reads and unbinds
        local_deletes=frozenset({"DELETE_FAST", "LOAD_FAST_AND_CLEAR"}),
        cell_ops=frozenset({"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE",
                            "MAKE_CELL", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}),
        # dis says 0, but when the generator is first resumed the sent value
        # (None) is pushed right after RETURN_GENERATOR and popped by the
        # POP_TOP that follows; CPython's compiler never sees this prologue
        # when it computes co_stacksize.
        effect_overrides={"RETURN_GENERATOR": 1},
        aliases=aliases,
        alias_masks=alias_masks,
        forced_arg=forced_arg,
        splits=splits,
        compare_masks=_compare_masks(compare_shift),
        null_after_callable=version >= (3, 13),
        locals_snapshot=version >= (3, 13),
        has_precall="PRECALL" in opmap,
        kw_names_op="KW_NAMES" in opmap,
        make_function_flags="SET_FUNCTION_ATTRIBUTE" not in opmap,
        for_iter_skips=for_iter_skips,
        variant_opcodes=variant_opcodes,
        # From 3.12 an exhausted FOR_ITER pops the iterator and jumps past the
        # END_FOR at its target (dis counts the jump as reaching END_FOR with
        # a dummy value pushed); the decoder makes the landing point the
        # target, with the 3.11 effect.
        jump_effect_overrides={"FOR_ITER": -1} if for_iter_skips else {},
        merge_locations=version >= (3, 12),
        compare_bool_bit=16 if compare_shift == 5 else 0,
    )


_SUPPORTED = {(3, 11), (3, 12), (3, 13)}


def spec_for(version=None) -> VersionSpec:
    """The table for the running interpreter (the only one that can be built,
    since it is read off the running ``opcode`` module)."""
    version = tuple(version or sys.version_info[:2])
    if version not in _SUPPORTED or version != tuple(sys.version_info[:2]):
        raise RuntimeError(
            f"bytegraph.bytecode does not support Python {version[0]}.{version[1]}"
        )
    return _build()


SPEC = spec_for()


def localsplus_names(varnames, cellvars, freevars) -> tuple:
    """Names in localsplus order (3.11+): locals, then cells that are not
    also locals, then free variables.  Local/cell/free opargs index this."""
    if cellvars:
        vs = set(varnames)
        cellvars = tuple(c for c in cellvars if c not in vs)
    return tuple(varnames) + tuple(cellvars) + tuple(freevars)

"""The instruction model: :class:`Instr`, :class:`ExnEntry`, :func:`instr`, :func:`copy_instrs`.

An ``Instr`` is one *logical* instruction: EXTENDED_ARG prefixes are merged
into its ``arg``, inline CACHE units are implied by its opcode, and jumps
carry a direct reference to their target ``Instr`` instead of an offset.
Opnames are normalized (see :mod:`.versions`), so code written against this
model does not care about 3.11's jump directions.

``argval`` is authoritative when assembling: the assembler recomputes raw
args from it (constant/name/local indices, jump distances, comparison
indexes).  ``arg`` is only consulted for flag bits that live below an index
(LOAD_GLOBAL's "push NULL" bit in 3.11), to tell apart the two ``__class__``
slots of a class body (see ``assemble._local_resolver``), and for plain
integer ops (CALL, BUILD_TUPLE, ...) where it may stand in for a None
``argval`` -- if both are set they must agree, or assembling raises, so a
half-done edit is caught instead of silently ignored.

Decoded instructions report "no location" as an all-None ``dis.Positions``
(like ``dis``); new ones may use ``positions=None`` for the same thing.
``offset`` of a decoded instruction is the byte offset of its first code
unit, i.e. of its first EXTENDED_ARG prefix if it has one (that is where
jumps and exception ranges point).
"""

from __future__ import annotations

from .versions import ARG_INT, ARG_JUMP, ARG_NONE, SPEC

_JUMPS = frozenset(SPEC.jump_variants)


class ExnEntry:
    """The exception-table entry protecting an instruction.

    ``target`` is the handler's first Instr; ``depth`` the value-stack depth
    the handler unwinds to; ``lasti`` whether the offset of the raising
    instruction is pushed too.  Equality is by handler identity, so that
    equal entries on consecutive instructions merge into one table range.
    """

    __slots__ = ("target", "depth", "lasti")

    def __init__(self, target: "Instr", depth: int, lasti: bool):
        self.target = target
        self.depth = depth
        self.lasti = bool(lasti)

    @property
    def transparent(self) -> bool:
        """Whether this handler only passes exceptions on: 3.12+ wrap every
        generator body in one that turns an escaping StopIteration into
        RuntimeError (PEP 479) and re-raises.  Code under it is not inside
        any try/with block of the program's."""
        return self.target.opname == "STOPITERATION_ERROR"

    def _key(self):
        return (id(self.target), self.depth, self.lasti)

    def __eq__(self, other):
        if not isinstance(other, ExnEntry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        t = self.target
        where = f"@{t.offset}" if t is not None and t.offset is not None else f"#{id(t):x}"
        return f"ExnEntry(-> {where}, depth={self.depth}, lasti={self.lasti})"


class Instr:
    """One logical instruction (see module docstring for field meanings)."""

    __slots__ = ("opname", "opcode", "arg", "argval", "target", "offset", "positions", "exn", "fused")

    def __init__(self, opname, opcode, arg, argval, target=None, offset=None,
                 positions=None, exn=None, fused=None):
        self.opname = opname
        self.opcode = opcode
        self.arg = arg
        self.argval = argval
        self.target = target
        self.offset = offset
        self.positions = positions
        self.exn = exn
        #: on the first of two instructions the decoder split one real
        #: instruction into (``RETURN_CONST``, ``LOAD_FAST_LOAD_FAST``, ...):
        #: that real name, so the assembler can fuse them back
        self.fused = fused

    @property
    def is_jump(self) -> bool:
        return self.opname in _JUMPS

    def copy(self) -> "Instr":
        """Shallow copy (target/exn still point at the original objects)."""
        return Instr(self.opname, self.opcode, self.arg, self.argval, self.target,
                     self.offset, self.positions, self.exn, self.fused)

    def __repr__(self):
        parts = [self.opname]
        if self.opname in _JUMPS:
            t = self.target
            if t is None:
                parts.append("-> ?")
            elif t.offset is not None:
                parts.append(f"-> {t.opname}@{t.offset}")
            else:
                parts.append(f"-> {t.opname}#{id(t):x}")
        elif self.argval is not None or self.arg is not None:
            parts.append(repr(self.argval) if self.argval is not None else f"arg={self.arg}")
        if self.opname == "LOAD_GLOBAL" and self.arg is not None and self.arg & 1:
            parts.append("(+NULL)")
        if self.offset is not None:
            parts.append(f"@{self.offset}")
        if self.exn is not None:
            parts.append(f"exn->{self.exn.target.opname}@{self.exn.target.offset}"
                         f"/{self.exn.depth}{'L' if self.exn.lasti else ''}")
        return f"Instr({' '.join(parts)})"


def instr(opname: str, argval=None, *, arg=None, target=None, positions=None,
          exn=None) -> Instr:
    """Make a new instruction for code generation.

    ``opname`` is a normalized name (``JUMP``, not ``JUMP_FORWARD``).  For
    plain integer ops (``CALL``, ``BUILD_TUPLE``, ...) either ``argval`` or
    ``arg`` may be given.  ``instr("LOAD_GLOBAL", "f", arg=1)`` pushes NULL
    before the global (only the low bit of ``arg`` is used).
    """
    try:
        op = SPEC.default_opcode[opname]
    except KeyError:
        raise ValueError(f"unknown or non-normalized opname {opname!r}") from None
    kind = SPEC.arg_kind[opname]
    if kind == ARG_INT:
        if argval is None:
            argval = arg
        elif arg is None:
            arg = argval
        if argval is None:
            raise ValueError(f"{opname} needs an integer argument")
    elif kind == ARG_NONE:
        if argval is not None or arg is not None:
            raise ValueError(f"{opname} takes no argument")
    elif kind == ARG_JUMP:
        if argval is not None:
            raise ValueError(f"{opname}: give the jump target as target=, not argval")
    return Instr(opname, op, arg, argval, target, None, positions, exn)


def copy_instrs(instrs) -> list:
    """Copy ``instrs``, remapping jump targets and exception handlers to the copies.

    Targets outside ``instrs`` are left pointing at the original objects.
    """
    instrs = list(instrs)
    new = [i.copy() for i in instrs]
    remap = {id(old): cp for old, cp in zip(instrs, new)}
    exn_map = {}
    for cp in new:
        t = cp.target
        if t is not None:
            cp.target = remap.get(id(t), t)
        e = cp.exn
        if e is not None:
            ne = exn_map.get(id(e))
            if ne is None:
                ne = ExnEntry(remap.get(id(e.target), e.target), e.depth, e.lasti)
                exn_map[id(e)] = ne  # originals stay alive via `instrs`
            cp.exn = ne
    return new

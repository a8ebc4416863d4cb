"""Operations lowered to the running interpreter's instructions.

Generated code (codegen, breaks, resume functions, stand-in frames) asks for
*operations* -- "call with N arguments, these by keyword", "make a function
with a closure", "an attribute with a NULL beside it" -- and this module
turns each into the instructions of the running CPython, from the facts in
:data:`~.versions.SPEC`.  Nothing else in bytegraph spells PRECALL, KW_NAMES,
CALL_KW or SET_FUNCTION_ATTRIBUTE, or knows on which side of the callable a
call's NULL sits.

The calling convention, for reference:

* 3.11: ``NULL, callable, args`` (or ``method, self, args``), then
  ``KW_NAMES`` (keyword calls), ``PRECALL argc``, ``CALL argc``;
* 3.12: the same without ``PRECALL``;
* 3.13: ``callable, NULL, args`` (or ``method, self, args``), then
  ``CALL argc``, or ``LOAD_CONST names; CALL_KW argc``.

Example::

    >>> [i.opname for i in call(2, ("sep",))][-1] in ("CALL", "CALL_KW")
    True
"""

from __future__ import annotations

from .analysis import stack_effect
from .instr import instr
from .versions import SPEC

#: which slot of a (lower, upper) pair pushed for a call holds the NULL:
#: ``LOAD_GLOBAL`` with its NULL bit, a method load of a plain attribute
NULL_SLOTS = (False, True) if SPEC.null_after_callable else (True, False)

#: MAKE_FUNCTION's flag bits, in the order 3.13's SET_FUNCTION_ATTRIBUTE
#: consumes the values (the last pushed first)
_FUNCTION_ATTRIBUTES = (0x08, 0x04, 0x02, 0x01)


def call(argc: int, kw_names=(), *, positions=None, exn=None) -> list:
    """The instructions calling the callable (with its NULL, or a method with
    its self) and the ``argc`` arguments on the stack, the last
    ``len(kw_names)`` of them by keyword.

    >>> call(0)[-1].opname
    'CALL'
    """
    out = []
    kw_names = tuple(kw_names)
    if kw_names and not SPEC.kw_names_op:
        out.append(instr("LOAD_CONST", kw_names, positions=positions, exn=exn))
        out.append(instr("CALL_KW", arg=argc, positions=positions, exn=exn))
        return out
    if kw_names:
        out.append(instr("KW_NAMES", kw_names, positions=positions, exn=exn))
    if SPEC.has_precall:
        out.append(instr("PRECALL", arg=argc, positions=positions, exn=exn))
    out.append(instr("CALL", arg=argc, positions=positions, exn=exn))
    return out


def with_null(callable_instrs: list, *, positions=None, exn=None) -> list:
    """``callable_instrs`` (which push one callable) with the call's NULL on
    the side the running version wants it.

    >>> [i.opname for i in with_null([instr("LOAD_CONST", print)])] in (
    ...     ["PUSH_NULL", "LOAD_CONST"], ["LOAD_CONST", "PUSH_NULL"])
    True
    """
    null = instr("PUSH_NULL", positions=positions, exn=exn)
    if SPEC.null_after_callable:
        return list(callable_instrs) + [null]
    return [null] + list(callable_instrs)


def truth(*, positions=None, exn=None) -> list:
    """What turns the value on top of the stack into the bool a conditional
    jump tests: nothing up to 3.12 (the jumps test truth themselves),
    ``TO_BOOL`` from 3.13 (the jumps only compare with True/False).

    >>> [i.opname for i in truth()] in ([], ["TO_BOOL"])
    True
    """
    if SPEC.has_op("TO_BOOL"):
        return [instr("TO_BOOL", positions=positions, exn=exn)]
    return []


def under_handler(instrs: list, exn) -> list:
    """``instrs`` (already carrying the handler ``exn``) as the only code
    of a protected range: with a ``NOP`` under the same handler in front.

    CPython 3.13 unwinds an error that an inlined Python call returns (a
    CALL, or any instruction once specialized to call Python code) from the
    instruction *before* the call; its compiler always opens a protected
    range with a NOP.  Generated code does the same on every version.
    """
    if not instrs:
        return instrs
    return [instr("NOP", positions=instrs[0].positions, exn=exn)] + list(instrs)


def is_call(ins) -> bool:
    """Whether ``ins`` is the instruction that makes a call of the CALL family.

    >>> is_call(call(1)[-1])
    True
    """
    return ins.opname in ("CALL", "CALL_KW")


def call_operands(ins) -> int:
    """How many stack slots a call instruction consumes: the callable and its
    NULL (or method and self), the arguments, and for ``CALL_KW`` the names."""
    return ins.arg + (3 if ins.opname == "CALL_KW" else 2)


def call_lead(instrs, index: int) -> int:
    """Index of the first instruction of the call whose CALL is at ``index``
    (its ``PRECALL`` and ``KW_NAMES`` on the versions that have them): where
    a frame resumes to make that call again."""
    if not is_call(instrs[index]):
        return index
    j = index
    if SPEC.has_precall and j > 0 and instrs[j - 1].opname == "PRECALL":
        j -= 1
    if j > 0 and instrs[j - 1].opname == "KW_NAMES":
        j -= 1
    return j


def load_cell(name: str, *, positions=None, exn=None) -> "Instr":
    """Push the cell object of the frame's cell or free variable ``name``
    (for a closure tuple): ``LOAD_CLOSURE`` up to 3.12, ``LOAD_FAST`` of the
    cell's slot from 3.13."""
    op = "LOAD_CLOSURE" if SPEC.has_op("LOAD_CLOSURE") else "LOAD_FAST"
    return instr(op, name, positions=positions, exn=exn)


def make_function(flags: int, *, positions=None, exn=None) -> list:
    """Make a function of the code object on top of the stack, taking the
    values ``flags`` names (MAKE_FUNCTION's bits: 0x08 closure, 0x04
    annotations, 0x02 keyword defaults, 0x01 defaults) from below it.

    >>> make_function(0)[0].opname
    'MAKE_FUNCTION'
    """
    if SPEC.make_function_flags:
        return [instr("MAKE_FUNCTION", arg=flags, positions=positions, exn=exn)]
    out = [instr("MAKE_FUNCTION", positions=positions, exn=exn)]
    for bit in _FUNCTION_ATTRIBUTES:
        if flags & bit:
            out.append(instr("SET_FUNCTION_ATTRIBUTE", arg=bit, positions=positions, exn=exn))
    return out


def attribute_with_null(name: str, *, positions=None, exn=None) -> list:
    """Replace the object on top of the stack by its attribute ``name``,
    with a NULL on the side :data:`NULL_SLOTS` says: what a method load
    leaves for a plain attribute, as a layout known in advance."""
    return [instr("LOAD_ATTR", name, positions=positions, exn=exn)] + null_beside(positions=positions, exn=exn)


def null_beside(*, positions=None, exn=None) -> list:
    """Put a call's NULL beside the callable on top of the stack, on the side
    :data:`NULL_SLOTS` says."""
    out = [instr("PUSH_NULL", positions=positions, exn=exn)]
    if not SPEC.null_after_callable:
        out.append(instr("SWAP", arg=2, positions=positions, exn=exn))
    return out


def place_null(instrs: list, start: int, argc: int) -> bool:
    """Put the call's NULL at ``instrs[start]`` where the running version
    wants it, for a call of ``argc`` arguments about to be made on the
    stack the instructions after ``start`` build.  Code generation pushes
    the NULL *before* the callable; from 3.13 it goes just above it: after
    the last instruction at which one value (the callable) is pushed.

    Returns False, changing nothing, when those instructions do not push
    exactly the callable and ``argc`` arguments: the NULL belongs to an
    enclosing call (this one is a method call, or its NULL was pushed
    another way).

    >>> from .instr import instr
    >>> seq = [instr("PUSH_NULL"), instr("LOAD_CONST", print), instr("LOAD_CONST", 1)]
    >>> place_null(seq, 0, 1)
    True
    >>> [i.opname for i in seq] in (["PUSH_NULL", "LOAD_CONST", "LOAD_CONST"],
    ...                            ["LOAD_CONST", "PUSH_NULL", "LOAD_CONST"])
    True
    """
    null = instrs[start]
    if null.opname != "PUSH_NULL":
        raise ValueError(f"no call NULL at {start}: {null!r}")
    depth = 0
    end = None
    for k in range(start + 1, len(instrs)):
        ins = instrs[k]
        if ins.is_jump or ins.opname in SPEC.terminators:
            return False    # not the straight-line code of one call's operands
        depth += stack_effect(ins, False)
        if depth == 1:
            end = k
    if depth != argc + 1 or end is None:
        return False
    if SPEC.null_after_callable:
        del instrs[start]
        instrs.insert(end, null)
    return True

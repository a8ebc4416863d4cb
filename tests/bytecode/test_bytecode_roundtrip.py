"""Round trip: assemble(decode(code), code) must reproduce real-world code objects."""

from __future__ import annotations

import dis

import pytest

from _bytecode_testutil import (ROUNDTRIP_MODULES, exn_table_by_index, lines_by_index,
                                module_code, normalized, torch_nn_module_names)
from bytegraph.bytecode import assemble, copy_instrs, decode

# (identical co_code, linetable, exceptiontable, total) per module, for the summary.
_STATS: dict = {}


def _module_names():
    try:
        return ROUNDTRIP_MODULES + torch_nn_module_names()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return ROUNDTRIP_MODULES


@pytest.mark.parametrize("modname", _module_names())
def test_roundtrip_module(modname):
    codes = module_code(modname)
    assert codes, f"no code objects for {modname}"
    same_code = same_lines = same_exn = 0
    for code in codes:
        instrs = decode(code)
        new = assemble(instrs, code)
        where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        assert normalized(decode(new)) == normalized(instrs), where
        assert exn_table_by_index(new) == exn_table_by_index(code), where
        assert lines_by_index(new) == lines_by_index(code), where
        assert list(new.co_positions()) == list(code.co_positions()), where
        # Our flow analysis mirrors the compiler's, so the sizes agree
        # exactly here (the generator prologue is special-cased in
        # versions.py).  The one known difference elsewhere: when the
        # compiler drops a try body's exception range (the body can't raise)
        # but keeps the now unreachable handler, it still counts the handler
        # and we don't, so ours can be smaller -- and still correct.
        assert new.co_stacksize == code.co_stacksize, where
        assert new.co_consts == code.co_consts and new.co_names == code.co_names, where
        same_code += new.co_code == code.co_code
        same_lines += new.co_linetable == code.co_linetable
        same_exn += new.co_exceptiontable == code.co_exceptiontable
    _STATS[modname] = (same_code, same_lines, same_exn, len(codes))
    # Layout choices match CPython's, so the bytes should be identical.
    assert same_code / len(codes) >= 0.95, (same_code, len(codes))


def test_roundtrip_summary():
    """Report byte-identity over everything the parametrized test covered."""
    if not _STATS:
        pytest.skip("module round-trip tests did not run")
    code, lines, exn, total = (sum(col) for col in zip(*_STATS.values()))
    print(f"\nbyte-identical over {total} code objects: co_code {code}, "
          f"co_linetable {lines}, co_exceptiontable {exn}")
    # The table encoders make CPython's form choices, so these match too
    # (semantic equality of positions/ranges is checked per code object).
    assert min(code, lines, exn) / total >= 0.99


def test_roundtrip_of_copies_and_reassembled():
    """Copies assemble the same, and reassembling an assembled code is stable."""
    import json.encoder as mod

    for code in module_code(mod.__name__):
        new = assemble(copy_instrs(decode(code)), code)
        assert new.co_code == code.co_code
        again = assemble(decode(new), new)
        assert again.co_code == new.co_code
        assert again.co_exceptiontable == new.co_exceptiontable
        assert again.co_linetable == new.co_linetable


def test_decode_matches_dis():
    """Opnames (modulo normalization), args, argvals and offsets agree with dis."""
    import collections

    from bytegraph.bytecode import SPEC

    norm = {"JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP",
            "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_NO_INTERRUPT", "LOAD_FAST_CHECK": "LOAD_FAST"}
    for code in module_code(collections.__name__):
        ours = list(decode(code))
        theirs = []
        for b in dis.get_instructions(code):
            if b.opname == "EXTENDED_ARG":
                continue
            parts = SPEC.splits.get(b.opname)
            if parts:   # one real instruction decoded as two (versions.py)
                first = ours[len(theirs)]
                assert first.fused == b.opname and first.offset == b.offset
                assert (first.opname, ours[len(theirs) + 1].opname) == parts
                theirs += [None, None]
                continue
            theirs.append(b)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            if b is None:
                continue
            name = norm.get(b.opname, b.opname.replace("_FORWARD", "").replace("_BACKWARD", ""))
            mask = SPEC.alias_masks.get(b.opcode)
            if mask is not None:
                name = SPEC.aliases.get((b.opcode, b.arg & mask), name)
            assert a.opname == name
            assert a.positions == b.positions
            if SPEC.arg_kind[a.opname] != "none":
                assert a.arg == b.arg
            if a.is_jump:
                skip = 2 * SPEC.for_iter_skips if a.opname == "FOR_ITER" else 0
                assert a.target.offset == b.argval + skip
            elif a.opname == "KW_NAMES":
                # 3.11's dis leaves KW_NAMES' argval unresolved; ours is the tuple.
                assert a.argval == code.co_consts[a.arg]
            elif name != b.opname.replace("_FORWARD", "").replace("_BACKWARD", "") and mask is not None:
                pass   # an alias: its argument picked the operation
            elif a.opname == "CONVERT_VALUE":
                assert a.argval == b.arg   # (dis shows the converter function)
            else:
                assert a.argval == b.argval and type(a.argval) is type(b.argval)

"""Every opcode of the running interpreter has a tracer handler or is listed
as a break with its reason (``tracer.frame.BREAKING_OPCODES``)."""

from __future__ import annotations

import dis

import torch

import bytegraph
from bytegraph.bytecode.versions import SPEC
from bytegraph.tracer.frame import BREAKING_OPCODES, DISPATCH


def test_every_opcode_is_handled_or_breaks_with_a_reason():
    unserved = []
    for name, op in dis.opmap.items():
        if op >= 256 or name.startswith("INSTRUMENTED_"):
            continue    # pseudo-ops (3.12+) and instrumented ops never appear in co_code
        served = SPEC.norm_name[op] or name       # the decoder's name for it (3.11 jumps lose direction)
        if served in SPEC.splits:
            continue    # decoded as two other instructions (see bytecode.versions)
        if served not in DISPATCH and served not in BREAKING_OPCODES:
            unserved.append(name)
    # operations spelled by an argument (3.12's LOAD_ATTR method bit, intrinsics)
    for alias in SPEC.aliases.values():
        if alias not in DISPATCH and alias not in BREAKING_OPCODES:
            unserved.append(alias)
    for parts in SPEC.splits.values():
        unserved += [p for p in parts if p not in DISPATCH]
    assert unserved == []
    assert all(BREAKING_OPCODES.values())
    # nothing listed as breaking has a handler after all
    assert not set(BREAKING_OPCODES) & set(DISPATCH)
    assert all(name.isupper() for name in DISPATCH)
    # every handler of the running version serves one of its operations
    ops = {SPEC.norm_name[op] for op in range(256) if SPEC.norm_name[op]} | set(SPEC.aliases.values())
    extra = set(DISPATCH) - ops - {"EXTENDED_ARG"}
    assert extra == set(), extra


def test_a_listed_opcode_breaks_with_its_reason():
    def f(x):
        match x.shape:
            case torch.Size():       # a class pattern: MATCH_CLASS
                y = x + 1
        return y * 2

    report = bytegraph.explain(f)(torch.ones(2))
    records = [r for r in report.break_reasons if r.kind == "unsupported_opcode"]
    assert records and "class patterns" in records[0].hint
    assert torch.equal(report.result, f(torch.ones(2)))

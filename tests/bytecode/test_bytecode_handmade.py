"""Hand-built and hand-edited instruction lists: codegen through instr()/assemble()."""

from __future__ import annotations

import dis
import types

import pytest

from bytegraph.bytecode import (SPEC, ExnEntry, Instr, assemble, copy_instrs, decode, emit, instr,
                                live_locals, stack_effect)


def _template(argcount=1):
    def one(x):
        return x

    def zero():
        return None

    return (one if argcount else zero).__code__


def _fn(code, g=None):
    return types.FunctionType(code, g if g is not None else {"__builtins__": __builtins__})


def _opnames(code):
    return [i.opname for i in dis.get_instructions(code)]


def test_factory_and_repr():
    i = instr("LOAD_GLOBAL", "len", arg=1)
    assert i.opname == "LOAD_GLOBAL" and i.argval == "len" and i.arg == 1
    assert "NULL" in repr(i)
    j = instr("JUMP", target=i)
    assert j.is_jump and not i.is_jump and j.opcode == dis.opmap["JUMP_FORWARD"]
    assert "JUMP" in repr(j)
    c = instr("CALL", 2)
    assert (c.arg, c.argval) == (2, 2)
    assert instr("BUILD_TUPLE", arg=3).argval == 3
    for bad in (lambda: instr("JUMP_FORWARD", target=i), lambda: instr("POP_TOP", 1),
                lambda: instr("CALL"), lambda: instr("JUMP", 5)):
        with pytest.raises(ValueError):
            bad()
    assert isinstance(i, Instr)


def test_build_from_scratch_with_null_global_call():
    # def f(x): return len(x) + 1
    code = assemble([
        instr("RESUME", 0),
        instr("LOAD_GLOBAL", "len", arg=1),
        instr("LOAD_FAST", "x"),
        *emit.call(1),
        instr("LOAD_CONST", 1),
        instr("BINARY_OP", 0),
        instr("RETURN_VALUE"),
    ], _template(), co_name="f", co_qualname="f")
    assert _fn(code)("abc") == 4
    assert code.co_stacksize == 3 and code.co_name == "f"
    assert "len" in code.co_names


def test_kw_names_call():
    # def f(x): return dict(a=x, b=2)
    code = assemble([
        instr("RESUME", 0),
        instr("LOAD_GLOBAL", "dict", arg=1),
        instr("LOAD_FAST", "x"),
        instr("LOAD_CONST", 2),
        *emit.call(2, ("a", "b")),
        instr("RETURN_VALUE"),
    ], _template())
    assert _fn(code)(7) == {"a": 7, "b": 2}


def test_constants_are_not_merged_across_types_or_signs():
    # return (1, True, 0.0, -0.0, 1.0)
    items = [1, True, 0.0, -0.0, 1.0]
    ins = [instr("RESUME", 0)] + [instr("LOAD_CONST", v) for v in items]
    ins += [instr("BUILD_TUPLE", len(items)), instr("RETURN_VALUE")]
    code = assemble(ins, _template(0))
    out = _fn(code)()
    assert [type(v) for v in out] == [int, bool, float, float, float]
    assert [str(v) for v in out] == ["1", "True", "0.0", "-0.0", "1.0"]
    # Re-using the same values again does not grow co_consts.
    code2 = assemble(ins[:-2] + ins[1:-2] + [instr("BUILD_TUPLE", 10), instr("RETURN_VALUE")],
                     _template(0))
    assert len(code2.co_consts) == len(code.co_consts)


def test_new_local_variable_is_added():
    # def f(x): tmp = x * 2; return tmp + x
    base = _template()
    code = assemble([
        instr("RESUME", 0),
        instr("LOAD_FAST", "x"), instr("LOAD_CONST", 2), instr("BINARY_OP", 5),
        instr("STORE_FAST", "tmp"),
        instr("LOAD_FAST", "tmp"), instr("LOAD_FAST", "x"), instr("BINARY_OP", 0),
        instr("RETURN_VALUE"),
    ], base)
    assert code.co_varnames == ("x", "tmp") and code.co_nlocals == 2
    assert code.co_argcount == 1
    assert _fn(code)(5) == 15


def _long_jump_body(n):
    # if x: <n useless LOAD_CONST/POP_TOP pairs>; return "yes"   else: return "no"
    ret_no = instr("LOAD_CONST", "no")
    body = [instr("RESUME", 0), instr("LOAD_FAST", "x"), *emit.truth(),
            instr("POP_JUMP_IF_FALSE", target=ret_no)]
    for i in range(n):
        body += [instr("LOAD_CONST", i), instr("POP_TOP")]
    body += [instr("LOAD_CONST", "yes"), instr("RETURN_VALUE"), ret_no, instr("RETURN_VALUE")]
    return body


def test_forward_jump_needing_extended_arg():
    code = assemble(_long_jump_body(300), _template())
    names = _opnames(code)
    forward = SPEC.opname[SPEC.jump_variants["POP_JUMP_IF_FALSE"][0]]
    assert "EXTENDED_ARG" in names and forward in names
    f = _fn(code)
    assert f(1) == "yes" and f(0) == "no"
    # decode merges EXTENDED_ARG and finds the same target again.
    back = decode(code)
    assert "EXTENDED_ARG" not in [i.opname for i in back]
    jump = next(i for i in back if i.opname == "POP_JUMP_IF_FALSE")
    assert jump.target is back[-2] and jump.arg > 255


def test_backward_jump_needing_extended_arg():
    # i = 0; while True: i += 1; <filler>; if i >= x: return i ; jump back
    loop = instr("LOAD_FAST", "i")
    done = instr("LOAD_FAST", "i")
    body = [instr("RESUME", 0), instr("LOAD_CONST", 0), instr("STORE_FAST", "i"),
            loop, instr("LOAD_CONST", 1), instr("BINARY_OP", 13), instr("STORE_FAST", "i")]
    for k in range(200):
        body += [instr("LOAD_CONST", k), instr("POP_TOP")]
    body += [instr("LOAD_FAST", "i"), instr("LOAD_FAST", "x"), instr("COMPARE_OP", ">="),
             instr("POP_JUMP_IF_TRUE", target=done), instr("JUMP", target=loop),
             done, instr("RETURN_VALUE")]
    code = assemble(body, _template())
    names = _opnames(code)
    assert "JUMP_BACKWARD" in names and "EXTENDED_ARG" in names
    assert _fn(code)(5) == 5
    # A backward conditional jump gets the BACKWARD variant (3.11), or
    # becomes the inverse forward jump over a JUMP back (3.12+: only forward
    # conditional jumps exist).
    body2 = copy_instrs(body)
    k = next(i for i, x in enumerate(body2) if x.opname == "POP_JUMP_IF_TRUE")
    body2[k] = instr("POP_JUMP_IF_FALSE", target=body2[3])   # loop while i < x
    body2[k + 1] = instr("JUMP", target=body2[-2])
    code2 = assemble(body2, _template())
    backward = SPEC.jump_variants["POP_JUMP_IF_FALSE"][1]
    if backward is not None:
        assert SPEC.opname[backward] in _opnames(code2)
    else:
        assert "POP_JUMP_IF_TRUE" in _opnames(code2)
    assert _fn(code2)(7) == 7


def test_forward_only_jumps_reject_backward_targets():
    loop = instr("NOP")
    body = [instr("RESUME", 0), loop, instr("LOAD_FAST", "x"), instr("GET_ITER"),
            instr("FOR_ITER", target=loop), instr("RETURN_VALUE")]
    with pytest.raises(ValueError, match="backwards"):
        assemble(body, _template())
    # JUMP_NO_INTERRUPT forwards degrades to a plain forward jump.
    end = instr("LOAD_FAST", "x")
    code = assemble([instr("RESUME", 0), instr("JUMP_NO_INTERRUPT", target=end),
                     instr("LOAD_CONST", None), end, instr("RETURN_VALUE")], _template())
    assert "JUMP_FORWARD" in _opnames(code) and _fn(code)(3) == 3


def _safe_div(x):
    try:
        y = 10 // x
    except ZeroDivisionError:
        y = -1
    return y


def test_insert_into_try_block():
    """Add `+ 100` inside the try body; the handler still catches, lines stay."""
    instrs = copy_instrs(decode(_safe_div.__code__))
    k = next(i for i, x in enumerate(instrs) if x.opname == "STORE_FAST" and x.argval == "y")
    neighbour = instrs[k]
    assert neighbour.exn is not None
    new = [instr("LOAD_CONST", 100, positions=neighbour.positions, exn=neighbour.exn),
           instr("BINARY_OP", 0, positions=neighbour.positions, exn=neighbour.exn)]
    instrs[k:k] = new
    code = assemble(instrs, _safe_div.__code__)
    f = types.FunctionType(code, globals())
    assert f(2) == 105 and f(0) == -1
    # The exception range grew by the inserted instructions.
    rng = dis._parse_exception_table(code)
    orig = dis._parse_exception_table(_safe_div.__code__)
    assert rng[0].end - rng[0].start == orig[0].end - orig[0].start + 2 * 2 + 2  # +cache
    # And insertion at the head of a handler: retarget the exception entries.
    instrs2 = copy_instrs(decode(_safe_div.__code__))
    handler = next(i.exn.target for i in instrs2 if i.exn is not None)
    h = instrs2.index(handler)
    marker = instr("NOP", exn=handler.exn)
    instrs2.insert(h, marker)
    entries = {id(i.exn): i.exn for i in instrs2 if i.exn is not None}
    for e in entries.values():
        if e.target is handler:
            e.target = marker
    f2 = types.FunctionType(assemble(instrs2, _safe_div.__code__), globals())
    assert f2(0) == -1 and f2(5) == 2


def test_handmade_exception_handler():
    # try: return 1 // x  except: return "caught"  (handler written by hand)
    handler = instr("PUSH_EXC_INFO")
    cleanup = instr("COPY", 3)
    entry = ExnEntry(handler, depth=0, lasti=False)
    centry = ExnEntry(cleanup, depth=1, lasti=True)
    body = [
        instr("RESUME", 0),
        instr("NOP", exn=entry),
        instr("LOAD_CONST", 1, exn=entry), instr("LOAD_FAST", "x", exn=entry),
        instr("BINARY_OP", 2, exn=entry), instr("RETURN_VALUE", exn=entry),
        handler,
        instr("POP_TOP", exn=centry), instr("POP_EXCEPT", exn=centry),
        instr("LOAD_CONST", "caught"), instr("RETURN_VALUE"),
        cleanup, instr("POP_EXCEPT"), instr("RERAISE", 1),
    ]
    code = assemble(body, _template())
    f = _fn(code)
    assert f(1) == 1 and f(0) == "caught"
    rows = dis._parse_exception_table(code)
    assert [(r.depth, r.lasti) for r in rows] == [(0, False), (1, True)]
    assert code.co_stacksize == 4  # handler: depth 1 + lasti + exc + COPY


def test_positions_and_firstlineno():
    P = dis.Positions
    body = [instr("RESUME", 0, positions=P(10, 10, 0, 0)),
            instr("LOAD_FAST", "x", positions=P(11, 11, 4, 5)),
            instr("LOAD_CONST", 1, positions=None),
            instr("BINARY_OP", 0, positions=P(300, 302, 200, 3)),
            instr("RETURN_VALUE", positions=P(9, 9, None, None))]
    code = assemble(body, _template(), co_firstlineno=10)
    assert code.co_firstlineno == 10
    pos = [p for p in code.co_positions()]
    assert pos[1] == (11, 11, 4, 5)
    assert pos[2] == (None, None, None, None)
    assert pos[3] == pos[4] == (300, 302, 200, 3)  # BINARY_OP's cache shares it
    assert pos[5] == (9, 9, None, None)
    # Like dis, decode reports "no location" as an all-None Positions.
    expect = [b.positions or P(None, None, None, None) for b in body]
    assert [ins.positions for ins in decode(code)] == expect
    assert _fn(code)(1) == 2


def test_cell_and_free_variables():
    def outer(a):
        def inner():
            return a + 1
        return inner

    ins = decode(outer.__code__)
    assert ins[0].opname == "MAKE_CELL" and ins[0].argval == "a"
    code = assemble(ins, outer.__code__)
    f = types.FunctionType(code, globals())
    assert f(4)() == 5
    inner = outer(1)
    ins = decode(inner.__code__)
    assert ins[0].opname == "COPY_FREE_VARS" and inner.__code__.co_freevars == ("a",)
    assert any(i.opname == "LOAD_DEREF" and i.argval == "a" for i in ins)
    # A new fast local added before a free variable shifts its index correctly.
    ins = copy_instrs(ins)
    k = next(i for i, x in enumerate(ins) if x.opname == "RETURN_VALUE")
    ins[k:k] = [instr("STORE_FAST", "t"), instr("LOAD_FAST", "t")]
    code = assemble(ins, inner.__code__)
    assert code.co_varnames == ("t",)
    g = types.FunctionType(code, globals(), "inner", None, inner.__closure__)
    assert g() == 2
    with pytest.raises(ValueError):
        assemble([instr("LOAD_DEREF", "nope"), instr("RETURN_VALUE")], inner.__code__)


def test_copy_instrs_remaps_targets_and_handlers():
    orig = decode(_safe_div.__code__)
    cp = copy_instrs(orig)
    ids = {id(i) for i in cp}
    assert all(id(i) not in {id(o) for o in orig} for i in cp)
    for i in cp:
        if i.target is not None:
            assert id(i.target) in ids
        if i.exn is not None:
            assert id(i.exn.target) in ids
    # Equal entries stay shared (one object per original entry).
    ex = [i.exn for i in cp if i.exn is not None]
    assert len({id(e) for e in ex}) == len({id(i.exn) for i in orig if i.exn is not None})


def test_decode_is_cached_per_code_object():
    def f(x):
        return x

    a = decode(f.__code__)
    assert decode(f.__code__) is a
    other = f.__code__.replace()  # equal by value, different object
    assert decode(other) is not a


def test_stack_effect_helper():
    assert stack_effect(instr("LOAD_GLOBAL", "f", arg=1), False) == 2
    assert stack_effect(instr("LOAD_GLOBAL", "f"), False) == 1
    assert stack_effect(instr("BUILD_TUPLE", 3), False) == -2
    if SPEC.has_op("FORMAT_VALUE"):   # (up to 3.12)
        assert stack_effect(instr("FORMAT_VALUE", (None, True)), False) == -1
        assert stack_effect(instr("FORMAT_VALUE", (repr, False)), False) == 0
    t = instr("NOP")
    assert stack_effect(instr("FOR_ITER", target=t), True) == -1
    assert stack_effect(instr("FOR_ITER", target=t), False) == 1
    if SPEC.has_op("JUMP_IF_TRUE_OR_POP"):   # (3.11 only)
        assert stack_effect(instr("JUMP_IF_TRUE_OR_POP", target=t), True) == 0
        assert stack_effect(instr("JUMP_IF_TRUE_OR_POP", target=t), False) == -1


def test_argval_is_authoritative():
    ins = [instr("RESUME", 0), instr("LOAD_FAST", "x"), instr("LOAD_FAST", "x"),
           instr("BUILD_TUPLE", 2), instr("RETURN_VALUE")]
    ins[3].arg = 3  # inconsistent edit
    with pytest.raises(ValueError, match="disagree"):
        assemble(ins, _template())
    ins[3].argval = 3
    ins[3].arg = None
    ins.insert(1, instr("LOAD_CONST", 0))
    assert _fn(assemble(ins, _template()))(1) == (0, 1, 1)
    assert live_locals(ins)[1] == frozenset({"x"})


def test_class_body_with_cell_and_free_dunder_class():
    """`__class__` both as the class body's own cell and an enclosing free var."""
    from _bytecode_testutil import deep_reassemble

    src = (
        "class A:\n"
        "    def m(self):\n"
        "        class X:\n"
        "            x = __class__\n"
        "            def f():\n"
        "                __class__\n"
        "        return X\n"
    )
    code = compile(src, "<cls>", "exec")
    new = deep_reassemble(code)
    ns = {}
    exec(new, ns)
    assert ns["A"]().m().x is ns["A"]
    # Still right when an extra fast local shifts the layout.
    m = next(k for k in code.co_consts if isinstance(k, types.CodeType))
    m = next(k for k in m.co_consts if isinstance(k, types.CodeType) and k.co_name == "m")
    x = next(k for k in m.co_consts if isinstance(k, types.CodeType) and k.co_name == "X")
    assert x.co_cellvars == ("__class__",) and x.co_freevars == ("__class__",)
    ins = copy_instrs(decode(x))
    ins[1:1] = [instr("LOAD_CONST", 0), instr("STORE_FAST", "extra")]
    x2 = assemble(ins, x)
    assert x2.co_varnames == ("extra",)
    class_deref = "LOAD_CLASSDEREF" if SPEC.has_op("LOAD_CLASSDEREF") else "LOAD_FROM_DICT_OR_DEREF"
    assert [i.arg for i in decode(x2) if i.opname == class_deref] == [2]

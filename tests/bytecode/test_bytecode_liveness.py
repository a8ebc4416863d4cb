"""live_locals: backward liveness over jumps and exception edges."""

from __future__ import annotations

from bytegraph.bytecode import ExnEntry, decode, instr, live_locals


def _at(instrs, opname, argval=None, nth=0):
    hits = [k for k, i in enumerate(instrs)
            if i.opname == opname and (argval is None or i.argval == argval)]
    return hits[nth]


def test_dead_after_last_use_straight_line():
    # c = a + b; return c
    ins = [instr("LOAD_FAST", "a"), instr("LOAD_FAST", "b"), instr("BINARY_OP", 0),
           instr("STORE_FAST", "c"), instr("LOAD_FAST", "c"), instr("RETURN_VALUE")]
    live = live_locals(ins)
    assert live == [frozenset({"a", "b"}), frozenset({"b"}), frozenset(), frozenset(),
                    frozenset({"c"}), frozenset()]


def test_real_function_dead_after_last_use():
    def f(a, b):
        c = a * 2
        d = c + b
        return d

    ins = decode(f.__code__)
    live = live_locals(ins)
    assert live[0] == {"a", "b"}
    assert live[_at(ins, "STORE_FAST", "c")] == {"b"}
    assert live[_at(ins, "LOAD_FAST", "c")] == {"c", "b"}
    assert live[_at(ins, "STORE_FAST", "d")] == set()
    assert live[_at(ins, "RETURN_VALUE")] == set()


def test_live_across_loop_back_edge():
    def f(n, unused):
        total = 0
        i = 0
        while i < n:
            total += i
            i += 1
        return total

    ins = decode(f.__code__)
    live = live_locals(ins)
    back = next(k for k, x in enumerate(ins) if x.is_jump and x.target is not None
                and ins.index(x.target) < k)
    # At the back edge, everything the loop header reads is still live.
    assert {"n", "i", "total"} <= live[back]
    # Just after `i += 1` stores, n is live only because of the back edge.
    assert "n" in live[_at(ins, "STORE_FAST", "i", nth=1)]
    assert all("unused" not in s for s in live)
    assert live[_at(ins, "RETURN_VALUE")] == set()


def test_live_into_exception_handler():
    def f(x, y):
        try:
            z = int(x)
        except ValueError:
            return y
        return z

    ins = decode(f.__code__)
    live = live_locals(ins)
    # y is only read in the handler, yet live throughout the protected range.
    protected = [k for k, i in enumerate(ins) if i.exn is not None
                 and i.exn.target.opname == "PUSH_EXC_INFO"]
    assert protected
    for k in protected:
        assert "y" in live[k]
    # After the try body finishes normally, y is dead.
    assert live[_at(ins, "LOAD_FAST", "z")] == {"z"}


def test_handler_edge_ignores_kill_of_protected_store():
    # x = 1 (protected); handler reads the *old* x if the store "raised"
    handler = instr("LOAD_FAST", "x")
    e = ExnEntry(handler, 0, False)
    ins = [instr("LOAD_CONST", 1, exn=e), instr("STORE_FAST", "x", exn=e),
           instr("LOAD_CONST", None), instr("RETURN_VALUE"), handler, instr("RETURN_VALUE")]
    live = live_locals(ins)
    assert live[0] == {"x"} and live[1] == {"x"}
    assert live[2] == set() and live[4] == {"x"}


def test_delete_and_cells():
    def f(a, b):
        del a
        def g():
            return b
        return g

    ins = decode(f.__code__)
    live = live_locals(ins)
    k = _at(ins, "DELETE_FAST", "a")
    assert "a" in live[k] and "a" not in live[k + 1]
    # Cell reads (MAKE_CELL / LOAD_CLOSURE) keep b live until the closure is built.
    from bytegraph.bytecode import SPEC
    closure_op = "LOAD_CLOSURE" if SPEC.has_op("LOAD_CLOSURE") else "LOAD_FAST"   # 3.13: LOAD_FAST
    assert "b" in live[_at(ins, closure_op, "b")]
    assert "b" not in live[_at(ins, "RETURN_VALUE")]


def test_store_deref_does_not_kill():
    def f():
        v = 0

        def g():
            return v
        v = 1
        return g

    ins = decode(f.__code__)
    live = live_locals(ins)
    assert "v" in live[_at(ins, "STORE_DEREF", "v", nth=1)]

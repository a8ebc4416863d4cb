"""The unified cell model (issue 3, DESIGN.md §4 C1-C8): closures and cells
behave exactly as in Python, with no graph breaks.

Each test compiles with ``fullgraph=True`` and a counting backend, compares
with eager Python (results and what the enclosing scopes see afterwards),
and asserts the number of graphs.
"""

import dis
import functools

import pytest
import torch

import bytegraph
from bytegraph.bytecode.emit import load_cell
from conftest import CountingBackend

# The op that pushes a cell for a closure tuple: LOAD_CLOSURE up to 3.12,
# LOAD_FAST of the cell's slot from 3.13.
# (The assembler may write LOAD_FAST as LOAD_FAST_CHECK: _ops folds it back.)
CELL_LOAD = load_cell("_").opname


def _ops(fn):
    return [
        ("LOAD_FAST" if i.opname == "LOAD_FAST_CHECK" else i.opname, i.argval)
        for i in dis.get_instructions(fn)
    ]


def compile_full(fn):
    backend = CountingBackend()
    return bytegraph.compile(fn, backend=backend, fullgraph=True), backend


def test_nonlocal_counter_incremented_by_nested_function():
    def f(x):
        n = 0

        def inc():
            nonlocal n
            n += 1

        for _ in range(4):
            inc()
        return x * n, n

    cf, be = compile_full(f)
    x = torch.randn(3)
    out, n = cf(x)
    ref, ref_n = f(x)
    assert n == ref_n == 4
    torch.testing.assert_close(out, ref)
    assert be.count == 1


def _closure_reader():
    t = torch.ones(2)
    k = 3
    lst = [1, 2]
    fn = torch.sin

    def read(x):
        return fn(x) * k + t + len(lst)

    def rebind(**kw):
        nonlocal t, k, lst, fn
        t = kw.get("t", t)
        k = kw.get("k", k)
        lst = kw.get("lst", lst)
        fn = kw.get("fn", fn)

    return read, rebind


def test_compiled_closure_sees_rebound_cells_between_calls():
    read, rebind = _closure_reader()
    cf, be = compile_full(read)
    x = torch.randn(2)
    torch.testing.assert_close(cf(x), read(x))
    graphs_after_first = be.count
    assert graphs_after_first == 1
    # the tensor in the cell is a graph input, not a constant: new values, same entry
    rebind(t=torch.full((2,), 5.0))
    torch.testing.assert_close(cf(x), read(x))
    assert be.count == 1
    for change in ({"k": 7}, {"lst": [1, 2, 3, 4]}, {"fn": torch.cos}):
        rebind(**change)
        torch.testing.assert_close(cf(x), read(x))
    assert be.count == 4  # int, list length and function identity are guarded: recompiles


def test_cell_tensor_is_graph_input_not_constant():
    read, rebind = _closure_reader()
    cf, be = compile_full(read)
    x = torch.randn(2)
    cf(x)
    placeholders = [n for n in be.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2  # x and the cell's tensor
    assert all(n.op != "get_attr" for n in be.graphs[0].graph.nodes)


def test_compiled_function_writes_its_own_free_variable():
    def outer():
        c = 10

        def h(x):
            nonlocal c
            c = c + 5
            return x + c

        return h, lambda: c

    h, get = outer()
    h_ref, get_ref = outer()
    cf, be = compile_full(h)
    x = torch.zeros(1)
    torch.testing.assert_close(cf(x), h_ref(x))
    assert get() == get_ref() == 15
    assert be.count == 1


def test_helper_and_compiled_function_share_one_cell():
    def outer():
        v = 1

        def helper():
            nonlocal v
            v = v * 10

        def main(x):
            helper()
            return x + v

        return main, lambda: v

    main, get = outer()
    main_ref, get_ref = outer()
    cf, be = compile_full(main)
    x = torch.zeros(1)
    torch.testing.assert_close(cf(x), main_ref(x))
    assert get() == get_ref() == 10
    assert be.count == 1


def test_returned_closures_share_a_cell_created_in_the_trace():
    def f(x):
        count = 0

        def inc():
            nonlocal count
            count += 1
            return count

        def get():
            return count

        inc()
        return x + 1, inc, get

    cf, be = compile_full(f)
    _, inc, get = cf(torch.zeros(1))
    _, inc_ref, get_ref = f(torch.zeros(1))
    assert (get(), inc(), inc(), get()) == (get_ref(), inc_ref(), inc_ref(), get_ref()) == (1, 2, 3, 3)
    assert inc.__closure__[0] is get.__closure__[0]
    assert be.count == 1


GLOBAL_REGISTRY = {}


class Holder:
    pass


def test_closures_stored_in_global_dict_list_and_attribute():
    def make(registry, lst, obj):
        def f(x):
            scale = 2

            def by_scale(v):
                return v * scale

            registry["fn"] = by_scale
            lst.append(lambda: scale + 1)
            obj.cb = by_scale
            scale = 3
            return x * scale

        return f

    results = []
    for compiled in (False, True):
        GLOBAL_REGISTRY.clear()
        lst, obj = [0], Holder()
        f = make(GLOBAL_REGISTRY, lst, obj)
        if compiled:
            f, be = compile_full(f)
        out = f(torch.ones(1))
        results.append((out.item(), GLOBAL_REGISTRY["fn"](1), lst[0], lst[1](), obj.cb(2),
                        obj.cb.__closure__[0] is GLOBAL_REGISTRY["fn"].__closure__[0]))
    assert results[0] == results[1] == (3.0, 3, 0, 4, 6, True)
    assert be.count == 1


def test_closure_captures_tensor_computed_by_graph():
    def f(x):
        y = x * 2

        def get():
            return y + 1

        return get

    cf, be = compile_full(f)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x)(), f(x)())
    assert be.count == 1


def test_late_binding_and_default_argument_binding():
    def f(x):
        late = [lambda: i for i in range(3)]
        bound = [lambda i=i: i for i in range(3)]
        acc = []
        for j in range(3):
            acc.append(lambda: j)
        return x + sum(g() for g in late), [g() for g in bound], [g() for g in acc]

    cf, be = compile_full(f)
    x = torch.zeros(1)
    out, bound, acc = cf(x)
    ref, ref_bound, ref_acc = f(x)
    torch.testing.assert_close(out, ref)
    assert (bound, acc) == (ref_bound, ref_acc) == ([0, 1, 2], [2, 2, 2])
    assert be.count == 1


def test_three_nesting_levels_with_nonlocal_writes_at_each_level():
    def f(x):
        a = 1

        def l1():
            nonlocal a
            b = 10
            a += 1

            def l2():
                nonlocal a, b
                c = 100
                a += 1
                b += 1

                def l3():
                    nonlocal a, b, c
                    a += 1
                    b += 1
                    c += 1
                    return a + b + c

                return l3() + c

            return l2() + b

        r = l1()
        return x + r, a

    cf, be = compile_full(f)
    x = torch.zeros(1)
    out, a = cf(x)
    ref, ref_a = f(x)
    torch.testing.assert_close(out, ref)
    assert a == ref_a == 4
    assert be.count == 1


def test_recursion_through_a_closure_and_partial_of_closure():
    def f(x):
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)

        base = 2

        def scaled(v, k):
            return v * k * base

        p = functools.partial(scaled, k=3)
        return x * fact(5) + p(x), p

    cf, be = compile_full(f)
    x = torch.randn(2)
    out, p = cf(x)
    ref, p_ref = f(x)
    torch.testing.assert_close(out, ref)
    assert p(1) == p_ref(1) == 6
    assert be.count == 1


def test_del_of_cell_variable_then_read_raises_same_name_error():
    def f(x):
        y = x + 1

        def r():
            return y

        del y
        return r()

    cf = bytegraph.compile(f, backend=CountingBackend())
    with pytest.raises(NameError) as compiled_err:
        cf(torch.zeros(1))
    with pytest.raises(NameError) as eager_err:
        f(torch.zeros(1))
    assert str(compiled_err.value) == str(eager_err.value)


def test_empty_free_variable_reads_as_name_error():
    def outer():
        def inner(x):
            return x + later

        with pytest.raises(NameError) as err:
            bytegraph.compile(inner, backend="eager")(torch.zeros(1))
        later = 1
        return inner, str(err.value)

    inner, message = outer()
    assert "later" in message
    torch.testing.assert_close(bytegraph.compile(inner, backend="eager")(torch.zeros(1)), torch.ones(1))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_hook_closure_sees_cell_rebound_after_registration(backend):
    def f(x):
        scale = torch.tensor(2.0)
        x.register_hook(lambda g: g * scale)
        scale = torch.tensor(3.0)
        return (x * 2).sum()

    be = CountingBackend(backend)
    cf = bytegraph.compile(f, backend=be, fullgraph=True)
    x = torch.ones(3, requires_grad=True)
    cf(x).backward()
    x_ref = torch.ones(3, requires_grad=True)
    f(x_ref).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(x.grad, torch.full((3,), 6.0))
    assert be.count == 1


def test_hook_keeps_trace_created_cell_alive():
    def f(x):
        def make(k):
            def hook(g):
                return g * k

            return hook

        x.register_hook(make(5.0))
        return x.sum() * 1

    cf, be = compile_full(f)
    x = torch.ones(2, requires_grad=True)
    cf(x).backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 5.0))
    assert be.count == 1


# --------------------------------------------------------------------------
# bytecode of the transformed function (DESIGN.md C4, C7)


def _transformed(cf):
    return list(dis.get_instructions(cf._entries[0].fn))


def test_own_cell_write_uses_store_deref():
    def f(x):
        c = 0

        def inc():
            nonlocal c
            c += 1

        inc()
        return x + 1, lambda: c

    cf, _ = compile_full(f)
    cf(torch.zeros(1))
    ops = _ops(cf._entries[0].fn)
    assert ("STORE_DEREF", "c") in ops
    assert (CELL_LOAD, "c") in ops
    assert not any(i.argval == "cell_contents" for i in _transformed(cf))
    assert not any(op == "LOAD_CONST" and "CellType" in repr(v) for op, v in ops)


def test_escaping_closure_over_root_cell_rebuilt_with_load_closure():
    def f(x):
        k = 2

        def mul(v):
            return v * k

        return x + 1, mul

    cf, _ = compile_full(f)
    _, mul = cf(torch.zeros(1))
    assert mul(3) == 6
    names = [i.opname for i in _transformed(cf)]
    assert (CELL_LOAD, "k") in _ops(cf._entries[0].fn)
    assert "MAKE_FUNCTION" in names
    assert "MAKE_CELL" in names  # the original prologue is kept


def test_closure_used_only_inside_trace_leaves_nothing_behind():
    def f(x):
        k = 3

        def mul(v):
            return v * k

        return mul(x) + 1

    cf, _ = compile_full(f)
    torch.testing.assert_close(cf(torch.ones(2)), f(torch.ones(2)))
    names = [i.opname for i in _transformed(cf)]
    assert "MAKE_FUNCTION" not in names
    assert "STORE_DEREF" not in names
    assert (CELL_LOAD, "k") not in _ops(cf._entries[0].fn)
    assert not any("CellType" in repr(i.argval) for i in _transformed(cf))


def test_free_variable_write_uses_store_deref_not_cell_contents():
    def outer():
        c = 1

        def h(x):
            nonlocal c
            c = 2
            return x * c

        return h

    cf, _ = compile_full(outer())
    cf(torch.ones(1))
    ops = _ops(cf._entries[0].fn)
    assert ("STORE_DEREF", "c") in ops
    assert not any(v == "cell_contents" for _, v in ops)


def test_helper_cell_written_through_cell_contents():
    def outer():
        v = 1

        def helper():
            nonlocal v
            v += 1

        return helper, lambda: v

    helper, get = outer()

    def main(x):
        helper()
        return x + 1

    cf, be = compile_full(main)
    cf(torch.zeros(1))
    assert get() == 2
    ops = _ops(cf._entries[0].fn)
    assert ("STORE_ATTR", "cell_contents") in ops
    cf(torch.zeros(1))  # guard on the helper's cell contents: v is now 2
    assert get() == 3


def test_force_transform_runs_pure_python_through_transformed_code():
    def f(a, b):
        acc = []

        def add(v):
            acc.append(v)

        for i in range(a):
            add(i * b)
        return acc, len(acc)

    bytegraph.config.force_transform = True
    try:
        cf = bytegraph.compile(f, backend=CountingBackend(), fullgraph=True)
        assert cf(3, 2) == f(3, 2) == ([0, 2, 4], 3)
        assert cf._entries[0].fn is not f
        stats = bytegraph.stats()
        assert stats.frames_transformed == 1
        assert stats.eager_fallbacks == 0
        report = bytegraph.explain(f, fullgraph=True)(2, 5)
        assert (report.frames_transformed, report.frames_eager, report.graph_count) == (1, 0, 0)
        assert report.result == ([0, 5], 2)
    finally:
        bytegraph.config.force_transform = False


# -- a cell emptied in the trace, then a graph break ------------------------------------------
# The trace buffers cell writes; a cell bound and deleted in it ends EMPTY, and its write-back
# deleted a real cell the replay had never filled: UnboundLocalError where eager runs on.

def _quiet():
    print("", end="", file=__import__("io").StringIO())   # a graph break


def _del_cell_then_break(x):
    c = 5
    h = lambda: c       # noqa: E731 (c is a cell)
    del c
    _quiet()
    c = 9
    return x + 1, h()


def _except_name_captured_then_break(x):
    r = []
    try:
        raise ValueError("v")
    except ValueError as e:          # the handler's implicit ``del e`` empties the cell
        r.append(lambda: str(e))
    y = x + 1
    _quiet()
    try:
        return y, r[0]()
    except NameError:
        return y, "NameError"


def _nonlocal_del_then_break(x):
    c = 5

    def d():
        nonlocal c
        del c
    d()
    _quiet()
    return x + 1


def _make_pre_existing_cell():
    c = 1

    def setter():
        nonlocal c
        c = 5

    def deleter():
        nonlocal c
        del c

    def reader():
        try:
            return c
        except NameError:
            return "empty"
    return setter, deleter, reader


_SET, _DEL, _READ = _make_pre_existing_cell()


def _pre_existing_cell_set_and_deleted(x):
    _SET()
    _DEL()
    _quiet()
    return x + 1, _READ()


@pytest.mark.parametrize("fn", [_del_cell_then_break, _except_name_captured_then_break, _nonlocal_del_then_break,
                                _pre_existing_cell_set_and_deleted], ids=lambda f: f.__name__.strip("_"))
def test_a_cell_emptied_in_the_trace_before_a_break(fn):
    def outcome(f):
        try:
            return ("ok", _plain(f(torch.ones(2))))
        except Exception as e:      # pragma: no cover (a failure shows it)
            return ("raised", type(e).__name__, str(e))
    if fn is _pre_existing_cell_set_and_deleted:
        _DEL() if _READ() != "empty" else None     # the real cell starts empty, as it ends
    expected = outcome(fn)
    if fn is _pre_existing_cell_set_and_deleted:
        assert _READ() == "empty"
    compiled = bytegraph.compile(fn, backend="eager")
    for _ in range(2):
        assert outcome(compiled) == expected
    assert bytegraph.stats().graph_breaks >= 1 and bytegraph.stats().eager_fallbacks == 0


def _plain(v):
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, tuple):
        return tuple(_plain(e) for e in v)
    return v


# -- a cell bound on one path and empty on another, then a break ----------------------------
# The continuation's entry took the cell's state for granted (no guard): compiled first with
# the cell bound, a call with it empty raised NameError at the break; compiled first with it
# empty, a call with it bound answered "empty".  A CELL_EMPTY guard now tells them apart.

def _value_or_name_error(h):
    try:
        return h()
    except NameError:
        return "NE"


def _cell_bound_on_one_path(x, flag):
    h = lambda: c       # noqa: E731
    if flag:
        c = 5
    _quiet()
    return x + 1, _value_or_name_error(h)


def _cell_deleted_on_one_path(x, flag):
    c = 5
    h = lambda: c       # noqa: E731
    if flag:
        del c
    _quiet()
    return x + 1, _value_or_name_error(h)


@pytest.mark.parametrize("order", [(True, False), (False, True)])
@pytest.mark.parametrize("fn", [_cell_bound_on_one_path, _cell_deleted_on_one_path], ids=lambda f: f.__name__.strip("_"))
def test_a_cell_empty_on_one_path_is_guarded_across_a_break(fn, order):
    bytegraph.reset()
    compiled = bytegraph.compile(fn, backend="eager")
    for flag in order + order:
        assert _plain(compiled(torch.ones(2), flag)) == _plain(fn(torch.ones(2), flag)), flag
    assert bytegraph.stats().eager_fallbacks == 0


def test_the_cell_guard_names_the_state():
    from bytegraph.guard_compiler import cell_is_empty
    from bytegraph.guards import Guard
    from bytegraph.sources import RootCellSource
    import types
    assert cell_is_empty(types.CellType()) and not cell_is_empty(types.CellType(0))
    assert Guard("CELL_EMPTY", RootCellSource("c", 0), True).describe() == "cell c is empty"

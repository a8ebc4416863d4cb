"""Graph breaks and resume functions (issue 4).

Every break kind is placed in every context (top level, ``for`` loop,
``while`` loop, an inlined call two levels deep, ``with torch.no_grad()``,
``try``/``finally``).  Each case compares results and observable effects
(stdout, log records, list contents) with eager Python, checks that the
frame was split rather than run eagerly, and that a second identical call
reuses the compiled pieces.
"""

import contextlib
import dis
import io
import logging
import textwrap
import zlib

import pytest
import torch

import bytegraph
from bytegraph.bytecode.emit import load_cell
from conftest import CountingBackend

LOG = logging.getLogger("bytegraph.tests.user")

BREAKS = {
    "print": 'print("value", x.shape)',
    "logging": 'LOG.warning("step %s", 1)',
    "c_function": "x = x + zlib.crc32(b'ab') % 7",
    "data_branch": "if x.sum() > 0:\n    x = x + 1\nelse:\n    x = x - 1",
    "item": "if x.abs().max().item() > 1e9:\n    x = x * 0",
    "explicit": "bytegraph.graph_break()",
}

CONTEXTS = {
    "top": """
        def f(x):
            x = x * 2
            {B}
            x = x + 1
            return x
    """,
    "for_loop": """
        def f(x):
            for i in range(3):
                x = x * 2
                {B}
                x = x + i
            return x
    """,
    "while_loop": """
        def f(x):
            i = 0
            while i < 3:
                x = x * 2
                {B}
                x = x + i
                i += 1
            return x
    """,
    "inlined_two_deep": """
        def h(x):
            x = x * 2
            {B}
            return x + 1

        def g(x):
            return h(x) * 3

        def f(x):
            return g(x + 1) - 1
    """,
    "no_grad": """
        def f(x):
            with torch.no_grad():
                x = x * 3
                {B}
                x = x + 1
            return x, torch.is_grad_enabled()
    """,
    "contextmanager": """
        import contextlib

        @contextlib.contextmanager
        def scope(log):
            log.append("enter")
            try:
                yield 2
            finally:
                log.append("exit")

        def f(x):
            log = []
            with scope(log) as k:
                x = x * k
                {B}
                x = x + 1
            return x * 3, log
    """,
    "try_finally": """
        def f(x):
            out = []
            try:
                x = x * 2
                {B}
                x = x + 1
            finally:
                out.append(x.sum())
            return x, out
    """,
}


def build(context: str, brk: str):
    template = textwrap.dedent(CONTEXTS[context])
    lines = []
    for line in template.splitlines():
        if line.strip() == "{B}":
            indent = line[: len(line) - len(line.lstrip())]
            lines.extend(indent + part for part in BREAKS[brk].splitlines())
        else:
            lines.append(line)
    namespace = {"torch": torch, "bytegraph": bytegraph, "LOG": LOG, "zlib": zlib}
    exec(compile("\n".join(lines) + "\n", f"<{context}:{brk}>", "exec"), namespace)
    return namespace["f"]


class Recorder(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def observe(fn, x):
    rec = Recorder()
    LOG.addHandler(rec)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            result = fn(x)
    finally:
        LOG.removeHandler(rec)
    return result, out.getvalue(), rec.messages


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            assert_same(p, q)
    else:
        assert a == b


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("brk", list(BREAKS))
def test_break_kind_in_context(brk, context):
    eager_fn = build(context, brk)
    be = CountingBackend()
    compiled = bytegraph.compile(build(context, brk), backend=be)
    requires_grad = context == "no_grad"
    x = torch.randn(4, requires_grad=requires_grad)
    expected = observe(eager_fn, x)
    got = observe(compiled, x)
    assert_same(expected[0], got[0])
    assert expected[1:] == got[1:]  # stdout and log records, exactly once each
    stats = bytegraph.stats()
    assert stats.eager_fallbacks == 0
    assert stats.graph_breaks >= 1
    assert be.count >= 2, "tensor work on both sides of the break must be compiled"
    graphs = be.count
    again = observe(compiled, x)
    assert_same(expected[0], again[0])
    assert be.count == graphs, "a second identical call must not retrace"


def test_loop_of_ten_iterations_compiles_body_once():
    def f(x, weights):
        for w in weights:
            x = torch.tanh(x @ w)
            print("layer done")
            x = x * 2
        return x

    weights = [torch.randn(4, 4) for _ in range(10)]
    x = torch.randn(2, 4)
    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    out_c = io.StringIO()
    with contextlib.redirect_stdout(out_c):
        got = cf(x, weights)
    out_e = io.StringIO()
    with contextlib.redirect_stdout(out_e):
        expected = f(x, weights)
    torch.testing.assert_close(got, expected)
    assert out_c.getvalue() == out_e.getvalue() == "layer done\n" * 10
    # one graph for the body before the print and one after it, reused by all ten iterations
    assert be.count == 2
    assert bytegraph.stats().eager_fallbacks == 0
    cf(x, weights)
    assert be.count == 2


def test_loop_with_break_continue_and_return_inside_outlined_body():
    def f(x, ws):
        total = 0
        for k, w in enumerate(ws):
            if k == 1:
                continue
            x = x + w
            print(k)
            total += 1
            if k == 3:
                break
        else:
            return x, -1
        return x * total, total

    ws = [torch.ones(2) * i for i in range(6)]
    cf = bytegraph.compile(f, backend=CountingBackend())
    with contextlib.redirect_stdout(io.StringIO()):
        got, expected = cf(torch.zeros(2), ws), f(torch.zeros(2), ws)
    assert_same(expected, got)


def test_cell_written_before_break_is_read_after_it():
    def f(x):
        count = 0

        def bump():
            nonlocal count
            count += 10

        bump()
        print("between")
        return x + count, count

    cf = bytegraph.compile(f, backend=CountingBackend())
    with contextlib.redirect_stdout(io.StringIO()):
        out, count = cf(torch.zeros(1))
    assert count == 10
    torch.testing.assert_close(out, torch.full((1,), 10.0))
    # LOAD_FAST from 3.13, which the assembler may write as LOAD_FAST_CHECK
    ops = [
        ("LOAD_FAST" if i.opname == "LOAD_FAST_CHECK" else i.opname, i.argval)
        for i in dis.get_instructions(cf._entries[0].fn)
    ]
    cell_load = (load_cell("count").opname, "count")
    assert cell_load in ops
    assert ("STORE_DEREF", "count") in ops
    i = ops.index(cell_load)
    assert ops[i + 1][0] == "BUILD_TUPLE" and ops[i + 3][0] == "MAKE_FUNCTION"


def test_side_effects_before_break_are_visible_and_happen_once():
    STATE = {"g": 0}

    class Obj:
        pass

    def f(x, lst, obj):
        lst.append(x.sum().item() * 0 + 1)  # .item() itself is a break: do effects around it
        lst.append(2)
        STATE["g"] += 1
        obj.flag = True
        print(lst, STATE["g"], obj.flag)
        return x + 1

    for fn in (f, bytegraph.compile(f, backend=CountingBackend())):
        lst, obj = [], Obj()
        STATE["g"] = 0
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn(torch.zeros(1), lst, obj)
        assert buf.getvalue() == "[1.0, 2] 1 True\n"
        assert lst == [1.0, 2] and STATE["g"] == 1 and obj.flag is True


def test_explain_lists_every_break_and_fullgraph_raises_on_first():
    def f(x):
        x = x + 1
        print("a")
        x = x * 2
        bytegraph.graph_break()
        return x - 1

    with contextlib.redirect_stdout(io.StringIO()):
        report = bytegraph.explain(f)(torch.ones(1))
    kinds = [r.kind for r in report.break_reasons]
    assert kinds == ["print", "explicit_graph_break"]
    first_line = f.__code__.co_firstlineno
    assert [r.location.lineno for r in report.break_reasons] == [first_line + 2, first_line + 4]
    assert all(r.location.filename == __file__ and r.hint for r in report.break_reasons)
    assert report.graph_count == 3
    with pytest.raises(bytegraph.GraphBreakError, match="print"):
        bytegraph.compile(f, backend="eager", fullgraph=True)(torch.ones(1))


def test_break_inside_user_function_compiles_its_frame():
    def helper(x):
        print("at once")
        return x.cos() + 1

    def f(x):
        return helper(x.sin()) * 2

    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.testing.assert_close(cf(torch.ones(3)), f(torch.ones(3)))
    ops = [n.target for g in be.graphs for n in g.graph.nodes if n.op == "call_method"]
    assert "cos" in ops and "sin" in ops  # the callee's tensor work is compiled too


def test_generator_root_runs_eagerly_with_reason():
    def gen(x):
        yield x + 1
        yield x + 2

    report = bytegraph.explain(gen)(torch.zeros(1))
    assert [r.kind for r in report.break_reasons] == ["generator"]
    assert [t.item() for t in bytegraph.compile(gen, backend="eager")(torch.zeros(1))] == [1.0, 2.0]


# --------------------------------------------------------------------------
# breaks where TorchDynamo 2.13 gives up on the whole frame


def run_twice_each(make_fn, *args):
    """Eager and compiled runs of fresh functions (fresh state each); returns outputs and stdout."""
    results = []
    for compiled in (False, True):
        fn = make_fn()
        if compiled:
            be = CountingBackend()
            fn = bytegraph.compile(fn, backend=be)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out = fn(*args)
        results.append((out, buf.getvalue()))
    assert_same(results[0][0], results[1][0])
    assert results[0][1] == results[1][1]
    assert bytegraph.stats().eager_fallbacks == 0
    return be


@pytest.mark.parametrize("kind", ["list", "dict", "set_len", "nested"])
def test_break_inside_comprehension(kind):
    def make():
        def f(x):
            if kind == "list":
                ys = [x * i for i in range(3) if print(i) is None]
                return torch.stack(ys).sum(0)
            if kind == "dict":
                d = {i: print(i) or x + i for i in range(3)}
                return d[2] - d[0]
            if kind == "set_len":
                return x * len({print(i) or i % 2 for i in range(4)})
            return [[print(j) or x * i * j for j in range(2)] for i in range(2)]
        return f

    be = run_twice_each(make, torch.ones(2))
    assert be.count >= 1


def test_break_inside_user_context_manager():
    class Tracker:
        def __init__(self):
            self.log = []

        def __enter__(self):
            self.log.append("enter")
            return self

        def __exit__(self, *exc):
            self.log.append(f"exit {exc[0]}")
            return False

    def make():
        t = Tracker()

        def f(x):
            with t as inside:
                y = x * 2
                print("in")
                inside.log.append("body")
                y = y + 1
            return y, list(t.log)
        return f

    be = run_twice_each(make, torch.ones(2))
    assert be.count == 2


def test_break_inside_contextmanager_generator():
    @contextlib.contextmanager
    def scaled(log, k):
        log.append("in")
        yield k
        log.append("out")

    def make():
        log = []

        def f(x):
            with scaled(log, 3) as k:
                y = x * k
                print("inside")
                y = y + 1
            return y, list(log)
        return f

    be = run_twice_each(make, torch.ones(2))
    assert be.count >= 2


def test_break_while_generator_created_in_frame_is_alive():
    def make():
        def f(x):
            g = (x * i for i in range(1, 4))
            a = next(g)
            print("generator alive")
            b = next(g)
            return a + b + sum(g)
        return f

    run_twice_each(make, torch.ones(2))


@pytest.mark.parametrize("shape", ["two_breaks_one_block", "block_then_loop_block", "set_grad_enabled_call"])
def test_grad_mode_is_right_after_breaks_in_grad_contexts(shape):
    def make():
        def f(x):
            if shape == "two_breaks_one_block":
                with torch.no_grad():
                    x = x + 1
                    bytegraph.graph_break()
                    x = x * 2
                    bytegraph.graph_break()
                    x = x - 1
            elif shape == "block_then_loop_block":
                with torch.no_grad():
                    bytegraph.graph_break()
                for _ in range(2):
                    with torch.no_grad():
                        x = x * 2
                        bytegraph.graph_break()
                    x = x + 1
            else:
                torch.set_grad_enabled(False)
                y = x * 2
                bytegraph.graph_break()
                torch.set_grad_enabled(True)
                x = y + x
            return x, torch.is_grad_enabled()
        return f

    run_twice_each(make, torch.ones(2, requires_grad=True))
    assert torch.is_grad_enabled()


def test_break_inside_autocast_reenters_it_and_reuses_entries():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            print("in autocast")
            z = y @ w
        return y.dtype, z.dtype, (z.float() + 1).sum()

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    cf = bytegraph.compile(f, backend=CountingBackend())
    with contextlib.redirect_stdout(io.StringIO()):
        expected = f(x, w)
        for _ in range(3):
            assert_same(expected, cf(x, w))
    assert not torch.is_autocast_enabled("cpu")
    stats = bytegraph.stats()
    assert stats.recompiles == 0
    # the print, then leaving the natively re-entered block: three graphs
    assert (stats.graphs, stats.graph_breaks) == (3, 2)


def test_identity_of_user_objects_is_guarded_when_compared():
    class Box:
        pass

    a, b = Box(), Box()

    def f(x, p, q):
        return x + 1 if p is q else x - 1

    cf = bytegraph.compile(f, backend=CountingBackend())
    torch.testing.assert_close(cf(torch.zeros(1), a, a), torch.ones(1))
    torch.testing.assert_close(cf(torch.zeros(1), a, b), -torch.ones(1))


def test_exception_from_a_natively_run_instruction_reaches_the_users_handler():
    def f(x):
        y = x * 2
        try:
            zlib.decompress(b"not compressed")  # C function: runs natively, raises
            y = y + 100
        except zlib.error:
            y = y - 1
        finally:
            y = y * 3
        return y

    cf = bytegraph.compile(f, backend=CountingBackend())
    x = torch.ones(2)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), torch.full((2,), 3.0))
    assert bytegraph.stats().eager_fallbacks == 0 and bytegraph.stats().graph_breaks >= 1


def test_explain_counts_every_graph_even_after_an_earlier_compile():
    def h(x):
        x = x + 1
        bytegraph.graph_break()
        return x * 2

    bytegraph.compile(h, backend="eager")(torch.randn(3))
    report = bytegraph.explain(h)(torch.randn(3))
    assert (report.graph_count, len(report.break_reasons)) == (2, 1)


def test_type_error_raised_by_user_code_after_a_hit_is_not_retried():
    def f(x):
        x.add_(1)
        print("side effect")
        return x + len(None)  # TypeError from the user's code, after a break

    cf = bytegraph.compile(f, backend=CountingBackend())
    x = torch.zeros(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for _ in range(2):
            with pytest.raises(TypeError):
                cf(x)
    torch.testing.assert_close(x, torch.full((1,), 2.0))  # each call's effects exactly once
    assert out.getvalue() == "side effect\n" * 2


def test_break_inside_an_exception_handler_runs_the_frame_eagerly():
    import sys

    def make():
        def f(x):
            try:
                raise KeyError("a")
            except KeyError:
                print("handling")
                if sys.exc_info()[0] is not KeyError:
                    return x * 0
                raise

        return f

    outs = []
    for compiled in (False, True):
        fn = bytegraph.compile(make(), backend=CountingBackend()) if compiled else make()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(KeyError):
            fn(torch.ones(2))
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] == "handling\n"
    assert bytegraph.stats().eager_fallbacks == 1


# --- wt-iter: loops resumed after a break walk a real iterator (a dict's
# values, a ModuleList's modules, an enumerate) that the resumed trace steps


def _quiet_break():
    print("", end="", file=io.StringIO())


@pytest.mark.parametrize("n", [3, 8])
def test_loop_resumed_after_a_break_in_its_first_iteration_is_traced_to_its_end(n):
    def f(x, d):
        try:   # a loop inside try/finally is not outlined: the break stops the frame in the loop
            for i, v in enumerate(d.values()):
                x = x + v
                if i == 0:
                    _quiet_break()
                x = x * 2
        finally:
            x = x - 1
        return x

    d = {f"k{i}": torch.ones(3) * i for i in range(n)}
    x = torch.randn(3)
    report = bytegraph.explain(f)(x, d)
    torch.testing.assert_close(report.result, f(x, d))
    # the graph before the break, and one for the rest of the loop whatever its length
    # (before: the resumed trace could not step the real enumerate, one more break per iteration)
    assert report.graph_count == 2
    assert not [r for r in report.break_reasons if r.kind == "unsupported_iter"]
    assert report.frames_eager == 0


def test_module_list_loop_resumed_after_a_break_in_a_callee_runs_natively():
    def helper(x):
        x = x * 2
        _quiet_break()
        return x + 1

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(4)])

        def forward(self, x):
            for layer in self.block:   # iter(self._modules.values()): a dict_valueiterator after the break
                x = helper(layer(x))
            return x + 1

    m = M()
    x = torch.randn(2, 3)
    report = bytegraph.explain(m)(x)
    torch.testing.assert_close(report.result, m(x))
    assert not [r for r in report.break_reasons if r.kind == "unsupported_iter"]
    assert report.frames_eager == 0
    # the layers are distinct modules: a graph per layer's body, plus the first and the last
    assert report.graph_count <= 4 + 2


def test_loop_resumed_at_every_iteration_compiles_its_continuation_once():
    def f(x, d):
        try:
            for k, v in d.items():
                x = x + v
                _quiet_break()   # every iteration
                x = x * 2
        finally:
            x = x - 1
        return x

    counts = []
    for n in (3, 10):
        bytegraph.reset()
        d = {f"k{i}": torch.ones(3) * i for i in range(n)}
        x = torch.randn(3)
        report = bytegraph.explain(f)(x, d)
        torch.testing.assert_close(report.result, f(x, d))
        assert report.frames_eager == 0
        counts.append(report.graph_count)
    # not one continuation per position of the iterator: the count does not grow with the loop
    assert counts[0] == counts[1] <= 4

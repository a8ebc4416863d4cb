"""The public surface (issue 2): compile() forms, backends, bad input,
fullgraph errors, explain(), stats() and logs."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import bytegraph
from conftest import CountingBackend


def test_compile_as_decorator_with_and_without_arguments():
    @bytegraph.compile
    def a(x):
        return x + 1

    @bytegraph.compile(backend="eager")
    def b(x):
        return x + 2

    assert a.__name__ == "a" and b.__name__ == "b"
    torch.testing.assert_close(b(torch.zeros(1)), torch.full((1,), 2.0))


def test_compile_bound_method_and_method_decorator():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @bytegraph.compile(backend="eager")
        def apply(self, x):
            return x * self.k

        def plain(self, x):
            return x + self.k

    s = Scaler(3)
    torch.testing.assert_close(s.apply(torch.ones(1)), torch.full((1,), 3.0))
    m = bytegraph.compile(s.plain, backend="eager")
    torch.testing.assert_close(m(torch.ones(1)), torch.full((1,), 4.0))
    assert bytegraph.stats().graphs == 2


def test_non_callable_raises_type_error():
    with pytest.raises(TypeError, match="callable"):
        bytegraph.compile(42)


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        bytegraph.compile(lambda x: x, backend="nope")
    for name in ("eager", "aot_eager", "inductor"):
        assert name in str(err.value)


def test_builtins_and_c_functions_are_compiled_as_calls_to_them():
    # (a C callable has no frame of its own: a forwarding function is compiled)
    n = bytegraph.compile(len, backend="eager")
    assert n([1, 2, 3]) == 3 and n.__name__ == "len"
    f = bytegraph.compile(torch.sin, backend="eager")
    torch.testing.assert_close(f(torch.zeros(1)), torch.zeros(1))
    assert len(f._entries) == 1


def test_backend_that_raises_is_reported_and_falls_back():
    def broken(gm, example_inputs):
        raise RuntimeError("boom")

    fn = lambda x: x * 2  # noqa: E731
    with pytest.raises(bytegraph.BackendError):   # the test suite's raise_on_error surfaces it
        bytegraph.compile(fn, backend=broken)(torch.ones(1))
    bytegraph.config.raise_on_error = False
    out = bytegraph.compile(fn, backend=broken)(torch.ones(1))
    torch.testing.assert_close(out, torch.full((1,), 2.0))
    assert bytegraph.stats().eager_fallbacks == 1
    with pytest.raises(bytegraph.BackendError, match="broken.*boom"):
        bytegraph.compile(fn, backend=broken, fullgraph=True)(torch.ones(1))


def test_backend_returning_non_callable_is_reported():
    with pytest.raises(bytegraph.BackendError, match="not callable"):
        bytegraph.compile(lambda x: x + 1, backend=lambda gm, ex: 3, fullgraph=True)(torch.ones(1))


def test_custom_backend_receives_the_real_inputs():
    # as from torch.compile: the call's own tensors, so a backend may run or
    # benchmark its graph; one the graph writes to is a copy (running the
    # graph at compile time must not change the program's tensor)
    seen = []

    def backend(gm, example_inputs):
        seen.append(list(example_inputs))
        out = gm.forward(*example_inputs)     # a benchmarking backend runs it
        assert out is not None
        return gm.forward

    x, y = torch.ones(2, 2), torch.full((2, 2), 2.0)
    bytegraph.compile(lambda x, y: x @ y, backend=backend)(x, y)
    assert [type(t) for t in seen[0]] == [torch.Tensor, torch.Tensor]
    assert torch.equal(seen[0][0], x) and torch.equal(seen[0][1], y)
    lin = torch.nn.Linear(2, 2)
    bytegraph.compile(lin, backend=backend)(x)
    assert any(t is lin.weight for t in seen[1])     # parameters are passed as they are

    def bump(a, k):
        a.add_(1)
        return a * k

    a = torch.zeros(3)
    out = bytegraph.compile(bump, backend=backend)(a, 2)
    assert torch.equal(a, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))
    lifted = seen[2][0]
    assert lifted is not a and torch.equal(lifted, torch.ones(3))   # (the backend's run bumped its copy)


def test_a_backend_running_its_graph_leaves_batch_norm_statistics_alone():
    # batch_norm writes its running statistics without bumping their version
    # counters: the backend must still get copies (regression: updated twice)
    import torch.nn.functional as F

    def backend(gm, example_inputs):
        gm.forward(*example_inputs)
        return gm.forward

    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True, momentum=0.5)

    x = torch.arange(6.).reshape(2, 3)
    rm1, rv1, rm2, rv2 = torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(3)
    expected = f(x, rm1, rv1)
    torch.testing.assert_close(bytegraph.compile(f, backend=backend)(x, rm2, rv2), expected)
    torch.testing.assert_close(rm2, rm1)
    torch.testing.assert_close(rv2, rv1)
    bn1, bn2 = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    bn1(x)
    bytegraph.compile(bn2, backend=backend)(x)
    torch.testing.assert_close(bn2.running_mean, bn1.running_mean)
    torch.testing.assert_close(bn2.running_var, bn1.running_var)
    assert int(bn2.num_batches_tracked) == int(bn1.num_batches_tracked) == 1


def test_batch_norm_statistics_sharing_memory_match_eager_under_aot_eager():
    # batch_norm writes its running statistics without bumping version
    # counters; a functionalizing backend replays each write as a copy, so
    # statistics that share memory (one tensor twice, views of one buffer)
    # must not be compiled as if they were apart
    import torch.nn.functional as F

    def f(x, a, b):
        return F.batch_norm(x, a, b, training=True, momentum=0.5)

    x = torch.arange(6.).reshape(2, 3)
    for make in (lambda: (lambda s: (s, s))(torch.ones(3)), lambda: (lambda buf: (buf[:3], buf[3:]))(torch.ones(6))):
        a1, b1 = make()
        a2, b2 = make()
        expected = f(x, a1, b1)
        torch.testing.assert_close(bytegraph.compile(f, backend="aot_eager")(x, a2, b2), expected)
        torch.testing.assert_close(a2, a1)
        torch.testing.assert_close(b2, b1)


def test_custom_backend_wrapping_aot_keeps_gradients_across_a_break():
    # the continuation's input is a non-leaf that requires grad (and is
    # written): its copy for the backend must still require grad, or
    # AOTAutograd compiles an inference graph and the gradient is lost
    from conftest import CountingBackend

    def f(x, write):
        y = x * 2
        bytegraph.graph_break()
        if write:
            y.add_(1)
        return (y.exp() * 3).sum()

    for write in (False, True):
        x1 = torch.randn(4, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_()
        expected = f(x1, write)
        expected.backward()
        out = bytegraph.compile(f, backend=CountingBackend("aot_eager"))(x2, write)
        out.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x2.grad, x1.grad)


def test_builtin_backends_still_get_fake_inputs(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensor
    from bytegraph import backends
    seen = []
    real = backends._aot_eager

    def spy(gm, example_inputs):
        seen.extend(type(t) for t in example_inputs)
        return real(gm, example_inputs)

    spy.takes_fake_inputs = True
    monkeypatch.setitem(backends.BACKENDS, "aot_eager", spy)
    bytegraph.compile(lambda x: x.sin(), backend="aot_eager")(torch.ones(2))
    assert seen == [FakeTensor]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_named_backends_agree_with_eager(backend):
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1).sum(0)

    x, w = torch.randn(4, 3), torch.randn(3, 5)
    torch.testing.assert_close(bytegraph.compile(f, backend=backend)(x, w), f(x, w))


def test_inductor_backend_agrees_with_eager():
    def f(x):
        return (x.sin() + x.cos() * 2).relu()

    x = torch.randn(64)
    torch.testing.assert_close(bytegraph.compile(f, backend="inductor")(x), f(x))
    assert bytegraph.stats().graphs == 1


def test_frame_that_cannot_be_captured_runs_eagerly_with_reason():
    def gen(x):
        yield x + 1

    cg = bytegraph.compile(gen, backend=CountingBackend())
    torch.testing.assert_close(next(cg(torch.zeros(1))), torch.ones(1))
    s = bytegraph.stats()
    assert s.eager_fallbacks == 1 and s.graphs == 0


def test_unsupported_call_splits_the_frame_instead_of_running_it_eagerly(capsys):
    def f(x):
        print("side effect")
        return x + 1

    cf = bytegraph.compile(f, backend=CountingBackend())
    torch.testing.assert_close(cf(torch.zeros(1)), torch.ones(1))
    assert capsys.readouterr().out == "side effect\n"
    s = bytegraph.stats()
    assert s.eager_fallbacks == 0 and s.graphs == 1 and s.graph_breaks == 1


def test_fullgraph_error_names_file_line_construct_and_hint():
    def f(x):
        y = x + 1
        print(y)  # line marker
        return y

    with pytest.raises(bytegraph.GraphBreakError) as err:
        bytegraph.compile(f, backend="eager", fullgraph=True)(torch.zeros(1))
    record = err.value.record
    assert record.kind == "print"
    assert record.location.filename == __file__
    assert record.location.lineno == f.__code__.co_firstlineno + 2
    assert "test_api.py" in str(err.value) and "print" in str(err.value) and "hint" in str(err.value)


def test_user_exceptions_propagate_unchanged():
    def f(x):
        if x.dim() != 2:
            raise ValueError("expected a matrix")
        return x.t()

    cf = bytegraph.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(ValueError, match="expected a matrix") as err:
        cf(torch.zeros(3))
    assert any(entry.name == "f" for entry in err.traceback)  # traceback reaches the user's line
    torch.testing.assert_close(cf(torch.ones(2, 3)), torch.ones(3, 2))  # the good path still compiles
    assert bytegraph.stats().graphs == 1


def test_explain_reports_graphs_guards_and_reasons():
    def f(x, n):
        return (x * n).relu()

    report = bytegraph.explain(f)(torch.randn(3), 2)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.ops_per_graph == [2]
    assert any("x: Tensor" in g and "shape=[3]" in g for g in report.guards)
    assert any(g == "n == 2" for g in report.guards)
    text = str(report)
    assert "graph 0" in text and "guards" in text

    def g(x):
        print("no")
        return x

    report = bytegraph.explain(g)(torch.randn(3))
    assert report.graph_count == 0 and report.frames_eager == 0
    (reason,) = report.break_reasons
    assert reason.kind == "print" and reason.location.lineno == g.__code__.co_firstlineno + 1
    assert "print" in str(report)

    def h(x):
        yield x

    report = bytegraph.explain(h)(torch.randn(3))
    assert report.frames_eager == 1 and [r.kind for r in report.break_reasons] == ["generator"]


def test_explain_groups_break_reasons_by_kind_most_frequent_first():
    def f(x):
        print("a")
        x = x + 1
        print("b")
        x = x * 2
        bytegraph.graph_break()
        return x.sin()

    report = bytegraph.explain(f)(torch.ones(2))
    groups = [(kind, n) for kind, n, _ in report.breaks_by_kind()]
    assert groups[0] == ("print", 2) and len(groups) == 2 and groups[1][1] == 1
    text = str(report)
    assert "breaks and fallbacks by kind" in text and "  print: 2" in text
    torch.testing.assert_close(report.result, (torch.ones(2) + 1).mul(2).sin())


def test_stats_counters_and_reset():
    cf = bytegraph.compile(lambda x: x + 1, backend="eager")
    cf(torch.zeros(1))
    cf(torch.zeros(1))
    cf(torch.zeros(2))
    s = bytegraph.stats().as_dict()
    assert s["frames_compiled"] == 2 and s["recompiles"] == 1 and s["cache_hits"] == 1
    assert s["graphs"] == 2 and s["cache_misses"] == 2
    bytegraph.reset()
    assert bytegraph.stats().graphs == 0
    assert cf._entries == []


def test_logs_go_to_stderr_only_and_never_stdout():
    script = textwrap.dedent("""
        import torch, bytegraph
        f = bytegraph.compile(lambda x: x * 2, backend="eager")
        f(torch.ones(2)); f(torch.ones(3))
    """)
    # a bare environment, but the bytegraph under test (this checkout's src), not whichever one the
    # interpreter has installed
    src = os.path.dirname(os.path.dirname(os.path.abspath(bytegraph.__file__)))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={"BYTEGRAPH_LOGS": "graph,guards,bytecode,recompiles", "PATH": "", "PYTHONPATH": src},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    for needle in ("[bytegraph.graph_code]", "[bytegraph.guards]", "[bytegraph.bytecode]", "[bytegraph.recompiles]"):
        assert needle in proc.stderr


def test_package_never_imports_dynamo_or_calls_torch_compile():
    import pathlib
    import re
    root = pathlib.Path(bytegraph.__file__).parent
    pattern = re.compile(r"^\s*(import torch\._dynamo|from torch\._dynamo|from torch import _dynamo)|torch\.compile\(",
                         re.M)
    offenders = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_tensor_subclass_and_sparse_inputs_run_eagerly():
    class Sub(torch.Tensor):
        pass

    f = bytegraph.compile(lambda x: x * 2, backend=CountingBackend())
    out = f(torch.ones(2).as_subclass(Sub))
    assert type(out) is Sub
    torch.testing.assert_close(f(torch.eye(2).to_sparse()).to_dense(), torch.eye(2) * 2)
    assert bytegraph.stats().eager_fallbacks >= 1


def test_compiled_function_called_from_compiled_code_is_inlined():
    @bytegraph.compile(backend="eager")
    def inner(x):
        return x.sin() + 1

    be = CountingBackend()

    @bytegraph.compile(backend=be, fullgraph=True)
    def outer(x):
        return inner(x) * 2

    x = torch.randn(3)
    torch.testing.assert_close(outer(x), (x.sin() + 1) * 2)
    assert be.count == 1


def test_a_line_tracer_sees_every_line_of_compiled_code_run_natively():
    """Under sys.settrace (a debugger, coverage) compiled functions and their
    continuations run natively, so the tracer sees eager's line events."""
    import sys

    def helper(x):
        y = x + 1
        return y * 2

    def f(x):
        return helper(x.sin())

    def traced(fn, x):
        lines = []

        def tracer(frame, event, arg):
            if event == "line" and frame.f_code.co_name == "helper":
                lines.append(frame.f_lineno - helper.__code__.co_firstlineno)
            return tracer

        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            out = fn(x)
        finally:
            sys.settrace(old)
        return out, lines

    compiled = bytegraph.compile(f, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))      # compiled and cached while nothing traces
    assert bytegraph.stats().graphs == 1
    expected = traced(f, x)
    got = traced(compiled, x)
    assert got[1] == expected[1] == [1, 2]
    torch.testing.assert_close(got[0], expected[0])

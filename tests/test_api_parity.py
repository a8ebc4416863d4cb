"""bytegraph.compile takes torch.compile's signature and means the same by it;
torch's markers (disable, allow_in_graph, graph_break, is_compiling) and
bytegraph's equivalents (plus set_stance) work inside compiled code."""

import functools
import inspect
import subprocess
import sys
import textwrap

import pytest
import torch

import bytegraph
from bytegraph.cache import CompiledFunction
from conftest import CountingBackend


def targets(be):
    return [[n.target for n in g.graph.nodes if n.op == "call_function"] for g in be.graphs]


def test_signature_covers_torch_compile():
    # every parameter of the installed torch's torch.compile (2.13 and 2.14 differ in one name)
    ours = inspect.signature(bytegraph.compile).parameters
    theirs = inspect.signature(torch.compile).parameters
    assert [p for p in theirs if p not in ours] == []
    for name in theirs:
        assert ours[name].kind == theirs[name].kind, name
    with pytest.raises(ValueError, match="does not support shapes_spec"):
        bytegraph.compile(lambda x: x, shapes_spec=object())


@pytest.mark.parametrize("kwargs, error, text", [
    ({"dynamic": "auto"}, ValueError, "dynamic must be None"),
    ({"mode": "fast"}, RuntimeError, "valid modes: default, "),
    ({"mode": 3}, TypeError, "mode must be a str"),
    ({"mode": "max-autotune", "options": {"max_autotune": True}}, RuntimeError, "cannot both"),
    ({"fullgraph": 1}, TypeError, "fullgraph must be True or False"),
    ({"options": ["max_autotune"]}, TypeError, "options must be a dict"),
    ({"options": {"max_autotun": True}}, RuntimeError, "unexpected Inductor option 'max_autotun'"),
    ({"options": {"max_autotune": "yes"}}, ValueError, "'max_autotune' takes a bool, not str"),
    ({"options": {"use_aoti": True}}, ValueError, "not supported"),
    ({"backend": "no_such_backend"}, RuntimeError, "unknown backend 'no_such_backend'"),
    ({"backend": 3}, TypeError, "backend must be a name or a callable"),
    ({"recompile_limit": 0}, ValueError, "recompile_limit must be a positive int"),
])
def test_bad_arguments_are_rejected_at_compile_time(kwargs, error, text):
    # bytegraph's own error types, which are also what torch.compile raises
    # (RuntimeError) and Python's convention (ValueError / TypeError)
    with pytest.raises(error, match=text) as info:
        bytegraph.compile(lambda x: x + 1, **kwargs)
    assert isinstance(info.value, bytegraph.BytegraphError) and isinstance(info.value, RuntimeError)
    with pytest.raises(error, match=text):
        bytegraph.compile(**kwargs)   # the decorator form checks too
    with pytest.raises(bytegraph.InvalidArgument, match="model can't be None"):
        bytegraph.compile(backend="eager")(None)


def test_mode_and_options_reach_a_custom_backend_as_keywords():
    seen = []

    def backend(gm, example_inputs, **kwargs):
        seen.append(kwargs)
        return gm.forward

    def plain(gm, example_inputs):   # takes no settings: torch.compile passes none for the defaults
        seen.append("plain")
        return gm.forward

    x = torch.randn(3)
    assert torch.equal(bytegraph.compile(lambda x: x * 2, backend=backend, mode="max-autotune")(x), x * 2)
    assert torch.equal(bytegraph.compile(lambda x: x * 3, backend=backend, options={"a": 1})(x), x * 3)
    assert torch.equal(bytegraph.compile(lambda x: x * 4, backend=backend)(x), x * 4)
    assert torch.equal(bytegraph.compile(lambda x: x * 5, backend=backend, mode="custom-mode")(x), x * 5)
    assert torch.equal(bytegraph.compile(lambda x: x * 6, backend=plain, mode="default")(x), x * 6)
    assert torch.equal(bytegraph.compile(lambda x: x * 7, backend=plain, options={})(x), x * 7)
    # bytegraph's own eager backends have no settings and ignore them, as torch's do
    assert torch.equal(bytegraph.compile(lambda x: x * 8, backend="eager", mode="max-autotune")(x), x * 8)
    filtered = bytegraph.compile(lambda x: x * 9, backend=plain,
                                 options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    assert torch.equal(filtered(x), x * 9)
    assert seen == [{"mode": "max-autotune"}, {"options": {"a": 1}}, {}, {"mode": "custom-mode"}, "plain", "plain",
                    "plain"]


def test_inductor_modes_and_options_are_in_effect_while_inductor_compiles():
    import torch._inductor.config as inductor_config
    seen = []

    def post_pass(graph):   # runs inside Inductor's compile: the config it sees is the one applied
        seen.append((inductor_config.fallback_random, inductor_config.max_autotune))

    x = torch.randn(4)
    f = bytegraph.compile(lambda x: x.sin() + 1, options={"post_grad_custom_post_pass": post_pass,
                                                          "fallback-random": True})
    torch.testing.assert_close(f(x), x.sin() + 1)
    assert seen == [(True, False)]
    # every mode this torch's Inductor knows (2.13 added "lite") is taken, as its preset of options
    from torch._inductor import list_mode_options
    for mode in list_mode_options():
        g = bytegraph.compile(lambda x: x.cos(), mode=mode)
        assert getattr(g._backend, "config_patches", {}) == list_mode_options(mode)
    with inductor_config.patch(post_grad_custom_post_pass=post_pass):
        g = bytegraph.compile(lambda x: x.cos() + 1, mode="max-autotune-no-cudagraphs")
        torch.testing.assert_close(g(x), x.cos() + 1)
    assert seen[1:] == [(False, True)]


def test_torch_debugging_backend_names():
    be = CountingBackend("aot_eager_decomp_partition")
    x = torch.randn(3, requires_grad=True)
    f = bytegraph.compile(lambda x: (x.sin() * 2).sum(), backend=be)
    f(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.cos().detach())
    assert be.count == 1
    y = torch.randn(3)
    g = bytegraph.compile(lambda x: torch.nn.functional.gelu(x) + 1, backend="aot_eager_default_partitioner")
    torch.testing.assert_close(g(y), torch.nn.functional.gelu(y) + 1)


def test_aot_eager_partitions_as_torchs_aot_eager():
    """``"aot_eager"`` is torch's: AOTAutograd with the min-cut partitioner, which
    saves attention's outputs for the backward; the default partitioner
    (``"aot_eager_default_partitioner"``) runs attention's forward again in it."""
    from torch.profiler import profile

    def f(q, k, v, w):
        return (torch.nn.functional.scaled_dot_product_attention(q @ w, k, v, is_causal=True) * 2).sum()

    def forward_calls(backend):
        q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
        w = torch.randn(4, 4, requires_grad=True)
        g = bytegraph.compile(f, backend=backend)
        g(q, k, v, w).backward()
        expected = w.grad.clone()
        w.grad = None
        with profile() as p:
            g(q, k, v, w).backward()
        torch.testing.assert_close(w.grad, expected)
        return sum(e.count for e in p.key_averages() if e.key == "aten::_scaled_dot_product_flash_attention_for_cpu")

    assert forward_calls("aot_eager") == 1


def test_backend_registered_with_torch_is_found_by_name():
    from torch._dynamo.backends.registry import register_backend
    calls = []

    @register_backend(name="bytegraph_test_counting")
    def counting(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    f = bytegraph.compile(lambda x: x - 1, backend="bytegraph_test_counting")
    x = torch.randn(2)
    assert torch.equal(f(x), x - 1) and len(calls) == 1


def test_recompiling_a_compiled_function_uses_the_new_backend():
    be1, be2 = CountingBackend(), CountingBackend()
    f = bytegraph.compile(lambda x: x.exp(), backend=be1)
    g = bytegraph.compile(f, backend=be2)
    x = torch.randn(2)
    assert g is not f and isinstance(g, CompiledFunction)
    torch.testing.assert_close(g(x), x.exp())
    assert len(be2.graphs) == 1 and len(be1.graphs) == 0
    m = torch.nn.Linear(2, 2)
    be3, be4 = CountingBackend(), CountingBackend()
    cm = bytegraph.compile(bytegraph.compile(m, backend=be3), backend=be4)
    torch.testing.assert_close(cm(x), m(x))
    assert cm._orig_mod is m and len(be4.graphs) == 1 and len(be3.graphs) == 0


def test_partial_callable_object_and_builtin_are_compiled():
    def scale(x, k, *, shift):
        return x * k + shift

    be = CountingBackend()
    p = bytegraph.compile(functools.partial(scale, k=3.0, shift=1.0), backend=be)
    assert isinstance(p, functools.partial) and p.keywords == {"k": 3.0, "shift": 1.0}
    x = torch.randn(3)
    torch.testing.assert_close(p(x), x * 3.0 + 1.0)
    assert len(be.graphs) == 1

    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, x):
            return x * self.k

    obj = Scaler()
    be = CountingBackend()
    c = bytegraph.compile(obj, backend=be)
    torch.testing.assert_close(c(x), x * 2.0)
    assert c.__self__ is obj and len(be.graphs) == 1

    be = CountingBackend()
    s = bytegraph.compile(torch.sin, backend=be)
    torch.testing.assert_close(s(x), torch.sin(x))
    assert targets(be) == [[torch.sin]]

    with pytest.raises(TypeError, match="expects a callable"):
        bytegraph.compile(42)


def test_disabled_functions_run_as_they_are():
    calls = []

    @torch.compiler.disable
    def theirs(x):
        calls.append("theirs")
        return x + 1

    @bytegraph.disable
    def ours(x):
        calls.append("ours")
        return x + 2

    assert bytegraph.compile(theirs) is theirs and bytegraph.compile(ours) is ours
    x = torch.randn(2)
    assert torch.equal(theirs(x), x + 1) and torch.equal(ours(x), x + 2)

    def user(x):
        return ours(theirs(x * 2)) * 3

    report = bytegraph.explain(user)(x)
    kinds = [r.kind for r in report.break_reasons]
    assert kinds.count("compiler_disable") == 2
    calls.clear()
    torch.testing.assert_close(bytegraph.compile(user, backend="eager")(x), user(x))
    assert calls == ["theirs", "ours", "theirs", "ours"]
    assert bytegraph.compile(lambda x: x, disable=True).__name__ == "<lambda>"


def test_allow_in_graph_records_one_node():
    traced_into = []

    def ours(x):
        traced_into.append(1)
        return x.sin() * 2

    def theirs(x):
        return x.cos() - 1

    assert bytegraph.allow_in_graph(ours) is ours
    torch.compiler.allow_in_graph(theirs)
    be = CountingBackend()
    f = bytegraph.compile(lambda x: theirs(ours(x)) + 1, backend=be)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), (x.sin() * 2).cos() - 1 + 1)
    assert targets(be)[0][:2] == [ours, theirs]


def test_graph_break_markers_and_is_compiling():
    def f(x):
        a = x + 1
        torch._dynamo.graph_break()
        b = a * 2
        bytegraph.graph_break()
        flags = (bytegraph.is_compiling(), torch.compiler.is_compiling())
        return b - 1, flags

    report = bytegraph.explain(f)(torch.ones(2))
    assert report.graph_count == 3
    assert [r.kind for r in report.break_reasons] == ["explicit_graph_break"] * 2
    out, flags = bytegraph.compile(f, backend="eager")(torch.ones(2))
    assert flags == (True, True) and f(torch.ones(2))[1] == (False, False)
    torch.testing.assert_close(out, torch.full((2,), 3.0))


@pytest.fixture
def stance_reset():
    yield
    bytegraph.set_stance("default")


def test_set_stance_force_eager_runs_the_original(native_mode, stance_reset):
    be = CountingBackend()
    f = bytegraph.compile(lambda x: x * 3, backend=be)
    x = torch.randn(2)
    f(x)
    with bytegraph.set_stance("force_eager"):
        hits = bytegraph.stats().cache_hits
        torch.testing.assert_close(f(x), x * 3)
        f(torch.randn(5, 5))
        assert bytegraph.stats().cache_hits == hits and len(f._entries) == 1
    hits = bytegraph.stats().cache_hits
    f(x)
    assert bytegraph.stats().cache_hits == hits + 1

    @bytegraph.set_stance("force_eager")
    def under_stance():
        return f(x)

    assert bytegraph.decorators.STANCE.value == "default"
    hits = bytegraph.stats().cache_hits
    under_stance()
    assert bytegraph.stats().cache_hits == hits
    bytegraph.set_stance("force_eager")
    f(x)
    assert bytegraph.stats().cache_hits == hits
    bytegraph.set_stance("default")
    f(x)
    assert bytegraph.stats().cache_hits == hits + 1


def test_set_stance_on_recompile(stance_reset):
    f = bytegraph.compile(lambda x: x + 1, backend="eager")
    f(torch.ones(2))
    with bytegraph.set_stance("eager_on_recompile"):
        torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 2.0))
        torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))
        assert len(f._entries) == 1
    with bytegraph.set_stance("fail_on_recompile"):
        f(torch.ones(2))
        with pytest.raises(bytegraph.RecompileError, match="would recompile.*size of dim 0 2 → 4"):
            f(torch.ones(4))
    with pytest.raises(ValueError, match="valid stances"):
        bytegraph.set_stance("sometimes")


def test_recompile_limit_per_compile_call(caplog):
    f = bytegraph.compile(lambda x, k: x * k, backend="eager", recompile_limit=2, dynamic=False, name="scaler")
    x = torch.ones(2)
    with caplog.at_level("WARNING", logger="bytegraph"):
        for k in range(5):
            torch.testing.assert_close(f(x, k), x * k)
    assert len(f._entries) == 2
    warnings = [r.getMessage() for r in caplog.records if "recompile_limit" in r.getMessage()]
    assert len(warnings) == 1
    assert "scaler" in warnings[0] and "k == 1" in warnings[0] and "Fix:" in warnings[0]
    g = bytegraph.compile(lambda x, k: x * k, backend="eager", recompile_limit=1, dynamic=False, fullgraph=True)
    g(x, 1)
    with pytest.raises(bytegraph.RecompileError, match="recompile limit"):
        g(x, 2)


def test_torch_set_stance_is_followed(stance_reset):
    # torch.compiler.set_stance is torch's switch for "compiled code": it means the same for bytegraph's
    be = CountingBackend()
    f = bytegraph.compile(lambda x: x * 3, backend=be)
    x = torch.randn(2)
    with torch.compiler.set_stance("force_eager"):
        torch.testing.assert_close(f(x), x * 3)
    assert be.count == 0
    f(x)
    assert be.count == 1

    @torch.compiler.set_stance("fail_on_recompile")
    def strict(t):
        return f(t)

    strict(x)   # cached: fine
    with pytest.raises(bytegraph.RecompileError, match="would recompile"):
        strict(torch.randn(3, 3))
    with torch.compiler.set_stance("eager_on_recompile"):
        f(torch.randn(4, 4))
    assert be.count == 1 and bytegraph.decorators.STANCE.value == "default"
    # bytegraph's own stance stays in force under torch's default
    with bytegraph.set_stance("force_eager"), torch.compiler.set_stance("default"):
        f(torch.randn(5, 5))
    assert be.count == 1


def test_eager_then_compile_learns_from_the_first_call(stance_reset):
    be = CountingBackend()
    f = bytegraph.compile(lambda x, k: x * k, backend=be)
    with bytegraph.set_stance("eager_then_compile"):
        torch.testing.assert_close(f(torch.ones(3), 2), torch.full((3,), 2.0))
        assert be.count == 0
        for n in (4, 5, 6):   # the first two calls differ in x's size and k: one dynamic entry serves all
            torch.testing.assert_close(f(torch.ones(n), n), torch.full((n,), float(n)))
    assert be.count == 1 and len(f._entries) == 1
    with pytest.raises(ValueError, match="force_backend"):
        bytegraph.set_stance("default", force_backend="eager")
    bytegraph.set_stance("default", skip_guard_eval_unsafe=True)   # accepted: every guard is still checked


def test_torch_reset_resets_bytegraph_and_dynamo_imported_later_is_followed():
    # torch._dynamo is imported only after bytegraph here (a fresh process):
    # its reset and set_stance are followed from then on
    program = textwrap.dedent("""
        import sys, torch, bytegraph
        assert "torch._dynamo" not in sys.modules
        graphs = []
        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        f = bytegraph.compile(lambda x: x + 1, backend=backend)
        x = torch.ones(2)
        f(x)
        torch.compiler.reset()
        f(x)
        import torch._dynamo
        torch._dynamo.reset()
        f(x)
        with torch._dynamo.set_stance("force_eager"):
            f(torch.ones(3, 3))
        print("GRAPHS", len(graphs), bytegraph.stats().graphs)
    """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "GRAPHS 3 1" in proc.stdout, proc.stdout


def test_compile_module_in_place():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    expected_keys = list(model.state_dict())
    be = CountingBackend()
    assert bytegraph.compile_module(model, backend=be) is model
    model.register_forward_hook(lambda mod, args, out: out * 2)
    x = torch.randn(2, 3)
    out = model(x)
    torch.testing.assert_close(out, torch.relu(model[0](x)) * 2)
    assert be.count == 1 and isinstance(model, torch.nn.Sequential)
    assert list(model.state_dict()) == expected_keys
    model(x)
    assert be.count == 1   # cached
    be2 = CountingBackend()
    bytegraph.compile_module(model, backend=be2)   # again: the new settings
    model(x)
    assert be2.count == 1
    copy = __import__("copy").deepcopy(model)   # (as with module.compile(): a copy is not compiled)
    torch.testing.assert_close(copy(x), out)
    assert be2.count == 1 and be.count == 1
    with pytest.raises(TypeError, match="expects an nn.Module"):
        bytegraph.compile_module(lambda x: x)


def test_compiled_module_wrapper_acts_on_the_original():
    lin = torch.nn.Linear(3, 3)
    be = CountingBackend()
    cm = bytegraph.compile(lin, backend=be)
    x = torch.randn(2, 3)
    cm(x)
    calls = []
    handle = cm.register_forward_hook(lambda mod, args, out: calls.append("fwd"))
    cm.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    torch.testing.assert_close(cm(x), lin(x))   # hooks registered through the wrapper run, compiled or not
    assert calls == ["pre", "fwd", "pre", "fwd"]
    handle.remove()
    visited = []
    assert cm.apply(lambda m: visited.append(type(m).__name__)) is cm
    assert visited == ["Linear"]
    cm.register_buffer("scale", torch.ones(1))
    assert "scale" in dict(lin.named_buffers()) and "scale" in cm.state_dict()
    # a checkpoint saved from torch.compile's wrapper ("_orig_mod." keys) loads
    saved = {f"_orig_mod.{k}": v.clone() + 1 for k, v in lin.state_dict().items()}
    cm.load_state_dict(saved)
    torch.testing.assert_close(lin.weight, saved["_orig_mod.weight"])

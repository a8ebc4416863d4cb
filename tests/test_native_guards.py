"""The native tensor checks (bytegraph.native) answer exactly like the Python
guard conditions they replace, and bytegraph works the same without them."""

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bytegraph
from bytegraph import config, native
from bytegraph.guard_compiler import compile_guards
from bytegraph.guards import Guard, GuardSet
from bytegraph.sources import LocalSource
from conftest import CountingBackend

needs_native = pytest.mark.skipif(native.load() is None, reason=f"native guard checks {native.status()}")


@pytest.fixture
def guard_mode(native_mode):
    """Run a test with the native tensor checks and with the pure-Python conditions."""
    return native_mode


def test_make_builds_the_native_checks():
    # `make test` exports BYTEGRAPH_EXPECT_NATIVE=1 after building the module, so a
    # broken build fails CI instead of silently measuring the slower fallback.
    if os.environ.get("BYTEGRAPH_EXPECT_NATIVE") != "1":
        pytest.skip("not run through make")
    assert native.load() is not None, native.status()
    assert native.status() == "on"


def _guard_pair(example_tensors, dynamic_dims):
    """The compiled guard for ``def f(a0, a1, ...)`` holding ``example_tensors``, native and Python."""
    names = [f"a{i}" for i in range(len(example_tensors))]
    ns = {}
    exec(f"def f({', '.join(names)}): pass", ns)
    guards = GuardSet()
    for name, t, dyn in zip(names, example_tensors, dynamic_dims):
        guards.add(Guard.tensor(LocalSource(name), t, dyn))
    out = {}
    for mode in (True, False):
        config.native_guards = mode
        out[mode] = compile_guards(guards, ns["f"], {})
    config.native_guards = True
    return out[True], out[False]


DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool, torch.float16]


@st.composite
def tensors(draw):
    """A tensor with a random dtype, shape, layout (contiguous, transposed,
    sliced, expanded), requires_grad and type (Tensor or Parameter)."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 3), min_size=0, max_size=3))
    t = torch.zeros(shape, dtype=dtype)
    how = draw(st.sampled_from(["plain", "t", "slice", "expand", "unsqueeze"]))
    if how == "t" and t.dim() >= 2:
        t = t.transpose(0, 1)
    elif how == "slice" and t.dim() >= 1 and t.shape[-1] > 0:
        t = t[..., ::2]
    elif how == "expand":
        t = t.unsqueeze(0).expand(2, *t.shape)
    elif how == "unsqueeze":
        t = t.unsqueeze(-1)
    if dtype.is_floating_point and draw(st.booleans()):
        if draw(st.booleans()):
            return torch.nn.Parameter(t.clone())
        t = t.clone().requires_grad_(True)
    return t


candidates = st.one_of(tensors(), st.sampled_from([None, 3, 2.5, "x", [torch.zeros(2)]]))


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(tensors(), min_size=1, max_size=4), st.data())
def test_native_check_agrees_with_python_conditions(examples, data):
    dynamic = [frozenset(data.draw(st.sets(st.integers(0, max(t.dim() - 1, 0)), max_size=2)))
               if t.dim() and data.draw(st.booleans()) else frozenset() for t in examples]
    fast, slow = _guard_pair(examples, dynamic)
    assert "TensorCheck" not in slow.source
    assert fast.check(*examples) and slow.check(*examples)
    for _ in range(6):
        args = [data.draw(st.one_of(st.just(t), candidates)) for t in examples]
        assert fast.check(*args) == slow.check(*args), (
            [(type(a).__name__, getattr(a, "dtype", None), getattr(a, "shape", None),
              a.stride() if isinstance(a, torch.Tensor) else None) for a in args], slow.source)


@needs_native
@pytest.mark.parametrize("n", [2, 16, 17, 64])
def test_distinct_agrees_with_python(n):
    m = native.load()
    objs = [object() for _ in range(n)]
    assert m.distinct(*objs)
    for i, j in {(0, 1), (0, n - 1), (n // 2 - 1, n - 1)}:
        dup = list(objs)
        dup[j] = dup[i]
        assert not m.distinct(*dup)
    assert m.distinct()


@needs_native
def test_spec_errors_are_type_errors():
    m = native.load()
    with pytest.raises(TypeError):
        m.TensorCheck([(torch.Tensor, "float", torch.device("cpu"), (1,), None, False)])
    chk = m.TensorCheck([(torch.Tensor, torch.float32, torch.device("cpu"), (1,), None, False)])
    with pytest.raises(TypeError):
        chk.check()
    assert chk.count() == 1


def test_sparse_and_wrong_layout_inputs_fail_the_check(guard_mode):
    fast, slow = _guard_pair([torch.zeros(2, 3)], [frozenset()])
    guard = fast if guard_mode == "native" else slow
    assert not guard.check(torch.zeros(2, 3).to_sparse())
    assert not guard.check(torch.zeros(2, 3, 1)[..., 0].t().contiguous().t())  # right shape, strides (1, 2)
    assert guard.check(torch.zeros(2, 3))


@pytest.mark.parametrize("change", ["dtype", "shape", "stride", "requires_grad", "type", "alias"])
def test_end_to_end_guards_in_both_modes(guard_mode, change):
    be = CountingBackend()

    def f(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        xs[2].mul_(1)  # a mutation: the graph also needs its inputs distinct
        return out * 2

    cf = bytegraph.compile(f, backend=be)
    xs = [torch.randn(3, 4) for _ in range(20)]
    assert torch.equal(cf(*xs), f(*xs))
    assert torch.equal(cf(*[x.clone() for x in xs]), f(*xs))
    assert be.count == 1
    ys = list(xs)
    if change == "dtype":
        ys[7] = ys[7].double()
    elif change == "shape":
        ys[19] = torch.randn(1, 4)
    elif change == "stride":
        ys[3] = torch.randn(4, 3).t()
    elif change == "requires_grad":
        ys[11] = ys[11].clone().requires_grad_()
    elif change == "type":
        ys[5] = torch.nn.Parameter(ys[5].clone())
    elif change == "alias":
        ys[9] = ys[2]
    expected = f(*ys)
    got = cf(*ys)
    assert torch.allclose(got, expected) and got.dtype == expected.dtype
    assert be.count == 2
    assert got.requires_grad == expected.requires_grad


def test_broken_build_falls_back_to_python_conditions(tmp_path, monkeypatch):
    bogus = tmp_path / "_native.so"
    bogus.write_bytes(b"not a shared object")
    monkeypatch.setattr(native, "module_path", lambda: str(bogus))
    monkeypatch.setattr(config, "native_guards", True)
    native.reload()
    try:
        assert native.load() is None
        assert native.status().startswith("off (failed to load")
        be = CountingBackend()
        f = bytegraph.compile(lambda x: x + 1, backend=be)
        assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))
        assert be.count == 2
    finally:
        monkeypatch.undo()
        native.reload()


def test_disabled_native_checks_generate_python_conditions(monkeypatch):
    monkeypatch.setattr(config, "native_guards", False)
    assert native.load() is None
    assert native.status().startswith("off (bytegraph.config.native_guards")
    fast, slow = _guard_pair([torch.zeros(2)], [frozenset()])
    config.native_guards = False
    assert ".dtype is" in slow.source


_AUDIT_PROGRAM = r'''
import sys, torch, bytegraph
from bytegraph import native
assert native.load() is not None, native.status()

def make_act(scale):
    def act(x, k=2):
        return torch.relu(x) * scale * k
    return act

lin = torch.nn.Linear(4, 4)

def f(x, act):
    return act(lin(x)) + 1

act = make_act(2.0)
cf = bytegraph.compile(f, backend="eager")
x = torch.randn(3, 4)
for _ in range(3):
    cf(x, act)
events = []
sys.addaudithook(lambda event, args: events.append(event) if armed else None)
armed = True
out = cf(x, act)
armed = False
assert torch.allclose(out, f(x, act))
print(sorted(set(events)))
'''


@needs_native
def test_a_cached_call_raises_no_audit_events(tmp_path):
    # An audit hook (filelock installs one on 3.12+; transformers imports it)
    # runs on every audited operation: guards reading fn.__code__ or calling
    # id() paid ~0.25 us per read on every call (3x slower guards on 3.12).
    import subprocess
    import sys
    script = tmp_path / "audit.py"
    script.write_text(_AUDIT_PROGRAM)
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"

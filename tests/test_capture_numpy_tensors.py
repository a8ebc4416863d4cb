"""Capture breadth (issue #13): NumPy in model code on arrays computed from
tensors -- ``x.numpy()``, ``np.*`` functions, ndarray methods, operators and
attributes, ``torch.from_numpy`` back -- traced through ``torch._numpy``
(values/ndarrays.py).

Each test runs the function eagerly and compiled on equal inputs and compares
results (arrays by type, dtype, shape and values; NumPy scalars by type),
the inputs afterwards (writes through ``x.numpy()``) and memory sharing
between results and inputs; then it asserts what was captured.  Cases where
torch._numpy's semantics could differ from NumPy's must break, not differ.
"""

from __future__ import annotations

import copy

import pytest
import torch

import bytegraph
from conftest import CountingBackend

np = pytest.importorskip("numpy")

BACKENDS = ["eager", "aot_eager"]


@pytest.fixture
def fp_ignore():
    """NumPy ignoring floating-point errors: operations that may raise a flag
    (arithmetic on floats) are traced only then (NumPy warns by default)."""
    with np.errstate(all="ignore"):
        yield


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone().requires_grad_(obj.requires_grad)
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(o) for o in obj)
    return copy.copy(obj)


def _fresh(obj, gen):
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            return torch.randn(obj.shape, generator=gen).to(obj.dtype).requires_grad_(obj.requires_grad)
        return torch.randint(-5, 6, obj.shape, generator=gen).to(obj.dtype)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fresh(o, gen) for o in obj)
    return obj


def _equal(actual, expected, path="result"):
    assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
            f"{path}: {actual.dtype}{actual.shape} != {expected.dtype}{expected.shape}"
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=path)
    elif isinstance(expected, np.generic):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=path)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected)):
            _equal(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _buffers(obj, out):
    """Every array/tensor in ``obj``, as NumPy arrays (for memory sharing)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj.detach().numpy())
    elif isinstance(obj, np.ndarray):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _buffers(o, out)
    return out


def _sharing(obj):
    bufs = _buffers(obj, [])
    return [[np.shares_memory(a, b) for b in bufs] for a in bufs]


def _identity(obj):
    seen, out = {}, []

    def walk(o):
        if isinstance(o, (torch.Tensor, np.ndarray, list)):
            out.append(seen.setdefault(id(o), len(seen)))
        if isinstance(o, (list, tuple)):
            for x in o:
                walk(x)
    walk(obj)
    return out


def check(fn, *args, graphs=1, breaks=0, backend="eager", calls=2):
    """Eager vs compiled on equal inputs (call 1: clones, later: fresh values):
    results, inputs afterwards, memory sharing and identity; then the counts."""
    be = CountingBackend(backend)
    compiled = bytegraph.compile(fn, backend=be)
    gen = torch.Generator().manual_seed(7)
    out = None
    for call in range(calls):
        source = args if call == 0 else _fresh(args, gen)
        eager_in, comp_in = _clone(source), _clone(source)
        expected = fn(*eager_in)
        out = compiled(*comp_in)
        _equal(out, expected, f"call {call} result")
        _equal(comp_in, eager_in, f"call {call} inputs afterwards")
        assert _sharing((comp_in, out)) == _sharing((eager_in, expected)), f"call {call}: memory sharing differs"
        assert _identity((comp_in, out)) == _identity((eager_in, expected)), f"call {call}: identity differs"
    stats = bytegraph.stats()
    if graphs is not None:
        assert be.count == graphs, f"expected {graphs} graph(s), got {be.count}; {stats}"
        if graphs:
            assert stats.eager_fallbacks == 0, stats
    if breaks is not None:
        assert stats.graph_breaks == breaks, f"expected {breaks} break(s); {stats}"
    return out, be


def break_kinds(fn, *args):
    return [b.kind for b in bytegraph.explain(fn)(*args).break_reasons]


# ---------------------------------------------------------------------------
# the example, and what NumPy's error state decides


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_numpy_of_sin_plus_one_is_one_graph(fp_ignore, backend):
    def f(x):
        return torch.from_numpy(np.sin(x.numpy()) + 1)

    check(f, torch.randn(3, 4), backend=backend)


def test_float_arithmetic_breaks_where_numpy_would_warn():
    """np.sin(inf) and overflow warn in NumPy (by default): the operation
    cannot be traced without losing the warning, so it runs natively."""
    def f(x):
        return torch.from_numpy(np.sin(x.numpy()) + 1)

    assert "numpy_fp_errors" in break_kinds(f, torch.randn(3))
    bytegraph.reset()
    check(f, torch.randn(3), graphs=None, breaks=None)
    cf = bytegraph.compile(f, backend="eager")
    with pytest.warns(RuntimeWarning, match="invalid value"):
        cf(torch.tensor([float("inf"), 1.0]))


def test_error_state_is_guarded():
    def f(x):
        return torch.from_numpy(x.numpy() * 2)

    cf = bytegraph.compile(f, backend=CountingBackend())
    with np.errstate(all="ignore"):
        cf(torch.randn(3))
        assert bytegraph.stats().graph_breaks == 0
    with pytest.warns(RuntimeWarning, match="overflow"):
        out = cf(torch.tensor([3e38, 1.0]))
    assert torch.isinf(out[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_free_operations_trace_in_the_default_error_state(backend):
    """Moves, comparisons, selections and integer arithmetic raise no
    floating-point flag on any data: traced while NumPy warns."""
    def f(x, n):
        a = x.numpy()
        b = np.where(a > 0, a, -a)
        c = np.concatenate([b.T, np.abs(a).T], axis=0)[1:, ::2]
        m = n.numpy()
        return torch.from_numpy(c), np.maximum(b, a).max(axis=1), a.argmax(), (m + 3) * m - 1, m.sum(), -m

    check(f, torch.randn(3, 4), torch.randint(-5, 5, (4,)), backend=backend)


# ---------------------------------------------------------------------------
# dtypes: NumPy's promotion, not torch's


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_promotion_with_python_numbers(fp_ignore, dtype):
    """float32 array + Python float stays float32; int array + float is float64."""
    def f(x):
        a = x.numpy()
        return a + 1, a * 2.5, a - True, 3 - a, a.mean(), np.sqrt(np.abs(a)), a > 0.5

    x = torch.randint(-5, 5, (3, 4)).to(dtype)
    _, be = check(f, x)
    assert be.count == 1


def test_promotion_between_arrays(fp_ignore):
    def f(x, y, n):
        a, b, m = x.numpy(), y.numpy(), n.numpy()
        return a + b, a * m, m + m, a @ b.T, np.dot(a, b.T)

    check(f, torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64), torch.randint(0, 5, (3, 4)))


def test_integer_true_division_is_float64(fp_ignore):
    """NumPy divides ints in float64 (torch._numpy in torch's default dtype):
    the arrays are cast to NumPy's result type first."""
    def f(n, k):
        m = n.numpy()
        return m / 2, m / k.numpy(), 7 / m, np.sqrt(m), np.sin(k.numpy())

    check(f, torch.randint(1, 5, (4,)), torch.randint(1, 5, (4,), dtype=torch.int8))


def test_results_torch_numpy_types_differently_break(fp_ignore):
    """np.square of bools is int8 in NumPy, cumsum of int32 is int64: where
    torch._numpy's dtype differs the operation breaks (never a wrong dtype)."""
    def f(b, n):
        return np.square(b.numpy()), n.numpy().cumsum()

    check(f, torch.rand(4) > 0.5, torch.randint(0, 5, (4,), dtype=torch.int32), graphs=None, breaks=None)
    kinds = break_kinds(f, torch.rand(4) > 0.5, torch.randint(0, 5, (4,), dtype=torch.int32))
    assert kinds and set(kinds) <= {"numpy", "unsupported_operator", "unsupported_graph_arg", "numpy_fp_errors"}
    assert kinds[0] == "numpy"


def test_numpy_value_errors_are_the_programs():
    """NEP 50: a Python int out of an int8 array's range raises OverflowError."""
    def f(n):
        try:
            return n.numpy() + 1000
        except OverflowError as e:
            return n + 1, str(e)

    check(f, torch.randint(0, 5, (4,), dtype=torch.int8))


def test_numpy_scalar_constants_are_strongly_typed(fp_ignore):
    """NEP 50: a float32 array times np.float64(2) is float64."""
    k = np.float64(2.0)

    def f(x):
        a = x.numpy()
        return a * k, a + np.float32(1.5)

    check(f, torch.randn(4))


def test_astype(fp_ignore):
    def f(x, n):
        a = x.numpy()
        return a.astype(np.float64), a.astype("float16"), n.numpy().astype(np.float32)

    check(f, torch.randn(4), torch.randint(0, 9, (4,)))


def test_astype_float_to_int_breaks():
    def f(x):
        return x.numpy().astype(np.int64)

    check(f, torch.randn(4) * 10, graphs=None, breaks=None)
    assert "numpy" in break_kinds(f, torch.randn(4))


@pytest.mark.parametrize("k", [3, -3])
def test_integer_floor_division_by_a_constant(k):
    def f(n):
        m = n.numpy()
        return m // k, m % k, m ** 2

    check(f, torch.randint(-9, 9, (6,)))


def test_integer_division_by_an_array_breaks():
    """NumPy gives 0 (with a warning) for n // 0 where torch raises."""
    def f(n, d):
        return n.numpy() // d.numpy()

    check(f, torch.randint(-9, 9, (6,)), torch.randint(1, 3, (6,)), graphs=None, breaks=None)
    assert "numpy" in break_kinds(f, torch.randint(-9, 9, (6,)), torch.randint(1, 3, (6,)))


# ---------------------------------------------------------------------------
# memory: x.numpy() is x's memory


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_into_arrays_the_trace_made(backend):
    def f(x, n):
        a = x.numpy().copy()
        a[0] = 5
        a[1:, 0] = -1.5
        m = n.numpy() * 1
        m += 2
        m *= 3
        return a, m, torch.from_numpy(m), x + 1

    check(f, torch.randn(3, 4), torch.randint(0, 5, (4,)), backend=backend)


def test_writes_into_a_tensors_memory_break():
    """``x.numpy()`` is x's memory, but NumPy's writes do not bump x's version
    counter (the graph's in-place ops would): they run natively, and reach x."""
    def f(x, n):
        a = x.numpy()
        a[0] = 5
        m = n.numpy()
        m += 2
        return x.sum(), n + 1

    check(f, torch.randn(3, 4), torch.randint(0, 5, (4,)), graphs=None, breaks=None)
    assert "numpy_write" in break_kinds(f, torch.randn(3, 4), torch.randint(0, 5, (4,)))


def test_write_through_numpy_keeps_eagers_autograd_behaviour(fp_ignore):
    """Eager autograd does not see a NumPy write into a saved tensor: the
    backward runs (on the new values).  The compiled function must not
    refuse it."""
    def f(x, w):
        y = w * x
        a = x.numpy()
        a *= 2
        return y

    w = torch.randn(3, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    x = torch.randn(3)
    xc, xe = x.clone(), x.clone()
    bytegraph.compile(f, backend="eager")(xc, w).sum().backward()
    f(xe, w2).sum().backward()
    torch.testing.assert_close(xc, xe)
    torch.testing.assert_close(w.grad, w2.grad)


def test_writes_after_sharing_with_a_tensor_break():
    def f(x):
        b = np.abs(x.numpy())
        t = torch.from_numpy(b)
        b += 1
        return t

    check(f, torch.randn(3), graphs=None, breaks=None)
    assert "numpy_write" in break_kinds(f, torch.randn(3))


def test_from_numpy_of_a_tensors_memory_breaks():
    """torch.from_numpy(x.numpy()) has its own version counter in eager; a
    view of x in the graph would share x's."""
    def f(x):
        return torch.from_numpy(x.numpy()).add_(1)

    check(f, torch.randn(3), graphs=None, breaks=None)
    assert "numpy" in break_kinds(f, torch.randn(3))


def test_in_place_float_operator(fp_ignore):
    def f(x):
        a = x.numpy() * 1
        a += 1
        a /= 2
        return a, x * 2

    check(f, torch.randn(3, 4))


def test_out_argument_breaks():
    def f(x):
        a = x.numpy()
        np.negative(a, out=a)
        return x + 1

    check(f, torch.randn(3), graphs=None, breaks=None)


def test_in_place_float_into_int_array_breaks():
    def f(n):
        a = n.numpy()
        a[0] = 2.7
        return n + 1

    check(f, torch.randint(0, 5, (4,)), graphs=None, breaks=None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_and_copies_follow_numpy(backend):
    """ravel() of a contiguous array and a[0] are views (writes reach x);
    flatten() and a scalar a[0, 0] are copies."""
    def f(x):
        a = x.numpy().copy()
        v = a.ravel()
        c = a.flatten()
        s = a[0, 0]
        r = a[1]
        v[0] = 100
        c[1] = -100
        r[2] = 7
        a[0, 0] = 3
        return s, c, a, x.clone()

    check(f, torch.randn(3, 4), backend=backend)


def test_numpy_of_tensor_requiring_grad_raises():
    def f(x):
        try:
            x.numpy()
        except RuntimeError as e:
            return x * 2, str(e)
        return x, ""

    cf = bytegraph.compile(f, backend=CountingBackend())
    x = torch.randn(3, requires_grad=True)
    out, msg = cf(x)
    assert msg == f(x)[1] and "requires grad" in msg
    assert bytegraph.stats().graph_breaks == 0


# ---------------------------------------------------------------------------
# arrays that leave the function


@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_array_shares_the_input_tensors_memory(backend):
    def f(x):
        a = x.numpy()
        return a, a.T, a[1:], a.shape, a.dtype, a.ndim, a.size

    out, _ = check(f, torch.randn(3, 4), backend=backend)
    x = torch.randn(3, 4)
    a = bytegraph.compile(f, backend="eager")(x)[0]
    assert type(a) is np.ndarray and np.shares_memory(a, x.numpy())
    x.add_(1)
    np.testing.assert_array_equal(a, x.numpy())


STORE = {}


def test_array_stored_in_container_attribute_and_global():
    class Box:
        pass

    def f(x, box, items):
        a = x.numpy()
        b = np.abs(a)
        items.append(b)
        box.arr = a[0]
        STORE["arr"] = b.T
        return x + 1

    cf = bytegraph.compile(f, backend=CountingBackend())
    x, box, items = torch.randn(3, 4), Box(), []
    out = cf(x, box, items)
    torch.testing.assert_close(out, x + 1)
    assert type(items[0]) is np.ndarray and items[0].dtype == np.float32
    np.testing.assert_array_equal(items[0], np.abs(x.numpy()))
    assert np.shares_memory(box.arr, x.numpy())
    np.testing.assert_array_equal(STORE["arr"], np.abs(x.numpy()).T)
    assert bytegraph.stats().graph_breaks == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_numpy_and_as_tensor_share_memory(backend):
    def f(x):
        a = np.abs(x.numpy())
        t = torch.from_numpy(a)
        u = torch.as_tensor(a)
        t[0] = 9
        return t, u, a, x, torch.as_tensor(a, dtype=torch.float64)

    out, _ = check(f, torch.randn(4), backend=backend)
    assert out[0] is not out[2]


def test_from_numpy_of_a_numpy_scalar_raises_like_eager():
    def f(x):
        try:
            torch.from_numpy(x.numpy().max())
        except TypeError as e:
            return x, str(e)
        return x, ""

    check(f, torch.randn(4))


# ---------------------------------------------------------------------------
# NumPy scalars and Python numbers


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_return_numpy_scalars(fp_ignore, backend):
    def f(x, n):
        a = x.numpy()
        s = a.sum()
        return s, type(s) is np.float32, s * 2, n.numpy().max(), a[0, 1], a.sum(axis=0, keepdims=True)

    check(f, torch.randn(3, 4), torch.randint(0, 9, (3,)), backend=backend)


def test_python_numbers_from_arrays_are_data_dependent():
    def f(x):
        return x + float(x.numpy().max())

    check(f, torch.randn(3), graphs=None, breaks=None)
    assert "data_dependent" in break_kinds(f, torch.randn(3))


@pytest.fixture
def capture_scalars():
    saved = bytegraph.config.capture_scalar_outputs
    bytegraph.config.capture_scalar_outputs = True
    yield
    bytegraph.config.capture_scalar_outputs = saved


def test_python_numbers_from_arrays_under_capture_scalar_outputs(capture_scalars):
    def f(x):
        a = x.numpy()
        return x + float(a.max()) + a[1].item() + int(a.argmax())

    check(f, torch.randn(4))


def test_branch_on_an_array_breaks():
    def f(x):
        if (x.numpy() > 0).any():
            return x + 1
        return x - 1

    check(f, torch.randn(3), graphs=None, breaks=None)


# ---------------------------------------------------------------------------
# arrays as inputs keep their behaviour


def test_ndarray_argument_does_not_recompile_every_call():
    def f(x, a):
        return x + 1, a

    cf = bytegraph.compile(f, backend=CountingBackend())
    for _ in range(3):
        a = np.ones(3)
        out = cf(torch.ones(3), a)
        assert out[1] is a
    assert bytegraph.stats().recompiles == 0


def test_augmented_assignment_on_a_numpy_scalar_makes_a_new_one(fp_ignore):
    def f(x):
        a = x.numpy().copy()
        s = a[0]
        t = s
        s += 1
        a[1] *= 2
        return s, t, a, x.clone()

    check(f, torch.randn(3))


def test_len_and_iteration(fp_ignore):
    def f(x):
        a = x.numpy()
        return len(a), len(a[0]), a.size, a.nbytes, a.itemsize, x + 1

    check(f, torch.randn(3, 2))


def test_asarray_and_array_of_a_traced_array():
    def f(x):
        a = np.abs(x.numpy())
        b = np.asarray(a)
        c = np.array(a)
        c[0] = 10
        b[1] = -10
        return b is a, c, a, x.clone()

    check(f, torch.randn(3))


def test_asarray_of_a_tensor_breaks():
    """NumPy 2 warns (DeprecationWarning) converting a tensor via __array__."""
    def f(x):
        return np.asarray(x)

    assert break_kinds(f, torch.randn(3)) == ["numpy"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_operators_methods_and_functions(fp_ignore, backend):
    def f(x, n):
        a, m = x.numpy(), n.numpy()
        return (abs(a), -a, +a, ~m, a ** 2, m ** 3, m & 3, m | m, m ^ 1, a != 0, 1 < a, a.clip(0, 1),
                np.clip(a, -1, 1), a.std(axis=0), a.var(), np.mean(a, axis=1), a.all(), m.any(), a.prod(),
                np.stack([a, a]).shape, np.squeeze(a[None]), np.expand_dims(a, 0), a.swapaxes(0, 1),
                np.transpose(a), np.maximum(a, 0.5), np.where(m > 0, m, 0), np.zeros_like(a), np.ones_like(m),
                a[..., None], a[None, :, 1], a[:, -1], np.log1p(np.abs(a)), np.arctan2(a, a + 1), np.hypot(a, a),
                m // 2, m % 4, np.floor_divide(m, 3))

    check(f, torch.randn(3, 4), torch.randint(-5, 5, (3, 4)), backend=backend)


def test_integer_division_by_minus_one_breaks():
    """INT_MIN // -1 overflows: NumPy warns, torch may trap."""
    def f(n):
        return n.numpy() // -1

    assert "numpy" in break_kinds(f, torch.randint(-5, 5, (4,)))


def test_graph_break_with_a_live_array(fp_ignore):
    """An array alive across a break is rebuilt from the graph's output (its
    memory still the tensor's)."""
    def f(x):
        a = x.numpy().copy()
        b = a * 2
        print("break")
        a[0] = 7
        return b, x.clone(), a

    out, _ = check(f, torch.randn(3), graphs=None, breaks=None)


def test_graph_break_with_a_live_view_of_a_tensor():
    def f(x):
        a = x.numpy()
        b = a.T
        print("break")
        b[0] = 7
        return x.clone(), a

    check(f, torch.randn(3), graphs=None, breaks=None)


def test_sign_of_floats_breaks_but_of_integers_traces():
    """np.sign(nan) is nan; torch.sign(nan) is 0."""
    def f(x):
        return np.sign(x.numpy())

    assert "numpy" in break_kinds(f, torch.tensor([float("nan"), 1.0]))
    bytegraph.reset()
    check(f, torch.tensor([float("nan"), -1.0, 0.0]), graphs=None, breaks=None)
    bytegraph.reset()
    check(f, torch.randint(-3, 3, (5,)))


def test_numpy_argument_errors_are_the_programs():
    def f(x):
        a = x.numpy()
        try:
            a.astype("no such type")
        except TypeError as e:
            msg = str(e)
        try:
            a.reshape(7)
        except ValueError as e:
            msg += str(e)
        try:
            a[5]
        except IndexError as e:
            msg += str(e)
        return x + 1, msg

    check(f, torch.randn(3))


def test_torch_tensor_of_an_array_copies(fp_ignore):
    def f(x):
        a = x.numpy()
        t = torch.tensor(a)
        t[0] = 5
        return t, torch.tensor(a.sum()), torch.tensor(a * 2, dtype=torch.float64), x

    check(f, torch.randn(3))


def test_numpy_force_of_a_tensor_requiring_grad(fp_ignore):
    def f(w):
        a = w.numpy(force=True)
        return torch.from_numpy(a * 2), a.shape

    check(f, torch.randn(3, requires_grad=True))

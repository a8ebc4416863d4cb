"""Dynamic shapes (issue 6): no recompile storms."""

import logging

import pytest
import torch
import torch.nn.functional as F

import bytegraph
from conftest import CountingBackend
from examples.demo_model import build as build_demo


def test_transformer_with_twenty_sequence_lengths_compiles_at_most_twice():
    model_fn, params, _ = build_demo()
    be = CountingBackend()
    compiled = bytegraph.compile(model_fn, backend=be)
    for seq in range(5, 25):
        x = torch.randn(2, seq, 64, generator=torch.Generator().manual_seed(seq))
        torch.testing.assert_close(compiled(params, x), model_fn(params, x), rtol=1e-4, atol=1e-5)
    assert bytegraph.stats().frames_compiled <= 2
    assert be.count <= 2


def test_branch_on_dynamic_size_takes_both_sides():
    def f(x):
        if x.shape[0] > 4:
            return x.sum(0) * 2
        return x.sum(0) - 1

    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    for n in [3, 5, 2, 6, 7, 3, 9, 4]:
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), f(x))
    # static first entry, then one symbolic entry for each side of the branch
    assert len(cf._entries) == 3
    guards = "\n".join(cf._entries[-1].guard.describe())
    assert "x.size()[0]" in guards


def test_sizes_flow_through_python_arithmetic_views_and_returns():
    def f(x, y):
        b, t = x.shape[0], x.size(1)
        n = b * t
        flat = x.reshape(n, -1) + y.view(1, -1)
        idx = torch.arange(t)
        return flat[: n // 2], idx, n, x.shape, len(x)

    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be)
    y = torch.randn(4)
    for b, t in [(2, 3), (3, 5), (4, 6), (5, 2)]:
        x = torch.randn(b, t, 4)
        got, expected = cf(x, y), f(x, y)
        for g, e in zip(got, expected):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(g, e)
            else:
                assert g == e and type(g) is type(e)
    assert len(cf._entries) == 2


def test_int_counter_argument_does_not_exhaust_the_cache():
    def step(x, i):
        return x * i + i // 2

    be = CountingBackend()
    cf = bytegraph.compile(step, backend=be)
    x = torch.ones(3)
    for i in range(50):
        torch.testing.assert_close(cf(x, i), step(x, i))
    assert len(cf._entries) == 2 and be.count == 2


def test_dynamic_true_and_false_and_marks():
    be = CountingBackend()
    cf = bytegraph.compile(lambda x: x.cos() * x.shape[0], backend=be, dynamic=True)
    for n in (2, 3, 4):
        cf(torch.randn(n))
    assert be.count == 1

    be2 = CountingBackend()
    cf2 = bytegraph.compile(lambda x: x.cos(), backend=be2, dynamic=False)
    for n in (2, 3, 4):
        cf2(torch.randn(n))
    assert be2.count == 3

    be3 = CountingBackend()
    cf3 = bytegraph.compile(lambda x: x.sin(), backend=be3)
    for n in (2, 3, 4):
        x = torch.randn(n, 5)
        bytegraph.mark_dynamic(x, 0)
        cf3(x)
    assert be3.count == 1

    be4 = CountingBackend()
    cf4 = bytegraph.compile(lambda x: x.sin(), backend=be4)
    for n in (2, 3, 4):
        x = torch.randn(n)
        bytegraph.mark_static(x, 0)
        cf4(x)
    assert be4.count == 3


def test_recompile_log_names_guard_input_and_old_and_new_values():
    from conftest import captured_logs
    with captured_logs("recompiles") as messages:
        cf = bytegraph.compile(lambda x, k: x * k, backend="eager")
        cf(torch.ones(2), 3)
        cf(torch.ones(5), 3)
        cf(torch.ones(5), 4)
    text = "\n".join(messages)
    assert "entry 0: guard failed: x: Tensor" in text and "shape=[2]" in text and "size of dim 0 2 → 5" in text
    assert "now dynamic: dims {'x': [0]}" in text
    assert "entry 0: guard failed: k == 3 (3 → 4)" in text and "entry 1: guard failed: k == 3 (3 → 4)" in text
    assert "ints ['k']" in text


def test_zero_one_specialization_is_explained_in_the_guards():
    report = bytegraph.explain(lambda x: x + 1, dynamic=True)(torch.ones(3))
    assert any(g.startswith("shape:") and "2 <= x.size()[0]" in g for g in report.guards)
    cf = bytegraph.compile(lambda x: x + 1, backend="eager", dynamic=True)
    cf(torch.ones(3))
    cf(torch.ones(1))  # size 1 is specialized: a second entry
    assert len(cf._entries) == 2


@pytest.mark.models
@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_real_models_with_varying_sequence_length_and_batch(name):
    from test_real_models import build
    model, (ids,) = build(name)
    model.eval()
    be = CountingBackend()
    compiled = bytegraph.compile(model, backend=be)
    with torch.no_grad():
        for batch, seq in [(2, 8), (2, 12), (3, 12), (1, 9), (2, 16), (4, 5)]:
            x = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
            torch.testing.assert_close(compiled(x)[0], model(x)[0], rtol=1e-4, atol=1e-5)
    assert len(compiled._bg_call._entries) <= 4
    assert bytegraph.stats().graph_breaks == 0 and bytegraph.stats().frames_compiled <= 4


def test_int_arguments_of_a_compiled_module_become_symbolic():
    class Scale(torch.nn.Module):
        def forward(self, x, k):
            return x * k

    compiled = bytegraph.compile(Scale(), backend=CountingBackend())
    for k in range(8):
        torch.testing.assert_close(compiled(torch.ones(2), k), torch.full((2,), float(k)))
    assert len(compiled._bg_call._entries) == 2


@pytest.mark.models
@pytest.mark.parametrize("name", ["resnet", "vit"])
def test_vision_models_with_varying_batch(name):
    from test_real_models import build
    model, _ = build(name)
    model.eval()
    be = CountingBackend()
    compiled = bytegraph.compile(model, backend=be)
    with torch.no_grad():
        for batch in [2, 3, 5, 1, 4, 6]:
            x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(batch))
            torch.testing.assert_close(compiled(x)[0], model(x)[0], rtol=1e-4, atol=1e-4)
    assert len(compiled._bg_call._entries) <= 4
    assert bytegraph.stats().graph_breaks == 0

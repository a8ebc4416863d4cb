"""Modules made anew on every call are guarded by structure, not identity.

A module built inside the compiled function (``nn.Linear(...)`` in forward,
which runs natively and is handed to the continuation after it), or a model
rebuilt for every call, used to make a new entry on every call: the entry was
specialized to the module's identity and its parameters', and died with
them.  Once such a module dies, its place (its source) is marked fresh
(``DynamicPolicy.fresh_modules``): later compiles guard the module by type
and the keys of its parameter, buffer and submodule dicts, and its tensors as
tensors.  Differential against eager, with the RNG seeded alike.
"""

from __future__ import annotations

import torch
from torch import nn

import bytegraph
from bytegraph import config

from conftest import CountingBackend


def _same_params(ma: nn.Module, mb: nn.Module) -> None:
    assert type(ma) is type(mb)
    pa, pb = dict(ma.named_parameters()), dict(mb.named_parameters())
    assert list(pa) == list(pb)
    for name in pa:
        assert type(pa[name]) is type(pb[name]) and pa[name].requires_grad == pb[name].requires_grad
        assert torch.equal(pa[name], pb[name]), name
        if pa[name].grad is not None or pb[name].grad is not None:
            assert torch.allclose(pa[name].grad, pb[name].grad), name
    for (na, a), (nb, b) in zip(ma.named_buffers(), mb.named_buffers()):
        assert na == nb and torch.equal(a, b)


def _run(fn, calls, backend):
    compiled = bytegraph.compile(fn, backend=backend)
    for i, args in enumerate(calls):
        torch.manual_seed(i)
        want, want_mod = fn(*args)
        torch.manual_seed(i)
        got, got_mod = compiled(*args)
        assert torch.equal(want, got)
        assert got_mod is not want_mod
        want.sum().backward()
        got.sum().backward()
        _same_params(want_mod, got_mod)


def test_linear_built_in_forward_compiles_twice_not_per_call(capsys):
    config.raise_on_error = True

    def f(x):
        lin = nn.Linear(4, 3)       # runs natively (makes parameters): a break
        print("built")
        return torch.relu(lin(x)), lin

    backend = CountingBackend()
    _run(f, [(torch.randn(2, 4),) for _ in range(6)], backend)
    # the continuation's first entry is specialized to the first module; the
    # second call's module is another Linear there: one structural entry
    # (per continuation) then serves every later call
    assert backend.count == 2
    assert bytegraph.stats().recompiles <= 2
    assert capsys.readouterr().out.count("built") == 12


def test_model_rebuilt_every_call_recompiles_once():
    def f(model, x):
        return model(x) * 2, model

    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    for i in range(5):
        torch.manual_seed(i)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        x = torch.randn(3, 4)
        want, _ = f(model, x)
        got, same = compiled(model, x)
        assert same is model and torch.equal(want, got)
        del model, same
    assert backend.count == 2


class _Scaled(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.k = k
        self.w = nn.Parameter(torch.full((n,), float(k)))
        if k % 2:
            self.register_buffer("b", torch.arange(n, dtype=torch.float32))
        self.sub = nn.Identity() if k % 3 else nn.ReLU()

    def forward(self, x):
        y = self.sub(x * self.w * self.k)
        if hasattr(self, "b"):
            y = y + self.b
        return y


def test_structure_attributes_and_submodules_of_fresh_modules_are_guarded():
    def f(x, k):
        m = _Scaled(k, x.shape[-1])
        print("made")
        return m(x), m

    calls = [(torch.randn(2, 4), k) for k in (1, 2, 3, 4, 5, 6, 7, 1, 2, 6)]
    _run(f, calls, CountingBackend())


def test_linear_with_and_without_bias_and_other_sizes():
    def g(x, bias):
        lin = nn.Linear(x.shape[-1], 3, bias=bias)
        print("made")
        return lin(x), lin

    calls = [(torch.randn(2, n), b) for n, b in ((4, True), (4, False), (4, True), (5, True), (5, False), (4, False))]
    _run(g, calls, CountingBackend())


class _Tied(nn.Module):
    def __init__(self, tie: bool):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        if tie:
            self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_tied_and_untied_weights_of_fresh_modules():
    def f(x, tie):
        m = _Tied(tie)
        print("made")
        return m(x), m

    calls = [(torch.randn(2, 4), t) for t in (True, False, True, False, False, True)]
    _run(f, calls, CountingBackend())


def test_in_place_update_of_a_fresh_module_parameter_lands_on_that_module():
    def f(x):
        m = nn.Linear(4, 4)
        print("made")
        with torch.no_grad():
            m.weight.mul_(2)
        return m(x), m

    calls = [(torch.randn(2, 4),) for _ in range(4)]
    _run(f, calls, CountingBackend())


def test_a_long_lived_model_keeps_identity_guards():
    # nothing died: the model's parameters stay identity-checked (cheap), and
    # replacing one recompiles
    model = nn.Linear(4, 2)
    backend = CountingBackend()
    compiled = bytegraph.compile(lambda m, x: m(x), backend=backend)
    x = torch.randn(3, 4)
    for _ in range(3):
        assert torch.equal(compiled(model, x), model(x))
    assert backend.count == 1
    model.weight = nn.Parameter(torch.randn(2, 4))
    assert torch.equal(compiled(model, x), model(x))
    assert backend.count == 2


class _Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 1.0

    def forward(self, x):
        y = self.lin(x)
        return y * self.scale if self.training else y - self.scale


def test_training_flag_and_float_attributes_of_fresh_modules():
    def f(x, train, scale):
        m = _Gate()
        m.train(train)
        m.scale = scale
        print("made")
        return m(x), m

    calls = [(torch.randn(2, 4), t, s) for t, s in ((True, 1.0), (False, 1.0), (True, 2.5), (False, 0.5),
                                                     (True, 1.0), (False, 2.5))]
    _run(f, calls, CountingBackend())

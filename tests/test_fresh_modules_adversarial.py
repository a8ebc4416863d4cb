"""Adversarial differential tests for modules guarded by structure
(``DynamicPolicy.fresh_modules``): once a place is fresh its module is
guarded by type and dict keys, not identity, so anything the trace assumed
from identity must be guarded some other way."""

from __future__ import annotations

import torch
from torch import nn

import bytegraph

from conftest import CountingBackend


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 1.0


_GLOBAL_SCALED = _Scaled()


def test_fresh_module_that_is_an_identity_guarded_global_module():
    # the trace writes through ``m`` and reads the global module: a later
    # call passing that very global module as ``m`` must not reuse a trace
    # made with two distinct modules
    def f(m, x):
        m.scale = 3.0
        return x * _GLOBAL_SCALED.scale

    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    keep = []
    for arg in (_Scaled(), _Scaled(), _Scaled(), _GLOBAL_SCALED, _Scaled(), _GLOBAL_SCALED):
        keep.append(arg)
        _GLOBAL_SCALED.scale = 1.0
        x = torch.ones(2)
        want = x * (3.0 if arg is _GLOBAL_SCALED else 1.0)
        got = compiled(arg, x)
        assert torch.equal(got, want)
        assert arg.scale == 3.0
    assert 2 <= backend.count <= 3
    assert bytegraph.stats().graph_breaks == 0


def test_instance_attribute_shadowing_a_parameter_of_a_fresh_module():
    # ``m.weight`` finds an instance ``__dict__`` entry before nn.Module's
    # __getattr__ reads ``_parameters``: the trace that read the parameter
    # holds only while no such entry is there
    def f(m, x):
        return m(x)

    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    for i in range(6):
        m = nn.Linear(4, 4)
        if i >= 3:
            m.__dict__["weight"] = torch.zeros(4, 4)
        x = torch.randn(2, 4)
        assert torch.equal(compiled(m, x), f(m, x))
    assert backend.count == 3
    assert bytegraph.stats().graph_breaks == 0


def test_instance_attribute_shadowing_a_parameter_of_a_long_lived_module():
    model = nn.Linear(4, 4)
    backend = CountingBackend()
    compiled = bytegraph.compile(lambda m, x: m(x), backend=backend)
    x = torch.randn(2, 4)
    assert torch.equal(compiled(model, x), model(x))
    model.__dict__["weight"] = torch.zeros(4, 4)   # (bypassing nn.Module.__setattr__)
    assert torch.equal(compiled(model, x), model(x))
    assert backend.count == 2


def test_freezing_a_parameter_of_an_identity_guarded_module_recompiles():
    # requires_grad_(False) keeps the parameter object: its identity guard
    # alone let the entry fold the old flag
    def f(m, x):
        return m(x), m.weight.requires_grad

    model = nn.Linear(4, 4)
    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    x = torch.randn(2, 4)
    for freeze in (False, True, False):
        model.weight.requires_grad_(not freeze)
        want, want_rg = f(model, x)
        got, got_rg = compiled(model, x)
        assert torch.equal(got, want) and got_rg == want_rg and got.requires_grad == want.requires_grad
    assert backend.count == 2


def test_model_converted_in_place_by_double_recompiles():
    # Module.double()/.to(dtype) assign each parameter's .data: same objects,
    # other dtype (and ``.data = t`` may change the shape too)
    def f(m):
        return m.weight * 2, m.weight.dtype, m.weight.shape

    model = nn.Linear(4, 4)
    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    for step in range(3):
        if step == 1:
            model.double()
        if step == 2:
            with torch.no_grad():
                model.weight.data = torch.randn(4, 3, dtype=torch.float64)
        want, got = f(model), compiled(model)
        assert torch.equal(got[0], want[0]) and got[0].dtype == want[0].dtype
        assert got[1:] == want[1:]
    assert backend.count == 3


def test_scripted_module_passed_anew_keeps_identity_guards():
    # a RecursiveScriptModule's _parameters/_buffers/_modules are C++
    # wrappers, not dicts a guard can read keys from: it is not guarded by
    # structure (this used to be an internal error on the second call)
    import warnings

    def f(m, x):
        return m(x) * 2

    backend = CountingBackend()
    compiled = bytegraph.compile(f, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            m = torch.jit.script(nn.Linear(4, 4))
            x = torch.randn(2, 4)
            assert torch.equal(compiled(m, x), f(m, x))
    assert backend.count >= 1


def test_parameter_only_mutated_under_no_grad_gets_no_grad_with_aot_eager():
    # eager leaves .grad None for a parameter the loss does not use; the
    # functionalized graph used to hand it a zero gradient
    def f(a, b, x):
        with torch.no_grad():
            a.weight.mul_(2)
        return b(x)

    backend = CountingBackend("aot_eager")
    compiled = bytegraph.compile(f, backend=backend)
    for i in range(4):
        torch.manual_seed(i)
        ea, eb = nn.Linear(4, 4), nn.Linear(4, 4)
        torch.manual_seed(i)
        ca, cb = nn.Linear(4, 4), nn.Linear(4, 4)
        x = torch.randn(2, 4)
        f(ea, eb, x).sum().backward()
        compiled(ca, cb, x).sum().backward()
        assert torch.equal(ea.weight, ca.weight)
        assert ca.weight.grad is None and ea.weight.grad is None
        assert torch.equal(eb.weight.grad, cb.weight.grad)
    assert 1 <= backend.count <= 3

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

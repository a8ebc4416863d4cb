"""Module hooks that must run natively (``torch.compiler.disable``d hooks, FSDP2's):
the hooks run natively, once per call, and the module's forward is traced
between them (distributed/hooks.py); compared with eager.
"""

from __future__ import annotations

import torch
from torch import nn

import bytegraph
from conftest import CountingBackend


def _model(calls):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    @torch.compiler.disable
    def pre(mod, args):
        calls.append("pre")
        return (args[0] * 2,)           # the forward sees what the hook returns

    @torch.compiler.disable
    def post(mod, args, out):
        calls.append("post")
        return out + 1

    m[0].register_forward_pre_hook(pre)
    m[2].register_forward_hook(post)
    return m


def test_hooks_run_natively_once_and_forward_is_traced():
    eager_calls, calls = [], []
    eager, model = _model(eager_calls), _model(calls)
    counting = CountingBackend()
    compiled = bytegraph.compile(model, backend=counting)
    for _ in range(3):
        x = torch.randn(3, 4)
        assert torch.equal(compiled(x), eager(x))
    assert calls == eager_calls == ["pre", "post"] * 3
    # both linear layers are in graphs: the hooks did not make their calls native
    ops = [str(n.target) for g in counting.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert sum("linear" in op for op in ops) == 2
    assert bytegraph.stats().eager_fallbacks == 0
    kinds = {b.kind for b in bytegraph.explain(model)(torch.randn(3, 4)).break_reasons}
    assert "native_module_hooks" in kinds


def test_backward_hook_added_later_still_runs():
    calls = []
    model = _model(calls)
    compiled = bytegraph.compile(model, backend="eager")
    x = torch.randn(3, 4, requires_grad=True)
    compiled(x).sum().backward()
    model[0].register_full_backward_hook(lambda mod, gi, go: calls.append("backward"))
    calls.clear()
    compiled(x).sum().backward()
    assert calls == ["pre", "post", "backward"]


def test_global_hook_added_later_still_runs():
    log = []
    model, eager = _model(log), _model(log)
    compiled = bytegraph.compile(model, backend="eager")
    x = torch.randn(3, 4)
    compiled(x)
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: log.append(type(mod).__name__))
    try:
        log.clear()
        got = compiled(x)
        seen, log[:] = list(log), []
        assert torch.equal(got, eager(x))
        assert seen == log and "Linear" in seen
    finally:
        handle.remove()

"""bytegraph.show: guard, transformed function as Python-like source, graphs, continuations."""

import pytest
import torch

import bytegraph
from bytegraph.show import decompile


class _Sink:
    def write(self, s):
        return len(s)


def _f(x, k):
    y = x.sin() * k
    print("between", file=_Sink())
    return y.cos() + 1


def test_show_lists_guard_transformed_code_graphs_and_continuations():
    cf = bytegraph.compile(_f, backend="eager")
    cf(torch.ones(2), 2)
    text = bytegraph.show(cf, print_it=False)
    lines = text.splitlines()
    assert lines[0] == "=== _f, entry 0 ==="
    assert "def ___guard(x, k):" in lines
    assert "def _f(x, k):" in lines
    assert "    _out0 = graph_0(x)" in lines          # the graph call, by name
    assert any(line.strip().startswith("___bg_tmp3 = print('between', file=") for line in lines)
    assert any("return select(function(<code _f.<resume_at_" in line for line in lines)
    assert "# graph_0" in lines and any("x.sin()" in line for line in lines)
    # the continuation, indented under its caller, with its own guard and graph
    assert any(line.startswith("    === _f.<resume_at_") and line.endswith(", entry 0 ===") for line in lines)
    assert any(line.strip() == "return add" or "cos" in line for line in lines if line.startswith("    "))


def test_decompile_plain_shapes():
    def g(a, b):
        c = a[0] + b.x
        d = (c, [a, b], {"k": c})
        a.y = d
        del c
        return g(a, b=d)

    assert decompile(g.__code__) == [
        "c = a[0] + b.x", "d = (c, [a, b], {'k': c})", "a.y = d", "del c", "return g(a, b=d)"]


def test_show_rejects_what_compile_did_not_return():
    with pytest.raises(TypeError, match="show\\(\\) expects"):
        bytegraph.show(lambda x: x)
    f = bytegraph.compile(lambda x: x + 1, backend="eager")
    assert "no entries yet" in bytegraph.show(f, print_it=False)


def test_decompile_method_calls():
    def h(a, xs):
        xs.append(a.sum(dim=0))
        return a.view(-1)

    assert decompile(h.__code__) == ["xs.append(a.sum(dim=0))", "return a.view(-1)"]

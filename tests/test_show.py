"""bytegraph.show: guard, transformed function as Python-like source, graphs, continuations."""

import re

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
    assert any("return select(<function _f.<resume_at_" in line for line in lines)
    assert "# graph_0" in lines and any("x.sin()" in line for line in lines)
    # the continuation, indented under its caller, with its own guard and graph
    assert any(line.startswith("    === _f.<resume_at_") and line.endswith(", entry 0 ===") for line in lines)
    assert any(line.strip() == "return add" or "cos" in line for line in lines if line.startswith("    "))


def _helper(x):
    print("in helper", file=_Sink())
    return x + 1


def _in_inlined_call(x):
    y = x * 2
    y = _helper(y)
    return y.sin()


def _in_loop(x):
    for i in range(3):
        x = x + i
        print("iter", i, file=_Sink())
    return x


def _in_with(x):
    with torch.no_grad():
        y = x * 2
        print("in with", file=_Sink())
        y = y + 1
    return y


def _in_try(x):
    try:
        y = x * 2
        print("in try", file=_Sink())
        y = y / 0
    except ZeroDivisionError:
        y = x
    return y + 1


def _keyword_call(x):
    y = x.sum(dim=0, keepdim=True)
    print("kw", end="\n", file=_Sink())
    return torch.clamp(y, min=0.0, max=1.0)


def _gen(x):
    yield x * 2
    print("gen", file=_Sink())
    yield x * 3


def _generator(x):
    return sum(t.sum() for t in _gen(x))


def _data_dependent(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


@pytest.mark.parametrize("fn, expected", [
    (_in_inlined_call, ["print('in helper', file=", "Continuation(<runner>, <function _helper.<resume_at_"]),
    (_in_loop, ["= next(", "<function _in_loop.<loop_body_at_"]),
    (_in_with, [".__enter__()", "on an exception raised at offsets", ".__exit__"]),
    (_in_try, ["print('in try', file=", "on an exception raised at offsets"]),
    (_keyword_call, ["print('kw', end='\\n', file="]),
    (_generator, ["sum("]),
    (_data_dependent, ["<function _data_dependent.<resume_at_"]),
])
def test_show_reads_as_the_code_bytegraph_emitted(fn, expected):
    cf = bytegraph.compile(fn, backend="eager")
    x = torch.ones(3)
    torch.testing.assert_close(cf(x), fn(x))
    text = bytegraph.show(cf, print_it=False)
    transformed = [line.strip() for line in text.splitlines()
                   if line.startswith(" ") and not line.strip().startswith(("if not (", "___v", "try:", "return True",
                                                                             "except", "return False"))]
    for piece in expected:
        assert any(piece in line for line in transformed), (piece, text)
    # every instruction has a known shape, no stack slot is unknown, and the
    # temporaries' bookkeeping (moves, clearing) is not shown as statements
    assert not [line for line in transformed if line.startswith("# ") and line[2:3].isupper()], text
    assert "?" not in text and "del ___bg_" not in text and not re.search(r"[^\w.)\]]\(___bg_tmp\d+\)", text), text
    # a stand-in frame's call is shown as the call it makes
    assert "_helper(print" not in text


def test_guard_source_says_what_each_check_means():
    cf = bytegraph.compile(_f, backend="eager")
    cf(torch.ones(2), 2)
    guard = cf._entries[0].guard.source
    assert "# k == 2" in guard and "# torch.is_grad_enabled() == True" in guard
    assert "# x: Tensor dtype=torch.float32 device=cpu shape=[2]" in guard


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

"""Property-based differential test of graph breaks (issue 4).

Hypothesis builds programs that mix tensor work, Python state (an int
counter, a list of results, a closure writing a ``nonlocal``), loops,
comprehensions, ``with torch.no_grad()``, helper calls, and graph breaks
(explicit ones and data-dependent branches) at random places.  Compiled runs
must match eager runs in result and side effects, with no eager fallback.
"""

import textwrap

import torch
from hypothesis import given, settings, strategies as st

import bytegraph
from conftest import CountingBackend

PRELUDE = """
def helper(v):
    v = v * 2
    bytegraph.graph_break()
    return v + 1
"""


@st.composite
def statements(draw, depth, loop_vars):
    out = []
    for _ in range(draw(st.integers(1, 4))):
        choices = ["tensor", "append", "count", "break", "branch", "helper", "bump", "comp"]
        if depth < 2:
            choices += ["for", "while", "no_grad"]
        kind = draw(st.sampled_from(choices))
        k = draw(st.integers(1, 3))
        if kind == "tensor":
            out.append(f"x = x * {k} + {draw(st.integers(-2, 2))}")
        elif kind == "append":
            out.append(f"acc.append({draw(st.sampled_from(['x.sum()', 'n', str(k)] + loop_vars))})")
        elif kind == "count":
            out.append(f"n = n + {k}")
        elif kind == "break":
            out.append("bytegraph.graph_break()")
        elif kind == "branch":
            out += [f"if x.sum() > {draw(st.integers(-3, 3))}:", "    x = x - 1", "else:", "    x = x + 2"]
        elif kind == "helper":
            out.append("x = helper(x)")
        elif kind == "bump":
            out.append("bump()")
        elif kind == "comp":
            out.append(f"acc.extend([x * j for j in range({k})])")
        else:
            var = f"i{depth}"
            inner = draw(statements(depth + 1, loop_vars + ([var] if kind != "no_grad" else [])))
            if kind == "for":
                out.append(f"for {var} in range({k}):")
            elif kind == "while":
                out += [f"{var} = 0", f"while {var} < {k}:", f"    {var} = {var} + 1"]
            else:
                out.append("with torch.no_grad():")
            out += ["    " + line for line in inner]
    return out


@st.composite
def program(draw):
    body = draw(statements(0, []))
    lines = ["def f(x, acc):", "    n = 0", "    def bump():", "        nonlocal n", "        n = n + 10"]
    lines += ["    " + line for line in body]
    lines.append("    return x, n")
    return PRELUDE + "\n".join(lines) + "\n"


def _run(fn, x):
    acc = []
    out, n = fn(x.clone(), acc)
    return out, n, [a.clone() if isinstance(a, torch.Tensor) else a for a in acc]


def _same(a, b, source):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, msg=source)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), source
        for p, q in zip(a, b):
            _same(p, q, source)
    else:
        assert a == b, source


@settings(max_examples=40, derandomize=True, deadline=None)
@given(program())
def test_generated_programs_with_breaks_match_eager(source):
    def build():
        ns = {"torch": torch, "bytegraph": bytegraph}
        exec(compile(source, "<generated>", "exec"), ns)
        return ns["f"]

    x = torch.tensor([0.5, -1.0, 2.0])
    expected = _run(build(), x)
    bytegraph.reset()
    compiled = bytegraph.compile(build(), backend=CountingBackend())
    got = _run(compiled, x)
    _same(expected, got, source)
    again = _run(compiled, x)
    _same(expected, again, source)
    assert bytegraph.stats().eager_fallbacks == 0, source

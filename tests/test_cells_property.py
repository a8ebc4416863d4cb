"""Property-based differential test of the cell model (issue 3).

Hypothesis builds small programs: a root function with local variables,
nested functions that read or write them through ``nonlocal`` (one more level
of nesting sometimes), calls, and closures that escape (returned, stored in a
pre-existing list).  Each program runs eagerly and compiled with
``fullgraph=True``; results, the escaped closures' later behaviour and the
pre-existing list must match.
"""

import torch
from hypothesis import given, settings, strategies as st

import bytegraph
from conftest import CountingBackend

VARS = ("a", "b", "c")


@st.composite
def nested_function(draw, name):
    writes = draw(st.lists(st.sampled_from(VARS), unique=True, max_size=2))
    lines = [f"    def {name}():"]
    if writes:
        lines.append(f"        nonlocal {', '.join(writes)}")
    lines.append("        r = 0")
    for _ in range(draw(st.integers(1, 3))):
        var = draw(st.sampled_from(VARS))
        k = draw(st.integers(-3, 3))
        if var in writes and draw(st.booleans()):
            lines.append(f"        {var} = {var} + {k}")
        else:
            lines.append(f"        r = r + {var} * {k}")
    if writes and draw(st.booleans()):
        inner_var = writes[0]
        lines += [f"        def inner():",
                  f"            nonlocal {inner_var}",
                  f"            {inner_var} = {inner_var} * 2",
                  f"            return {inner_var}",
                  f"        r = r + inner()"]
    lines.append("        return r")
    return lines


@st.composite
def program(draw):
    n_funcs = draw(st.integers(1, 3))
    names = [f"g{i}" for i in range(n_funcs)]
    lines = ["def f(x, store):"]
    for v in VARS:
        lines.append(f"    {v} = {draw(st.integers(-2, 5))}")
    for name in names:
        lines += draw(nested_function(name))
    lines += ["    keep = []", "    total = 0"]
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["call", "assign", "escape_keep", "escape_store"]))
        g = draw(st.sampled_from(names))
        if kind == "call":
            lines.append(f"    total = total + {g}()")
        elif kind == "assign":
            var = draw(st.sampled_from(VARS))
            lines.append(f"    {var} = {var} + {draw(st.integers(-3, 3))}")
        elif kind == "escape_keep":
            lines.append(f"    keep.append({g})")
        else:
            lines.append(f"    store.append({g})")
    lines.append("    return x * (a + b + c + total), keep")
    return "\n".join(lines) + "\n"


def _observe(fn, x):
    store = []
    out, keep = fn(x, store)
    later = [g() for g in keep] + [g() for g in store] + [g() for g in keep]
    return out, later, len(store)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(program())
def test_generated_closure_programs_match_eager(source):
    namespace = {}
    exec(compile(source, "<generated>", "exec"), namespace)
    eager_fn = namespace["f"]
    namespace2 = {}
    exec(compile(source, "<generated>", "exec"), namespace2)
    be = CountingBackend()
    compiled_fn = bytegraph.compile(namespace2["f"], backend=be, fullgraph=True)
    x = torch.arange(3.0)
    eager = _observe(eager_fn, x)
    compiled = _observe(compiled_fn, x)
    torch.testing.assert_close(compiled[0], eager[0], msg=source)
    assert compiled[1:] == eager[1:], source
    assert be.count == 1, source

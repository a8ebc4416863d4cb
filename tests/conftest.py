"""Shared helpers for the differential tracer tests.

The backbone (DESIGN.md §7): run a function eagerly and compiled, each on its
own copy of equal inputs, and compare the results, the inputs afterwards
(in-place mutations) and object identities; then check how many graphs the
backend received, so a frame that silently ran eagerly fails the test.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Dict, List, Optional

import pytest
import torch

import bytegraph
from bytegraph import config, diagnostics
from bytegraph.backends import lookup_backend


class CountingBackend:
    """A backend that records every graph it is given, then delegates
    (to the ``eager`` backend unless another name is passed)."""

    def __init__(self, inner: str = "eager"):
        self.inner_name = inner
        self.inner = lookup_backend(inner)[1]
        self.graphs: List[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return self.inner(gm, example_inputs)

    @property
    def count(self) -> int:
        return len(self.graphs)

    def op_counts(self) -> List[int]:
        return [sum(n.op in ("call_function", "call_method") for n in g.graph.nodes) for g in self.graphs]


@pytest.fixture(autouse=True)
def _fresh_bytegraph():
    """Every test starts from empty caches and zero counters; internal errors raise."""
    bytegraph.reset()
    saved = config.raise_on_error
    config.raise_on_error = True
    yield
    config.raise_on_error = saved
    bytegraph.reset()
    leaked = not torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    assert not leaked, "the test left grad mode disabled"
    assert not torch.is_autocast_enabled("cpu"), "the test left autocast enabled"


@pytest.fixture(params=["native", "python"])
def native_mode(request, monkeypatch):
    """Run a test with bytegraph's native module (guards' tensor checks, the
    compiled call path) and with the pure-Python equivalents."""
    from bytegraph import native
    if request.param == "native" and native.load() is None:
        pytest.skip(f"native guard checks {native.status()}")
    monkeypatch.setattr(config, "native_guards", request.param == "native")
    return request.param


@contextlib.contextmanager
def captured_logs(*families):
    """The messages bytegraph logs under ``families`` while the block runs
    (a list, filled as they are logged), whatever else is configured."""
    import logging
    from bytegraph import logs
    messages: List[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Capture(logging.DEBUG)
    saved = []
    for family in families:
        logger = logs._LOGGERS[family]
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield messages
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)


# ---------------------------------------------------------------------------
# copying inputs


def copy_tree(obj, memo: Optional[Dict[int, Any]] = None, fresh: Optional[torch.Generator] = None):
    """A deep copy of nested tuples/lists/dicts/sets of tensors and constants.

    Aliasing inside ``obj`` is preserved (one object copied once).  With
    ``fresh``, tensors get new random values of the same dtype/shape instead
    of a clone, so a compiled function cannot pass by having baked values in.
    """
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        if fresh is None:
            out = obj.detach().clone()
        elif obj.dtype == torch.bool:
            out = torch.rand(obj.shape, generator=fresh) > 0.5
        elif obj.is_floating_point():
            out = torch.randn(obj.shape, generator=fresh).to(obj.dtype)
        else:
            # keep integer values inside the original range: they may be indices
            lo, hi = (int(obj.min()), int(obj.max())) if obj.numel() else (0, 0)
            out = torch.randint(lo, hi + 1, obj.shape, generator=fresh).to(obj.dtype)
        out.requires_grad_(obj.requires_grad)
    elif type(obj) in (list, tuple) or isinstance(obj, tuple) and hasattr(obj, "_fields"):
        items = [copy_tree(o, memo, fresh) for o in obj]
        out = type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    elif type(obj) is dict:
        out = {k: copy_tree(v, memo, fresh) for k, v in obj.items()}
    elif type(obj) is set:
        out = set(obj)
    else:
        return obj  # immutable constants, functions, dtypes ...
    memo[id(obj)] = out
    return out


# ---------------------------------------------------------------------------
# comparing results


def assert_tree_equal(actual, expected, path: str = "result") -> None:
    """Structural equality: same types at every level, tensors equal (dtype,
    shape, values, requires_grad), dict keys in the same order."""
    assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{path}: {m}")
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_equal(a, e, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_tree_equal(actual[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), path
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _identity_pattern(obj) -> List[int]:
    """For each tensor/list/dict/set met in a walk of ``obj``, the index of its
    first occurrence: equal patterns mean the same objects are shared."""
    first: Dict[int, int] = {}
    pattern: List[int] = []

    def walk(o):
        if isinstance(o, (torch.Tensor, list, dict, set)):
            pattern.append(first.setdefault(id(o), len(first)))
            if isinstance(o, torch.Tensor):
                return
        if isinstance(o, (list, tuple)):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            for x in o.values():
                walk(x)

    walk(obj)
    return pattern


def assert_same(fn: Callable, *args, graphs: Optional[int] = 1, breaks: Optional[int] = 0, calls: int = 2,
                backend: str = "eager", kwargs: Optional[dict] = None, check_identity: bool = True):
    """Run ``fn`` eagerly and compiled on independent equal copies of ``args``
    (call 1: clones; later calls: fresh random tensors of the same metadata),
    and compare results, inputs afterwards and object sharing.  Then assert the
    backend saw exactly ``graphs`` graphs, there were ``breaks`` graph breaks,
    and (if a graph is expected) nothing fell back to eager.  ``None`` skips a count.

    Returns ``(compiled_result, counting_backend)`` of the last call.
    """
    kwargs = kwargs or {}
    be = CountingBackend(backend)
    compiled = bytegraph.compile(fn, backend=be)
    gen = torch.Generator().manual_seed(1234)
    fallbacks: List[str] = []

    def listener(event, payload):
        if event in ("fallback", "break"):
            fallbacks.append(str(payload))

    diagnostics.add_listener(listener)
    try:
        actual = _run_calls(fn, compiled, args, kwargs, calls, gen, check_identity)
    finally:
        diagnostics.remove_listener(listener)
    stats = bytegraph.stats()
    why = f"breaks/fallbacks: {fallbacks}; {stats}"
    if graphs is not None:
        assert be.count == graphs, f"expected {graphs} graph(s), backend saw {be.count}; {why}"
        if graphs:
            assert stats.eager_fallbacks == 0, f"a frame fell back to eager; {why}"
    if breaks is not None:
        assert stats.graph_breaks == breaks, f"expected {breaks} graph break(s); {why}"
    return actual, be


def _run_calls(fn, compiled, args, kwargs, calls, gen, check_identity):
    actual = None
    for call in range(calls):
        source = (args, kwargs) if call == 0 else copy_tree((args, kwargs), fresh=gen)
        eager_in = copy_tree(source)
        comp_in = copy_tree(source)
        expected = fn(*eager_in[0], **eager_in[1])
        actual = compiled(*comp_in[0], **comp_in[1])
        assert_tree_equal(actual, expected, f"call {call} result")
        assert_tree_equal(comp_in, eager_in, f"call {call} inputs afterwards")
        if check_identity:
            assert _identity_pattern((comp_in, actual)) == _identity_pattern((eager_in, expected)), \
                f"call {call}: object identity differs between compiled and eager"
    return actual


def compile_counting(fn: Callable, backend: str = "eager", **kw):
    """``(compiled_fn, counting_backend)`` for tests that drive calls themselves."""
    be = CountingBackend(backend)
    return bytegraph.compile(fn, backend=be, **kw), be

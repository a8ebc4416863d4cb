"""Compiles defer CPython's automatic full collections (``bytegraph/gc_defer.py``).

The program's thresholds must come back after every compile (a failing one,
a nested one), a program that turned the collector off or set its own
thresholds keeps its choice, and no full collection starts while a frame
compiles.  Also: guards that die at interpreter exit print nothing.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import bytegraph
from bytegraph import config
from bytegraph.errors import BytegraphError
from bytegraph.gc_defer import _DEFERRED, full_collections_deferred


@pytest.fixture(autouse=True)
def _program_thresholds():
    saved, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*saved)
    (gc.enable if enabled else gc.disable)()


def _recording_backend(seen):
    def backend(gm, example_inputs):
        seen.append((gc.isenabled(), gc.get_threshold()))
        return gm.forward
    return backend


def _f(x):
    return torch.relu(x) * 2 + 1


def test_full_collections_wait_during_a_compile_and_thresholds_come_back():
    gc.set_threshold(700, 10, 10)
    seen = []
    out = bytegraph.compile(_f, backend=_recording_backend(seen))(torch.ones(3))
    assert torch.equal(out, _f(torch.ones(3)))
    assert seen == [(True, (700, 10, _DEFERRED))]
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_come_back_after_a_failing_compile():
    gc.set_threshold(500, 7, 9)

    def g(x):
        print("break")
        return x + 1

    with pytest.raises(BytegraphError):
        bytegraph.compile(g, backend="eager", fullgraph=True)(torch.ones(2))
    assert gc.get_threshold() == (500, 7, 9)


def test_nested_compile_restores_once_at_the_outermost():
    gc.set_threshold(800, 10, 10)
    inner_seen = []
    inner = bytegraph.compile(lambda x: x * 3, backend=_recording_backend(inner_seen))
    outer_seen = []

    def backend(gm, example_inputs):
        inner(torch.ones(2))            # compiles while the outer compile runs
        outer_seen.append(gc.get_threshold())
        return gm.forward

    bytegraph.compile(_f, backend=backend)(torch.ones(3))
    assert inner_seen == [(True, (800, 10, _DEFERRED))]
    assert outer_seen == [(800, 10, _DEFERRED)]     # the inner exit did not restore early
    assert gc.get_threshold() == (800, 10, 10)
    assert full_collections_deferred._depth == 0


def test_a_collection_per_allocation_waits_for_the_defaults_count_while_compiling():
    # (CPython's test_generators sets threshold 1 with a gc callback that walks
    # the stack: the compiler's own allocations ran it 8,000 times, 3 s)
    runs = []

    def callback(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    gc.set_threshold(1, 0, 0)
    seen = []
    gc.callbacks.append(callback)
    try:
        out = bytegraph.compile(_f, backend=_recording_backend(seen))(torch.ones(3))
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(700, 10, 10)
    assert torch.equal(out, _f(torch.ones(3)))
    assert seen == [(True, (700, 0, _DEFERRED))]
    assert len(runs) < 500            # one per allocation would be tens of thousands
    assert runs                       # young collections still ran


def test_a_disabled_collector_is_left_alone():
    gc.set_threshold(700, 10, 10)
    gc.disable()
    seen = []
    bytegraph.compile(_f, backend=_recording_backend(seen))(torch.ones(3))
    assert seen == [(False, (700, 10, 10))]
    assert not gc.isenabled()


def test_thresholds_the_program_sets_while_compiling_are_kept():
    gc.set_threshold(700, 10, 10)

    def backend(gm, example_inputs):
        gc.set_threshold(100, 5, 5)     # e.g. a backend that tunes the collector
        return gm.forward

    bytegraph.compile(_f, backend=backend)(torch.ones(3))
    assert gc.get_threshold() == (100, 5, 5)


def test_switch_off_compiles_under_the_program_thresholds(monkeypatch):
    monkeypatch.setattr(config, "defer_full_gc", False)
    gc.set_threshold(700, 10, 10)
    seen = []
    bytegraph.compile(_f, backend=_recording_backend(seen))(torch.ones(3))
    assert seen == [(True, (700, 10, 10))]


def _full_collections_while_compiling(deferred: bool, monkeypatch) -> int:
    monkeypatch.setattr(config, "defer_full_gc", deferred)
    starts = []
    kept = []

    def callback(phase, info):
        if phase == "start" and info["generation"] == 2 and full_collections_deferred._depth:
            starts.append(info)

    def backend(gm, example_inputs):
        # a compile that leaves many survivors (as graphs, guards and code
        # objects are): CPython starts a full collection once the survivors
        # reach a quarter of the heap
        kept.extend([i] for i in range(len(gc.get_objects()) // 2))
        return gm.forward

    gc.collect()
    gc.set_threshold(100, 2, 2)
    gc.callbacks.append(callback)
    try:
        out = bytegraph.compile(_f, backend=backend)(torch.ones(4))
    finally:
        gc.callbacks.remove(callback)
    assert torch.equal(out, _f(torch.ones(4)))
    return len(starts)


def test_no_full_collection_starts_while_compiling(monkeypatch):
    assert _full_collections_while_compiling(True, monkeypatch) == 0


def test_without_the_deferral_full_collections_do_start(monkeypatch):
    # the measurement above can see a full collection
    assert _full_collections_while_compiling(False, monkeypatch) > 0


def test_cyclic_garbage_is_still_collected_after_a_compile():
    import weakref

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    bytegraph.compile(_f, backend="eager")(torch.ones(3))
    gc.collect()
    assert ref() is None


def test_guards_dying_at_interpreter_exit_print_nothing():
    # A guarded object in a reference cycle dies only in the shutdown's own
    # collection (none ran before, as when a compile deferred it), possibly
    # after the cache module's globals are cleared: its guard's callbacks must
    # not then print "Exception ignored".
    script = textwrap.dedent("""
        import gc, torch, bytegraph

        model = torch.nn.Linear(2, 2)
        model.me = model            # a cycle: it dies in the shutdown's collection
        compiled = bytegraph.compile(model, backend="eager")
        compiled(torch.ones(2))
        gc.disable()
    """)
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr

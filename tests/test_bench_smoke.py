"""Smoke test of the side-by-side benchmark (bench/run.py): one tiny workload,
one repetition, in a subprocess; it must exit 0 and print a markdown table
with a torch.compile column and a bytegraph column."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(600)
def test_bench_quick_tiny_run(tmp_path):
    # generous limits: this checks the harness, not speed, and a loaded
    # machine (the other xdist worker, another job) slows every worker down
    out_md = tmp_path / "results.md"
    raw = tmp_path / "raw.json"
    cmd = [sys.executable, os.path.join(REPO, "bench", "run.py"), "--quick", "--repeat", "1",
           "--workloads", "pointwise_1", "--metrics", "first_call,overhead",
           "--output", str(out_md), "--json", str(raw), "--timeout", "240"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]

    lines = proc.stdout.splitlines()
    headers = [ln for ln in lines if ln.startswith("| workload |")]
    assert headers, proc.stdout
    assert any("torch.compile median" in h and "bytegraph median" in h and "bytegraph / torch.compile" in h
               for h in headers), headers
    rows = [ln for ln in lines if ln.startswith("| pointwise_1 |")]
    assert rows, proc.stdout
    assert "## First call, warm (ms)" in proc.stdout
    assert "## Steady-state per-call overhead over eager" in proc.stdout
    assert out_md.read_text() == proc.stdout

    results = json.loads(raw.read_text())["results"]
    assert {(r["frontend"], r["metric"]) for r in results} == {
        ("torch", "first_call"), ("torch", "overhead"), ("bytegraph", "first_call"), ("bytegraph", "overhead")}
    # torch.compile is the reference: it must capture this function in one graph, correctly
    for r in results:
        if r["frontend"] == "torch":
            assert r["ok"], r
            assert r["graphs"] == 1 and r["correct"], r


def _run_json(path, rows):
    """A bench/run.py JSON file with first-call medians (torch, bytegraph) per workload."""
    results = []
    for workload, t, b in rows:
        results.append({"workload": workload, "metric": "first_call", "frontend": "torch", "ok": True,
                        "first_call_ms": t})
        results.append({"workload": workload, "metric": "first_call", "frontend": "bytegraph", "ok": True,
                        "first_call_ms": b})
    path.write_text(json.dumps({"info": {"python": str(path.stem)}, "results": results}))
    return str(path)


def test_compare_flags_only_ratios_that_got_worse(tmp_path):
    sys.path.insert(0, REPO)
    from bench.compare import compare

    base = _run_json(tmp_path / "a.json", [("same", 100, 30), ("worse", 100, 30), ("better", 100, 30)])
    new = _run_json(tmp_path / "b.json", [("same", 50, 16), ("worse", 100, 40), ("better", 100, 10)])
    text, beyond = compare(base, new, 0.10)
    assert beyond == ["worse first call, warm (ms)"]
    assert "| same |" in text and "| ok |" in text and "| better |" in text and "WORSE" in text


def test_scale_tables_render():
    """The compile-time-at-scale tables (make bench-scale) from hand-made worker results."""
    sys.path.insert(0, REPO)
    from bench.report import render
    results = []
    for fe, scale in (("torch", 1.0), ("bytegraph", 0.25)):
        for layers, ms in ((4, 100.0), (48, 900.0)):
            results.append({"workload": f"hf_gpt2_L{layers}", "metric": "first_call", "frontend": fe, "ok": True,
                            "first_call_ms": ms * scale * (1 if fe == "torch" else layers ** -0.5), "graphs": 1,
                            "breaks": 0, "correct": True})
        results.append({"workload": "hf_gpt2_L12", "metric": "inductor_first", "frontend": fe, "ok": True,
                        "first_call_ms": 20000 * scale, "first_call_cpu_s": 30 * scale, "compiled_ms": 2.0,
                        "eager_ms": 4.0, "speedup": 2.0, "correct": True})
        results.append({"workload": "hf_gpt2_L12", "metric": "inductor_warm", "frontend": fe, "ok": True,
                        "first_call_ms": 4000 * scale, "correct": True,
                        "cache": {"fxgraph_cache_hit": 1, "fxgraph_cache_miss": 0, "autograd_cache_hit": 1,
                                  "autograd_cache_miss": 0}})
    text = render(results, {"mode": "scale"})
    assert "## First call with backend=\"inductor\", cold cache (s)" in text
    assert "| hf_gpt2_L12 | 20 | 20 | 5 | 5 | 0.25 |" in text
    assert "## Second-process first call" in text and "| hf_gpt2_L12 | 1 / 0 | 1 / 0 | 1 / 0 | 1 / 0 |" in text
    assert "| frontend | 4 layers (ms) | 48 layers (ms) | 48 / 4 layers |" in text
    growth = [ln for ln in text.splitlines() if ln.startswith("| bytegraph | ")]
    assert growth and growth[-1].endswith("| 2.60x |"), growth


_COUNTED_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
from bench.callgrind import Callgrind
cg = Callgrind.load()

def f():
    return sum(range(50))

def loop(n):
    for _ in range(n):
        f()

import gc
gc.disable()    # as the worker does: a collection would land in one region and not the other
cg.start()
# (code runs cost more the first time after instrumentation starts, and the
# interpreter specializes it over its first runs: neither is in a count)
loop(3000)
cg.count("warm-up")
loop(1000)
a = cg.count("1000 calls")
loop(2000)
b = cg.count("2000 calls")
loop(1000)
a2 = cg.count("1000 calls again")
for _ in range(1000):
    cg.toggle()
    f()
    cg.toggle()
hidden = cg.count("1000 calls not counted")
for _ in range(1000):
    cg.toggle()
    cg.toggle()
toggles = cg.count("the toggles alone")
cg.stop()
print(a, b, a2, hidden, toggles)
"""


@pytest.mark.timeout(300)
def test_callgrind_counts_are_deterministic_and_cover_only_their_region(tmp_path):
    """bench/callgrind.py, the counted metric's client: a region's count is
    proportional to the work in it, reading a dump is not counted in the next
    region, and code between two toggles is not counted."""
    sys.path.insert(0, REPO)
    from bench import callgrind
    why = callgrind.available()
    if why:
        if os.environ.get("BYTEGRAPH_REQUIRE_VALGRIND"):
            pytest.fail(f"valgrind is required here: {why}")
        pytest.skip(why)
    script = tmp_path / "counted.py"
    script.write_text(_COUNTED_SCRIPT)
    base = str(tmp_path / "cg")
    proc = subprocess.run(callgrind.valgrind_command(base) + [sys.executable, str(script), REPO],
                          env=dict(os.environ, **{callgrind.OUT_ENV: base}),
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b, a2, hidden, toggles = map(int, proc.stdout.split())
    # (a few ten thousand instructions per count move with the allocator's state)
    assert a > 1000 * 500, (a, b)                # 1000 calls of a Python function summing 50 ints
    assert abs(b / a - 2.0) < 0.04, (a, b)       # twice the work, twice the count
    assert abs(a2 / a - 1.0) < 0.02, (a, a2)     # the same work again: the same count (the dump read is not in it)
    assert abs(hidden - toggles) < a / 50, (a, hidden, toggles)   # between two toggles nothing is counted


def test_instruction_tables_render_and_compare(tmp_path):
    """The counted metric's tables and the 3.11-vs-3.12 comparison, from hand-made worker results."""
    sys.path.insert(0, REPO)
    from bench.compare import compare
    from bench.report import render

    def run(path, bg_overhead):
        results = []
        for fe, first, over in (("torch", 160.0, 80.0), ("bytegraph", 20.0, bg_overhead)):
            results.append({"workload": "pointwise_1", "metric": "instructions", "frontend": fe, "ok": True,
                            "first_call_minstr": first, "overhead_kinstr": over, "eager_kinstr": 38.0,
                            "outside_graph_kinstr": over + 2, "graphs": 1, "breaks": 0, "correct": True})
        path.write_text(json.dumps({"info": {"python": path.stem}, "results": results}))
        return results, str(path)

    results, base = run(tmp_path / "a.json", 10.0)
    text = render(results, {"mode": "full"})
    assert "## First call, warm, in instructions (millions)" in text
    assert "| pointwise_1 | 160 | 160 | 20 | 20 | 0.12 |" in text
    assert "## Steady-state instructions outside the captured graphs (thousands per call)" in text
    _, new = run(tmp_path / "b.json", 12.0)
    _, beyond = compare(base, new, 0.10)
    assert beyond == ["pointwise_1 per-call overhead (K instructions)",
                      "pointwise_1 outside the graphs (K instructions/call)"], beyond


@pytest.mark.timeout(300)
def test_forked_worker_measures_each_job_in_its_own_child():
    """``bench.worker ... forked``: the counted metric's one-process mode (it
    forks a child per measurement); here with the timed first_call metric."""
    jobs = "pointwise_1:torch,pointwise_1:bytegraph,ints_1:bytegraph"
    proc = subprocess.run([sys.executable, "-m", "bench.worker", jobs, "forked", "first_call"], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "src")])),
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(ln.split(":", 1)[1]) for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON:")]
    assert [(r["workload"], r["frontend"]) for r in results] == [
        ("pointwise_1", "torch"), ("pointwise_1", "bytegraph"), ("ints_1", "bytegraph")]
    for r in results:
        assert r["ok"] and r["correct"] and r["graphs"] == 1, r
    # each child started from the parent's state: bytegraph's second job compiled its function afresh
    assert results[2]["stats"]["frames_compiled"] == 1, results[2]

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

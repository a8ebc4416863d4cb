"""BYTEGRAPH_TRACE_DIR / bytegraph.tracefile: one JSON line per compile, fallback and recompile."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import torch

import bytegraph
from bytegraph import tracefile

HERE = os.path.abspath(__file__)


class _Sink:
    def write(self, s):
        return len(s)


def _f(x, k):
    y = x.sin() * k
    print("between graphs", file=_Sink())
    return y.cos() + 1


def _records(directory):
    (path,) = glob.glob(os.path.join(directory, "bytegraph_*.jsonl"))
    return [json.loads(line) for line in open(path)]


def test_compiles_breaks_and_recompiles_are_recorded(tmp_path):
    tracefile.start(str(tmp_path))
    try:
        cf = bytegraph.compile(_f, backend="eager")
        cf(torch.ones(2), 2)
        cf(torch.ones(2), 3)
    finally:
        tracefile.stop()
    records = _records(str(tmp_path))
    types = [r["type"] for r in records]
    assert types.count("frame_compile") == 4 and types.count("recompile") >= 1
    first = records[0]
    assert first["function"] == "_f" and first["file"] == HERE
    assert set(first["phases"]) == {"trace", "backend", "guards", "codegen"}
    assert abs(sum(first["phases"].values()) - first["seconds"]) < 1e-3
    (graph,) = first["graphs"]
    assert "sin" in graph["code"] and graph["ops"][0]["target"] == "sin"
    assert f'File "{HERE}"' in graph["ops"][0]["stack_trace"]
    (brk,) = first["breaks"]
    assert brk["kind"] == "print" and brk["user_file"] == HERE
    assert any("print(" in text for _, text in brk["snippet"])
    assert first["guards"] and "CALL" in first["bytecode"]
    assert first["source"].startswith("def _f(x, k):") and "graph_0(x)" in first["source"]
    recompile = next(r for r in records if r["type"] == "recompile" and r["function"] == "_f")
    assert recompile["reasons"] and "k == 2 (2 → 3)" in recompile["reasons"][0]


def test_environment_variable_turns_it_on(tmp_path):
    program = textwrap.dedent("""
        import torch, bytegraph
        bytegraph.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    """)
    src = os.path.dirname(os.path.dirname(os.path.abspath(bytegraph.__file__)))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": src, tracefile.ENV_VAR: str(tmp_path / "trace")}
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    (record,) = _records(str(tmp_path / "trace"))
    assert record["type"] == "frame_compile" and record["function"] == "<lambda>"

"""bytegraph's logs answer to torch's switches (TORCH_LOGS, torch._logging.set_logs)
and to BYTEGRAPH_LOGS, where an unknown name is an error."""

import os
import subprocess
import sys
import textwrap

import pytest

import bytegraph
from bytegraph import logs

SRC = os.path.dirname(os.path.dirname(os.path.abspath(bytegraph.__file__)))

PROGRAM = textwrap.dedent("""
    import torch, bytegraph
    def f(x):
        print("between graphs")
        return x + 1
    cf = bytegraph.compile(f, backend="eager")
    cf(torch.ones(2)); cf(torch.ones(3, 3))
""")


def run(env: dict, program: str = PROGRAM) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env={**base, **env},
                          timeout=180)


def test_torch_logs_artifacts_show_bytegraph_messages():
    proc = run({"TORCH_LOGS": "graph_breaks,recompiles"})
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    breaks = [line for line in err.splitlines() if "[__graph_breaks] graph break in f" in line]
    assert len(breaks) == 1, err
    assert any("[__recompiles] recompiling" in line for line in err.splitlines()), err
    assert "[__guards]" not in err and "[__graph_code]" not in err
    assert proc.stdout == "between graphs\nbetween graphs\n"


def test_torch_logs_plus_bytegraph_shows_every_family():
    # torch's convention: an artifact that is off by default (bytecode) needs its own name
    proc = run({"TORCH_LOGS": "+bytegraph"})
    assert proc.returncode == 0, proc.stderr
    for artifact in ("[__graph_breaks]", "[__guards]", "[__graph_code]", "[__recompiles]"):
        assert artifact in proc.stderr, artifact
    assert "[__bytecode]" not in proc.stderr
    proc = run({"TORCH_LOGS": "+bytegraph,bytecode"})
    assert "[__bytecode] transformed bytecode of f" in proc.stderr


def test_torch_set_logs_switches_bytegraph_families():
    program = textwrap.dedent("""
        import logging, torch, bytegraph
        torch._logging.set_logs(guards=True)
        f = bytegraph.compile(lambda x: x * 2, backend="eager")
        f(torch.ones(2))
        torch._logging.set_logs()
        g = bytegraph.compile(lambda x: x * 3, backend="eager")
        g(torch.ones(2))
    """)
    proc = run({}, program)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("[__guards] guards for <lambda>") == 1, proc.stderr


def test_bytegraph_logs_prints_each_message_once_with_its_prefix():
    proc = run({"BYTEGRAPH_LOGS": "graph_breaks"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("[bytegraph.graph_breaks] graph break in f") == 1, proc.stderr
    assert "recompil" not in proc.stderr


def test_bytegraph_logs_beside_torch_logs_prints_once():
    proc = run({"BYTEGRAPH_LOGS": "graph_breaks", "TORCH_LOGS": "graph_breaks"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("graph break in f") == 1, proc.stderr


def test_unknown_bytegraph_log_name_is_an_error():
    proc = run({"BYTEGRAPH_LOGS": "graph_braeks"})
    assert proc.returncode != 0
    assert "unknown bytegraph log 'graph_braeks'" in proc.stderr and "graph_breaks" in proc.stderr
    with pytest.raises(ValueError, match="valid names"):
        logs.set_logs("recompile")
    assert logs.parse("+bytegraph") == set(logs.FAMILIES)
    assert logs.parse("graph") == {"graph_code"}


def test_set_logs_in_process_goes_to_stderr(capfd):
    f = bytegraph.compile(lambda x: x.sin(), backend="eager")
    logs.set_logs("guards")
    try:
        import torch
        f(torch.ones(2))
    finally:
        logs.set_logs("")
    out, err = capfd.readouterr()
    assert out == ""
    assert "[bytegraph.guards] guards for <lambda>" in err
    assert not logs.enabled("guards")

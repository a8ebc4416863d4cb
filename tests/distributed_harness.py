"""Running test cases on two processes: torch.distributed with gloo on 127.0.0.1.

A cases module lists functions with :func:`case`; each takes ``(rank, world)``
and returns a JSON-able dict of what it measured (it compares compiled with
eager itself).  :func:`run_cases` starts two worker processes of this file
(``python distributed_harness.py MODULE OUT_DIR``), which rendezvous over TCP
on ``127.0.0.1`` at a free port, run every case in order and write one JSON
file per rank.  Each case gets fresh bytegraph caches, ``raise_on_error``,
and the same seeds on both ranks; an exception is recorded as the case's
failure and the next case runs.

Bounded everywhere: collectives time out after ``PG_TIMEOUT`` seconds (a
case whose ranks disagree fails instead of hanging), and the workers are
killed after ``timeout`` seconds in all (``BYTEGRAPH_DIST_CASES=a,b`` runs only
those cases, for debugging).  Only 127.0.0.1 is used:
``MASTER_ADDR`` and gloo's interface (``GLOO_SOCKET_IFNAME=lo``).
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

#: seconds a collective may wait before it raises
PG_TIMEOUT = 40

CASES: Dict[str, Dict[str, Callable]] = {}


def case(fn: Callable) -> Callable:
    """Register ``fn(rank, world) -> dict`` as a case of its module."""
    CASES.setdefault(fn.__module__, {})[fn.__name__] = fn
    return fn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cases(module: str, out_dir: Path, world: int = 2, timeout: float = 600.0) -> Dict[str, List[dict]]:
    """Run every case of ``module`` on ``world`` processes; ``{case: [result of rank 0, rank 1, ...]}``.

    A result is ``{"ok": True, **data}`` or ``{"ok": False, "error": traceback}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")]))
    procs = []
    logs = []
    for rank in range(world):
        log = open(out_dir / f"rank{rank}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, str(Path(__file__)), module, str(out_dir)],
                                      env=dict(env, RANK=str(rank)), stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError(f"distributed cases of {module} did not finish in {timeout} s; logs in {out_dir}")
    finally:
        for log in logs:
            log.close()
    results: Dict[str, List[dict]] = {}
    for rank in range(world):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            text = (out_dir / f"rank{rank}.log").read_text()[-4000:]
            raise AssertionError(f"rank {rank} wrote no results (exit {procs[rank].returncode}):\n{text}")
        for name, result in json.loads(path.read_text()).items():
            results.setdefault(name, []).append(result)
    return results


def results_fixture(module: str):
    """A pytest fixture running ``module``'s cases once per test session.

    Under pytest-xdist the tests of one module may land on several workers:
    the first to ask runs the cases (under a file lock in the directory the
    workers share) and the others read its results, so the two processes
    start once, not once per worker.
    """
    import pytest

    @pytest.fixture(scope="module")
    def results(tmp_path_factory):
        import fcntl
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        done = shared / f"{module}.results.json"
        with open(shared / f"{module}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                try:
                    found = run_cases(module, shared / module)
                except AssertionError as e:
                    found = {"__error__": str(e)}
                done.write_text(json.dumps(found))
        found = json.loads(done.read_text())
        if "__error__" in found:
            raise AssertionError(found["__error__"])
        return found
    return results


def requires_gloo():
    """The pytest mark that skips a module without torch.distributed's gloo backend."""
    import pytest
    import torch.distributed as dist
    return pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                              reason="torch.distributed with gloo is not available")


def ranks(results: Dict[str, List[dict]], name: str) -> List[dict]:
    """Case ``name``'s result on each rank, failing with its traceback if it raised on one."""
    out = results[name]
    assert len(out) == 2, out
    for r in out:
        assert r["ok"], r.get("error")
    return out


def _worker(module: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    import bytegraph
    from bytegraph import config

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=PG_TIMEOUT))
    importlib.import_module(module)
    results = {}
    only = [n for n in os.environ.get("BYTEGRAPH_DIST_CASES", "").split(",") if n]   # (for debugging)
    for name, fn in CASES[module].items():
        if only and name not in only:
            continue
        bytegraph.reset()
        config.raise_on_error = True
        torch.manual_seed(0)
        start = time.perf_counter()
        try:
            data = fn(rank, world)
            results[name] = {"ok": True, **(data or {})}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
        results[name]["seconds"] = round(time.perf_counter() - start, 3)
        print(f"[rank {rank}] {name}: {'ok' if results[name]['ok'] else 'FAILED'} "
              f"({results[name]['seconds']} s)", flush=True)
        try:
            dist.barrier()
        except Exception:
            results[name].setdefault("error", traceback.format_exc())
            break
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1, default=str))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.modules.setdefault("distributed_harness", sys.modules["__main__"])
    _worker(sys.argv[1], sys.argv[2])

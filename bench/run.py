"""Side-by-side benchmark: torch.compile vs bytegraph.compile.

Usage (from the repository root)::

    .venv/bin/python bench/run.py            # full run (make bench)
    .venv/bin/python bench/run.py --quick    # subset, < 2 minutes (make bench-quick)
    .venv/bin/python bench/run.py --quick --repeat 1 --workloads pointwise_1 --metrics first_call
    # two interpreters, workers interleaved; then bench/compare.py on the two JSON files
    .venv/bin/python bench/run.py --json /tmp/a.json --also-python .venv-3.12/bin/python --also-json /tmp/b.json

Every measurement is one ``python -m bench.worker <workload> <frontend>
<metric>`` subprocess; the two frontends are run interleaved (their order
alternates), each measurement is repeated ``--repeat`` times, and the median
and min over the repetitions are reported.  The tables are printed as
markdown and written to ``bench/results.md`` (``--output``).  A workload that
fails under a frontend shows ``error: <reason>`` in its cell; the run goes on.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from bench import callgrind  # noqa: E402
from bench.report import render  # noqa: E402
from bench.worker import FRONTENDS, MARKER, METRICS  # noqa: E402  (light: imports torch only)
from bench import workloads as W  # noqa: E402

# What `--quick` runs: small overhead-bound workloads, one closure model, one
# nn.Module, the graph-break function; cold starts for two of them.
QUICK_PLAN = {
    "first_call": ["pointwise_1", "pointwise_64", "mlp", "gpt_closures", "graph_breaks"],
    "cold": ["pointwise_1"],
    "overhead": ["pointwise_1", "pointwise_64", "ints_64", "mlp", "gpt_closures", "graph_breaks"],
    "memory": [W.MEMORY_WORKLOAD],
}
QUICK_REPEAT = 1
FULL_REPEAT = 3

#: Compile time at scale (issue 17; ``make bench-scale``, also part of the full run)
SCALE_PLAN = {
    "first_call": ["hf_gpt2_L4", "hf_gpt2_L16", "hf_gpt2_L48"],
    "inductor_first": ["mlp", "cnn", "gpt_closures", "hf_gpt2", "hf_gpt2_L12"],
    "inductor_warm": ["hf_gpt2_L12"],
}

#: metrics whose workers each get an Inductor cache directory of their own
PRIVATE_CACHE_METRICS = ("inductor_first", "inductor_warm")


def full_plan() -> Dict[str, List[str]]:
    names = [n for n in W.WORKLOADS if not W.WORKLOADS[n].scale]
    return {
        "first_call": names + SCALE_PLAN["first_call"],
        # cold starts are dominated by imports and one-time setup: a spread of sizes is enough
        "cold": [n for n in ("pointwise_1", "pointwise_64", "mlp", "gpt_closures", "graph_breaks",
                             "hf_gpt2") if n in W.WORKLOADS],
        "overhead": names,
        "instructions": names,
        "inductor": [n for n in names if W.WORKLOADS[n].inductor],
        "inductor_first": SCALE_PLAN["inductor_first"],
        "inductor_warm": SCALE_PLAN["inductor_warm"],
        "memory": [W.MEMORY_WORKLOAD],
    }


def transformers_available() -> bool:
    try:
        import importlib.util
        return importlib.util.find_spec("transformers") is not None
    except Exception:
        return False


def run_worker(workload: str, frontend: str, metric: str, env: Dict[str, str], timeout: float,
               worker_args: Sequence[str], python: str = sys.executable) -> Dict[str, Any]:
    cmd = [python, "-m", "bench.worker", workload, frontend, metric, *worker_args]
    base = {"workload": workload, "frontend": frontend, "metric": metric, "ok": False}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(base, error=f"timeout after {timeout:.0f} s", wall_s=time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                result = json.loads(line[len(MARKER):])
            except json.JSONDecodeError as e:
                return dict(base, error=f"bad worker output: {e}", wall_s=wall)
            result["wall_s"] = wall
            return result
    tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return dict(base, error=f"worker exit {proc.returncode}: {tail[0][:160]}", wall_s=wall)


def run_counted(workloads: Sequence[str], env: Dict[str, str], timeout: float,
                python: str = sys.executable) -> List[Dict[str, Any]]:
    """The ``instructions`` metric of ``workloads`` on both frontends: one process
    under callgrind imports torch once and forks a child per measurement
    (``bench.worker ... forked``); counts are deterministic, so one run is enough
    and the interpreters need not interleave."""
    pairs = [(w, fe) for k, w in enumerate(workloads)
             for fe in (FRONTENDS if k % 2 == 0 else tuple(reversed(FRONTENDS)))]
    base = {"metric": "instructions", "ok": False, "repeat": 0, "python_exe": python}
    why = callgrind.available()
    if why:
        return [dict(base, workload=w, frontend=fe, error=f"instructions metric: {why}") for w, fe in pairs]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bytegraph-bench-cg-") as out:
        cmd = callgrind.valgrind_command(os.path.join(out, "cg")) + [
            python, "-m", "bench.worker", ",".join(f"{w}:{fe}" for w, fe in pairs), "forked", "instructions"]
        got = {}
        with tempfile.TemporaryFile("w+") as errors:
            proc = subprocess.Popen(cmd, cwd=REPO, env=dict(env, **{callgrind.OUT_ENV: os.path.join(out, "cg")}),
                                    stdout=subprocess.PIPE, stderr=errors, text=True)
            # each child's result as it comes (a run stopped early keeps what it measured)
            for line in proc.stdout:
                if line.startswith(MARKER):
                    r = json.loads(line[len(MARKER):])
                    got[(r["workload"], r["frontend"])] = dict(r, repeat=0, python_exe=python)
                    print(f"  [{len(got):3d}/{len(pairs)}] {r['workload']:20s} instructions {r['frontend']:9s} "
                          f"{os.path.basename(os.path.dirname(os.path.dirname(python)))} "
                          f"{time.perf_counter() - t0:6.0f} s {'ok' if r.get('ok') else 'FAILED'}",
                          file=sys.stderr, flush=True)
                if time.perf_counter() - t0 > timeout:
                    proc.kill()
                    break
            proc.wait()
            errors.seek(0)
            err = f"exit {proc.returncode}: {errors.read().strip()[-300:]}"
    return [got.get(p) or dict(base, workload=p[0], frontend=p[1], error=err) for p in pairs]


@contextlib.contextmanager
def _private_cache(env: Dict[str, str], metric: str):
    """``env``, with an Inductor cache directory of its own for the metrics
    that measure Inductor's first call (removed afterwards)."""
    if metric not in PRIVATE_CACHE_METRICS:
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="bytegraph-bench-inductor-own-") as own:
        yield dict(env, TORCHINDUCTOR_CACHE_DIR=own)


def worker_env(cache_dir: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        "PYTHONHASHSEED": "0",
        # one inductor cache for the run: the first inductor worker compiles, later
        # ones (either frontend) may reuse kernels, and nothing leaks across runs
        "TORCHINDUCTOR_CACHE_DIR": cache_dir,
    })
    env.pop("BYTEGRAPH_LOGS", None)
    # bench/ first; a PYTHONPATH given by the caller (e.g. another bytegraph
    # checkout's src/) wins over this repository's src/
    src = os.path.join(REPO, "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", ""), src) if p)
    return env


DEFAULT_BYTEGRAPH = os.path.join(REPO, "src", "bytegraph")


def describe_machine(results: List[Dict[str, Any]], rev_at_start: str,
                     python: str = sys.executable) -> Dict[str, str]:
    probe = ("import json, platform, torch\n"
             "try:\n    import transformers; tf = transformers.__version__\n"
             "except Exception:\n    tf = 'not installed'\n"
             "print(json.dumps([platform.python_version(), torch.__version__, platform.platform(terse=True), tf]))")
    version, torch_version, plat, tf = json.loads(
        subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout)
    info = {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cores": str(os.cpu_count()),
        "python": version,
        "torch": torch_version,
        "platform": plat,
        "transformers": tf,
    }
    paths = sorted({r["bytegraph_path"] for r in results if r.get("bytegraph_path")})
    for path in paths or [DEFAULT_BYTEGRAPH]:
        info["bytegraph"] = bytegraph_revision(path)
        if path == DEFAULT_BYTEGRAPH and info["bytegraph"] != rev_at_start:
            info["bytegraph"] += f"; it changed during the run, which started at {rev_at_start}"
    native = sorted({r["bytegraph_native"] for r in results if r.get("bytegraph_native")})
    info["bytegraph native guard checks"] = ", ".join(native) or "n/a"
    return info


def bytegraph_revision(path: str) -> str:
    """Git commit of the bytegraph package the workers imported (+ whether it had local edits)."""
    where = os.path.relpath(path, REPO) if path.startswith(REPO) else path
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True, text=True)
        if rev.returncode != 0:
            return where
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=path, capture_output=True,
                               text=True)
        return f"{rev.stdout.strip()}{' + uncommitted changes' if dirty.stdout.strip() else ''} ({where})"
    except OSError:
        return where


def build_jobs(plan: Dict[str, List[str]], workloads: Optional[List[str]], metrics: Optional[List[str]],
               have_transformers: bool) -> Tuple[List[Tuple[str, str]], List[str]]:
    jobs, skipped = [], []
    for metric in METRICS:
        if metrics is not None and metric not in metrics:
            continue
        for name in plan.get(metric, []):
            if workloads is not None and name not in workloads:
                continue
            if (name == W.MEMORY_WORKLOAD) != (metric == "memory"):
                continue
            wl = W.WORKLOADS.get(name)
            if wl is not None and wl.needs_transformers and not have_transformers:
                if name not in skipped:
                    skipped.append(name)
                continue
            jobs.append((name, metric))
    return jobs, skipped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="torch.compile vs bytegraph side-by-side benchmark")
    p.add_argument("--quick", action="store_true", help="small subset, under 2 minutes")
    p.add_argument("--scale", action="store_true",
                   help="compile time at scale only: eager first calls of 4/16/48-layer GPT-2, first calls with "
                        "Inductor (cold cache and second process) (make bench-scale)")
    p.add_argument("--repeat", type=int, default=None,
                   help=f"fresh-process repetitions per measurement (default {FULL_REPEAT}, quick {QUICK_REPEAT})")
    p.add_argument("--workloads", default=None, help="comma-separated workload names (default: the plan's)")
    p.add_argument("--metrics", default=None, help=f"comma-separated subset of {','.join(METRICS)}")
    p.add_argument("--output", default=None,
                   help="markdown file to write ('-' for none; default bench/results.md, "
                        "quick: bench/results-quick.md)")
    p.add_argument("--json", default=None, help="also write all raw worker results to this file")
    p.add_argument("--timeout", type=float, default=None, help="seconds per worker (default 180, quick 60)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--also-python", default=None,
                   help="a second interpreter (another venv's python) whose workers run interleaved with this "
                        "one's, so both see the same machine conditions; its tables go to --also-output")
    p.add_argument("--also-output", default=None, help="markdown file for --also-python's run")
    p.add_argument("--also-json", default=None, help="raw results of --also-python's run")
    a = p.parse_args(argv)

    if a.list:
        for wl in W.WORKLOADS.values():
            print(f"{wl.name:20s} {wl.description}")
        print(f"{W.MEMORY_WORKLOAD:20s} memory metric only: 100 recompiles of one function")
        return 0

    workloads = a.workloads.split(",") if a.workloads else None
    metrics = a.metrics.split(",") if a.metrics else None
    for m in metrics or []:
        if m not in METRICS:
            p.error(f"unknown metric {m!r}; choose from {', '.join(METRICS)}")
    known = set(W.WORKLOADS) | {W.MEMORY_WORKLOAD}
    for w in workloads or []:
        if w not in known:
            p.error(f"unknown workload {w!r}; see --list")

    if a.output is None:
        a.output = os.path.join(REPO, "bench", "results-quick.md" if a.quick else
                                "results-scale.md" if a.scale else "results.md")
    plan = QUICK_PLAN if a.quick else SCALE_PLAN if a.scale else full_plan()
    if workloads is not None and a.quick:
        # explicit workloads in quick mode: quick metrics over exactly those workloads
        plan = {m: list(workloads) for m in QUICK_PLAN if m != "memory"}
        plan["memory"] = [W.MEMORY_WORKLOAD]
    repeat = a.repeat if a.repeat is not None else (QUICK_REPEAT if a.quick else FULL_REPEAT)
    timeout = a.timeout if a.timeout is not None else (60.0 if a.quick else 180.0)
    worker_args = ["--batches", "9", "--batch-ms", "8"] if a.quick else ["--batches", "15", "--batch-ms", "15"]
    inductor_args = ["--batches", "11", "--batch-ms", "50"]

    have_tf = transformers_available()
    no_callgrind = callgrind.available() if "instructions" in (metrics or plan) else None
    if no_callgrind:
        # counted metrics need valgrind (make valgrind); the timed ones run without it
        print(f"bench: skipping the instructions metric: {no_callgrind} (make valgrind)", file=sys.stderr)
        plan = {m: names for m, names in plan.items() if m != "instructions"}
    jobs, skipped = build_jobs(plan, workloads, metrics, have_tf)
    if not jobs:
        print("nothing to run", file=sys.stderr)
        return 2

    pythons = [sys.executable] + ([a.also_python] if a.also_python else [])
    # instruction counts are deterministic: one run each, all in one forking process per interpreter
    counted = [name for name, m in jobs if m == "instructions"]
    jobs = [(name, m) for name, m in jobs if m != "instructions"]
    n_runs = len(jobs) * len(FRONTENDS) * repeat * len(pythons)
    print(f"bench: {len(jobs)} measurements x {len(FRONTENDS)} frontends x {repeat} repeat(s) = {n_runs} worker "
          f"processes ({'quick' if a.quick else 'scale' if a.scale else 'full'})", file=sys.stderr)
    if skipped:
        print(f"bench: transformers not installed, skipping {', '.join(skipped)}", file=sys.stderr)

    # Cold starts should load bytecode caches, as an installed package does
    # (torch's are in site-packages); a module no process has imported yet
    # would otherwise be compiled from source inside a timed first call.
    compileall.compile_dir(DEFAULT_BYTEGRAPH, quiet=1)
    results: List[Dict[str, Any]] = []
    rev_at_start = bytegraph_revision(DEFAULT_BYTEGRAPH)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bytegraph-bench-inductor-") as cache_dir:
        env = worker_env(cache_dir)
        done = 0
        for r in range(repeat):
            for j, (name, metric) in enumerate(jobs):
                order = FRONTENDS if (r + j) % 2 == 0 else tuple(reversed(FRONTENDS))
                for k, py in enumerate(pythons if (r + j) % 2 == 0 else reversed(pythons)):
                    for fe in (order if k % 2 == 0 else tuple(reversed(order))):
                        inductor = metric.startswith("inductor")
                        args = inductor_args if inductor else worker_args
                        limit = timeout * (3 if inductor else 1)
                        with _private_cache(env, metric) as wenv:
                            if metric == "inductor_warm":
                                # the first process fills the cache; the second is measured
                                run_worker(name, fe, "inductor_first", wenv, limit, args, python=py)
                            res = run_worker(name, fe, metric, wenv, limit, args, python=py)
                        res["repeat"] = r
                        res["python_exe"] = py
                        results.append(res)
                        done += 1
                        status = "ok" if res.get("ok") else f"FAILED ({res.get('error')})"
                        tag = f" {os.path.basename(os.path.dirname(os.path.dirname(py)))}" if len(pythons) > 1 else ""
                        print(f"  [{done:3d}/{n_runs}] {name:20s} {metric:10s} {fe:9s}{tag} "
                              f"{res.get('wall_s', 0):6.1f} s {status}", file=sys.stderr, flush=True)
        if counted:
            print(f"bench: counting instructions of {len(counted)} workload(s) x {len(FRONTENDS)} frontends under "
                  f"callgrind, one process per interpreter, side by side", file=sys.stderr, flush=True)
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(len(pythons)) as pool:
                for batch in pool.map(lambda py: run_counted(counted, env, timeout * 40, py), pythons):
                    results.extend(batch)
    elapsed = time.perf_counter() - started

    outputs = [(sys.executable, a.output, a.json)]
    if a.also_python:
        outputs.append((a.also_python, a.also_output, a.also_json))
    for py, output, json_path in outputs:
        mine = [res for res in results if res["python_exe"] == py]
        info = describe_machine(mine, rev_at_start, py)
        mode = 'quick' if a.quick else 'scale' if a.scale else 'full'
        if jobs:
            info["mode"] = f"{mode}, {repeat} fresh-process repetition(s) per cell"
            if a.also_python:
                info["mode"] += "; workers interleaved with another interpreter's"
        else:
            info["mode"] = f"{mode}, instruction counts only"
        if counted:
            info["instruction counts"] = ("one run per cell, each in a child forked from one process "
                                          "under callgrind per interpreter")
        info["wall time"] = f"{elapsed:.0f} s"
        if skipped:
            info["skipped"] = f"{', '.join(skipped)} (transformers not installed)"
        if no_callgrind:
            info["instruction counts"] = f"not measured: {no_callgrind} (make valgrind)"
        text = render(mine, info)
        print(text, end="", flush=True)
        if output and output != "-":
            with open(output, "w") as f:
                f.write(text)
            print(f"bench: wrote {os.path.relpath(output)}", file=sys.stderr)
        if json_path:
            with open(json_path, "w") as f:
                json.dump({"info": info, "results": mine}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""DDP benchmark: eager DDP, torch.compile + DDP and bytegraph + DDP on two processes.

Usage (from the repository root; ``make bench-dist``)::

    .venv/bin/python bench/dist.py                       # writes bench/dist.md
    .venv/bin/python bench/dist.py --repeat 3 --steps 20 --backends inductor,eager

The workload is examples/ddp_train.py's GPT (width 128, 4 blocks, tied
embeddings, sequence 64, batch 8, AdamW) on synthetic tokens, wrapped as
``DDP(compile(model), bucket_cap_mb=1)`` with ``compile`` torch.compile or
bytegraph.compile and the same backend; both cut the graph at DDP's buckets
(torch.compile's DDPOptimizer, bytegraph's distributed/ddp.py).

Each measurement is a fresh pair of processes (gloo on 127.0.0.1, one thread
each, a fresh Inductor cache directory, so every first call compiles from
scratch); the configurations are run interleaved, their order rotating from
one repetition to the next.  Reported per configuration, as the median over
the repetitions (rank 0's clock):

* first call: the first training step (forward, backward, optimizer), compiling included;
* step: the median step time over ``--steps`` steps after two warm-up steps;
* graphs: the graphs the backend received (bytegraph: ``stats().graphs``;
  torch.compile: its ``counters["stats"]["unique_graphs"]`` and the DDPOptimizer's pieces).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRONTENDS = ("eager", "torch.compile", "bytegraph")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(frontend: str, backend: str, steps: int, timeout: float, mode: str = "warm", rounds: int = 0) -> dict:
    """One measurement: two worker processes; rank 0's result.  ``mode``: "warm"
    or "cold" (``frontend``'s first call and steps), "steady" (every frontend's
    steps, alternated, see :func:`steady_worker`)."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bg-bench-dist-") as tmp:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                   GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(Path(tmp, "inductor")),
                   PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
        out = Path(tmp, "result.json")
        argv = ["--steady", backend, str(steps), str(out), str(rounds)] if mode == "steady" else \
            ["--worker", frontend, backend, str(steps), str(out), mode]
        procs = [subprocess.Popen([sys.executable, __file__] + argv,
                                  env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for r in range(2)]
        try:
            logs = [p.communicate(timeout=timeout)[0] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return {"error": f"timeout after {timeout} s"}
        if not out.exists():
            return {"error": (logs[0] or "")[-1500:] + (logs[1] or "")[-1500:]}
        return json.loads(out.read_text())


def _warm_up(frontend: str, backend: str) -> None:
    """Compile and run a small unrelated function with the frontend and backend, then
    forget it (bench/worker.py's convention for a warm first call: imports and
    one-time set-up are paid outside the timed call)."""
    import torch

    def unrelated(a, b):
        return torch.cos(a) * b + 1.0
    a, b = torch.randn(4, requires_grad=True), torch.randn(4)
    if frontend == "torch.compile":
        import torch._dynamo
        torch.compile(unrelated, backend=backend)(a, b).sum().backward()
        torch._dynamo.reset()
    elif frontend == "bytegraph":
        import bytegraph
        bytegraph.compile(unrelated, backend=backend)(a, b).sum().backward()
        bytegraph.reset()


def _wrapped(frontend: str, backend: str, model, pieces: list):
    """``model`` compiled by ``frontend`` (``pieces`` collects torch.compile's
    DDPOptimizer pieces), not yet wrapped in DDP."""
    import torch
    if frontend == "torch.compile":
        from torch._dynamo.backends.registry import lookup_backend
        inner = lookup_backend(backend)

        def counting(gm, example_inputs):   # called once per DDPOptimizer piece
            pieces.append(gm)
            return inner(gm, example_inputs)
        return torch.compile(model, backend=counting)
    if frontend == "bytegraph":
        import bytegraph
        return bytegraph.compile(model, backend=backend)
    return model


def steady_worker(backend: str, steps: int, out: str, rounds: int) -> None:
    """Step times of the three configurations in one pair of processes, their
    steps alternated (rounds of ``steps`` steps, the order rotating), so every
    configuration sees the same machine load."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from examples.ddp_train import batches_for, make_model, parse, train
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    args = parse(["--steps", str(steps), "--bucket-cap-mb", "1"])
    batches = batches_for(rank, args, steps)
    ddps = {}
    for frontend in FRONTENDS:
        ddp = DDP(_wrapped(frontend, backend, make_model(args), []), bucket_cap_mb=args.bucket_cap_mb)
        train(ddp, args, rank, frontend, batches[:3], aligned=True, report=False)   # compiles; buckets rebuilt
        ddps[frontend] = ddp
    per_round = {f: [] for f in FRONTENDS}
    for r in range(rounds):
        order = FRONTENDS[r % 3:] + FRONTENDS[:r % 3]
        for frontend in order:
            _, times = train(ddps[frontend], args, rank, frontend, batches, aligned=True, report=False)
            per_round[frontend].append(statistics.median(times))
    if rank == 0:
        Path(out).write_text(json.dumps({f: {"step": statistics.median(v), "rounds": v}
                                         for f, v in per_round.items()}))
    dist.destroy_process_group()


def worker(frontend: str, backend: str, steps: int, out: str, mode: str = "warm") -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from examples.ddp_train import batches_for, make_model, parse, train
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    args = parse(["--steps", str(steps), "--bucket-cap-mb", "1"])   # (torch.compile refuses caps under 1 MiB)
    model = make_model(args)
    pieces: list = []
    ddp = DDP(_wrapped(frontend, backend, model, pieces), bucket_cap_mb=args.bucket_cap_mb)
    batches = batches_for(rank, args, steps + 3)
    if mode == "warm":
        _warm_up(frontend, backend)
        model(*batches[0]).backward()     # eager kernels warmed for every frontend alike
        model.zero_grad(set_to_none=True)
    losses, times = train(ddp, args, rank, frontend, batches, aligned=True, report=False)
    result = {"first_call": times[0], "step": statistics.median(times[3:]), "steps": times[3:],
              "losses": losses}
    if frontend == "bytegraph":
        import bytegraph
        s = bytegraph.stats()
        result.update(graphs=s.graphs, graph_breaks=s.graph_breaks, eager_fallbacks=s.eager_fallbacks)
    elif frontend == "torch.compile":
        from torch._dynamo.utils import counters
        result.update(graphs=len(pieces), graph_breaks=sum(counters["graph_break"].values()))
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()


def _ms(x):
    return "—" if x is None else (f"{x * 1e3:.0f}" if x >= 1 else f"{x * 1e3:.1f}")


def _median(rs, key):
    ok = [r[key] for r in rs if "error" not in r]
    return (statistics.median(ok), min(ok)) if ok else (None, None)


def render(first_calls: dict, steady: dict, args, started: str) -> str:
    """The markdown tables: one per backend, one row per frontend."""
    lines = ["# DDP benchmark (`make bench-dist`)", "",
             f"{started}: Python {platform.python_version()}, torch {__import__('torch').__version__}, "
             "2 processes (gloo, 127.0.0.1, 1 thread each). Workload: examples/ddp_train.py's GPT "
             "(width 128, 4 blocks, sequence 64, batch 8, AdamW), `DDP(compile(model), bucket_cap_mb=1)`.", "",
             f"- first call: the first training step, compiling included; median (min) over {args.repeat} "
             "fresh process pairs per frontend, run interleaved, each with an empty Inductor cache. *warm*: "
             "after a warm-up compile of an unrelated function (imports and one-time set-up outside the timed "
             "call, as bench/run.py's first_call); *cold*: the process's first compile.",
             f"- step: median step time; the three configurations in one process pair, compiled, then "
             f"{args.rounds} rounds of {args.steps} steps each, the order rotating, so all see the same "
             "load; median of the rounds' medians (min in brackets).", ""]
    for backend in args.backends:
        lines += [f"## backend `{backend}`", "",
                  "| frontend | first call, warm (ms) | first call, cold (ms) | step (ms) | graphs | "
                  "warm first call / torch.compile's | cold first call / torch.compile's | step / torch.compile's |",
                  "|---|---|---|---|---|---|---|---|"]
        st = steady.get(backend, {})
        refs = [_median(first_calls.get((backend, "torch.compile", m), []), "first_call")[0] for m in ("warm", "cold")]
        ref_step = st.get("torch.compile", {}).get("step")
        for frontend in FRONTENDS:
            cells = []
            for mode in ("warm", "cold"):
                rs = first_calls.get((backend if frontend != "eager" else args.backends[0], frontend, mode), [])
                med, low = _median(rs, "first_call")
                cells.append("—" if med is None else f"{_ms(med)} ({_ms(low)})")
                if med is None and rs:
                    cells[-1] = "error: " + rs[0]["error"].strip().splitlines()[-1][:100]
            rounds = st.get(frontend, {}).get("rounds")
            step = st.get(frontend, {}).get("step")
            cells.append("—" if step is None else f"{_ms(step)} ({_ms(min(rounds))})")
            graphs = next((r.get("graphs") for mode in ("warm", "cold")
                           for r in first_calls.get((backend, frontend, mode), []) if "error" not in r), None)
            cells.append("—" if graphs is None else str(graphs))
            if frontend == "bytegraph":
                mine = [_median(first_calls.get((backend, frontend, m), []), "first_call")[0] for m in ("warm", "cold")]
                ratios = [f"{a / b:.2f}" if a is not None and b else "—" for a, b in zip(mine, refs)]
                ratios.append(f"{step / ref_step:.2f}" if step is not None and ref_step else "—")
            else:
                ratios = ["—"] * 3
            lines.append(f"| {frontend} | " + " | ".join(cells + ratios) + " |")
        if "error" in st:
            lines.append(f"\nstep measurement failed: {st['error'].strip().splitlines()[-1][:200]}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="eager DDP, torch.compile + DDP and bytegraph + DDP, side by side")
    p.add_argument("--repeat", type=int, default=3, help="fresh process pairs per first-call measurement")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds of the step measurement")
    p.add_argument("--steps", type=int, default=8, help="steps per round")
    p.add_argument("--backends", default="inductor,eager", help="comma-separated: inductor, aot_eager, eager")
    p.add_argument("--modes", default="warm,cold", help="first calls: warm (after a warm-up compile of an "
                   "unrelated function, as bench/run.py's first_call) and/or cold (the process's first compile)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--output", default=str(REPO / "bench" / "dist.md"), help="markdown file ('-': none)")
    p.add_argument("--json", default=None, help="also write every measurement here")
    args = p.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    args.modes = [m for m in args.modes.split(",") if m]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    first_calls: dict = {}
    # eager DDP's first step once per repetition (it has no backend); the others per backend
    configs = [(args.backends[0], "eager", "warm")] + [(b, f, m) for b in args.backends for f in FRONTENDS[1:]
                                                      for m in args.modes]
    for rep in range(args.repeat):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for backend, frontend, mode in order:
            r = run_pair(frontend, backend, 1, args.timeout, mode)
            first_calls.setdefault((backend, frontend, mode), []).append(r)
            shown = "error" if "error" in r else f"first call {_ms(r['first_call'])} ms"
            print(f"[{rep + 1}/{args.repeat}] {frontend:13s} {backend:9s} {mode:4s} {shown}", flush=True)
    steady = {}
    for backend in args.backends:
        steady[backend] = run_pair("all", backend, args.steps, args.timeout, "steady", args.rounds)
        shown = steady[backend].get("error") or {f: _ms(v["step"]) for f, v in steady[backend].items()}
        print(f"[steps] {backend}: {shown}", flush=True)
    table = render(first_calls, steady, args, started)
    print(table)
    if args.output != "-":
        Path(args.output).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"first_calls": {"/".join(k): v for k, v in first_calls.items()},
                                               "steps": steady}, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--steady":
        steady_worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        sys.exit(main())

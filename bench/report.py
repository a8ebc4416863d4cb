"""Turn the workers' JSON results into the markdown tables of ``bench/results.md``."""

from __future__ import annotations

import statistics
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

TC, BG = "torch", "bytegraph"
LABEL = {TC: "torch.compile", BG: "bytegraph"}
RATIO = "bytegraph / torch.compile"


def fmt(x: Optional[float]) -> str:
    if x is None:
        return "—"
    ax = abs(x)
    if x == int(x) and ax < 1e6:
        return str(int(x))
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def ratio(num: Optional[float], den: Optional[float]) -> str:
    if num is None or den is None or den <= 0 or num < 0:
        return "n/a"
    return f"{num / den:.2f}"


def table(header: Sequence[str], rows: List[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header)))
           + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


class Results:
    def __init__(self, results: List[Dict[str, Any]]):
        self.by_key: Dict[Tuple[str, str, str], List[Dict[str, Any]]] = OrderedDict()
        for r in results:
            self.by_key.setdefault((r["workload"], r["metric"], r["frontend"]), []).append(r)

    def workloads(self, metric: str) -> List[str]:
        seen: List[str] = []
        for (w, m, _fe) in self.by_key:
            if m == metric and w not in seen:
                seen.append(w)
        return seen

    def runs(self, workload: str, metric: str, fe: str) -> List[Dict[str, Any]]:
        return self.by_key.get((workload, metric, fe), [])

    def ok_runs(self, workload: str, metric: str, fe: str) -> List[Dict[str, Any]]:
        return [r for r in self.runs(workload, metric, fe) if r.get("ok")]

    def values(self, workload: str, metric: str, fe: str, key: str) -> List[float]:
        return [float(r[key]) for r in self.ok_runs(workload, metric, fe) if r.get(key) is not None]

    def error(self, workload: str, metric: str, fe: str) -> Optional[str]:
        bad = [r for r in self.runs(workload, metric, fe) if not r.get("ok")]
        return bad[0].get("error", "unknown error") if bad else None

    def cells(self, workload: str, metric: str, fe: str, key: str,
              scale: float = 1.0) -> Tuple[str, str, Optional[float]]:
        """(median cell, min cell, median value) for one frontend."""
        runs = self.runs(workload, metric, fe)
        vals = [v * scale for v in self.values(workload, metric, fe, key)]
        if not runs:
            return "—", "—", None
        if not vals:
            return f"error: {short(self.error(workload, metric, fe))}", "—", None
        med = statistics.median(vals)
        note = ""
        failed = len(runs) - len(self.ok_runs(workload, metric, fe))
        if failed:
            note = f" ({failed}/{len(runs)} failed)"
        if fe == BG and any(fell_back(r) for r in self.ok_runs(workload, metric, fe)):
            note += " †"
        return fmt(med) + note, fmt(min(vals)), med


def short(reason: Optional[str], limit: int = 90) -> str:
    reason = (reason or "unknown").replace("|", "/").replace("\n", " ")
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def fell_back(r: Dict[str, Any]) -> bool:
    """A bytegraph run that captured nothing for a frame it should have captured."""
    stats = r.get("stats") or {}
    return bool(stats.get("eager_fallbacks")) or (r.get("graphs") == 0)


def two_frontend_table(res: Results, metric: str, key: str, scale: float = 1.0,
                       lead: Optional[Tuple[str, Callable[[str], str]]] = None) -> str:
    header = ["workload"]
    if lead:
        header.append(lead[0])
    header += [f"{LABEL[TC]} median", f"{LABEL[TC]} min", f"{LABEL[BG]} median", f"{LABEL[BG]} min", RATIO]
    rows = []
    for w in res.workloads(metric):
        tmed, tmin, tv = res.cells(w, metric, TC, key, scale)
        bmed, bmin, bv = res.cells(w, metric, BG, key, scale)
        row = [w] + ([lead[1](w)] if lead else []) + [tmed, tmin, bmed, bmin, ratio(bv, tv)]
        rows.append(row)
    return table(header, rows)


def shared_column(res: Results, label: str, metric: str, key: str) -> Tuple[str, Callable[[str], str]]:
    """A leading column with the median of ``key`` over both frontends' runs."""
    return label, lambda w: fmt(_median(res.values(w, metric, TC, key) + res.values(w, metric, BG, key)))


def graph_table(res: Results) -> str:
    metrics = ("first_call", "cold", "overhead")
    names: List[str] = []
    for m in metrics:
        names += [w for w in res.workloads(m) if w not in names]

    def cell(w: str, fe: str) -> Tuple[str, str, str]:
        runs = [r for m in metrics for r in res.runs(w, m, fe)]
        ok = [r for r in runs if r.get("ok")]
        if not ok:
            err = next((r.get("error") for r in runs if not r.get("ok")), None)
            return f"error: {short(err, 60)}", "—", "—"
        graphs = sorted({r.get("graphs") for r in ok}, key=str)
        breaks = sorted({r.get("breaks") for r in ok}, key=str)
        g = "/".join(str(x) for x in graphs)
        extras = []
        fallbacks = max((r.get("stats") or {}).get("eager_fallbacks", 0) for r in ok)
        if fallbacks:
            extras.append(f"{fallbacks} eager fallback(s)")
        steady = max(r.get("steady_state_new_graphs", 0) or 0 for r in ok)
        if steady:
            extras.append(f"+{steady} in steady state")
        if extras:
            g += " (" + ", ".join(extras) + ")"
        bad = [r for r in ok if not r.get("correct")]
        if bad:
            correct = f"NO: {short(bad[0].get('mismatch'), 40)}"
        else:
            errs = [r.get("max_abs_err") or 0.0 for r in ok]
            correct = "yes" if max(errs) == 0 else f"yes (max err {max(errs):.1e})"
        return g, "/".join(str(x) for x in breaks), correct

    rows = []
    for w in names:
        tg, tb, tc = cell(w, TC)
        bg, bb, bc = cell(w, BG)
        rows.append([w, tg, tb, tc, bg, bb, bc])
    header = ["workload", f"{LABEL[TC]} graphs", f"{LABEL[TC]} breaks", f"{LABEL[TC]} correct",
              f"{LABEL[BG]} graphs", f"{LABEL[BG]} breaks", f"{LABEL[BG]} correct"]
    return table(header, rows)


def inductor_table(res: Results, metric: str = "inductor") -> str:
    header = ["workload", "eager ms/call", f"{LABEL[TC]} ms/call median", f"{LABEL[TC]} min",
              f"{LABEL[BG]} ms/call median", f"{LABEL[BG]} min", f"{LABEL[TC]} speedup", f"{LABEL[BG]} speedup",
              RATIO + " (time)"]
    rows = []
    for w in res.workloads(metric):
        eager = res.values(w, metric, TC, "eager_ms") + res.values(w, metric, BG, "eager_ms")
        tmed, tmin, tv = res.cells(w, metric, TC, "compiled_ms")
        bmed, bmin, bv = res.cells(w, metric, BG, "compiled_ms")
        ts = res.values(w, metric, TC, "speedup")
        bs = res.values(w, metric, BG, "speedup")
        rows.append([w, fmt(statistics.median(eager)) if eager else "—", tmed, tmin, bmed, bmin,
                     f"{statistics.median(ts):.2f}x" if ts else "—", f"{statistics.median(bs):.2f}x" if bs else "—",
                     ratio(bv, tv)])
    return table(header, rows)


def scale_growth(res: Results) -> str:
    """First call (eager backend) at each depth of the GPT-2 scale workloads, and
    the growth from the shallowest to the deepest, per frontend."""
    names = sorted((w for w in res.workloads("first_call") if w.startswith("hf_gpt2_L")),
                   key=lambda w: int(w.rsplit("L", 1)[1]))
    if len(names) < 2:
        return ""
    rows = []
    meds = {}
    for fe in (TC, BG):
        meds[fe] = [_median(res.values(w, "first_call", fe, "first_call_ms")) for w in names]
    for fe in (TC, BG):
        m = meds[fe]
        growth = f"{m[-1] / m[0]:.2f}x" if m[0] and m[-1] else "—"
        rows.append([LABEL[fe]] + [fmt(v) for v in m] + [growth])
    header = ["frontend"] + [f"{w.rsplit('L', 1)[1]} layers (ms)" for w in names] + \
        [f"{names[-1].rsplit('L', 1)[1]} / {names[0].rsplit('L', 1)[1]} layers"]
    return table(header, rows)


def cache_table(res: Results, metric: str) -> str:
    """Inductor cache hits and misses of each frontend's measured first calls."""
    rows = []
    for w in res.workloads(metric):
        row = [w]
        for fe in (TC, BG):
            runs = res.ok_runs(w, metric, fe)
            hits = sum((r.get("cache") or {}).get("fxgraph_cache_hit", 0) for r in runs)
            miss = sum((r.get("cache") or {}).get("fxgraph_cache_miss", 0) for r in runs)
            ahits = sum((r.get("cache") or {}).get("autograd_cache_hit", 0) for r in runs)
            amiss = sum((r.get("cache") or {}).get("autograd_cache_miss", 0) for r in runs)
            row += [f"{hits} / {miss}", f"{ahits} / {amiss}"]
        rows.append(row)
    header = ["workload", f"{LABEL[TC]} FX graph cache hits / misses", f"{LABEL[TC]} AOTAutograd cache hits / misses",
              f"{LABEL[BG]} FX graph cache hits / misses", f"{LABEL[BG]} AOTAutograd cache hits / misses"]
    return table(header, rows)


MEMORY_ROWS = [
    ("graphs compiled (of 100 shapes)", "graphs", 1.0),
    ("results wrong", "wrong_results", 1.0),
    ("time for the 100 compiles, s (under tracemalloc)", "recompile_s", 1.0),
    ("Python heap retained by caches, KiB (tracemalloc)", "traced_retained_kib", 1.0),
    ("Python heap peak during compiles, KiB (tracemalloc)", "traced_peak_kib", 1.0),
    ("RSS growth, MiB", "rss_growth_mib", 1.0),
    ("dropped input tensors still alive (of 100)", "alive_inputs", 1.0),
    ("dropped config objects still alive (of 100)", "alive_cfgs", 1.0),
    ("dropped function + closure tensor still alive (of 2)", "alive_dropped_fn", 1.0),
    ("new graphs when 2 fresh, equal config objects are passed with a seen shape", "new_graphs_equal_cfg", 1.0),
]


def memory_table(res: Results) -> str:
    rows = []
    for w in res.workloads("memory"):
        for label, key, scale in MEMORY_ROWS:
            tmed, tmin, tv = res.cells(w, "memory", TC, key, scale)
            bmed, bmin, bv = res.cells(w, "memory", BG, key, scale)
            rows.append([label, tmed, tmin, bmed, bmin, ratio(bv, tv)])
    header = ["measurement", f"{LABEL[TC]} median", f"{LABEL[TC]} min", f"{LABEL[BG]} median",
              f"{LABEL[BG]} min", RATIO]
    return table(header, rows)


def failures(res: Results) -> List[str]:
    seen: Dict[Tuple[str, str, str], Tuple[int, int, str]] = OrderedDict()
    for (w, m, fe), runs in res.by_key.items():
        bad = [r for r in runs if not r.get("ok")]
        if bad:
            seen[(w, m, fe)] = (len(bad), len(runs), bad[0].get("error", "unknown"))
    return [f"- `{w}` / {m} / {LABEL[fe]}: {n}/{total} run(s) failed: `{short(err, 300)}`"
            for (w, m, fe), (n, total, err) in seen.items()]


def break_notes(res: Results) -> List[str]:
    """bytegraph frames that fell back to eager or captured nothing."""
    notes = []
    for (w, m, fe), runs in res.by_key.items():
        if fe != BG or m not in ("first_call", "cold", "overhead"):
            continue
        for r in runs:
            if r.get("ok") and fell_back(r):
                notes.append(f"- `{w}`: bytegraph captured {r.get('graphs')} graph(s), "
                             f"stats {r.get('stats')}")
                break
    return sorted(set(notes))


def render(results: List[Dict[str, Any]], info: Dict[str, str]) -> str:
    res = Results(results)
    parts = ["# bytegraph vs torch.compile", ""]
    parts += [f"- {k}: {v}" for k, v in info.items()]
    parts += ["", "Each cell: median and min over fresh-process repetitions (`python -m bench.worker`), the two "
              "frontends interleaved; torch threads = 1 in every worker. "
              "The last column is bytegraph's median divided by torch.compile's (< 1: bytegraph is cheaper). "
              "† = bytegraph ran part or all of the workload eagerly (a fallback, or no graph captured)."]
    sections = [
        ("first_call", "First call, warm (ms)",
         'backend="eager"; after a warm-up compile of an unrelated function in the same process and a frontend '
         "reset; wraps, traces, builds guards and runs the function once.",
         lambda: two_frontend_table(res, "first_call", "first_call_ms")),
        ("cold", "First call, cold (ms)",
         'backend="eager"; fresh process, first compile ever; includes importing the frontend '
         "(`torch._dynamo` is already imported by `transformers` for the `hf_*` workloads).",
         lambda: two_frontend_table(res, "cold", "first_call_ms")),
        ("cold", "First call, cold, outside imports of torch modules (ms)",
         "The same runs minus the time spent importing torch's own modules (`torch.*`, `sympy`; second column, "
         "median of both frontends' runs): torch.compile imports `torch._dynamo` on its first call; for bytegraph, "
         "torch's `ShapeEnv` and `FakeTensorMode` import `sympy` and, in torch 2.13, all of `torch._dynamo` "
         "as well. What remains is each frontend's own cold cost: importing its own code outside `torch`, first "
         "trace, guards, codegen, the call.",
         lambda: two_frontend_table(res, "cold", "beyond_torch_imports_ms",
                                    lead=shared_column(res, "torch imports ms", "cold", "torch_imports_ms"))),
        ("overhead", "Steady-state per-call overhead over eager (µs)",
         'backend="eager"; (compiled − plain eager) time per call, medians of interleaved batches of calls. '
         "Negative: the captured graph runs faster than the eager Python it replaces (module `__call__` "
         "machinery, Python-side checks in the model code).",
         lambda: two_frontend_table(res, "overhead", "overhead_us",
                                    lead=shared_column(res, "eager µs/call", "overhead", "eager_us"))),
        ("overhead", "Steady-state time outside the captured graphs (µs/call)",
         'backend="eager"; a second compile whose graphs time themselves: compiled time per call minus the time '
         "spent inside the graphs, i.e. what the frontend adds around them (guard checks, argument unpacking, "
         "result rebuilding, module wrappers, code between graphs). Unlike the row above it does not credit the "
         "graph for skipping eager Python code.",
         lambda: two_frontend_table(res, "overhead", "outside_graph_us",
                                    lead=shared_column(res, "in-graph µs/call", "overhead", "in_graph_us"))),
        ("instructions", "First call, warm, in instructions (millions)",
         'The `first_call` measurement counted instead of timed: CPU instructions executed, under valgrind\'s '
         "callgrind (`bench/callgrind.py`), one run per cell; deterministic, so it compares two machines or "
         "two interpreters where timings cannot.",
         lambda: two_frontend_table(res, "instructions", "first_call_minstr")),
        ("instructions", "Steady-state per-call overhead over eager, in instructions (thousands per call)",
         "(compiled − plain eager) instructions per call, averaged over 10–200 calls (fewer for workloads whose call runs millions of instructions), counted by callgrind.",
         lambda: two_frontend_table(res, "instructions", "overhead_kinstr",
                                    lead=shared_column(res, "eager kinstr/call", "instructions", "eager_kinstr"))),
        ("instructions", "Steady-state instructions outside the captured graphs (thousands per call)",
         "The same calls with callgrind's counting switched off inside every graph call: what the frontend "
         "executes around its graphs.",
         lambda: two_frontend_table(res, "instructions", "outside_graph_kinstr")),
        ("inductor", 'Steady state with backend="inductor"',
         "Per-call time of the compiled function and speedup over eager (higher speedup is better).",
         lambda: inductor_table(res)),
        ("inductor_first", 'First call with backend="inductor", cold cache (s)',
         "A fresh Inductor cache directory per worker, which has seen only a small unrelated function compiled "
         "first (so Inductor's one-time setup -- precompiled header, compile workers, imports -- is behind both "
         "frontends); then the workload's first call, wall-clock.",
         lambda: two_frontend_table(res, "inductor_first", "first_call_ms", scale=1e-3)),
        ("inductor_first", 'The same first calls in CPU seconds (the process and its compile workers)',
         "Less sensitive to a loaded machine than wall-clock: user+system time of the worker and of the "
         "compiler subprocesses Inductor started during the call.",
         lambda: two_frontend_table(res, "inductor_first", "first_call_cpu_s")),
        ("inductor_first", 'Steady state after that first Inductor call',
         "Per-call time of the compiled function and speedup over eager, in the same workers.",
         lambda: inductor_table(res, "inductor_first")),
        ("inductor_warm", 'Second-process first call with backend="inductor" (s)',
         "An `inductor_first` worker of the same frontend filled the cache directory; a second process then "
         "makes the first call (wall-clock; the frontend and the model are imported and built before the clock "
         "starts).",
         lambda: two_frontend_table(res, "inductor_warm", "first_call_ms", scale=1e-3)),
        ("inductor_warm", "Inductor caches in the second process",
         "Hits / misses of Inductor's FX graph cache and of the AOTAutograd cache, summed over the repetitions.",
         lambda: cache_table(res, "inductor_warm")),
        ("first_call", "Eager first call by depth (GPT-2 from config, d=64)",
         'The `hf_gpt2_L*` rows of the first table: backend="eager", medians, and the growth from the '
         "shallowest to the deepest model.",
         lambda: scale_growth(res)),
        ("memory", "Compiled caches after 100 recompiles",
         "One function called with 100 input shapes (static shapes; torch.compile with dynamic=False and the "
         "recompile limit raised) and a fresh user config object each call; backend is a counting eager backend.",
         lambda: memory_table(res)),
    ]
    for metric, title, legend, make in sections:
        if res.workloads(metric):
            body = make()
            if body:
                parts += ["", f"## {title}", "", legend, "", body]
    if any(res.workloads(m) for m in ("first_call", "cold", "overhead")):
        parts += ["", "## Graphs, breaks and correctness (backend=\"eager\")", "",
                  "Graphs handed to a counting backend and graph breaks reported by the frontend; correct = "
                  "compiled output allclose to eager output.", "", graph_table(res)]
    notes = break_notes(res)
    if notes:
        parts += ["", "## bytegraph fallbacks", ""] + notes
    fails = failures(res)
    if fails:
        parts += ["", "## Failures", ""] + fails
    return "\n".join(parts) + "\n"


def _median(vals: List[float]) -> Optional[float]:
    return statistics.median(vals) if vals else None

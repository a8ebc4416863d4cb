"""One measurement in a fresh process.

Usage::

    python -m bench.worker <workload> <frontend> <metric> [--batches N] [--batch-ms MS]
    python -m bench.worker <workload>:<frontend>,... forked <metric>   # one forked child each

``frontend`` is ``torch`` (torch.compile) or ``bytegraph``; ``metric`` is one of

* ``first_call``: warm first-call time with backend="eager": a small unrelated
  function is compiled and called first (so both frontends' lazy imports and
  one-time setup are paid), the frontend is reset, then the workload is
  compiled and called once.  Also records graph/break counts and correctness.
* ``cold``: the same first call in a process that never compiled anything;
  the time includes importing the frontend (``bytegraph`` /
  ``torch._dynamo``; note that ``transformers`` imports ``torch._dynamo``
  itself, so for the ``hf_*`` workloads that import is already done).
* ``overhead``: steady-state per-call time of the compiled function
  (backend="eager") minus that of the plain eager function, from
  interleaved batches of calls; medians over batches.  Then, after a reset,
  a second compile with graphs that time themselves gives the per-call time
  spent outside the graphs (the frontend's own cost around them).
* ``instructions``: the ``first_call`` and ``overhead`` measurements counted in
  CPU instructions instead of time, under valgrind's callgrind (``bench/run.py``
  starts the worker under it; see ``bench/callgrind.py``): the warm first call,
  the compiled and the eager function's instructions per call, and the
  compiled call's instructions outside its graphs.  Deterministic where
  timings of a few microseconds are not, so it is what compares two
  interpreters' per-call ratios.
* ``inductor``: steady-state per-call time with backend="inductor" against
  eager, and the speedup.
* ``inductor_first``: the first call with backend="inductor" in a process
  whose Inductor cache (``TORCHINDUCTOR_CACHE_DIR``, fresh per worker, set by
  ``bench/run.py``) has seen only a small unrelated function, compiled first
  so that both frontends have Inductor's one-time setup (precompiled header,
  compile workers, imports) behind them; then the steady state as in
  ``inductor``.
* ``inductor_warm``: the first call with backend="inductor" in a second
  process, after an ``inductor_first`` worker of the same frontend filled the
  cache directory: Inductor's FX graph cache and AOTAutograd cache hit when
  the frontend's graphs are the same across processes.
* ``memory``: 100 recompiles of one function (100 input shapes), tracemalloc
  and RSS growth of the caches, and weakref checks that dropped user objects
  are not kept alive (workload name ``recompile_100``).

The result is printed as one JSON object on the last stdout line, prefixed
with ``BENCH_JSON:``.  Failures are results too (``"ok": false``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.abc
import importlib.util
import json
import os
import sys
import time
import traceback
import tracemalloc
import weakref
from statistics import median
from typing import Any, Dict, List, Tuple

MARKER = "BENCH_JSON:"
FRONTENDS = ("torch", "bytegraph")
METRICS = ("first_call", "cold", "overhead", "instructions", "inductor", "inductor_first", "inductor_warm",
           "memory")

# Same threading for both frontends, before torch is imported.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from bench import workloads as W  # noqa: E402

EAGER_RTOL, EAGER_ATOL = 1e-4, 1e-5
INDUCTOR_RTOL, INDUCTOR_ATOL = 1e-3, 1e-3


def now_ns() -> int:
    return time.perf_counter_ns()


# ---------------------------------------------------------------------------
# the two frontends behind one interface


class CountingEager:
    """A custom backend that counts the graphs it receives and runs them as they are
    (exactly what both frontends' ``"eager"`` backends do: return ``gm.forward``)."""

    def __init__(self):
        self.count = 0
        self.ops: List[int] = []

    def __call__(self, gm, example_inputs):
        self.count += 1
        self.ops.append(sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes))
        return gm.forward


class TimingEager:
    """Like :class:`CountingEager`, but the returned callables add the time spent
    inside the graph to ``self.in_graph_ns``, so the time a compiled call spends
    outside its graphs (guards, argument and result handling, glue) can be split off."""

    def __init__(self):
        self.count = 0
        self.in_graph_ns = 0

    def __call__(self, gm, example_inputs):
        self.count += 1
        forward = gm.forward
        clock = time.perf_counter_ns

        def timed(*args):
            t0 = clock()
            out = forward(*args)
            self.in_graph_ns += clock() - t0
            return out
        return timed


class UncountedEager:
    """Like :class:`CountingEager`, but callgrind does not count the instructions
    spent inside the graphs (collection is toggled off around each graph call)."""

    def __init__(self, cg):
        self.count = 0
        self.graph_calls = 0
        self._cg = cg

    def __call__(self, gm, example_inputs):
        self.count += 1
        return self.wrap(gm.forward)

    def wrap(self, forward):
        toggle = self._cg.toggle

        def uncounted(*args):
            toggle()
            try:
                self.graph_calls += 1
                return forward(*args)
            finally:
                toggle()
        return uncounted


class TorchFrontend:
    name = "torch.compile"

    def load(self) -> None:
        import torch._dynamo  # noqa: F401  (torch.compile would import it lazily on first call)

    def compile(self, fn, backend, **kwargs):
        return torch.compile(fn, backend=backend, **kwargs)

    def reset(self) -> None:
        import torch._dynamo
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()

    def breaks(self) -> int:
        from torch._dynamo.utils import counters
        return int(sum(counters["graph_break"].values()))

    def graphs_compiled(self) -> int:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])

    def extra(self) -> Dict[str, Any]:
        from torch._dynamo.utils import counters
        reasons = sorted(counters["graph_break"])
        return {"break_reasons": [r.splitlines()[0][:160] for r in reasons[:5]],
                "calls_captured": int(counters["stats"]["calls_captured"])}

    def set_cache_limit(self, n: int) -> None:
        import torch._dynamo.config as cfg
        for key in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, key):
                setattr(cfg, key, n)
        for key in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(cfg, key):
                setattr(cfg, key, max(n * 2, getattr(cfg, key)))

    def static_kwargs(self) -> Dict[str, Any]:
        # no automatic dynamic shapes: every new shape is a recompile, as in bytegraph
        return {"dynamic": False}


class BytegraphFrontend:
    name = "bytegraph"

    def load(self) -> None:
        import bytegraph  # noqa: F401

    def compile(self, fn, backend, **kwargs):
        import bytegraph
        return bytegraph.compile(fn, backend=backend, **kwargs)

    def reset(self) -> None:
        import bytegraph
        bytegraph.reset()

    def breaks(self) -> int:
        import bytegraph
        return int(bytegraph.stats().graph_breaks)

    def graphs_compiled(self) -> int:
        import bytegraph
        return int(bytegraph.stats().graphs)

    def extra(self) -> Dict[str, Any]:
        import bytegraph
        return {"stats": bytegraph.stats().as_dict()}

    def set_cache_limit(self, n: int) -> None:
        import bytegraph
        bytegraph.config.cache_size_limit = n

    def static_kwargs(self) -> Dict[str, Any]:
        import inspect
        import bytegraph
        # static shapes, like torch.compile(dynamic=False) (older bytegraph: always static)
        return {"dynamic": False} if "dynamic" in inspect.signature(bytegraph.compile).parameters else {}


def get_frontend(name: str):
    return {"torch": TorchFrontend, "bytegraph": BytegraphFrontend}[name]()


# ---------------------------------------------------------------------------
# helpers


def call(fn, case: W.Case):
    return fn(*case.args, **case.kwargs)


def warm_up_frontend(fe) -> None:
    """Compile and run a small unrelated function, then forget it."""
    def unrelated(a, b):
        return torch.cos(a) * b + 1.0

    compiled = fe.compile(unrelated, CountingEager())
    a, b = torch.randn(4), torch.randn(4)
    compiled(a, b)
    compiled(a, b)
    del compiled
    fe.reset()
    gc.collect()


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:200]


def rss_kib() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def graph_summary(fe, counter: CountingEager) -> Dict[str, Any]:
    out = {"graphs": counter.count, "breaks": fe.breaks(), "ops_per_graph": counter.ops[:20]}
    out.update(fe.extra())
    return out


def check(expected, actual, rtol, atol) -> Dict[str, Any]:
    ok, err, why = W.compare(expected, actual, rtol, atol)
    return {"correct": ok, "max_abs_err": err if err != float("inf") else None, "mismatch": why}


# ---------------------------------------------------------------------------
# metrics


class TorchImportTimer(importlib.abc.MetaPathFinder):
    """Times the imports of torch's own modules (``torch.*`` and its ``sympy``)
    that happen while it is installed, whoever triggers them: torch.compile
    imports ``torch._dynamo`` on its first call; for bytegraph, torch's
    ``ShapeEnv`` and ``FakeTensorMode`` import ``sympy`` and ``torch._dynamo``.
    Nested imports are counted once (inside the outermost one)."""

    PREFIXES = ("torch.", "sympy", "mpmath")

    def __init__(self):
        self.ns = 0
        self._depth = 0
        self._busy = False

    def find_spec(self, fullname, path, target=None):
        if self._busy or not fullname.startswith(self.PREFIXES):
            return None
        self._busy = True  # find the real spec with the other finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def timed(module):
            self._depth += 1
            t0 = now_ns()
            try:
                exec_module(module)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.ns += now_ns() - t0
        spec.loader.exec_module = timed
        return spec


def measure_first_call(fe, case: W.Case, *, cold: bool) -> Dict[str, Any]:
    expected = call(case.fn, case)       # eager reference; also warms eager kernels
    gc.collect()
    counter = CountingEager()
    torch_imports = TorchImportTimer()
    t0 = now_ns()
    if cold:
        sys.meta_path.insert(0, torch_imports)
        fe.load()
    t_import = now_ns()
    compiled = fe.compile(case.fn, counter)
    result = call(compiled, case)
    t1 = now_ns()
    if torch_imports in sys.meta_path:
        sys.meta_path.remove(torch_imports)
    call(compiled, case)
    t2 = now_ns()
    out = {"first_call_ms": (t1 - t0) / 1e6, "import_ms": (t_import - t0) / 1e6,
           "second_call_ms": (t2 - t1) / 1e6}
    if cold:
        out["torch_imports_ms"] = torch_imports.ns / 1e6
        out["beyond_torch_imports_ms"] = (t1 - t0 - torch_imports.ns) / 1e6
    out.update(graph_summary(fe, counter))
    out.update(check(expected, result, EAGER_RTOL, EAGER_ATOL))
    return out


def _time_batch(fn, case: W.Case, n: int) -> float:
    args, kwargs = case.args, case.kwargs
    t0 = now_ns()
    for _ in range(n):
        fn(*args, **kwargs)
    return (now_ns() - t0) / n


def interleaved_per_call(eager, compiled, case: W.Case, batches: int, batch_ms: float) -> Tuple[float, float]:
    """Median ns/call of ``eager`` and of ``compiled`` over alternating batches."""
    for _ in range(3):
        call(eager, case)
        call(compiled, case)
    # calibrate the batch size on the slower of the two
    probe = max(_time_batch(eager, case, 3), _time_batch(compiled, case, 3))
    n = max(1, int(batch_ms * 1e6 / max(probe, 1.0)))
    e_times, c_times = [], []
    gc.collect()
    gc.disable()
    try:
        for i in range(batches):
            if i % 2 == 0:
                e_times.append(_time_batch(eager, case, n))
                c_times.append(_time_batch(compiled, case, n))
            else:
                c_times.append(_time_batch(compiled, case, n))
                e_times.append(_time_batch(eager, case, n))
    finally:
        gc.enable()
    return median(e_times), median(c_times), n


def outside_graph_per_call(fe, case: W.Case, batches: int, batch_ms: float) -> Tuple[float, float]:
    """Median ns/call spent outside / inside the captured graphs (a fresh compile with
    :class:`TimingEager`)."""
    timer = TimingEager()
    compiled = fe.compile(case.fn, timer)
    for _ in range(3):
        call(compiled, case)
    probe = _time_batch(compiled, case, 3)
    n = max(1, int(batch_ms * 1e6 / max(probe, 1.0)))
    outside, inside = [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(batches):
            timer.in_graph_ns = 0
            total = _time_batch(compiled, case, n) * n
            outside.append((total - timer.in_graph_ns) / n)
            inside.append(timer.in_graph_ns / n)
    finally:
        gc.enable()
    return median(outside), median(inside)


def measure_overhead(fe, case: W.Case, batches: int, batch_ms: float) -> Dict[str, Any]:
    expected = call(case.fn, case)
    counter = CountingEager()
    compiled = fe.compile(case.fn, counter)
    result = call(compiled, case)
    graphs_after_first = counter.count
    eager_ns, compiled_ns, n = interleaved_per_call(case.fn, compiled, case, batches, batch_ms)
    out = {"eager_us": eager_ns / 1e3, "compiled_us": compiled_ns / 1e3,
           "overhead_us": (compiled_ns - eager_ns) / 1e3, "calls_per_batch": n, "batches": batches,
           "steady_state_new_graphs": counter.count - graphs_after_first}
    out.update(graph_summary(fe, counter))
    out.update(check(expected, result, EAGER_RTOL, EAGER_ATOL))
    # second part: the same steady state, split into time inside / outside the graphs
    del compiled
    fe.reset()
    outside_ns, inside_ns = outside_graph_per_call(fe, case, batches, batch_ms)
    out.update(outside_graph_us=outside_ns / 1e3, in_graph_us=inside_ns / 1e3)
    return out


#: instructions per steady-state count: enough calls for a stable average (a count
#: is exact; the calls only average out per-call differences), few enough that a
#: model whose call runs millions of instructions does not take minutes under callgrind
COUNT_BUDGET = 40e6


def measure_instructions(fe, case: W.Case) -> Dict[str, Any]:
    """Instruction counts (see the module docstring): each steady-state count
    covers ``calls`` calls (10 to 200, from ``COUNT_BUDGET`` and one eager
    call's count), after ``warm`` uncounted ones."""
    from bench.callgrind import Callgrind
    cg = Callgrind.load()
    # instrumented from here: code costs more on its first run after callgrind starts
    # instrumenting, so the eager runs before the first call take that cost for the
    # code they share with it (torch's operators), as they do in first_call's timing
    cg.start()
    expected = call(case.fn, case)
    for _ in range(3):
        call(case.fn, case)
    gc.collect()
    cg.count("eager warm-up")
    call(case.fn, case)
    probe = cg.count("one eager call")
    # the same for both frontends: it depends on the eager function only (to within a
    # few percent of one call's count, which lands in one bucket of 10 calls)
    calls = int(max(10, min(200, COUNT_BUDGET / max(probe, 1) // 10 * 10)))
    warm = max(50, min(300, calls * 3 // 2))
    counter = CountingEager()
    cg.count("eager probe")
    compiled = fe.compile(case.fn, counter)
    result = call(compiled, case)
    first = cg.count("first call")
    graphs_after_first = counter.count
    # warm: the interpreter specializes the code over its first runs (and backs off
    # for a while where it cannot), which would land in the counts
    for _ in range(warm):
        call(compiled, case)
        call(case.fn, case)
        call(_noop, case)
    gc.collect()
    gc.disable()        # a collection would land in one loop and not the other
    try:
        cg.count("warm-up")
        for _ in range(calls):
            call(compiled, case)
        compiled_n = cg.count("compiled calls")
        for _ in range(calls):
            call(case.fn, case)
        eager_n = cg.count("eager calls")
        # the loop itself, so that per-call counts hold only the calls
        for _ in range(calls):
            call(_noop, case)
        loop_n = cg.count("empty loop")
    finally:
        gc.enable()
    out = {"first_call_minstr": first / 1e6,
           "compiled_kinstr": (compiled_n - loop_n) / calls / 1e3,
           "eager_kinstr": (eager_n - loop_n) / calls / 1e3,
           "overhead_kinstr": (compiled_n - eager_n) / calls / 1e3,
           "calls": calls, "steady_state_new_graphs": counter.count - graphs_after_first}
    out.update(graph_summary(fe, counter))
    out.update(check(expected, result, EAGER_RTOL, EAGER_ATOL))
    # the same steady state with the graphs' own instructions left out
    del compiled
    fe.reset()
    uncounted = UncountedEager(cg)
    compiled = fe.compile(case.fn, uncounted)
    wrapped_noop = uncounted.wrap(_noop)
    for _ in range(warm):
        call(compiled, case)
        wrapped_noop()
        _noop()
    gc.collect()
    gc.disable()
    try:
        cg.count("warm-up")
        uncounted.graph_calls = 0
        for _ in range(calls):
            call(compiled, case)
        outside_n = cg.count("compiled calls, graphs not counted")
        graph_calls = uncounted.graph_calls
        # what the toggling wrapper itself leaves in the count, per graph call
        for _ in range(calls):
            wrapped_noop()
        wrapper_n = cg.count("the wrapper around a no-op")
        for _ in range(calls):
            _noop()
        noop_n = cg.count("a no-op")
    finally:
        gc.enable()
    cg.stop()
    per_wrapper = (wrapper_n - noop_n) / calls
    out["outside_graph_kinstr"] = (outside_n - loop_n - graph_calls * per_wrapper) / calls / 1e3
    out["graph_calls_per_call"] = graph_calls / calls
    return out


def _noop(*args, **kwargs):
    """Called like the workload, it is what the loop and ``call`` cost around it."""
    return None


def measure_inductor(fe, case: W.Case, batches: int, batch_ms: float) -> Dict[str, Any]:
    expected = call(case.fn, case)
    compiled = fe.compile(case.fn, "inductor")
    t0 = now_ns()
    result = call(compiled, case)
    first_ms = (now_ns() - t0) / 1e6
    graphs_after_first = fe.graphs_compiled()
    eager_ns, compiled_ns, n = interleaved_per_call(case.fn, compiled, case, batches, batch_ms)
    out = {"eager_ms": eager_ns / 1e6, "compiled_ms": compiled_ns / 1e6, "speedup": eager_ns / compiled_ns,
           "first_call_ms": first_ms, "calls_per_batch": n, "batches": batches,
           "graphs": graphs_after_first, "breaks": fe.breaks(),
           "steady_state_new_graphs": fe.graphs_compiled() - graphs_after_first}
    out.update(fe.extra())
    out.update(check(expected, result, INDUCTOR_RTOL, INDUCTOR_ATOL))
    return out


def warm_up_inductor(fe) -> None:
    """Compile and run a small unrelated function with Inductor, then forget it."""
    def unrelated(a, b):
        return torch.cos(a) * b + 1.0

    compiled = fe.compile(unrelated, "inductor")
    compiled(torch.randn(4), torch.randn(4))
    del compiled
    fe.reset()
    gc.collect()


def inductor_cache_counters() -> Dict[str, int]:
    """Inductor's FX graph cache and AOTAutograd cache hits and misses so far."""
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return {}
    out = {}
    for group, names in (("inductor", ("fxgraph_cache_hit", "fxgraph_cache_miss")),
                         ("aot_autograd", ("autograd_cache_hit", "autograd_cache_miss"))):
        for name in names:
            out[name] = int(counters[group][name])
    return out


def measure_inductor_first(fe, case: W.Case, batches: int, batch_ms: float, warm: bool) -> Dict[str, Any]:
    import resource

    def cpu_s() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    expected = call(case.fn, case)
    if not warm:
        warm_up_inductor(fe)
    before = inductor_cache_counters()
    gc.collect()
    c0 = cpu_s()
    t0 = now_ns()
    compiled = fe.compile(case.fn, "inductor")
    result = call(compiled, case)
    first_ms = (now_ns() - t0) / 1e6
    cpu = cpu_s() - c0
    after = inductor_cache_counters()
    out = {"first_call_ms": first_ms, "first_call_cpu_s": cpu, "graphs": fe.graphs_compiled(), "breaks": fe.breaks(),
           "cache": {k: after.get(k, 0) - before.get(k, 0) for k in after}}
    out.update(fe.extra())
    out.update(check(expected, result, INDUCTOR_RTOL, INDUCTOR_ATOL))
    if not warm:
        eager_ns, compiled_ns, n = interleaved_per_call(case.fn, compiled, case, batches, batch_ms)
        out.update(eager_ms=eager_ns / 1e6, compiled_ms=compiled_ns / 1e6, speedup=eager_ns / compiled_ns,
                   calls_per_batch=n, batches=batches)
    return out


def _make_recompile_target():
    """A fresh closure (over a fresh tensor) so we can drop both and check they die."""
    bias = torch.full((1,), 0.25)

    def shifted_scaled_sin(x, cfg):
        return W.scaled_sin(x, cfg) + bias
    return shifted_scaled_sin, bias


def measure_memory(fe, n_recompiles: int = 100) -> Dict[str, Any]:
    fe.set_cache_limit(n_recompiles * 2)
    fn, bias = _make_recompile_target()
    fn_ref, bias_ref = weakref.ref(fn), weakref.ref(bias)
    del bias
    counter = CountingEager()
    gc.collect()
    tracemalloc.start()
    base_traced = tracemalloc.get_traced_memory()[0]
    base_rss = rss_kib()
    tracemalloc.reset_peak()
    compiled = fe.compile(fn, counter, **fe.static_kwargs())
    input_refs, cfg_refs = [], []
    wrong = 0
    t0 = now_ns()
    for i in range(n_recompiles):
        x = torch.randn(i + 1)
        cfg = W.ScaleConfig(0.5)
        out = compiled(x, cfg)
        if not torch.allclose(out, fn(x, cfg), rtol=EAGER_RTOL, atol=EAGER_ATOL):
            wrong += 1
        input_refs.append(weakref.ref(x))
        cfg_refs.append(weakref.ref(cfg))
        del x, cfg, out
    elapsed = (now_ns() - t0) / 1e9
    gc.collect()
    traced_now, traced_peak = tracemalloc.get_traced_memory()
    rss_after = rss_kib()
    alive_inputs = sum(r() is not None for r in input_refs)
    alive_cfgs = sum(r() is not None for r in cfg_refs)
    graphs = counter.count
    # same shape as an earlier call, fresh config objects equal to the earlier ones:
    # a frontend that guards on object identity compiles again here
    before = counter.count
    x = torch.randn(1)
    compiled(x, W.ScaleConfig(0.5))
    compiled(x, W.ScaleConfig(0.5))
    new_graphs_equal_cfg = counter.count - before
    del x
    # drop the compiled wrapper and the user function: does anything keep them alive?
    del compiled, fn
    gc.collect()
    alive_dropped = (fn_ref() is not None) + (bias_ref() is not None)
    tracemalloc.stop()
    return {
        "recompiles": n_recompiles, "graphs": graphs, "breaks": fe.breaks(), "wrong_results": wrong,
        "correct": wrong == 0,
        "recompile_s": elapsed,
        "traced_retained_kib": (traced_now - base_traced) / 1024,
        "traced_peak_kib": (traced_peak - base_traced) / 1024,
        "rss_growth_mib": (rss_after - base_rss) / 1024,
        "alive_inputs": alive_inputs, "alive_cfgs": alive_cfgs, "alive_dropped_fn": alive_dropped,
        "new_graphs_equal_cfg": new_graphs_equal_cfg,
    }


# ---------------------------------------------------------------------------


def run(workload: str, frontend: str, metric: str, batches: int, batch_ms: float) -> Dict[str, Any]:
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)      # inference for both frontends
    fe = get_frontend(frontend)
    if metric != "cold":
        fe.load()
    if metric in ("first_call", "memory", "instructions"):
        warm_up_frontend(fe)
    if metric == "memory":
        return measure_memory(fe)
    case = W.WORKLOADS[workload].build()
    if metric in ("first_call", "cold"):
        return measure_first_call(fe, case, cold=metric == "cold")
    if metric == "overhead":
        return measure_overhead(fe, case, batches, batch_ms)
    if metric == "instructions":
        return measure_instructions(fe, case)
    if metric == "inductor":
        return measure_inductor(fe, case, batches, batch_ms)
    if metric in ("inductor_first", "inductor_warm"):
        return measure_inductor_first(fe, case, batches, batch_ms, warm=metric == "inductor_warm")
    raise ValueError(f"unknown metric {metric!r}")


def measure_and_print(workload: str, frontend: str, metric: str, batches: int, batch_ms: float) -> None:
    """One measurement; its result is printed as one ``MARKER`` line."""
    t0 = time.perf_counter()
    result: Dict[str, Any] = {"workload": workload, "frontend": frontend, "metric": metric}
    try:
        result.update(run(workload, frontend, metric, batches, batch_ms))
        result["ok"] = True
    except Exception as exc:  # a failure is a result, never a crash of the benchmark
        result.update(ok=False, error=short_error(exc), traceback=traceback.format_exc()[-4000:])
    result["worker_s"] = time.perf_counter() - t0
    if "bytegraph" in sys.modules:
        result["bytegraph_path"] = os.path.dirname(os.path.abspath(sys.modules["bytegraph"].__file__))
        result["bytegraph_native"] = sys.modules["bytegraph"].native.status()
    sys.stdout.flush()
    print(MARKER + json.dumps(result, default=str), flush=True)


def run_forked(jobs: List[Tuple[str, str]], metric: str, batches: int, batch_ms: float) -> None:
    """Each ``(workload, frontend)`` measured in a child forked from this process,
    which has imported torch (and transformers, when a job needs it) but nothing
    else: a fresh process per measurement, without paying the import each time.
    The ``instructions`` metric uses this because under valgrind importing torch
    takes a minute or two (the CUDA builds' libraries are large)."""
    if any(W.WORKLOADS[w].needs_transformers for w, _fe in jobs if w in W.WORKLOADS):
        import transformers  # noqa: F401
    for workload, frontend in jobs:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                measure_and_print(workload, frontend, metric, batches, batch_ms)
            except BaseException:
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print(MARKER + json.dumps({"workload": workload, "frontend": frontend, "metric": metric,
                                       "ok": False, "error": f"forked worker exit status {status}"}), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", help="a workload, or with --forked a comma-separated list of workload:frontend")
    p.add_argument("frontend", choices=FRONTENDS + ("forked",))
    p.add_argument("metric", choices=METRICS)
    p.add_argument("--batches", type=int, default=21, help="timed batches per function (overhead, inductor)")
    p.add_argument("--batch-ms", type=float, default=20.0, help="target duration of one batch")
    a = p.parse_args(argv)
    if a.frontend == "forked":
        jobs = [tuple(job.split(":")) for job in a.workload.split(",")]
        for w, fe in jobs:
            if w not in W.WORKLOADS or fe not in FRONTENDS:
                p.error(f"bad job {w}:{fe}")
        run_forked(jobs, a.metric, a.batches, a.batch_ms)
        return 0
    if a.workload not in W.WORKLOADS and a.workload != W.MEMORY_WORKLOAD:
        p.error(f"unknown workload {a.workload!r}")
    measure_and_print(a.workload, a.frontend, a.metric, a.batches, a.batch_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare the bytegraph / torch.compile ratios of two benchmark runs.

Issue #14 asks that every ratio measured on Python 3.12 stays within 10% of the
3.11 figure. Each run is ``bench/run.py --json FILE``; this prints one row per
workload and measurement with both ratios and their relative change, and exits
1 when a ratio got worse by more than ``--tolerance``.

Only the ratio is compared: each run interleaves the two frontends in the same
conditions, so the ratio carries over between machines and interpreters while
absolute times do not. For two interpreters, run both in one invocation
(``--also-python``): their workers interleave too, so a busy machine slows
both runs alike. A ratio whose two medians are both tiny (under
``--floor``, in the metric's unit) is listed but not judged: 0.3 µs against
0.2 µs is noise, not a regression.

Example::

    .venv/bin/python bench/run.py --json /tmp/b311.json --output /tmp/b311.md \
        --also-python .venv-3.12/bin/python --also-json /tmp/b312.json --also-output /tmp/b312.md
    .venv/bin/python bench/compare.py /tmp/b311.json /tmp/b312.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import BG, TC, Results, fmt, table  # noqa: E402

#: (metric, result key, label, floor in the key's unit)
MEASUREMENTS = [
    ("first_call", "first_call_ms", "first call, warm (ms)", 1.0),
    ("cold", "first_call_ms", "first call, cold (ms)", 1.0),
    ("cold", "beyond_torch_imports_ms", "cold, outside torch imports (ms)", 1.0),
    ("overhead", "overhead_us", "per-call overhead (µs)", 2.0),
    ("overhead", "outside_graph_us", "outside the graphs (µs/call)", 2.0),
    ("instructions", "first_call_minstr", "first call, warm (M instructions)", 0.0),
    ("instructions", "overhead_kinstr", "per-call overhead (K instructions)", 0.0),
    ("instructions", "outside_graph_kinstr", "outside the graphs (K instructions/call)", 0.0),
    ("inductor", "compiled_ms", "inductor, per call (ms)", 0.0),
]


def _median(res: Results, w: str, metric: str, fe: str, key: str) -> Optional[float]:
    vals = res.values(w, metric, fe, key)
    return statistics.median(vals) if vals else None


def ratios(path: str) -> Tuple[Dict[str, str], Dict[Tuple[str, str], Tuple[float, float, float]]]:
    """``(info, {(workload, label): (ratio, torch median, bytegraph median)})`` of one run."""
    with open(path) as f:
        data = json.load(f)
    res = Results(data["results"])
    out = {}
    for metric, key, label, _floor in MEASUREMENTS:
        for w in res.workloads(metric):
            t = _median(res, w, metric, TC, key)
            b = _median(res, w, metric, BG, key)
            if t is None or b is None or t == 0:
                continue
            out[(w, label)] = (b / t, t, b)
    return data.get("info", {}), out


def compare(base_path: str, new_path: str, tolerance: float) -> Tuple[str, List[str]]:
    """The comparison table (markdown) and the rows beyond ``tolerance``."""
    base_info, base = ratios(base_path)
    new_info, new = ratios(new_path)
    floors = {label: floor for _m, _k, label, floor in MEASUREMENTS}
    rows, beyond = [], []
    for (w, label), (r0, t0, b0) in base.items():
        if (w, label) not in new:
            continue
        r1, t1, b1 = new[(w, label)]
        change = (r1 - r0) / abs(r0) if r0 else float("inf")
        if max(abs(t0), abs(b0), abs(t1), abs(b1)) < floors[label]:
            verdict = "(tiny)"
        elif min(t0, b0, t1, b1) <= 0:
            # a negative overhead: the captured graph beats the eager Python it
            # replaces; a ratio of two such numbers says nothing
            verdict = "(negative)"
        elif change > tolerance:
            verdict = "WORSE"
        elif change < -tolerance:
            verdict = "better"
        else:
            verdict = "ok"
        if verdict == "WORSE":
            beyond.append(f"{w} {label}")
        rows.append([w, label, f"{r0:.2f}", f"{r1:.2f}", f"{change:+.0%}", verdict,
                     f"{fmt(t0)} / {fmt(b0)}", f"{fmt(t1)} / {fmt(b1)}"])
    v0 = base_info.get("python", "base")
    v1 = new_info.get("python", "new")
    header = ["workload", "measurement", f"ratio {v0}", f"ratio {v1}", "change", f"within {tolerance:.0%}",
              f"torch.compile / bytegraph {v0}", f"torch.compile / bytegraph {v1}"]
    return table(header, rows), beyond


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="JSON of the reference run (bench/run.py --json)")
    p.add_argument("new", help="JSON of the run to check")
    p.add_argument("--tolerance", type=float, default=0.10, help="largest relative change of a ratio (0.10)")
    a = p.parse_args(argv)
    text, beyond = compare(a.base, a.new, a.tolerance)
    print(text)
    if beyond:
        print(f"\n{len(beyond)} ratio(s) worse by more than {a.tolerance:.0%}: " + "; ".join(beyond))
        return 1
    print(f"\nno ratio worse by more than {a.tolerance:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

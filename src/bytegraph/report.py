"""``python -m bytegraph report DIR -o report.html``: the compile trace
(:mod:`bytegraph.tracefile`) as one self-contained HTML page (no network,
no external files): a per-function overview, the user's source with break
lines marked and linked to their reasons, graphs, guards and transformed
code, a chart of compile time per phase and frame, and a recompile timeline.

Example::

    >>> from bytegraph import report
    >>> html = report.render([])
    >>> "<html" in html
    True
"""

from __future__ import annotations

import collections
import glob
import html
import json
import linecache
import os
from typing import Any, Dict, List

PHASES = ("trace", "backend", "guards", "codegen")
_COLORS = {"trace": "#4e79a7", "backend": "#f28e2b", "guards": "#59a14f", "codegen": "#b07aa1"}


def load(directory: str) -> List[Dict[str, Any]]:
    """Every record of every ``bytegraph_*.jsonl`` in ``directory``, in time order.

    Example::

        >>> load("/nonexistent")
        []
    """
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "bytegraph_*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f if line.strip())
    return sorted(records, key=lambda r: r.get("time", 0))


def _root_name(name: str) -> str:
    # a resume function or loop body belongs to the function it came from
    return name.split(".<resume_at")[0].split(".<loop_body")[0]


def _esc(x: Any) -> str:
    return html.escape(str(x))


def summarize(records: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per user function (continuations folded in): counts and seconds.

    Example::

        >>> summarize([{"type": "frame_compile", "function": "f", "file": "a.py", "line": 1,
        ...             "seconds": 0.5, "graphs": [{}], "breaks": []}])["f"]["graphs"]
        1
    """
    out: Dict[str, Dict[str, Any]] = {}
    for r in records:
        name = _root_name(r.get("function") or "?")
        s = out.setdefault(name, {"file": r.get("file"), "line": r.get("line"), "compiles": 0, "graphs": 0,
                                  "breaks": 0, "fallbacks": 0, "recompiles": 0, "seconds": 0.0})
        if r["type"] == "frame_compile":
            s["compiles"] += 1
            s["graphs"] += len(r.get("graphs", []))
            s["breaks"] += len(r.get("breaks", []))
            s["seconds"] += r.get("seconds", 0.0)
            if not r.get("function", "").count(".<"):
                s["file"], s["line"] = r.get("file"), r.get("line")
        elif r["type"] == "recompile":
            s["recompiles"] += 1
        elif r["type"] == "fallback":
            s["fallbacks"] += 1
    return out


def _innermost_entry(stack: str) -> str:
    """``file:line  code`` of a stack trace's innermost entry ("" for none)."""
    lines = stack.rstrip("\n").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        entry = lines[i].strip()
        if entry.startswith('File "'):
            where = entry[6:].replace('", line ', ":", 1).split(", in ")[0]
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{os.path.basename(where)}  {code}"
    return ""


def _source_view(filename: str, breaks: List[Dict[str, Any]], anchor: str) -> str:
    """The user's file around its break lines, each marked and linked to its reason."""
    marked = collections.defaultdict(list)
    for i, b in enumerate(breaks):
        if b.get("user_file") == filename and b.get("user_line"):
            marked[b["user_line"]].append(i)
    if not marked:
        return ""
    lines = []
    shown = set()
    for line in sorted(marked):
        shown.update(range(max(1, line - 3), line + 4))
    previous = None
    for n in sorted(shown):
        text = linecache.getline(filename, n)
        if not text:
            continue
        if previous is not None and n != previous + 1:
            lines.append('<div class="gap">…</div>')
        previous = n
        if n in marked:
            links = " ".join(f'<a href="#{anchor}-break-{i}">break {i + 1}</a>' for i in marked[n])
            lines.append(f'<div class="src brk" data-line="{n}"><span class="ln">{n}</span>'
                         f'{_esc(text.rstrip())}<span class="why">◀ {links}</span></div>')
        else:
            lines.append(f'<div class="src"><span class="ln">{n}</span>{_esc(text.rstrip())}</div>')
    return f'<div class="source"><div class="fname">{_esc(filename)}</div>{"".join(lines)}</div>'


def _phase_chart(compiles: List[Dict[str, Any]]) -> str:
    """An SVG bar per compiled frame, split into its phases."""
    if not compiles:
        return ""
    longest = max(sum(c.get("phases", {}).get(p, 0.0) for p in PHASES) for c in compiles) or 1e-9
    width, row = 520, 22
    bars = []
    for i, c in enumerate(compiles):
        x = 0.0
        y = i * row
        label = f'{c.get("function")}'
        bars.append(f'<text x="0" y="{y + 15}" class="lbl">{_esc(label[-38:])}</text>')
        for p in PHASES:
            w = c.get("phases", {}).get(p, 0.0) / longest * width
            if w > 0:
                bars.append(f'<rect class="bar" data-phase="{p}" x="{260 + x:.1f}" y="{y + 3}" width="{w:.1f}" '
                            f'height="{row - 6}" fill="{_COLORS[p]}"><title>{p}: '
                            f'{c["phases"][p] * 1000:.1f} ms</title></rect>')
                x += w
        total = sum(c.get("phases", {}).get(p, 0.0) for p in PHASES)
        bars.append(f'<text x="{265 + x:.1f}" y="{y + 15}" class="lbl">{total * 1000:.1f} ms</text>')
    legend = " ".join(f'<span class="key" style="background:{_COLORS[p]}"></span>{p}' for p in PHASES)
    height = row * len(compiles)
    return (f'<div class="legend">{legend}</div><svg id="phase-chart" width="{260 + width + 90}" '
            f'height="{height}">{"".join(bars)}</svg>')


def _timeline(records: List[Dict[str, Any]]) -> str:
    events = [r for r in records if r["type"] in ("frame_compile", "recompile")]
    recompiles = [r for r in events if r["type"] == "recompile"]
    if not recompiles:
        return '<p id="recompile-timeline" data-count="0">No recompiles.</p>'
    t0 = events[0].get("time", 0.0)
    items = []
    for r in recompiles:
        reasons = "".join(f"<li>entry {i}: {_esc(x)}</li>" for i, x in enumerate(r.get("reasons", [])))
        items.append(f'<li class="recompile"><span class="t">+{(r.get("time", t0) - t0) * 1000:.0f} ms</span> '
                     f'<b>{_esc(r.get("function"))}</b> ({_esc(r.get("file"))}:{_esc(r.get("line"))}), '
                     f'{r.get("entries", 0)} entr{"y" if r.get("entries") == 1 else "ies"} tried:<ul>{reasons}</ul></li>')
    return f'<ol id="recompile-timeline" data-count="{len(recompiles)}">{"".join(items)}</ol>'


def render(records: List[Dict[str, Any]]) -> str:
    """The HTML page for ``records`` (as :func:`load` returns them)."""
    summary = summarize(records)
    compiles = [r for r in records if r["type"] == "frame_compile"]
    totals = {k: sum(s[k] for s in summary.values()) for k in ("graphs", "breaks", "recompiles", "fallbacks")}
    rows = "".join(
        f'<tr><td><a href="#fn-{i}">{_esc(name)}</a></td><td>{_esc(s["file"])}:{_esc(s["line"])}</td>'
        f'<td>{s["compiles"]}</td><td>{s["graphs"]}</td><td>{s["breaks"]}</td><td>{s["recompiles"]}</td>'
        f'<td>{s["fallbacks"]}</td><td>{s["seconds"] * 1000:.1f}</td></tr>'
        for i, (name, s) in enumerate(summary.items()))
    sections = []
    for i, (name, s) in enumerate(summary.items()):
        mine = [r for r in compiles if _root_name(r["function"]) == name]
        fallbacks = [r for r in records if r["type"] == "fallback" and _root_name(r.get("function") or "?") == name]
        breaks = [b for r in mine for b in r.get("breaks", [])] + fallbacks
        anchor = f"fn-{i}"
        break_items = "".join(
            f'<li id="{anchor}-break-{j}" class="break"><b>[{_esc(b["kind"])}]</b> {_esc(b["explanation"])} '
            f'at {_esc(b.get("user_file"))}:{_esc(b.get("user_line"))}'
            + (f' (inside {_esc(b["file"])}:{_esc(b["line"])})' if b.get("file") != b.get("user_file") else "")
            + (f'<div class="hint">hint: {_esc(b["hint"])}</div>' if b.get("hint") else "")
            + (f'<pre class="stack">{_esc(b["stack"])}</pre>' if b.get("stack") else "") + "</li>"
            for j, b in enumerate(breaks))
        entries = []
        for k, r in enumerate(mine):
            graphs = "".join(
                f'<details><summary>graph {g_i} ({len(g["ops"])} ops)</summary><pre class="graph">'
                f'{_esc(g["code"])}</pre><table class="ops"><tr><th>node</th><th>target</th><th>user line</th></tr>'
                + "".join(f'<tr><td>{_esc(o["name"])}</td><td>{_esc(o["target"])}</td>'
                          f'<td>{_esc(_innermost_entry(o.get("stack_trace") or ""))}</td></tr>'
                          for o in g["ops"]) + "</table></details>"
                for g_i, g in enumerate(r.get("graphs", [])))
            guards = _esc("\n".join(r.get("guards", [])))
            entries.append(
                f'<div class="entry"><h4>{_esc(r["function"])} — entry compiled in {r["seconds"] * 1000:.1f} ms'
                f'</h4>{graphs}<details><summary>guards ({len(r.get("guards", []))})</summary>'
                f'<pre class="guards">{guards}</pre></details><details><summary>transformed code</summary>'
                f'<pre class="code">{_esc(r.get("source") or r.get("bytecode", ""))}</pre></details>'
                f'<details><summary>transformed bytecode</summary>'
                f'<pre class="bytecode">{_esc(r.get("bytecode", ""))}</pre></details></div>')
        files = sorted({b.get("user_file") for b in breaks if b.get("user_file")})
        source = "".join(_source_view(f, breaks, anchor) for f in files)
        sections.append(
            f'<section id="{anchor}" class="function"><h3>{_esc(name)}</h3>{source}'
            f'<ol class="breaks">{break_items}</ol>{"".join(entries)}</section>')
    return _PAGE.format(
        css=_CSS, graphs=totals["graphs"], breaks=totals["breaks"], recompiles=totals["recompiles"],
        fallbacks=totals["fallbacks"], functions=len(summary), rows=rows, chart=_phase_chart(compiles),
        timeline=_timeline(records), sections="".join(sections))


def write(directory: str, output: str) -> str:
    """Render the trace in ``directory`` to ``output``; return ``output``."""
    page = render(load(directory))
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    return output


def main(argv: List[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m bytegraph report",
                                description="render a BYTEGRAPH_TRACE_DIR trace as one HTML page")
    p.add_argument("directory")
    p.add_argument("-o", "--output", default="bytegraph_report.html")
    args = p.parse_args(argv)
    if not load(args.directory):
        print(f"bytegraph report: no bytegraph_*.jsonl trace in {args.directory}", flush=True)
        return 1
    print(f"bytegraph report: wrote {write(args.directory, args.output)}")
    return 0


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h3{margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}
.counts span{display:inline-block;margin-right:18px;font-size:15px}.counts b{font-size:20px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}
.source{font-family:monospace;font-size:12px;background:#fbfbfb;border:1px solid #eee;padding:6px;margin:8px 0}
.src{white-space:pre}.src.brk{background:#ffe3e3}.ln{color:#999;display:inline-block;width:40px}
.why{margin-left:16px;color:#c00}.fname{color:#555;margin-bottom:4px}.gap{color:#bbb}
.break{margin:6px 0}.hint{color:#555;font-size:13px}.legend{font-size:12px;margin:6px 0}
.key{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.lbl{font-size:11px;font-family:monospace}.t{color:#777;font-family:monospace}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>bytegraph compile report</title>
<style>{css}</style></head><body>
<h1>bytegraph compile report</h1>
<div class="counts" id="counts">
<span>functions <b id="count-functions">{functions}</b></span><span>graphs <b id="count-graphs">{graphs}</b></span>
<span>breaks <b id="count-breaks">{breaks}</b></span><span>recompiles <b id="count-recompiles">{recompiles}</b></span>
<span>eager fallbacks <b id="count-fallbacks">{fallbacks}</b></span></div>
<h2>Functions</h2>
<table id="overview"><tr><th>function</th><th>where</th><th>compiles</th><th>graphs</th><th>breaks</th>
<th>recompiles</th><th>fallbacks</th><th>ms compiling</th></tr>{rows}</table>
<h2>Compile time per frame and phase</h2>{chart}
<h2>Recompiles</h2>{timeline}
<h2>Details</h2>{sections}
</body></html>
"""

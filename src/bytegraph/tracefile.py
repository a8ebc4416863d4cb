"""The structured compile trace: ``BYTEGRAPH_TRACE_DIR=dir`` (or
:func:`start`) writes one JSON object per line to ``dir/bytegraph_<pid>.jsonl``.

Records (``"type"``):

* ``frame_compile``: one cache entry made: the function (name, file, line),
  seconds in total and per phase (trace, backend, guards, codegen), its
  graphs (readable code and an op table with each node's user stack), its
  guards, the breaks it planned (kind, explanation, hint, where, the user's
  line, the inlined stack, a source snippet) and its transformed function
  (``source``: decompiled as ``bytegraph.show`` does; ``bytecode``: as ``dis`` shows it);
* ``fallback``: a frame that runs eagerly, and why;
* ``recompile``: a function compiled again, with each existing entry's
  failing guard.

The file is read by ``python -m bytegraph report`` (and any JSON-lines tool).

Example::

    >>> import bytegraph, tempfile, torch
    >>> d = tempfile.mkdtemp()
    >>> bytegraph.tracefile.start(d)
    >>> _ = bytegraph.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    >>> bytegraph.tracefile.stop()
    >>> import json, glob
    >>> [json.loads(l)["type"] for l in open(glob.glob(d + "/*.jsonl")[0])]
    ['frame_compile']
"""

from __future__ import annotations

import dis
import io
import json
import linecache
import os
import time
from typing import Any, Dict, List, Optional

from . import diagnostics

ENV_VAR = "BYTEGRAPH_TRACE_DIR"


class TraceWriter:
    """A diagnostics listener that writes the compile trace of this process."""

    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"bytegraph_{os.getpid()}.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")
        # graphs and breaks seen since the last entry belong to the next one
        self._graphs: List[Any] = []
        self._breaks: List[Any] = []

    def __call__(self, event: str, payload: Any) -> None:
        if event == "graph":
            self._graphs.append(payload)
        elif event == "break":
            self._breaks.append(payload)
        elif event == "fallback":
            self._write({"type": "fallback", **_break_record(payload)})
        elif event == "recompile":
            self._write({"type": "recompile", **payload})
        elif event == "entry":
            self._write(self._entry_record(payload))
            self._graphs, self._breaks = [], []

    def _entry_record(self, entry) -> Dict[str, Any]:
        name, filename, line = entry.function
        return {
            "type": "frame_compile", "function": name, "file": filename, "line": line,
            "seconds": entry.compile_seconds, "phases": dict(entry.phases),
            "transformed": entry.transformed, "raises": entry.raises,
            "graphs": [_graph_record(gm) for gm in self._graphs],
            "guards": entry.guard.describe(),
            "breaks": [_break_record(b) for b in self._breaks],
            "bytecode": _disassembly(entry.code) if entry.code is not None else "",
            "source": _readable(entry),
        }

    def _write(self, record: Dict[str, Any]) -> None:
        record["time"] = time.time()
        self._file.write(json.dumps(record, default=repr) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _graph_record(gm) -> Dict[str, Any]:
    ops = []
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            target = node.target if isinstance(node.target, str) else \
                f"{getattr(node.target, '__module__', '') or ''}.{getattr(node.target, '__name__', repr(node.target))}"
            ops.append({"name": node.name, "op": node.op, "target": target.lstrip("."),
                        "stack_trace": node.meta.get("stack_trace", "")})
    return {"code": gm.code.strip(), "ops": ops, "inputs": gm.meta.get("bytegraph_sources", [])}


def _break_record(record) -> Dict[str, Any]:
    where = record.location
    user = record.user_location or where
    return {
        "kind": record.kind, "explanation": record.explanation, "hint": record.hint,
        "file": where.filename if where else None, "line": where.lineno if where else None,
        "user_file": user.filename if user else None, "user_line": user.lineno if user else None,
        "stack": record.stack, "snippet": _snippet(user.filename, user.lineno) if user and user.lineno else [],
    }


def _snippet(filename: str, lineno: int, around: int = 2) -> List[List[Any]]:
    """``[[line number, text], ...]`` around ``lineno`` of ``filename``."""
    out = []
    for n in range(max(1, lineno - around), lineno + around + 1):
        text = linecache.getline(filename, n)
        if text:
            out.append([n, text.rstrip("\n")])
    return out


def _readable(entry) -> str:
    """The entry's transformed function as Python-like source (``bytegraph.show``'s view of it)."""
    if entry.code is None:
        return ""
    from .show import decompile
    names = {id(gm): f"graph_{i}" for i, gm in enumerate(entry.graphs)}
    code = entry.code
    head = f"def {code.co_name}({', '.join(code.co_varnames[:code.co_argcount])}):"
    try:
        return "\n".join([head] + ["    " + line for line in decompile(code, names)])
    except Exception as e:   # a report must not fail the compile it describes
        return f"{head}\n    # (could not be decompiled: {type(e).__name__}: {e})"


def _disassembly(code) -> str:
    buf = io.StringIO()
    dis.dis(code, file=buf)
    return buf.getvalue()


_WRITER: Optional[TraceWriter] = None


def start(directory: str) -> str:
    """Write the compile trace of this process to ``directory``; return the file's path."""
    global _WRITER
    stop()
    _WRITER = TraceWriter(directory)
    diagnostics.add_listener(_WRITER)
    return _WRITER.path


def stop() -> None:
    """Stop writing the compile trace."""
    global _WRITER
    if _WRITER is not None:
        diagnostics.remove_listener(_WRITER)
        _WRITER.close()
        _WRITER = None


if os.environ.get(ENV_VAR):
    start(os.environ[ENV_VAR])

"""The public surface: ``compile``, ``explain``, ``stats``, ``reset``."""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import diagnostics
from .backends import lookup_backend
from .cache import CompiledFunction, reset_all
from .diagnostics import STATS, Stats
from .errors import BreakRecord


def compile(fn: Optional[Callable] = None, *, backend: Any = "inductor", fullgraph: bool = False,
            dynamic: Optional[bool] = None) -> Callable:
    """Compile ``fn`` (a function, bound method or ``nn.Module``) with bytegraph.

    Usable directly or as a decorator, with or without arguments.

    Example::

        >>> import bytegraph, torch
        >>> @bytegraph.compile(backend="eager")
        ... def f(x, y):
        ...     return (x + y).relu()
        >>> f(torch.ones(2), torch.ones(2))
        tensor([2., 2.])
    """
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    name, backend_fn = lookup_backend(backend)
    if isinstance(fn, torch.nn.Module):
        from .compiled_module import CompiledModule
        return CompiledModule(fn, name, backend_fn, fullgraph, dynamic)
    if isinstance(fn, CompiledFunction):
        return fn
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(CompiledFunction(fn.__func__, name, backend_fn, fullgraph, dynamic), fn.__self__)
    if not callable(fn):
        raise TypeError(f"bytegraph.compile() expects a callable, got {type(fn).__name__}")
    if not isinstance(fn, types.FunctionType):
        diagnostics.log("graph_breaks", "%r is not a Python function; it runs as it is", fn)
        return fn
    return CompiledFunction(fn, name, backend_fn, fullgraph, dynamic)


def stats() -> Stats:
    """A snapshot of bytegraph's counters.

    Example::

        >>> import bytegraph
        >>> sorted(bytegraph.stats().as_dict())[:2]
        ['cache_hits', 'cache_misses']
    """
    return dataclasses.replace(STATS)


def reset() -> None:
    """Drop every compiled entry and zero the counters.

    Example::

        >>> import bytegraph
        >>> bytegraph.reset()
        >>> bytegraph.stats().graphs
        0
    """
    reset_all()
    for field in dataclasses.fields(Stats):
        setattr(STATS, field.name, 0)


@dataclasses.dataclass
class ExplainReport:
    """What ``explain()`` found: graphs, breaks and fallbacks, guards."""

    graphs: List[torch.fx.GraphModule]
    break_reasons: List[BreakRecord]
    guards: List[str]
    frames_compiled: int
    frames_eager: int
    #: frames run through transformed bytecode without a graph (``config.force_transform``)
    frames_transformed: int
    compile_seconds: float
    result: Any = None

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def ops_per_graph(self) -> List[int]:
        return [sum(1 for n in g.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
                for g in self.graphs]

    def breaks_by_kind(self) -> List[Tuple[str, int, List[BreakRecord]]]:
        """The break and fallback reasons grouped by kind, the most frequent
        kind first: ``(kind, count, records)``, so a user sees what to fix first.

        Example::

            >>> import bytegraph, torch
            >>> def f(x):
            ...     print("hi")
            ...     return x + 1
            >>> report = bytegraph.explain(f)(torch.ones(2))  # doctest: +SKIP
            >>> [(kind, n) for kind, n, _ in report.breaks_by_kind()]  # doctest: +SKIP
            [('print', 1)]
        """
        groups: Dict[str, List[BreakRecord]] = {}
        for r in self.break_reasons:
            groups.setdefault(r.kind, []).append(r)
        return sorted(((k, len(v), v) for k, v in groups.items()), key=lambda g: (-g[1], g[0]))

    def __str__(self) -> str:
        lines = [f"bytegraph explain: {self.graph_count} graph(s), {self.graph_break_count} break/fallback "
                 f"reason(s), {self.frames_compiled} frame(s) compiled ({self.frames_transformed} without a graph), "
                 f"{self.frames_eager} run eagerly, "
                 f"{self.compile_seconds * 1000:.1f} ms compiling"]
        for i, g in enumerate(self.graphs):
            lines.append(f"\n--- graph {i} ({self.ops_per_graph[i]} ops) ---")
            lines.append(g.print_readable(print_output=False).rstrip())
        if self.break_reasons:
            lines.append("\n--- breaks and fallbacks by kind ---")
            for kind, count, records in self.breaks_by_kind():
                lines.append(f"  {kind}: {count}")
                lines.extend(f"    {r}".replace("\n", "\n  ") for r in records)
        lines.append("\n--- guards ---")
        lines.extend(f"  {g}" for g in self.guards)
        return "\n".join(lines)


def explain(fn: Callable, **compile_kwargs) -> Callable[..., ExplainReport]:
    """Run ``fn`` once under a fresh bytegraph compile and report what happened.

    Example::

        >>> import bytegraph, torch
        >>> report = bytegraph.explain(lambda x: x * 2)(torch.ones(3))
        >>> report.graph_count
        1
    """
    compile_kwargs.setdefault("backend", "eager")

    def run(*args, **kwargs) -> ExplainReport:
        graphs: List[torch.fx.GraphModule] = []
        breaks: List[BreakRecord] = []
        guards: List[str] = []
        counts = {"entries": 0, "fallbacks": 0, "transformed": 0, "seconds": 0.0}

        def listener(event, payload):
            if event == "graph":
                graphs.append(payload)
            elif event == "fallback":
                breaks.append(payload)
                counts["fallbacks"] += 1
            elif event == "break":
                breaks.append(payload)
            elif event == "entry":
                counts["entries"] += 1
                counts["transformed"] += payload.graph_count == 0 and payload.transformed
                counts["seconds"] += payload.compile_seconds
                guards.extend(payload.guard.describe())

        target = fn._fn if isinstance(fn, CompiledFunction) else fn
        # A backend object of its own gives explain() fresh caches for the
        # generated frames too (they are shared per code object and backend).
        _, backend_fn = lookup_backend(compile_kwargs["backend"])

        def explain_backend(gm, example_inputs):
            return backend_fn(gm, example_inputs)

        compiled = compile(target, **{**compile_kwargs, "backend": explain_backend})
        diagnostics.add_listener(listener)
        try:
            result = compiled(*args, **kwargs)
        finally:
            diagnostics.remove_listener(listener)
        return ExplainReport(graphs, breaks, guards, counts["entries"], counts["fallbacks"],
                             counts["transformed"], counts["seconds"], result)

    return run


def graph_break() -> None:
    """Mark a point where bytegraph must stop the graph (runs as a no-op eagerly).

    Example::

        >>> import bytegraph
        >>> bytegraph.graph_break()
    """

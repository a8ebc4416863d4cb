"""The public surface: ``compile``, ``explain``, ``stats``, ``reset``."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import diagnostics
from .backends import configure, lookup_backend
from .cache import CompiledFunction, reset_all
from .decorators import graph_break, is_disabled  # noqa: F401 (graph_break: bytegraph.graph_break)
from .diagnostics import STATS, Stats
from .errors import BreakRecord, InvalidArgument, InvalidArgumentType


def compile(model: Optional[Callable] = None, *, fullgraph: bool = False, dynamic: Optional[bool] = None,
            backend: Any = "inductor", mode: Optional[str] = None, options: Optional[dict] = None,
            name: Optional[str] = None, disable: bool = False, recompile_limit: Optional[int] = None,
            isolate_recompiles: bool = False, shapes_spec: Any = None, dynamic_shapes: Any = None) -> Callable:
    """Compile ``model`` with bytegraph; torch.compile's signature and meaning.

    ``model`` is a function, a bound method, an ``nn.Module``, a callable
    object, a ``functools.partial`` or an already compiled function (compiled
    again from its original with these settings).  ``backend`` is a name
    (``"inductor"``, ``"eager"``, ``"aot_eager"``, or one registered with
    torch's backend registry) or a callable ``backend(gm, example_inputs)``.
    ``mode`` and ``options`` go to Inductor as torch.compile gives them
    (``options`` as Inductor config patches), or to a custom backend as
    keyword arguments.  ``disable=True`` returns ``model`` unchanged.
    ``recompile_limit`` caps this compile's cache entries (default
    ``config.cache_size_limit``); past it new variants run eagerly, or raise
    under ``fullgraph=True``.  Every ``compile()`` call has its own entries, so
    ``isolate_recompiles`` is always in effect.  ``name`` labels the function in
    logs.  ``shapes_spec``/``dynamic_shapes`` (torch 2.13/2.14 spellings) are
    not supported: use ``dynamic=`` or ``bytegraph.mark_dynamic``.  Usable
    directly or as a decorator, with or without arguments.

    Example::

        >>> import bytegraph, torch
        >>> @bytegraph.compile(backend="eager")
        ... def f(x, y):
        ...     return (x + y).relu()
        >>> f(torch.ones(2), torch.ones(2))
        tensor([2., 2.])
    """
    _validate(fullgraph, dynamic, disable, recompile_limit, name, shapes_spec, dynamic_shapes)
    backend_name, backend_fn = lookup_backend("inductor" if backend is None else backend)
    if mode is not None and options is not None:
        raise InvalidArgument("mode and options cannot both be given: mode is a preset of options "
                              "(torch.compile's rule too)")
    backend_fn = configure(backend_name, backend_fn, mode, options, dynamic)
    if model is None:
        def decorate(model):
            if model is None:
                raise InvalidArgument("bytegraph.compile(...)(model): model can't be None")
            return compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                           options=options, name=name, disable=disable, recompile_limit=recompile_limit,
                           isolate_recompiles=isolate_recompiles)
        return decorate
    if disable:
        return model
    compiled = _compiled(model, backend_name, backend_fn, fullgraph, dynamic)
    cache = _cache_of(compiled)
    if cache is not None:
        cache._limit = recompile_limit
        if name is not None:
            cache._label = name
    return compiled


def compile_module(module: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    """Compile ``module``'s calls in place, as ``module.compile(...)`` does with
    torch.compile: ``module`` stays the same object (its class, ``state_dict``
    keys, attributes, ``isinstance`` checks) and each call of it runs its full
    call (hooks included) through bytegraph.  ``compile_kwargs`` are
    :func:`compile`'s.  Compiling it again replaces the settings; the module
    is returned.  A copy (``copy.deepcopy``, pickling) is not compiled, as with
    ``module.compile()``.

    Example::

        >>> import bytegraph, torch
        >>> lin = torch.nn.Linear(2, 2)
        >>> bytegraph.compile_module(lin, backend="eager") is lin
        True
        >>> lin(torch.ones(1, 2)).shape
        torch.Size([1, 2])
    """
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgumentType(f"compile_module() expects an nn.Module, not {type(module).__name__}")
    if "model" in compile_kwargs:
        raise InvalidArgument("compile_module(module, ...) takes the module as its first argument only")
    # (torch's Module.__call__ runs ``_compiled_call_impl`` when it is set)
    module._compiled_call_impl = compile(module._call_impl, **compile_kwargs)
    return module


def _cache_of(compiled):
    """The CompiledFunction behind what ``_compiled`` returned (None: nothing compiled)."""
    from .compiled_module import CompiledModule
    if isinstance(compiled, CompiledModule):
        return compiled._bg_call
    if isinstance(compiled, types.MethodType):
        compiled = compiled.__func__
    if isinstance(compiled, functools.partial):
        return _cache_of(compiled.func)
    return compiled if isinstance(compiled, CompiledFunction) else None


def _validate(fullgraph, dynamic, disable, recompile_limit, name, shapes_spec, dynamic_shapes) -> None:
    """Reject what torch.compile rejects (and the non-bools it lets through),
    with the valid values in the message."""
    if not isinstance(fullgraph, bool):
        raise InvalidArgumentType(f"fullgraph must be True or False, not {fullgraph!r}")
    if not isinstance(disable, bool):
        raise InvalidArgumentType(f"disable must be True or False, not {disable!r}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise InvalidArgument(f"dynamic must be None (automatic), True or False, not {dynamic!r}")
    if recompile_limit is not None and (not isinstance(recompile_limit, int) or isinstance(recompile_limit, bool)
                                        or recompile_limit < 1):
        raise InvalidArgument(f"recompile_limit must be a positive int or None, not {recompile_limit!r}")
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentType(f"name must be a str or None, not {type(name).__name__}")
    for arg, value in (("shapes_spec", shapes_spec), ("dynamic_shapes", dynamic_shapes)):
        if value is not None:
            raise InvalidArgument(f"bytegraph does not support {arg}= yet; use dynamic=True or "
                                  f"bytegraph.mark_dynamic(tensor, dim)")


def _compiled(model, name: str, backend_fn: Callable, fullgraph: bool, dynamic) -> Callable:
    """``model`` compiled: each kind of callable the way its calls reach Python code."""
    if isinstance(model, torch.nn.Module):
        from .compiled_module import CompiledModule
        if isinstance(model, CompiledModule):
            model = model._orig_mod   # compiled again, from the original, with these settings
        from .distributed.ddp import is_ddp
        if is_ddp(model):
            # DDP's forward natively, the module it wraps compiled (distributed/ddp_module.py)
            from .distributed.ddp_module import DDPCompiledModule
            return DDPCompiledModule(model, name, backend_fn, fullgraph, dynamic)
        return CompiledModule(model, name, backend_fn, fullgraph, dynamic)
    if isinstance(model, CompiledFunction):
        return CompiledFunction(model._fn, name, backend_fn, fullgraph, dynamic)
    if isinstance(model, types.MethodType):
        func = model.__func__
        if isinstance(func, CompiledFunction):
            func = func._fn
        if isinstance(func, types.FunctionType) and not is_disabled(func):
            return types.MethodType(CompiledFunction(func, name, backend_fn, fullgraph, dynamic), model.__self__)
    if isinstance(model, functools.partial):
        # the partial's own function compiled; its bound arguments stay as they are
        return functools.partial(_compiled(model.func, name, backend_fn, fullgraph, dynamic), *model.args,
                                 **model.keywords)
    if not callable(model):
        raise InvalidArgumentType(f"bytegraph.compile() expects a callable, got {type(model).__name__}")
    if is_disabled(model):
        diagnostics.log("graph_breaks", "%s is disabled for compilers (torch.compiler.disable / "
                        "bytegraph.disable): it runs as it is", getattr(model, "__qualname__", model))
        return model
    if isinstance(model, types.FunctionType):
        return CompiledFunction(model, name, backend_fn, fullgraph, dynamic)
    call = inspect.getattr_static(type(model), "__call__", None)
    if isinstance(call, types.FunctionType) and not isinstance(model, type):
        # a callable object: its __call__ compiled, bound to it
        return types.MethodType(CompiledFunction(call, name, backend_fn, fullgraph, dynamic), model)
    # a builtin, a class, a C callable: compiled as a call to it
    return CompiledFunction(_forwarder(model), name, backend_fn, fullgraph, dynamic)


def _forwarder(target: Callable) -> types.FunctionType:
    """A Python function that calls ``target`` (so a C callable has a frame to compile)."""
    def call(*args, **kwargs):
        return target(*args, **kwargs)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(target, attr, None)
        if isinstance(value, str):
            try:
                setattr(call, attr, value)
            except (TypeError, AttributeError):
                pass
    return call


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
class FrameReport:
    """One frame compiled during ``explain()``: where it is, how long each
    phase took, and how much tracing it needed.

    ``phases`` has ``trace`` (symbolic execution, restarts at breaks
    included), ``backend`` (the backend compiling the graphs), ``codegen``
    (transformed bytecode) and ``guards`` (the generated check), in seconds;
    ``traces`` counts the symbolic executions (1, plus one per restart) and
    ``trace_steps`` the instructions they ran in all.

    Example::

        >>> import bytegraph, torch
        >>> frame = bytegraph.explain(lambda x: x + 1)(torch.ones(2)).frames[0]
        >>> sorted(frame.phases)
        ['backend', 'codegen', 'guards', 'trace']
    """

    function: str
    filename: str
    lineno: int
    seconds: float
    phases: Dict[str, float]
    traces: int
    trace_steps: int

    def __str__(self) -> str:
        times = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in self.phases.items())
        return (f"{self.function} ({self.filename}:{self.lineno}): {self.seconds * 1000:.1f} ms ({times}); "
                f"{self.traces} trace(s), {self.trace_steps} instructions")


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
    #: each compiled frame with its per-phase times (:class:`FrameReport`), in compile order
    frames: List[FrameReport] = dataclasses.field(default_factory=list)

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
        if self.frames:
            lines.append("\n--- compile time per frame ---")
            lines.extend(f"  {f}" for f in self.frames)
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
        frames: List[FrameReport] = []

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
                name, filename, lineno = payload.function
                phases = {k: payload.phases.get(k, 0.0) for k in ("trace", "backend", "codegen", "guards")}
                frames.append(FrameReport(name, filename, lineno, payload.compile_seconds, phases,
                                          payload.traces, payload.trace_steps))

        target = fn._fn if isinstance(fn, CompiledFunction) else fn
        # A backend object of its own gives explain() fresh caches for the
        # generated frames too (they are shared per code object and backend).
        _, backend_fn = lookup_backend(compile_kwargs["backend"])

        def explain_backend(gm, example_inputs):
            return backend_fn(gm, example_inputs)
        explain_backend.takes_fake_inputs = getattr(backend_fn, "takes_fake_inputs", False)

        compiled = compile(target, **{**compile_kwargs, "backend": explain_backend})
        diagnostics.add_listener(listener)
        try:
            result = compiled(*args, **kwargs)
        finally:
            diagnostics.remove_listener(listener)
        return ExplainReport(graphs, breaks, guards, counts["entries"], counts["fallbacks"],
                             counts["transformed"], counts["seconds"], result, frames)

    return run

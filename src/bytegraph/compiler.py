"""Compile one frame: trace it, compile its graph, generate its code and guards.

This is where the layers meet; each does its own part:
the tracer produces values, a graph, guards and side effects; the backend
compiles the graph; codegen builds the transformed function (with
``breaks`` writing the part after a graph break); guards are compiled into
the entry's check.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import logging
import time
import types
from typing import Callable, Dict, List, Optional

import torch

from . import config
from .backends import compile_graph, with_inductor_patches
from .distributed.ddp import compile_split
from .break_plan import BreakPlan, plan_break
from .breaks import BreakEmitter
from .values.user_keys import holds_user_keyed_dict
from .codegen import Codegen, live_values
from .diagnostics import STATS, emit
from .logs import enabled, log
from .gc_defer import full_collections_deferred
from .values.base import reachable
from .errors import BackendError, Unsupported, UserException
from .guard_compiler import CompiledGuard, compile_guards
from .guards import IDENTITY_KINDS, Guard, storages_disjoint
from .tracer import Trace


#: Failures that a graph break cannot get past (the value would fail again in
#: the resume function): the whole frame runs eagerly instead.
NO_BREAK_KINDS = frozenset({"unsupported_input", "internal", "generator_object", "recursion"})


class CacheEntry:
    """A compiled variant of one frame: its check and its transformed code.

    ``fn`` is the transformed function of a root frame (closure fixed);
    ``code`` the transformed code, which generated frames (resume functions,
    loop bodies) wrap with each call's closure.  An entry without a graph
    keeps the original code.
    """

    __slots__ = ("guard", "fn", "code", "graphs", "graph_count", "compile_seconds", "transformed", "breaks",
                 "observed_shapes", "raises", "phases", "function", "traces", "trace_steps")

    def __init__(self, guard: CompiledGuard, fn: Callable, graphs: List[torch.fx.GraphModule], seconds: float,
                 transformed: bool = True, breaks: int = 0):
        self.guard = guard
        self.fn = fn
        self.code = fn.__code__ if transformed else None
        self.transformed = transformed
        self.graphs = graphs
        self.graph_count = len(graphs)
        self.compile_seconds = seconds
        self.breaks = breaks
        self.observed_shapes = {}
        #: the trace raised: the entry runs the original code, which raises too
        self.raises = False
        #: seconds per phase of the compile: trace, backend, guards, codegen
        self.phases: Dict[str, float] = {"trace": seconds}
        #: symbolic executions of the frame this compile ran (the first, and
        #: each restart at a graph break), and the instructions they ran in all
        self.traces = 1
        self.trace_steps = 0
        #: the compiled function (qualified name, file, first line), for reports
        code = fn.__code__
        self.function = (code.co_qualname, code.co_filename, code.co_firstlineno)

    def call_with_closure(self, fn, args):
        """Run this entry for ``fn`` (a generated function with its own closure)."""
        return self.function_for(fn)(*args)

    def function_for(self, fn):
        """This entry's code as a function with ``fn``'s globals and closure."""
        if self.code is None:
            return fn
        return types.FunctionType(self.code, fn.__globals__, fn.__name__, None, fn.__closure__)


class _MuteFakeKernelErrors(logging.Filter):
    """While a frame compiles, torch's fake-tensor mode logs a full traceback
    ("failed while attempting to run meta for aten.mm") whenever an operation
    would raise, say on mismatched shapes.  The trace then stops there and the
    operation runs natively, where it raises the user's own error with the
    user's traceback; torch's log of the same error is only noise, so it is
    dropped (only that record, only while compiling)."""

    depth = 0

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.depth and str(record.msg).startswith("failed while attempting to run meta"))

    def __enter__(self):
        if self.depth == 0:
            logging.getLogger("torch._subclasses.fake_tensor").addFilter(self)
        self.depth += 1

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            logging.getLogger("torch._subclasses.fake_tensor").removeFilter(self)
        return False


_FAKE_KERNEL_ERRORS_MUTED = _MuteFakeKernelErrors()


def compile_frame(fn: types.FunctionType, args: tuple, kwargs: dict, backend_name: str, backend: Callable,
                  fullgraph: bool = False, closure_param: bool = False, runner_for=None,
                  policy=None) -> CacheEntry:
    """Trace ``fn(*args, **kwargs)`` and build a cache entry.

    Raises :class:`Unsupported` if the frame cannot be captured, not even in
    pieces (or at all, with ``fullgraph``).
    """
    mark = len(Trace.made)
    try:
        with full_collections_deferred(), _FAKE_KERNEL_ERRORS_MUTED:
            entry = _compile_frame(fn, args, kwargs, backend_name, backend, fullgraph, closure_param, runner_for,
                                   policy)
        mine = [t for t in Trace.made[mark:] if t.fn is fn]
        entry.traces, entry.trace_steps = len(mine), sum(t.steps for t in mine)
        return entry
    finally:
        template_refs = [r for trace in Trace.made[mark:] for r in trace.side_effects.template_refs]
        for trace in Trace.made[mark:]:
            trace.release()
        del Trace.made[mark:]
        if template_refs:
            _collect_templates(template_refs)


_TYPE_MRO = type.__dict__["mro"]


class _Parked:
    """The base that template classes are moved under once dead (see
    _collect_templates): a plain class, so any plain class can take it."""


def _collect_templates(refs) -> None:
    """Free the template classes of class statements (values/class_build.py).

    They are cyclic garbage once the trace is released; until collected
    they are listed by their bases' ``__subclasses__()``, which the program
    may ask natively next.  They are young: a collection of the young
    generations frees them, and only one that survived into the oldest
    generation (a collection ran during the compile) costs a full one --
    and only if it has a base other than ``object``: ``object.__subclasses__()``
    lists every class of the process, a local class eager drops lingers
    there until a collection too, and a full collection per compile (~0.1 s
    with torch loaded) made class-heavy frames (CPython's test_dataclasses)
    cost seconds.  So a survivor with other bases is first moved under
    ``_Parked`` (assigning ``__bases__`` takes it off its bases' lists at
    once); only one whose layout forbids that (slots, a builtin base) needs
    the full collection.
    """
    import gc
    gc.collect(1)
    alive = [t for t in (r() for r in refs) if t is not None]
    full = False
    for t in alive:
        if any(base is not object for base in t.__bases__):
            # (not where the metaclass has its own mro(): the assignment runs it)
            if inspect.getattr_static(type(t), "mro", None) is not _TYPE_MRO:
                full = True
                continue
            try:
                t.__bases__ = (_Parked,)
            except TypeError:  # a layout _Parked's differs from (slots, a builtin base)
                full = True
    if full:
        gc.collect()


def _compile_frame(fn, args, kwargs, backend_name, backend, fullgraph, closure_param, runner_for, policy):
    start = time.perf_counter()
    # what the entry keeps of ``fn``: a generated function's cells belong to one call
    kept = _without_call_closure(fn) if closure_param else fn
    plan: Optional[BreakPlan] = None
    emitter = states = None
    trace = Trace(fn, policy, backend_name)
    failure = None
    break_guards: tuple = ()
    try:
        result = trace.run(args, kwargs)
    except UserException:
        return _original_code_entry(trace, fn, kept, closure_param, start, raises=True)
    except Unsupported as e:
        if fullgraph or e.kind in NO_BREAK_KINDS:
            raise
        # (its traceback holds this frame, which holds it: a cycle that would
        # keep the trace, and every user object it met, alive until a gc)
        failure = e.with_traceback(None)
        break_guards = e.recompile_guards
    while True:
        if failure is not None:
            # (outside the except block: nothing the retraces do may see
            # bytegraph's own exception as the one being handled)
            trace, failure = _leave_resumed_loops_native(trace, failure, fn, args, kwargs, policy, backend_name)
            failure = _outside_open_contexts(trace, failure)
            trace, failure = _before_traced_raises(trace, failure, fn, args, kwargs, policy, backend_name)
            plan = plan_break(failure)
            current = failure
            for attempt in range(_MAX_GENERATOR_REPLANS + 1):
                trace = Trace(fn, policy, backend_name)
                trace.stop_step = plan.step
                try:
                    result = trace.run(args, kwargs)
                except UserException:
                    return _original_code_entry(trace, fn, kept, closure_param, start, raises=True)
                if trace.stopped_frame is None:
                    raise Unsupported("the retrace did not reach the planned graph break", kind="internal")
                # a generator that ran cannot be handed on: the break may move to the call that made it
                moved = _break_before_live_generator(trace, plan, runner_for) \
                    if attempt < _MAX_GENERATOR_REPLANS else None
                if moved is None and trace.open_contexts and attempt > 0:
                    # the break moved (to the call that made a generator) into a
                    # traced @contextmanager's with statement: on to that statement
                    outside = _outside_open_contexts(trace, current)
                    if outside is not current and outside.step < plan.step:
                        if attempt == _MAX_GENERATOR_REPLANS:
                            raise Unsupported(f"{current.explanation}: the graph break kept moving",
                                              kind=current.kind, hint="the frame runs eagerly")
                        moved = outside
                if moved is None:
                    break
                current = moved
                plan = plan_break(moved)
        se = trace.side_effects
        if plan is not None:
            emitter = BreakEmitter(None, trace, plan, runner_for)
            states = emitter.states()
            roots = se.replay_roots() + [v for st in states for v in st.values()]
            trace.check_paused_generators(_reachable([v for st in states for v in st.values()]))
        else:
            roots = [result] + se.replay_roots()
            trace.check_paused_generators()
        # (classes made in the trace are also reached through loads of their
        # template that are no child of anything: count what they hold)
        counts, tensors = live_values(roots + list(se.templates.values()))
        # An exception raised in the trace and still reached afterwards (kept
        # in a local across a break, stored, returned) would be rebuilt
        # without its traceback, context and identity: break where it was
        # raised instead, so the native code raises the real one.
        raised = [trace.raise_steps[k][1] for k in counts if k in trace.raise_steps]
        # Likewise a dict holding keys of their own __hash__ (rebuilding it
        # would call it again, values.user_keys): break at its first such key.
        # (copies of such a dict hold them too: the first such key of the
        # trace is before all of them)
        rehashed = [min(step for _, step in trace.user_key_steps.values())] \
            if trace.user_keyed and holds_user_keyed_dict(roots + list(se.mutated)) else []
        if plan is None and not config.force_transform and not (trace.graph.op_count > 0 or tensors):
            break  # the original code runs (see below)
        if not raised and not rehashed:
            break
        if fullgraph:
            raise Unsupported("an exception raised in the trace outlives its handler" if raised else
                              "a dict with keys of their own __hash__ outlives the trace",
                              kind="raised_exception" if raised else "unsupported_dict")
        if raised and (not rehashed or min(raised) <= min(rehashed)):
            why = Unsupported("an exception raised in the trace is used after its handler",
                              kind="raised_exception", hint="the frame breaks where it is raised")
            step = min(raised)
        else:
            why = Unsupported("a dict with keys of their own __hash__ outlives the trace (rebuilding it would "
                              "call their __hash__/__eq__ again)", kind="unsupported_dict",
                              hint="the frame breaks at its first such key")
            step = min(rehashed)
        trace, failure = _failure_at(step, why, fn, args, kwargs, policy, backend_name)
    if plan is not None and plan.delegated:
        log("graph_breaks", "%s: the continuation it calls runs natively (it breaks: %s)",
            fn.__qualname__, plan.record)
    elif plan is not None:
        STATS.graph_breaks += 1
        log("graph_breaks", "graph break in %s: %s", fn.__qualname__, plan.record)
        emit("break", plan.record)

    traced = time.perf_counter()
    backend_seconds = 0.0
    graph = trace.graph
    if plan is not None:
        # (only a trigger to recompile: the break path itself runs the construct natively)
        for g in break_guards:
            trace.guards.add(g)
    _add_trace_wide_guards(trace, fn, closure_param)
    has_graph = graph.op_count > 0 or bool(tensors)
    if not has_graph and plan is None and not config.force_transform:
        # Nothing for a backend: the original code does the same work (side
        # effects included) at no cost.  Keep the guards, run the original.
        return _original_code_entry(trace, fn, kept, closure_param, start)

    cg = Codegen(fn.__code__, fn.__globals__, counts)
    cg.templates = se.templates
    cg.prologue()
    graphs = []
    if has_graph:
        if backend_name != "eager":
            _guard_disjoint_storage(trace)
        gm = graph.finish([t.node for t in tensors])
        # custom backends get real tensors, as from torch.compile (they may run
        # or benchmark the graph); bytegraph's own ones read the fakes' metadata
        real_inputs = not getattr(backend, "takes_fake_inputs", False)
        example_inputs = graph.example_inputs(real=real_inputs)
        if enabled("graph_code"):
            log("graph_code", "graph for %s:\n%s", fn.__qualname__, gm.print_readable(print_output=False))
        if _scalar_arithmetic_only(gm):
            # Python int/float/bool arithmetic on symbolic numbers (a loop
            # counter made dynamic, ``a += i`` in a loop body): the graph's own
            # Python code computes it exactly; a backend would only add its
            # compile time, and the user would see a "graph" without tensor work.
            compiled = gm.forward
        else:
            backend_start = time.perf_counter()
            context_mode = graph.fake_mode if real_inputs else None
            # under DDP: one graph per gradient bucket (distributed/ddp.py)
            with _without_cse(graph.random_op):
                split = compile_split(backend_name, backend, gm, graph, context_mode, lambda piece, examples:
                                      _compile_with_blocks(backend_name, backend, piece, examples, context_mode))
                if split is None:
                    compiled, handed = _compile_with_blocks(backend_name, backend, gm, example_inputs,
                                                            context_mode), [gm]
                else:
                    compiled, handed = split
            backend_seconds = time.perf_counter() - backend_start
            for handed_gm in handed:
                graphs.append(handed_gm)
                STATS.graphs += 1
                emit("graph", handed_gm)
        cg.push_callable(compiled)
        cg.load_sources([inp.source for inp in graph.inputs])
        cg.call(len(graph.inputs))
        if tensors:
            cg.emit("UNPACK_SEQUENCE", arg=len(tensors))
            for t in tensors:
                temp = cg.new_temp()
                cg.emit("STORE_FAST", temp)
                cg.store_tensor_output(t, temp)
        else:
            cg.emit("POP_TOP")
    if trace.grad_mode_after is not None:
        cg.push_callable(torch._C._set_grad_enabled)
        cg.load_object(trace.grad_mode_after)
        cg.call(1)
        cg.emit("POP_TOP")
    se.emit_hook_registrations(cg)
    if plan is not None:
        emitter.cg = cg
        cg.continuation = True
        emitter.stage(states)
        cg.continuation = False
        mark = cg.temp_mark()
        se.emit_replay(cg)
        cg.release_temps_since(mark)
        cg.continuation = True
        emitter.release_rebound_arguments()
        emitter.emit(states)
    else:
        cg.reconstruct(result)
        se.emit_replay(cg)
        cg.emit("RETURN_VALUE")
    code = cg.assemble()
    if enabled("bytecode"):
        import io
        buf = io.StringIO()
        dis.dis(code, file=buf)
        log("bytecode", "transformed bytecode of %s:\n%s", fn.__qualname__, buf.getvalue())
    new_fn = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, kept.__closure__)
    new_fn.__kwdefaults__ = fn.__kwdefaults__
    new_fn.__qualname__ = fn.__qualname__
    _guard_distinct_inputs(trace)
    guards_start = time.perf_counter()
    guard = compile_guards(trace.guards, kept, fn.__globals__, closure_param)
    done = time.perf_counter()
    if not has_graph:
        STATS.frames_transformed += 1
    entry = CacheEntry(guard, new_fn, graphs, done - start, breaks=int(plan is not None and not plan.delegated))
    entry.phases = {"trace": traced - start, "backend": backend_seconds, "guards": done - guards_start,
                    "codegen": guards_start - traced - backend_seconds}
    entry.observed_shapes = {i.source.name(): tuple(i.example.shape) for i in graph.inputs
                             if isinstance(i.example, torch.Tensor)}
    return entry


def _without_cse(random_op: Optional[str]):
    """While a graph that draws random numbers compiles: AOTAutograd without
    common-subexpression elimination.  Its partitioner merges equal nodes of
    the joint graph, sparing only the random operators of a list of its own,
    which lacks ``rrelu_with_noise``, ``exponential_`` and ``uniform_``: two
    ``F.rrelu(x, training=True)`` of one ``x`` became one value (torch
    2.13, torch.compile's aot_eager and inductor alike).  A graph without
    random numbers keeps it."""
    if random_op is None:
        return contextlib.nullcontext()
    import torch._functorch.config as functorch_config
    log("graph_code", "the graph draws random numbers (%s): AOTAutograd compiles it without CSE", random_op)
    return functorch_config.patch(cse=False)


def _compile_with_blocks(backend_name, backend, gm, example_inputs, fake_mode):
    """The backend's compile of ``gm``; a graph with block calls (layer
    reuse) is lowered for the backend first, and if the backend rejects
    the lowered form, compiled again with plain calls of the blocks' code."""
    from .block_graphs import has_blocks, lower_for_backend
    if not has_blocks(gm):
        return compile_graph(backend_name, backend, gm, example_inputs, fake_mode)
    lowered = lower_for_backend(gm, backend_name)
    if lowered is gm:
        return compile_graph(backend_name, backend, gm, example_inputs, fake_mode)
    patches = lowered.meta.get("inductor_config_patches")
    try:
        if patches:
            backend = with_inductor_patches(backend, patches, lowered.meta.get("functorch_config_patches"))
        return compile_graph(backend_name, backend, lowered, example_inputs, fake_mode)
    except BackendError as e:
        if config.raise_on_error:
            raise
        log("layer_reuse", "%s rejected the blocks as invoke_subgraph (%s); compiling their code inline",
            backend_name, e)
        return compile_graph(backend_name, backend, gm, example_inputs, fake_mode)


def _without_call_closure(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` (a generated function made for one call) with empty cells.

    Its entry and guard need only its code and signature; keeping the call's
    own cells would keep whatever they held alive as long as the cache."""
    cells = tuple(types.CellType() for _ in fn.__code__.co_freevars) or None
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    return out


def _add_trace_wide_guards(trace: Trace, fn, closure_param: bool) -> None:
    """Guards that depend on the whole trace, not on one value read."""
    graph = trace.graph
    if not closure_param:
        # the compiled function's own code and defaults (both are writable)
        trace.guards.add(Guard("FN_CODE", None, fn.__code__))
        if fn.__defaults__ is not None or fn.__kwdefaults__ is not None:
            trace.guards.add(Guard("FN_DEFAULTS", None, (fn.__defaults__, fn.__kwdefaults__)))
    if graph.symbolic_inputs:
        trace.guards.add(Guard("SHAPE_ENV", None, (graph.shape_env, list(graph.symbolic_inputs))))


#: what a graph node may compute for the graph to be plain Python arithmetic
_SCALAR_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)
_PYTHON_ARITHMETIC_MODULES = ("_operator", "operator", "math", "builtins")


def _scalar_arithmetic_only(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` holds no tensor work: every input and node is a Python
    number (or a symbolic one) and every node is an ``operator``/``math``
    function or one of torch's ``sym_*`` helpers, which compute the same on
    plain numbers.

    Example::

        >>> import operator, torch.fx
        >>> g = torch.fx.Graph()
        >>> a, i = g.placeholder("a"), g.placeholder("i")
        >>> a.meta["val"] = i.meta["val"] = 1
        >>> n = g.call_function(operator.add, (a, i)); n.meta["val"] = 2
        >>> _ = g.output((n,))
        >>> _scalar_arithmetic_only(torch.fx.GraphModule(torch.nn.Module(), g))
        True
    """
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if not isinstance(node.meta.get("val"), _SCALAR_TYPES):
            return False
        if node.op == "placeholder":
            continue
        if node.op != "call_function":
            return False
        target = node.target
        module = getattr(target, "__module__", None)
        if module in _PYTHON_ARITHMETIC_MODULES:
            continue
        if module == "torch" and getattr(target, "__name__", "").startswith("sym_"):
            continue
        return False
    return True


def _original_code_entry(trace: Trace, fn, kept, closure_param: bool, start: float,
                         raises: bool = False) -> CacheEntry:
    """An entry that runs the original code under the trace's guards.

    Used when there is nothing for a backend, and when the trace found that
    ``fn`` raises for these inputs: that outcome is cached like any other, so
    the exception propagates exactly as in Python (traceback included) and
    the next such call costs a guard check, not a trace.
    """
    if raises:
        _add_trace_wide_guards(trace, fn, closure_param)
    guard = compile_guards(trace.guards, kept, fn.__globals__, closure_param)
    entry = CacheEntry(guard, kept, [], time.perf_counter() - start, transformed=False)
    entry.raises = raises
    return entry


def _outside_open_contexts(trace: Trace, e: Unsupported) -> Unsupported:
    """A break while a traced ``@contextmanager`` generator is open moves to the
    outermost such ``with`` statement: the generator exists only in the tracer,
    so the statement runs natively and its body continues in a resume function."""
    if not trace.open_contexts or getattr(e, "frame", None) is None:
        return e
    ctx = trace.open_contexts[0]
    moved = Unsupported(f"{e.explanation} at {e.location}, inside `with {ctx.name}()`: a @contextmanager "
                        "generator cannot be paused across a graph break, so that with statement runs natively",
                        kind=e.kind, hint=e.hint)
    moved.location, moved.frame, moved.index, moved.step = ctx.location, ctx.frame, ctx.index, ctx.step
    return moved


def _leave_resumed_loops_native(trace: Trace, failure: Unsupported, fn, args, kwargs, policy, backend_name):
    """A break inside a loop over a real iterator the trace stepped (a loop
    resumed after a break in an earlier iteration): ending the graph there
    would resume the loop once more at the next position, compiling the
    same resume function again per iteration.  The frame's policy marks
    the iterator instead, and the trace is run again: it then breaks at
    the loop's ``FOR_ITER``, and the loop runs natively (DESIGN.md §8)."""
    from .values.real_iterators import ExistingIteratorValue
    root = getattr(failure, "frame", None)
    while root is not None and root.parent is not None:
        root = root.parent
    if root is None or policy is None:
        return trace, failure
    names = {v.source.name() for v in root.stack
             if isinstance(v, ExistingIteratorValue) and v.steps and v.source is not None}
    names -= policy.moving_iterators
    if not names:
        return trace, failure
    policy.moving_iterators.update(names)
    retrace = Trace(fn, policy, backend_name)
    try:
        retrace.run(args, kwargs)
    except Unsupported as e:
        if e.kind not in NO_BREAK_KINDS:
            return _leave_resumed_loops_native(retrace, e.with_traceback(None), fn, args, kwargs, policy,
                                               backend_name)
    except UserException:
        pass
    # (not expected: the same path fails where it first steps the iterator)
    policy.moving_iterators.difference_update(names)
    return trace, failure


def _before_traced_raises(trace: Trace, failure: Unsupported, fn, args, kwargs, policy, backend_name):
    """Move a break inside an exception handler to where the handled
    exception was raised, when that raise happened in the trace.

    Code after a break inside a handler runs with the handled exception
    established natively (a bare ``raise``, ``sys.exc_info()``, chaining).
    An exception raised in the trace is symbolic: rebuilding it would lose
    its traceback, its context and its identity.  Breaking at its raise
    instead makes the native code raise the real one, and the handler runs
    in a resume function that receives it.  The trace is run again to that
    step to see the state there (which may be inside an earlier handler in
    turn: the steps only decrease).
    """
    while True:
        frame = getattr(failure, "frame", None)
        if frame is None:
            return trace, failure
        from .break_plan import frame_chain
        steps = [trace.raise_steps[id(v)][1] for f in frame_chain(frame) for v in f.exc_stack
                 if id(v) in trace.raise_steps]
        if not steps:
            return trace, failure
        why = Unsupported(f"{failure.explanation} at {failure.location}, inside the handler of an exception "
                          "raised in the trace: the break moves to its raise", kind=failure.kind, hint=failure.hint)
        trace, failure = _failure_at(min(steps), why, fn, args, kwargs, policy, backend_name)
        failure = _outside_open_contexts(trace, failure)


def _failure_at(step: int, why: Unsupported, fn, args, kwargs, policy, backend_name):
    """A trace run to ``step`` and ``why`` located there, as if the
    instruction at that step had been unsupported."""
    trace = Trace(fn, policy, backend_name)
    trace.stop_step = step
    try:
        trace.run(args, kwargs)
    except (UserException, Unsupported):
        trace.stopped_frame = None
    stopped = trace.stopped_frame
    if stopped is None:
        raise Unsupported("the retrace did not reach the raise of an exception", kind="internal")
    why.location, why.frame, why.index, why.step = stopped.location(), stopped, stopped.ip, step
    why.stack, why.user_location = stopped.stack_trace(), stopped.user_location()
    return trace, why


#: times a break may move before a generator it would have to hand on
_MAX_GENERATOR_REPLANS = 4


def _reachable(values) -> set:
    """Ids of the values ``values`` refer to, directly or not."""
    return {id(v) for v in reachable(values)}


def _break_before_live_generator(trace: Trace, plan: BreakPlan, runner_for) -> Optional[Unsupported]:
    """A generator that has run in the trace cannot be handed to the code after
    a break (only an unstarted one can be rebuilt).  If one made by the
    compiled frame itself is still live there, the break moves to the call
    that made it: that call and the rest run natively with a real generator."""
    states = BreakEmitter(None, trace, plan, runner_for).states()
    live = _reachable([v for st in states for v in st.values()])
    found = [g for g in trace.generators if id(g) in live and g.state != "created"]
    made_here = [g for g in found if g.origin is not None and g.origin.frame.parent is None]
    if not made_here:
        return None
    first = min(made_here, key=lambda g: g.origin.step)
    o = first.origin
    if o.step >= plan.step:
        return None
    moved = Unsupported(f"{plan.record.explanation} at {plan.record.location}, while generator "
                        f"{first.frame.fn_name}() is paused: the break moves to the call that made it",
                        kind=plan.record.kind, hint=plan.record.hint)
    moved.location, moved.frame, moved.index, moved.step = o.location, o.frame, o.index, o.step
    return moved


def _guard_disjoint_storage(trace: Trace) -> None:
    """A graph that writes to an input, compiled by a backend that
    functionalizes it (aot_eager, inductor), is only right for inputs that
    share memory exactly as at trace time: the writes are replayed onto
    each input separately.  Inputs that overlapped then run the frame
    natively; inputs that did not are guarded to stay apart.
    """
    tensors = [inp for inp in trace.graph.inputs if isinstance(inp.example, torch.Tensor)]
    silent = _written_without_version_bump(trace.graph.graph)
    if len(tensors) < 2 or not any(inp.mutated() or inp.node in silent for inp in tensors):
        return
    if not storages_disjoint(*[inp.example for inp in tensors]):
        raise Unsupported("the graph writes to inputs that share memory", kind="unsupported_input",
                          hint="the frame runs eagerly; pass separate tensors to compile it")
    trace.guards.add(Guard("NO_STORAGE_OVERLAP", tensors[0].source, None, tuple(t.source for t in tensors[1:])))


#: functions that write to tensor arguments without bumping their version
#: counters (batch norm's running statistics), so ``GraphInput.mutated`` misses them
_SILENT_WRITERS = tuple(f for f in (
    torch.batch_norm, torch.nn.functional.batch_norm, torch.instance_norm, torch.nn.functional.instance_norm,
    getattr(torch, "native_batch_norm", None), getattr(torch, "_native_batch_norm_legit", None)) if f is not None)


def _written_without_version_bump(graph) -> set:
    """Placeholders passed to a function in ``_SILENT_WRITERS`` (which may write them)."""
    out = set()
    for node in graph.nodes:
        if node.op == "call_function" and any(node.target is f for f in _SILENT_WRITERS):
            args = [a for a in list(node.args) + list(node.kwargs.values()) if isinstance(a, torch.fx.Node)]
            if len(args) != len(set(args)):
                # one tensor as two of its arguments (running_mean and running_var):
                # a functionalizing backend would replay the two writes as two copies
                raise Unsupported(f"one tensor passed twice to {node.target.__name__}()", kind="unsupported_input",
                                  hint="the frame runs eagerly; pass separate tensors to compile it")
            out.update(a for a in node.all_input_nodes if a.op == "placeholder")
    return out


def _guard_distinct_inputs(trace: Trace) -> None:
    """Objects the trace met through different sources were different objects;
    later calls must pass different objects too.

    The trace made one value per real object, so ``a is b``, a write through
    ``a`` seen through ``b``, and a backend's functionalized mutation all
    depend on which inputs alias.  Where two sources held one object an
    ``ALIAS`` guard was added when it was met; here every other pre-existing
    tensor, container and object is guarded distinct.  Objects guarded by
    identity are left out: their identity is fixed already, except modules
    of a class that a module guarded by its structure has (a fresh module,
    ``DynamicPolicy.fresh_modules``, or a stateless one): a later call may
    pass there the very module another source holds by identity, and the
    trace's writes through one and reads through the other would miss.
    """
    id_guarded = {g.source for g in trace.guards if g.kind in IDENTITY_KINDS}
    sources = [inp.source for inp in trace.graph.inputs
               if isinstance(inp.example, torch.Tensor) and inp.source not in id_guarded]
    existing = [v for v in trace.side_effects.existing_values() if v.source is not None]
    # (by the object's type alone: ``isinstance`` would ask the object for
    # ``__class__``, running a class's own ``__getattribute__``)
    loose_modules = {type(v.obj) for v in existing
                     if v.source not in id_guarded and issubclass(type(getattr(v, "obj", None)), torch.nn.Module)}
    sources += [v.source for v in existing
                if v.source not in id_guarded or (loose_modules and type(getattr(v, "obj", None)) in loose_modules)]
    sources = list(dict.fromkeys(sources))
    if len(sources) > 1:
        trace.guards.add(Guard("NO_ALIASING", sources[0], None, tuple(sources[1:])))

"""One symbolic execution of a root frame: the state shared by all its frames."""

from __future__ import annotations

import inspect
import time
import types
from typing import Dict, Optional

import torch

from .. import config
from ..errors import Unsupported
from ..graph import OutputGraph
from ..guard_compiler import code_signature
from ..guards import Guard, GuardSet, autocast_state, global_state_guards
from ..side_effects import SideEffects
from ..resume import STATE_ARG, origin_of
from ..sources import ItemSource, LocalSource, ObjectSource, RootCellSource, chain
from ..values import builder
from ..values.base import Value
from .frame import Frame, TraceStopped

_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE


class Trace:
    """Trace ``fn(*args, **kwargs)`` symbolically.

    After :meth:`run`, ``graph`` holds the recorded tensor work, ``guards``
    the conditions the result depends on, ``side_effects`` the buffered
    mutations, and ``root`` the finished root frame.
    """

    #: traces made since the compiler last released them (see :meth:`release`)
    made: list = []

    def __init__(self, fn: types.FunctionType, policy=None, backend_name: str = "eager"):
        from ..dynamic import DynamicPolicy
        Trace.made.append(self)
        self.fn = fn
        #: tracing generated code (a resume function, a loop body): its cells are one call's
        self.generated = False
        self.backend_name = backend_name
        self.policy = policy if policy is not None else DynamicPolicy(None)
        self.graph = OutputGraph()
        self.guards = GuardSet()
        self.side_effects = SideEffects(self.guards)
        self.global_cache: Dict[tuple, Value] = {}
        #: a dict key of its own __hash__ was stored in this trace (from then
        #: on every dict lookup checks for such keys: values.user_keys)
        self.user_keyed = False
        #: id(dict value) -> (that value, trace step of its first lookup of such a key)
        self.user_key_steps: Dict[int, tuple] = {}
        self._globals_sources: Dict[int, ObjectSource] = {}
        self.steps = 0
        #: trace step before which to stop (a planned graph break), or -1
        self.stop_step = -1
        #: innermost frame when the trace stopped at ``stop_step``
        self.stopped_frame: Optional[Frame] = None
        self.root: Optional[Frame] = None
        #: every frame of this trace (emptied by ``release``)
        self.frames: list = []
        self.grad_enabled_at_start = torch.is_grad_enabled()
        #: grad mode the code after the graph expects, when it differs from the start
        self.grad_mode_after: Optional[bool] = None
        #: generator context managers entered and not yet exited, outermost first
        #: (a graph break inside one moves to its ``with`` statement)
        self.open_contexts: list = []
        #: torch.autocast blocks entered in the graph and not yet left
        self.open_autocasts: list = []
        #: id(exception value) -> (value, trace step of the instruction that
        #: first raised it in this trace): a break inside its handler moves there
        self.raise_steps: Dict[int, tuple] = {}
        #: generator objects made in the trace (GeneratorValue)
        self.generators: list = []
        #: repeated blocks traced once in this trace (layer_reuse.py)
        from ..layer_reuse import BlockReuse
        self.blocks = BlockReuse(self) if config.reuse_blocks else None
        #: when this trace's time budget ends (config.trace_budget_seconds)
        self.deadline = time.perf_counter() + config.trace_budget_seconds

    def over_budget(self) -> bool:
        """Whether the trace ran past its time budget.  A retrace to a planned
        break (``stop_step``) has none: it must reach the step the first
        trace stopped at, whatever the clock says."""
        return self.stop_step < 0 and time.perf_counter() > self.deadline

    def wrap(self, frame, obj, source) -> Value:
        return builder.wrap(frame, obj, source)

    def globals_source(self, f_globals: dict) -> ObjectSource:
        src = self._globals_sources.get(id(f_globals))
        if src is None:
            src = ObjectSource(f_globals, f"globals of {f_globals.get('__name__', '?')}")
            self._globals_sources[id(f_globals)] = src
        return src

    def set_grad_mode(self, enabled: bool) -> None:
        if enabled != torch.is_grad_enabled():
            self.graph.create_node("call_function", torch._C._set_grad_enabled, (enabled,), {}, None)
            torch._C._set_grad_enabled(enabled)

    def _enter_with_state(self, root: Frame, block, state: dict) -> None:
        """A generated frame whose locals arrive as one state dict: run the
        prologue up to the unpacking block, then make each entry an
        unrealized local (read lazily, guarded only if used)."""
        from .frame import DISPATCH
        start, end = block
        for ins in root.instrs[:start]:
            DISPATCH[ins.opname](root, ins)
        root.ip = end
        src = LocalSource(STATE_ARG)
        del root.unrealized[STATE_ARG]
        self.guards.add(Guard("TYPE_MATCH", src, dict))
        # No guard on the key set: a local's presence is guarded only where
        # the frame reads it (see LocalOps.load_local), and locals() copies
        # the entries nobody touched (see frame_builtins.locals_).
        root.state_source = src
        root.state_names = tuple(state)
        for name, obj in state.items():
            root.unrealized[name] = (obj, ItemSource(src, name))

    def release(self) -> None:
        """Forget the program's objects once the entry is built.

        Frames, values and the side-effect table refer to each other, so a
        finished trace is cyclic garbage that only the cycle collector frees;
        until it runs, every object the trace saw would stay alive (a value
        eager drops at once, a finalizer that should run now).  Clearing the
        tables and the frames' locals and stacks frees them by reference
        counting instead."""
        se = self.side_effects
        for table in (se._existing, se._keepalive, se.mutated, se.attr_writes, se.global_writes, se.order,
                      se.tensor_hooks, se.class_dirty, se._class_values, se.templates, se.warn_guards,
                      self.global_cache, self.raise_steps):
            table.clear()
        # every frame, returned ones too (values such as a generator's or a
        # nested function's still refer to them)
        for frame in self.frames:
            frame.locals.clear()
            frame.stack.clear()
            frame.unrealized.clear()
            frame.exc_stack.clear()
            frame.exc_depths.clear()
            frame.return_value = None
        self.frames = []
        self.blocks = None
        self.root = self.stopped_frame = None
        self.open_contexts = []

    def per_call(self, source) -> bool:
        """Whether objects read from ``source`` are likely new on every call:
        the frame's arguments, and the cells of a generated function."""
        root = chain(source)[0]
        return isinstance(root, LocalSource) or (self.generated and isinstance(root, RootCellSource))

    def run(self, args: tuple, kwargs: dict) -> Value:
        fn = self.fn
        code = fn.__code__
        if code.co_flags & _GENERATOR_FLAGS:
            raise Unsupported("the compiled function is a generator or coroutine", kind="generator",
                              hint="generator functions run eagerly")
        bound = code_signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        root = Frame(self, code, fn.__globals__, {}, [], parent=None, fn_name=fn.__name__)
        root.unrealized = {name: (obj, LocalSource(name)) for name, obj in bound.arguments.items()}
        self.root = root
        origin = origin_of(code)
        self.generated = origin is not None
        if origin is not None and origin.state_block is not None:
            self._enter_with_state(root, origin.state_block, bound.arguments[STATE_ARG])
        grad_before = self.grad_enabled_at_start = torch.is_grad_enabled()
        self.guards.add(Guard("GRAD_MODE", None, grad_before))
        # Ambient state that changes what the captured ops compute (autocast
        # casts, the dtype of new tensors); a compiled backend bakes it in.
        self.guards.add(Guard("AUTOCAST", None, autocast_state()))
        for guard in global_state_guards(self.backend_name):
            self.guards.add(guard)
        from ..values.class_attrs import tracing_writes
        try:
            try:
                with tracing_writes(self.side_effects):
                    return root.run()
            except TraceStopped as stop:
                self.stopped_frame = stop.frame
                return None
            except RecursionError:
                # deep user recursion or a deeply nested structure: the tracer's
                # own stack is deeper than eager's, so the frame runs natively
                # (where the program gets its own RecursionError, if any)
                raise Unsupported("the trace nested too deeply (RecursionError while tracing)",
                                  kind="recursion", hint="the frame runs eagerly") from None
            finally:
                from ..values.warnings_calls import add_warn_guards
                from ..values.class_build import drop_template_guards
                add_warn_guards(self.side_effects, self.guards)
                drop_template_guards(self.side_effects, self.guards)
                # A graph ends outside every autocast block it entered (the
                # code after a break re-enters them natively).
                for ctx in reversed(list(self.open_autocasts)):
                    ctx.close(self)
                self._balance_grad_mode(grad_before)
        finally:
            torch._C._set_grad_enabled(grad_before)

    def check_paused_generators(self, live=frozenset()) -> None:
        """A generator left paused inside a try/with block runs its
        except/finally/__exit__ code when it is closed -- when CPython drops
        it, or at the end of the program.  The trace does not model when that
        is, so such a frame runs eagerly.  ``live``: ids of the values handed
        on at a graph break (those are not dropped)."""
        for gen in self.generators:
            if id(gen) not in live and not gen.close_is_silent():
                raise Unsupported(f"generator {gen.frame.fn_name}() ({gen.frame.code.co_filename}:{gen.frame.code.co_firstlineno}) left paused inside a try/with block "
                                  "(closing it runs code)", kind="generator_object",
                                  hint="the frame runs eagerly; exhaust or close() the generator")

    def _balance_grad_mode(self, grad_before: bool) -> None:
        # NOTE: a graph leaves grad mode as it found it, so every backend sees
        # balanced global state; if the frame's code after the graph expects
        # another mode, the transformed code sets it natively (grad_mode_after).
        # Open grad-mode contexts crossing a break are re-entered natively
        # (WithExitValue.reconstruct).
        now = torch.is_grad_enabled()
        if now != grad_before:
            self.graph.create_node("call_function", torch._C._set_grad_enabled, (grad_before,), {}, None)
            self.grad_mode_after = now

"""One symbolic execution of a root frame: the state shared by all its frames."""

from __future__ import annotations

import inspect
import types
from typing import Dict, Optional

import torch

from .. import config
from ..errors import Unsupported, UserException
from ..graph import OutputGraph
from ..guards import Guard, GuardSet
from ..side_effects import SideEffects
from ..sources import ObjectSource
from ..values import builder
from ..values.base import Value
from .frame import Frame

_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE


class Trace:
    """Trace ``fn(*args, **kwargs)`` symbolically.

    After :meth:`run`, ``graph`` holds the recorded tensor work, ``guards``
    the conditions the result depends on, ``side_effects`` the buffered
    mutations, and ``root`` the finished root frame.
    """

    def __init__(self, fn: types.FunctionType):
        self.fn = fn
        self.graph = OutputGraph()
        self.guards = GuardSet()
        self.side_effects = SideEffects()
        self.global_cache: Dict[tuple, Value] = {}
        self._globals_sources: Dict[int, ObjectSource] = {}
        self.steps = 0
        self.root: Optional[Frame] = None

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

    def run(self, args: tuple, kwargs: dict) -> Value:
        fn = self.fn
        code = fn.__code__
        if code.co_flags & _GENERATOR_FLAGS:
            raise Unsupported("the compiled function is a generator or coroutine", kind="generator",
                              hint="generator functions run eagerly")
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        root = Frame(self, code, fn.__globals__, {}, [], parent=None, fn_name=fn.__name__)
        root.unrealized = dict(bound.arguments)
        self.root = root
        grad_before = torch.is_grad_enabled()
        self.guards.add(Guard("GRAD_MODE", None, grad_before))
        try:
            return root.run()
        finally:
            torch._C._set_grad_enabled(grad_before)

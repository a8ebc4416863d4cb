"""Objects held but not modelled: a hook's handle, and anything bytegraph
cannot trace (using it is a graph break)."""

from __future__ import annotations

import weakref

from ..errors import Unsupported
from .base import Value
from .constants import const


class HookHandleValue(Value):
    """The ``RemovableHandle`` a hook registration returns.

    The real handle exists only once the registration is replayed after the
    graph; codegen keeps it in a temporary, which is how it is reconstructed.
    Calling ``remove()`` during the trace is not supported.
    """

    __slots__ = ()

    def python_type(self):
        from torch.utils.hooks import RemovableHandle
        return RemovableHandle


class OpaqueValue(Value):
    """A pre-existing object bytegraph cannot model (a C function outside torch,
    an ``nn.Module`` for now, ...).  Holding it is fine; using it is a graph
    break.  Reconstructs through its source."""

    __slots__ = ("obj", "why", "kind", "hint")

    def __init__(self, obj, source, why: str, kind: str, hint: str):
        super().__init__(source)
        self.obj = obj
        self.why = why
        self.kind = kind
        self.hint = hint

    def reads_caller_frame(self) -> bool:
        from .frame_blind import c_function_reads_caller_frame
        return c_function_reads_caller_frame(self.obj)

    def real_object(self):
        return (self.obj,)

    def python_type(self):
        return type(self.obj)

    def _fail(self):
        raise Unsupported(self.why, kind=self.kind, hint=self.hint)

    def call(self, tx, args, kwargs):
        self._fail()

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__") and type(self.obj) not in (weakref.ProxyType, weakref.CallableProxyType) \
                and hasattr(self.obj, name):
            return const(getattr(self.obj, name))
        self._fail()

    def truth(self, tx):
        self._fail()

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.obj)

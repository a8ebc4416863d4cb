"""``bytegraph.compile(DDP(model))``: DDP's forward natively, the module it wraps compiled.

See :mod:`bytegraph.distributed.ddp` for how the wrapped module's graphs are
cut at DDP's gradient buckets.
"""

from __future__ import annotations

from ..compiled_module import CompiledModule


class DDPCompiledModule(CompiledModule):
    """``bytegraph.compile(DDP(model))``: DDP's forward runs natively on each
    call, the module it wraps runs compiled (its calls go through a
    :class:`CompiledModule` of it, with this compile's settings, put in DDP's
    place of it for the call).

    Example::

        >>> # on each rank, after init_process_group:
        >>> # fast = bytegraph.compile(DDP(model), backend="aot_eager")
        >>> # fast(x).sum().backward()       # gradients all-reduced bucket by bucket
    """

    def __init__(self, module, backend_name, backend, fullgraph, dynamic=None):
        super().__init__(module, backend_name, backend, fullgraph, dynamic)
        object.__setattr__(self, "_bg_inner", None)

    def _inner(self):
        wrapped = self._orig_mod._modules["module"]
        inner = self.__dict__["_bg_inner"]
        if inner is None or inner._orig_mod is not wrapped:
            name, backend, fullgraph, dynamic = self._bg_options
            inner = CompiledModule(wrapped, name, backend, fullgraph, dynamic)
            object.__setattr__(self, "_bg_inner", inner)
        return inner

    def __call__(self, /, *args, **kwargs):
        ddp = self._orig_mod
        modules = ddp._modules
        wrapped = modules["module"]
        if isinstance(wrapped, CompiledModule):
            return ddp(*args, **kwargs)   # DDP(bytegraph.compile(m)) compiled again: already compiled
        modules["module"] = self._inner()
        try:
            return ddp(*args, **kwargs)
        finally:
            modules["module"] = wrapped

    forward = __call__

    def _recompiled(self, module) -> "DDPCompiledModule":
        name, backend, fullgraph, dynamic = self._bg_options
        return DDPCompiledModule(module, name, backend, fullgraph, dynamic)

"""Backends: what turns a captured ``GraphModule`` into a callable.

The contract is torch.compile's: ``backend(gm, example_inputs) -> callable``
where ``example_inputs`` are the real inputs of the call being compiled
(tensors the graph writes to are copies) and the callable takes the graph's
inputs positionally and returns a sequence of outputs.  bytegraph's own
backends (marked ``takes_fake_inputs``) get the trace's fake tensors instead:
they only read metadata, and the fakes carry the symbolic sizes.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, List, Optional, Tuple

import torch

from .errors import BackendError


def _eager(gm: torch.fx.GraphModule, example_inputs):
    # gm.forward, not gm: GraphModule.__call__ goes through nn.Module hook machinery.
    return gm.forward


def _boxed_nop(gm, example_inputs):
    from functorch.compile import make_boxed_func
    return make_boxed_func(gm.forward)


def _aot_eager(gm: torch.fx.GraphModule, example_inputs):
    from torch._functorch.aot_autograd import aot_module_simplified
    return aot_module_simplified(gm, example_inputs, fw_compiler=_boxed_nop, bw_compiler=_boxed_nop,
                                 keep_inference_input_mutations=True)


def _inductor(gm: torch.fx.GraphModule, example_inputs):
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


BACKENDS = {"eager": _eager, "aot_eager": _aot_eager, "inductor": _inductor}
for _fn in BACKENDS.values():
    _fn.takes_fake_inputs = True

#: torch.compile's ``mode`` values
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _registered_with_torch(name: str):
    """A backend registered under ``name`` with torch's registry
    (``@torch._dynamo.register_backend`` or a ``torch_dynamo_backends`` entry
    point), or None.  The registry is read only when the program imported it."""
    registry = sys.modules.get("torch._dynamo.backends.registry")
    fns = getattr(registry, "_COMPILER_FNS", None)
    if isinstance(fns, dict) and callable(fns.get(name)):
        return fns[name]
    try:
        from importlib.metadata import entry_points
        for ep in entry_points(group="torch_dynamo_backends"):
            if ep.name == name:
                return ep.load()
    except Exception:
        return None
    return None


def lookup_backend(backend) -> Tuple[str, Callable]:
    """Resolve a backend name or callable to ``(name, fn)``.

    A name is one of bytegraph's (``"eager"``, ``"aot_eager"``,
    ``"inductor"``) or one registered with torch's backend registry.

    Example::

        >>> lookup_backend("eager")[0]
        'eager'
    """
    if isinstance(backend, str):
        fn = BACKENDS.get(backend) or _registered_with_torch(backend)
        if fn is None:
            raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(sorted(BACKENDS))}, "
                             f"a name registered with torch's backend registry, "
                             f"or a callable backend(gm, example_inputs)")
        return backend, fn
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__), backend
    raise TypeError(f"backend must be a name or a callable, not {type(backend).__name__}")


def _inductor_patches(mode: Optional[str], options: Optional[dict], dynamic) -> dict:
    """Inductor config patches for torch.compile's ``mode``/``options``; a
    ValueError names an option Inductor does not have."""
    import torch._inductor.config as inductor_config
    patches: dict = {}
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options
        patches.update(list_mode_options(mode, dynamic))
    known = inductor_config.get_config_copy()
    for key, value in (options or {}).items():
        if key not in known:
            raise ValueError(f"unexpected Inductor option {key!r} in options=; see torch._inductor.config "
                             f"(for example 'max_autotune', 'epilogue_fusion')")
        patches[key] = value
    return patches


def configure(name: str, fn: Callable, mode: Optional[str], options: Optional[dict], dynamic) -> Callable:
    """The backend callable with torch.compile's ``mode`` and ``options``
    applied: Inductor compiles under those config patches; another backend
    receives them as keyword arguments (``mode=``, ``options=``), as
    torch.compile passes them.

    Example::

        >>> name, fn = lookup_backend("eager")
        >>> configure(name, fn, None, None, None) is fn
        True
    """
    if mode is None and not options:
        return fn
    if fn is _inductor:
        patches = _inductor_patches(mode, options, dynamic)

        def inductor_with_options(gm, example_inputs):
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs, config_patches=patches)
        inductor_with_options.takes_fake_inputs = True
        return inductor_with_options
    kwargs = {k: v for k, v in (("mode", mode), ("options", options)) if v is not None}

    def with_options(gm, example_inputs):
        return fn(gm, example_inputs, **kwargs)
    with_options.__name__ = name
    with_options.takes_fake_inputs = getattr(fn, "takes_fake_inputs", False)
    return with_options


def compile_graph(name: str, backend: Callable, gm: torch.fx.GraphModule, example_inputs: List,
                  fake_mode=None) -> Callable:
    """Run the backend, turning its failures into :class:`BackendError`.

    With ``fake_mode`` (a backend given real inputs) the trace's fake-tensor
    mode is published as torch's tracing context while the backend runs, as
    torch.compile does: AOTAutograd or Inductor called inside a custom
    backend then reuse its shape environment (symbolic sizes, unbacked
    numbers) instead of making a new one from the real inputs.
    """
    context = contextlib.nullcontext()
    if fake_mode is not None:
        from torch._guards import TracingContext, tracing
        context = tracing(TracingContext(fake_mode))
    try:
        with context:
            compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendError(name, f"{type(e).__name__}: {e}") from e
    if not callable(compiled):
        raise BackendError(name, f"returned a {type(compiled).__name__}, which is not callable")
    return compiled

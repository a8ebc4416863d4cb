"""Backends: what turns a captured ``GraphModule`` into a callable.

The contract is torch.compile's: ``backend(gm, example_inputs) -> callable``
where ``example_inputs`` are fake tensors and the callable takes the graph's
inputs positionally and returns a sequence of outputs.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

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


def lookup_backend(backend) -> Tuple[str, Callable]:
    """Resolve a backend name or callable to ``(name, fn)``.

    Example::

        >>> lookup_backend("eager")[0]
        'eager'
    """
    if isinstance(backend, str):
        fn = BACKENDS.get(backend)
        if fn is None:
            raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(sorted(BACKENDS))}, "
                             f"or a callable backend(gm, example_inputs)")
        return backend, fn
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__), backend
    raise TypeError(f"backend must be a name or a callable, not {type(backend).__name__}")


def compile_graph(name: str, backend: Callable, gm: torch.fx.GraphModule, example_inputs: List) -> Callable:
    """Run the backend, turning its failures into :class:`BackendError`."""
    try:
        compiled = backend(gm, example_inputs)
    except Exception as e:
        raise BackendError(name, f"{type(e).__name__}: {e}") from e
    if not callable(compiled):
        raise BackendError(name, f"returned a {type(compiled).__name__}, which is not callable")
    return compiled

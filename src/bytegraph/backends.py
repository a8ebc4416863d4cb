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

from .errors import BackendError, InvalidArgument, InvalidArgumentType


def _eager(gm: torch.fx.GraphModule, example_inputs):
    # gm.forward, not gm: GraphModule.__call__ goes through nn.Module hook machinery.
    return gm.forward


def _boxed_nop(gm, example_inputs):
    from functorch.compile import make_boxed_func
    return make_boxed_func(gm.forward)


def _aot_eager(gm: torch.fx.GraphModule, example_inputs):
    """AOTAutograd with the min-cut partitioner, then eager kernels, as torch's
    ``aot_eager`` (torch 2.13).  The default partitioner would run a
    multi-output forward op such as attention again in the backward: one
    attention forward more per layer and step."""
    from functorch.compile import min_cut_rematerialization_partition
    return _aot_eager_default_partitioner(gm, example_inputs, partition_fn=min_cut_rematerialization_partition)


def _aot_eager_default_partitioner(gm: torch.fx.GraphModule, example_inputs, **partition):
    """AOTAutograd with its default partitioner (torch's debugging backend of that name)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    return aot_module_simplified(gm, example_inputs, fw_compiler=_boxed_nop, bw_compiler=_boxed_nop,
                                 keep_inference_input_mutations=True, **partition)


def _inductor(gm: torch.fx.GraphModule, example_inputs):
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


def _aot_eager_partitioned(gm: torch.fx.GraphModule, example_inputs):
    """AOTAutograd with Inductor's decompositions and min-cut partitioner, then
    eager kernels: what Inductor would be given, without Inductor (isolates an
    Inductor problem from an AOTAutograd one)."""
    import functools as _functools
    from functorch.compile import min_cut_rematerialization_partition
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._inductor.compile_fx import select_decomp_table
    return aot_module_simplified(gm, example_inputs, fw_compiler=_boxed_nop, bw_compiler=_boxed_nop,
                                 decompositions=select_decomp_table(),
                                 partition_fn=_functools.partial(min_cut_rematerialization_partition,
                                                                 compiler="inductor"),
                                 keep_inference_input_mutations=True)


BACKENDS = {"eager": _eager, "aot_eager": _aot_eager, "inductor": _inductor,
            # torch's debugging names for the same pipelines
            "aot_eager_default_partitioner": _aot_eager_default_partitioner, "aot_eager_decomp_partition": _aot_eager_partitioned}
for _fn in BACKENDS.values():
    _fn.takes_fake_inputs = True

#: torch.compile's ``mode`` values when Inductor cannot be asked (its own
#: ``list_mode_options()`` is the authority: torch 2.13 added ``"lite"``)
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: keys of ``options=`` that torch.compile takes for itself, not for the backend
_FRONTEND_OPTIONS = ("guard_filter_fn", "use_aoti")


def inductor_modes() -> Tuple[str, ...]:
    """The ``mode=`` values Inductor knows (``"default"`` first).

    Example::

        >>> inductor_modes()[0]
        'default'
    """
    try:
        from torch._inductor import list_mode_options
        return ("default",) + tuple(m for m in list_mode_options() if m != "default")
    except Exception:  # pragma: no cover - every supported torch has it
        return MODES


def _registered_with_torch(name: str):
    """A backend registered under ``name`` with torch's registry
    (``@torch._dynamo.register_backend``, a ``torch_dynamo_backends`` entry
    point, or one of torch's own, e.g. ``"cudagraphs"``), or None.  The registry
    is read only when the program (or a torch backend) loaded it: bytegraph
    does not import torch._dynamo."""
    registry = sys.modules.get("torch._dynamo.backends.registry")
    if registry is not None:
        fns = getattr(registry, "_COMPILER_FNS", None)
        if isinstance(fns, dict) and callable(fns.get(name)):
            return fns[name]
        lazy = getattr(registry, "_lazy_import", None)
        if callable(lazy) and isinstance(fns, dict):
            try:
                lazy()   # (torch's own backends register themselves on first lookup)
            except Exception:
                pass
            if callable(fns.get(name)):
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
    ``"inductor"``, ``"aot_eager_decomp_partition"``,
    ``"aot_eager_default_partitioner"``) or one registered with torch's
    backend registry.

    Example::

        >>> lookup_backend("eager")[0]
        'eager'
    """
    if isinstance(backend, str):
        fn = BACKENDS.get(backend) or _registered_with_torch(backend)
        if fn is None:
            loaded = "torch._dynamo.backends.registry" in sys.modules
            raise InvalidArgument(
                f"unknown backend {backend!r}; valid backends: {', '.join(sorted(BACKENDS))}, "
                f"a name registered with torch's backend registry"
                + ("" if loaded else " (torch's registry is not loaded: bytegraph never imports torch._dynamo; "
                   "import torch._dynamo first to use torch's other backends by name)")
                + ", or a callable backend(gm, example_inputs)")
        return backend, fn
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__), backend
    raise InvalidArgumentType(f"backend must be a name or a callable, not {type(backend).__name__}")


def check_mode(mode, backend_fn) -> None:
    """Reject a ``mode=`` that Inductor does not know (as torch.compile does
    for Inductor); another backend gets whatever string it is given.

    Example::

        >>> check_mode("max-autotune", BACKENDS["inductor"])
    """
    if mode is None:
        return
    if not isinstance(mode, str):
        raise InvalidArgumentType(f"mode must be a str or None, not {type(mode).__name__}")
    if backend_fn is _inductor and mode != "default" and mode not in inductor_modes():
        raise InvalidArgument(f"unknown mode {mode!r}; valid modes: {', '.join(inductor_modes())}")


def _inductor_patches(mode: Optional[str], options: Optional[dict], dynamic) -> dict:
    """Inductor config patches for torch.compile's ``mode``/``options``: an
    option Inductor does not have, or of another type than its setting, is an
    :class:`InvalidArgument` now rather than a failure at the first call."""
    import typing
    import torch._inductor.config as inductor_config
    patches: dict = {}
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options
        patches.update(list_mode_options(mode, dynamic))
    known = inductor_config.get_config_copy()
    for key, value in (options or {}).items():
        name = key.replace("-", "_") if isinstance(key, str) else key
        if name not in known:
            raise InvalidArgument(f"unexpected Inductor option {key!r} in options=; see "
                                  f"torch._inductor.list_options() (for example 'max_autotune', 'epilogue_fusion')")
        expected = inductor_config.get_type(name) if hasattr(inductor_config, "get_type") else None
        if isinstance(expected, type) and typing.get_origin(expected) is None and not isinstance(value, expected):
            raise InvalidArgument(f"Inductor option {key!r} takes a {type(known[name]).__name__}, "
                                  f"not {type(value).__name__} ({value!r})")
        patches[name] = value
    return patches


def configure(name: str, fn: Callable, mode: Optional[str], options: Optional[dict], dynamic) -> Callable:
    """The backend callable with torch.compile's ``mode`` and ``options``
    applied: Inductor compiles under those config patches; another backend
    receives them as keyword arguments (``mode=``, ``options=``), as
    torch.compile passes them: ``mode="default"`` and empty options are not
    passed.  ``options`` keys torch.compile keeps for itself are taken out:
    ``guard_filter_fn`` (bytegraph keeps every guard: a filter that drops
    guards is never needed for a correct result, so it is ignored, with a log
    record) and ``use_aoti`` (not supported).

    Example::

        >>> name, fn = lookup_backend("eager")
        >>> configure(name, fn, None, None, None) is fn
        True
    """
    check_mode(mode, fn)
    if options is not None and not isinstance(options, dict):
        raise InvalidArgumentType(f"options must be a dict of backend settings, not {type(options).__name__}")
    options = dict(options) if options else {}
    if options.pop("use_aoti", False):
        raise InvalidArgument("options={'use_aoti': True} (AOTInductor) is not supported by bytegraph; "
                              "use torch._export.aot_compile / torch._inductor.aoti_compile_and_package")
    if options.pop("guard_filter_fn", None) is not None:
        from .logs import log
        log("guards", "options['guard_filter_fn'] ignored: bytegraph keeps every guard of %s", name)
    if mode == "default":
        mode = None
    if mode is None and not options:
        return fn
    if fn is _inductor:
        patches = _inductor_patches(mode, options, dynamic)

        def inductor_with_options(gm, example_inputs):
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs, config_patches=patches)
        inductor_with_options.takes_fake_inputs = True
        inductor_with_options.config_patches = patches
        return inductor_with_options
    if fn in BACKENDS.values():
        # bytegraph's eager and aot_eager have no settings (torch's ignore them too)
        from .logs import log
        log("graph_code", "backend %r ignores mode=%r options=%r", name, mode, options)
        return fn
    kwargs = {k: v for k, v in (("mode", mode), ("options", options or None)) if v is not None}

    def with_options(gm, example_inputs):
        return fn(gm, example_inputs, **kwargs)
    with_options.__name__ = name
    with_options.takes_fake_inputs = getattr(fn, "takes_fake_inputs", False)
    return with_options


def with_inductor_patches(backend: Callable, patches: dict, functorch_patches: Optional[dict] = None) -> Callable:
    """``backend`` (bytegraph's ``inductor``, with or without options)
    compiling under the Inductor settings ``patches`` as well (compile_fx
    applies them to the backward's later compile too), and under the
    AOTAutograd settings ``functorch_patches`` while it compiles.

    Example::

        >>> fn = with_inductor_patches(_inductor, {"allow_buffer_reuse": False})
        >>> fn.config_patches
        {'allow_buffer_reuse': False}
    """
    merged = {**getattr(backend, "config_patches", {}), **patches}

    def inductor_patched(gm, example_inputs):
        import torch._functorch.config as functorch_config
        from torch._inductor.compile_fx import compile_fx
        with functorch_config.patch(functorch_patches or {}):
            return compile_fx(gm, example_inputs, config_patches=merged)
    inductor_patched.takes_fake_inputs = getattr(backend, "takes_fake_inputs", False)
    inductor_patched.config_patches = merged
    return inductor_patched


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

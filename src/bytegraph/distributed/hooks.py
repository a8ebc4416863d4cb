"""Module calls that must not be traced whole: DDP modules, and modules with
hooks that run natively (FSDP2's).

**FSDP2.**  ``fully_shard(module)`` registers a forward pre-hook that
all-gathers the module's sharded parameters (swapping the sharded DTensors
for unsharded tensors on the module) and a forward hook that reshards them
and registers the backward all-gather/reduce-scatter.  These hooks are
communication and bookkeeping, marked by torch as not for compilers
(``_dynamo_disable``).  A call of such a module is traced through
:func:`call_with_native_hooks`, Python code that bytegraph inlines like any
other: its pre-hooks run natively (:func:`run_pre_hooks`, a graph break of
kind :data:`BREAK_NATIVE_HOOKS`), then ``forward`` is traced with the
unsharded parameters the hooks put on the module, then the forward hooks run
natively (:func:`run_forward_hooks`).  So the block's computation is one
graph between the hooks' collectives, and it sees exactly the parameters
eager's forward sees.

**DDP.**  A call of a ``DistributedDataParallel`` module inside a trace is a
break of kind :data:`~bytegraph.distributed.ddp.BREAK_DDP_FORWARD`: DDP's
forward (reducer preparation, buffer broadcast) runs natively and calls the
module it wraps, which is compiled when it is a ``bytegraph.compile`` d module.

Example::

    >>> import torch
    >>> m = torch.nn.Linear(2, 2)
    >>> native_hooks(m)
    False
"""

from __future__ import annotations

import sys
import types

import torch

from ..decorators import disable, is_disabled
from ..errors import Unsupported
from .ddp import BREAK_DDP_FORWARD, is_ddp

#: the break kind of running a module's hooks natively around its traced forward
BREAK_NATIVE_HOOKS = "native_module_hooks"

_MARKER_CODES: list = []


def _native_marker_codes() -> tuple:
    """Code objects of the wrappers torch puts on functions compilers must not
    trace lazily (without ``torch._dynamo`` imported): FSDP2's ``_dynamo_disable``."""
    if not _MARKER_CODES:
        common = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_common")
        marker = getattr(common, "_dynamo_disable", None)
        if marker is None:
            return ()   # (FSDP2 not imported yet, or a torch that marks its hooks otherwise)
        _MARKER_CODES.append(marker(lambda: None).__code__)
    return tuple(_MARKER_CODES)


def runs_natively(hook) -> bool:
    """Whether ``hook`` (a function or bound method) is marked as not for
    compilers: ``torch.compiler.disable``/``bytegraph.disable``, or FSDP2's
    hooks (which torch marks lazily).

    Example::

        >>> runs_natively(torch.compiler.disable(lambda m, a: None)), runs_natively(lambda m, a: None)
        (True, False)
    """
    fn = hook.__func__ if isinstance(hook, types.MethodType) else hook
    if is_disabled(fn):
        return True
    code = getattr(fn, "__code__", None)
    return code is not None and code in _native_marker_codes()


def native_hooks(module: torch.nn.Module) -> bool:
    """Whether a forward (pre-)hook of ``module`` must run natively (see the module docstring's example)."""
    hooks = list(module._forward_pre_hooks.values()) + list(module._forward_hooks.values())
    return bool(hooks) and any(runs_natively(h) for h in hooks)


def hooks_run_natively(module: torch.nn.Module) -> bool:
    """Whether a call of ``module`` is traced through :func:`call_with_native_hooks`
    (it has a hook that must run natively, and no hooks that path leaves out:
    backward hooks, forward hooks that run even when forward raises)."""
    return native_hooks(module) and not (module._backward_hooks or module._backward_pre_hooks
                                         or module._forward_hooks_always_called)


@disable
def run_pre_hooks(module, args, kwargs):
    """``module``'s forward pre-hooks, as ``nn.Module._call_impl`` runs them.

    Example::

        >>> m = torch.nn.Identity()
        >>> _ = m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
        >>> run_pre_hooks(m, (1,), {})
        ((2,), {})
    """
    for hook_id, hook in module._forward_pre_hooks.items():
        if hook_id in module._forward_pre_hooks_with_kwargs:
            out = hook(module, args, kwargs)
            if out is not None:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {out}.")
                args, kwargs = out
        else:
            out = hook(module, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
    return args, kwargs


@disable
def run_forward_hooks(module, args, kwargs, result):
    """``module``'s forward hooks, as ``nn.Module._call_impl`` runs them.

    Example::

        >>> m = torch.nn.Identity()
        >>> _ = m.register_forward_hook(lambda mod, args, out: out * 10)
        >>> run_forward_hooks(m, (1,), {}, 2)
        20
    """
    for hook_id, hook in module._forward_hooks.items():
        if hook_id in module._forward_hooks_with_kwargs:
            out = hook(module, args, kwargs, result)
        else:
            out = hook(module, args, result)
        if out is not None:
            result = out
    return result


for _helper in (run_pre_hooks, run_forward_hooks):
    _helper.__bytegraph_break_kind__ = BREAK_NATIVE_HOOKS
    _helper.__bytegraph_break_hint__ = ("the module's hooks are not for compilers (FSDP2's all-gather and "
                                        "reshard): they run natively, its forward is traced")


def call_with_native_hooks(module, args, kwargs):
    """``module(*args, **kwargs)`` with its hooks run natively and its forward traced.

    Example::

        >>> call_with_native_hooks(torch.nn.Identity(), (3,), {})
        3
    """
    args, kwargs = run_pre_hooks(module, args, kwargs)
    result = module.forward(*args, **kwargs)
    return run_forward_hooks(module, args, kwargs, result)


def special_module_call(tx, module_value, args, kwargs):
    """The value of calling ``module_value`` when it is a distributed wrapper
    (see the module docstring), else None (an ordinary module call)."""
    obj = module_value.obj
    if is_ddp(obj):
        raise Unsupported(f"call to a DistributedDataParallel module ({type(obj.module).__name__} inside)",
                          kind=BREAK_DDP_FORWARD,
                          hint="DDP's forward runs natively; compile the module it wraps "
                               "(DDP(bytegraph.compile(model))) to capture its forward")
    if not hooks_run_natively(obj):
        return None
    from ..guards import Guard
    from ..sources import AttrSource
    from ..values.modules import guard_no_global_module_hooks
    # the hooks themselves are read natively when they run; what this path
    # leaves out must stay absent
    guard_no_global_module_hooks(tx)
    if module_value.source is not None:
        for name in ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks_always_called"):
            tx.guards.add(Guard("LEN_MATCH", AttrSource(module_value.source, name), 0))
    from ..sources import ObjectSource
    from ..values.containers import DictValue, TupleValue
    from ..values.constants import const
    fn = tx.wrap(call_with_native_hooks, ObjectSource(call_with_native_hooks, "call_with_native_hooks"))
    return fn.call(tx, [module_value, TupleValue(list(args)),
                        DictValue.from_pairs([(const(k), v) for k, v in kwargs.items()])], {})

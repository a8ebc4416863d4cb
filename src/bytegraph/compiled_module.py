"""``bytegraph.compile(module)``: a module whose calls are compiled.

The wrapper forwards everything but calling to the original module: the
same parameters (unprefixed names in ``state_dict``), ``train()``/``eval()``,
``to()``, attribute reads and writes.  Calling it runs the original module's
full call (its hooks included) through one compiled frame.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from .backends import BACKENDS, lookup_backend
from .cache import CompiledFunction

_OWN = ("_orig_mod", "_bg_call", "_bg_options")


def _call_module(module, /, *args, **kwargs):
    # The module is an argument, not a closure constant: the entry guards
    # which module it traced, so a deepcopy (or any other module) never runs
    # through an entry traced for the original.  ``module(...)`` is the
    # module's own ``__call__``, overridden or not, hooks included.
    return module(*args, **kwargs)


class CompiledModule(torch.nn.Module):
    """The module ``bytegraph.compile(module)`` returns: a proxy whose calls
    are compiled and whose state is the original module's.

    ``training``, parameters, buffers, ``state_dict`` and attributes are read
    from and written to the original (``_orig_mod``); ``copy.deepcopy`` and
    ``pickle`` copy the original and compile the copy anew.

    Example::

        >>> import bytegraph, torch
        >>> lin = torch.nn.Linear(2, 2)
        >>> fast = bytegraph.compile(lin, backend="eager")
        >>> fast(torch.ones(1, 2)).shape, fast.weight is lin.weight
        (torch.Size([1, 2]), True)
    """

    def __init__(self, module: torch.nn.Module, backend_name: str, backend: Callable, fullgraph: bool,
                 dynamic=None):
        super().__init__()
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_bg_options", (backend_name, backend, fullgraph, dynamic))
        fn = CompiledFunction(_call_module, backend_name, backend, fullgraph, dynamic)
        fn.__qualname__ = f"{type(module).__qualname__}.__call__"
        object.__setattr__(self, "_bg_call", fn)

    def __call__(self, /, *args, **kwargs):
        return self._bg_call(self._orig_mod, *args, **kwargs)

    def forward(self, /, *args, **kwargs):
        return self._bg_call(self._orig_mod, *args, **kwargs)

    # ``training`` lives on the original: ``model.eval()`` is seen through the proxy
    @property
    def training(self) -> bool:
        return self.__dict__["_orig_mod"].training

    @training.setter
    def training(self, mode: bool) -> None:
        if "_orig_mod" in self.__dict__:  # nn.Module.__init__ sets it before the original is attached
            self._orig_mod.training = mode

    # -- copies: of the original, with a cache of their own --------------------
    def _recompiled(self, module: torch.nn.Module) -> "CompiledModule":
        name, backend, fullgraph, dynamic = self._bg_options
        return CompiledModule(module, name, backend, fullgraph, dynamic)

    def __deepcopy__(self, memo):
        return self._recompiled(copy.deepcopy(self._orig_mod, memo))

    def __copy__(self):
        return self._recompiled(copy.copy(self._orig_mod))

    def __reduce__(self):
        name, backend, fullgraph, dynamic = self._bg_options
        # a named backend is pickled by its name; a callable one must be picklable itself
        return (_rebuild, (self._orig_mod, name if BACKENDS.get(name) is backend else backend, fullgraph, dynamic))

    # -- everything else is the original module's --------------------------------
    def __getattr__(self, name):
        return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name, value):
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        delattr(self._orig_mod, name)

    # containers of modules (Sequential, ModuleList, ModuleDict) keep their protocol
    def __getitem__(self, key):
        return self._orig_mod[key]

    def __len__(self):
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __contains__(self, item):
        return item in self._orig_mod

    def __dir__(self):
        return dir(self._orig_mod)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    def load_state_dict(self, state_dict, *args, **kwargs):
        # A checkpoint saved from torch.compile's wrapper names every key
        # "_orig_mod.<name>": it loads into the same module here too.
        prefix = "_orig_mod."
        if state_dict and all(isinstance(k, str) and k.startswith(prefix) for k in state_dict):
            state_dict = type(state_dict)((k[len(prefix):], v) for k, v in state_dict.items()) \
                if isinstance(state_dict, dict) else state_dict
        return self._orig_mod.load_state_dict(state_dict, *args, **kwargs)

    def compile(self, *args, **kwargs):
        """Compile the original module again, in place, with these settings
        (``bytegraph.compile``'s arguments)."""
        from .api import compile as bg_compile
        fresh = bg_compile(self._orig_mod, *args, **kwargs)
        if isinstance(fresh, CompiledModule):
            object.__setattr__(self, "_bg_call", fresh._bg_call)
            object.__setattr__(self, "_bg_options", fresh._bg_options)


def _forwarded(name: str):
    """``nn.Module.<name>`` run on the original module (a result that is the
    original, for chaining, is this wrapper)."""
    def method(self, *args, **kwargs):
        result = getattr(self._orig_mod, name)(*args, **kwargs)
        return self if result is self._orig_mod else result
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The original module's ``{name}``."
    return method


# Every nn.Module method that reads or changes the module's state acts on the
# original: hooks registered on the wrapper run (its call is the original's
# call, hooks included), a buffer or submodule added through it is part of
# the module, ``apply`` visits the module itself.
for _name in ("train", "_apply", "state_dict", "parameters", "named_parameters", "buffers", "named_buffers",
              "children", "named_children", "modules", "named_modules", "zero_grad", "apply", "add_module",
              "register_module", "register_buffer", "register_parameter", "get_submodule", "set_submodule",
              "get_parameter", "get_buffer", "get_extra_state", "set_extra_state", "extra_repr",
              "register_forward_hook", "register_forward_pre_hook", "register_backward_hook",
              "register_full_backward_hook", "register_full_backward_pre_hook", "register_state_dict_pre_hook",
              "register_state_dict_post_hook", "register_load_state_dict_pre_hook",
              "register_load_state_dict_post_hook", "_register_state_dict_hook",
              "_register_load_state_dict_pre_hook"):
    if hasattr(torch.nn.Module, _name):
        setattr(CompiledModule, _name, _forwarded(_name))


def _rebuild(module, backend, fullgraph, dynamic):
    name, fn = lookup_backend(backend)
    return CompiledModule(module, name, fn, fullgraph, dynamic)

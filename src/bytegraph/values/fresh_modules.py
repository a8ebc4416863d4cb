"""``torch.nn`` modules constructed inside the compiled code, e.g.
``nn.CrossEntropyLoss()(logits, labels)`` or ``nn.GELU()(x)`` in a forward.

Such a module is a new object on every call, so it cannot be read through a
source and guarded like the model's own modules.  A stateless one (torch's
own class, constant arguments, no parameters, buffers or submodules after
construction) is fully described by its class and arguments: the trace
builds one real instance as a template to read its plain attributes
(``reduction``, ``dim``, ``training``...) and inline its ``forward``, and the
generated code builds a new instance only if the module escapes.
Modules that make parameters (``nn.Linear``: random initialization from the
global RNG) or hold tensors keep breaking.
"""

from __future__ import annotations

import types
import warnings

import torch

from ..errors import Unsupported
from ..sources import AttrSource, ObjectSource
from .base import Value
from .constants import NONE, const

_SIMPLE = (int, float, bool, str, type(None))
_MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def _plain(v) -> bool:
    """A value of the template that is an immutable constant (safe to fold)."""
    if isinstance(v, tuple):
        return all(_plain(x) for x in v)
    return type(v) in _SIMPLE or isinstance(v, torch.dtype)


def is_torch_module_class(cls) -> bool:
    module = type.__dict__["__module__"].__get__(cls) if isinstance(cls, type) else None
    return (type(cls) is type and issubclass(cls, torch.nn.Module) and isinstance(module, str)
            and module.startswith("torch.nn.modules."))


def construct_fresh_module(tx, cls: type, args, kwargs) -> Value:
    """``cls(*args, **kwargs)`` for one of torch's own ``nn`` module classes."""
    name = cls.__qualname__
    if not all(a.is_constant() and _plain(a.as_constant()) for a in list(args) + list(kwargs.values())):
        raise Unsupported(f"constructing nn.{name} with arguments that are not constants",
                          kind="unsupported_class_call", hint="build the module outside the compiled function")
    from torch.nn.modules import module as mod
    from ..guards import Guard
    registration = {"buffer": mod._global_buffer_registration_hooks,
                    "module": mod._global_module_registration_hooks,
                    "parameter": mod._global_parameter_registration_hooks}
    if any(registration.values()):
        # torch's __init__ would run the program's hooks (at trace time)
        raise Unsupported(f"constructing nn.{name} with global registration hooks set",
                          kind="unsupported_class_call")
    for what, hooks in registration.items():
        tx.guards.add(Guard("LEN_MATCH", ObjectSource(hooks, f"nn.Module global {what} registration hooks"), 0))
    cargs = [a.as_constant() for a in args]
    ckwargs = {k: v.as_constant() for k, v in kwargs.items()}
    # the template: torch's own __init__ on constants.  Tensors it would make
    # go to the meta device and the global RNG is restored, so building it
    # has no effect the program could see (a module that makes parameters
    # draws from the RNG when eager builds it: that one is refused below);
    # a warning or an error it raises is left to the native run.
    try:
        with warnings.catch_warnings(record=True) as caught, torch.random.fork_rng(devices=[]), \
                torch.device("meta"):
            warnings.simplefilter("always")
            template = cls(*cargs, **ckwargs)
    except Exception as e:
        raise Unsupported(f"constructing nn.{name} raised {type(e).__name__}", kind="unsupported_class_call")
    if caught:
        raise Unsupported(f"constructing nn.{name} warns", kind="unsupported_class_call")
    state = template.__dict__
    if any(v is not None for d in _MODULE_DICTS for v in state[d].values()):
        raise Unsupported(f"constructing nn.{name} inside a compiled function (it makes parameters, buffers or "
                          "submodules)", kind="unsupported_class_call",
                          hint="build the module outside the compiled function")
    if any(not _plain(v) for k, v in state.items() if not k.startswith("_")):
        raise Unsupported(f"constructing nn.{name}: state that is not constants", kind="unsupported_class_call")
    if cls.__call__ is not torch.nn.Module.__call__ or cls._call_impl is not torch.nn.Module._call_impl:
        raise Unsupported(f"constructing nn.{name}, which overrides __call__", kind="unsupported_class_call")
    return FreshModuleValue(cls, list(args), dict(kwargs), template)


class FreshModuleValue(Value):
    """A stateless ``torch.nn`` module made in the trace from constant
    arguments (see the module docstring).  Its state is read from a
    template instance and never changes (writes break); it reconstructs as
    a new ``cls(*args, **kwargs)``."""

    __slots__ = ("cls", "args", "kwargs", "template")

    def __init__(self, cls, args, kwargs, template):
        super().__init__()
        self.cls, self.args, self.kwargs, self.template = cls, args, kwargs, template

    def python_type(self):
        return self.cls

    def get_attr(self, tx, name):
        from .functions import BoundMethodValue
        from .objects import NO_ATTR, special_lookup
        if name == "__class__":
            return super().get_attr(tx, name)
        state = self.template.__dict__
        attr = special_lookup(self.cls, name)
        owner = next((k for k in self.cls.__mro__ if name in k.__dict__), None)
        if type(attr) is property and attr.fget is not None and isinstance(attr.fget, types.FunctionType):
            fget = tx.wrap(attr.fget, AttrSource(AttrSource(ObjectSource(owner, owner.__qualname__), name), "fget"))
            return fget.call(tx, [self], {})
        if attr is not NO_ATTR and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")):
            raise Unsupported(f"data descriptor nn.{self.cls.__qualname__}.{name}", kind="unsupported_attribute")
        if name in state:
            value = state[name]
            if not _plain(value):
                raise Unsupported(f"nn.{self.cls.__qualname__}.{name} of a module made in the trace",
                                  kind="unsupported_attribute")
            return const(value)
        if isinstance(attr, types.FunctionType):
            return BoundMethodValue(tx.wrap(attr, AttrSource(ObjectSource(owner, owner.__qualname__), name)), self)
        if attr is not NO_ATTR:
            if _plain(attr):
                return const(attr)
            raise Unsupported(f"class attribute nn.{self.cls.__qualname__}.{name} ({type(attr).__name__})",
                              kind="unsupported_attribute")
        for d in _MODULE_DICTS:
            if name in state[d]:
                return NONE  # (only None entries: a module with tensors is not made in the trace)
        tx.raise_python_exception(AttributeError(f"'{self.cls.__name__}' object has no attribute '{name}'", name=name))

    def set_attr(self, tx, name, value):
        raise Unsupported(f"setting {name} on nn.{self.cls.__qualname__} made in the trace",
                          kind="unsupported_setattr")

    def del_attr(self, tx, name):
        self.set_attr(tx, name, None)

    def call(self, tx, args, kwargs):
        from .modules import guard_no_global_module_hooks
        # a new module has no hooks of its own; global ones would run around forward
        guard_no_global_module_hooks(tx)
        return self.get_attr(tx, "forward").call(tx, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self.get_attr(tx, name).call(tx, args, kwargs)

    def truth(self, tx):
        from .objects import NO_ATTR, special_lookup
        if special_lookup(self.cls, "__len__") is not NO_ATTR or special_lookup(self.cls, "__bool__") is not NO_ATTR:
            return super().truth(tx)
        return True

    def children(self):
        return tuple(self.args) + tuple(self.kwargs.values())

    def reconstruct(self, cg):
        cg.push_callable(self.cls)
        cg.call_with(self.args, self.kwargs)

    def __repr__(self):
        return f"FreshModuleValue({self.cls.__name__})"

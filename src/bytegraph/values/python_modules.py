"""Imported module objects as values: attribute reads follow the module's
globals (pending writes of this trace included) and PEP 562 ``__getattr__``."""

from __future__ import annotations

import types
from typing import Optional

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource
from .base import Value
from .constants import const
from .objects import _MISSING, DELETED, special_lookup


class PythonModuleValue(Value):
    """An imported module object (``torch``, ``math``, ``torch.nn.functional``).

    Attribute reads are guarded through the module's source.  Reconstructs
    through its source or as a constant.
    """

    __slots__ = ("module",)

    def __init__(self, module: types.ModuleType, source=None):
        super().__init__(source)
        self.module = module

    def real_object(self):
        return (self.module,)

    def python_type(self):
        return types.ModuleType

    def is_constant(self):
        return True

    def as_constant(self):
        return self.module

    def get_attr(self, tx, name):
        # A module's attributes are its globals: a write made earlier in this
        # trace (``mod.K = 5``, or ``global K`` in one of its functions) is
        # pending in the side-effect table and is what Python would read.
        _check_namespace_coherent(tx, self.module, name, writing=False)
        pending = tx.side_effects.pending_global(self.module.__dict__, name)
        if pending is not None:
            if pending is DELETED:
                tx.raise_python_exception(AttributeError(
                    f"module '{self.module.__name__}' has no attribute '{name}'", name=name))
            return pending
        hooked = self._absent_with_hook(tx, name)
        if hooked is not None:
            return hooked
        try:
            attr = getattr(self.module, name)
        except AttributeError as e:
            tx.raise_python_exception(e)
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(attr, src)

    def _absent_with_hook(self, tx, name) -> Optional[Value]:
        """A name that is not a global of the module: a module ``__getattr__``
        (PEP 562) is called, traced; without one, AttributeError.  Either
        way the name stays absent (guarded), so later calls agree.  None when
        ``getattr`` reads the name without running program code."""
        mod = self.module
        t = type(mod)
        mdict = types.ModuleType.__dict__["__dict__"].__get__(mod)
        if type(mdict) is not dict:
            return None
        if t is not types.ModuleType:
            # a module subclass (a lazy module): its class's own attributes
            # and hooks are program code that getattr would run now
            own = t.__mro__[:t.__mro__.index(types.ModuleType)]
            if special_lookup(t, "__getattribute__") is not types.ModuleType.__dict__["__getattribute__"] \
                    or any(name in k.__dict__ for k in own) \
                    or (name not in mdict and any("__getattr__" in k.__dict__ for k in own)):
                raise Unsupported(f"attribute {name!r} of a {t.__name__} module object", kind="unsupported_attribute")
        if name in mdict or special_lookup(t, name) is not _MISSING:
            return None
        mod_name = dict.get(mdict, "__name__")
        # (CPython's message; a module made with ModuleType.__new__ has no name)
        missing = f"module '{mod_name}' has no attribute '{name}'" if type(mod_name) is str else \
            f"module has no attribute '{name}'"
        if tx.side_effects.pending_global(mdict, "__getattr__") is not None:
            raise Unsupported("a module's __getattr__ written in the trace", kind="unsupported_attribute")
        hook = dict.get(mdict, "__getattr__")
        if self.source is None:
            if hook is not None:
                raise Unsupported("module __getattr__ of a module without a source", kind="unsupported_attribute")
            return None
        dict_src = AttrSource(self.source, "__dict__")
        tx.guards.add(Guard("DICT_CONTAINS", dict_src, (name, False)))
        tx.guards.add(Guard("DICT_CONTAINS", dict_src, ("__getattr__", hook is not None)))
        if hook is None:
            tx.raise_python_exception(AttributeError(missing))
        fn = tx.wrap(hook, ItemSource(dict_src, "__getattr__"))
        return fn.call(tx, [const(name)], {})

    def set_attr(self, tx, name, value):
        if type(self.module) is not types.ModuleType or self.source is None:
            super().set_attr(tx, name, value)
        _check_namespace_coherent(tx, self.module, name, writing=True)
        tx.side_effects.store_global(self.module.__dict__, name, value)

    def del_attr(self, tx, name):
        if type(self.module) is not types.ModuleType or self.source is None:
            super().del_attr(tx, name)
        _check_namespace_coherent(tx, self.module, name, writing=True)
        self.get_attr(tx, name)  # AttributeError if absent, as Python
        tx.side_effects.delete_global(self.module.__dict__, name)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.module)

    def __repr__(self):
        return f"PythonModuleValue({self.module.__name__})"


def _check_namespace_coherent(tx, module, name: str, writing: bool) -> None:
    """A module's globals are written as pending global writes, while
    ``module.__dict__`` is a dict value of its own: neither sees the other's
    changes, so mixing the two in one trace is not modelled."""
    se = tx.side_effects
    if name == "__dict__":
        if se.has_pending_globals(module.__dict__):
            raise Unsupported(f"reading {module.__name__!r}.__dict__ after writes to its globals",
                              kind="unsupported_attribute")
    elif se.dict_view_conflict(module.__dict__, writing):
        raise Unsupported(f"global {name!r} of a module whose __dict__ the trace holds",
                          kind="unsupported_attribute")

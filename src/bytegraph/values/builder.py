"""Wrapping real Python objects met during tracing into values, with guards.

:func:`wrap` is the single entry point: given an object that existed before
the trace and the source it was read from, it picks the value kind, installs
the guards that make the choice valid, and registers mutable objects in the
side-effect table by identity (so one real object is one value).
"""

from __future__ import annotations

import collections
import enum
import functools
import os
import inspect
import sys
import types
import typing
import weakref
from typing import Optional

import torch

from .. import config
from ..errors import Unsupported
from ..guards import Guard
from ..resume import Continuation
from ..sources import AttrSource, ItemSource, ObjectSource, Source
from ..torch_compat import is_autograd_function_apply
from .base import Value
from .constants import LITERAL_TYPES, ConstantValue
from .containers import (key_of, DictValue, IteratorValue, ListValue, NamedTupleValue, RangeValue, SetValue, SliceValue,
                         TupleValue)
from .functions import BuiltinValue, UserFunctionValue
from .objects import (ClassValue, OpaqueValue, PythonModuleValue, UserObjectValue, intercepts_attribute_reads,
                      python_getattribute)
from .lru_cache import LruCacheValue, is_lru_wrapper
from .real_iterators import REAL_ITERATOR_TYPES, wrap_real_iterator
from .numpy_values import (NumpyFunctionValue, NumpyScalarTypeValue, is_numpy_callable, is_numpy_scalar,
                           is_numpy_scalar_type)
from .tensors import TensorFunctionValueTypes, TensorValue, TorchFunctionValue

# Immutable torch objects compared by value (guarded by equality).
_TORCH_CONSTANT_TYPES = (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format,
                         torch.finfo, torch.iinfo)

_FUNCTION_TYPES = (types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType,
                   types.MethodDescriptorType, types.ClassMethodDescriptorType, types.BuiltinMethodType,
                   functools.partial)


_WEAKREF_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)

#: types whose attribute reads are known not to run program code (a fast path
#: past ``intercepts_attribute_reads``)
_PLAIN_TYPES = frozenset({list, tuple, dict, set, frozenset, type, types.FunctionType, types.ModuleType,
                          types.MethodType, types.BuiltinFunctionType, types.CellType, slice, range,
                          torch.Tensor, torch.nn.Parameter})

#: pre-existing dicts with more entries are held, not modelled (each entry
#: read would be wrapped and guarded)
MAX_WRAPPED_DICT = 256


def wrap(tx, obj, source: Source | None) -> Value:
    """Symbolic value for a pre-existing ``obj`` read from ``source``."""
    guards = tx.guards
    t = type(obj)
    if t in _WEAKREF_PROXIES:
        # every attribute read (even isinstance's __class__) goes through to
        # the referent and raises ReferenceError once it is gone: hold it only
        if source is not None:
            guards.add(Guard("TYPE_MATCH", source, t))
        return OpaqueValue(obj, source, "using a weakref.proxy", kind="unsupported_object",
                           hint="it runs natively between graphs")
    if t is int and source is not None and tx.trace.policy.int_is_dynamic(source.name()):
        from .symbolic import SymIntValue
        guards.add(Guard("TYPE_MATCH", source, int))
        return tx.graph.add_int_input(obj, source, lambda node, sym: SymIntValue(node, sym, source))
    if t in (int, float, bool, str, bytes, complex, type(None)) or t is type(Ellipsis) or is_numpy_scalar(obj) \
            or _is_placement(obj):
        if source is not None:
            return ConstantValue(obj, source, (guards, Guard("CONSTANT_MATCH", source, obj)))
        return ConstantValue(obj)
    if t not in _PLAIN_TYPES and intercepts_attribute_reads(t):
        if source is not None:
            guards.add(Guard("TYPE_MATCH", source, t))
        known = tx.side_effects.existing(obj)
        if known is not None:
            return known
        if source is not None and python_getattribute(t) is not None and not issubclass(t, torch.nn.Module):
            # a plain object whose reads run a Python __getattribute__: traced
            # (see UserObjectValue.get_attr)
            value = UserObjectValue(obj, source, guards)
            tx.side_effects.track_existing(obj, value)
            return value
        return OpaqueValue(obj, source, f"a {t.__name__} object, whose class intercepts attribute reads",
                           kind="unsupported_object", hint="it runs natively between graphs")
    if isinstance(obj, torch.Tensor):
        return _wrap_tensor(tx, obj, source)
    se = tx.side_effects
    known = se.existing(obj)
    if known is not None:
        if source is not None and known.source is not None and source != known.source:
            # one object reached through two paths: later calls must alias the same way
            guards.add(Guard("ALIAS", source, others=(known.source,)))
        return known
    if t is collections.deque and source is not None:
        if len(obj) > MAX_WRAPPED_DICT:
            # (a long queue: every item wrapped and guarded on each call, and
            # the whole queue rewritten after the graph, would cost more than
            # running its use natively)
            return _opaque_container(tx, obj, source, f"a deque of {len(obj)} items", "unsupported_object")
        from .deques import wrap_existing_deque
        return wrap_existing_deque(tx, obj, source)
    if t in (list, tuple) and len(obj) > config.max_constant_items and all_literals(obj):
        return _opaque_container(tx, obj, source, f"a {t.__name__} of {len(obj)} constants", "large_container")
    if t in (list, tuple) and len(obj) > config.max_object_items and not _constants_or_tensors(obj):
        return _opaque_container(tx, obj, source, f"a {t.__name__} of {len(obj)} objects", "large_container")
    if t is list:
        _type_len(guards, source, obj)
        value = ListValue([], source)
        se.track_existing(obj, value)
        value.items = [wrap(tx, item, _item(source, i)) for i, item in enumerate(obj)]
        return value
    if t is tuple:
        _type_len(guards, source, obj)
        return TupleValue([wrap(tx, item, _item(source, i)) for i, item in enumerate(obj)], source,
                          real=obj if source is not None else None)
    if isinstance(obj, tuple) and hasattr(t, "_fields") and not t.__dictoffset__:
        # (a subclass with an instance dict is a mutable object, not a value)
        _type_len(guards, source, obj)
        value = NamedTupleValue([wrap(tx, item, _item(source, i)) for i, item in enumerate(obj)], t, source)
        value.real = obj if source is not None else None
        return value
    if t in (dict, collections.OrderedDict, collections.defaultdict, collections.Counter):
        if t is dict and _is_module_dict(obj):
            # (a module's globals handed around, e.g. to exec: every entry
            # wrapped and the keys guarded, on every frame it reaches, and any
            # new global anywhere in the module a recompile)
            return _opaque_container(tx, obj, source, "a module's __dict__", "unsupported_dict")
        if len(obj) > MAX_WRAPPED_DICT:
            # (sys.modules, a registry): wrapping and guarding every entry would
            # cost more than running its use natively
            return _opaque_container(tx, obj, source, f"a dict of {len(obj)} entries", "unsupported_dict")
        # the dict's own table: no hashing (an OrderedDict's order needs its
        # keys' hashes), nothing a subclass overrides
        keys = tuple(dict.keys(obj))
        if not all(_literal(k) or _identity_key(k) for k in keys):
            return _opaque_container(tx, obj, source, "a dict with keys that are neither constants nor "
                                     "classes, functions or enums", "unsupported_dict")
        if t is collections.OrderedDict:
            why = _odict_unmodelled(obj, keys)
            if why is not None:
                return _opaque_container(tx, obj, source, why, "unsupported_dict")
        if source is not None:
            guards.add(Guard("TYPE_MATCH", source, t))
            guards.add(Guard("DICT_KEYS", source, keys))
            if t is collections.OrderedDict:
                # its order is its dict's, it is in step with it, and it has
                # no attributes (a copy, pickling or a method read would see them)
                guards.add(Guard("ODICT_KEYS", source, keys))
            if t in (collections.OrderedDict, collections.Counter):
                guards.add(Guard("LEN_MATCH", AttrSource(source, "__dict__"), 0))
        value = DictValue(source=source, cls=t)
        if t is collections.defaultdict:
            factory_source = AttrSource(source, "default_factory") if source is not None else None
            value.default_factory = wrap(tx, obj.default_factory, factory_source)
        se.track_existing(obj, value)
        for k in keys:
            v = dict.__getitem__(obj, k)
            if _literal(k):
                value.entries[("c", k)] = (ConstantValue(k), wrap(tx, v, _item(source, k)))
            else:
                key = _identity_key_value(tx, k)
                value.entries[key_of(key)] = (key, wrap(tx, v, _item(source, k)))
        return value
    if t in (set, frozenset):
        if len(obj) > MAX_WRAPPED_DICT:
            # (sys.modules, a registry): wrapping and guarding every entry would
            # cost more than running its use natively
            return _opaque_container(tx, obj, source, f"a dict of {len(obj)} entries", "unsupported_dict")
        if not all(_literal(k) or _identity_key(k) for k in obj):
            return _opaque_container(tx, obj, source, "a set of elements that are neither constants nor "
                                     "classes, functions or enums", "unsupported_set")
        if source is not None:
            guards.add(Guard("TYPE_MATCH", source, t))
            guards.add(Guard("CONSTANT_MATCH", source, frozenset(obj)) if t is frozenset else
                       Guard("SET_MATCH", source, frozenset(obj)))
        value = SetValue([ConstantValue(k) if _literal(k) else _identity_key_value(tx, k) for k in obj],
                         source, frozen=(t is frozenset), existing=obj)
        # a frozenset too is one value per real object: ``is`` between two of
        # them is answered by the side-effect table (a frozenset reached
        # through two locals, or returned from a helper, is the same object)
        se.track_existing(obj, value)
        return value
    if t is range:
        _id_or_const(guards, source, obj)
        return RangeValue(obj)
    if source is not None and t in REAL_ITERATOR_TYPES:
        # e.g. a for loop's iterator carried across a graph break
        return wrap_real_iterator(tx, obj, source)
    if is_numpy_scalar(obj):
        # np.float64(2.0): immutable; guarded by type and bits (NaN, -0.0)
        if source is not None:
            return ConstantValue(obj, source, (guards, Guard("CONSTANT_MATCH", source, obj)))
        return ConstantValue(obj)
    if isinstance(obj, _TORCH_CONSTANT_TYPES) or isinstance(obj, enum.Enum):
        if source is not None:
            guards.add(Guard("CONSTANT_MATCH", source, obj) if not isinstance(obj, enum.Enum)
                       else Guard("ID_MATCH", source, obj))
        return ConstantValue(obj, source)
    if t is types.CellType:
        name = "<cell>"
        return se.cell_for(obj, name, source)
    if t is types.MethodType and source is not None:
        return _wrap_bound_method(tx, obj, source)
    if t is slice:
        return SliceValue([wrap(tx, getattr(obj, p), AttrSource(source, p) if source is not None else None)
                           for p in ("start", "stop", "step")])
    if obj is os.environ and source is not None:
        from .super_calls import EnvironValue
        tx.guards.add(Guard("ID_MATCH", source, obj))
        return EnvironValue(source)
    if t is types.BuiltinMethodType and source is not None and is_autograd_function_apply(obj):
        # ``MyFn.apply`` where that is torch's C method (see torch_compat):
        # guarded as a C method of its class, so an override replaces it
        tx.guards.add(Guard("TYPE_MATCH", source, types.BuiltinMethodType))
        tx.guards.add(Guard("CONSTANT_MATCH", AttrSource(source, "__name__"), obj.__name__))
        from .autograd_function import AutogradApplyValue
        return AutogradApplyValue(obj, wrap(tx, obj.__self__, AttrSource(source, "__self__")), source)
    if t is types.BuiltinMethodType and source is not None and not isinstance(obj.__self__, types.ModuleType) \
            and obj.__self__ is not None and builtin_handler_for(obj) is None and _is_bound_method_of(obj):
        return _wrap_bound_builtin(tx, obj, source)
    if t is functools.partial and source is not None:
        return _wrap_partial(tx, obj, source)
    if t is Continuation and source is not None and obj.fn is not None:
        return _wrap_continuation(tx, obj, source)
    from ..cache import CompiledFunction
    if isinstance(obj, CompiledFunction) and source is not None:
        # a compiled function called from traced code: trace the function itself
        return wrap(tx, obj._fn, AttrSource(source, "_fn"))
    # Functions, classes, modules and nn.Modules are identified by identity; a
    # plain user object by its type (what its behaviour depends on: the
    # attributes read from it are guarded one by one).  Objects made afresh on
    # every call, such as a context manager carried across a graph break, then
    # reuse the entry.
    value = wrap_callable_or_object(tx, obj, source)
    if source is not None:
        if type(value) is UserObjectValue:
            guards.add(Guard("TYPE_MATCH", source, type(obj)))
        elif type(value) is UserFunctionValue and not obj.__dict__ and _made_at_run_time(obj) \
                and tx.trace.per_call(source):
            _guard_function_by_parts(guards, obj, source)
        elif _is_stateless_module(obj) or (issubclass(t, torch.nn.Module) and _has_plain_state_dicts(obj)
                                           and tx.trace.policy.module_is_fresh(source)):
            # a loss or activation module (often made in forward and carried
            # across a break), or any module found made anew per call (see
            # DynamicPolicy.fresh_modules): what a call reads from it is
            # guarded attribute by attribute, like any object's, and its
            # parameters and buffers as tensors (wrap_parameter)
            guards.add(Guard("TYPE_MATCH", source, type(obj)))
            for dict_name in _MODULE_STATE_DICTS:
                guards.add(Guard("DICT_KEYS", AttrSource(source, dict_name), tuple(obj.__dict__[dict_name])))
        elif type(value) is UserFunctionValue:
            # identity and code: ``fn.__code__ = other.__code__`` keeps the identity
            guards.add(Guard("FUNCTION_MATCH", source, obj))
        else:
            guards.add(Guard("ID_MATCH", source, obj))
    return value


_MODULE_STATE_DICTS = ("_parameters", "_buffers", "_modules")


def _is_module_dict(d: dict) -> bool:
    """``d`` is the ``__dict__`` of the module it names (read without running user code)."""
    name = dict.get(d, "__name__")
    if type(name) is not str:
        return False
    module = sys.modules.get(name)
    return module is not None and getattr(module, "__dict__", None) is d


def all_literals(items) -> bool:
    """Whether every item is a plain constant: a number, string, bytes, None...,
    or a tuple of them (an item of ``list(enumerate(...))``)."""
    kinds = set(map(type, items))  # (at C speed: a long list is checked on every wrap)
    if kinds.issubset(LITERAL_TYPES):
        return True
    return kinds.issubset(_LITERALS_OR_TUPLE) and all(all_literals(o) for o in items if type(o) is tuple)


_LITERALS_OR_TUPLE = frozenset(LITERAL_TYPES + (tuple,))


def _constants_or_tensors(items) -> bool:
    """Whether every item is a plain constant or a tensor (what a long list
    may hold and still be modelled: constants fold, tensors are graph inputs)."""
    return all(_literal(item) or isinstance(item, torch.Tensor) for item in items)


def _opaque_container(tx, obj, source, why: str, kind: str) -> Value:
    """A pre-existing container the tracer does not model: held as it is
    (guarded by type only, since nothing is read from it), and a graph break
    wherever it is used."""
    if source is not None:
        tx.guards.add(Guard("TYPE_MATCH", source, type(obj)))
    value = OpaqueValue(obj, source, f"using {why}", kind=kind, hint="it runs natively between graphs")
    tx.side_effects.track_existing(obj, value)
    return value


def _odict_unmodelled(obj, keys) -> Optional[str]:
    """Why OrderedDict ``obj`` cannot be a DictValue, or None.  Its own order
    (its linked list) must be its dict's: ``move_to_end`` puts the two out of
    order, and dict's own methods called on it (``dict.pop(od, k)``) put them
    out of step, after which CPython raises KeyError or shows a different
    length than it iterates; and it must have no instance attributes."""
    try:
        order = list(collections.OrderedDict.__iter__(obj))
    except Exception:  # out of step: a key of its list is not in its dict
        return "an OrderedDict changed through dict's own methods"
    if len(order) != len(keys) or any(a is not b for a, b in zip(order, keys)):
        return "an OrderedDict whose order is not its dict's (move_to_end, or dict's own methods)"
    if obj.__dict__:
        return "an OrderedDict with instance attributes"
    return None


def is_numpy_scalar(obj) -> bool:
    """A numpy number or bool scalar of numpy's own types: immutable, a constant
    like a Python number (numpy is not imported for the check)."""
    np = sys.modules.get("numpy")
    # (by the type: isinstance would read a ``__class__`` the object's class may compute)
    return np is not None and issubclass(type(obj), (np.number, np.bool_)) and type(obj).__module__ == "numpy"


def _identity_key_value(tx, k) -> Value:
    """The value of dict key or set element ``k`` (see :func:`_identity_key`).
    The container's guard pins the key objects themselves, so a key needs no
    source of its own: it is loaded as a constant."""
    return wrap(tx, k, ObjectSource(k, f"<key {getattr(k, '__qualname__', k)!s}>"))


def _literal(k) -> bool:
    """A constant whose equality and hash are its value's: literals, and
    tuples and frozensets of them (what CONSTANT_MATCH/SET_MATCH compare)."""
    t = type(k)
    if t in LITERAL_TYPES:
        return True
    if t is tuple or t is frozenset:
        return all(_literal(item) for item in k)
    return False


def _identity_key(k) -> bool:
    """A dict key that equals only itself and lives as long as its program:
    a class (whose metaclass keeps type's ``==`` and hash), a function, an
    enum member, or one of ``typing``'s forms.  ``DICT_KEYS`` guards compare
    such keys by identity, and hold them (so any other object would live
    longer than in Python)."""
    t = type(k)
    if isinstance(k, type):
        return t.__eq__ is type.__eq__ and t.__hash__ is type.__hash__
    if isinstance(k, enum.Enum):
        return t.__eq__ is object.__eq__
    if isinstance(k, typing._SpecialForm):
        # ``Union``, ``Literal``: module-level singletons (validators key dicts by them)
        return t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__
    return t in (types.FunctionType, types.BuiltinFunctionType)


def _is_stateless_module(obj) -> bool:
    """An ``nn.Module`` without parameters, buffers or submodules (slots left
    ``None``, such as ``CrossEntropyLoss().weight``, are no state)."""
    if not issubclass(type(obj), torch.nn.Module):
        return False
    dicts = [obj.__dict__.get(d) for d in _MODULE_STATE_DICTS]
    return all(type(d) is dict and all(v is None for v in d.values()) for d in dicts)


def _has_plain_state_dicts(obj) -> bool:
    """Whether ``obj``'s parameter, buffer and submodule dicts are its own
    plain dicts, whose keys a guard can read (a scripted module's are C++
    wrappers): else a fresh module keeps its identity guard."""
    return all(type(obj.__dict__.get(d)) in (dict, collections.OrderedDict) for d in _MODULE_STATE_DICTS)


def _made_at_run_time(fn: types.FunctionType) -> bool:
    """A nested function or lambda: a new object on every call when it comes
    in as an argument (a module-level function, or a closure kept in a cell of
    the compiled function, keeps the one cheap identity check).  So is a
    generated continuation (a resume function handed on in a
    :class:`~bytegraph.resume.Continuation`): made for each call."""
    from ..resume import origin_of
    return fn.__closure__ is not None or "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>" \
        or origin_of(fn.__code__) is not None


def _guard_function_by_parts(guards, fn: types.FunctionType, source: Source) -> None:
    """Guard a plain Python function by what a trace of a call reads from it.

    A closure made afresh on every call (a nested ``def`` carried across a
    graph break, a lambda passed as an argument) is a new object each time
    but runs the same code: guarding its identity would recompile on every
    call and keep each call's function alive in the cache.  Its code and
    globals are guarded by identity, its defaults by shape (each default
    used is guarded where it is read), and its closure cells' contents
    where they are read (through the cell sources).
    """
    guards.add(Guard("TYPE_MATCH", source, types.FunctionType))
    guards.add(Guard("ID_MATCH", AttrSource(source, "__code__"), fn.__code__))
    guards.add(Guard("ID_MATCH", AttrSource(source, "__globals__"), fn.__globals__))
    defaults = AttrSource(source, "__defaults__")
    if fn.__defaults__ is None:
        guards.add(Guard("CONSTANT_MATCH", defaults, None))
    else:
        _type_len(guards, defaults, fn.__defaults__)
    kwdefaults = AttrSource(source, "__kwdefaults__")
    if fn.__kwdefaults__ is None:
        guards.add(Guard("CONSTANT_MATCH", kwdefaults, None))
    else:
        guards.add(Guard("TYPE_MATCH", kwdefaults, dict))
        guards.add(Guard("DICT_KEYS", kwdefaults, tuple(fn.__kwdefaults__)))
    # attributes set on the function (fn.flag = 1) are read from __dict__: keep it empty
    guards.add(Guard("LEN_MATCH", AttrSource(source, "__dict__"), 0))


def wrap_callable_or_object(tx, obj, source):
    """Value for functions, classes, modules and other objects (identity already guarded)."""
    from ..decorators import is_allowed_in_graph, is_disabled
    from .builtins_table import builtin_handler, torch_graph_break_handler
    t = type(obj)
    if is_allowed_in_graph(obj):
        # bytegraph.allow_in_graph / torch.compiler.allow_in_graph: one graph node per call
        from .tensors import InGraphFunctionValue
        return InGraphFunctionValue(obj, source)
    from ..distributed import collectives, subclasses
    handler = builtin_handler(obj) or torch_graph_break_handler(obj) or collectives.handler_for(obj) \
        or subclasses.constructor_for(obj)
    if handler is not None:
        return BuiltinValue(obj, handler, source)
    if is_numpy_callable(obj):
        return NumpyFunctionValue(obj, source)
    if t is types.FunctionType:
        if _is_torch_function(obj):
            return TorchFunctionValue(obj, source)
        if is_disabled(obj):
            # @torch.compiler.disable / @bytegraph.disable: the user asked for this call to run natively
            name = getattr(obj, "__qualname__", "function")
            kind = getattr(obj, "__bytegraph_break_kind__", None)
            if kind is not None:   # bytegraph's own helpers that run natively (distributed/hooks.py)
                return OpaqueValue(obj, source, f"call to {name}()", kind, obj.__bytegraph_break_hint__)
            return OpaqueValue(obj, source, f"call to {name}(), decorated with @torch.compiler.disable "
                               f"or @bytegraph.disable", "compiler_disable",
                               "the call runs natively between graphs, as requested")
        if _inference_mode_decorated(obj):
            # inference_mode is not modelled: the whole decorated call runs
            # natively (one break, not one at each step of the decorator)
            name = getattr(obj, "__qualname__", "function")
            return OpaqueValue(obj, source, f"call to {name}(), decorated with @torch.inference_mode",
                               "unsupported_context", "inference_mode is not supported yet; use torch.no_grad()")
        from .logging_calls import LEVEL_METHODS, LoggerLevelMethodValue
        if obj in LEVEL_METHODS.values():
            return LoggerLevelMethodValue(obj, source)
        skipped = _skipped_module(obj)
        if skipped is not None:
            kind, hint = skipped
            return OpaqueValue(obj, source, f"call to {obj.__module__}.{obj.__qualname__}()", kind, hint)
        return UserFunctionValue(obj, source)
    if t is types.ModuleType:
        return PythonModuleValue(obj, source)
    if isinstance(obj, type):
        if any(obj is c for c in GRAD_MODE_CLASSES):  # (``in`` would run a metaclass's __eq__)
            from .builtins_table import GradModeClassValue
            return GradModeClassValue(obj, source)
        if obj is torch.autocast:
            from .contexts import AutocastClassValue
            return AutocastClassValue(obj, source)
        if is_numpy_scalar_type(obj):
            return NumpyScalarTypeValue(obj, source)
        if obj is torch.finfo or obj is torch.iinfo:  # called at trace time (TORCH_SPECIAL)
            return TorchFunctionValue(obj, source)
        return ClassValue(obj, source)
    if isinstance(obj, TensorFunctionValueTypes) or _is_torch_function(obj):
        return TorchFunctionValue(obj, source)
    if t is types.MethodType:
        from .functions import BoundMethodValue
        from ..sources import AttrSource
        fn = wrap(tx, obj.__func__, AttrSource(source, "__func__") if source else None)
        recv = wrap(tx, obj.__self__, AttrSource(source, "__self__") if source else None)
        return BoundMethodValue(fn, recv, source)
    if is_autograd_function_apply(obj) and t is types.BuiltinMethodType:
        # torch's C ``Function.apply`` bound to a class (``super().apply`` on torch 2.14)
        from .autograd_function import AutogradApplyValue
        cls = obj.__self__
        return AutogradApplyValue(obj, wrap(tx, cls, AttrSource(source, "__self__")) if source is not None
                                  else ClassValue(cls), source)
    if isinstance(obj, _FUNCTION_TYPES):
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
        return OpaqueValue(obj, source, f"call to unsupported builtin {name}()", "unsupported_builtin",
                           "bytegraph cannot trace into C functions outside torch")
    if isinstance(obj, torch.nn.Module) and source is not None:
        from .modules import NNModuleValue
        value = NNModuleValue(obj, source)
        tx.side_effects.track_existing(obj, value)
        return value
    if source is not None and is_lru_wrapper(obj):
        # identity-guarded (the else branch of wrap's guard choice): its cache is per object
        value = LruCacheValue(obj, source, tx.guards)
        tx.side_effects.track_existing(obj, value)
        return value
    if source is None:
        return OpaqueValue(obj, None, f"object of type {t.__name__} created outside the trace",
                           "unsupported_object", "")
    # its class decides every lookup the trace makes on it, and whether a
    # guard's ``obj.name`` runs the program's hooks: checked before any of them
    tx.guards.add(Guard("TYPE_MATCH", source, t))
    value = UserObjectValue(obj, source, tx.guards)
    tx.side_effects.track_existing(obj, value)
    return value


def builtin_handler_for(obj):
    from .builtins_table import builtin_handler
    return builtin_handler(obj)


def _is_bound_method_of(obj) -> bool:
    """``obj`` is ``receiver.name`` for its ``__self__`` (a pybind11 function's
    ``__self__`` is its function record, not a receiver)."""
    try:
        return getattr(obj.__self__, obj.__name__) == obj
    except Exception:
        return False


def _wrap_bound_builtin(tx, obj, source):
    """``x.reshape`` or ``lst.append`` as an object (e.g. on the stack across a break)."""
    from ..sources import AttrSource
    from .base import MethodCallValue
    from .tensors import TensorMethodValue
    tx.guards.add(Guard("TYPE_MATCH", source, types.BuiltinMethodType))
    tx.guards.add(Guard("CONSTANT_MATCH", AttrSource(source, "__name__"), obj.__name__))
    receiver = wrap(tx, obj.__self__, AttrSource(source, "__self__"))
    if isinstance(receiver, TensorValue):
        return TensorMethodValue(receiver, obj.__name__)
    return MethodCallValue(receiver, obj.__name__)


def _wrap_partial(tx, obj, source):
    from ..sources import AttrSource
    from .functions import PartialValue
    tx.guards.add(Guard("TYPE_MATCH", source, functools.partial))
    fn = wrap(tx, obj.func, AttrSource(source, "func"))
    args_value = wrap(tx, obj.args, AttrSource(source, "args"))
    kw = wrap(tx, obj.keywords, AttrSource(source, "keywords"))
    from .containers import DictValue
    if type(kw) is not DictValue:
        raise Unsupported("a functools.partial whose keywords dict is not modelled", kind="unsupported_object")
    value = PartialValue(fn, args_value.unpack(tx), {}, args_value=args_value, keywords=kw)
    value.source = source
    return value


def _wrap_continuation(tx, obj, source):
    from ..sources import AttrSource
    from .continuations import ContinuationValue
    tx.guards.add(Guard("TYPE_MATCH", source, Continuation))
    fn = wrap(tx, obj.fn, AttrSource(source, "fn"))
    args = wrap(tx, obj.args, AttrSource(source, "args"))
    return ContinuationValue(fn, args.unpack(tx), source)


def _wrap_bound_method(tx, obj, source):
    """A bound method is guarded through its parts: a fresh bound method object
    is made on every attribute access, so its identity means nothing."""
    from ..sources import AttrSource
    from .functions import BoundMethodValue
    from .objects import GradModeValue, WithExitValue
    tx.guards.add(Guard("TYPE_MATCH", source, types.MethodType))
    receiver = obj.__self__
    self_src = AttrSource(source, "__self__")
    if any(type(receiver) is c for c in GRAD_MODE_CLASSES) and type(receiver) is not torch.inference_mode \
            and obj.__func__.__name__ == "__exit__":
        # the __exit__ of a grad-mode context left on the stack across a graph break
        tx.guards.add(Guard("TYPE_MATCH", self_src, type(receiver)))
        tx.guards.add(Guard("CONSTANT_MATCH", AttrSource(self_src, "prev"), receiver.prev))
        mode = GradModeValue(torch.is_grad_enabled())
        mode.previous = receiver.prev
        return WithExitValue(mode)
    if issubclass(type(receiver), (torch.autocast, torch.inference_mode)) and obj.__func__.__name__ == "__exit__":
        # a block entered natively before this graph: leaving it restores
        # state saved in the real object, so it runs natively too
        from .objects import OpaqueValue
        return OpaqueValue(obj, source, f"leaving a {type(receiver).__name__} block entered before this graph",
                           "native_context_exit", "the exit runs natively between graphs")
    fn = wrap(tx, obj.__func__, AttrSource(source, "__func__"))
    return BoundMethodValue(fn, wrap(tx, receiver, self_src), source)


# Library modules whose functions are I/O or process state: never inlined,
# each call is a graph break (it runs natively between graphs).
_SKIPPED_MODULES = {
    "logging": ("logging", "logging calls run natively between graphs"),
    "warnings": ("warnings", "warnings run natively between graphs"),
}
_SKIPPED_PREFIXES = ("contextlib", "threading", "multiprocessing", "subprocess", "socket", "asyncio", "os", "sys",
                     "time", "random", "io", "pickle", "tempfile", "shutil", "pdb", "traceback", "dataclasses")


#: pure classes and functions of skipped modules that are inlined after all.
#: (``dataclasses``: making a dataclass generates its methods with ``exec``
#: and sets them on the class, some fifty graph breaks per class; it runs
#: natively as one call.  The helpers that read an instance are inlined.)
_INLINED_LIBRARY_CLASSES = {
    "contextlib": ("nullcontext.", "suppress.", "closing."),
    "dataclasses": ("fields", "asdict", "astuple", "_asdict_inner", "_astuple_inner", "replace",
                    "is_dataclass", "_is_dataclass_instance"),
}


def _inference_mode_decorated(fn: types.FunctionType) -> bool:
    """``fn`` is torch's ``decorate_context`` wrapper of an ``@torch.inference_mode()``
    function (its ``ctx_factory`` cell holds the mode's ``clone``)."""
    code = fn.__code__
    if code.co_name != "decorate_context" or "ctx_factory" not in code.co_freevars or fn.__closure__ is None:
        return False
    try:
        factory = fn.__closure__[code.co_freevars.index("ctx_factory")].cell_contents
    except ValueError:  # an empty cell
        return False
    return isinstance(getattr(factory, "__self__", None), torch.inference_mode)


def _skipped_module(fn):
    if fn is collections.namedtuple:
        # a new class on every call (eager identity): run natively, as one call
        return ("unsupported_library", "collections.namedtuple makes a new class on every call: it runs natively")
    from ..distributed.collectives import native_c10d
    c10d = native_c10d(fn)
    if c10d is not None:
        return c10d
    mod = getattr(fn, "__module__", None) or ""
    if getattr(fn, "__qualname__", "").startswith(_INLINED_LIBRARY_CLASSES.get(mod, ())):
        return None
    top = mod.partition(".")[0]
    if top in _SKIPPED_MODULES:
        return _SKIPPED_MODULES[top]
    if top in _SKIPPED_PREFIXES:
        return ("unsupported_library", f"{top} functions run natively between graphs")
    return None


def _is_torch_function(obj) -> bool:
    if isinstance(obj, (types.MethodDescriptorType, types.WrapperDescriptorType, types.GetSetDescriptorType)):
        return getattr(obj, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
    if not isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.BuiltinMethodType)):
        return False  # instances of torch classes (modules, optimizers) are objects, not functions
    mod = getattr(obj, "__module__", None) or ""
    if isinstance(obj, types.FunctionType):
        # Python code in torch is a graph op only in the functional namespaces;
        # module methods, optimizers and utilities are inlined like user code.
        return mod in _TORCH_FUNCTIONAL_MODULES
    return mod == "torch" or mod.startswith("torch.")


_TORCH_FUNCTIONAL_MODULES = frozenset({
    "torch", "torch.functional", "torch.nn.functional", "torch._tensor", "torch.fft", "torch.linalg",
    "torch.special", "torch.nn.init", "torch._refs", "torch.random",
})


def _is_placement(obj) -> bool:
    from ..distributed.subclasses import is_placement
    return is_placement(obj)


def wrap_derived_constant(tx, obj, what: str) -> Value:
    """A value computed from constants during tracing (no source, no guard)."""
    from ..resume import UNBOUND
    if obj is UNBOUND or isinstance(obj, (enum.Enum, inspect.Parameter)):
        return ConstantValue(obj)
    if type(obj) in LITERAL_TYPES or isinstance(obj, _TORCH_CONSTANT_TYPES) or is_numpy_scalar(obj) \
            or _is_placement(obj):
        return ConstantValue(obj)
    if isinstance(obj, tuple) and all(type(o) in LITERAL_TYPES or is_numpy_scalar(o) or _is_placement(o)
                                      for o in obj):
        return ConstantValue(obj)
    if isinstance(obj, (types.BuiltinMethodType, types.MethodWrapperType)) and \
            isinstance(getattr(obj, "__self__", None), _IMMUTABLE_RECEIVERS):
        return BuiltinValue(obj, _bound_constant_method(obj))
    if isinstance(obj, list) and all(type(o) in LITERAL_TYPES for o in obj):
        if len(obj) > config.max_constant_items:
            raise Unsupported(f"{what}() giving a list of {len(obj)} constants", kind="large_container",
                              hint="it runs natively; config.max_constant_items sets the limit")
        return ListValue([ConstantValue(o) for o in obj])
    return wrap_callable_or_object(tx, obj, None)


_IMMUTABLE_RECEIVERS = LITERAL_TYPES + (tuple, frozenset, torch.Size, torch.dtype, torch.device)


def python_constant(v: Value, tx=None):
    """The Python object for a value made only of constants (lists and tuples of
    constants included; with ``tx``, iterators too, consumed as a callee would
    consume them); raises Unsupported otherwise."""
    if v.is_constant():
        return v.as_constant()
    if isinstance(v, (TupleValue, ListValue)):
        items = [python_constant(x, tx) for x in v.items]
        return tuple(items) if isinstance(v, TupleValue) else items
    if tx is not None and isinstance(v, IteratorValue):
        return iter([python_constant(x, tx) for x in v.unpack(tx)])
    raise Unsupported(f"a {v.type_name()} where a constant is needed", kind="unsupported_method")


def _bound_constant_method(method):
    def handler(tx, args, kwargs):
        pos = [python_constant(a, tx) for a in args]
        kw = {k: python_constant(v, tx) for k, v in kwargs.items()}
        try:
            out = method(*pos, **kw)
        except Exception as e:
            tx.raise_python_exception(e)
        return wrap_derived_constant(tx, out, method.__name__)
    return handler


def wrap_parameter(tx, obj: torch.Tensor, source, plain: bool = False):
    """A parameter or buffer read from a module's dicts.

    The module is identity-guarded and parameters are updated in place: an
    identity guard (replacing the tensor recompiles, and Python-level aliasing
    holds) plus its metadata, which changes in place too.  A module at a
    fresh place (``DynamicPolicy.fresh_modules``) has its tensors guarded as
    any tensor input.
    """
    graph = tx.graph
    existing = graph.input_for(obj)
    if existing is not None:
        if existing.source is not None and source != existing.source:
            tx.guards.add(Guard("ALIAS", source, others=(existing.source,)))  # tied weights
        return existing
    if type(obj) not in (torch.Tensor, torch.nn.Parameter) or obj.layout != torch.strided \
            or tx.trace.policy.module_is_fresh(source):
        return _wrap_tensor(tx, obj, source)
    tx.guards.add(Guard("ID_MATCH", source, obj))
    # the same object may change what the trace specialized to:
    # ``requires_grad_(False)`` (freezing), and ``model.double()``/``.to()``,
    # which assign each parameter's ``.data`` (dtype, shape, device, strides)
    tx.guards.add(Guard.tensor(source, obj))
    return graph.add_input(obj, source, lambda node, fake: TensorValue(node, fake, type(obj), source), plain=plain)


def _wrap_tensor(tx, obj: torch.Tensor, source):
    graph = tx.graph
    existing = graph.input_for(obj)
    if existing is not None:
        if source is not None and existing.source is not None and source != existing.source:
            tx.guards.add(Guard("ALIAS", source, others=(existing.source,)))
        return existing
    if source is None:
        raise Unsupported("a tensor without a source (constant tensor object)", kind="unsupported_input")
    if type(obj) not in (torch.Tensor, torch.nn.Parameter):
        from ..distributed.subclasses import traceable, wrap_subclass_input
        if traceable(obj):   # DTensor and other subclasses torch can flatten
            return wrap_subclass_input(tx, obj, source)
        raise Unsupported(f"tensor subclass {type(obj).__name__}", kind="unsupported_input",
                          hint="tensor subclasses without __tensor_flatten__ run eagerly")
    if obj.is_sparse or obj.layout != torch.strided:
        raise Unsupported("non-strided tensor input", kind="unsupported_input", hint="sparse tensors run eagerly")
    dims = tx.trace.policy.tensor_dims(obj, source.name())
    tx.guards.add(Guard.tensor(source, obj, dims))
    return graph.add_input(obj, source, lambda node, fake: TensorValue(node, fake, type(obj), source), dims)


def _type_len(guards, source, obj):
    if source is not None:
        guards.add(Guard("TYPE_MATCH", source, type(obj)))
        guards.add(Guard("LEN_MATCH", source, len(obj)))


def _id_or_const(guards, source, obj):
    if source is not None:
        guards.add(Guard("CONSTANT_MATCH", source, obj))


def _item(source, key):
    return ItemSource(source, key) if source is not None else None


GRAD_MODE_CLASSES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode)

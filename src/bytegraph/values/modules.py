"""``nn.Module`` instances and user objects created during tracing (``super()``: :mod:`.super_calls`).

A module is identified by identity (``ID_MATCH``); its parameters, buffers
and submodules are read through its ``_parameters``/``_buffers``/``_modules``
dicts, so guards are cheap dict lookups and a replaced parameter or swapped
submodule fails its identity guard.  Calling a module inlines ``forward``
with the module's forward pre-hooks and forward hooks around it, exactly as
``nn.Module._call_impl`` orders them; backward hooks on modules are a graph
break.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Dict, List

import torch

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource, ObjectSource
from . import class_attrs
from .base import Value
from .constants import NONE, const, is_none
from .containers import DictValue, IteratorValue, TupleValue
from .functions import BoundMethodValue
from .object_protocol import BOUND_SLOTS, ObjectSlotValue
from .objects import (DELETED, NO_ATTR, UserObjectValue, dunder_truth, guard_class_lookup, intercepts_attribute_reads,
                      lookup_attr, owner_of, python_getattribute, special_lookup)

_MODULE_DICTS = ("_parameters", "_buffers", "_modules")
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


class NNModuleValue(UserObjectValue):
    """An ``nn.Module`` that existed before the trace (the model, its submodules).

    Attribute reads follow Python's lookup with ``nn.Module.__getattr__``'s
    three dicts last; writes are buffered and replayed with the module's own
    ``__setattr__``.  Calls inline ``forward`` with hooks.  Reconstructs
    through its source.
    """

    __slots__ = ()

    def get_attr(self, tx, name):
        pending = tx.side_effects.pending_attr(self, name)
        if pending is not None:
            if pending is DELETED:
                tx.raise_python_exception(AttributeError(name))
            return pending
        module = self.obj
        cls = type(module)
        if class_attrs.dirty_in_mro(cls, name) and name not in module.__dict__:
            found = class_attrs.instance_get(tx, self, cls, name, lambda: None)
            if found is not None:
                return found
        if name not in module.__dict__ and not any(name in k.__dict__ for k in cls.__mro__):
            for dict_name in _MODULE_DICTS:
                d = module.__dict__.get(dict_name)
                if d is not None and name in d:
                    # an instance attribute of that name would come first:
                    # absent now (another module of the class, a fresh one,
                    # may hold one; ``__dict__`` may be written directly)
                    tx.guards.add(Guard("DICT_CONTAINS", AttrSource(self.source, "__dict__"), (name, False)))
                    src = ItemSource(AttrSource(self.source, dict_name), name)
                    value = d[name]
                    if isinstance(value, torch.Tensor) and dict_name != "_modules":
                        return tx.wrap_parameter(value, src)
                    return tx.wrap(value, src)
            if special_lookup(cls, "__getattr__") is not torch.nn.Module.__dict__["__getattr__"]:
                # the class's own __getattr__ (a wrapper forwarding to what it wraps)
                raise Unsupported(f"{cls.__name__}.__getattr__ of an nn.Module", kind="unsupported_attribute")
            # absent everywhere now: the entry holds while it stays absent
            for dict_name in ("__dict__",) + tuple(d for d in _MODULE_DICTS if d in module.__dict__):
                tx.guards.add(Guard("DICT_CONTAINS", AttrSource(self.source, dict_name), (name, False)))
            tx.raise_python_exception(AttributeError(
                f"'{cls.__name__}' object has no attribute '{name}'", name=name))
        return lookup_attr(tx, self, module, name)

    def set_attr(self, tx, name, value):
        if isinstance(value, (NNModuleValue,)) or name in _MODULE_DICTS:
            raise Unsupported(f"assigning a submodule or module dict ({name}) inside forward",
                              kind="unsupported_setattr")
        tx.side_effects.store_attr(self, name, value)

    def call(self, tx, args, kwargs):
        blocks = tx.trace.blocks
        if blocks is not None:
            # a repeated block is traced once and its subgraph called per layer (layer_reuse.py)
            return blocks.call(tx, self, args, kwargs, lambda: self._call(tx, args, kwargs))
        return self._call(tx, args, kwargs)

    def _call(self, tx, args, kwargs):
        if type(self.obj).__call__ is not torch.nn.Module.__call__:
            # the class overrides __call__: run that, as Python would
            return self.get_attr(tx, "__call__").call(tx, args, kwargs)
        return call_module(tx, self, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self.get_attr(tx, name).call(tx, args, kwargs)

    def __repr__(self):
        return f"NNModuleValue({type(self.obj).__name__})"


_GLOBAL_HOOK_NAMES = ("nn.Module global forward pre-hooks", "nn.Module global forward hooks",
                      "nn.Module global backward hooks", "nn.Module global backward pre-hooks")


def _global_hooks():
    from torch.nn.modules import module as m
    return (m._global_forward_pre_hooks, m._global_forward_hooks, m._global_backward_hooks,
            m._global_backward_pre_hooks)


def guard_no_global_module_hooks(tx) -> None:
    """Break if global ``nn.Module`` hooks are registered, else guard that none are."""
    if any(_global_hooks()):
        raise Unsupported("global nn.Module hooks", kind="unsupported_hook",
                          hint="global module hooks run natively between graphs")
    for hooks, name in zip(_global_hooks(), _GLOBAL_HOOK_NAMES):
        # registered later (nn.modules.module.register_module_forward_hook): a new trace
        tx.guards.add(Guard("LEN_MATCH", ObjectSource(hooks, name), 0))


def call_module(tx, module: NNModuleValue, args: List[Value], kwargs: Dict[str, Value]) -> Value:
    """``module(*args, **kwargs)`` as ``nn.Module._call_impl`` runs it."""
    from ..distributed.hooks import special_module_call
    special = special_module_call(tx, module, args, kwargs)   # DDP; FSDP2's native hooks
    if special is not None:
        return special
    obj = module.obj
    src = module.source
    for dict_name in _HOOK_DICTS:
        hooks = getattr(obj, dict_name)
        tx.guards.add(Guard("LEN_MATCH", AttrSource(src, dict_name), len(hooks)))
    guard_no_global_module_hooks(tx)
    if obj._backward_hooks or obj._backward_pre_hooks:
        raise Unsupported("module backward hooks", kind="unsupported_hook",
                          hint="backward hooks on modules are not captured yet")
    pre_with_kwargs = obj._forward_pre_hooks_with_kwargs
    for hook_id, hook in list(obj._forward_pre_hooks.items()):
        hook_value = tx.wrap(hook, ItemSource(AttrSource(src, "_forward_pre_hooks"), hook_id))
        if hook_id in pre_with_kwargs:
            out = hook_value.call(tx, [module, TupleValue(list(args)), _kwargs_dict(kwargs)], {})
            if not is_none(out):
                new_args, new_kwargs = out.unpack(tx)
                args = new_args.unpack(tx)
                kwargs = {k.as_constant(): v for k, v in new_kwargs.entries.values()}
        else:
            out = hook_value.call(tx, [module, TupleValue(list(args))], {})
            if not is_none(out):
                args = out.unpack(tx) if isinstance(out, TupleValue) else [out]
    forward = module.get_attr(tx, "forward")
    result = forward.call(tx, list(args), dict(kwargs))
    with_kwargs = obj._forward_hooks_with_kwargs
    for hook_id, hook in list(obj._forward_hooks.items()):
        hook_value = tx.wrap(hook, ItemSource(AttrSource(src, "_forward_hooks"), hook_id))
        if hook_id in with_kwargs:
            out = hook_value.call(tx, [module, TupleValue(list(args)), _kwargs_dict(kwargs), result], {})
        else:
            out = hook_value.call(tx, [module, TupleValue(list(args)), result], {})
        if not is_none(out):
            result = out
    return result


def _kwargs_dict(kwargs: Dict[str, Value]) -> DictValue:
    return DictValue.from_pairs([(const(k), v) for k, v in kwargs.items()])


class NewObjectValue(Value):
    """An instance of a user class created during the trace.

    ``__init__`` is inlined; attributes live in ``attrs``.  A dataclass (and
    a ``ModelOutput``-like dict subclass of one) is rebuilt by calling the
    class with its fields; any other object as ``cls.__new__(cls)`` with its
    ``__dict__`` filled in, so ``__init__``'s effects are not run twice.
    """

    __slots__ = ("cls", "attrs", "items")

    def __init__(self, cls: type):
        super().__init__()
        self.cls = cls
        self.attrs: Dict[str, Value] = {}
        #: for dict subclasses (ModelOutput): the mapping part, key -> value
        self.items: Dict[str, Value] = {}

    def python_type(self):
        return self.cls

    def _data_descriptor(self, name):
        """``(owning class, descriptor)`` if the class defines ``name`` as a data
        descriptor (which comes before the instance's own attributes), else None."""
        for klass in self.cls.__mro__:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if isinstance(attr, types.MemberDescriptorType) and name in (_slot_names(self.cls) or ()):
                    return None  # a slot: kept in ``attrs`` like a __dict__ entry
                if hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__"):
                    return klass, attr
                return None
        return None

    def _property_call(self, tx, name, which: str, args):
        """Run the getter, setter or deleter of property ``name``, as Python would."""
        klass, prop = self._data_descriptor(name)
        if type(prop) is not property:
            return self._descriptor_call(tx, klass, name, prop, which, args)
        fn = getattr(prop, which)
        if fn is None:
            what = {"fget": "getter", "fset": "setter", "fdel": "deleter"}[which]
            tx.raise_python_exception(AttributeError(
                f"property '{name}' of '{self.cls.__name__}' object has no {what}"))
        src = AttrSource(AttrSource(ObjectSource(klass, klass.__qualname__), name), which)
        return tx.wrap(fn, src).call(tx, [self, *args], {})

    def _descriptor_call(self, tx, klass, name, desc, which: str, args):
        """``desc.__get__(obj, cls)`` / ``__set__(obj, v)`` / ``__delete__(obj)``
        for a descriptor whose class defines that method in Python."""
        method_name = {"fget": "__get__", "fset": "__set__", "fdel": "__delete__"}[which]
        method = special_lookup(type(desc), method_name)
        if not isinstance(method, types.FunctionType):
            raise Unsupported(f"descriptor {self.cls.__name__}.{name} ({type(desc).__name__}) of an object "
                              "made in the trace", kind="unsupported_attribute")
        desc_src = ItemSource(AttrSource(ObjectSource(klass, klass.__qualname__), "__dict__"), name)
        desc_value = tx.wrap(desc, desc_src)
        fn = tx.wrap(method, AttrSource(AttrSource(desc_src, "__class__"), method_name))
        extra = [tx.wrap(self.cls, None)] if which == "fget" else list(args)
        return fn.call(tx, [desc_value, self, *extra], {})

    def _guard_lookup(self, tx, name):
        """What the class's MRO says about ``name`` (found where, or absent)
        holds for later calls too."""
        guard_class_lookup(tx, self.cls, name, owner_of(self.cls, name))

    def _python_hooks(self) -> bool:
        """Whether the class's own Python attribute hooks run on this object
        (a ModelOutput-like dict subclass is modelled as its mapping instead)."""
        return not issubclass(self.cls, dict)

    def get_attr(self, tx, name):
        if not self._python_hooks():
            return self._getattribute(tx, name)
        from .object_protocol import with_getattr_fallback
        return with_getattr_fallback(tx, self, self.cls, name, lambda: self._getattribute(tx, name))

    def _getattribute(self, tx, name):
        """``type(obj).__getattribute__(obj, name)``."""
        hook = python_getattribute(self.cls) if self._python_hooks() else None
        if hook is not None:
            # ``type(obj).__getattribute__(obj, name)`` in the trace; its
            # ``super().__getattribute__`` comes back to generic_get_attr
            self._guard_lookup(tx, "__getattribute__")
            owner = owner_of(self.cls, "__getattribute__")
            fn = tx.wrap(hook, AttrSource(ObjectSource(owner, owner.__qualname__), "__getattribute__"))
            return fn.call(tx, [self, const(name)], {})
        return self.generic_get_attr(tx, name)

    def generic_get_attr(self, tx, name):
        """``object.__getattribute__(obj, name)``."""
        if name == "__class__" and special_lookup(self.cls, "__class__") is object.__dict__["__class__"]:
            return tx.wrap(self.cls, None)  # (a class may define its own __class__)
        if name == "__dict__" and special_lookup(self.cls, "__dict__") is not NO_ATTR and \
                _slot_names(self.cls) is None and type(special_lookup(self.cls, "__dict__")) is types.GetSetDescriptorType:
            from .object_protocol import InstanceDictValue
            self._guard_lookup(tx, name)
            return InstanceDictValue(self)
        if class_attrs.dirty_in_mro(self.cls, name):
            found = class_attrs.instance_get(tx, self, self.cls, name, lambda: self.attrs.get(name))
            if found is not None:
                return found
        self._guard_lookup(tx, name)
        if self._data_descriptor(name) is not None:
            return self._property_call(tx, name, "fget", [])
        if name in self.attrs:
            return self.attrs[name]
        for klass in self.cls.__mro__:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                src = AttrSource(ObjectSource(klass, klass.__qualname__), name)
                if isinstance(attr, types.FunctionType):
                    return BoundMethodValue(tx.wrap(attr, src), self)
                if name in BOUND_SLOTS and attr is object.__dict__[name]:
                    return ObjectSlotValue(name, self)
                if isinstance(attr, staticmethod):
                    return tx.wrap(attr.__func__, AttrSource(src, "__func__"))
                if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
                    return BoundMethodValue(tx.wrap(attr.__func__, AttrSource(src, "__func__")),
                                            tx.wrap(self.cls, None))
                if isinstance(attr, dataclasses.Field) or attr is None or isinstance(
                        attr, (int, float, str, bool, tuple)):
                    # read from the class's own dict: ``klass.name`` may find the metaclass's first
                    return tx.wrap(attr, ItemSource(AttrSource(ObjectSource(klass, klass.__qualname__), "__dict__"),
                                                    name))
                if isinstance(attr, types.MemberDescriptorType) and name in (_slot_names(self.cls) or ()):
                    break  # a slot not set in the trace: unset
                if isinstance(special_lookup(type(attr), "__get__"), types.FunctionType):
                    # a non-data descriptor written in Python: its __get__ runs in the trace
                    return self._descriptor_call(tx, klass, name, attr, "fget", [])
                if hasattr(type(attr), "__get__"):
                    # another descriptor (a C method...): its result is not modelled
                    raise Unsupported(f"descriptor {self.cls.__name__}.{name} of an object made in the trace",
                                      kind="unsupported_attribute")
                return tx.wrap(attr, src)
        if issubclass(self.cls, dict) and name in ("keys", "values", "items", "get", "__getitem__",
                                                   "__contains__", "to_tuple"):
            return _DictPartMethod(self, name)
        if not self._python_hooks() and special_lookup(self.cls, "__getattr__") is not NO_ATTR:
            raise Unsupported(f"{self.cls.__name__}.__getattr__", kind="unsupported_attribute")
        # (a Python __getattr__ is the caller's fallback, see get_attr)
        self._guard_lookup(tx, "__getattr__")
        if name in (_slot_names(self.cls) or ()):   # an unset slot: its member descriptor's error
            tx.raise_python_exception(AttributeError(
                f"'{_slot_error_type_name(self.cls)}' object has no attribute '{name}'", name=name))
        tx.raise_python_exception(AttributeError(f"'{self.cls.__name__}' object has no attribute '{name}'", name=name))

    def set_attr(self, tx, name, value):
        from .object_protocol import call_attr_hook
        if self._python_hooks() and call_attr_hook(tx, self, self.cls, "__setattr__", [const(name), value]):
            return  # the class's own __setattr__ ran (its object.__setattr__ came back below)
        self.generic_set_attr(tx, name, value)

    def generic_set_attr(self, tx, name, value):
        """``object.__setattr__(obj, name, value)``."""
        if class_attrs.dirty_in_mro(self.cls, name):
            # a plain class attribute the trace assigned: the write goes to the instance
            class_attrs.check_instance_write(tx, self.cls, name)
            if _slot_names(self.cls) is not None or issubclass(self.cls, dict):
                raise Unsupported(f"setting {self.cls.__qualname__}.{name} on an instance after the trace changed "
                                  "it on the class", kind="class_attr_written")
            self.attrs[name] = value
            return
        self._guard_lookup(tx, name)
        slots = _slot_names(self.cls)
        if self._data_descriptor(name) is not None:
            self._property_call(tx, name, "fset", [value])
            return
        if slots is not None and name not in slots:
            tx.raise_python_exception(no_dict_attribute_error(self.cls, name))
        if issubclass(self.cls, dict) and dataclasses.is_dataclass(self.cls):
            field_names = {f.name for f in dataclasses.fields(self.cls)}
            if name in field_names and not is_none(value):
                self.items[name] = value
        self.attrs[name] = value

    def del_attr(self, tx, name):
        from .object_protocol import call_attr_hook
        if self._python_hooks() and call_attr_hook(tx, self, self.cls, "__delattr__", [const(name)]):
            return
        self.generic_del_attr(tx, name)

    def generic_del_attr(self, tx, name):
        """``object.__delattr__(obj, name)``."""
        if class_attrs.dirty_in_mro(self.cls, name):
            class_attrs.check_instance_write(tx, self.cls, name)
            if _slot_names(self.cls) is not None or issubclass(self.cls, dict):
                raise Unsupported(f"deleting {self.cls.__qualname__}.{name} of an instance after the trace changed "
                                  "it on the class", kind="class_attr_written")
            if name not in self.attrs:
                tx.raise_python_exception(del_attribute_error(self.cls, name))
            del self.attrs[name]
            return
        self._guard_lookup(tx, name)
        if self._data_descriptor(name) is not None:
            self._property_call(tx, name, "fdel", [])
            return
        if name not in self.attrs:
            slots = _slot_names(self.cls)
            if slots is not None and name not in slots:
                tx.raise_python_exception(no_dict_attribute_error(self.cls, name))
            if slots is not None:   # an unset slot: its member descriptor's error
                tx.raise_python_exception(AttributeError(name))
            tx.raise_python_exception(del_attribute_error(self.cls, name))
        del self.attrs[name]
        self.items.pop(name, None)

    def _dunder(self, tx, name):
        """``type(obj).name`` bound to this object if it is a Python function
        (special methods are looked up on the type, never the instance)."""
        fn = special_lookup(self.cls, name)
        self._guard_lookup(tx, name)
        if not isinstance(fn, types.FunctionType):
            return None
        owner = next(k for k in self.cls.__mro__ if name in k.__dict__)
        return BoundMethodValue(tx.wrap(fn, AttrSource(ObjectSource(owner, owner.__qualname__), name)), self)

    def call(self, tx, args, kwargs):
        method = self._dunder(tx, "__call__")
        if method is None:
            return super().call(tx, args, kwargs)
        return method.call(tx, args, kwargs)

    def has_len(self):
        return hasattr(self.cls, "__len__")

    def getitem(self, tx, key: Value) -> Value:
        if not issubclass(self.cls, dict):
            method = self._dunder(tx, "__getitem__")
            if method is None:
                raise Unsupported(f"indexing a {self.cls.__name__} object", kind="unsupported_method")
            return method.call(tx, [key], {})
        k = key.as_constant()
        if isinstance(k, str):
            if k not in self.items:
                tx.raise_python_exception(KeyError(k))
            return self.items[k]
        return TupleValue(list(self.items.values())).getitem(tx, key)

    def setitem(self, tx, key: Value, value: Value):
        if not issubclass(self.cls, dict):
            method = self._dunder(tx, "__setitem__")
            if method is None:
                if special_lookup(self.cls, "__setitem__") is NO_ATTR:
                    tx.raise_python_exception(TypeError(
                        f"'{self.cls.__name__}' object does not support item assignment"))
                raise Unsupported(f"item assignment on a {self.cls.__name__} object", kind="unsupported_setitem")
            method.call(tx, [key, value], {})
            return
        k = key.as_constant()
        self.items[k] = value
        self.attrs[k] = value

    def truth(self, tx):
        if issubclass(self.cls, dict):
            return bool(self.items)
        return dunder_truth(tx, self.cls, lambda name: self._dunder(tx, name))

    def get_iter(self, tx):
        if issubclass(self.cls, dict):
            return IteratorValue([const(k) for k in self.items])
        method = self._dunder(tx, "__iter__")
        if method is None:
            declared = special_lookup(self.cls, "__iter__")
            self._guard_lookup(tx, "__iter__")
            if declared is NO_ATTR and self._dunder(tx, "__getitem__") is not None:
                from .generators import SequenceIteratorValue
                return SequenceIteratorValue(self)  # the old protocol: __getitem__(0), (1), ...
            if declared is None or (declared is NO_ATTR and special_lookup(self.cls, "__getitem__") is NO_ATTR):
                tx.raise_python_exception(TypeError(f"'{self.cls.__name__}' object is not iterable"))
            raise Unsupported(f"iterating a {self.cls.__name__} object", kind="unsupported_iter")
        return iterator_from(tx, method.call(tx, [], {}))

    def unpack(self, tx):
        return self.get_iter(tx).unpack(tx)

    def children(self):
        return list(self.attrs.values()) + list(self.items.values())

    def reconstruct(self, cg):
        if dataclasses.is_dataclass(self.cls) and issubclass(self.cls, dict):
            # ModelOutput-like: its __post_init__ fills the mapping from the fields
            names = [f.name for f in dataclasses.fields(self.cls) if f.init and f.name in self.attrs]
            cg.push_callable(self.cls)
            for n in names:
                cg.reconstruct(self.attrs[n])
            cg.call(len(names), kw_names=tuple(names))
            return
        cg.push_callable(_make_instance)
        cg.load_object(self.cls)
        for k, v in self.attrs.items():
            cg.reconstruct(v)
        cg.emit("BUILD_TUPLE", arg=len(self.attrs))
        cg.load_object(tuple(self.attrs))
        cg.call(3)


class _DictPartMethod(Value):
    __slots__ = ("obj", "name")

    def __init__(self, obj: NewObjectValue, name: str):
        super().__init__()
        self.obj = obj
        self.name = name

    def call(self, tx, args, kwargs):
        items = self.obj.items
        name = self.name
        if name == "keys":
            return TupleValue([const(k) for k in items])
        if name == "values":
            return TupleValue(list(items.values()))
        if name == "items":
            return TupleValue([TupleValue([const(k), v]) for k, v in items.items()])
        if name == "to_tuple":
            return TupleValue(list(items.values()))
        if name == "get":
            return items.get(args[0].as_constant(), args[1] if len(args) > 1 else NONE)
        if name == "__getitem__":
            return self.obj.getitem(tx, args[0])
        if name == "__contains__":
            return const(args[0].as_constant() in items)
        raise Unsupported(f"{name}() of {self.obj.cls.__name__}", kind="unsupported_method")


class ModuleSequenceValue(TupleValue):
    """A ``ModuleList``/``Sequential`` made in the trace from existing modules
    (``self.layers[:n]``).  Reconstructs as ``cls([modules...])``."""

    __slots__ = ("cls",)

    def __init__(self, items, cls):
        super().__init__(items)
        self.cls = cls

    def python_type(self):
        return self.cls

    def getitem(self, tx, index):
        out = super().getitem(tx, index)
        return ModuleSequenceValue(out.items, self.cls) if isinstance(out, TupleValue) else out

    def get_attr(self, tx, name):
        if name == "__len__":
            return _Const(len(self.items))
        raise Unsupported(f"{self.cls.__name__}.{name} of a slice made in the trace", kind="unsupported_attribute")

    def call(self, tx, args, kwargs):
        if self.cls is not torch.nn.Sequential:
            return super().call(tx, args, kwargs)
        (x,) = args
        for m in self.items:
            x = m.call(tx, [x], {})
        return x

    def reconstruct(self, cg):
        cg.push_callable(self.cls)
        for item in self.items:
            cg.reconstruct(item)
        cg.emit("BUILD_LIST", arg=len(self.items))
        cg.call(1)


class _Const(Value):
    """A callable that returns a fixed constant (``len`` of a module slice)."""

    __slots__ = ("value",)

    def __init__(self, value):
        super().__init__()
        self.value = value

    def call(self, tx, args, kwargs):
        return const(self.value)


def _make_instance(cls, values, names):
    obj = cls.__new__(cls)
    for name, value in zip(names, values):
        object.__setattr__(obj, name, value)  # __dict__ entries and __slots__ alike
    return obj


def _probe_no_dict_error():
    """How ``object.__setattr__``/``__delattr__`` words the error for a name
    an instance without ``__dict__`` cannot hold: the text after
    "'T' object has no attribute 'x'" (" and no __dict__ for setting new
    attributes" from 3.13, nothing before) and whether the error carries the
    name; asked of the running interpreter once."""
    try:
        object().__setattr__("bytegraph_probe", None)
    except AttributeError as e:
        return str(e).split("'bytegraph_probe'", 1)[-1], getattr(e, "name", None) == "bytegraph_probe"
    return "", False


_NO_DICT_SUFFIX, _NO_DICT_ERROR_NAMED = _probe_no_dict_error()


class _SlotProbe:
    __slots__ = ("a",)


def _probe_slot_error_qualified() -> bool:
    """Whether reading an unset slot names the type fully qualified
    ("'pkg.mod.T' object has no attribute 'a'", from 3.13) rather than by
    its ``__name__``; asked of the running interpreter once."""
    try:
        _SlotProbe().a
    except AttributeError as e:
        return f"{_SlotProbe.__module__}.{_SlotProbe.__qualname__}" in str(e)
    return False


_SLOT_ERROR_QUALIFIED = _probe_slot_error_qualified()


def _slot_error_type_name(cls: type) -> str:
    """How a slot's member descriptor names ``cls`` in its read error
    (3.13's fully qualified name leaves out ``builtins`` and ``__main__``)."""
    if not _SLOT_ERROR_QUALIFIED:
        return cls.__name__
    if cls.__module__ in ("builtins", "__main__") or not isinstance(cls.__module__, str):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def del_attribute_error(cls: type, name: str) -> AttributeError:
    """``del obj.name`` of a name the instance's ``__dict__`` lacks (no name
    on the error, unlike a failed read)."""
    return AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")


def no_dict_attribute_error(cls: type, name: str) -> AttributeError:
    """The AttributeError of setting or deleting ``name`` (no descriptor of
    ``cls``) on an instance of ``cls`` that has no ``__dict__``."""
    e = AttributeError(f"'{cls.__name__}' object has no attribute '{name}'{_NO_DICT_SUFFIX}")
    if _NO_DICT_ERROR_NAMED:
        e.name = name
    return e


def _slot_names(cls: type):
    """The attribute names instances of ``cls`` may have, or None when they have a ``__dict__``."""
    names = set()
    for klass in cls.__mro__[:-1]:  # object has neither
        slots = klass.__dict__.get("__slots__")
        if slots is None:
            return None
        slots = (slots,) if isinstance(slots, str) else tuple(slots)
        if "__dict__" in slots:
            return None
        names.update(slots)
    return names


def check_constructible(cls: type) -> None:
    """Raise Unsupported unless an instance of ``cls`` made in the trace can
    be modelled by NewObjectValue: its attribute hooks are ``object``'s or
    Python functions (traced), it has no finalizer, and it is no module."""
    def own(name):
        return special_lookup(cls, name) is not object.__dict__[name]
    if not issubclass(cls, dict):
        # (dict subclasses are modelled as ModelOutput-like mappings)
        for name in ("__setattr__", "__delattr__"):
            if own(name) and not isinstance(special_lookup(cls, name), types.FunctionType):
                raise Unsupported(f"constructing {cls.__qualname__} (its {name} is not a Python function)",
                                  kind="unsupported_class_call")
        if own("__getattribute__") and python_getattribute(cls) is None:
            raise Unsupported(f"constructing {cls.__qualname__} (custom __getattribute__)",
                              kind="unsupported_class_call")
    if intercepts_attribute_reads(cls) and (issubclass(cls, dict) or python_getattribute(cls) is None):
        raise Unsupported(f"constructing {cls.__qualname__} (custom __getattribute__ or __class__)",
                          kind="unsupported_class_call")
    if special_lookup(cls, "__del__") is not NO_ATTR:
        # the object would exist only if it escapes: its finalizer must run
        # when eager's would, so it is made natively
        raise Unsupported(f"constructing {cls.__qualname__}, which has __del__", kind="finalizer")
    if issubclass(cls, torch.nn.Module):
        raise Unsupported(f"constructing nn.Module {cls.__qualname__} inside a compiled function",
                          kind="unsupported_class_call", hint="build modules outside the compiled function")


def construct_user_object(tx, cls: type, args, kwargs) -> Value:
    """``cls(*args, **kwargs)`` for a plain Python class: inline ``__init__`` on a new object."""
    if cls in (torch.nn.ModuleList, torch.nn.Sequential) and len(args) == 1 and not kwargs:
        items = args[0].unpack(tx)
        if all(isinstance(v, NNModuleValue) for v in items):
            return ModuleSequenceValue(items, cls)

    # (the class's own dicts are read, not ``cls.__new__``: a descriptor
    # stored there would run at trace time)
    def own(name):
        return special_lookup(cls, name) is not object.__dict__[name]
    if own("__new__") and not (issubclass(cls, dict) and dataclasses.is_dataclass(cls)):
        raise Unsupported(f"constructing {cls.__qualname__} (custom __new__)", kind="unsupported_class_call")
    check_constructible(cls)
    value = NewObjectValue(cls)
    if issubclass(cls, dict) and dataclasses.is_dataclass(cls):
        # ModelOutput-like: fields given as arguments, None fields left out of the mapping
        fields = [f for f in dataclasses.fields(cls)]
        bound = dict(zip([f.name for f in fields], args))
        bound.update(kwargs)
        for f in fields:
            v = bound.get(f.name)
            if v is None:
                if f.default is not dataclasses.MISSING:
                    v = tx.wrap(f.default, None) if f.default is None or isinstance(f.default, (int, float, str, bool)) else None
                if v is None:
                    v = NONE
            value.attrs[f.name] = v
            if not is_none(v):
                value.items[f.name] = v
        return value
    init = special_lookup(cls, "__init__")
    if isinstance(init, types.FunctionType):
        src = AttrSource(ObjectSource(cls, cls.__qualname__), "__init__")
        tx.wrap(init, src).call(tx, [value] + list(args), kwargs)
    elif init is not object.__init__:
        # a descriptor or a C __init__: what it does is not modelled
        raise Unsupported(f"constructing {cls.__qualname__} (its __init__ is a {type(init).__name__})",
                          kind="unsupported_class_call")
    elif args or kwargs:
        raise Unsupported(f"constructing {cls.__qualname__} with arguments", kind="unsupported_class_call")
    return value


_ABSENT = object()


def iterator_from(tx, it: Value) -> IteratorValue:
    """What ``iter(obj)`` returns when ``obj.__iter__()`` returned ``it``: an
    iterator value, or a user object advanced by its ``__next__`` one item at
    a time, as the consumer asks (never run ahead)."""
    from .objects import UserObjectValue
    if isinstance(it, IteratorValue):
        return it
    try:
        cls = it.python_type()
    except NotImplementedError:
        cls = None
    nxt = special_lookup(cls, "__next__") if cls is not None else None
    if cls is not None and nxt is NO_ATTR:
        tx.raise_python_exception(TypeError(f"iter() returned non-iterator of type '{cls.__name__}'"))
    if isinstance(it, (NewObjectValue, UserObjectValue)) and isinstance(nxt, types.FunctionType):
        return UserIteratorValue(it)
    raise Unsupported(f"iter() returned a {it.type_name()}", kind="unsupported_iter")


class UserIteratorValue(IteratorValue):
    """A user iterator made in the trace (``__iter__`` returns itself): each
    ``next`` runs its ``__next__`` in the trace.  Reconstructs as the object."""

    __slots__ = ("obj",)

    def __init__(self, obj: "NewObjectValue"):
        super().__init__([])
        self.obj = obj

    def python_type(self):
        return self.obj.python_type()

    def next(self, tx):
        from ..errors import UserException
        obj = self.obj
        method = obj._dunder(tx, "__next__") if isinstance(obj, NewObjectValue) else obj.dunder(tx, "__next__")
        try:
            return method.call(tx, [], {})
        except UserException as e:
            if issubclass(e.value.python_type(), StopIteration):
                return None
            raise

    def unpack(self, tx):
        from .generators import drain
        return drain(tx, self.next)

    def get_attr(self, tx, name):
        return self.obj.get_attr(tx, name)

    def children(self):
        return (self.obj,)

    def reconstruct(self, cg):
        cg.reconstruct(self.obj)

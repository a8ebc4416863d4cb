"""``super()``, and reads of real mappings: ``os.environ`` and a dict
subclass's ``super().get(k)`` (split from :mod:`.modules`)."""

from __future__ import annotations

import types

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource, ObjectSource
from . import class_attrs
from .base import Value
from .constants import NONE, const
from .containers import DictValue
from .functions import BoundMethodValue
from .object_protocol import ObjectSlotValue
from .objects import UserObjectValue


class SuperValue(Value):
    """``super()`` / ``super(cls, obj)``: attribute lookup starts after ``cls`` in the MRO."""

    __slots__ = ("cls", "receiver")

    def __init__(self, cls: type, receiver: Value):
        super().__init__()
        self.cls = cls
        self.receiver = receiver

    def python_type(self):
        return super

    def get_attr(self, tx, name):
        receiver_cls = self.receiver.python_type()
        on_class = False
        if self.receiver.is_constant():
            obj = self.receiver.as_constant()
            if isinstance(obj, type) and issubclass(obj, self.cls):
                # super() inside a classmethod: the receiver is the class itself
                receiver_cls, on_class = obj, True
        class_attrs.check_not_dirty(receiver_cls, name)
        mro = receiver_cls.__mro__
        if self.cls not in mro:
            raise Unsupported(f"super({self.cls.__qualname__}, <{receiver_cls.__qualname__}>)",
                              kind="unsupported_attribute")
        start = mro.index(self.cls) + 1
        for klass in mro[start:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                src = AttrSource(ObjectSource(klass, klass.__qualname__), name)
                if isinstance(attr, types.FunctionType):
                    if on_class:
                        return tx.wrap(attr, src)
                    return BoundMethodValue(tx.wrap(attr, src), self.receiver)
                if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
                    owner = self.receiver if on_class else tx.wrap(receiver_cls, None)
                    return BoundMethodValue(tx.wrap(attr.__func__, AttrSource(src, "__func__")), owner)
                if isinstance(attr, staticmethod):
                    return tx.wrap(attr.__func__, AttrSource(src, "__func__"))
                if isinstance(attr, property):
                    return tx.wrap(attr.fget, AttrSource(src, "fget")).call(tx, [self.receiver], {})
                if callable(attr) and getattr(attr, "__objclass__", None) is object:
                    return ObjectSlotValue(name, self.receiver)
                if on_class and type(attr).__name__ == "classmethod_descriptor":
                    # a C classmethod (``torch._C._FunctionBase.apply``) bound to
                    # the class: a constant of the trace, called natively
                    from .builder import wrap_callable_or_object
                    return wrap_callable_or_object(tx, attr.__get__(None, receiver_cls), None)
                if getattr(attr, "__objclass__", None) is dict and name in _DICT_READS and \
                        isinstance(self.receiver, UserObjectValue) and self.receiver.source is not None:
                    return _MappingRead(self.receiver.source, self.receiver.obj, name, dict)
                if on_class:
                    if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
                        return tx.wrap(attr, src)  # (unbound: __get__(None, cls) is the descriptor)
                elif klass is dict and isinstance(self.receiver, DictValue):
                    # dict's own method of a modelled dict subclass (Counter): the same table
                    from .counters import DictSuperMethod
                    return DictSuperMethod(self.receiver, name)
                elif isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
                    # a C method (``super().update(...)`` in a dict subclass): bound to the receiver
                    return BoundMethodValue(tx.wrap(attr, src), self.receiver)
                if hasattr(type(attr), "__get__"):
                    # any other descriptor binds to the receiver in its own way
                    raise Unsupported(f"super().{name}, a {type(attr).__name__}", kind="unsupported_attribute")
                return tx.wrap(attr, src)
        if name == "__init__":
            return ObjectSlotValue(name, self.receiver)
        raise Unsupported(f"super().{name}", kind="unsupported_attribute")

    def children(self):
        return (self.receiver,)


_DICT_READS = ("get", "__getitem__", "__contains__")


class _MappingRead(Value):
    """A read of a pre-existing mapping (``super().get(k)`` on a dict subclass,
    ``os.environ.get(k)``): the real entry at trace time, with its presence
    guarded through the mapping's source and its value through the item's."""

    __slots__ = ("source_of_mapping", "mapping", "name", "via")

    def __init__(self, source_of_mapping, mapping, name, via=None):
        super().__init__()
        self.source_of_mapping = source_of_mapping
        self.mapping = mapping
        self.name = name
        self.via = via  # ``dict`` to bypass a subclass's own methods, as super() does

    def call(self, tx, args, kwargs):
        key = args[0].as_constant()
        kind = self.via or type(self.mapping)
        present = kind.__contains__(self.mapping, key)
        src = self.source_of_mapping
        tx.guards.add(Guard("DICT_CONTAINS", src, (key, present)))
        if self.name == "__contains__":
            return const(present)
        if present:
            return tx.wrap(kind.__getitem__(self.mapping, key), ItemSource(src, key))
        if self.name == "get":
            return args[1] if len(args) > 1 else NONE
        tx.raise_python_exception(KeyError(key))


class EnvironValue(Value):
    """``os.environ``: reads are taken at trace time and guarded key by key."""

    __slots__ = ()

    def python_type(self):
        import os
        return type(os.environ)

    def get_attr(self, tx, name):
        import os
        if name in _DICT_READS:
            return _MappingRead(self.source, os.environ, name)
        raise Unsupported(f"os.environ.{name}", kind="unsupported_library")

    def getitem(self, tx, key):
        import os
        return _MappingRead(self.source, os.environ, "__getitem__").call(tx, [key], {})

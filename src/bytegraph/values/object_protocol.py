"""``object``'s own attribute protocol for user objects: the C slots a
Python ``__setattr__``/``__delattr__``/``__getattribute__`` hands the work
to (``super().__setattr__(k, v)``, ``object.__setattr__(self, k, v)``), and
the class-level hooks that decide whether an attribute write runs the
program's code first.

A user class may define ``__setattr__`` in Python (Hugging Face configs map
aliased names there; frozen dataclasses raise from it, and their
``__init__`` writes through ``object.__setattr__``): such writes are traced
by calling that function, and the ``object.__setattr__`` it ends in is the
*generic* write modelled by the object's value (``generic_set_attr``).
"""

from __future__ import annotations

import types

from ..errors import Unsupported
from .base import Value
from .constants import NONE, const
from .containers import IteratorValue

#: ``object``'s slots that end a user class's own attribute hooks
_GENERIC = {"__setattr__": "generic_set_attr", "__delattr__": "generic_del_attr",
            "__getattribute__": "generic_get_attr"}


def python_attr_hook(cls: type, name: str):
    """``cls``'s ``__setattr__``/``__delattr__`` when it is a Python function
    (traced), None when it is ``object``'s (the generic write); any other
    hook (a C type's, a callable object) raises Unsupported."""
    from .objects import special_lookup
    hook = special_lookup(cls, name)
    if hook is object.__dict__[name]:
        return None
    if isinstance(hook, types.FunctionType):
        return hook
    raise Unsupported(f"{cls.__qualname__}.{name} is a {type(hook).__name__}", kind="unsupported_setattr")


def call_attr_hook(tx, receiver: Value, cls: type, name: str, args) -> bool:
    """Run ``type(receiver).<name>(receiver, *args)`` in the trace when it is
    a Python function (True), or return False for ``object``'s own slot.
    The lookup is guarded: a later call must find the same hook."""
    from ..sources import AttrSource, ObjectSource
    from .objects import guard_class_lookup, owner_of
    hook = python_attr_hook(cls, name)
    owner = owner_of(cls, name)
    guard_class_lookup(tx, cls, name, owner)
    if hook is None:
        return False
    fn = tx.wrap(hook, AttrSource(ObjectSource(owner, owner.__qualname__), name))
    fn.call(tx, [receiver, *args], {})
    return True


def with_getattr_fallback(tx, receiver: Value, cls: type, name: str, getattribute) -> Value:
    """``receiver.name`` for an object of a Python class: ``getattribute()``
    (the class's ``__getattribute__``, traced or modelled), then, when that
    raises AttributeError, the class's ``__getattr__`` -- as CPython's slot
    does it, dropping the first error.  Both run in the trace; the hook's
    lookup is guarded."""
    from ..errors import UserException
    from ..sources import AttrSource, ObjectSource
    from .objects import NO_ATTR, guard_class_lookup, owner_of, special_lookup
    fallback = special_lookup(cls, "__getattr__")
    if fallback is NO_ATTR:
        return getattribute()
    if not isinstance(fallback, types.FunctionType):
        raise Unsupported(f"{cls.__qualname__}.__getattr__ is a {type(fallback).__name__}",
                          kind="unsupported_attribute")
    try:
        return getattribute()
    except UserException as e:
        if not issubclass(e.value.python_type(), AttributeError):
            raise
    owner = owner_of(cls, "__getattr__")
    guard_class_lookup(tx, cls, "__getattr__", owner)
    fn = tx.wrap(fallback, AttrSource(ObjectSource(owner, owner.__qualname__), "__getattr__"))
    return fn.call(tx, [receiver, const(name)], {})


def is_user_instance(v: Value) -> bool:
    """A value whose attribute state bytegraph models per name (an object of a
    Python class, pre-existing or made in the trace)."""
    from .modules import NewObjectValue, NNModuleValue
    from .objects import UserObjectValue
    return type(v) in (UserObjectValue, NewObjectValue) and not isinstance(v, NNModuleValue)


class ObjectSlotValue(Value):
    """One of ``object``'s C methods bound to a user object: reached through
    ``super()`` from a class's own hook, or looked up on an object whose
    class inherits it (``x.__reduce_ex__``).  Calling it runs the slot's
    model on the receiver; other slots are refused."""

    __slots__ = ("name", "receiver")

    def __init__(self, name, receiver):
        super().__init__()
        self.name = name
        self.receiver = receiver

    def python_type(self):
        return types.BuiltinMethodType

    def children(self):
        return (self.receiver,)

    def call(self, tx, args, kwargs):
        return call_object_slot(tx, self.name, self.receiver, list(args), kwargs)

    def reconstruct(self, cg):
        # ``object.<name>.__get__(receiver)``: the slot itself, never a
        # lookup through the receiver's own hooks
        cg.push_callable(_bind_slot)
        cg.load_object(self.name)
        cg.reconstruct(self.receiver)
        cg.call(2)


def _bind_slot(name, obj):
    return object.__dict__[name].__get__(obj)


def call_object_slot(tx, name: str, receiver: Value, args, kwargs) -> Value:
    """``object.<name>(receiver, *args)``."""
    if name in ("__init__", "__init_subclass__"):
        if args or kwargs:
            # (object.__init__ raises for arguments unless the class overrides __new__)
            raise Unsupported(f"object.{name} with arguments", kind="unsupported_attribute")
        return NONE
    if kwargs:
        raise Unsupported(f"object.{name} with keyword arguments", kind="unsupported_attribute")
    if name in _GENERIC and hasattr(receiver, _GENERIC[name]):
        n_args = {"__setattr__": 2, "__delattr__": 1, "__getattribute__": 1}[name]
        if len(args) != n_args:
            raise Unsupported(f"object.{name} with {len(args)} arguments", kind="unsupported_attribute")
        if not (args[0].is_constant() and type(args[0].as_constant()) is str):
            if args[0].is_constant():
                tx.raise_python_exception(TypeError(
                    f"attribute name must be string, not '{type(args[0].as_constant()).__name__}'"))
            raise Unsupported(f"object.{name} with a {args[0].type_name()} name", kind="unsupported_attribute")
        attr = args[0].as_constant()
        method = getattr(receiver, _GENERIC[name])
        if name == "__setattr__":
            method(tx, attr, args[1])
            return NONE
        if name == "__delattr__":
            method(tx, attr)
            return NONE
        return method(tx, attr)
    if name in ("__reduce_ex__", "__reduce__", "__getstate__") and is_user_instance(receiver):
        from .copying import object_reduce_ex, object_getstate
        if name == "__getstate__":
            if args:
                raise Unsupported("object.__getstate__ with arguments", kind="unsupported_call")
            return object_getstate(tx, receiver, required=False)
        if name == "__reduce__":
            if args:
                raise Unsupported("object.__reduce__ with arguments", kind="unsupported_call")
            return object_reduce_ex(tx, receiver, const(0), via_reduce=True)
        if len(args) != 1:
            raise Unsupported("object.__reduce_ex__ without a protocol", kind="unsupported_call")
        return object_reduce_ex(tx, receiver, args[0])
    raise Unsupported(f"object.{name} of a {receiver.type_name()}", kind="unsupported_attribute")


def _unbound_slot(name):
    """The handler for ``object.<name>(obj, ...)`` called on the class."""
    def handler(tx, args, kwargs):
        if not args:
            raise Unsupported(f"object.{name}() without a receiver", kind="unsupported_attribute")
        receiver = args[0]
        if name in _GENERIC and not is_user_instance(receiver):
            raise Unsupported(f"object.{name} of a {receiver.type_name()}", kind="unsupported_attribute")
        return call_object_slot(tx, name, receiver, list(args[1:]), kwargs)
    return handler


#: ``object.__setattr__(obj, k, v)`` and friends called on the class
OBJECT_SLOT_HANDLERS = {object.__dict__[n]: _unbound_slot(n) for n in
                        ("__setattr__", "__delattr__", "__getattribute__", "__reduce_ex__", "__reduce__",
                         "__getstate__")}

#: slots an inherited lookup (``obj.__reduce_ex__``) returns as ObjectSlotValue
BOUND_SLOTS = frozenset(("__setattr__", "__delattr__", "__getattribute__", "__reduce_ex__", "__reduce__",
                         "__getstate__", "__init__"))


class InstanceDictValue(Value):
    """``obj.__dict__`` of an object made in the trace (a NewObjectValue): a
    live view of its attributes, so reads see later attribute writes and
    writes through it are attribute writes (no ``__setattr__`` runs, as in
    Python).  Reads, ``update`` and item writes are modelled; other dict
    methods are refused.  Reconstructs as the rebuilt object's ``__dict__``."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        super().__init__()
        self.obj = obj

    def python_type(self):
        return dict

    def children(self):
        return (self.obj,)

    def has_len(self):
        return True

    def _name(self, tx, key: Value):
        if key.is_constant() and type(key.as_constant()) is str:
            return key.as_constant()
        raise Unsupported(f"a {key.type_name()} key in an object's __dict__", kind="unsupported_method")

    def _attrs(self):
        return self.obj.attrs

    def getitem(self, tx, key):
        name = self._name(tx, key)
        if name not in self._attrs():
            tx.raise_python_exception(KeyError(name))
        return self._attrs()[name]

    def contains(self, key) -> bool:
        return key.is_constant() and key.as_constant() in self._attrs()

    def setitem(self, tx, key, value):
        self._attrs()[self._name(tx, key)] = value

    def truth(self, tx):
        return bool(self._attrs())

    def unpack(self, tx):
        return [const(k) for k in self._attrs()]  # (consumed at once: list(), tuple(), *d)

    def get_iter(self, tx):
        return InstanceDictKeysValue(self)

    def call_method(self, tx, name, args, kwargs):
        from .containers import DictValue
        attrs = self._attrs()
        if name == "get" and 1 <= len(args) <= 2 and not kwargs:
            key = self._name(tx, args[0])
            return attrs.get(key, args[1] if len(args) == 2 else NONE)
        if name == "__contains__" and len(args) == 1 and not kwargs:
            return const(self.contains(args[0]))
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name == "__len__" and not args and not kwargs:
            return const(len(attrs))
        if name == "update" and len(args) == 1 and not kwargs and type(args[0]) is DictValue \
                and args[0].cls is dict:
            # (an exact dict's items: no user __iter__/keys() runs)
            for k, v in list(args[0].entries.values()):
                attrs[self._name(tx, k)] = v
            return NONE
        if name == "copy" and not args and not kwargs:
            return self.as_dict_value()
        raise Unsupported(f"__dict__.{name}() of an object made in the trace", kind="unsupported_method")

    def as_dict_value(self):
        """A new dict with the object's current attributes (what ``dict(d)`` makes)."""
        from .containers import DictValue
        return DictValue.from_pairs([(const(k), v) for k, v in self._attrs().items()])

    def reconstruct(self, cg):
        cg.push_callable(object.__getattribute__)
        cg.reconstruct(self.obj)
        cg.load_object("__dict__")
        cg.call(2)


class InstanceDictKeysValue(IteratorValue):
    """``iter(obj.__dict__)`` of an object made in the trace: its keys, one
    by one.  Python raises if the dict changes meanwhile; that is not
    modelled (refused), nor is the iterator escaping the trace."""

    __slots__ = ("view", "keys")

    def __init__(self, view):
        super().__init__([])
        self.view = view
        self.keys = tuple(view._attrs())

    def python_type(self):
        return type(iter({}))

    def children(self):
        return (self.view,)

    def next(self, tx):
        if tuple(self.view._attrs()) != self.keys:
            raise Unsupported("an object's __dict__ changed while being iterated", kind="unsupported_iter")
        if self.pos >= len(self.keys):
            return None
        self.pos += 1
        return const(self.keys[self.pos - 1])

    def unpack(self, tx):
        out = []
        while (item := self.next(tx)) is not None:
            out.append(item)
        return out

    def reconstruct(self, cg):
        raise Unsupported("an iterator over an object's __dict__ kept across a graph break",
                          kind="unreconstructable")


def new_object(tx, args, kwargs):
    """``object.__new__(cls)`` for a Python class whose ``__new__`` is object's."""
    from .copying import _check_plain_new
    from .modules import NewObjectValue, check_constructible
    if kwargs or len(args) != 1 or not args[0].is_constant() or not isinstance(args[0].as_constant(), type):
        raise Unsupported("object.__new__ with arguments", kind="unsupported_class_call")
    cls = args[0].as_constant()
    _check_plain_new(cls)
    check_constructible(cls)
    return NewObjectValue(cls)


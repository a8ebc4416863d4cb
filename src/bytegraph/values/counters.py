"""``collections.Counter``: a :class:`~.containers.DictValue` of class
Counter whose own methods are program code, traced.

Counter is a dict subclass written in Python (``update``, ``subtract``,
``most_common``, ``elements``, ``total``, its operators, ``__missing__``
returning 0); what it inherits from dict (``get``, ``items``, ``[]`` on a
present key, ``setdefault``, ...) is dict's, modelled by ``dict_methods``.
So a Counter value is a dict value with ``cls = Counter``: a method Counter
defines is its Python function run in the trace with the value as ``self``;
``super().<dict method>`` inside it is dict's on the same table.  The few C
helpers those methods call (``_count_elements``, ``heapq.nlargest``,
``itertools.chain.from_iterable``/``starmap``) have handlers here.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import operator
import types
from typing import Optional

from ..errors import Unsupported, UserException
from .base import Value
from .generators import _Untouched, iterate
from .constants import NONE, ConstantValue, const
from .containers import DictValue, ListValue, TupleValue

Counter = collections.Counter


def is_counter(v: Value) -> bool:
    return isinstance(v, DictValue) and v.cls is Counter


def traced_method(tx, cls: type, name: str) -> Optional[Value]:
    """``cls``'s own Python function ``name`` (found on its MRO before dict),
    as a value to call with the receiver first; None if dict's applies."""
    from ..sources import AttrSource, ObjectSource
    for klass in cls.__mro__:
        if klass is dict:
            return None
        fn = klass.__dict__.get(name)
        if isinstance(fn, types.FunctionType):
            return tx.wrap(fn, AttrSource(ObjectSource(klass, f"{klass.__module__}.{klass.__qualname__}"), name))
        if fn is not None:
            raise Unsupported(f"{cls.__name__}.{name} ({type(fn).__name__})", kind="unsupported_method")
    return None


def call_counter_method(tx, d: DictValue, name: str, args, kwargs) -> Optional[Value]:
    """``d.name(*args, **kwargs)`` when Counter itself defines ``name`` (its
    Python code, traced), else None (dict's method)."""
    if name == "fromkeys":
        tx.raise_python_exception(NotImplementedError(
            "Counter.fromkeys() is undefined.  Use Counter(iterable) instead."))
    fn = traced_method(tx, d.cls, name)
    if fn is None:
        return None
    return fn.call(tx, [d, *args], kwargs)


def missing(tx, d: DictValue, key: Value) -> Optional[Value]:
    """``d[key]`` for an absent key: the class's Python ``__missing__`` (a
    Counter's returns 0), or None when the class has none."""
    fn = traced_method(tx, d.cls, "__missing__") if d.cls is Counter else None
    if fn is None:
        return None
    return fn.call(tx, [d, key], {})


def construct_counter(tx, args, kwargs) -> Value:
    """``Counter(iterable_or_mapping, **kwds)``: a new empty Counter whose
    ``__init__`` runs in the trace."""
    d = DictValue(cls=Counter)
    call_counter_method(tx, d, "__init__", list(args), dict(kwargs))
    return d


class DictSuperMethod(Value):
    """``super().name`` inside a method of a modelled dict subclass: dict's
    own method on the same table (``super().update(m)``, ``super().__init__()``)."""

    __slots__ = ("receiver", "name")

    def __init__(self, receiver: DictValue, name: str):
        super().__init__()
        self.receiver, self.name = receiver, name

    def python_type(self):
        return types.BuiltinMethodType

    def children(self):
        return (self.receiver,)

    def call(self, tx, args, kwargs):
        from .dict_methods import _DICT_METHODS, _update
        from .containers import check_arity
        d = self.receiver
        if self.name == "__init__":
            # dict.__init__ is dict.update on the (new) table
            return _update(tx, d, *args, **kwargs)
        if self.name == "__setitem__" and len(args) == 2 and not kwargs:
            d.setitem(tx, args[0], args[1])
            return NONE
        if self.name == "__delitem__" and len(args) == 1 and not kwargs:
            d.delitem(tx, args[0])
            return NONE
        handler = _DICT_METHODS.get(self.name)
        if handler is None:
            raise Unsupported(f"super().{self.name}() of a {d.cls.__name__}", kind="unsupported_method")
        check_arity(tx, handler, getattr({}, self.name), args, kwargs)
        return handler(tx, d, *args, **kwargs)

    def reconstruct(self, cg):
        raise Unsupported("a bound super() method of a dict subclass outlives the trace",
                          kind="unreconstructable")


# -- the C helpers Counter's methods call ----------------------------------------

def _count_elements(tx, args, kwargs):
    """``collections._count_elements(mapping, iterable)`` (C): for each
    element, ``mapping[elem] = mapping.get(elem, 0) + 1`` (dict's own get
    and setitem for a Counter; its fast path adds 1 to the old count)."""
    from .generators import iterate
    from .operators import binary_op
    if kwargs or len(args) != 2 or not isinstance(args[0], DictValue) or args[0].cls not in (Counter, dict):
        raise Unsupported("_count_elements on this mapping", kind="unsupported_builtin")
    d, iterable = args
    it = iterate(tx, iterable)
    from .. import config
    n = 0
    while (elem := it.next(tx)) is not None:
        hk = d.hkey(tx, elem)
        hit = d.entries.get(hk)
        d.store(tx, elem, const(1) if hit is None else binary_op(tx, operator.add, hit[1], const(1)), hk=hk)
        n += 1
        if n > config.max_generator_items:
            raise Unsupported("counting an endless iterator", kind="generator")
    return NONE


def _nlargest(tx, args, kwargs):
    """``heapq.nlargest(n, iterable, key=None)``: the key called once per
    element in order, as the real one does; the pick is then the real
    ``nlargest`` over the keys (constants: comparing them runs no program
    code), so ties come out exactly as it orders them."""
    from .generators import iterate
    if len(args) != 2 or set(kwargs) - {"key"} or not args[0].is_constant():
        raise Unsupported("heapq.nlargest with these arguments", kind="unsupported_builtin")
    n = args[0].as_constant()
    key = kwargs.get("key")
    items = iterate(tx, args[1]).unpack(tx)
    if key is None or key.is_constant() and key.as_constant() is None:
        keys = items
    else:
        keys = [key.call(tx, [v], {}) for v in items]
    if not all(isinstance(k, ConstantValue) and type(k.as_constant()) in (int, float, str, bool) for k in keys):
        raise Unsupported("heapq.nlargest over keys that are not numbers or strings", kind="unsupported_builtin")
    try:
        order = heapq.nlargest(n, range(len(items)), key=lambda i: keys[i].as_constant())
    except TypeError as e:
        tx.raise_python_exception(e)
    return ListValue([items[i] for i in order])


class FromIterableValue(_Untouched):
    """``itertools.chain.from_iterable(iterables)``: lazy in the outer
    iterable as in C (each inner one is asked for when the previous is done)."""

    __slots__ = ("outer", "active")

    def __init__(self, tx, args):
        super().__init__(itertools.chain.from_iterable, args)
        self.outer, self.active = iterate(tx, args[0]), None

    def python_type(self):
        return itertools.chain

    def step(self, tx):
        while True:
            if self.active is None:
                nxt = self.outer.next(tx)
                if nxt is None:
                    return None
                self.active = iterate(tx, nxt)
            v = self.active.next(tx)
            if v is not None:
                return v
            self.active = None


class StarmapValue(_Untouched):
    """``itertools.starmap(fn, iterable)``: ``fn(*item)`` per item, lazily
    (a StopIteration from ``fn`` ends it, as in C)."""

    __slots__ = ("fn", "it")

    def __init__(self, tx, args):
        super().__init__(itertools.starmap, args)
        self.fn, self.it = args[0], iterate(tx, args[1])

    def step(self, tx):
        item = self.it.next(tx)
        if item is None:
            return None
        try:
            return self.fn.call(tx, iterate(tx, item).unpack(tx), {})
        except UserException as e:
            if issubclass(e.value.python_type(), StopIteration):
                return None
            raise


def _one_or_two(name, n, cls):
    def handler(tx, args, kwargs):
        if kwargs or len(args) != n:
            raise Unsupported(f"{name} with these arguments", kind="unsupported_builtin")
        return cls(tx, list(args))
    return handler


COUNTER_HANDLERS = {
    Counter: construct_counter,
    collections._count_elements: _count_elements,
    heapq.nlargest: _nlargest,
    itertools.starmap: _one_or_two("itertools.starmap", 2, StarmapValue),
    itertools.chain.from_iterable: _one_or_two("itertools.chain.from_iterable", 1, FromIterableValue),
}


# -- operators ----------------------------------------------------------------

def _dunder_result(tx, d: DictValue, name: str, args) -> Optional[Value]:
    """``type(d).name(d, *args)`` traced; None when it answers NotImplemented."""
    fn = traced_method(tx, d.cls, name)
    if fn is None:
        return None
    from .user_operators import _not_implemented
    out = fn.call(tx, [d, *args], {})
    return None if _not_implemented(out) else out


def counter_binary(tx, fn, plain, a: Value, b: Value) -> Optional[Value]:
    """``a op b`` / ``a op= b`` with a Counter operand and a Counter or dict
    on the other side (its Python dunders traced; Counter has no reflected
    ones), else None (not decided here)."""
    from .user_operators import BINARY_DUNDERS
    if not (is_counter(a) and isinstance(b, DictValue)) or plain not in BINARY_DUNDERS:
        return None
    name = BINARY_DUNDERS[plain][0]
    if fn is not plain:
        out = _dunder_result(tx, a, "__i" + name[2:], [b])
        if out is not None:
            return out
    out = _dunder_result(tx, a, name, [b])
    if out is not None:
        return out
    if is_counter(b) or plain is not operator.or_:
        symbol = {operator.add: "+", operator.sub: "-", operator.and_: "&", operator.or_: "|",
                  operator.mul: "*", operator.xor: "^"}.get(plain)
        if symbol is None:
            return None
        symbol += "=" if fn is not plain else ""
        tx.raise_python_exception(TypeError(f"unsupported operand type(s) for {symbol}: "
                                            f"'{a.cls.__name__}' and '{b.cls.__name__}'"))
    return None  # Counter | dict: dict's reflected __ror__ (operators' dict_or)


def counter_unary(tx, fn, a: Value) -> Optional[Value]:
    from .user_operators import UNARY_DUNDERS
    if not is_counter(a) or fn not in UNARY_DUNDERS:
        return None
    out = _dunder_result(tx, a, UNARY_DUNDERS[fn], [])
    if out is None:
        tx.raise_python_exception(TypeError(f"bad operand type for unary: 'Counter'"))
    return out


def counter_compare(tx, op: str, a: Value, b: Value) -> Optional[Value]:
    """``a op b`` between two Counters: Counter's own comparison (missing
    elements count as zero), traced.  None when not both are Counters."""
    from .user_operators import COMPARE_DUNDERS
    if not (is_counter(a) and is_counter(b)):
        return None
    out = _dunder_result(tx, a, COMPARE_DUNDERS[op][0], [b])
    if out is None:
        raise Unsupported(f"Counter comparison {op}", kind="unsupported_operator")
    return out

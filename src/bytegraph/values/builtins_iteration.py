"""Builtins that iterate: the lazy iterator makers (``enumerate``, ``zip``,
``map``, ``filter``, ``reversed``, ``iter``, ``next``, ``itertools``) and the
consumers that pull items in Python's order (``sum``, ``min``/``max``,
``any``/``all``, ``functools.reduce``), stopping where Python stops.

Part of the builtin table (:mod:`.builtins_table` merges :data:`ITERATION_HANDLERS`).
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import List

from .. import config
from ..errors import Unsupported
from .base import Value, all_constant
from .call_errors import raise_signature_error
from .constants import NONE, const, is_none
from .containers import DictValue, DictViewValue, IteratorValue, ListValue, RangeValue, TupleValue
from .generators import (AccumulateValue, ChainValue, EnumerateValue, FilterValue, GeneratorValue, IsliceValue,
                         LazyIteratorValue, MapValue, SnapshotIteratorValue, ZipValue, iterate,
                         raise_stop_iteration)
from .operators import binary_op
from .tensors import TensorValue


def _iter_items(tx, v: Value) -> List[Value]:
    if isinstance(v, IteratorValue):
        return v.unpack(tx)
    return v.unpack(tx)


def _check_args(tx, fn, args, kwargs, n_min: int, n_max: int, keywords=()) -> None:
    """CPython's TypeError for a bad call of builtin ``fn`` (argument counts, keywords)."""
    if len(args) > n_max or any(k not in keywords for k in kwargs) or len(args) + len(kwargs) < n_min:
        raise_signature_error(tx, fn, args, kwargs)


def _enumerate(tx, args, kwargs):
    _check_args(tx, enumerate, args, kwargs, 1, 2, ("iterable", "start"))
    bound = dict(zip(("iterable", "start"), args))
    for k, v in kwargs.items():
        if k in bound:
            raise_signature_error(tx, enumerate, args, kwargs)   # given by name and position
        bound[k] = v
    if "iterable" not in bound:
        raise_signature_error(tx, enumerate, args, kwargs)
    it = iterate(tx, bound["iterable"])
    start = bound.get("start", const(0))
    if not start.is_constant():
        raise Unsupported("enumerate() with a start that is not a constant", kind="unsupported_builtin")
    if not isinstance(start.as_constant(), int):
        tx.raise_python_exception(TypeError(f"'{type(start.as_constant()).__name__}' object cannot be interpreted "
                                            "as an integer"))
    return EnumerateValue(it, int(start.as_constant()))


def _zip(tx, args, kwargs):
    _check_args(tx, zip, args, kwargs, 0, len(args), ("strict",))
    strict = kwargs.get("strict")
    return ZipValue([iterate(tx, a) for a in args], bool(strict is not None and strict.truth(tx)))


def _map(tx, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError("map() takes no keyword arguments"))
    if len(args) < 2:
        tx.raise_python_exception(TypeError("map() must have at least two arguments."))
    fn, *its = args
    return MapValue(fn, [iterate(tx, a) for a in its])


def _filter(tx, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError("filter() takes no keyword arguments"))
    if len(args) != 2:
        tx.raise_python_exception(TypeError(f"filter expected 2 arguments, got {len(args)}"))
    fn, it = args
    return FilterValue(fn, iterate(tx, it))


def _reversed(tx, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError("reversed() takes no keyword arguments"))
    if len(args) != 1:
        tx.raise_python_exception(TypeError(f"reversed expected 1 argument, got {len(args)}"))
    from .objects import NO_ATTR, special_lookup
    v = args[0]
    t = v.python_type()
    # the type's own dicts, as the interpreter looks special methods up
    # (``hasattr(t, ...)`` would run a descriptor's __get__ at trace time)
    rev = special_lookup(t, "__reversed__")
    if isinstance(v, IteratorValue) or rev is None or (rev is NO_ATTR and (
            special_lookup(t, "__len__") is NO_ATTR or special_lookup(t, "__getitem__") is NO_ATTR)):
        tx.raise_python_exception(TypeError(f"'{t.__name__}' object is not reversible"))
    if isinstance(v, (DictValue, DictViewValue)):
        # a dict_reversekeyiterator (odict_iterator) that reads the dict as it
        # goes (the modelled classes are exactly dict, OrderedDict, defaultdict
        # and Counter: their __reversed__ is C code)
        from .iterators import DictIteratorValue
        if isinstance(v, DictValue):
            return DictIteratorValue(v, "keys", reverse=True)
        return DictIteratorValue(v.dict_value, v.kind, reverse=True)
    if _defined_in_python(t, "__reversed__" if rev is not NO_ATTR else "__getitem__"):
        # the class's own __reversed__ (whatever it returns is the result),
        # or its sequence protocol: not the reverse of its __iter__
        method = _python_dunder(tx, v, "__reversed__") if rev is not NO_ATTR else None
        if method is None:
            raise Unsupported(f"reversed() of a {t.__name__} object", kind="unsupported_builtin")
        return method.call(tx, [], {})
    if type(v) is ListValue:
        from .iterators import ListReversedIteratorValue
        return ListReversedIteratorValue(v)
    if isinstance(v, RangeValue):
        # reversed(range) is a range_iterator over the reversed range, in CPython
        return RangeValue(v.value[::-1]).get_iter(tx)
    return IteratorValue(list(reversed(_iter_items(tx, v))))


def _defined_in_python(t: type, name: str) -> bool:
    """Whether the class that provides ``t.name`` is not a builtin type."""
    owner = next((k for k in t.__mro__ if name in k.__dict__), None)
    return owner is not None and owner.__module__ != "builtins"


def _python_dunder(tx, v: Value, name: str):
    """``type(v).name`` bound to ``v`` when it is a Python function of a user object, else None."""
    from .modules import NewObjectValue
    from .objects import UserObjectValue
    if isinstance(v, NewObjectValue):
        return v._dunder(tx, name)
    if isinstance(v, UserObjectValue):
        return v.dunder(tx, name)
    return None


def _iter(tx, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError("iter() takes no keyword arguments"))
    if not 1 <= len(args) <= 2:
        tx.raise_python_exception(TypeError(f"iter expected at most 2 arguments, got {len(args)}"
                                            if args else "iter expected at least 1 argument, got 0"))
    if len(args) == 1 and isinstance(args[0], IteratorValue):
        return args[0]
    if len(args) == 1 and not kwargs:
        return args[0].get_iter(tx)
    raise Unsupported("iter(callable, sentinel)", kind="unsupported_builtin")


def _next(tx, args, kwargs):
    if kwargs or not 1 <= len(args) <= 2:
        tx.raise_python_exception(TypeError("next expected 1 or 2 positional arguments"))
    it = args[0]
    if not isinstance(it, IteratorValue):
        return _next_of_object(tx, it, args[1] if len(args) > 1 else None)
    v = it.next(tx)
    if v is None:
        if len(args) > 1:
            return args[1]
        raise_stop_iteration(tx, it.result if isinstance(it, GeneratorValue) else NONE)
    return v


def _next_of_object(tx, obj: Value, default):
    """``next(obj[, default])`` for an instance of a user class: its type's
    ``__next__`` runs in the trace; a ``StopIteration`` it raises becomes
    ``default`` when one is given, else propagates as raised."""
    from ..errors import UserException
    from .modules import NewObjectValue
    from .objects import NO_ATTR, UserObjectValue, special_lookup
    if type(obj) not in (UserObjectValue, NewObjectValue):
        raise Unsupported(f"next() on {obj.type_name()}", kind="unsupported_builtin")
    cls = obj.python_type()
    method = obj.dunder(tx, "__next__") if isinstance(obj, UserObjectValue) else obj._dunder(tx, "__next__")
    if method is None:
        if special_lookup(cls, "__next__") is NO_ATTR:
            tx.raise_python_exception(TypeError(f"'{cls.__name__}' object is not an iterator"))
        raise Unsupported(f"next() on {cls.__name__} (its __next__ is not a Python function)",
                          kind="unsupported_builtin")
    if default is None:
        return method.call(tx, [], {})
    try:
        return method.call(tx, [], {})
    except UserException as e:
        if issubclass(e.value.python_type(), StopIteration):
            return default
        raise


def _items_with_keys(tx, iterable: Value, key):
    """Pull every item, calling ``key`` on each as it arrives (as min/max do)."""
    it = iterate(tx, iterable)
    items, keys = [], []
    while (v := it.next(tx)) is not None:
        items.append(v)
        keys.append(key.call(tx, [v], {}) if key is not None else v)
        if len(items) > config.max_generator_items:
            raise Unsupported("an endless iterator", kind="generator")
    return items, keys


def _reduce_minmax(fn):
    def handler(tx, args, kwargs):
        # CPython's checks of the call's shape, before anything is pulled
        if not args or any(k not in ("key", "default") for k in kwargs) or (len(args) > 1 and "default" in kwargs):
            raise_signature_error(tx, fn, args, kwargs)
        kwargs = dict(kwargs)
        key = kwargs.pop("key", None)
        if key is not None and is_none(key):
            key = None
        default = kwargs.pop("default", None)
        if len(args) == 1:
            if key is None and not isinstance(args[0], LazyIteratorValue):
                items = _iter_items(tx, args[0])
                keys = items
            else:
                items, keys = _items_with_keys(tx, args[0], key)
        else:
            items, keys = _items_with_keys(tx, TupleValue(list(args)), key)
        if not items:
            if default is not None:
                return default
            tx.raise_python_exception(ValueError(f"{fn.__name__}() arg is an empty sequence"))
        if any(isinstance(v, TensorValue) for v in items) and key is None:
            # NOTE: not torch.maximum: Python compares with ``bool(a < b)`` (an error for
            # tensors of several elements) and returns one of the operands itself.
            raise Unsupported(f"{fn.__name__}() over tensors compares tensor values", kind="data_dependent",
                              hint=f"use torch.{'maximum' if fn is max else 'minimum'}")
        if key is None and all_constant(items):
            return const(fn(v.as_constant() for v in items))
        from .user_operators import Ranked, any_user_instance
        if not all_constant(keys) and any_user_instance(keys):
            # the real min/max choose, each comparison traced (its order is CPython's)
            return fn(Ranked(tx, k, v) for k, v in zip(keys, items)).item
        ks = [k.as_constant() for k in keys]
        best = fn(range(len(items)), key=lambda i: ks[i])
        return items[best]
    return handler


def _plain_number(v) -> bool:
    return v.is_constant() and type(v.as_constant()) in (int, float, bool)


def _sum(tx, args, kwargs):
    """``sum()``: each item pulled and added as Python does.  CPython adds a
    leading run of plain ints and floats on a fast path of its own (3.12+:
    compensated float summation, a different result from repeated ``+``):
    that run is summed by the real ``sum``; from the first other item on,
    ``+`` as Python's generic path does."""
    start = kwargs.get("start", args[1] if len(args) > 1 else const(0))
    it = iterate(tx, args[0])
    acc = start
    run = [] if _plain_number(start) else None   # the fast path's items so far
    n = 0
    while (v := it.next(tx)) is not None:
        n += 1
        if n > config.max_generator_items:
            raise Unsupported("sum() of an endless iterator", kind="generator")
        if run is not None and _plain_number(v):
            run.append(v.as_constant())
            continue
        if run is not None:
            if run and any(type(x) is float for x in (start.as_constant(), *run)):
                # (where the fast path leaves a float sum for the generic
                # one, its compensation is an interpreter detail)
                raise Unsupported("sum() of float constants followed by other values", kind="unsupported_builtin")
            acc = const(sum(run, start.as_constant()))
            run = None
        acc = binary_op(tx, operator.add, acc, v)
    if run is not None:
        acc = const(sum(run, start.as_constant()))
    return acc


def _any_all(fn):
    def handler(tx, args, kwargs):
        it = iterate(tx, args[0])
        n = 0
        # stops at the first item that decides, pulling nothing after it
        while (v := it.next(tx)) is not None:
            if v.truth(tx) is (fn is any):
                return const(fn is any)
            n += 1
            if n > config.max_generator_items:
                raise Unsupported(f"{fn.__name__}() of an endless iterator", kind="generator")
        return const(fn is all)
    return handler


def _islice(tx, args, kwargs):
    if kwargs or not 2 <= len(args) <= 4:
        raise Unsupported("itertools.islice with these arguments", kind="unsupported_builtin")
    if not all_constant(args[1:]):
        raise Unsupported("itertools.islice with non-constant bounds", kind="unsupported_builtin")
    bounds = [a.as_constant() for a in args[1:]]
    try:
        s = slice(*bounds) if len(bounds) > 1 else slice(bounds[0])
        itertools.islice((), s.start, s.stop, s.step)  # CPython's argument checks
    except (ValueError, TypeError) as e:
        tx.raise_python_exception(e)
    return IsliceValue(iterate(tx, args[0]), args, s.start or 0, s.stop, s.step or 1)


def _chain(tx, args, kwargs):
    if kwargs:
        raise Unsupported("itertools.chain with keyword arguments", kind="unsupported_builtin")
    return ChainValue(list(args))


def _rearranging(fn):
    """``itertools.product``/``combinations``/``permutations``: computed over
    the positions of the inputs' items, so the items may be any values."""
    def handler(tx, args, kwargs):
        if not all_constant(kwargs.values()):
            raise Unsupported(f"itertools.{fn.__name__} with non-constant options", kind="unsupported_call")
        options = {k: v.as_constant() for k, v in kwargs.items()}
        if fn is itertools.product:
            lists = [_iter_items(tx, a) for a in args]
            positions = fn(*[range(len(items)) for items in lists], **options)
            return SnapshotIteratorValue([TupleValue([lists[j % len(lists)][i] for j, i in enumerate(p)])
                                          for p in positions], fn)
        items = _iter_items(tx, args[0])
        extra = [a.as_constant() for a in args[1:]]
        return SnapshotIteratorValue([TupleValue([items[i] for i in p])
                                      for p in fn(range(len(items)), *extra, **options)], fn)
    return handler


def _reduce(tx, args, kwargs):
    """``functools.reduce(fn, iterable[, initial])``, folded item by item as they are pulled."""
    if kwargs or not 2 <= len(args) <= 3:
        tx.raise_python_exception(TypeError("reduce expected 2 or 3 positional arguments"))
    fn, it = args[0], iterate(tx, args[1])
    acc = args[2] if len(args) == 3 else it.next(tx)
    if acc is None:
        tx.raise_python_exception(TypeError("reduce() of empty iterable with no initial value"))
    n = 0
    while (item := it.next(tx)) is not None:
        acc = fn.call(tx, [acc, item], {})
        n += 1
        if n > config.max_generator_items:
            raise Unsupported("reduce() of an endless iterator", kind="generator")
    return acc


def _accumulate(tx, args, kwargs):
    func = args[1] if len(args) > 1 else kwargs.get("func")
    if func is not None and is_none(func):
        func = None
    initial = kwargs.get("initial")
    if initial is not None and is_none(initial):
        initial = None
    return AccumulateValue(iterate(tx, args[0]), args, func, initial)


ITERATION_HANDLERS = {
    enumerate: _enumerate, zip: _zip, map: _map, filter: _filter, reversed: _reversed, iter: _iter, next: _next,
    min: _reduce_minmax(min), max: _reduce_minmax(max), sum: _sum, any: _any_all(any), all: _any_all(all),
    itertools.islice: _islice, itertools.chain: _chain, itertools.accumulate: _accumulate,
    functools.reduce: _reduce,
    itertools.product: _rearranging(itertools.product),
    itertools.combinations: _rearranging(itertools.combinations),
    itertools.permutations: _rearranging(itertools.permutations),
}

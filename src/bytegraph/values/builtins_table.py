"""Builtins, ``operator`` and ``math`` functions, and builtin types, as tables.

Each entry maps a real function (or type) to a handler ``(tx, args, kwargs)
-> Value``.  :func:`builtin_handler` is how the builder finds them; builtins
not in the table are unsupported (``print`` with a kind of its own).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import inspect
import itertools
import sys
import math
import operator
from typing import Callable, Dict, List

import torch

from .. import config
from ..errors import Unsupported, UserException
from .base import Value, all_constant
from .constants import NONE, ConstantValue, const, is_none
from .containers import (BaseListValue, DictValue, DictViewValue, IteratorValue, ListValue, NamedTupleValue,
                         RangeValue, SetValue, SliceValue, TupleValue, str_key)
from .frame_builtins import dir_, id_, locals_, super_, vars_
from .generators import (AccumulateValue, ChainValue, EnumerateValue, FilterValue, GeneratorValue, IsliceValue,
                         LazyIteratorValue, MapValue, SnapshotIteratorValue, ZipValue, iterate,
                         raise_stop_iteration)
from .objects import ClassValue, ExceptionValue, GradModeValue
from .operators import (BINARY_OP_FUNCS, COMPARE_FUNCS, binary_op, compare, contains, delitem, getitem,
                        same_object, setitem, unary_op)
from .symbolic import SymIntValue
from .tensors import TensorValue, graph_call

Handler = Callable[[object, List[Value], Dict[str, Value]], Value]


def _no_kwargs(name, kwargs):
    if kwargs:
        raise Unsupported(f"{name}() with keyword arguments", kind="unsupported_builtin")


def _len(tx, args, kwargs):
    (v,) = args
    if isinstance(v, TensorValue):
        if v.fake.dim() == 0:
            tx.raise_python_exception(TypeError("len() of a 0-d tensor"))
        from .symbolic import sym_size
        return sym_size(tx, v, 0)
    if isinstance(v, (BaseListValue, DictValue, SetValue, DictViewValue)):
        return const(len(v.unpack(tx)) if not isinstance(v, DictValue) else len(v.entries))
    if v.is_constant():
        try:
            return const(len(v.as_constant()))
        except TypeError as e:
            tx.raise_python_exception(e)
    return v.get_attr(tx, "__len__").call(tx, [], {})



def _isinstance(tx, args, kwargs):
    obj, cls = args
    classes = _classes(tx, cls)
    if isinstance(obj, ConstantValue):
        return const(isinstance(obj.value, classes))
    t = obj.python_type()
    if isinstance(obj, TensorValue) and not isinstance(classes, tuple):
        classes = (classes,)
    try:
        return const(issubclass(t, classes))
    except TypeError as e:
        tx.raise_python_exception(e)


def _classes(tx, v: Value):
    """A class or a (nested) tuple of classes, as ``isinstance``/``issubclass`` take it."""
    return v.as_constant() if v.is_constant() else tuple(_classes(tx, c) for c in v.unpack(tx))


def _issubclass(tx, args, kwargs):
    a, b = (_classes(tx, x) for x in args)
    try:
        return const(issubclass(a, b))
    except TypeError as e:
        tx.raise_python_exception(e)


def _iter_items(tx, v: Value) -> List[Value]:
    if isinstance(v, IteratorValue):
        return v.unpack(tx)
    return v.unpack(tx)


def _range(tx, args, kwargs):
    _no_kwargs("range", kwargs)
    return RangeValue(range(*[a.as_constant() for a in args]))


def _check_args(tx, name: str, args, kwargs, n_min: int, n_max: int, keywords=()) -> None:
    """CPython's TypeError for a bad call of builtin ``name`` (argument counts, keywords)."""
    if len(args) > n_max:
        tx.raise_python_exception(TypeError(f"{name}() takes at most {n_max} arguments ({len(args)} given)"))
    for k in kwargs:
        if k not in keywords:
            tx.raise_python_exception(TypeError(f"{name}() got an unexpected keyword argument '{k}'"))
    if len(args) + len(kwargs) < n_min:
        tx.raise_python_exception(TypeError(f"{name}() takes at least {n_min} arguments ({len(args)} given)"))


def _enumerate(tx, args, kwargs):
    _check_args(tx, "enumerate", args, kwargs, 1, 2, ("iterable", "start"))
    bound = dict(zip(("iterable", "start"), args))
    for k, v in kwargs.items():
        if k in bound:
            tx.raise_python_exception(TypeError(f"argument for enumerate() given by name ('{k}') and position"))
        bound[k] = v
    if "iterable" not in bound:
        tx.raise_python_exception(TypeError("enumerate() missing required argument 'iterable'"))
    it = iterate(tx, bound["iterable"])
    start = bound.get("start", const(0))
    if not start.is_constant():
        raise Unsupported("enumerate() with a start that is not a constant", kind="unsupported_builtin")
    if not isinstance(start.as_constant(), int):
        tx.raise_python_exception(TypeError(f"'{type(start.as_constant()).__name__}' object cannot be interpreted "
                                            "as an integer"))
    return EnumerateValue(it, int(start.as_constant()))


def _zip(tx, args, kwargs):
    _check_args(tx, "zip", args, kwargs, 0, len(args), ("strict",))
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
    v = args[0]
    t = v.python_type()
    if isinstance(v, IteratorValue) or not (hasattr(t, "__reversed__") or
                                            (hasattr(t, "__len__") and hasattr(t, "__getitem__"))):
        tx.raise_python_exception(TypeError(f"'{t.__name__}' object is not reversible"))
    if type(v) is ListValue:
        from .iterators import ListReverseIteratorValue
        return ListReverseIteratorValue(v)
    return IteratorValue(list(reversed(_iter_items(tx, v))))


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
        raise Unsupported(f"next() on {it.type_name()}", kind="unsupported_builtin")
    v = it.next(tx)
    if v is None:
        if len(args) > 1:
            return args[1]
        raise_stop_iteration(tx, it.result if isinstance(it, GeneratorValue) else NONE)
    return v


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
        ks = [k.as_constant() for k in keys]
        best = fn(range(len(items)), key=lambda i: ks[i])
        return items[best]
    return handler


def _sum(tx, args, kwargs):
    start = kwargs.get("start", args[1] if len(args) > 1 else const(0))
    it = iterate(tx, args[0])
    acc = start
    # each item is added as it is pulled, as Python does
    n = 0
    while (v := it.next(tx)) is not None:
        acc = binary_op(tx, operator.add, acc, v)
        n += 1
        if n > config.max_generator_items:
            raise Unsupported("sum() of an endless iterator", kind="generator")
    return acc


def _abs(tx, args, kwargs):
    return unary_op(tx, abs, args[0]) if not isinstance(args[0], TensorValue) else \
        graph_call(tx, "call_function", torch.abs, args, {})


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


def _getattr(tx, args, kwargs):
    obj, name = args[0], args[1].as_constant()
    if len(args) == 3:
        try:
            return obj.get_attr(tx, name)
        except UserException as e:
            if issubclass(e.value.python_type(), AttributeError):
                return args[2]
            raise
    return obj.get_attr(tx, name)


def _hasattr(tx, args, kwargs):
    obj, name = args[0], args[1].as_constant()
    try:
        obj.get_attr(tx, name)
    except UserException as e:
        if issubclass(e.value.python_type(), AttributeError):
            return const(False)
        raise
    return const(True)


def _setattr(tx, args, kwargs):
    args[0].set_attr(tx, args[1].as_constant(), args[2])
    return NONE


def _delattr(tx, args, kwargs):
    args[0].del_attr(tx, args[1].as_constant())
    return NONE


def _callable(tx, args, kwargs):
    v = args[0]
    if v.is_constant():
        return const(callable(v.as_constant()))
    from .functions import BoundMethodValue, NestedFunctionValue, UserFunctionValue
    if isinstance(v, (NestedFunctionValue, UserFunctionValue, BoundMethodValue)):
        return const(True)
    if isinstance(v, (TensorValue, BaseListValue, DictValue, SetValue)):
        return const(False)
    real = v.real_object()
    if real is not None:
        return const(callable(real[0]))
    # Python asks the type: an instance is callable when its class defines __call__
    return const(any("__call__" in klass.__dict__ for klass in v.python_type().__mro__))


def _type(tx, args, kwargs):
    if len(args) != 1:
        raise Unsupported("type() with three arguments", kind="unsupported_builtin")
    v = args[0]
    if isinstance(v, ConstantValue):
        return ClassValue(type(v.value))
    return ClassValue(v.python_type())


def _print(tx, args, kwargs):
    raise Unsupported("call to print()", kind="print", hint="print outside the compiled function, "
                      "or accept a graph break here")


def _scalar_type(fn):
    def handler(tx, args, kwargs):
        if args and isinstance(args[0], TensorValue):
            raise Unsupported(f"{fn.__name__}() of a tensor reads its value", kind="data_dependent",
                              hint="keep the value as a tensor")
        if len(args) == 1 and not kwargs and isinstance(args[0], SymIntValue):
            sym = args[0]
            if fn is int and sym.python_type() is int:
                return sym   # int(n) of a symbolic int is n itself: it stays symbolic
            if fn is float:
                return graph_call(tx, "call_function", torch.sym_float, [sym], {})
            if fn is int:
                return graph_call(tx, "call_function", torch.sym_int, [sym], {})
            # bool/str: the value itself, guarded by the shape environment
            return const(fn(sym.as_constant()))
        if all_constant(args) and all_constant(kwargs.values()):
            try:
                return const(fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()}))
            except Exception as e:
                tx.raise_python_exception(e)
        if fn is bool and len(args) == 1:
            return const(args[0].truth(tx))
        if fn is str and len(args) == 1 and isinstance(args[0], ExceptionValue) and all_constant(args[0].args):
            return const(str(args[0].as_real()))
        if fn is str and len(args) == 1:
            raise Unsupported(f"str() of a {args[0].type_name()}", kind="unsupported_builtin")
        raise Unsupported(f"{fn.__name__}() of a {args[0].type_name()}", kind="unsupported_builtin")
    return handler


def _tuple(tx, args, kwargs):
    return TupleValue(_iter_items(tx, args[0]) if args else [])


def _list(tx, args, kwargs):
    return ListValue(_iter_items(tx, args[0]) if args else [])


def _set(tx, args, kwargs):
    return SetValue(_iter_items(tx, args[0]) if args else [])


def _frozenset(tx, args, kwargs):
    return SetValue(_iter_items(tx, args[0]) if args else [], frozen=True)


def _dict(tx, args, kwargs):
    out = DictValue()
    if args:
        src = args[0]
        if isinstance(src, DictValue):
            out.entries = dict(src.entries)
        else:
            out.call_method(tx, "update", [src], {})
    for k, v in kwargs.items():
        out.entries[str_key(k)] = (const(k), v)
    return out


def _dict_subclass(cls):
    def handler(tx, args, kwargs):
        if cls is collections.defaultdict:
            factory = args[0] if args else NONE
            out = _dict(tx, args[1:], kwargs)
            out.default_factory = factory
        else:
            out = _dict(tx, args, kwargs)
        out.cls = cls
        return out
    return handler


def _sorted(tx, args, kwargs):
    from .containers import sort_values
    key = kwargs.get("key")
    rev = bool(kwargs.get("reverse", const(False)).as_constant())
    return ListValue(sort_values(tx, _iter_items(tx, args[0]), key, rev))


def _torch_size(tx, args, kwargs):
    _no_kwargs("torch.Size", kwargs)
    dims = [v.as_constant() for v in _iter_items(tx, args[0])] if args else []
    return const(torch.Size(dims))


def _slice(tx, args, kwargs):
    return SliceValue(list(args))


def _constant_fn(fn):
    def handler(tx, args, kwargs):
        if any(isinstance(a, TensorValue) for a in args):
            raise Unsupported(f"{fn.__module__ or ''}.{fn.__name__}() of a tensor reads its value",
                              kind="data_dependent", hint="use the torch equivalent")
        if not (all_constant(args) and all_constant(kwargs.values())):
            raise Unsupported(f"{getattr(fn, '__name__', fn)}() of non-constant arguments", kind="unsupported_builtin")
        try:
            out = fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
        except Exception as e:
            tx.raise_python_exception(e)
        from .builder import wrap_derived_constant
        return wrap_derived_constant(tx, out, getattr(fn, "__name__", "fn"))
    return handler


def _operator_binary(fn):
    def handler(tx, args, kwargs):
        return binary_op(tx, fn, args[0], args[1])
    return handler


def _operator_compare(op):
    def handler(tx, args, kwargs):
        return compare(tx, op, args[0], args[1])
    return handler


def _operator_unary(fn):
    def handler(tx, args, kwargs):
        return unary_op(tx, fn, args[0])
    return handler


def _divmod(tx, args, kwargs):
    a, b = args
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        # torch.Tensor defines neither __divmod__ nor __rdivmod__
        tx.raise_python_exception(TypeError(f"unsupported operand type(s) for divmod(): "
                                            f"'{a.type_name()}' and '{b.type_name()}'"))
    return TupleValue([binary_op(tx, operator.floordiv, a, b), binary_op(tx, operator.mod, a, b)])


def _pow(tx, args, kwargs):
    if len(args) == 2:
        return binary_op(tx, operator.pow, args[0], args[1])
    return _constant_fn(pow)(tx, args, kwargs)


def _round(tx, args, kwargs):
    if isinstance(args[0], TensorValue):
        # whatever ``Tensor.__round__`` does (or the TypeError if there is none), as Python would
        return graph_call(tx, "call_function", round, args, kwargs)
    return _constant_fn(round)(tx, args, kwargs)


def _getter(kind):
    def handler(tx, args, kwargs):
        from .functions import GetterValue
        if not args or kwargs or not all_constant(args):
            raise Unsupported(f"operator.{kind.__name__} with non-constant keys", kind="unsupported_call")
        keys = tuple(a.as_constant() for a in args)
        if kind is operator.attrgetter and not all(isinstance(k, str) for k in keys):
            tx.raise_python_exception(TypeError("attribute name must be a string"))
        return GetterValue(kind, keys)
    return handler


def _wraps(tx, args, kwargs):
    from .functions import WrapsValue
    if len(args) != 1 or kwargs:
        raise Unsupported("functools.wraps with assigned/updated arguments", kind="unsupported_call")
    return WrapsValue(args[0])


def _partial(tx, args, kwargs):
    from .functions import PartialValue
    return PartialValue(args[0], list(args[1:]), dict(kwargs))



class GradModeClassValue(ClassValue):
    """``torch.no_grad`` and friends as classes: calling one makes a :class:`GradModeValue`.

    ``torch.set_grad_enabled(b)`` called as a plain function (not in ``with``)
    takes effect at once.
    """

    __slots__ = ()

    def call(self, tx, args, kwargs):
        cls = self.cls
        if cls is torch.no_grad:
            return GradModeValue(False)
        if cls is torch.enable_grad:
            return GradModeValue(True)
        if cls is torch.set_grad_enabled:
            enabled = bool(args[0].as_constant())
            value = GradModeValue(enabled)
            # Like torch: the call itself switches the mode; ``with`` restores it.
            value.previous = torch.is_grad_enabled()
            tx.set_grad_mode(enabled)
            value.__class__ = SetGradEnabledValue
            return value
        raise Unsupported(f"{cls.__name__} inside a compiled function", kind="unsupported_context",
                          hint="inference_mode is not supported yet; use torch.no_grad()")


class SetGradEnabledValue(GradModeValue):
    """The object ``torch.set_grad_enabled(b)`` returns: already applied;
    ``__enter__`` does nothing more and ``__exit__`` restores."""

    __slots__ = ()

    def enter(self, tx):
        return NONE


def call_type(tx, cls: type, args, kwargs) -> Value:
    """Calling a class object that has no table entry."""
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return ExceptionValue(cls, list(args))
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        fields = cls._fields
        defaults = getattr(cls, "_field_defaults", {})
        if all_constant(args) and all_constant(kwargs.values()):
            return const(cls(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()}))
        items = list(args) + [None] * (len(fields) - len(args))
        for i, f in enumerate(fields):
            if f in kwargs:
                items[i] = kwargs[f]
            elif items[i] is None:
                if f not in defaults:
                    tx.raise_python_exception(TypeError(f"missing argument {f!r}"))
                items[i] = tx.wrap(defaults[f], None)
        return NamedTupleValue(items, cls)
    if isinstance(cls, type) and cls.__module__ not in ("builtins",) and (
            not cls.__module__.startswith("torch") or cls in (torch.nn.ModuleList, torch.nn.Sequential)):
        from .modules import construct_user_object
        return construct_user_object(tx, cls, list(args), dict(kwargs))
    raise Unsupported(f"constructing a {getattr(cls, '__qualname__', cls)} object", kind="unsupported_class_call",
                      hint="this class cannot be constructed inside compiled functions yet")


def _signature(tx, args, kwargs):
    """``inspect.signature(fn)`` of a function bytegraph knows: a constant mapping of its parameters."""
    from .functions import BoundMethodValue, UserFunctionValue
    fn = args[0]
    bound = isinstance(fn, BoundMethodValue)
    target = fn.func if bound else fn
    if not isinstance(target, UserFunctionValue):
        raise Unsupported(f"inspect.signature() of a {fn.type_name()}", kind="unsupported_builtin")
    sig = inspect.signature(target.fn)
    params = list(sig.parameters.values())[1 if bound else 0:]
    return SignatureValue(sig.replace(parameters=params))


class SignatureValue(ConstantValue):
    """An ``inspect.Signature`` computed at trace time (immutable)."""

    __slots__ = ()

    def get_attr(self, tx, name):
        if name == "parameters":
            sig = self.value
            return DictValue.from_pairs([(const(k), ConstantValue(p)) for k, p in sig.parameters.items()])
        return super().get_attr(tx, name)


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


def _copy(tx, args, kwargs):
    """``copy.copy`` of a container or an immutable value."""
    (v,) = args
    if v.is_constant() or type(v) is TupleValue:
        return v  # immutable: copy.copy returns the object itself
    if type(v) is ListValue:
        return ListValue(list(v.items))
    if type(v) is DictValue:
        return DictValue(dict(v.entries), cls=v.cls, default_factory=v.default_factory)
    if type(v) is SetValue and not v.frozen:
        return SetValue(list(v.elements.values()))
    raise Unsupported(f"copy.copy of a {v.type_name()}", kind="unsupported_call")


def _deepcopy(tx, args, kwargs):
    """``copy.deepcopy`` of nested lists, tuples and dicts of constants
    (aliasing inside the structure is kept, as deepcopy's memo does)."""
    memo = {}

    def rec(v):
        if v.is_constant():
            return v
        if id(v) in memo:
            return memo[id(v)]
        if type(v) is ListValue:
            out = memo[id(v)] = ListValue([])
            out.items = [rec(i) for i in v.items]
        elif type(v) is TupleValue:
            items = [rec(i) for i in v.items]
            # a tuple whose items all copy to themselves is returned as is
            out = memo[id(v)] = v if all(a is b for a, b in zip(items, v.items)) else TupleValue(items)
        elif type(v) is DictValue and v.default_factory is None:
            out = memo[id(v)] = DictValue(cls=v.cls)
            out.entries = {hk: (k, rec(item)) for hk, (k, item) in v.entries.items()}
        else:
            raise Unsupported(f"copy.deepcopy of a {v.type_name()}", kind="unsupported_call")
        return out

    if len(args) != 1 or kwargs:
        raise Unsupported("copy.deepcopy with a memo", kind="unsupported_call")
    return rec(args[0])


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


def _dataclass_replace(tx, args, kwargs):
    """``dataclasses.replace(obj, **changes)``: the class called again with obj's
    init fields, changed ones replaced (what ``replace`` does)."""
    if len(args) != 1:
        tx.raise_python_exception(TypeError("replace() takes 1 positional argument"))
    obj = args[0]
    cls = obj.python_type()
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        tx.raise_python_exception(TypeError("replace() should be called on dataclass instances"))
    all_fields = cls.__dataclass_fields__.values()
    if any(f._field_type is dataclasses._FIELD_INITVAR for f in all_fields):
        raise Unsupported("dataclasses.replace() of a dataclass with InitVar fields", kind="unsupported_call")
    init_kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            if f.name in kwargs:
                tx.raise_python_exception(ValueError(f"field {f.name} is declared with init=False, "
                                                     "it cannot be specified with replace()"))
            continue
        init_kwargs[f.name] = kwargs[f.name] if f.name in kwargs else obj.get_attr(tx, f.name)
    init_kwargs.update((k, v) for k, v in kwargs.items() if k not in init_kwargs)  # __init__ rejects them
    return call_type(tx, cls, [], init_kwargs)


def _graph_break(tx, args, kwargs):
    raise Unsupported("bytegraph.graph_break()", kind="explicit_graph_break",
                      hint="remove the call to capture across this point")


BUILTIN_HANDLERS: Dict[object, Handler] = {
    len: _len, isinstance: _isinstance, issubclass: _issubclass, range: _range,
    enumerate: _enumerate, zip: _zip, map: _map, filter: _filter, reversed: _reversed,
    iter: _iter, next: _next, min: _reduce_minmax(min), max: _reduce_minmax(max), sum: _sum,
    abs: _abs, any: _any_all(any), all: _any_all(all), getattr: _getattr, hasattr: _hasattr,
    setattr: _setattr, delattr: _delattr, callable: _callable, type: _type, print: _print,
    int: _scalar_type(int), float: _scalar_type(float), bool: _scalar_type(bool),
    str: _scalar_type(str), complex: _scalar_type(complex),
    tuple: _tuple, list: _list, set: _set, frozenset: _frozenset, dict: _dict, sorted: _sorted,
    slice: _slice, torch.Size: _torch_size, divmod: _divmod, pow: _pow, round: _round,
    repr: _constant_fn(repr), chr: _constant_fn(chr), ord: _constant_fn(ord), hash: _constant_fn(hash),
    format: _constant_fn(format),
    functools.partial: _partial, locals: locals_, vars: vars_, dir: dir_, super: super_,
    operator.itemgetter: _getter(operator.itemgetter), operator.attrgetter: _getter(operator.attrgetter),
    itertools.islice: _islice, itertools.chain: _chain, itertools.accumulate: _accumulate,
    dataclasses.replace: _dataclass_replace, functools.reduce: _reduce, functools.wraps: _wraps,
    copy.copy: _copy, copy.deepcopy: _deepcopy,
    collections.OrderedDict: _dict_subclass(collections.OrderedDict),
    collections.defaultdict: _dict_subclass(collections.defaultdict),
    itertools.product: _rearranging(itertools.product),
    itertools.combinations: _rearranging(itertools.combinations),
    itertools.permutations: _rearranging(itertools.permutations), id: id_, inspect.signature: _signature,
    operator.getitem: lambda tx, a, k: getitem(tx, a[0], a[1]),
    operator.setitem: lambda tx, a, k: (setitem(tx, a[0], a[1], a[2]), NONE)[1],
    operator.delitem: lambda tx, a, k: (delitem(tx, a[0], a[1]), NONE)[1],
    operator.contains: lambda tx, a, k: const(contains(tx, a[0], a[1])),
    operator.not_: lambda tx, a, k: const(not a[0].truth(tx)),
    operator.truth: lambda tx, a, k: const(a[0].truth(tx)),
    operator.is_: lambda tx, a, k: const(same_object(tx, a[0], a[1])),
    operator.is_not: lambda tx, a, k: const(not same_object(tx, a[0], a[1])),
    operator.neg: _operator_unary(operator.neg), operator.pos: _operator_unary(operator.pos),
    operator.invert: _operator_unary(operator.invert), operator.inv: _operator_unary(operator.inv),
    operator.abs: _abs,
    operator.index: _constant_fn(operator.index),
}
# Libraries ask these to pick compile-friendly code paths: answer as a
# torch.compile-style compiler would while tracing.
for _fn, _answer in ((torch.compiler.is_compiling, True), (torch.compiler.is_dynamo_compiling, True),
                     (torch.jit.is_tracing, False), (torch.jit.is_scripting, False),
                     (torch._C._get_tracing_state, None)):
    BUILTIN_HANDLERS[_fn] = (lambda answer: lambda tx, a, k: const(answer))(_answer)
BUILTIN_HANDLERS[sys.getrecursionlimit] = lambda tx, a, k: const(sys.getrecursionlimit())
for _fn in set(BINARY_OP_FUNCS):
    BUILTIN_HANDLERS[_fn] = _operator_binary(_fn)
for _op, _fn in COMPARE_FUNCS.items():
    BUILTIN_HANDLERS[_fn] = _operator_compare(_op)
for _name in dir(math):
    _obj = getattr(math, _name)
    if callable(_obj):
        BUILTIN_HANDLERS[_obj] = _constant_fn(_obj)


def _register_graph_break():
    from ..api import graph_break
    BUILTIN_HANDLERS[graph_break] = _graph_break


def builtin_handler(obj):
    """The handler for ``obj`` if it is a modelled builtin, else None."""
    if not _registered:
        _registered.append(True)
        _register_graph_break()
    try:
        return BUILTIN_HANDLERS.get(obj)
    except TypeError:  # unhashable
        return None


_registered: list = []

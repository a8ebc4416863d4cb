"""Builtins, ``operator`` and ``math`` functions, and builtin types, as tables.

Each entry maps a real function (or type) to a handler ``(tx, args, kwargs)
-> Value``.  :func:`builtin_handler` is how the builder finds them; builtins
not in the table are unsupported (``print`` with a kind of its own).
"""

from __future__ import annotations

import builtins
import collections
import copy
import dataclasses
import functools
import inspect
import sys
import traceback
import types
import typing
import warnings
import math
import operator
from typing import Callable, Dict, List

import torch

from ..errors import Unsupported, UserException
from ..sources import ObjectSource
from .base import Value, all_constant
from .constants import NONE, ConstantValue, const, is_none
from .containers import (BaseListValue, DictValue, DictViewValue, ListValue, NamedTupleValue,
                         RangeValue, SetValue, SliceValue, TupleValue)
from .sets import snapshot
from .builtins_iteration import ITERATION_HANDLERS, _iter_items
from .call_errors import raise_signature_error
from .itertools_more import MORE_ITERTOOLS_HANDLERS
from .deques import construct_deque
from .counters import COUNTER_HANDLERS
from .builtins_isinstance import _isinstance, _issubclass
from .frame_builtins import dir_, id_, locals_, super_, vars_
from .exceptions import ExceptionValue, TracebackValue, construct_exception
from . import user_operators
from .copying import copy_handler, deepcopy_handler
from .object_protocol import new_object
from .warnings_calls import warn_handler
from .objects import ClassValue, GradModeValue
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
    if isinstance(v, SetValue):
        return const(len(v.elements))
    if isinstance(v, (BaseListValue, DictValue, DictViewValue)):
        return const(len(v.unpack(tx)) if not isinstance(v, DictValue) else len(v.entries))
    if v.is_constant():
        try:
            return const(len(v.as_constant()))
        except TypeError as e:
            tx.raise_python_exception(e)
    from .modules import NewObjectValue
    from .objects import NO_ATTR, UserObjectValue, checked_len, special_lookup
    if isinstance(v, (UserObjectValue, NewObjectValue)):
        # looked up on the type, and the result checked, as len() does
        cls = v.python_type()
        method = v.dunder(tx, "__len__") if isinstance(v, UserObjectValue) else v._dunder(tx, "__len__")
        if method is None:
            if special_lookup(cls, "__len__") is NO_ATTR:
                tx.raise_python_exception(TypeError(f"object of type '{cls.__name__}' has no len()"))
            raise Unsupported(f"len() of a {cls.__name__} (its __len__ is not a Python function)",
                              kind="unsupported_builtin")
        return checked_len(tx, method.call(tx, [], {}))
    return v.get_attr(tx, "__len__").call(tx, [], {})


def _range(tx, args, kwargs):
    _no_kwargs("range", kwargs)
    return RangeValue(range(*[a.as_constant() for a in args]))


def _abs(tx, args, kwargs):
    return unary_op(tx, abs, args[0]) if not isinstance(args[0], TensorValue) else \
        graph_call(tx, "call_function", torch.abs, args, {})


def _attr_name(tx, v: Value) -> str:
    """The attribute name ``v`` given to getattr/hasattr/setattr/delattr, or
    CPython's TypeError for a name that is not a string."""
    if not v.is_constant():
        try:
            t = v.python_type()
        except NotImplementedError:
            t = str
        if not issubclass(t, str):
            tx.raise_python_exception(TypeError(f"attribute name must be string, not '{t.__name__}'"))
        raise Unsupported("an attribute name that is not a constant", kind="unsupported_builtin")
    name = v.as_constant()
    if type(name) is str:
        return name
    if isinstance(name, str):
        # a str subclass: its own __eq__/__hash__ take part in the lookup
        raise Unsupported("an attribute name of a str subclass", kind="unsupported_builtin")
    tx.raise_python_exception(TypeError(f"attribute name must be string, not '{type(name).__name__}'"))


def _getattr(tx, args, kwargs):
    obj, name = args[0], _attr_name(tx, args[1])
    if len(args) == 3:
        try:
            return obj.get_attr(tx, name)
        except UserException as e:
            if issubclass(e.value.python_type(), AttributeError):
                return args[2]
            raise
    return obj.get_attr(tx, name)


def _hasattr(tx, args, kwargs):
    obj, name = args[0], _attr_name(tx, args[1])
    try:
        obj.get_attr(tx, name)
    except UserException as e:
        if issubclass(e.value.python_type(), AttributeError):
            return const(False)
        raise
    return const(True)


def _setattr(tx, args, kwargs):
    args[0].set_attr(tx, _attr_name(tx, args[1]), args[2])
    return NONE


def _delattr(tx, args, kwargs):
    args[0].del_attr(tx, _attr_name(tx, args[1]))
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
        if args and fn in (float, int) and len(args) == 1 and not kwargs and hasattr(args[0], "to_python"):
            return args[0].to_python(tx, fn.__name__)  # a NumPy array or scalar of the graph (values.ndarrays)
        if args and isinstance(args[0], TensorValue):
            if fn in (float, int, bool) and len(args) == 1 and not kwargs:
                from .scalar_outputs import tensor_to_python
                return tensor_to_python(tx, args[0], fn.__name__)
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
        if fn is str and len(args) == 1 and not kwargs and isinstance(args[0], ExceptionValue):
            return args[0].text(tx, str)
        if fn is str and len(args) == 1:
            raise Unsupported(f"str() of a {args[0].type_name()}", kind="unsupported_builtin")
        what = args[0] if args else next(v for v in kwargs.values() if not v.is_constant())
        raise Unsupported(f"{fn.__name__}() of a {what.type_name()}", kind="unsupported_builtin")
    return handler


def _tuple(tx, args, kwargs):
    from .objects import length_hint
    if len(args) == 1 and not kwargs and type(args[0]) is TupleValue:
        return args[0]  # tuple(t) of an exact tuple is t itself
    if args:
        length_hint(tx, args[0])
    return TupleValue(_iter_items(tx, args[0]) if args else [])


def _list(tx, args, kwargs):
    from .objects import length_hint
    if args:
        length_hint(tx, args[0])
    return ListValue(_iter_items(tx, args[0]) if args else [])


def _new_set(tx, args, frozen: bool) -> SetValue:
    cls = frozenset if frozen else set
    if not args:
        return SetValue([], frozen=frozen)
    src = args[0]
    if isinstance(src, (SetValue, DictValue, DictViewValue)):
        # CPython merges a set or dict source (table sized first): the recipe
        # calls the constructor on it
        out = SetValue(_iter_items(tx, src), frozen=frozen)
        operand = snapshot(tx, src)
        out.recipe = None if operand is None else [("call", cls, operand)]
        return out
    return SetValue(_iter_items(tx, src), frozen=frozen)  # added item by item


def _set(tx, args, kwargs):
    return _new_set(tx, args, frozen=False)


def _frozenset(tx, args, kwargs):
    if len(args) == 1 and type(args[0]) is SetValue and args[0].frozen:
        return args[0]  # frozenset(f) is f for an exact frozenset, as in CPython
    return _new_set(tx, args, frozen=True)


def _dict(tx, args, kwargs, cls=dict):
    """``dict(...)``/``OrderedDict(...)``: an update of a new empty one (its
    own update rules: ``OrderedDict``'s differ in their errors)."""
    from .dict_methods import update_from
    if len(args) > 1:
        try:
            cls(*[None] * len(args))
        except TypeError as e:
            tx.raise_python_exception(e)
    out = DictValue(cls=cls)
    if args:
        update_from(tx, out, args[0], ordered_rules=cls is collections.OrderedDict)
    for k, v in kwargs.items():
        out.put(const(k), v)
    return out


def _dict_fromkeys(tx, args, kwargs):
    """``dict.fromkeys(iterable, value=None)``: ``d[key] = value`` for each
    key in iteration order (every key shares the one value object)."""
    if kwargs or not 1 <= len(args) <= 2:
        try:
            dict.fromkeys(*[()] * len(args), **{k: None for k in kwargs})
        except TypeError as e:
            tx.raise_python_exception(e)
    if type(args[0]) is SetValue:
        # (a set's iteration order is its hash table's)
        raise Unsupported("dict.fromkeys of a set", kind="unsupported_call")
    value = args[1] if len(args) == 2 else NONE
    out = DictValue()
    for key in _iter_items(tx, args[0]):
        setitem(tx, out, key, value)
    return out


def _dict_subclass(cls):
    def handler(tx, args, kwargs):
        if cls is collections.defaultdict:
            factory = args[0] if args else NONE
            if not _callable(tx, [factory], {}).as_constant() and not is_none(factory):
                tx.raise_python_exception(TypeError("first argument must be callable or None"))
            out = _dict(tx, args[1:], kwargs)
            out.cls, out.default_factory = cls, factory
            return out
        return _dict(tx, args, kwargs, cls)
    return handler


def _sorted(tx, args, kwargs):
    from .containers import sort_values
    key = kwargs.get("key")
    rev = bool(kwargs.get("reverse", const(False)).as_constant())
    src = args[0]
    if type(src) is SetValue and key is None and all(v.is_constant() for v in src.elements.values()):
        # distinct constants sort the same whatever order they come in
        return ListValue(sort_values(tx, list(src.elements.values()), None, rev))
    return ListValue(sort_values(tx, _iter_items(tx, src), key, rev))


def _torch_size(tx, args, kwargs):
    _no_kwargs("torch.Size", kwargs)
    dims = [v.as_constant() for v in _iter_items(tx, args[0])] if args else []
    return const(torch.Size(dims))


def _slice(tx, args, kwargs):
    return SliceValue(list(args))


def _constant_fn(fn):
    def handler(tx, args, kwargs):
        if fn is repr and len(args) == 1 and not kwargs and isinstance(args[0], ExceptionValue):
            return args[0].text(tx, repr)
        if any(isinstance(a, TensorValue) for a in args):
            raise Unsupported(f"{fn.__module__ or ''}.{fn.__name__}() of a tensor reads its value",
                              kind="data_dependent", hint="use the torch equivalent")
        if not (all_constant(args) and all_constant(kwargs.values())):
            raise Unsupported(f"{getattr(fn, '__name__', fn)}() of non-constant arguments", kind="unsupported_builtin")
        from .numpy_values import fold_call
        out = fold_call(tx, fn, [a.as_constant() for a in args], {k: v.as_constant() for k, v in kwargs.items()})
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
    if user_operators.handles_binary(a, b):
        # a user class's own __divmod__/__rdivmod__, never its // and %
        return user_operators.user_binary_op(tx, divmod, divmod, a, b)
    if not all(v.python_type() in (int, float, bool) for v in (a, b)):
        raise Unsupported(f"divmod() of {a.type_name()} and {b.type_name()}", kind="unsupported_operator")
    # for ints and floats divmod(a, b) == (a // b, a % b), computed by one algorithm in CPython
    return TupleValue([binary_op(tx, operator.floordiv, a, b), binary_op(tx, operator.mod, a, b)])


def _pow(tx, args, kwargs):
    if len(args) == 2 and not kwargs:
        return binary_op(tx, operator.pow, args[0], args[1])
    return _constant_fn(pow)(tx, args, kwargs)


def _round(tx, args, kwargs):
    if "number" in kwargs:
        if args:
            raise_signature_error(tx, round, args, kwargs)   # given by name and position
        kwargs = dict(kwargs)
        args = [kwargs.pop("number")]
    if not args:
        raise_signature_error(tx, round, args, kwargs)
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
    if not args:
        tx.raise_python_exception(TypeError("type 'partial' takes at least one argument"))
    func = args[0]
    if type(func) is PartialValue:
        # partial(partial(f, a), b) is partial(f, a, b) (CPython flattens one
        # whose instance dict was never made; a traced one has none)
        if func.source is None and not func.exposed:
            return PartialValue(func.func, func.args + list(args[1:]), {**func._kwargs(), **kwargs})
        return PartialValue(func, list(args[1:]), dict(kwargs), opaque_parts=True)
    return PartialValue(func, list(args[1:]), dict(kwargs))


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


def _namedtuple_new(cls):
    """The ``__new__`` that ``collections.namedtuple`` generated, when calling
    ``cls`` runs just it (no ``__new__`` or ``__init__`` of a subclass, no
    metaclass ``__call__``); else None."""
    if type(cls) is not type or not issubclass(cls, tuple) or not hasattr(cls, "_fields"):
        return None
    new = cls.__new__
    if not isinstance(new, types.FunctionType) or cls.__init__ is not object.__init__:
        return None
    g = new.__globals__
    if g.get("_tuple_new") is not tuple.__new__ or not str(g.get("__name__", "")).startswith("namedtuple_"):
        return None
    return new


def _numpy_type_info(tx, cls, args, kwargs):
    """``np.dtype(...)``, ``np.finfo(...)``, ``np.iinfo(...)``, ``np.float32(...)`` of constants:
    pure functions of their argument (numpy caches the info objects), so
    computed now.  None when ``cls`` is none of them."""
    from .builder import is_numpy_scalar
    np = sys.modules.get("numpy")
    if np is None:
        return None
    scalar_type = isinstance(cls, type) and issubclass(cls, (np.number, np.bool_)) and cls.__module__ == "numpy"
    if cls not in (np.dtype, np.finfo, np.iinfo) and not scalar_type:
        return None
    if not all(v.is_constant() for v in list(args) + list(kwargs.values())):
        raise Unsupported(f"np.{cls.__name__} of values that are not constants", kind="unsupported_class_call")
    try:
        obj = cls(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
    except (TypeError, ValueError) as e:
        tx.raise_python_exception(e)
    except Exception as e:
        raise Unsupported(f"np.{cls.__name__}() raised {type(e).__name__}", kind="unsupported_class_call")
    if cls is np.dtype or scalar_type:
        if scalar_type and not is_numpy_scalar(obj):
            raise Unsupported(f"np.{cls.__name__}() made an array", kind="unsupported_class_call")
        return ConstantValue(obj)  # (immutable)
    # the info object itself (numpy's cached one): attribute reads are guarded on it
    return tx.wrap(obj, ObjectSource(obj, f"np.{cls.__name__}({obj.dtype})"))


def call_type(tx, cls: type, args, kwargs) -> Value:
    """Calling a class object that has no table entry."""
    if isinstance(cls, type) and type(cls) is not type:
        from .objects import special_lookup
        if special_lookup(type(cls), "__call__") is not type.__dict__["__call__"]:
            # calling the class runs the metaclass's __call__ (which may never
            # make an instance the usual way): not modelled
            raise Unsupported(f"calling {cls.__qualname__}, whose metaclass {type(cls).__qualname__} has its own "
                              "__call__", kind="unsupported_class_call")
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return construct_exception(tx, cls, list(args), dict(kwargs))
    if cls in (staticmethod, classmethod, property):
        from .class_build import wrap_descriptor
        wrapped = wrap_descriptor(tx, cls, list(args), dict(kwargs))
        if wrapped is not None:
            return wrapped
    new = _namedtuple_new(cls)
    if new is not None:
        # a new tuple each call (never a constant: ``NT(1, 2) is NT(1, 2)`` is
        # False), its arguments bound by the generated ``__new__``'s own
        # signature (its errors, its defaults)
        from .functions import UserFunctionValue
        bound = UserFunctionValue(new).bind(tx, [ClassValue(cls)] + list(args), dict(kwargs))
        return NamedTupleValue([bound[f] for f in cls._fields], cls)
    folded = _numpy_type_info(tx, cls, args, kwargs)
    if folded is not None:
        return folded
    # (the class's own __module__: a metaclass may shadow it with a property)
    module = type.__dict__["__module__"].__get__(cls) if isinstance(cls, type) else None
    if isinstance(module, str) and module != "builtins" and (
            not module.startswith("torch") or cls is torch.nn.ModuleList or cls is torch.nn.Sequential
            or module == "torch.utils._pytree"):  # (TreeSpec & co: plain Python dataclasses)
        from .modules import construct_user_object
        return construct_user_object(tx, cls, list(args), dict(kwargs))
    from .fresh_modules import construct_fresh_module, is_torch_module_class
    if is_torch_module_class(cls):
        return construct_fresh_module(tx, cls, list(args), dict(kwargs))
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


def _replace_init_false_error() -> type:
    """The exception ``dataclasses.replace`` raises for a change of an
    ``init=False`` field: ValueError up to 3.12, TypeError from 3.13 (asked
    of the running interpreter once)."""
    @dataclasses.dataclass
    class Probe:
        a: int = dataclasses.field(default=0, init=False)
    try:
        dataclasses.replace(Probe(), a=1)
    except Exception as e:  # noqa: BLE001 - its type is the answer
        return type(e)
    return ValueError


_REPLACE_INIT_FALSE_ERROR = _replace_init_false_error()


def _dataclass_replace(tx, args, kwargs):
    """``dataclasses.replace(obj, **changes)``: the class called again with obj's
    init fields, changed ones replaced (what ``replace`` does)."""
    if len(args) != 1:
        raise_signature_error(tx, dataclasses.replace, args, kwargs)  # its own binding error
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
                tx.raise_python_exception(_REPLACE_INIT_FALSE_ERROR(
                    f"field {f.name} is declared with init=False, it cannot be specified with replace()"))
            continue
        init_kwargs[f.name] = kwargs[f.name] if f.name in kwargs else obj.get_attr(tx, f.name)
    init_kwargs.update((k, v) for k, v in kwargs.items() if k not in init_kwargs)  # __init__ rejects them
    return call_type(tx, cls, [], init_kwargs)


def _clear_frames(tx, args, kwargs):
    """``traceback.clear_frames(tb)`` of a traceback made in the trace: its frames
    are inlined calls (they do not exist) or running frames, which it skips."""
    if len(args) == 1 and not kwargs and (isinstance(args[0], TracebackValue) or is_none(args[0])):
        return NONE
    if len(args) == 1 and not kwargs and args[0].source is not None and \
            args[0].python_type() is types.TracebackType:
        # a traceback from native code: the frames it clears have finished
        # (running ones are skipped), so nothing the trace runs can see the
        # difference; the call runs after the graph
        tx.side_effects.defer_call(traceback.clear_frames, args)
        return NONE
    raise Unsupported(f"traceback.clear_frames() of a {args[0].type_name() if args else 'missing'} argument",
                      kind="unsupported_builtin")


def _graph_break(tx, args, kwargs):
    raise Unsupported("an explicit graph_break() call", kind="explicit_graph_break",
                      hint="remove the call to capture across this point")


BUILTIN_HANDLERS: Dict[object, Handler] = {
    len: _len, isinstance: _isinstance, issubclass: _issubclass, range: _range,
    abs: _abs, getattr: _getattr, hasattr: _hasattr,
    setattr: _setattr, delattr: _delattr, callable: _callable, type: _type, print: _print,
    int: _scalar_type(int), float: _scalar_type(float), bool: _scalar_type(bool),
    str: _scalar_type(str), complex: _scalar_type(complex),
    tuple: _tuple, list: _list, set: _set, frozenset: _frozenset, dict: _dict, sorted: _sorted,
    slice: _slice, torch.Size: _torch_size, divmod: _divmod, pow: _pow, round: _round,
    repr: _constant_fn(repr), chr: _constant_fn(chr), ord: _constant_fn(ord), hash: _constant_fn(hash),
    format: _constant_fn(format),
    functools.partial: _partial, locals: locals_, vars: vars_, dir: dir_, super: super_,
    operator.itemgetter: _getter(operator.itemgetter), operator.attrgetter: _getter(operator.attrgetter),
    dataclasses.replace: _dataclass_replace, functools.wraps: _wraps,
    copy.copy: copy_handler, copy.deepcopy: deepcopy_handler, traceback.clear_frames: _clear_frames,
    collections.OrderedDict: _dict_subclass(collections.OrderedDict),
    collections.defaultdict: _dict_subclass(collections.defaultdict),
    id: id_, inspect.signature: _signature,
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
    dict.fromkeys: _dict_fromkeys,
}
BUILTIN_HANDLERS.update(ITERATION_HANDLERS)
BUILTIN_HANDLERS.update(MORE_ITERTOOLS_HANDLERS)
BUILTIN_HANDLERS[collections.deque] = lambda tx, args, kwargs: construct_deque(tx, args, kwargs)
BUILTIN_HANDLERS.update(COUNTER_HANDLERS)
BUILTIN_HANDLERS[object.__new__] = new_object
BUILTIN_HANDLERS[warnings.warn] = warn_handler
BUILTIN_HANDLERS[collections.namedtuple] = lambda tx, a, k: __import__(
    "bytegraph.values.class_build", fromlist=["namedtuple_call"]).namedtuple_call(tx, a, k)
BUILTIN_HANDLERS[typing.NamedTuple] = lambda tx, a, k: __import__(
    "bytegraph.values.class_build", fromlist=["typed_named_tuple_call"]).typed_named_tuple_call(tx, a, k)
BUILTIN_HANDLERS[builtins.__build_class__] = lambda tx, a, k: __import__(
    "bytegraph.values.class_build", fromlist=["build_class"]).build_class(tx, a, k)


def _checking_arity(fn, n_min: int, n_max: int, keywords=(), pos_max=None):
    """``BUILTIN_HANDLERS[fn]`` behind CPython's TypeError for a wrong number of
    arguments or an unknown keyword (handlers may then unpack ``args``)."""
    handler = BUILTIN_HANDLERS[fn]

    def checked(tx, args, kwargs):
        given = len(args) + len(kwargs)
        if not n_min <= given <= n_max or any(k not in keywords for k in kwargs) or \
                len(args) > (n_max if pos_max is None else pos_max):
            # CPython checks the count before anything else: its own message
            raise_signature_error(tx, fn, args, kwargs)
        return handler(tx, args, kwargs)
    BUILTIN_HANDLERS[fn] = checked


for _fn, _n_min, _n_max, _kw in ((getattr, 2, 3, ()), (hasattr, 2, 2, ()), (setattr, 3, 3, ()),
                                 (delattr, 2, 2, ()), (divmod, 2, 2, ()), (round, 1, 2, ("number", "ndigits")),
                                 (sum, 1, 2, ("start",)), (len, 1, 1, ()), (isinstance, 2, 2, ()),
                                 (issubclass, 2, 2, ()), (abs, 1, 1, ()), (callable, 1, 1, ()),
                                 (sorted, 1, 3, ("key", "reverse"))):
    _checking_arity(_fn, _n_min, _n_max, _kw, pos_max=1 if _fn is sorted else None)
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
# Alternate constructors of exact immutable builtin types: functions of their
# arguments only (bound methods hash and compare by their type, no user code)
for _cls, _name in ((float, "fromhex"), (int, "from_bytes"), (bytes, "fromhex"), (str, "maketrans"),
                    (bytes, "maketrans")):
    BUILTIN_HANDLERS[getattr(_cls, _name)] = _constant_fn(getattr(_cls, _name))
for _name in dir(math):
    _obj = getattr(math, _name)
    if callable(_obj):
        BUILTIN_HANDLERS[_obj] = _constant_fn(_obj)


def _register_graph_break():
    # bytegraph's own markers (decorators.py); torch's are recognised by the builder
    from ..decorators import graph_break, is_compiling
    BUILTIN_HANDLERS[graph_break] = _graph_break
    BUILTIN_HANDLERS[is_compiling] = lambda tx, a, k: const(True)


def torch_graph_break_handler(obj):
    """The handler of ``torch._dynamo.graph_break`` when ``obj`` is it (looked up
    only when the program imported torch._dynamo), else None."""
    decorators = sys.modules.get("torch._dynamo.decorators")
    if decorators is not None and obj is getattr(decorators, "graph_break", None):
        return _graph_break
    return None


def builtin_handler(obj):
    """The handler for ``obj`` if it is a modelled builtin, else None."""
    if not _registered:
        _registered.append(True)
        _register_graph_break()
    # Only functions and plain classes can be table keys; looking anything
    # else up would hash it, which may run a user's __hash__ at trace time.
    t = type(obj)
    if t in (types.WrapperDescriptorType, types.MethodDescriptorType):
        from .object_protocol import OBJECT_SLOT_HANDLERS
        return OBJECT_SLOT_HANDLERS.get(obj)
    if not (t in (types.BuiltinFunctionType, types.FunctionType) or t is type):
        return None
    handler = BUILTIN_HANDLERS.get(obj)
    if handler is None and t is types.FunctionType and obj.__name__ == "graph_break":
        # torch's own graph_break() (torch._dynamo is never imported here: a
        # program that calls it has imported it)
        decorators = sys.modules.get("torch._dynamo.decorators")
        if decorators is not None and obj is getattr(decorators, "graph_break", None):
            return _graph_break
    return handler


_registered: list = []

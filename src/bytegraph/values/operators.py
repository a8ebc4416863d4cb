"""Python operators on values: binary/unary arithmetic, comparisons,
identity, containment and subscripts, dispatched by operand kinds."""

from __future__ import annotations

import dis
import math
import operator
from typing import Callable

from .. import config
from ..errors import Unsupported
from .base import Value
from .constants import ConstantValue, const, is_none
from .containers import (BaseListValue, DictValue, DictViewValue, ListValue, RangeValue, SetValue,
                         TupleValue)
from .ndarrays import NdarrayValue, numpy_operator
from .symbolic import SymIntValue
from .tensors import TensorValue, _to_node, graph_call
from .user_operators import (BINARY_DUNDERS, UNARY_DUNDERS, handles_binary, handles_compare, is_pure_python_instance,
                             user_binary_op, user_compare, user_unary_op)

_NB_FUNCS = {
    "NB_ADD": operator.add, "NB_AND": operator.and_, "NB_FLOOR_DIVIDE": operator.floordiv,
    "NB_LSHIFT": operator.lshift, "NB_MATRIX_MULTIPLY": operator.matmul, "NB_MULTIPLY": operator.mul,
    "NB_REMAINDER": operator.mod, "NB_OR": operator.or_, "NB_POWER": operator.pow,
    "NB_RSHIFT": operator.rshift, "NB_SUBTRACT": operator.sub, "NB_TRUE_DIVIDE": operator.truediv,
    "NB_XOR": operator.xor,
    "NB_INPLACE_ADD": operator.iadd, "NB_INPLACE_AND": operator.iand,
    "NB_INPLACE_FLOOR_DIVIDE": operator.ifloordiv, "NB_INPLACE_LSHIFT": operator.ilshift,
    "NB_INPLACE_MATRIX_MULTIPLY": operator.imatmul, "NB_INPLACE_MULTIPLY": operator.imul,
    "NB_INPLACE_REMAINDER": operator.imod, "NB_INPLACE_OR": operator.ior,
    "NB_INPLACE_POWER": operator.ipow, "NB_INPLACE_RSHIFT": operator.irshift,
    "NB_INPLACE_SUBTRACT": operator.isub, "NB_INPLACE_TRUE_DIVIDE": operator.itruediv,
    "NB_INPLACE_XOR": operator.ixor,
}

#: BINARY_OP's argument -> operator function (the numbering is CPython's, read from ``dis``).
BINARY_OP_FUNCS = [_NB_FUNCS[name] for name, _ in dis._nb_ops]

COMPARE_FUNCS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
                 ">": operator.gt, ">=": operator.ge}

_INPLACE_TO_PLAIN = {
    operator.iadd: operator.add, operator.iand: operator.and_, operator.ifloordiv: operator.floordiv,
    operator.ilshift: operator.lshift, operator.imatmul: operator.matmul, operator.imul: operator.mul,
    operator.imod: operator.mod, operator.ior: operator.or_, operator.ipow: operator.pow,
    operator.irshift: operator.rshift, operator.isub: operator.sub, operator.itruediv: operator.truediv,
    operator.ixor: operator.xor,
}


# ``x op= y`` on a tensor ``x`` is the in-place method (``Tensor.__iadd__`` is ``add_``):
# recorded under that name, the node mutates ``x`` and is kept even if unused.
_TENSOR_INPLACE_METHODS = {
    operator.iadd: "add_", operator.isub: "sub_", operator.imul: "mul_", operator.itruediv: "div_",
    operator.ifloordiv: "floor_divide_", operator.imod: "remainder_", operator.ipow: "pow_",
    operator.iand: "bitwise_and_", operator.ior: "bitwise_or_", operator.ixor: "bitwise_xor_",
    operator.ilshift: "bitwise_left_shift_", operator.irshift: "bitwise_right_shift_",
}


def _is_one(v: Value) -> bool:
    return v.is_constant() and type(v.as_constant()) in (int, bool) and v.as_constant() == 1


def _fold(tx, fn: Callable, *values: Value) -> Value:
    from .numpy_values import fold_call
    out = fold_call(tx, fn, [v.as_constant() for v in values], {})
    from .builder import wrap_derived_constant
    return wrap_derived_constant(tx, out, getattr(fn, "__name__", "op"))


def _repeat(tx, seq, n) -> list:
    """``seq.items * n`` with the errors Python gives for a bad ``n``."""
    try:
        count = operator.index(n)
    except TypeError:
        try:
            seq.python_type()() * n
        except TypeError as e:
            tx.raise_python_exception(e)
        raise Unsupported("sequence repetition by a non-int", kind="unsupported_operator")
    # (beyond config.max_constant_items the repetition runs natively, where a
    # huge one raises MemoryError as eager does)
    if count > 0 and len(seq.items) * count > config.max_constant_items:
        raise Unsupported(f"repeating a sequence of {len(seq.items)} items {count} times",
                          kind="large_container", hint="it runs natively; config.max_constant_items sets the limit")
    return seq.items * count


def _repeated(tx, seq, n) -> Value:
    items = _repeat(tx, seq, n)
    if isinstance(seq, ListValue):
        return ListValue(items)
    if type(seq) is TupleValue and items == seq.items and operator.index(n) == 1:
        return seq  # an exact tuple times one is the tuple itself in CPython
    return TupleValue(items)


_SET_BINOPS = {operator.or_: "or", operator.and_: "and", operator.sub: "sub", operator.xor: "xor"}


def _graph_value(v) -> bool:
    return isinstance(v, (TensorValue, SymIntValue))


def _plain_bool(v: Value) -> Value:
    """A symbolic bool as the constant it is now (guarded), for Python operators.

    The shape environment cannot reason about a bool compared or combined with
    numbers (sympy rejects ``Eq(s0 < 0, True)``), and such bools only steer
    Python code, so specializing them costs no capture."""
    if isinstance(v, SymIntValue) and v.python_type() is bool:
        return const(v.as_constant())
    return v


def _number_operands(a: Value, b: Value):
    """Operands of a Python operator with symbolic numbers made sympy-safe.

    A symbolic bool becomes its constant (``_plain_bool``), and a constant
    bool meeting a symbolic number becomes the int it counts as (``True <
    s0`` is ``1 < s0``), which sympy cannot take as a bool."""
    a, b = _plain_bool(a), _plain_bool(b)
    if isinstance(a, SymIntValue) or isinstance(b, SymIntValue):
        a, b = (const(int(v.as_constant())) if isinstance(v, ConstantValue) and type(v.as_constant()) is bool
                else v for v in (a, b))
        if not all(isinstance(v, SymIntValue) or _sympy_number(v) for v in (a, b)):
            # sympy answers ``Eq(s0, 42+0j)`` with False and rejects NaN, and
            # other objects have their own operators: the symbolic number meets
            # them as the Python number it is now (guarded)
            a, b = (const(v.as_constant()) if isinstance(v, SymIntValue) else v for v in (a, b))
    return a, b


def _sympy_number(v: Value) -> bool:
    """A constant the shape environment compares and combines exactly like Python: an
    int, or a finite float."""
    if not isinstance(v, ConstantValue):
        return False
    x = v.as_constant()
    return type(x) is int or type(x) is float and math.isfinite(x)


def binary_op(tx, fn: Callable, a: Value, b: Value) -> Value:
    """``fn(a, b)`` for an ``operator`` function (``operator.add``, ``operator.iadd``, ...)."""
    if isinstance(a, NdarrayValue) or isinstance(b, NdarrayValue):
        return numpy_operator(tx, fn.__name__, a, b)
    if handles_binary(a, b) and _INPLACE_TO_PLAIN.get(fn, fn) in BINARY_DUNDERS:
        return user_binary_op(tx, fn, _INPLACE_TO_PLAIN.get(fn, fn), a, b)
    if not (isinstance(a, TensorValue) or isinstance(b, TensorValue)):
        a, b = _number_operands(a, b)
    if (isinstance(a, SymIntValue) or isinstance(b, SymIntValue)) and not (
            isinstance(a, TensorValue) or isinstance(b, TensorValue)):
        if not (_graph_value(a) or a.is_constant()) or not (_graph_value(b) or b.is_constant()):
            raise Unsupported(f"operator {fn.__name__} on {a.type_name()} and {b.type_name()}",
                              kind="unsupported_operator")
        return graph_call(tx, "call_function", _INPLACE_TO_PLAIN.get(fn, fn), [a, b], {})
    if isinstance(a, TensorValue) and fn in _TENSOR_INPLACE_METHODS:
        return graph_call(tx, "call_method", _TENSOR_INPLACE_METHODS[fn], [a, b], {})
    if isinstance(a, TensorValue):
        return graph_call(tx, "call_function", fn, [a, b], {})
    if isinstance(b, TensorValue) and (a.is_constant() or _graph_value(a)):
        # ``n += t`` with a number on the left: numbers have no in-place
        # operators, so Python computes ``n + t`` (t.__radd__)
        return graph_call(tx, "call_function", _INPLACE_TO_PLAIN.get(fn, fn), [a, b], {})
    if a.is_constant() and b.is_constant() and not isinstance(a, RangeValue) and not isinstance(b, RangeValue):
        return _fold(tx, fn, a, b)
    plain = _INPLACE_TO_PLAIN.get(fn, fn)
    if isinstance(a, ListValue) and fn is operator.iadd:
        a.call_method(tx, "extend", [b], {})
        return a
    if isinstance(a, ListValue) and fn is operator.imul and b.is_constant():
        items = _repeat(tx, a, b.as_constant())
        tx.side_effects.mutate(a)
        a.items = items
        return a
    if isinstance(a, TupleValue) and plain is operator.add and (
            isinstance(b, TupleValue) or b.is_constant() and isinstance(b.as_constant(), tuple)):
        # tuple-like + tuple-like: torch.Size on the left stays a torch.Size, as in Python
        from .tensors import SizeValue
        items = a.items + (b.items if isinstance(b, TupleValue) else b.unpack(tx))
        if isinstance(a, SizeValue):
            return SizeValue(items)
        if type(a) in (TupleValue,) or isinstance(a, TupleValue) and a.python_type() is tuple:
            return TupleValue(items)
    if isinstance(a, BaseListValue) and plain is operator.add:
        if type(a) is type(b) or (isinstance(b, BaseListValue) and type(b).python_type(b) is a.python_type()):
            return type(a)(a.items + b.items) if type(a) in (TupleValue, ListValue) else TupleValue(a.items + b.items)
        if isinstance(a, TupleValue) and b.is_constant() and isinstance(b.as_constant(), tuple):
            return TupleValue(a.items + b.unpack(tx))
    if isinstance(b, TupleValue) and plain is operator.add and a.is_constant() and isinstance(a.as_constant(), tuple):
        return TupleValue(a.unpack(tx) + b.items)
    if plain is operator.mul and (type(a) is TupleValue and _is_one(b) or type(b) is TupleValue and _is_one(a)):
        return a if type(a) is TupleValue else b  # an exact tuple times 1 is that tuple
    if isinstance(a, BaseListValue) and plain is operator.mul and b.is_constant():
        return _repeated(tx, a, b.as_constant())
    if isinstance(b, BaseListValue) and plain is operator.mul and a.is_constant():
        return _repeated(tx, b, a.as_constant())
    if isinstance(a, DictValue) and isinstance(b, DictValue):
        from .counters import counter_binary
        out = counter_binary(tx, fn, plain, a, b)
        if out is not None:
            return out
    if isinstance(a, DictValue) and isinstance(b, DictValue) and plain is operator.or_:
        if fn is operator.ior:
            a.call_method(tx, "update", [b], {})  # dict's |= and OrderedDict's are an update
            return a
        from .dict_methods import dict_or
        return dict_or(tx, a, b)
    if isinstance(a, SetValue) and isinstance(b, SetValue) and plain in _SET_BINOPS:
        return a.binop(tx, _SET_BINOPS[plain], b, in_place=fn is not plain and not a.frozen)
    if plain in _SET_OPS and (isinstance(a, SetValue) or isinstance(b, SetValue)):
        return _set_op(tx, fn, plain, a, b)
    raise Unsupported(f"operator {plain.__name__} on {a.type_name()} and {b.type_name()}",
                      kind="unsupported_operator")


def unary_op(tx, fn: Callable, a: Value) -> Value:
    if isinstance(a, NdarrayValue):
        return numpy_operator(tx, fn.__name__, a)
    if isinstance(a, (TensorValue, SymIntValue)):
        return graph_call(tx, "call_function", fn, [a], {})
    if a.is_constant():
        return _fold(tx, fn, a)
    if is_pure_python_instance(a) and fn in UNARY_DUNDERS:
        return user_unary_op(tx, fn, a)
    if isinstance(a, DictValue):
        from .counters import counter_unary
        out = counter_unary(tx, fn, a)
        if out is not None:
            return out
    raise Unsupported(f"operator {fn.__name__} on {a.type_name()}", kind="unsupported_operator")


_SET_OPS = {operator.or_: "|", operator.and_: "&", operator.sub: "-", operator.xor: "^"}

#: types whose binary operators never accept a set (so ``set op x`` / ``x op set`` is a TypeError)
_NO_SET_OPERAND = (int, float, complex, str, bytes, bool, type(None), list, tuple, dict, range)


def _as_set(v: Value):
    """``v`` as a :class:`SetValue` if it is a set or frozenset, else None."""
    if isinstance(v, SetValue):
        return v
    if v.is_constant() and type(v.as_constant()) in (set, frozenset):
        c = v.as_constant()
        return SetValue([const(x) for x in c], frozen=type(c) is frozenset)
    return None


def _set_op(tx, fn, plain, a: Value, b: Value) -> Value:
    """``a op b`` where one side is a set: set/frozenset operators accept only
    sets (``set.__or__(list)`` is NotImplemented); the result has the left
    operand's type; ``|=`` and friends mutate a set but not a frozenset."""
    sa, sb = _as_set(a), _as_set(b)
    if sa is None or sb is None:
        other = b if sa is not None else a
        try:
            other_type = other.python_type()
        except NotImplementedError:
            other_type = None
        if other_type in _NO_SET_OPERAND or isinstance(other, (BaseListValue, DictValue, RangeValue)):
            symbol = _SET_OPS[plain] + ("=" if fn is not plain else "")
            tx.raise_python_exception(TypeError(
                f"unsupported operand type(s) for {symbol}: '{a.python_type().__name__}' and "
                f"'{b.python_type().__name__}'"))
        raise Unsupported(f"operator {_SET_OPS[plain]} on {a.type_name()} and {b.type_name()}",
                          kind="unsupported_operator")
    keys = plain(set(sa.elements), set(sb.elements))
    merged = dict(sa.elements)
    for k, v in sb.elements.items():
        merged.setdefault(k, v)
    elements = {k: merged[k] for k in merged if k in keys}
    if fn is not plain and not sa.frozen and sa is a:
        tx.side_effects.mutate(a)
        if elements.keys() != a.elements.keys():
            a.version += 1  # (what its iterators check besides its size)
        a.elements = elements
        return a
    out = SetValue([], frozen=sa.frozen)
    out.elements = elements
    return out


def same_object(tx, a: Value, b: Value) -> bool:
    """``a is b`` for values, by the real object's identity where known."""
    from .base import UnrealizedLocal
    # a local handed on untouched (an entry of locals()) is the local itself
    a = a.realize() if isinstance(a, UnrealizedLocal) else a
    b = b.realize() if isinstance(b, UnrealizedLocal) else b
    from .modules import UserIteratorValue
    # ``iter(obj)`` whose ``__iter__`` returned the object itself is that object
    a = a.obj if isinstance(a, UserIteratorValue) else a
    b = b.obj if isinstance(b, UserIteratorValue) else b
    if a is b:
        return True
    if isinstance(a, SymIntValue) or isinstance(b, SymIntValue):
        a, b = _plain_bool(a), _plain_bool(b)  # True and False are singletons
        if isinstance(a, SymIntValue) or isinstance(b, SymIntValue):
            if a.python_type() is not b.python_type():
                return False
            # equal ints may or may not be one object (the small-int cache)
            raise Unsupported("identity of a symbolic number", kind="unsupported_operator")
    from ..resume import UNBOUND
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ConstantValue) and x.source is None and x._value is UNBOUND:
            # bytegraph's own marker: no user value is ever it, so no guard is needed
            return isinstance(y, ConstantValue) and y._value is UNBOUND
    if isinstance(a, TensorValue) and isinstance(b, TensorValue):
        return a.fake is b.fake
    ra, rb = _real(a), _real(b)
    if ra is not None and rb is not None and type(ra[0]) is not type(rb[0]):
        return False  # objects of two types (each guarded where it was read)
    if ra is not None and rb is not None and a.source is not None and b.source is not None \
            and not (isinstance(a, ConstantValue) and _identity_follows_value(ra[0])):
        # two objects read from two places: the answer holds while those
        # places alias (or not) the same way; their identities may change
        from ..guards import Guard
        same = ra[0] is rb[0]
        tx.guards.add(Guard("ALIAS" if same else "NO_ALIASING", a.source, None, (b.source,)))
        return same
    if ra is not None and rb is not None:
        _guard_identity(tx, a)
        _guard_identity(tx, b)
        return ra[0] is rb[0]
    return False


def _identity_follows_value(c) -> bool:
    """Equal constants of ``c``'s type are one object (singletons, bools, the
    cached small ints), so guards on the values already decide ``is``.  Other
    constants read from two places (two equal floats or strings) may or may
    not be one object: that takes a guard on the places."""
    if c is None or c is Ellipsis or c is NotImplemented or type(c) is bool:
        return True
    return type(c) is int and -5 <= c <= 256


def _guard_identity(tx, v: Value) -> None:
    """An ``is`` answer about a pre-existing object holds for that very object:
    objects guarded by type or by parts (user objects, stateless modules,
    nested functions) get an identity guard here."""
    if v.source is not None and not isinstance(v, ConstantValue):
        from ..guards import Guard
        tx.guards.add(Guard("ID_MATCH", v.source, v.real_object()[0]))


def _real(v: Value):
    if isinstance(v, (BaseListValue, DictValue, DictViewValue)) and not isinstance(v, TupleValue) \
            or isinstance(v, SetValue) and not v.frozen:
        # one real container is one value (side-effect table): ``a is b`` already said it
        return None
    return v.real_object()


def compare(tx, op: str, a: Value, b: Value) -> Value:
    fn = COMPARE_FUNCS[op]
    if isinstance(a, NdarrayValue) or isinstance(b, NdarrayValue):
        return numpy_operator(tx, fn.__name__, a, b)
    if not (isinstance(a, TensorValue) or isinstance(b, TensorValue)):
        a, b = _number_operands(a, b)
    if _graph_value(a) or _graph_value(b):
        return graph_call(tx, "call_function", fn, [a, b], {})
    if a.is_constant() and b.is_constant():
        return _fold(tx, fn, a, b)
    if handles_compare(a, b):
        return user_compare(tx, op, a, b)
    if isinstance(a, DictValue) and isinstance(b, DictValue):
        from .counters import counter_compare
        out = counter_compare(tx, op, a, b)
        if out is not None:
            return out
    if op in ("==", "!="):
        eq = _equal(tx, a, b)
        if eq is not None:
            return const(eq if op == "==" else not eq)
    if isinstance(a, BaseListValue) and isinstance(b, BaseListValue) and a.python_type() is b.python_type():
        return _fold(tx, fn, const(_seq_key(tx, a)), const(_seq_key(tx, b)))
    if isinstance(a, SetValue) and isinstance(b, SetValue):
        return const(fn(set(a.elements), set(b.elements)))  # subset / superset
    from .deques import DequeValue, deque_compare
    if isinstance(a, DequeValue) and isinstance(b, DequeValue):
        return deque_compare(tx, op, a, b)
    raise Unsupported(f"comparison {op} of {a.type_name()} and {b.type_name()}", kind="unsupported_operator")


def _seq_key(tx, v: BaseListValue):
    return tuple(x.as_constant() for x in v.items)


def _equal(tx, a: Value, b: Value, item: bool = False):
    """Structural equality where it can be decided at trace time, else None.

    ``item``: the comparison of two items inside containers (``in``,
    ``count``, ``index``, container ``==``), which is CPython's
    ``PyObject_RichCompareBool``: one object is equal to itself there, even
    a NaN; a top-level ``==`` asks the object (``nan == nan`` is false)."""
    if isinstance(a, SymIntValue) or isinstance(b, SymIntValue):
        return compare(tx, "==", a, b).truth(tx)
    if not item and handles_compare(a, b):
        return compare(tx, "==", a, b).truth(tx)
    if same_object(tx, a, b) and (item or not (a.is_constant() and isinstance(a.as_constant(), (float, complex)))):
        return True
    if a.is_constant() and b.is_constant():
        return a.as_constant() == b.as_constant()
    if isinstance(a, (BaseListValue, ConstantValue)) and isinstance(b, (BaseListValue, ConstantValue)):
        try:
            ia, ib = a.unpack(tx), b.unpack(tx)
        except Unsupported:
            return None
        if a.python_type() is not b.python_type() and not (
                issubclass(a.python_type(), tuple) and issubclass(b.python_type(), tuple)):
            return False
        if len(ia) != len(ib):
            return False
        for x, y in zip(ia, ib):
            e = _equal(tx, x, y, item=True)
            if e is not True:
                return e
        return True
    if isinstance(a, DictValue) and isinstance(b, DictValue):
        from .counters import counter_compare
        out = counter_compare(tx, "==", a, b)
        if out is not None:
            return out.truth(tx)
        from .dict_methods import dict_equal
        return dict_equal(tx, a, b, _equal)
    if isinstance(a, SetValue) and isinstance(b, SetValue):
        return set(a.elements) == set(b.elements)
    if handles_compare(a, b):
        return compare(tx, "==", a, b).truth(tx)  # (identity was asked first: PyObject_RichCompareBool)
    if is_none(a) or is_none(b):
        return False  # None == <non-None container/object>
    return None


def contains(tx, container: Value, item: Value) -> bool:
    """``item in container``."""
    if isinstance(container, (DictValue,)):
        return container.contains(item, tx)
    if isinstance(container, DictViewValue) and container.kind == "keys":
        return container.dict_value.contains(item, tx)
    if isinstance(container, SetValue):
        return container.contains(item)
    from .object_protocol import InstanceDictValue
    if isinstance(container, InstanceDictValue):
        return container.contains(item)
    if isinstance(container, TensorValue):
        raise Unsupported("`in` on a tensor reads tensor values", kind="data_dependent")
    if container.is_constant() and item.is_constant():
        try:
            return item.as_constant() in container.as_constant()
        except TypeError as e:
            tx.raise_python_exception(e)
    from .generators import iterate
    from .modules import NewObjectValue
    from .objects import NO_ATTR, UserObjectValue, special_lookup
    if type(container) in (UserObjectValue, NewObjectValue) and not issubclass(container.python_type(), dict):
        # ``__contains__`` (looked up on the type), else iteration, else TypeError
        cls = container.python_type()
        bound = container.dunder(tx, "__contains__") if isinstance(container, UserObjectValue) \
            else container._dunder(tx, "__contains__")
        if bound is not None:
            return bound.call(tx, [item], {}).truth(tx)
        if special_lookup(cls, "__contains__") is not NO_ATTR:
            raise Unsupported(f"`in` on a {cls.__name__} (its __contains__ is not a Python function)",
                              kind="unsupported_operator")
        if special_lookup(cls, "__iter__") is NO_ATTR and special_lookup(cls, "__getitem__") is NO_ATTR:
            tx.raise_python_exception(TypeError(f"argument of type '{cls.__name__}' is not iterable"))
    if isinstance(container, BaseListValue):
        items = container.items
    else:
        # iterated up to the first match, no further (an iterator keeps the rest)
        it = iterate(tx, container)
        items = iter(lambda: it.next(tx), None)
    for v in items:
        # like Python: identity first, then ``==`` (whose truth is data-dependent for a tensor)
        if same_object(tx, v, item):
            return True
        if isinstance(v, TensorValue) or isinstance(item, TensorValue):
            raise Unsupported("`in` compares a tensor with ==, which reads tensor values", kind="data_dependent")
        eq = _equal(tx, v, item, item=True)
        if eq is True:
            return True
        if eq is None:
            raise Unsupported(f"`in` comparison of {item.type_name()} and {v.type_name()}",
                              kind="unsupported_operator")
    return False


def getitem(tx, obj: Value, index: Value) -> Value:
    if isinstance(obj, TensorValue):
        return graph_call(tx, "call_function", operator.getitem, [obj, index], {})
    if isinstance(obj, (BaseListValue, DictValue)):
        if isinstance(obj, BaseListValue) and isinstance(index, TensorValue):
            raise Unsupported("indexing a list with a tensor", kind="data_dependent")
        return obj.getitem(tx, index)
    if isinstance(obj, RangeValue):
        try:
            out = obj.value[index.as_constant()]
        except (IndexError, TypeError) as e:
            tx.raise_python_exception(e)
        return RangeValue(out) if isinstance(out, range) else const(out)
    if obj.is_constant() and index.is_constant():
        return _fold(tx, operator.getitem, obj, index)
    if hasattr(obj, "getitem"):
        return obj.getitem(tx, index)
    return obj.call_method(tx, "__getitem__", [index], {})


def setitem(tx, obj: Value, index: Value, value: Value) -> None:
    if isinstance(obj, TensorValue):
        before = tx.graph.op_count
        graph_call(tx, "call_function", operator.setitem, [obj, index, value], {})
        # NOTE: setitem returns None, and graph_call keeps no node for a call
        # without a tensor result; the mutation is the point, so record it here.
        if tx.graph.op_count == before:
            tx.graph.create_node("call_function", operator.setitem,
                                 tuple(_to_node(tx, v) for v in (obj, index, value)), {}, None, where=tx)
        return
    if isinstance(obj, (ListValue, DictValue)) or hasattr(obj, "setitem"):
        obj.setitem(tx, index, value)
        return
    raise Unsupported(f"item assignment on {obj.type_name()}", kind="unsupported_setitem")


def delitem(tx, obj: Value, index: Value) -> None:
    if isinstance(obj, (ListValue, DictValue)):
        obj.delitem(tx, index)
        return
    raise Unsupported(f"item deletion on {obj.type_name()}", kind="unsupported_setitem")

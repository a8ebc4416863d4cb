"""Operators on instances of user classes: ``a + b``, ``a += b``, ``-a``,
``a < b``, ``a == b`` run the class's Python dunders in the trace, in the
order CPython's binary-operator and rich-comparison protocols try them
(reflected method first for a subclass that overrides it, ``NotImplemented``
falls through to the other operand, ``==`` falls back to identity).

Only classes whose whole MRO is Python classes (plus ``object``) take part:
a builtin base (list, dict, tensor subclasses) brings C slots whose
behaviour is not modelled, and those keep breaking.
"""

from __future__ import annotations

import operator
import types

from ..errors import Unsupported
from .base import Value
from .constants import ConstantValue, const

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement

#: plain operator -> (method, reflected method)
BINARY_DUNDERS = {
    operator.add: ("__add__", "__radd__"), operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"), operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"), operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"), operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.lshift: ("__lshift__", "__rlshift__"), operator.rshift: ("__rshift__", "__rrshift__"),
    operator.and_: ("__and__", "__rand__"), operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"), divmod: ("__divmod__", "__rdivmod__"),
}

_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
            operator.floordiv: "//", operator.mod: "%", operator.pow: "** or pow()", operator.matmul: "@",
            operator.lshift: "<<", operator.rshift: ">>", operator.and_: "&", operator.or_: "|",
            operator.xor: "^", divmod: "divmod()"}

UNARY_DUNDERS = {operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__",
                 abs: "__abs__"}

#: comparison -> (method, reflected method)
COMPARE_DUNDERS = {"<": ("__lt__", "__gt__"), "<=": ("__le__", "__ge__"), "==": ("__eq__", "__eq__"),
                   "!=": ("__ne__", "__ne__"), ">": ("__gt__", "__lt__"), ">=": ("__ge__", "__le__")}

#: builtin operand types whose operators answer NotImplemented for an
#: instance of a user class (so only the user's dunders decide)
_PASSIVE_TYPES = (int, float, bool, complex, str, type(None))


def is_pure_python_instance(v: Value) -> bool:
    """Whether ``v`` is an instance of a pure-Python class (no builtin base but
    ``object``), modelled as a user object."""
    from .modules import NewObjectValue
    from .objects import UserObjectValue
    if type(v) not in (UserObjectValue, NewObjectValue):
        return False
    cls = v.python_type()
    return type(cls) is type and all(k is object or k.__flags__ & _HEAPTYPE for k in cls.__mro__)


def _passive(v: Value) -> bool:
    return isinstance(v, ConstantValue) and type(v.as_constant()) in _PASSIVE_TYPES


def _method(tx, v: Value, name: str):
    """``type(v).name`` for a user instance: a bound method value (a Python
    function), ``"object"`` (``object``'s own slot), or None (absent).  The
    lookup is guarded by the object's dunder helper."""
    from .modules import NewObjectValue
    from .objects import NO_ATTR, special_lookup
    raw = special_lookup(v.python_type(), name)
    bound = v._dunder(tx, name) if isinstance(v, NewObjectValue) else v.dunder(tx, name)
    if isinstance(raw, types.FunctionType):
        return bound
    if raw is NO_ATTR:
        return None
    if raw is object.__dict__.get(name):
        return "object"
    raise Unsupported(f"{v.python_type().__name__}.{name} is a {type(raw).__name__}", kind="unsupported_operator")


def _not_implemented(r: Value) -> bool:
    # (a global ``NotImplemented`` read in the dunder is wrapped as an object)
    try:
        return r.python_type() is type(NotImplemented)
    except NotImplementedError:
        return False


def _call(tx, v: Value, name: str, other: Value):
    """``type(v).name(v, other)``, or ``const(NotImplemented)`` when absent."""
    m = _method(tx, v, name)
    if m is None or m == "object":
        return const(NotImplemented)
    return m.call(tx, [other], {})


def handles_binary(a: Value, b: Value) -> bool:
    ua, ub = is_pure_python_instance(a), is_pure_python_instance(b)
    return (ua or ub) and (ua or _passive(a)) and (ub or _passive(b) or _is_tensor(b))


def _is_tensor(v: Value) -> bool:
    from .tensors import TensorValue
    return isinstance(v, TensorValue)


def user_binary_op(tx, fn, plain, a: Value, b: Value) -> Value:
    """``a op b`` / ``a op= b`` where one operand is a user instance (see ``handles_binary``)."""
    name, rname = BINARY_DUNDERS[plain]
    if fn is not plain and is_pure_python_instance(a):
        r = _call(tx, a, "__i" + name[2:], b)
        if not _not_implemented(r):
            return r
    ta, tb = a.python_type(), b.python_type()
    ua, ub = is_pure_python_instance(a), is_pure_python_instance(b)
    # CPython's slot for a Python class: the right operand's reflected
    # method goes first when its class is a proper subclass overriding it;
    # the reflected method is never tried for two operands of one type
    try_other = ub and ta is not tb
    if ua:
        if try_other and issubclass(tb, ta) and _overrides(ta, tb, rname):
            r = _call(tx, b, rname, a)
            if not _not_implemented(r):
                return r
            try_other = False
        r = _call(tx, a, name, b)
        if not _not_implemented(r):
            return r
        if ta is tb:
            try_other = False
    if try_other:
        r = _call(tx, b, rname, a)
        if not _not_implemented(r):
            return r
    if not (ua and ub):
        # a tensor or builtin on the other side has its own fallbacks
        # (sequence concatenation, torch's conversions) that are not modelled
        raise Unsupported(f"operator {_SYMBOLS[plain]} on {a.type_name()} and {b.type_name()} "
                          "returned NotImplemented", kind="unsupported_operator")
    symbol = ("**=" if plain is operator.pow else _SYMBOLS[plain] + "=") if fn is not plain else _SYMBOLS[plain]
    tx.raise_python_exception(TypeError(
        f"unsupported operand type(s) for {symbol}: '{ta.__name__}' and '{tb.__name__}'"))


def _overrides(ta: type, tb: type, name: str) -> bool:
    from .objects import special_lookup
    return special_lookup(tb, name) is not special_lookup(ta, name)


def user_unary_op(tx, fn, a: Value) -> Value:
    name = UNARY_DUNDERS[fn]
    m = _method(tx, a, name)
    if m is None:
        what = {operator.neg: "unary -", operator.pos: "unary +", operator.invert: "unary ~",
                abs: "abs()"}[fn]
        tx.raise_python_exception(TypeError(f"bad operand type for {what}: '{a.python_type().__name__}'"))
    if m == "object":
        raise Unsupported(f"{name} of object", kind="unsupported_operator")
    return m.call(tx, [], {})


def handles_compare(a: Value, b: Value) -> bool:
    return handles_binary(a, b)


def user_compare(tx, op: str, a: Value, b: Value) -> Value:
    """``a op b`` (a rich comparison) where one operand is a user instance."""
    from .operators import same_object
    name, rname = COMPARE_DUNDERS[op]
    ta, tb = a.python_type(), b.python_type()
    ua, ub = is_pure_python_instance(a), is_pure_python_instance(b)
    reflected_first = ub and ta is not tb and issubclass(tb, ta)
    order = [(b, rname, a)] if reflected_first else []
    if ua:
        order.append((a, name, b))
    if ub and not reflected_first:
        order.append((b, rname, a))
    for self_v, meth, other in order:
        r = _compare_call(tx, self_v, meth, other)
        if not _not_implemented(r):
            return r
    if not (ua and ub) and _is_tensor(a if ub else b):
        raise Unsupported(f"comparison {op} of {a.type_name()} and {b.type_name()} returned NotImplemented",
                          kind="unsupported_operator")
    if op == "==":
        return const(same_object(tx, a, b))
    if op == "!=":
        return const(not same_object(tx, a, b))
    tx.raise_python_exception(TypeError(
        f"'{op}' not supported between instances of '{ta.__name__}' and '{tb.__name__}'"))


def _compare_call(tx, v: Value, name: str, other: Value) -> Value:
    from .operators import same_object
    m = _method(tx, v, name)
    if m is None:
        return const(NotImplemented)
    if m != "object":
        return m.call(tx, [other], {})
    # object's own slots: == is identity, != inverts the class's __eq__
    if name == "__eq__":
        return const(True) if same_object(tx, v, other) else const(NotImplemented)
    if name == "__ne__":
        r = _compare_call(tx, v, "__eq__", other)
        if _not_implemented(r):
            return r
        return const(not r.truth(tx))
    return const(NotImplemented)


class Ranked:
    """A stand-in for one item while the real ``list.sort``/``min``/``max``
    order items whose keys are user instances: each comparison the real
    algorithm makes runs the traced comparison protocol on the keys, so the
    program's ``__lt__``/``__gt__`` are called in CPython's own order."""

    __slots__ = ("tx", "key", "item", "same_type")

    def __init__(self, tx, key: Value, item: Value, same_type: bool = False):
        self.tx, self.key, self.item, self.same_type = tx, key, item, same_type

    def __lt__(self, other: "Ranked") -> bool:
        from .operators import compare
        if self.same_type:
            # list.sort over keys all of one type calls that type's comparison
            # slot directly first, and only on NotImplemented the whole
            # protocol (which asks ``__lt__`` again)
            r = _compare_call(self.tx, self.key, "__lt__", other.key)
            if not _not_implemented(r):
                return r.truth(self.tx)
        return compare(self.tx, "<", self.key, other.key).truth(self.tx)

    def __gt__(self, other: "Ranked") -> bool:
        from .operators import compare
        return compare(self.tx, ">", self.key, other.key).truth(self.tx)


def any_user_instance(values) -> bool:
    return any(is_pure_python_instance(v) for v in values)


def one_user_type(values) -> bool:
    """All ``values`` are instances of one user class (list.sort's fast path)."""
    return len(values) > 1 and all(is_pure_python_instance(v) for v in values) and \
        len({v.python_type() for v in values}) == 1

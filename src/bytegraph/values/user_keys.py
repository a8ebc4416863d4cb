"""Dict keys whose class has its own ``__hash__``/``__eq__`` (program code).

CPython finds a key in a dict's table by its hash, then among the stored
keys of that very hash (in the order they were inserted: the order of the
probe sequence), by identity, then by ``stored == key`` (the stored key's
``__eq__`` first, reflected as any ``==``).  :func:`resolve_key` runs that
walk in the trace over a :class:`~.containers.DictValue`'s entries: the
user's ``__hash__`` is traced (it must give an int known while tracing) and
so is every ``__eq__`` CPython would call, in its order.

A user key's entry is keyed ``("u", token, hash)``.  The hash of every
other stored key must be known too (constants, pre-existing objects): a
table holding a key of unknown hash (a tensor or object made in the trace,
hashed by its address) beside user keys is a clean break.

Both are program code, run in the trace exactly where and as often as
CPython calls them (their effects are the trace's like any other).  So a
dict holding such keys must not be rebuilt by the compiled code (that would
call them again): it stays inside the trace (:func:`refuse_rehashing`).
"""

from __future__ import annotations

import sys
from typing import Optional

from ..errors import Unsupported
from .base import Value


def _user_class(v: Value) -> Optional[type]:
    """The class of ``v`` when it is an instance of a pure-Python class with
    its own ``__hash__`` or ``__eq__``, else None."""
    from .containers import _hashed_by_identity
    from .user_operators import is_pure_python_instance
    if not is_pure_python_instance(v):
        return None
    cls = v.python_type()
    return None if _hashed_by_identity(cls) else cls


def needs_user_hash(v: Value) -> bool:
    return _user_class(v) is not None


def refuse_rehashing(d) -> None:
    """A dict holding (or whose replay inserts) keys of their own
    ``__hash__`` cannot be rebuilt by the compiled code: building it calls
    ``__hash__``/``__eq__`` again, at run time, in whatever state the keys
    are in then (the trace ran each call CPython makes, once, where it makes
    it).  Such dicts stay inside the trace."""
    if has_user_keys(d.entries) or any(len(op) > 1 and needs_user_hash(op[1]) for op in d.key_log):
        raise Unsupported("a dict with keys of their own __hash__ outlives the trace (rebuilding it would "
                          "call their __hash__/__eq__ again)", kind="unreconstructable")


def holds_user_keyed_dict(roots) -> bool:
    """Whether the values ``roots`` reach include a dict :func:`refuse_rehashing` refuses."""
    from .base import reachable
    from .containers import DictValue
    for v in reachable(roots):
        if isinstance(v, DictValue):
            try:
                refuse_rehashing(v)
            except Unsupported:
                return True
    return False


def user_hash(tx, v: Value) -> int:
    """``hash(v)`` by the class's Python ``__hash__``, traced, as CPython's
    slot converts its result (an int; -1 becomes -2; a big int is hashed)."""
    from .objects import special_lookup
    from .constants import ConstantValue
    cls = _user_class(v)
    fn = special_lookup(cls, "__hash__")
    if fn is None:
        tx.raise_python_exception(TypeError(f"unhashable type: '{cls.__name__}'"))
    if fn is object.__hash__:
        raise Unsupported(f"a {cls.__name__} object (hashed by address, compared by its own __eq__) "
                          "as a dict key", kind="unsupported_dict")
    from .functions import BoundMethodValue
    from ..sources import AttrSource, ObjectSource
    owner = next(k for k in cls.__mro__ if "__hash__" in k.__dict__)
    if not hasattr(fn, "__code__"):
        raise Unsupported(f"{cls.__name__}.__hash__ is not a Python function", kind="unsupported_dict")
    bound = BoundMethodValue(tx.wrap(fn, AttrSource(ObjectSource(owner, owner.__qualname__), "__hash__")), v)
    r = bound.call(tx, [], {})
    if not isinstance(r, ConstantValue):
        raise Unsupported(f"{cls.__name__}.__hash__ gives a value not known while tracing",
                          kind="unsupported_dict", hint="the frame breaks there")
    h = r.as_constant()
    if not isinstance(h, int):
        tx.raise_python_exception(TypeError("__hash__ method should return an integer"))
    h = int(h)
    if not -sys.maxsize - 1 <= h <= sys.maxsize:
        h = hash(h)
    return -2 if h == -1 else h


def known_hash(hk, key: Value) -> Optional[int]:
    """The hash CPython stored for the entry ``hk`` (key value ``key``), or
    None when it is not known while tracing."""
    kind = hk[0]
    if kind == "c":
        return hash(hk[1])
    if kind == "u":
        return hk[2]
    if kind == "id":
        real = key.real_object() if key.source is not None else None
        if real is not None and type(real[0]).__hash__ is object.__hash__:
            return hash(real[0])
    return None


def _token(v: Value):
    real = v.real_object() if v.source is not None else None
    return ("obj", id(real[0])) if real is not None else ("val", id(v))


def has_user_keys(entries) -> bool:
    return any(hk[0] == "u" for hk in entries)


def resolve_key(tx, entries, key: Value):
    """The entry key (``key_of``'s form) CPython's lookup of ``key`` lands
    on in ``entries`` -- an equal stored key's, or the new key's own --
    with every ``__hash__``/``__eq__`` call of that lookup traced."""
    from .containers import key_of
    from .operators import compare, same_object
    user = needs_user_hash(key)
    if user:
        h = user_hash(tx, key)
        own = ("u", _token(key), h)
    else:
        own = key_of(key)
        h = known_hash(own, key)
        if h is None:
            raise Unsupported(f"a {key.type_name()} key (hash not known while tracing) in a dict with keys "
                              "of their own __hash__", kind="unsupported_dict")
    for hk, (stored, _) in list(entries.items()):
        sh = known_hash(hk, stored)
        if sh is None:
            raise Unsupported(f"a key of its own __hash__ in a dict holding a {stored.type_name()} key (hash "
                              "not known while tracing)", kind="unsupported_dict")
        if sh != h:
            continue
        if same_object(tx, stored, key):
            return hk
        if hk[0] == "c" and own[0] == "c":
            if hk == own:
                return hk
            continue
        n = len(entries)
        eq = compare(tx, "==", stored, key).truth(tx)
        if len(entries) != n or entries.get(hk, (None,))[0] is not stored:
            raise Unsupported("a dict changed by a key's __eq__ during a lookup", kind="unsupported_dict")
        if eq:
            return hk
    if user:
        tx.trace.user_keyed = True
    return own

"""Tuples, lists, ranges, slices and iterators (dicts: :mod:`.dicts`; sets: :mod:`.sets`).

Mutable containers (list, dict, set) are tracked by identity in the
side-effect table: one real container is one value, and mutations change the
value's items in place and mark it mutated so codegen writes the final state
back into the real object (in place, never replacing it).
"""

from __future__ import annotations

import collections
import inspect
import types
from typing import Dict, List, Optional

from ..errors import Unsupported
from .base import Value, all_constant, check_release
from .constants import LITERAL_TYPES, NONE, ConstantValue, const, is_none


def key_of(v: Value):
    """Hashable key of a dict key / set element value.

    Two values get equal keys exactly when Python would treat the objects
    as one key (equal hashes and ``==``).  Constants key by value, so equal
    numbers (``1``, ``1.0``, ``True``) are one key; tuples by their items;
    objects whose class keeps ``object``'s hash and ``==`` by the identity of
    the object they stand for.  Anything else (an unhashable object, a class
    with its own ``__hash__``/``__eq__``) raises ``Unsupported``.
    """
    if v.is_constant():
        c = v.as_constant()
        try:
            hash(c)
        except TypeError as e:
            _raise_user(e)
        return ("c", c)
    from .symbolic import SymIntValue
    if isinstance(v, SymIntValue):
        return ("c", v.as_constant())  # a symbolic size used as a key: specialize (guarded)
    from .tensors import TensorValue
    if isinstance(v, TensorValue):
        return ("id", id(v.fake))
    if isinstance(v, TupleValue) and v.python_type().__eq__ is tuple.__eq__ \
            and v.python_type().__hash__ is tuple.__hash__:
        # equal tuples (named tuples too) are one key: compare item by item
        keys = tuple(key_of(item) for item in v.items)
        if all(k[0] == "c" for k in keys):
            return ("c", tuple(k[1] for k in keys))  # the key of the equal tuple constant
        return ("t", keys)
    if isinstance(v, SetValue) and v.frozen:
        fkeys = frozenset(key_of(x) for x in v.elements.values())
        if all(k[0] == "c" for k in fkeys):
            return ("c", frozenset(k[1] for k in fkeys))  # the key of the equal constant frozenset
        return ("fs", fkeys)
    if isinstance(v, (ListValue, DictValue, DictViewValue)) or isinstance(v, SetValue) and not v.frozen:
        _raise_user(TypeError(f"unhashable type: '{v.python_type().__name__}'"))
    real = v.real_object()
    if real is not None:
        if _hashed_by_identity(type(real[0])):
            return ("id", id(real[0]))
        t = type(real[0])
    else:
        try:
            t = v.python_type()
        except NotImplementedError:
            t = None
        if t is not None and _hashed_by_identity(t):
            return ("id", id(v))  # an object made in the trace: the value is its identity
    # equality the tracer does not model (a user __eq__/__hash__, a frozenset
    # of values...): keying by identity could miss an equal key
    raise Unsupported(f"a {getattr(t, '__name__', type(v).__name__)} object as a dict key or set element",
                      kind="unsupported_dict")


def _hashed_by_identity(t: type) -> bool:
    """Instances of ``t`` equal only themselves (object's or type's ``==`` and hash)."""
    if issubclass(t, type):
        return t.__eq__ is type.__eq__ and t.__hash__ is type.__hash__
    return t.__eq__ is object.__eq__ and t.__hash__ is object.__hash__


def _raise_user(exc: BaseException):
    from .exceptions import ExceptionValue
    from ..errors import UserException
    # raised where no frame is at hand: the frame it unwinds through does
    # Python's raise bookkeeping (traceback, __context__)
    value = ExceptionValue.from_real(exc)
    value.fresh = True
    raise UserException(value)


def str_key(name: str):
    """The key of a string constant (keyword names, locals)."""
    return ("c", name)



class BaseListValue(Value):
    """Shared behaviour of tuples and lists: an ordered sequence of values."""

    __slots__ = ("items",)

    def __init__(self, items: List[Value], source=None):
        super().__init__(source)
        self.items = list(items)

    def unpack(self, tx):
        return list(self.items)

    def truth(self, tx):
        return bool(self.items)

    def has_len(self):
        return True

    def children(self):
        return self.items

    def is_constant(self):
        return False

    def getitem(self, tx, index: Value) -> Value:
        idx = index.as_constant()
        if isinstance(idx, slice):
            try:
                self.items[idx]
            except (ValueError, TypeError) as e:  # a zero step, a non-integer bound
                tx.raise_python_exception(e)
            if type(self) is TupleValue and len(range(*idx.indices(len(self.items)))) == len(self.items) \
                    and idx.indices(len(self.items))[2] == 1:
                return self  # a whole-tuple slice of an exact tuple is the tuple itself
            return type(self)(self.items[idx]) if type(self) in (TupleValue, ListValue) else TupleValue(self.items[idx])
        try:
            return self.items[idx]
        except (IndexError, TypeError) as e:
            tx.raise_python_exception(e)


class TupleValue(BaseListValue):
    """A tuple (or ``torch.Size``-free tuple) built or read during tracing.

    ``real`` is the tuple itself for one read from a source (``is`` compares
    it: one tuple reached through two sources is one object).  Reconstructs
    with ``BUILD_TUPLE`` of its items, or through its source.
    """

    __slots__ = ("real",)

    def __init__(self, items: List[Value], source=None, real=None):
        super().__init__(items, source)
        self.real = real

    def real_object(self):
        return (self.real,) if self.real is not None else None

    def python_type(self):
        return tuple

    def get_iter(self, tx):
        from .iterators import sequence_iterator
        return sequence_iterator(self, list(self.items), ())

    def reconstruct(self, cg):
        for item in self.items:
            cg.reconstruct(item)
        cg.emit("BUILD_TUPLE", arg=len(self.items))

    def call_method(self, tx, name, args, kwargs):
        if name == "index" and not kwargs and 1 <= len(args) <= 3:
            return const(_index(tx, self.items, *args, what="tuple"))
        if name == "count" and len(args) == 1:
            return const(sum(1 for v in self.items if _same(tx, v, args[0])))
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self):
        return f"TupleValue({self.items})"


def _namedtuple_replace_error() -> type:
    """The exception a namedtuple's ``_replace`` raises for an unknown field:
    ValueError up to 3.12, TypeError from 3.13 (asked of the running
    interpreter once)."""
    try:
        collections.namedtuple("Probe", "a")(0)._replace(b=1)
    except Exception as e:  # noqa: BLE001 - its type is the answer
        return type(e)
    return ValueError


NAMEDTUPLE_REPLACE_ERROR = _namedtuple_replace_error()

# The code of the methods ``collections.namedtuple`` gives each class (every
# class's are functions of the same code): a class that defines its own is
# not handled as the machinery's.
_PROBE = collections.namedtuple("Probe", "a")
_MACHINERY_CODES = {"_replace": _PROBE._replace.__code__, "_asdict": _PROBE._asdict.__code__,
                    "_make": _PROBE._make.__func__.__code__}
del _PROBE


def _machinery_method(cls, name: str) -> bool:
    """Whether ``cls.<name>`` is the namedtuple machinery's own ``_replace``,
    ``_asdict`` or ``_make`` (not one the class or a subclass wrote)."""
    f = getattr(cls, name, None)
    f = getattr(f, "__func__", f)
    return name in _MACHINERY_CODES and getattr(f, "__code__", None) is _MACHINERY_CODES[name]


class NamedTupleValue(TupleValue):
    """An instance of a ``collections.namedtuple`` class (or ``torch.return_types``)."""

    __slots__ = ("cls",)

    def __init__(self, items, cls, source=None):
        super().__init__(items, source)
        self.cls = cls

    def python_type(self):
        return self.cls

    def get_attr(self, tx, name):
        # namedtuple classes list ``_fields``; structseqs (torch.return_types) ``__match_args__``
        fields = getattr(self.cls, "_fields", None) or getattr(self.cls, "__match_args__", None)
        if fields and name in fields:
            return self.items[list(fields).index(name)]
        attr = getattr(self.cls, name, None)
        if isinstance(attr, property) and attr.fget is not None:
            return tx.wrap(attr.fget, None).call(tx, [self], {})
        if _class_method(self.cls, name):
            from .functions import BoundMethodValue
            return BoundMethodValue(tx.wrap(attr, None), self)
        if attr is not None and not callable(attr):  # class-level data such as ``_fields``
            from .builder import wrap_derived_constant
            return wrap_derived_constant(tx, attr, name)
        return super().get_attr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name == "_replace" and not args and _machinery_method(self.cls, name):
            unknown = [k for k in kwargs if k not in fields]
            if unknown:
                tx.raise_python_exception(NAMEDTUPLE_REPLACE_ERROR(f"Got unexpected field names: {unknown!r}"))
            return NamedTupleValue([kwargs.get(f, item) for f, item in zip(fields, self.items)], self.cls)
        if fields is not None and name == "_asdict" and not args and not kwargs and \
                _machinery_method(self.cls, name):
            out = DictValue()
            for f, item in zip(fields, self.items):
                out.entries[str_key(f)] = (const(f), item)
            return out
        if _class_method(self.cls, name):
            return tx.wrap(getattr(self.cls, name), None).call(tx, [self, *args], kwargs)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        if id(self.cls) in cg.templates and hasattr(self.cls, "_make"):
            # a namedtuple class made in the trace: this call's own class's _make
            cg.begin_call()
            cg.load_object(self.cls)
            cg.emit("LOAD_ATTR", "_make")
        else:
            cg.push_callable(self.cls._make if hasattr(self.cls, "_make") else self.cls)
        for item in self.items:
            cg.reconstruct(item)
        # namedtuple: cls._make(items); structseq (torch.return_types): cls(items)
        cg.emit("BUILD_TUPLE", arg=len(self.items))
        cg.call(1)


def _class_method(cls, name: str) -> bool:
    """A method written in a (``typing.NamedTuple``) class body, as opposed to
    tuple's and the namedtuple machinery's own (``_replace``, ``_make``, dunders)."""
    return (isinstance(getattr(cls, name, None), types.FunctionType) and not name.startswith("__")
            and not _machinery_method(cls, name))


class ListValue(BaseListValue):
    """A list.  Pre-existing lists carry a source and are written back in place."""

    __slots__ = ()

    def python_type(self):
        return list

    def get_iter(self, tx):
        # a list iterator reads the list as it is at each step: a loop body
        # that appends to or pops from the list changes the iteration
        from .iterators import ListIteratorValue
        return ListIteratorValue(self)

    def reconstruct(self, cg):
        packed = _packed_constants(self.items)
        if packed is not None:
            # as CPython compiles a list display of constants: one tuple
            # constant extended into an empty list, not an instruction per item
            cg.emit("BUILD_LIST", arg=0)
            cg.load_object(packed)
            cg.emit("LIST_EXTEND", arg=1)
            return
        for item in self.items:
            cg.reconstruct(item)
        cg.emit("BUILD_LIST", arg=len(self.items))

    def call_method(self, tx, name, args, kwargs):
        handler = _LIST_METHODS.get(name)
        if handler is None or kwargs and name != "sort":
            return super().call_method(tx, name, args, kwargs)
        check_arity(tx, handler, getattr([], name), args, kwargs)
        if handler is not _list_index and handler is not _list_count and handler is not _list_copy:
            tx.side_effects.mutate(self)
        return handler(tx, self, *args, **kwargs)

    def setitem(self, tx, index: Value, value: Value):
        idx = index.as_constant()
        new = value.unpack(tx) if isinstance(idx, slice) else value
        items = list(self.items)
        try:
            old = self.items[idx] if isinstance(idx, slice) else [self.items[idx]]
            items[idx] = new  # on a copy: a failing assignment changes nothing
        except (IndexError, ValueError, TypeError) as e:
            tx.raise_python_exception(e)
        for v in old:
            check_release(v)
        tx.side_effects.mutate(self)
        self.items[:] = items

    def delitem(self, tx, index: Value):
        idx = index.as_constant()
        items = list(self.items)
        try:
            old = self.items[idx] if isinstance(idx, slice) else [self.items[idx]]
            del items[idx]
        except (IndexError, ValueError, TypeError) as e:
            tx.raise_python_exception(e)
        for v in old:
            check_release(v)
        tx.side_effects.mutate(self)
        self.items[:] = items

    def __repr__(self):
        return f"ListValue({self.items})"


_SIGNATURES: Dict[object, inspect.Signature] = {}


def _packed_constants(items) -> Optional[tuple]:
    """The items' values as one tuple when there are several and every one is a
    plain constant made in the trace (so rebuilding it guards and reads nothing).
    Not with strings or bytes of more than one character: the code object
    constructor interns the name-like strings of a tuple constant, so equal
    strings that are distinct objects in eager would become one (Codegen.load_object
    loads each through a reference for that reason)."""
    if len(items) < 4:
        return None
    values = []
    for v in items:
        if type(v) is not ConstantValue or v.source is not None or type(v._value) not in LITERAL_TYPES:
            return None
        if type(v._value) in (str, bytes) and len(v._value) > 1:
            return None
        values.append(v._value)
    return tuple(values)


def check_arity(tx, handler, real_method, args, kwargs) -> None:
    """Raise the real method's TypeError when ``args``/``kwargs`` do not fit
    ``handler(tx, self, ...)``: the message comes from calling ``real_method``
    (the method of a scratch object) with as many placeholders."""
    sig = _SIGNATURES.get(handler)
    if sig is None:
        sig = _SIGNATURES[handler] = inspect.signature(handler)
    try:
        sig.bind(tx, None, *args, **kwargs)
        return
    except TypeError:
        pass
    try:
        real_method(*[None] * len(args), **{k: None for k in kwargs})
    except TypeError as e:
        tx.raise_python_exception(e)
    raise Unsupported(f"{getattr(real_method, '__qualname__', real_method)}() with these arguments",
                      kind="unsupported_method")


def _same(tx, a: Value, b: Value) -> bool:
    """``PyObject_RichCompareBool(a, b, Py_EQ)``: identity first, then ``==``
    (so a NaN is found in a list holding that very NaN)."""
    from .operators import compare, same_object
    return same_object(tx, a, b) or compare(tx, "==", a, b).truth(tx)


def _index(tx, items, value, start=None, stop=None, what="list") -> int:
    """``seq.index(value[, start[, stop]])`` over the items' values."""
    bounds = slice(*(b.as_constant() if isinstance(b, Value) else b for b in (start, stop)))
    for i in range(len(items))[bounds]:
        v = items[i]
        if v is value or _same(tx, v, value):
            return i
    shown = repr(value.as_constant()) if value.is_constant() else "value"
    tx.raise_python_exception(ValueError(f"{shown} is not in {what}" if what == "list"
                                         else "tuple.index(x): x not in tuple"))


def _list_append(tx, lst, v):
    lst.items.append(v)
    return NONE


def _list_extend(tx, lst, v):
    from .generators import LazyIteratorValue
    if isinstance(v, LazyIteratorValue):
        # appended one by one as pulled: a producer reading the list sees it grow
        while (item := v.next(tx)) is not None:
            lst.items.append(item)
        return NONE
    lst.items.extend(v.unpack(tx))
    return NONE


def _list_insert(tx, lst, i, v):
    try:
        lst.items.insert(i.as_constant(), v)
    except TypeError as e:  # not an index: list's own message
        tx.raise_python_exception(e)
    return NONE


def _list_pop(tx, lst, i=None):
    idx = -1 if i is None else i.as_constant()
    try:
        check_release(lst.items[idx])
    except (IndexError, TypeError):
        pass
    try:
        return lst.items.pop(idx)
    except (IndexError, TypeError) as e:
        tx.raise_python_exception(e)


def _list_remove(tx, lst, v):
    k = _index(tx, lst.items, v)
    check_release(lst.items[k])
    del lst.items[k]
    return NONE


def _list_clear(tx, lst):
    for v in lst.items:
        check_release(v)
    lst.items.clear()
    return NONE


def _list_reverse(tx, lst):
    lst.items.reverse()
    return NONE


def sort_values(tx, items: List[Value], key: Optional[Value], reverse: bool, partial=None) -> List[Value]:
    """``items`` in ``sorted(items, key=key, reverse=reverse)`` order (stable);
    the keys must be constants once computed, or user instances (compared by
    their traced dunders).  ``partial``: a list that receives the order the
    sort left when a comparison raised (``list.sort`` leaves it so)."""
    if key is not None and is_none(key):
        key = None
    keys = [key.call(tx, [v], {}) if key is not None else v for v in items]
    from .user_operators import Ranked, any_user_instance, one_user_type
    if not all_constant(keys) and any_user_instance(keys):
        from ..errors import UserException
        same = one_user_type(keys)
        ranked = [Ranked(tx, k, v, same) for k, v in zip(keys, items)]
        try:
            ranked.sort(reverse=reverse)
        except UserException:
            if partial is not None:
                partial[:] = [r.item for r in ranked]
            raise
        return [r.item for r in ranked]
    if not all_constant(keys):
        raise Unsupported("sorting by values that are not constants", kind="unsupported_method",
                          hint="sort by shapes, ints or strings; tensor contents are not known while tracing")
    ks = [k.as_constant() for k in keys]
    try:
        order = sorted(range(len(items)), key=lambda i: ks[i], reverse=reverse)
    except TypeError as e:
        tx.raise_python_exception(e)
    return [items[i] for i in order]


def _list_sort(tx, lst, *, key=None, reverse=None):
    rev = bool(reverse.as_constant()) if reverse is not None else False
    lst.items[:] = sort_values(tx, lst.items, key, rev, partial=lst.items)
    return NONE


def _list_index(tx, lst, v, start=None, stop=None):
    return const(_index(tx, lst.items, v, start, stop))


def _list_count(tx, lst, v):
    return const(sum(1 for x in lst.items if _same(tx, x, v)))


def _list_copy(tx, lst):
    return ListValue(list(lst.items))


_LIST_METHODS = {
    "append": _list_append, "extend": _list_extend, "insert": _list_insert,
    "pop": _list_pop, "remove": _list_remove, "clear": _list_clear,
    "reverse": _list_reverse, "sort": _list_sort, "index": _list_index,
    "count": _list_count, "copy": _list_copy,
}


class RangeValue(Value):
    """A ``range`` with constant bounds (reconstructed as a constant)."""

    __slots__ = ("value",)

    def __init__(self, value: range):
        super().__init__()
        self.value = value

    def python_type(self):
        return range

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def has_len(self):
        return True

    def truth(self, tx):
        return bool(self.value)

    def unpack(self, tx):
        return [const(i) for i in self.value]

    def get_iter(self, tx):
        from .iterators import NewRangeIteratorValue
        return NewRangeIteratorValue(self)

    def get_attr(self, tx, name):
        if name in ("start", "stop", "step"):
            return const(getattr(self.value, name))
        return super().get_attr(tx, name)

    def reconstruct(self, cg):
        cg.load_object(self.value)


class SliceValue(Value):
    """A slice; components may be constants or symbolic (kept as values)."""

    __slots__ = ("parts",)

    def __init__(self, parts: List[Value]):
        super().__init__()
        self.parts = parts

    def python_type(self):
        return slice

    def is_constant(self):
        return all_constant(self.parts)

    def as_constant(self):
        return slice(*[p.as_constant() for p in self.parts])

    def children(self):
        return self.parts

    def get_attr(self, tx, name):
        if name in ("start", "stop", "step"):
            # BUILD_SLICE/slice() give 1 to 3 parts: (stop), (start, stop), (start, stop, step)
            parts = [NONE] + self.parts if len(self.parts) == 1 else list(self.parts)
            parts += [NONE] * (3 - len(parts))
            return parts[("start", "stop", "step").index(name)]
        return super().get_attr(tx, name)

    def reconstruct(self, cg):
        # ``slice(stop)`` has one part; BUILD_SLICE takes two or three
        parts = [NONE] + self.parts if len(self.parts) == 1 else self.parts
        for p in parts:
            cg.reconstruct(p)
        cg.emit("BUILD_SLICE", arg=len(parts))


class IteratorValue(Value):
    """An iterator over a finite list of values known at trace time.

    Stands for list/tuple/range/dict iterators, ``enumerate``, ``zip``,
    ``map``, ``reversed`` objects created during tracing.  ``next()``
    advances it; reconstruction rebuilds an iterator over the remaining items.
    """

    __slots__ = ("items", "pos")

    def __init__(self, items: List[Value]):
        super().__init__()
        self.items = items
        self.pos = 0

    def python_type(self):
        return type(iter([]))

    def next(self, tx) -> Optional[Value]:
        if self.pos >= len(self.items):
            return None
        v = self.items[self.pos]
        self.pos += 1
        return v

    def unpack(self, tx):
        rest = self.items[self.pos:]
        self.pos = len(self.items)
        return rest

    def children(self):
        return self.items[self.pos:]

    def reconstruct(self, cg):
        cg.push_callable(iter)
        for v in self.items[self.pos:]:
            cg.reconstruct(v)
        cg.emit("BUILD_TUPLE", arg=len(self.items) - self.pos)
        cg.call(1)


from .dicts import DictValue, DictViewValue  # noqa: E402,F401  (dicts.py builds on this module)
from .sets import SetValue  # noqa: E402  (sets.py builds on this module)

"""Handlers for operators, subscripts, building and unpacking containers, and strings."""

from __future__ import annotations

import collections.abc
import operator

from ..bytecode import SPEC
from ..errors import Unsupported
from ..values.constants import const
from ..values.generators import LazyIteratorValue
from ..values.containers import DictValue, ListValue, SetValue, SliceValue, TupleValue
from ..values.operators import (BINARY_OP_FUNCS, binary_op, compare, contains, delitem, getitem,
                                same_object, setitem, unary_op)
from ..values.tensors import TensorValue
from .registry import serves


class DataOps:
    # -- operators ---------------------------------------------------------------
    def BINARY_OP(self, ins):
        b = self.stack.pop()
        a = self.stack.pop()
        self.stack.append(binary_op(self, BINARY_OP_FUNCS[ins.arg], a, b))

    def COMPARE_OP(self, ins):
        b = self.stack.pop()
        a = self.stack.pop()
        result = compare(self, ins.argval, a, b)
        if ins.arg & SPEC.compare_bool_bit:
            result = const(result.truth(self))   # 3.13's ``if a < b`` (see versions.compare_bool_bit)
        self.stack.append(result)

    def IS_OP(self, ins):
        b = self.stack.pop()
        a = self.stack.pop()
        self.stack.append(const(same_object(self, a, b) != bool(ins.arg)))

    def CONTAINS_OP(self, ins):
        container = self.stack.pop()
        item = self.stack.pop()
        self.stack.append(const(contains(self, container, item) != bool(ins.arg)))

    def UNARY_NEGATIVE(self, ins):
        self.stack.append(unary_op(self, operator.neg, self.stack.pop()))

    def UNARY_POSITIVE(self, ins):
        self.stack.append(unary_op(self, operator.pos, self.stack.pop()))

    def UNARY_INVERT(self, ins):
        self.stack.append(unary_op(self, operator.invert, self.stack.pop()))

    def UNARY_NOT(self, ins):
        self.stack.append(const(not self.stack.pop().truth(self)))

    # -- subscripts ----------------------------------------------------------------
    def BINARY_SUBSCR(self, ins):
        index = self.stack.pop()
        obj = self.stack.pop()
        self.stack.append(getitem(self, obj, index))

    def STORE_SUBSCR(self, ins):
        index = self.stack.pop()
        obj = self.stack.pop()
        value = self.stack.pop()
        setitem(self, obj, index, value)

    def DELETE_SUBSCR(self, ins):
        index = self.stack.pop()
        obj = self.stack.pop()
        delitem(self, obj, index)

    def BUILD_SLICE(self, ins):
        self.stack.append(SliceValue(self.popn(ins.arg)))

    # -- building containers -------------------------------------------------------
    def BUILD_TUPLE(self, ins):
        self.stack.append(TupleValue(self.popn(ins.arg)))

    def BUILD_LIST(self, ins):
        self.stack.append(ListValue(self.popn(ins.arg)))

    def BUILD_SET(self, ins):
        self.stack.append(SetValue(self.popn(ins.arg)))

    def BUILD_MAP(self, ins):
        flat = self.popn(2 * ins.arg)
        self.stack.append(DictValue.from_pairs(zip(flat[::2], flat[1::2]), tx=self))

    def BUILD_CONST_KEY_MAP(self, ins):
        keys = self.stack.pop().as_constant()
        values = self.popn(ins.arg)
        self.stack.append(DictValue.from_pairs(zip([const(k) for k in keys], values)))

    # The container these build is usually new, but after a graph break it is
    # a pre-existing object handed to a resume function: always note the mutation.
    def _built(self, ins, cls, popped=1):
        """The container a LIST_APPEND/SET_ADD/MAP_ADD... adds to.  After a
        break it is a pre-existing object the resume function was handed,
        which the builder may not have been able to model (a set of objects
        with their own ``__eq__``): then the add runs natively."""
        target = self.stack[-ins.arg - popped]  # (peeked before the operands are popped)
        if not isinstance(target, cls):
            raise Unsupported(f"adding to a {target.type_name()} the tracer does not model",
                              kind="unsupported_container")
        return target

    def LIST_APPEND(self, ins):
        target = self._built(ins, ListValue)
        v = self.stack.pop()
        self.side_effects.mutate(target)
        target.items.append(v)

    def SET_ADD(self, ins):
        target = self._built(ins, SetValue)
        target.add(self, self.stack.pop())

    def MAP_ADD(self, ins):
        target = self._built(ins, DictValue, popped=2)
        value = self.stack.pop()
        key = self.stack.pop()
        # an equal key already there keeps its key object, as PyDict_SetItem does
        target.setitem(self, key, value)

    def LIST_EXTEND(self, ins):
        target = self._built(ins, ListValue)
        v = self.stack.pop()
        from ..values.objects import length_hint
        length_hint(self, v)
        self.side_effects.mutate(target)
        target.items.extend(v.unpack(self))

    def SET_UPDATE(self, ins):
        target = self._built(ins, SetValue)
        target.update_from(self, self.stack.pop())

    def DICT_UPDATE(self, ins):
        target = self._built(ins, DictValue)
        v = self.stack.pop()
        if not isinstance(v, DictValue):
            raise Unsupported(f"dict update from a {v.type_name()}", kind="unsupported_dict")
        self.side_effects.mutate(target)
        for k, value in list(v.entries.values()):
            target.put(k, value)

    def DICT_MERGE(self, ins):
        target = self._built(ins, DictValue)
        v = self.stack.pop()
        if not isinstance(v, DictValue):
            raise Unsupported(f"** from a {v.type_name()}", kind="unsupported_dict")
        for k in v.entries:
            if k in target.entries:
                self.raise_python_exception(TypeError(f"got multiple values for keyword argument {k[1]!r}"))
        self.side_effects.mutate(target)
        for k, value in list(v.entries.values()):
            target.put(k, value)

    def LIST_TO_TUPLE(self, ins):
        self.stack.append(TupleValue(self.stack.pop().items))

    # -- unpacking -----------------------------------------------------------------
    def UNPACK_SEQUENCE(self, ins):
        v = self.stack.pop()
        if isinstance(v, LazyIteratorValue):
            # Python pulls one item past the targets (to see there are not too many), no more
            items = []
            while len(items) <= ins.arg and (item := v.next(self)) is not None:
                items.append(item)
        else:
            items = v.unpack(self)
        if len(items) != ins.arg:
            if len(items) > ins.arg:
                self.raise_python_exception(ValueError(f"too many values to unpack (expected {ins.arg})"))
            self.raise_python_exception(ValueError(
                f"not enough values to unpack (expected {ins.arg}, got {len(items)})"))
        self.stack.extend(reversed(items))

    def UNPACK_EX(self, ins):
        before = ins.arg & 0xFF
        after = ins.arg >> 8
        items = self.stack.pop().unpack(self)
        if len(items) < before + after:
            self.raise_python_exception(ValueError(
                f"not enough values to unpack (expected at least {before + after}, got {len(items)})"))
        middle = ListValue(items[before:len(items) - after])
        out = items[:before] + [middle] + items[len(items) - after:]
        self.stack.extend(reversed(out))

    # -- structural pattern matching (``match``) ---------------------------------------
    def GET_LEN(self, ins):
        from ..values.builtins_table import BUILTIN_HANDLERS
        self.stack.append(BUILTIN_HANDLERS[len](self, [self.stack[-1]], {}))

    # CPython decides these by the type's Py_TPFLAGS_SEQUENCE / Py_TPFLAGS_MAPPING bits (set on the
    # abc's registered classes and inherited along the MRO's first such base), not by issubclass
    # against the abc's: a class deriving from both a mapping and a sequence matches only as the one
    # whose flag it inherited, and an abc-registered class matches without inheriting.
    _TPFLAGS_SEQUENCE = 1 << 5
    _TPFLAGS_MAPPING = 1 << 6

    def MATCH_SEQUENCE(self, ins):
        t = self.stack[-1].python_type()
        self.stack.append(const(bool(t.__flags__ & self._TPFLAGS_SEQUENCE)))

    def MATCH_MAPPING(self, ins):
        t = self.stack[-1].python_type()
        self.stack.append(const(bool(t.__flags__ & self._TPFLAGS_MAPPING)))

    def MATCH_KEYS(self, ins):
        keys = self.stack[-1].unpack(self)
        subject = self.stack[-2]
        if not isinstance(subject, DictValue):
            raise Unsupported(f"`match` of a mapping pattern against a {subject.type_name()}",
                              kind="unsupported_match")
        if all(subject.contains(k) for k in keys):
            self.stack.append(TupleValue([subject.getitem(self, k) for k in keys]))
        else:
            self.stack.append(const(None))

    # -- strings ---------------------------------------------------------------------
    @serves(until=(3, 12))
    def FORMAT_VALUE(self, ins):
        spec = self.stack.pop() if ins.arg & 0x04 else None
        value = self.stack.pop()
        self.stack.append(self._format(value, ins.arg & 0x03, spec))

    @serves(since=(3, 13))
    def CONVERT_VALUE(self, ins):
        self.stack.append(self._format(self.stack.pop(), ins.arg, None, convert_only=True))

    @serves(since=(3, 13))
    def FORMAT_SIMPLE(self, ins):
        self.stack.append(self._format(self.stack.pop(), 0, None))

    @serves(since=(3, 13))
    def FORMAT_WITH_SPEC(self, ins):
        spec = self.stack.pop()
        self.stack.append(self._format(self.stack.pop(), 0, spec))

    def _format(self, value, conv: int, spec, convert_only: bool = False):
        """An f-string part: ``value`` converted (1 str, 2 repr, 3 ascii), then formatted with ``spec``."""
        if isinstance(value, TensorValue) or not value.is_constant():
            raise Unsupported(f"formatting a {value.type_name()} in an f-string", kind="unsupported_format",
                              hint="only constants can be formatted inside compiled functions")
        v = value.as_constant()
        try:
            if conv == 1:
                v = str(v)
            elif conv == 2:
                v = repr(v)
            elif conv == 3:
                v = ascii(v)
            if convert_only:
                return const(v)
            text = format(v, "" if spec is None else spec.as_constant())
        except Exception as e:  # noqa: BLE001 - a bad spec ("{1:,,}"), a too long int: the program's error
            self.raise_python_exception(e)
        return const(text)

    def BUILD_STRING(self, ins):
        parts = self.popn(ins.arg)
        self.stack.append(const("".join(p.as_constant() for p in parts)))

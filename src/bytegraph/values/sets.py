"""Sets and frozensets, with CPython's iteration order.

A real set iterates in the order of its hash table, which depends on how the
set was built (the sequence of inserts, deletes and merges), not only on its
elements.  So a set value remembers *how* it was built, as a recipe of the
operations the program applied:

* ``("add", v)``, ``("discard", v)``, ``("clear",)``: one element at a time;
* a start from another object: ``("call", set_or_frozenset, source)`` for
  ``set(other_set_or_dict)``, ``("method", name, receiver, args)`` for
  ``a.union(b)`` and friends, ``("binop", op, a, b)`` for ``a | b``.

In the trace the order comes from running that recipe on real constants (a
shadow set built exactly as eager builds it); a set that gets out of the
trace is rebuilt natively by the same recipe.  Where no recipe is known (the
elements are objects hashed by identity, a source the tracer cannot rebuild)
nothing that depends on the order is traced: it breaks instead.

A pre-existing set starts from its real state (in the real order); its
in-place operations are replayed one by one on the real object.
"""

from __future__ import annotations

import operator
from typing import Dict, List, Optional

from ..errors import Unsupported
from .base import Value, check_release
from .constants import NONE, ConstantValue, const

#: the set operators a recipe may start from
BINOPS = {"or": operator.or_, "and": operator.and_, "sub": operator.sub, "xor": operator.xor}
#: methods that make a new set from the receiver and arguments
NEW_SET_METHODS = ("union", "intersection", "difference", "symmetric_difference", "copy")


class SetValue(Value):
    """A set or frozenset (``frozen``) of constants or identity-hashed objects.

    ``elements`` maps each element's key (``key_of``) to its value, in the
    order the elements were first added; ``recipe`` is how eager builds the
    real set (see the module docstring), or None when unknown.  A
    pre-existing set (``existing``) has a source; its recipe lists only the
    operations made during the trace.  Reconstructs by running the recipe.
    """

    __slots__ = ("elements", "frozen", "recipe", "existing", "version")

    def __init__(self, items: List[Value], source=None, frozen=False, existing=None):
        super().__init__(source)
        from .containers import key_of
        self.elements: Dict[object, Value] = {}
        for v in items:
            self.elements.setdefault(key_of(v), v)
        self.frozen = frozen
        #: the real set, for a pre-existing one
        self.existing = existing
        # a new set is by default built by adding ``items`` one by one (BUILD_SET,
        # set(list)); a pre-existing one logs what the trace does to it
        self.recipe: Optional[list] = [] if existing is not None else [("add", v) for v in items]
        #: counts elements added and removed (an iterator notices a change
        #: that keeps the size)
        self.version = 0

    @staticmethod
    def unknown(items: List[Value], frozen: bool = False) -> "SetValue":
        """A new set whose build order is not known."""
        s = SetValue(items, frozen=frozen)
        s.recipe = None
        return s

    def python_type(self):
        return frozenset if self.frozen else set

    def real_object(self):
        # a pre-existing frozenset is not in the side-effect table (nothing to
        # replay on it), so one object read through two paths is two values:
        # ``is`` must compare the real objects
        if self.frozen and self.existing is not None:
            return (self.existing,)
        return None

    def has_len(self):
        return True

    def truth(self, tx):
        return bool(self.elements)

    def children(self):
        yield from self.elements.values()
        for step in self.recipe or ():
            yield from (a for a in _recipe_values(step))

    def contains(self, v: Value) -> bool:
        from .containers import key_of
        return key_of(v) in self.elements

    # -- order -----------------------------------------------------------------
    def shadow(self):
        """A real set built exactly as eager builds this one, or None."""
        if self.existing is not None:
            # unchanged: the real set itself; changed: its table layout is not known here
            return None if self.recipe else self.existing
        return _run_recipe(self.frozen, self.recipe, _real_arg)

    def ordered(self, what: str = "iterating over") -> List[Value]:
        """The elements in the real set's iteration order."""
        values = list(self.elements.values())
        if len(values) <= 1 or (self.existing is not None and not self.recipe):
            return values  # wrapped in the real order, and not changed since
        real = self.shadow()
        if real is None:
            raise Unsupported(f"{what} a set whose iteration order the trace cannot know",
                              kind="unsupported_set", hint="it runs natively between graphs")
        from .containers import key_of
        by_key = {key_of(const(x)): None for x in real}
        return [self.elements[k] for k in by_key]

    def get_iter(self, tx):
        from .iterators import SizedIteratorValue
        return SizedIteratorValue(self.ordered(), self, lambda: len(self.elements), "set", "set")

    def unpack(self, tx):
        return self.ordered()

    # -- in-place operations (each one logged) ---------------------------------
    def _log(self, step) -> None:
        if self.recipe is not None:
            self.recipe.append(step)

    def add(self, tx, v: Value) -> None:
        from .containers import key_of
        k = key_of(v)
        tx.side_effects.mutate(self)
        self._log(("add", v))
        if k not in self.elements:
            self.version += 1
            self.elements[k] = v

    def discard(self, tx, v: Value) -> None:
        from .containers import key_of
        k = key_of(v)
        if k in self.elements:
            check_release(self.elements[k])
        tx.side_effects.mutate(self)
        self._log(("discard", v))
        if self.elements.pop(k, None) is not None:
            self.version += 1

    def clear(self, tx) -> None:
        for v in self.elements.values():
            check_release(v)
        tx.side_effects.mutate(self)
        self._log(("clear",))
        self.version += bool(self.elements)
        self.elements.clear()

    def update_from(self, tx, source: Value) -> None:
        """``s.update(source)`` / ``{*a, *source}``: a set or dict source merges
        (CPython sizes the table for it first); any other is added item by item."""
        from .containers import DictValue, DictViewValue
        if isinstance(source, (SetValue, DictValue)) or isinstance(source, DictViewValue) \
                or source.is_constant() and isinstance(source.as_constant(), (set, frozenset, dict)):
            items = source.unpack(tx) if not isinstance(source, SetValue) else list(source.elements.values())
            operand = self._operand(tx, source)
            tx.side_effects.mutate(self)
            self._log(("update", operand))
            from .containers import key_of
            for v in items:
                k = key_of(v)
                if k not in self.elements:
                    self.version += 1
                    self.elements[k] = v
            return
        for v in source.unpack(tx):
            self.add(tx, v)

    def _operand(self, tx, source: Value) -> Optional[Value]:
        """``source`` as it is now, for this set's recipe (see :func:`snapshot`).
        Where its state cannot be rebuilt, a pre-existing set (whose recipe
        is replayed on the real object) cannot take the operation: it breaks
        before it; a new set no longer knows its order."""
        operand = snapshot(tx, source)
        if operand is None:
            if self.existing is not None:
                raise Unsupported("updating a set from a set whose contents at that point the trace cannot "
                                  "rebuild", kind="unsupported_set", hint="it runs natively between graphs")
            self.recipe = None
        return operand

    # -- methods ---------------------------------------------------------------
    def call_method(self, tx, name, args, kwargs):
        el = self.elements
        if kwargs:
            return super().call_method(tx, name, args, kwargs)
        if not self.frozen:
            if name == "add" and len(args) == 1:
                self.add(tx, args[0])
                return NONE
            if name in ("discard", "remove") and len(args) == 1:
                from .containers import key_of
                if key_of(args[0]) not in el and name == "remove":
                    tx.raise_python_exception(KeyError(args[0].as_constant() if args[0].is_constant() else "item"))
                self.discard(tx, args[0])
                return NONE
            if name == "update":
                for a in args:
                    self.update_from(tx, a)
                return NONE
            if name == "clear" and not args:
                self.clear(tx)
                return NONE
            if name == "pop" and not args:
                if not el:
                    tx.raise_python_exception(KeyError("pop from an empty set"))
                first = self.ordered("popping from")[0]
                self.discard(tx, first)
                return first
        if name == "copy" and not args and self.frozen and type(self) is SetValue:
            return self  # an exact frozenset's copy is itself
        if name in NEW_SET_METHODS and all(_is_operand(a) for a in args):
            return self._new_from(tx, name, args)
        if name in ("issubset", "issuperset", "isdisjoint") and len(args) == 1 and _is_operand(args[0]):
            mine = set(el)
            other = set(_keys(tx, args[0]))
            return const(getattr(mine, name)(other))
        return super().call_method(tx, name, args, kwargs)

    def _new_from(self, tx, name: str, args: List[Value]) -> "SetValue":
        """``self.<name>(*args)``: the elements by key arithmetic, the order by recipe."""
        from .containers import key_of
        keys = set(el for el in self.elements)
        merged = dict(self.elements)
        for a in args:
            vals = {key_of(v): v for v in _values(tx, a)}
            for k, v in vals.items():
                merged.setdefault(k, v)
            if name == "union":
                keys |= set(vals)
            elif name == "intersection":
                keys &= set(vals)
            elif name == "difference":
                keys -= set(vals)
            elif name == "symmetric_difference":
                keys ^= set(vals)
        out = SetValue([merged[k] for k in merged if k in keys], frozen=self.frozen)
        operands = [snapshot(tx, v) for v in [self, *args]]
        out.recipe = None if None in operands else [("method", name, operands[0], operands[1:])]
        return out

    def binop(self, tx, opname: str, other: "SetValue", in_place: bool) -> "SetValue":
        """``self <op> other`` (``|``, ``&``, ``-``, ``^``), or in place (``|=``...)."""
        mine, theirs = set(self.elements), set(other.elements)
        keys = BINOPS[opname](mine, theirs)
        merged = {**other.elements, **self.elements}
        if in_place:
            operand = self._operand(tx, other)
            for k in mine - keys:
                check_release(self.elements[k])
            tx.side_effects.mutate(self)
            self._log(("ibinop", opname, operand))
            if keys != mine:
                self.version += 1
            self.elements = {k: merged[k] for k in merged if k in keys}
            return self
        out = SetValue([merged[k] for k in merged if k in keys], frozen=self.frozen)
        a, b = snapshot(tx, self), snapshot(tx, other)
        out.recipe = None if a is None or b is None else [("binop", opname, a, b)]
        return out

    # -- rebuilding ------------------------------------------------------------
    def reconstruct(self, cg):
        if self.existing is not None:
            self.source.emit_load(cg)  # (its in-place operations are replayed, see replay_ops)
            return
        if self.recipe is None:
            raise Unsupported("a set whose build order is not known gets out of the trace",
                              kind="unreconstructable", hint="the frame runs eagerly")
        if all(step[0] == "add" for step in self.recipe):
            # BUILD_SET adds its items one by one, as the recipe says
            if self.frozen:
                cg.push_callable(frozenset)
            for step in self.recipe:
                cg.reconstruct(step[1])
            cg.emit("BUILD_LIST" if self.frozen else "BUILD_SET", arg=len(self.recipe))
            if self.frozen:
                cg.call(1)
            return
        cg.push_callable(run_recipe)
        cg.load_object(self.frozen)
        emit_recipe(cg, self.recipe)
        cg.call(2)

    def replay_ops(self, cg) -> None:
        """Apply this pre-existing set's logged operations to the real object."""
        cg.push_callable(apply_recipe)
        cg.load_target(self)
        emit_recipe(cg, self.recipe)
        cg.call(2)
        cg.emit("POP_TOP")


# -- recipes -------------------------------------------------------------------
def _recipe_values(step):
    for part in step[1:]:
        if isinstance(part, Value):
            yield part
        elif isinstance(part, list):
            yield from (p for p in part if isinstance(p, Value))


def snapshot(tx, v: Value) -> Optional[Value]:
    """``v`` as it is at this point of the trace, for a recipe that runs later
    (the shadow set in the trace, the rebuild after the graph), or None when
    that state cannot be rebuilt.

    A recipe runs long after the operation it records, so an operand the
    trace changes in between must not change what the operation computed
    (``t = u | {7}; u.add(3)``: ``t`` has no 3).  A new set is copied with its
    build history, a list becomes a tuple of its items (set operations
    iterate both alike), a dict is copied with its class (exact dicts merge
    by a path of their own).  A pre-existing set stands for itself while the
    trace has not changed it: the rebuild after the graph reads it before any
    change is replayed, and :func:`emit_recipe` refuses one changed later.
    """
    from .containers import BaseListValue, DictValue, DictViewValue, TupleValue
    if isinstance(v, SetValue):
        if v.frozen:
            return v
        if v.existing is not None:
            return None if v.recipe else v
        if v.recipe is None:
            return None
        copy = SetValue([])
        copy.elements = dict(v.elements)
        copy.recipe = list(v.recipe)
        return copy
    if isinstance(v, TupleValue):
        return v
    if isinstance(v, BaseListValue):
        return TupleValue(list(v.items))
    if isinstance(v, DictValue):
        if v.table is not None:
            return None   # (an OrderedDict whose own order is not its table's)
        return DictValue(dict(v.entries), cls=v.cls, default_factory=v.default_factory)
    if isinstance(v, DictViewValue):
        return TupleValue(list(v.unpack(tx)))
    return v


def _is_operand(v: Value) -> bool:
    from .containers import BaseListValue, DictValue
    return isinstance(v, (SetValue, BaseListValue, DictValue)) or v.is_constant()


def _values(tx, v: Value) -> List[Value]:
    if isinstance(v, SetValue):
        return list(v.elements.values())
    return v.unpack(tx)


def _keys(tx, v: Value):
    from .containers import key_of
    return [key_of(x) for x in _values(tx, v)]


def _real_arg(v):
    """The real object standing for recipe argument ``v`` in a simulation, or
    raise LookupError when there is none (the order is then unknown)."""
    from .containers import BaseListValue, DictValue, RangeValue
    if isinstance(v, SetValue):
        real = v.shadow()
        if real is None:
            raise LookupError
        return real
    if isinstance(v, ConstantValue) or isinstance(v, RangeValue):
        return v.as_constant()
    if isinstance(v, BaseListValue):
        return [_real_arg(x) for x in v.items]
    if isinstance(v, DictValue):
        return dict.fromkeys(_real_arg(k) for k, _ in v.entries.values())
    if v.is_constant():
        return v.as_constant()
    raise LookupError


def _run_recipe(frozen: bool, recipe, real_of):
    if recipe is None:
        return None
    try:
        return run_recipe(frozen, [tuple(real_of(p) if isinstance(p, Value) else
                                         [real_of(x) for x in p] if isinstance(p, list) else p
                                         for p in step) for step in recipe])
    except (LookupError, TypeError):
        return None


def run_recipe(frozen: bool, recipe):
    """Build a new set (a frozenset if ``frozen``) as ``recipe`` says; the
    arguments in ``recipe`` are real objects."""
    start = recipe[0] if recipe and recipe[0][0] in ("binop", "method", "call") else None
    steps = recipe[1:] if start is not None else recipe
    if start is None:
        if frozen:
            return frozenset([step[1] for step in steps])  # a frozenset is only ever built by adds
        s = set()
    elif start[0] == "binop":
        s = BINOPS[start[1]](start[2], start[3])
    elif start[0] == "method":
        s = getattr(start[2], start[1])(*start[3])
    else:
        s = start[1](start[2])
    return apply_recipe(s, steps)


def apply_recipe(s, steps):
    """Apply in-place recipe steps to the real set ``s``; returns ``s``."""
    for step in steps:
        kind = step[0]
        if kind == "add":
            s.add(step[1])
        elif kind == "discard":
            s.discard(step[1])
        elif kind == "clear":
            s.clear()
        elif kind == "update":
            s.update(step[1])
        elif kind == "ibinop":
            if step[1] == "or":
                s |= step[2]
            elif step[1] == "and":
                s &= step[2]
            elif step[1] == "sub":
                s -= step[2]
            else:
                s ^= step[2]
    return s


def emit_recipe(cg, recipe) -> None:
    """Push ``recipe`` as a list of tuples of real objects."""
    for step in recipe:
        for part in step:
            if isinstance(part, SetValue) and part.existing is not None and not part.frozen and part.recipe:
                # (an operand used unchanged, changed afterwards: the real
                # object no longer holds what the operation saw)
                raise Unsupported("a set built from a pre-existing set that the trace changes afterwards "
                                  "gets out of the trace", kind="unreconstructable",
                                  hint="the frame runs eagerly")
            if isinstance(part, Value):
                cg.reconstruct(part)
            elif isinstance(part, list):
                for x in part:
                    cg.reconstruct(x)
                cg.emit("BUILD_LIST", arg=len(part))
            else:
                cg.load_object(part)
        cg.emit("BUILD_TUPLE", arg=len(step))
    cg.emit("BUILD_LIST", arg=len(recipe))

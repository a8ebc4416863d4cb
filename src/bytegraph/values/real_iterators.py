"""Real iterators that existed before the trace (a ``for`` loop's iterator
carried across a graph break into a resume function, an iterator passed in).

Python exposes neither what such an iterator walks nor where it is, except
through ``__reduce__`` (list, tuple and range iterators: the sequence and
the index) and the garbage collector's view of its references (dict
iterators: the dict).  :func:`iterator_container` and
:func:`iterator_state` read them; guards compare them through
``IteratorPartSource``; the trace then steps a model of the iterator against
the container's value (so mutations in the trace are seen, as in Python),
and the real iterator is advanced by as many steps after the graph.
"""

from __future__ import annotations

import gc
import itertools

from .. import config
from ..errors import Unsupported
from ..guards import Guard
from ..sources import ItemSource, IteratorPartSource
from .containers import DictValue, IteratorValue, ListValue, RangeValue, TupleValue
from .constants import const
from .generators import EnumerateValue, ZipValue
from .iterators import DictIteratorValue, ListIteratorValue, SequenceIteratorAtValue, _SteppedIterator
from .objects import OpaqueValue

_LIST_ITERATOR = type(iter([]))
_TUPLE_ITERATOR = type(iter(()))
_RANGE_ITERATORS = (type(iter(range(0))), type(iter(range(2 ** 64))))
#: iterators over immutable constants: str (ASCII or not) and bytes
_CONSTANT_ITERATORS = (type(iter("")), type(iter("\u00e9")), type(iter(b"")))
_SEQUENCE_ITERATORS = (_LIST_ITERATOR, _TUPLE_ITERATOR) + _RANGE_ITERATORS + _CONSTANT_ITERATORS
#: dict iterator type -> what it yields
_DICT_ITERATORS = {type(iter({})): "keys", type(iter({}.values())): "values", type(iter({}.items())): "items"}

#: the iterator types :func:`wrap_real_iterator` models (enumerate and zip over those)
REAL_ITERATOR_TYPES = frozenset(_SEQUENCE_ITERATORS) | frozenset(_DICT_ITERATORS) | {enumerate, zip}


def iterator_container(it):
    """The sequence or dict real iterator ``it`` walks; None once it is exhausted
    (CPython's iterators drop their container then).  An enumerate's is the
    iterator it pulls from, a zip's the tuple of its iterators."""
    t = type(it)
    if t is enumerate:
        return it.__reduce__()[1][0]
    if t is zip:
        return it.__reduce__()[1]
    if t in _DICT_ITERATORS:
        # a dict iterator holds its dict (until exhausted) and, for items, a result tuple
        return next((r for r in gc.get_referents(it) if isinstance(r, dict)), None)
    reduced = it.__reduce__()
    return reduced[1][0] if len(reduced) == 3 else None


def iterator_state(it):
    """Where real iterator ``it`` is: ``("at", index)`` (the index of its next
    item in its container's order) or ``("exhausted",)``.

    A dict iterator's place in the dict's table is hidden; its
    ``__reduce__`` lists what it would still yield (from a copy, so ``it``
    does not move; it raises ``RuntimeError`` if the dict changed under
    it).  When that is the dict's last items, the iterator is exactly at
    their index; otherwise (keys replaced under it) ``("unknown",)``.
    An enumerate's state is its count, a zip's whether it is strict."""
    t = type(it)
    if t is enumerate:
        return ("count", it.__reduce__()[1][1])
    if t is zip:
        return ("strict", len(it.__reduce__()) == 3)
    kind = _DICT_ITERATORS.get(t)
    if kind is None:
        reduced = it.__reduce__()
        if len(reduced) != 3:
            return ("exhausted",)
        # (from 3.12 a range iterator reduces to the range still ahead, at no index)
        return ("at", reduced[2] if reduced[2] is not None else 0)
    d = iterator_container(it)
    if d is None:
        return ("exhausted",)
    rest = it.__reduce__()[1][0]
    pos = len(d) - len(rest)
    if pos < 0:
        return ("unknown",)
    # dict's own views: a subclass's keys()/values()/items() overrides are not what the iterator walks
    tail = itertools.islice(iter(getattr(dict, kind)(d)), pos, None)
    if kind == "items":
        same = all(a[0] is b[0] and a[1] is b[1] for a, b in zip(rest, tail))
    else:
        same = all(a is b for a, b in zip(rest, tail))
    return ("at", pos) if same else ("unknown",)


class ExistingIteratorValue(_SteppedIterator):
    """A real list, tuple, range, str, bytes or dict iterator (or an
    enumerate or zip over those) from before the trace.

    It stays the same object: it is loaded from its source.  The first
    ``next`` makes ``inner``, a model of it over its container's value from
    its current position (guarding both); the trace steps the model
    (``steps`` counts the ``next`` calls), and after the graph the real
    iterator is advanced by as many (a side effect, replayed in order with
    the others).  A step that raised (``broken``: a dict that changed size)
    is not replayed: Unsupported.

    A loop resumed after a break at every iteration would compile its
    resume function once per position: once a call finds the iterator
    elsewhere than a trace guarded, the frame's policy lists its source and
    later traces leave it to run natively (no position guard)."""

    __slots__ = ("real", "inner", "real_type", "steps", "broken")

    def __init__(self, real, source):
        super().__init__([])
        self.real, self.real_type, self.source = real, type(real), source
        self.inner = None
        self.steps = 0
        self.broken = False

    def python_type(self):
        return self.real_type

    def model(self, tx) -> IteratorValue:
        if self.inner is None:
            if tx.trace.policy.iterator_moves(self.source.name()):
                raise Unsupported(f"the rest of a loop over a {self.real_type.__name__}, resumed after a break in "
                                  "its body", kind="resumed_loop",
                                  hint="the loop runs natively, each iteration's body compiled once for all")
            self.inner = _real_model(tx, self.real, self.source)
        return self.inner

    def next(self, tx):
        inner = self.model(tx)
        self.steps += 1
        tx.side_effects.mutate(self)
        try:
            return inner.next(tx)
        except Unsupported:
            raise
        except Exception:
            self.broken = True  # the program's exception (RuntimeError); the real iterator would be broken too
            raise

    def children(self):
        return self.inner.children() if self.inner is not None else ()

    def emit_replay(self, cg) -> None:
        """Advance the real iterator as the trace did."""
        if self.broken:
            raise Unsupported("a real dict iterator that raised in the trace gets out of it",
                              kind="unreconstructable", hint="the frame runs eagerly")
        if any(d.key_log for d in _dicts_walked(self.inner)):
            # the replay of the dict (in first-change order) may come before
            # this advance: it would walk another table than eager's did
            raise Unsupported("a real dict iterator whose dict's keys the trace changed gets out of it",
                              kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(advance_iterator)
        cg.load_target(self)
        cg.load_object(self.steps)
        cg.call(2)
        cg.emit("POP_TOP")


def _dicts_walked(model):
    """The dict values a model of a real iterator walks."""
    if isinstance(model, DictIteratorValue):
        return [model.dict_value]
    if isinstance(model, EnumerateValue):
        return _dicts_walked(model.it)
    if isinstance(model, ZipValue):
        return [d for it in model.iters for d in _dicts_walked(it)]
    return []


def advance_iterator(it, steps: int):
    """Call ``next(it)`` ``steps`` times (the last may find it exhausted)."""
    for _ in range(steps):
        if next(it, _END) is _END:
            break
    return it


_END = object()


def wrap_real_iterator(tx, it, source) -> ExistingIteratorValue:
    """The value of real iterator ``it`` read from ``source`` (its container
    and position are read, and guarded, when the trace steps it)."""
    tx.guards.add(Guard("TYPE_MATCH", source, type(it)))
    value = ExistingIteratorValue(it, source)
    tx.side_effects.track_existing(it, value)
    return value


def _real_model(tx, it, source) -> IteratorValue:
    """The model of real iterator ``it`` (from ``source``), guarded."""
    from .builder import wrap
    guards = tx.guards
    t = type(it)
    guards.add(Guard("TYPE_MATCH", source, t))
    try:
        state = iterator_state(it)
    except RuntimeError:
        # a dict that changed under it: its next step raises, which is not modelled
        raise Unsupported(f"a {t.__name__} whose dict changed during the iteration", kind="unsupported_iter") from None
    if state[0] == "unknown":
        raise Unsupported(f"a {t.__name__} whose position in its dict is unknown (keys replaced under it)",
                          kind="unsupported_iter")
    guards.add(Guard("CONSTANT_MATCH", IteratorPartSource(source, "state"), state))
    if state[0] == "exhausted":
        return IteratorValue([])
    if t is enumerate:
        inner = IteratorPartSource(source, "container")
        return EnumerateValue(_component_model(tx, iterator_container(it), inner), state[1])
    if t is zip:
        inners = iterator_container(it)
        parts = IteratorPartSource(source, "container")
        guards.add(Guard("LEN_MATCH", parts, len(inners)))
        return ZipValue([_component_model(tx, sub, ItemSource(parts, i)) for i, sub in enumerate(inners)], state[1])
    return _model(tx, wrap, it, t, source, state[1])


def _component_model(tx, it, source) -> IteratorValue:
    """The model of the real iterator an enumerate or zip pulls from.  Only
    that enumerate or zip may step it in the trace (the replay advances
    the enumerate or zip, which advances it): read another way, it is
    opaque."""
    if tx.side_effects.existing(it) is not None:
        raise Unsupported("an iterator walked both by itself and through an enumerate or zip",
                          kind="unsupported_iter")
    if type(it) not in REAL_ITERATOR_TYPES:
        raise Unsupported(f"an enumerate or zip over a {type(it).__name__}", kind="unsupported_iter")
    model = _real_model(tx, it, source)
    tx.side_effects.track_existing(it, OpaqueValue(it, source, f"using a {type(it).__name__} that an enumerate or "
                                                   "zip also walks", "unsupported_iter", "it runs natively between graphs"))
    return model


def _model(tx, wrap, it, t, source, pos: int) -> IteratorValue:
    """The model of ``it`` (not exhausted, next item at ``pos``) over its container's value."""
    container = iterator_container(it)
    cv = wrap(tx, container, IteratorPartSource(source, "container"))
    if t is _LIST_ITERATOR and isinstance(cv, ListValue):
        inner = ListIteratorValue(cv)
        inner.pos = pos
        return inner
    if t is _TUPLE_ITERATOR and type(cv) is TupleValue:
        inner = SequenceIteratorAtValue(cv.items, cv, t, ())
        inner.pos = pos
        return inner
    if t in _RANGE_ITERATORS and isinstance(cv, RangeValue) or t in _CONSTANT_ITERATORS and cv.is_constant():
        if len(container) > config.max_generator_items:
            raise Unsupported(f"a {t.__name__} over {len(container)} items", kind="unsupported_iter")
        empty = range(0) if t in _RANGE_ITERATORS else type(container)()
        inner = SequenceIteratorAtValue([const(i) for i in container], cv, t, empty)
        inner.pos = pos
        return inner
    if t in _DICT_ITERATORS and isinstance(cv, DictValue):
        if cv.key_log:
            # the trace already inserted or deleted keys: the position read
            # from the real dict no longer indexes the value's entries
            raise Unsupported(f"a {t.__name__} over a dict whose keys the trace changed before using it",
                              kind="unsupported_iter")
        return DictIteratorValue(cv, _DICT_ITERATORS[t], pos=pos, size=len(container))
    raise Unsupported(f"iterating a {t.__name__} over a {cv.type_name()}", kind="unsupported_iter")

"""Calls of ``functools.lru_cache`` / ``functools.cache`` wrappers.

A call of a cache wrapper is either a *hit* (the stored result object comes
back; the only effects are the hit counter and, for a bounded cache, the
entry moving to the recent end of the LRU order) or a *miss* (the wrapped
function runs, with all its effects, the result is stored, maybe evicting
another entry, and the miss counter moves).  Tracing ``__wrapped__`` for
every call (what ignoring the cache would do) is wrong on both counts:
results lose their identity (a cached list or tensor is a new object each
call) and the function's effects happen on every call instead of once.

What is captured, exactly, is the hit whose arguments are literals or
pre-existing objects hashed by identity (a method's ``self``, a class):

* at trace time the key CPython would build from the arguments
  (``make_key``, CPython's ``lru_cache_make_key``) is looked up in the
  wrapper's real cache table, reached with ``gc.get_referents`` (which walks
  the C object's fields: no program code runs).  The lookup compares keys
  with ``==`` only when every stored key is made of literals, identity-hashed
  objects, classes and the keyword marker, whose equality and hash run no
  program code and agree with the dict's own lookup; identity-hashed
  arguments are guarded by identity;
* the call's value is the stored result object itself (wrapped by identity,
  so a cached list or tensor keeps its identity and its mutations replay on
  it);
* a guard (``LRU_CACHED``) checks on every entry to the compiled code that
  the wrapper still maps that key to that very object (``cache_clear()``,
  evictions and re-insertions all change that);
* the real call is replayed after the graph with the same arguments
  (``SideEffects.defer_call``): given the guard it is a hit, so it runs no
  program code and moves the counters and the LRU order exactly as the eager
  call would.  Nothing traced can observe them in between: ``cache_info``
  and ``cache_clear`` are C methods, whose calls break (after the replay).

A miss is a clean graph break: the call runs natively, exactly once (its
effects, the insertion, the miss counter).  The entry that breaks keeps an
``LRU_UNCACHED`` guard, so once the key is cached the next call recompiles
and captures the hit.  Other arguments, a cache holding other keys (or more
than ``MAX_SCANNED_ENTRIES``), a wrapper made in the trace and ``maxsize=0``
break the same way.
"""

from __future__ import annotations

import functools
import gc
import math
import types

from ..errors import Unsupported
from ..sources import ObjectSource
from .objects import UserObjectValue

LRU_WRAPPER_TYPE = getattr(functools, "_lru_cache_wrapper", None)

#: what ``cached_result`` returns when the call would not be a hit it can vouch for
MISS = object()

#: bigger caches are not looked up (the guard scans every key on each entry)
MAX_SCANNED_ENTRIES = 256

_SCALARS = (int, str, bool, float, bytes, type(None))


def _safe_key_part(x) -> bool:
    """A key component whose ``==``/hash run no program code."""
    t = type(x)
    if t in _SCALARS:
        return True
    if t is tuple:
        return all(_safe_key_part(item) for item in x)
    if t is object:  # the keyword marker: compared by identity
        return True
    # a ``typed`` cache stores the arguments' classes; type's own == is identity
    return t is type or _identity_hashed(x)


def _key_arg(x) -> bool:
    """An argument the trace can build the key from: a literal (a NaN is
    found in the table only by identity, which a reloaded constant lacks)."""
    t = type(x)
    if t is float:
        return not math.isnan(x)
    if t is tuple:
        return all(_key_arg(item) for item in x)
    return t in _SCALARS


def _identity_hashed(x) -> bool:
    """An object whose ``==`` and hash are object's (identity): as a key part
    it equals only itself, and comparing it runs no program code."""
    from .objects import special_lookup
    t = type(x)
    try:
        return special_lookup(t, "__hash__") is object.__dict__["__hash__"] and \
            special_lookup(t, "__eq__") is object.__dict__["__eq__"]
    except (AttributeError, TypeError):
        return False


def _key_part(tx, value, name: str):
    """The real object a call argument contributes to the key: a literal,
    or (guarded by identity) a pre-existing object hashed by identity, such
    as the ``self`` of an ``lru_cache``-decorated method (``logger.warning_once``)."""
    if value.is_constant() and _key_arg(value.as_constant()):
        return value.as_constant()
    real = value.real_object()
    if real is not None and value.source is not None and \
            (_identity_hashed(real[0]) or type(real[0]) is type):
        from ..guards import Guard
        tx.guards.add(Guard("ID_MATCH", value.source, real[0]))
        from ..layer_reuse import identity_observed
        identity_observed(tx, value.source)
        return real[0]
    raise Unsupported(f"calling lru_cache wrapper {name}() with an argument that is neither a literal nor an "
                      f"object hashed by identity ({value.type_name()})", kind="lru_cache",
                      hint="the call runs natively between graphs")


def _parameters(wrapper):
    """``(maxsize, typed)`` of a wrapper made by ``functools.lru_cache``, read
    from the closure of the ``cache_parameters`` it installs; None if the
    wrapper was not made that way."""
    cp = wrapper.__dict__.get("cache_parameters")
    if type(cp) is not types.FunctionType or cp.__code__.co_filename != functools.__file__ \
            or cp.__code__.co_freevars != ("maxsize", "typed") or cp.__closure__ is None:
        return None
    try:
        maxsize, typed = (cell.cell_contents for cell in cp.__closure__)
    except ValueError:
        return None
    if not (maxsize is None or type(maxsize) is int) or type(typed) is not bool:
        return None
    return maxsize, typed


def _table(wrapper):
    """``(cache dict, kwd_mark, {id(key): result} or None)`` of a C wrapper,
    from the fields its ``tp_traverse`` visits (CPython 3.11: the type, then
    key/result/link type per entry of a bounded cache, then cache, func,
    kwd_mark, link type, CacheInfo type and the instance dict); None when the
    layout is not that one."""
    refs = gc.get_referents(wrapper)
    inst_dict = wrapper.__dict__
    if len(refs) < 7 or refs[0] is not type(wrapper) or refs[-1] is not inst_dict:
        return None
    cache, func, kwd_mark, link_type = refs[-6], refs[-5], refs[-4], refs[-3]
    if type(cache) is not dict or type(kwd_mark) is not object or not isinstance(link_type, type):
        return None
    # ``update_wrapper`` copies the wrapped function's ``__dict__`` over the
    # wrapper's: an lru_cache of an lru_cache would show the inner wrapper's
    # ``cache_parameters`` (and so maybe the wrong ``typed``)
    if type(func) is types.FunctionType:
        if "cache_parameters" in func.__dict__:
            return None
    elif type(func).__dictoffset__ != 0:
        return None
    links = refs[1:-6]
    if not links:
        return cache, kwd_mark, None
    if len(links) != 3 * len(cache):
        return None
    results = {}
    stored = {id(k) for k in cache}
    for i in range(0, len(links), 3):
        key, result, lt = links[i:i + 3]
        if lt is not link_type or id(key) not in stored:
            return None
        results[id(key)] = result
    return cache, kwd_mark, results


def make_key(args: tuple, kwargs: dict, typed: bool, kwd_mark):
    """The key CPython's ``lru_cache_make_key`` builds for a call."""
    if not typed and not kwargs:
        if len(args) == 1 and type(args[0]) in (int, str):
            return args[0]
        return args
    key = list(args)
    if kwargs:
        key.append(kwd_mark)
        for k, v in kwargs.items():
            key.extend((k, v))
    if typed:
        key.extend(type(a) for a in args)
        key.extend(type(v) for v in kwargs.values())
    return tuple(key)


def cached_result(wrapper, args: tuple, kwargs: dict):
    """The object a call ``wrapper(*args, **kwargs)`` would return as a hit,
    found without running program code; ``MISS`` when it would be a miss or
    the table holds keys whose comparison could run program code.  Used at
    trace time and by the ``LRU_CACHED`` guard."""
    params = _parameters(wrapper)
    if params is None or params[0] is not None and params[0] <= 0:
        return MISS
    table = _table(wrapper)
    if table is None:
        return MISS
    cache, kwd_mark, results = table
    if (params[0] is None) != (results is None) and cache:
        return MISS  # a bounded cache's entries are links, an unbounded one's are results
    if len(cache) > MAX_SCANNED_ENTRIES or not all(_safe_key_part(k) for k in cache):
        return MISS
    key = make_key(args, kwargs, params[1], kwd_mark)
    for stored in cache:
        if stored == key:
            return cache[stored] if results is None else results[id(stored)]
    return MISS


def _replay_hit(wrapper, kwnames, *args):
    """The call itself, after the graph: a hit (guarded), for its counters and LRU order."""
    n = len(args) - len(kwnames)
    wrapper(*args[:n], **dict(zip(kwnames, args[n:])))


class LruCacheValue(UserObjectValue):
    """A ``functools.lru_cache``/``functools.cache`` wrapper that existed
    before the trace (held by identity).  Attribute reads are those of any
    object; a call with literal arguments whose key is cached is the cached
    object (see the module docstring), anything else a graph break."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        name = getattr(self.obj, "__qualname__", "function")
        if self.source is None:
            raise Unsupported(f"calling lru_cache wrapper {name}() made in the trace", kind="lru_cache")
        pos = tuple(_key_part(tx, a, name) for a in args)
        kw = {k: _key_part(tx, v, name) for k, v in kwargs.items()}
        result = cached_result(self.obj, pos, kw)
        from ..guards import Guard
        if result is MISS:
            exc = Unsupported(f"calling lru_cache wrapper {name}() with a key it has not cached", kind="lru_cache",
                              hint="a miss runs the function and fills the cache: it runs natively between graphs")
            # once the native call has filled the cache, a later call recompiles and sees a hit
            exc.recompile_guards = (Guard("ID_MATCH", self.source, self.obj),
                                    Guard("LRU_UNCACHED", self.source, (pos, tuple(kw.items()))))
            raise exc
        tx.guards.add(Guard("LRU_CACHED", self.source, (pos, tuple(kw.items()), result)))
        kwnames = tuple(kw)
        from .constants import ConstantValue
        tx.side_effects.defer_call(_replay_hit, [self, ConstantValue(kwnames), *args, *kwargs.values()])
        return tx.wrap(result, ObjectSource(result, f"<{name} cached result>"))


def lru_guard_holds(wrapper, pos, kw_items, result) -> bool:
    """The ``LRU_CACHED`` guard: the wrapper still returns ``result`` for the key."""
    return cached_result(wrapper, pos, dict(kw_items)) is result


def lru_still_missing(wrapper, pos, kw_items) -> bool:
    """The ``LRU_UNCACHED`` guard (kept by an entry that broke at a miss)."""
    return cached_result(wrapper, pos, dict(kw_items)) is MISS


def is_lru_wrapper(obj) -> bool:
    return LRU_WRAPPER_TYPE is not None and type(obj) is LRU_WRAPPER_TYPE

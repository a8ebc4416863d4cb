"""Capture of library wrappers and attribute access (issue #13, categories 9
and 4): ``functools.lru_cache``/``cache`` wrappers, grad-mode decorators,
contextlib managers, namedtuple/typing/enum/warnings/logging, ``dict.fromkeys``,
``functools.partial`` attributes, ``__getattr__`` objects, ``torch.ops.aten``
and function attributes.

Every capturable construct is compared with eager Python (results, side
effects, identity) and asserted to be captured (graph and break counts); the
constructs left as breaks are asserted to break cleanly (compiled == eager).
"""

import collections
import contextlib
import enum
import functools
import typing

import pytest
import torch

import bytegraph
from conftest import assert_same, compile_counting


def t(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + 7))


def no_breaks():
    s = bytegraph.stats()
    return s.graph_breaks == 0 and s.eager_fallbacks == 0


# ---------------------------------------------------------------------------
# functools.lru_cache / functools.cache

LOG = []


@functools.lru_cache
def bounded_flag():
    LOG.append("bounded_flag")
    return True


@functools.cache
def unbounded_scale(n, name="s"):
    LOG.append(("unbounded_scale", n, name))
    return [n * 2]


@functools.lru_cache(maxsize=None, typed=True)
def typed_helper(n, *, k=1):
    LOG.append(("typed_helper", n, k))
    return n + k


def _fresh(wrapper):
    wrapper.cache_clear()
    LOG.clear()


def uses_bounded_flag(x):
    x = x + 1
    if bounded_flag():
        x = x * 2
    return x + 1


def test_lru_hit_zero_args_is_captured_and_counts_the_hit():
    _fresh(bounded_flag)
    bounded_flag()  # cached before the compiled call (as import-time checks are)
    cf, be = compile_counting(uses_bounded_flag)
    x = t(3)
    for i in range(3):
        torch.testing.assert_close(cf(x), uses_bounded_flag(x))
    assert be.count == 1 and no_breaks() and bytegraph.stats().recompiles == 0
    info = bounded_flag.cache_info()
    # 1 warm-up miss, then 3 compiled + 3 eager hits: the compiled calls count exactly like eager ones
    assert (info.hits, info.misses, info.currsize) == (6, 1, 1)
    assert LOG == ["bounded_flag"]


def uses_cached_list(x):
    lst = unbounded_scale(3)
    lst.append(len(lst))  # a mutation of the cached object itself
    return x + lst[0], lst


def test_lru_hit_result_keeps_identity_and_its_mutations():
    _fresh(unbounded_scale)
    cached = unbounded_scale(3)
    cf, be = compile_counting(uses_cached_list)
    out, lst = cf(t(2))
    assert lst is cached and cached == [6, 1]
    torch.testing.assert_close(out, t(2) + 6)
    out, lst = cf(t(2))
    assert lst is cached and cached == [6, 1, 2]
    # (the list's length is guarded like any list read: it grew, so one recompile)
    assert be.count == 2 and no_breaks()
    assert unbounded_scale.cache_info().hits == 2 and LOG == [("unbounded_scale", 3, "s")]


def uses_scale_kw(x):
    return x + unbounded_scale(2, name="k")[0] + typed_helper(1, k=2) + typed_helper(1.0)


def test_lru_hit_with_keywords_and_typed_keys():
    _fresh(unbounded_scale)
    _fresh(typed_helper)
    assert_same(uses_scale_kw, t(3), graphs=None, breaks=None)  # eager first: fills the caches
    bytegraph.reset()
    LOG.clear()
    assert_same(uses_scale_kw, t(3), graphs=1, breaks=0)
    assert LOG == []  # every compiled call was a hit
    # typed: 1 and 1.0 are different keys, both cached
    assert typed_helper.cache_info().currsize == 2


def test_lru_miss_breaks_once_then_recompiles_to_a_hit():
    _fresh(bounded_flag)
    cf, be = compile_counting(uses_bounded_flag)
    x = t(3)
    torch.testing.assert_close(cf(x), uses_bounded_flag(x))  # a miss: runs natively, once
    assert LOG == ["bounded_flag"] and bytegraph.stats().graph_breaks == 1
    for _ in range(2):
        torch.testing.assert_close(cf(x), uses_bounded_flag(x))
    assert bytegraph.stats().recompiles == 1  # the break's entry noticed the key is now cached
    assert LOG == ["bounded_flag"]
    info = bounded_flag.cache_info()
    assert (info.hits, info.misses) == (5, 1)


def test_lru_cache_clear_between_calls_reruns_the_function():
    _fresh(unbounded_scale)
    unbounded_scale(3)
    cf, be = compile_counting(uses_cached_list)
    _, first = cf(t(2))
    unbounded_scale.cache_clear()
    _, second = cf(t(2))  # the guard fails: this call is a miss again, run natively
    assert second is not first and second == [6, 1]
    assert LOG == [("unbounded_scale", 3, "s")] * 2
    _, third = cf(t(2))
    assert third is second and second == [6, 1, 2]


@functools.lru_cache(maxsize=2)
def two_slots(n):
    LOG.append(("two_slots", n))
    return n * 10


def uses_slot_one(x):
    return x + two_slots(1)


def test_lru_hit_moves_the_entry_in_the_lru_order():
    _fresh(two_slots)
    two_slots(1)
    two_slots(2)  # order (oldest first): 1, 2
    cf, be = compile_counting(uses_slot_one)
    torch.testing.assert_close(cf(t(2)), t(2) + 10)  # a hit on 1: order 2, 1
    two_slots(3)  # evicts 2, the least recently used (1 if the hit had not been replayed)
    LOG.clear()
    two_slots(1)
    assert LOG == []
    two_slots(2)
    assert LOG == [("two_slots", 2)]
    assert be.count == 1


class Key:
    """A user key: its ``==`` is program code that a lookup would run."""

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return hash(self.n)

    def __eq__(self, other):
        LOG.append("Key.__eq__")
        return isinstance(other, Key) and other.n == self.n


@functools.cache
def keyed(k):
    return k.n if isinstance(k, Key) else k


def uses_keyed(x):
    return x + keyed(1)


def test_lru_with_user_keys_in_the_table_breaks_cleanly():
    keyed.cache_clear()
    keyed(Key(1))
    keyed(1)
    LOG.clear()
    assert_same(uses_keyed, t(2), graphs=1, breaks=1)
    # eager lookups of 1 may compare with Key(1) (equal hashes); the trace never did on its own
    assert all(entry == "Key.__eq__" for entry in LOG)


def uses_tensor_key(x):
    return unbounded_scale(x.shape[0])[0] + x


def uses_tensor_arg(x):
    return x + keyed(x).sum()


def test_lru_with_non_literal_arguments_breaks_cleanly():
    _fresh(unbounded_scale)
    keyed.cache_clear()
    assert_same(uses_tensor_key, t(2), graphs=1, breaks=0)  # a static size is a literal
    assert_same(uses_tensor_arg, t(2), graphs=1, breaks=1)


def make_local_cache(x):
    f = functools.lru_cache(lambda n: n + 1)
    return x + f(1)


def test_lru_wrapper_made_in_the_frame_breaks_cleanly():
    assert_same(make_local_cache, t(2), graphs=None, breaks=None)

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
import logging
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


# ---------------------------------------------------------------------------
# functools.partial attributes and calls

PART = functools.partial(torch.add, alpha=2)


def partial_attrs(x):
    return PART(x, 1), PART.func is torch.add, PART.args, PART.keywords, PART.args is PART.args


def partial_keywords_written(x):
    PART.keywords["alpha"] = 3  # the partial's own dict: later calls pass the new value
    return PART(x, 1), PART.keywords


def partial_local(x):
    p = functools.partial(torch.mul, other=3)
    q = functools.partial(p, x)  # flattened, as CPython does
    kw = q.keywords
    kw["other"] = 4  # q's own dict
    return q(), q.func is torch.mul, q.args[0] is x, len(q.args), p.keywords, kw


def test_partial_attributes_of_a_pre_existing_partial():
    assert_same(partial_attrs, t(3))


def test_partial_keywords_write_changes_later_calls():
    try:
        assert_same(partial_keywords_written, t(3), calls=1)
        assert PART.keywords == {"alpha": 3}
    finally:
        PART.keywords["alpha"] = 2


def test_partial_made_in_the_frame_flattened_with_its_own_keywords():
    assert_same(partial_local, t(3))


# ---------------------------------------------------------------------------
# dict.fromkeys

def fromkeys(x):
    d = dict.fromkeys(["a", "b", "a"], 0)
    d["a"] += 1
    e = dict.fromkeys(range(3))
    shared = dict.fromkeys("xy", [])
    shared["x"].append(1)  # one value object for every key
    return x + d["a"], d, e, shared, shared["y"]


def test_dict_fromkeys():
    assert_same(fromkeys, t(2))


# ---------------------------------------------------------------------------
# objects with __getattr__

class Lazy:
    def __init__(self):
        self.real = 1

    def __getattr__(self, name):
        LOG.append(("getattr", name))
        if name.startswith("m"):
            return len(name)
        raise AttributeError(name)


LAZY = Lazy()


def reads_lazy(x):
    return x + LAZY.magic + LAZY.real, hasattr(LAZY, "zzz"), getattr(LAZY, "qq", 5), hasattr(LAZY, "mm")


def test_getattr_hook_is_traced_with_its_side_effects():
    LOG.clear()
    assert_same(reads_lazy, t(2), calls=1)
    assert LOG == [("getattr", n) for n in ("magic", "zzz", "qq", "mm")] * 2  # eager, then compiled


class Quiet:
    def __getattr__(self, name):
        if name == "magic":
            return 5
        raise AttributeError(name)


QUIET = Quiet()


def reads_quiet(x):
    return x + QUIET.magic


def test_getattr_hook_entry_recompiles_when_the_attribute_appears():
    cf, be = compile_counting(reads_quiet)
    try:
        for _ in range(2):
            torch.testing.assert_close(cf(t(2)), t(2) + 5)
        QUIET.magic = 100  # now found in the instance dict: __getattr__ no longer runs
        torch.testing.assert_close(cf(t(2)), t(2) + 100)
        Quiet.magic = 7  # a class attribute: the instance's still wins
        torch.testing.assert_close(cf(t(2)), t(2) + 100)
        del QUIET.magic
        torch.testing.assert_close(cf(t(2)), t(2) + 7)
        assert no_breaks()
    finally:
        QUIET.__dict__.pop("magic", None)
        if "magic" in Quiet.__dict__:
            del Quiet.magic


def test_getattribute_hook_is_traced():
    class Magic:
        def __getattribute__(self, name):
            if name == "magic":
                return 7
            return object.__getattribute__(self, name)

    m = Magic()
    m.k = 2

    def fn(x):
        return x + m.magic + m.k

    assert_same(fn, t(2))


# ---------------------------------------------------------------------------
# enum

class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def enum_ops(x):
    c = Color.RED
    if c == Color.RED and c is not Color.GREEN:
        x = x * c.value
    names = [m.name for m in Color]
    values = [m.value for m in Level]
    return (x + Level.HIGH + len(names), Color(2) is Color.GREEN, c.name, names, values, Level(1),
            Color["GREEN"], Color.GREEN in Color, list(Color) == [Color.RED, Color.GREEN])


def test_enum_members_values_iteration_and_lookup():
    assert_same(enum_ops, t(2))


def enum_missing_value(x):
    try:
        Color(3)
    except ValueError as e:
        return x + 1, str(e)
    return x, ""


def test_enum_lookup_of_a_missing_value_breaks_cleanly():
    assert_same(enum_missing_value, t(2), graphs=None, breaks=None)


# ---------------------------------------------------------------------------
# logging

class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append((record.levelname, record.getMessage()))


def _logger(name, level):
    log = logging.getLogger(name)
    log.setLevel(level)
    log.propagate = False
    log.handlers[:] = [ListHandler()]
    return log


QUIET_LOG = _logger("bytegraph_test.quiet", logging.ERROR)


def logs_quietly(x):
    x = x + 1
    QUIET_LOG.debug("debug %s", 1)
    QUIET_LOG.info("info")
    QUIET_LOG.warning("warning %d", 2)
    QUIET_LOG.log(logging.INFO, "log")
    QUIET_LOG.error("error")  # enabled: emitted
    return x + 1


def test_disabled_logger_calls_are_captured_after_the_level_cache_fills():
    handler = QUIET_LOG.handlers[0]
    QUIET_LOG.setLevel(logging.ERROR)  # clears the level cache
    cf, be = compile_counting(logs_quietly)
    for i in range(4):
        handler.records.clear()
        torch.testing.assert_close(cf(t(2)), t(2) + 2)
        assert handler.records == [("ERROR", "error")]
    bytegraph.reset()
    # levels cached: the disabled calls are nothing; the enabled one is the only break
    report = bytegraph.explain(logs_quietly)(t(2))
    assert report.graph_count == 2 and [r.kind for r in report.break_reasons] == ["logging"]
    assert "enabled level" in report.break_reasons[0].explanation


def test_logger_level_change_between_calls_is_seen():
    handler = QUIET_LOG.handlers[0]
    cf, be = compile_counting(logs_quietly)
    try:
        for level, expected in [(logging.ERROR, ["error"]), (logging.DEBUG, ["debug 1", "info", "warning 2", "log",
                                                                              "error"]),
                                (logging.CRITICAL, []), (logging.ERROR, ["error"])]:
            QUIET_LOG.setLevel(level)
            for _ in range(2):
                handler.records.clear()
                cf(t(2))
                assert [m for _, m in handler.records] == expected
        QUIET_LOG.disabled = True
        handler.records.clear()
        cf(t(2))
        assert handler.records == []
        QUIET_LOG.disabled = False
        logging.disable(logging.CRITICAL)
        cf(t(2))
        assert handler.records == []
    finally:
        QUIET_LOG.disabled = False
        logging.disable(logging.NOTSET)
        QUIET_LOG.setLevel(logging.ERROR)


def logs_once(x):
    HF_LOG.warning_once("only once")
    return x + 1


def test_transformers_warning_once_is_a_cached_call():
    global HF_LOG
    from transformers.utils import logging as hf_logging
    HF_LOG = hf_logging.get_logger("bytegraph_test.once")
    HF_LOG.propagate = False
    HF_LOG.handlers[:] = [ListHandler()]
    cf, be = compile_counting(logs_once)
    for _ in range(3):
        torch.testing.assert_close(cf(t(2)), t(2) + 1)
    assert HF_LOG.handlers[0].records == [("WARNING", "only once")]
    bytegraph.reset()
    report = bytegraph.explain(logs_once)(t(2))  # cached now: the call is captured
    assert report.graph_count == 1 and report.graph_break_count == 0

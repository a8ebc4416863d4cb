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
import types
import typing
import warnings

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


# ---------------------------------------------------------------------------
# grad-mode decorators on helpers

@torch.no_grad()
def ng_helper(x):
    return x * 2


@torch.no_grad
def ng_bare_helper(x):
    return x * 3


@torch.enable_grad()
def eg_helper(x):
    return x * 2


@torch.set_grad_enabled(False)
def sge_helper(x):
    return x * 2


def grad_decorated(x):
    a = ng_helper(x + 1)
    b = ng_bare_helper(x + 1)
    with torch.no_grad():
        c = eg_helper(x + 1)
    d = sge_helper(x + 1)
    return a + 1, b, c, d, (x + 1).requires_grad, torch.is_grad_enabled()


def test_grad_mode_decorators_on_helpers():
    x = t(3).requires_grad_(True)
    _, be = assert_same(grad_decorated, x)
    assert be.count == 1


@torch.inference_mode()
def im_helper(x):
    return x * 2


def inference_decorated(x):
    return im_helper(x + 1) + 1


def test_inference_mode_decorator_breaks_cleanly():
    # inference_mode is not modelled at all (its tensors differ from no_grad's): it runs natively
    out, _ = assert_same(inference_decorated, t(3), graphs=2, breaks=1)
    assert out.is_inference() is False
    assert bytegraph.stats().eager_fallbacks == 0


# ---------------------------------------------------------------------------
# contextlib

class Closable:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


CLOSABLE = Closable()


def uses_closing(x):
    x = x + 1
    with contextlib.closing(CLOSABLE) as c:
        x = x * 2
    return x + c.closed, c is CLOSABLE


def uses_nullcontext_and_suppress(x):
    x = x + 1
    with contextlib.nullcontext(3) as v:
        x = x * v
    with contextlib.suppress(KeyError):
        x = x * 2
        {}[1]
        x = x * 100
    return x + 1


@contextlib.contextmanager
def scaled(k):
    LOG.append(("enter", k))
    try:
        yield k * 2
    finally:
        LOG.append(("exit", k))


def uses_contextmanager(x):
    x = x + 1
    with scaled(2) as k:
        x = x * k
    return x + 1


def test_closing():
    CLOSABLE.closed = 0
    cf, be = compile_counting(uses_closing)
    for i in range(3):
        out, same = cf(t(2))
        assert same and CLOSABLE.closed == i + 1
        torch.testing.assert_close(out, (t(2) + 1) * 2 + i + 1)
    assert no_breaks()


def test_nullcontext_suppress_and_contextmanager():
    assert_same(uses_nullcontext_and_suppress, t(2))
    LOG.clear()
    assert_same(uses_contextmanager, t(2), calls=1)
    assert LOG == [("enter", 2), ("exit", 2)] * 2


def uses_exitstack(x):
    x = x + 1
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.callback(LOG.append, "callback")
        x = x * 2
    return x + 1, x.requires_grad


def test_exitstack_breaks_cleanly():
    # ExitStack keeps its callbacks in a deque and chains exceptions with
    # sys.exc_info(): it runs natively (a break at each of its calls)
    LOG.clear()
    assert_same(uses_exitstack, t(2).requires_grad_(True), graphs=None, breaks=None, calls=1)
    assert LOG == ["callback"] * 2 and bytegraph.stats().eager_fallbacks == 0


# ---------------------------------------------------------------------------
# tuples, namedtuple, typing

POINT = collections.namedtuple("Point", "a b")


def tuple_methods(x):
    tup = (1, 2, 3, 2)
    p = POINT(x + 1, 2)
    q = POINT(2, 2)
    return (x + tup.index(2) + tup.count(2) + tup.index(2, 2), p.a * p.b + p[1], p._asdict()["b"],
            p._replace(b=5).b, POINT._fields, q.index(2), q.count(2), q)


def test_tuple_index_count_and_a_module_namedtuple():
    assert_same(tuple_methods, t(2))


def tuple_index_missing(x):
    try:
        (1, 2).index(5)
    except ValueError as e:
        return x + 1, str(e)


def test_tuple_index_missing_raises_as_in_python():
    assert_same(tuple_index_missing, t(2))


def namedtuple_in_frame(x):
    P = collections.namedtuple("P", ["a", "b"])
    p = P(x + 1, 2)
    return p.a * p.b, p._replace(b=3).b, p._fields, P.__name__, type(p) is P


def test_namedtuple_made_in_the_frame_is_captured():
    # a new class on every call, made by the generated code the way the
    # frame makes it (see values/class_build.py): one graph, no recompile
    assert_same(namedtuple_in_frame, t(2), graphs=1, breaks=0, calls=3)
    assert bytegraph.stats().recompiles == 0


def typing_uses(x):
    y = typing.cast(torch.Tensor, x + 1)
    if typing.TYPE_CHECKING:
        y = y * 100
    return y + 1, typing.cast("int", 3)


def test_typing_cast_and_type_checking():
    assert_same(typing_uses, t(2))


def typing_subscript(x):
    return x + 1, typing.Optional[int], typing.List[int]


def test_typing_subscription_breaks_cleanly():
    # typing's own lru_cache holds keys whose == is Python code: looking one
    # up could run it at trace time, so the call runs natively
    assert_same(typing_subscript, t(2), graphs=None, breaks=None)
    assert bytegraph.stats().eager_fallbacks == 0


# ---------------------------------------------------------------------------
# warnings

def warns(x):
    x = x + 1
    warnings.warn("careful", UserWarning)
    return x + 1


def test_warnings_warn_captured_and_warns_like_eager():
    # warn() consults the filters and the caller's __warningregistry__ (a
    # "default" warning is shown once per location): replayed after the
    # graph with the context warn computes (values/warnings_calls.py)
    def run(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(t(2))
            fn(t(2))
        return [(str(w.message), w.category, w.lineno, w.filename) for w in caught]

    expected = run(warns)
    cf, be = compile_counting(warns)
    assert run(cf) == expected and len(expected) == 2
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0 and bytegraph.stats().eager_fallbacks == 0


# ---------------------------------------------------------------------------
# defaultdict.setdefault, torch.ops.aten, function attributes

def dd_setdefault(x):
    d = collections.defaultdict(list)
    d.setdefault("a", []).append(1)
    d["b"].append(2)
    return x + len(d["a"]) + len(d["b"]) + len(d["c"]), dict(d)


def test_defaultdict_setdefault():
    assert_same(dd_setdefault, t(2))


def aten_ops(x):
    y = torch.ops.aten.add.Tensor(x, 1)
    z = torch.ops.aten.mul(y, 2)
    return torch.ops.aten.relu.default(z - 3), torch.ops.aten.sum.dim_IntList(z, [0])


def test_torch_ops_aten_namespaces_and_overloads():
    _, be = assert_same(aten_ops, t(3, 2))
    assert be.op_counts() == [5]


def _closure_maker():
    k = 3

    def inner(x=2):
        return k

    inner.tag = "t"
    return inner


INNER = _closure_maker()


def function_attrs(x):
    fn = INNER
    c = fn.__closure__[0].cell_contents
    return (x + c + fn.__defaults__[0], fn.__name__, fn.__qualname__, fn.__module__, fn.__code__.co_name,
            fn.__dict__["tag"], len(fn.__dict__), fn.__kwdefaults__, fn.__code__ is INNER.__code__)


def test_function_attribute_reads():
    assert_same(function_attrs, t(2))


class SlotsWithHook:
    __slots__ = ("a", "b")

    def __getattr__(self, name):
        return "hook:" + name


class PropertyWithHook:
    @property
    def p(self):
        raise AttributeError("no")

    def __getattr__(self, name):
        return "hook:" + name


SLOTS_HOOK = SlotsWithHook()
SLOTS_HOOK.b = 1
PROP_HOOK = PropertyWithHook()


def reads_unset_slot(x):
    return x + SLOTS_HOOK.b, SLOTS_HOOK.a


def reads_raising_property(x):
    return x + 1, PROP_HOOK.p, hasattr(PROP_HOOK, "p")


def test_getattr_hook_after_an_unset_slot_is_traced():
    # CPython calls __getattr__ when an unset slot raises AttributeError
    assert_same(reads_unset_slot, t(2))


def test_getattr_hook_after_a_raising_property_is_traced():
    assert_same(reads_raising_property, t(2))


def calls_then_reads_stats(x):
    y = x + unbounded_scale(3)[0]
    return y, unbounded_scale.cache_info().hits


def test_lru_cache_info_after_a_captured_hit_sees_it():
    def observed(fn):
        _fresh(unbounded_scale)
        unbounded_scale(3)
        return [fn(t(2))[1] for _ in range(3)]

    expected = observed(calls_then_reads_stats)
    cf, be = compile_counting(calls_then_reads_stats)
    assert observed(cf) == expected == [1, 2, 3]
    assert bytegraph.stats().eager_fallbacks == 0


@functools.lru_cache(maxsize=None, typed=True)
@functools.lru_cache(maxsize=None)
def stacked(n, kind=None):
    return (n, kind)


def uses_stacked(x):
    return x + 1, stacked(1)


def test_lru_of_an_lru_breaks_cleanly():
    # the outer wrapper's cache_parameters are the inner one's (update_wrapper
    # copies __dict__): its typed flag cannot be read, so its key is not built
    stacked.cache_clear()
    stacked(1, int)
    stacked(1)
    assert_same(uses_stacked, t(2), graphs=None, breaks=1)


# ---------------------------------------------------------------------------
# module __getattr__ (PEP 562), and nothing of the program run while compiling

def _lazy_module():
    mod = types.ModuleType("bytegraph_test_lazy")
    exec(
        "CALLS = []\n"
        "def __getattr__(name):\n"
        "    CALLS.append(name)\n"
        "    if name == 'lazy':\n"
        "        return 5\n"
        "    raise AttributeError(name)\n", mod.__dict__)
    return mod


LAZY_MOD = _lazy_module()


def reads_lazy_module(x):
    return x + LAZY_MOD.lazy, hasattr(LAZY_MOD, "other")


def test_module_getattr_is_traced_not_run_at_compile_time():
    LAZY_MOD.CALLS.clear()
    cf, be = compile_counting(reads_lazy_module)
    out, has = cf(t(2))
    torch.testing.assert_close(out, t(2) + 5)
    assert not has and LAZY_MOD.CALLS == ["lazy", "other"]  # once each, when the compiled code ran
    LAZY_MOD.lazy = 7  # a real global now: the hook no longer runs for it
    out, has = cf(t(2))
    torch.testing.assert_close(out, t(2) + 7)
    assert LAZY_MOD.CALLS == ["lazy", "other", "other"] and no_breaks()
    del LAZY_MOD.lazy


class Watched:
    def __getattr__(self, name):
        LOG.append(("watched", name))
        raise AttributeError(name)


WATCHED = Watched()


@functools.cache
def keyed_by_object(obj):
    return 3


def passes_watched(x):
    return x + keyed_by_object(WATCHED)


def test_identity_guard_labels_do_not_run_getattr_hooks():
    keyed_by_object(WATCHED)
    LOG.clear()
    cf, be = compile_counting(passes_watched)  # an ID_MATCH guard on WATCHED (an lru key)
    torch.testing.assert_close(cf(t(2)), t(2) + 3)
    bytegraph.explain(passes_watched)(t(2))  # describes its guards too
    assert LOG == [] and be.count == 1 and no_breaks()


class Cached:
    computed = 0

    @functools.cached_property
    def value(self):
        Cached.computed += 1
        return [3]


def reads_cached_property(x, obj):
    return x + obj.value[0] + obj.value[0], obj.value


def test_cached_property_first_read_breaks_then_captures():
    # the first read computes under the descriptor's RLock: it runs natively;
    # afterwards the value is an instance attribute (guarded), captured
    Cached.computed = 0
    obj = Cached()
    cf, be = compile_counting(reads_cached_property)
    for _ in range(3):
        out, v = cf(t(2), obj)
        torch.testing.assert_close(out, t(2) + 6)
        assert v is obj.__dict__["value"]
    assert Cached.computed == 1 and bytegraph.stats().eager_fallbacks == 0
    bytegraph.reset()
    report = bytegraph.explain(reads_cached_property)(t(2), obj)
    assert report.graph_count == 1 and report.graph_break_count == 0


class Table:
    def __init__(self):
        self.built = 0

    @functools.lru_cache(maxsize=4)
    def row(self, n):
        self.built += 1
        return (n, n * 2)


TABLE = Table()


def uses_cached_method(x):
    a, b = TABLE.row(2)
    return x * a + b


def test_lru_cached_method_hit_with_self_in_the_key():
    Table.row.cache_clear()
    TABLE.built = 0
    TABLE.row(2)
    _, be = assert_same(uses_cached_method, t(2))
    assert TABLE.built == 1 and Table.row.cache_info().hits == 4  # 2 eager + 2 compiled calls


def test_logger_with_its_own_is_enabled_for_is_not_modelled():
    log = _logger("bytegraph_test.patched", logging.ERROR)
    log.isEnabledFor = lambda level: True  # an instance attribute: the methods call it

    def fn(x):
        log.debug("patched")
        return x + 1

    assert_same(fn, t(2), graphs=None, breaks=1, calls=1)
    assert log.handlers[0].records == [("DEBUG", "patched")] * 2

"""Guards and reloads of attributes of objects whose class has attribute
hooks (a Python ``__getattribute__`` or ``__getattr__``, like Hugging Face's
PreTrainedConfig): the trace reads through the generic protocol, and so must
every guard check and every reload -- ``obj.name`` there would run the
program's hook again on each call.  Each test counts the hook's calls and
compares them with eager across repeated calls (cache hits included), and
checks the frame was captured in one graph."""

import torch
from torch import nn

import bytegraph
from conftest import compile_counting


LOG = []


class Counting:
    """Every attribute read is logged."""

    def __init__(self):
        self.w = 3
        self.items = [1, 2]

    def __getattribute__(self, name):
        LOG.append(name)
        return super().__getattribute__(name)


class Fallback:
    """``__getattr__`` computes missing attributes (and logs them)."""

    scale = 2

    def __init__(self):
        self.w = 3

    def __getattr__(self, name):
        LOG.append(name)
        if name.startswith("x_"):
            return len(name)
        raise AttributeError(name)


class Both:
    """A ``__getattribute__`` that refuses some names, and a ``__getattr__``."""

    def __init__(self):
        self.w = 5

    def __getattribute__(self, name):
        LOG.append(("get", name))
        if name.startswith("hidden_"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        LOG.append(("fallback", name))
        return 7


class AliasedConfig:
    """Like PreTrainedConfig: names in ``attribute_map`` read another attribute."""

    attribute_map = {"hidden_size": "d_model"}

    def __init__(self, d_model=4):
        self.d_model = d_model

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def _calls(fn, make, calls=4, change=None):
    """Run ``fn`` eagerly and compiled ``calls`` times on objects from
    ``make()``, comparing results and the hook log of each call."""
    cf, be = compile_counting(fn)
    eager_obj, comp_obj = make(), make()
    x = torch.ones(2)
    for i in range(calls):
        if change is not None:
            change(i, eager_obj)
            change(i, comp_obj)
        LOG.clear()
        expected = fn(eager_obj, x)
        eager_log = list(LOG)
        LOG.clear()
        actual = cf(comp_obj, x)
        comp_log = list(LOG)
        assert comp_log == eager_log, f"call {i}: hook calls {comp_log} != eager {eager_log}"
        torch.testing.assert_close(actual, expected)
    return be


def test_getattribute_runs_as_often_as_in_eager_on_cache_hits():
    def f(c, x):
        return x * c.w + len(c.items)

    be = _calls(f, Counting)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


def test_getattribute_reading_class_attribute_and_method():
    class WithMethod(Counting):
        k = 10

        def twice(self, v):
            return v * 2

    def f(c, x):
        return c.twice(x) + c.k

    be = _calls(f, WithMethod)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


def test_value_read_through_hook_and_returned_is_reloaded_without_the_hook():
    # the list is returned: codegen reloads it from its source
    def f(c, x):
        return x + 1, c.items

    cf, be = compile_counting(f)
    c = Counting()
    for _ in range(3):
        LOG.clear()
        out, items = cf(c, torch.ones(2))
        assert items is object.__getattribute__(c, "items")
        assert LOG == ["items"]
    assert be.count == 1


def test_getattr_fallback_is_traced_and_counted():
    def f(c, x):
        return x * c.w + c.x_abc + c.scale + getattr(c, "nope", 100)

    be = _calls(f, Fallback)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


def test_getattr_guard_does_not_run_fallback_when_attribute_goes_missing():
    def f(c, x):
        return x * c.w

    def change(i, obj):
        if i == 2:
            del obj.w   # now ``c.w`` goes to __getattr__ (which raises)

    cf, be = compile_counting(f)
    c = Fallback()
    x = torch.ones(2)
    for i in range(2):
        LOG.clear()
        torch.testing.assert_close(cf(c, x), x * 3)
        assert LOG == []
    del c.w
    LOG.clear()
    try:
        cf(c, x)
    except AttributeError:
        pass
    else:
        raise AssertionError("expected AttributeError")
    assert LOG == ["w"]   # the program's one call, not one more from a guard


def test_getattribute_raising_attribute_error_falls_back_to_getattr():
    def f(c, x):
        return x * c.w + c.hidden_a

    be = _calls(f, Both)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


def test_alias_config_change_of_underlying_value_recompiles():
    def f(cfg, x):
        return x * cfg.hidden_size

    cf, be = compile_counting(f)
    cfg = AliasedConfig()
    x = torch.ones(2)
    torch.testing.assert_close(cf(cfg, x), x * 4)
    torch.testing.assert_close(cf(cfg, x), x * 4)
    assert be.count == 1
    cfg.d_model = 6
    torch.testing.assert_close(cf(cfg, x), x * 6)
    assert be.count == 2
    # the alias now points elsewhere
    cfg.other = 9
    AliasedConfig.attribute_map = {"hidden_size": "other"}
    try:
        torch.testing.assert_close(cf(cfg, x), x * 9)
    finally:
        AliasedConfig.attribute_map = {"hidden_size": "d_model"}
    assert be.count == 3


def test_alias_config_guard_reads_do_not_go_through_the_hook():
    calls = []

    class Spy(AliasedConfig):
        def __getattribute__(self, key):
            calls.append(key)
            return super().__getattribute__(key)

    def f(cfg, x):
        return x * cfg.hidden_size

    cf, be = compile_counting(f)
    cfg = Spy()
    for _ in range(3):
        calls.clear()
        cf(cfg, torch.ones(2))
        assert calls == ["hidden_size"]
    assert be.count == 1


def test_hook_with_side_effect_on_the_object():
    class Tracking:
        def __init__(self):
            object.__setattr__(self, "w", 2)
            object.__setattr__(self, "last", None)

        def __getattribute__(self, name):
            if name != "last":
                object.__setattr__(self, "last", name)
            return object.__getattribute__(self, name)

    def f(t, x):
        return x * t.w

    cf, be = compile_counting(f)
    t, e = Tracking(), Tracking()
    for _ in range(3):
        object.__setattr__(t, "last", None)
        object.__setattr__(e, "last", None)
        torch.testing.assert_close(cf(t, torch.ones(2)), f(e, torch.ones(2)))
        assert object.__getattribute__(t, "last") == object.__getattribute__(e, "last") == "w"
    assert be.count == 1


class Plain:
    k = 2
    log = []


def test_class_attribute_read_through_type_is_guarded():
    def f(c, x):
        return x * type(c).k

    cf, be = compile_counting(f)
    c = Plain()
    x = torch.ones(2)
    torch.testing.assert_close(cf(c, x), x * 2)
    Plain.k = 5
    try:
        torch.testing.assert_close(cf(c, x), x * 5)
    finally:
        Plain.k = 2


def test_mutation_of_class_attribute_read_through_type_is_replayed():
    def f(c, x):
        type(c).log.append("w")
        return x * 2

    cf, be = compile_counting(f)
    c = Plain()
    for _ in range(3):
        Plain.log.clear()
        cf(c, torch.ones(2))
        assert Plain.log == ["w"]
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


def test_module_with_own_getattr_is_not_answered_wrongly():
    class Inner:
        scale = 3.0

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.lin = nn.Linear(2, 2)

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self.inner, name)

        def forward(self, x):
            return self.lin(x) * (self.scale if hasattr(self, "scale") else 1.0)

    m = Wrapper()
    x = torch.ones(2)
    cm = bytegraph.compile(m, backend="eager")
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(cm(x), m(x))


def test_copy_of_objects_with_hooks_counts_like_eager():
    import copy

    def f(c, x):
        d = copy.copy(c)
        return x * d.w

    for cls in (Counting, Fallback):
        bytegraph.reset()
        be = _calls(f, cls)
        assert be.count == 1 and bytegraph.stats().graph_breaks == 0, cls


def test_getattr_of_an_object_made_in_the_trace():
    class Lazy:
        def __init__(self, base):
            self.base = base

        def __getattr__(self, name):
            LOG.append(name)
            if name == "double":
                return self.base * 2
            raise AttributeError(name)

    def f(c, x):
        obj = Lazy(c.w)
        return x * obj.double + getattr(obj, "missing", 1) + obj.base

    be = _calls(f, Fallback)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0


class _MyABC(__import__("abc").ABC):
    pass


class _CountingABC(Counting, _MyABC):
    pass


class _Other:
    pass


def test_isinstance_reads_class_through_the_hook_like_eager():
    import collections.abc as cabc

    def f(c, x):
        return x * (2 if isinstance(c, _MyABC) else 3) + isinstance(c, _Other) + isinstance(c, cabc.Mapping)

    for cls in (Counting, _CountingABC):
        bytegraph.reset()
        be = _calls(f, cls)
        assert be.count == 1 and bytegraph.stats().graph_breaks == 0, cls


def test_isinstance_with_a_getattribute_that_lies_about_class():
    class Proxy:
        def __getattribute__(self, name):
            LOG.append(name)
            if name == "__class__":
                return _Other
            return object.__getattribute__(self, name)

    def f(c, x):
        return x * (2 if isinstance(c, _Other) else 3)

    _calls(f, Proxy)


def test_runtime_protocol_answered_by_getattr_is_not_guessed():
    import typing

    @typing.runtime_checkable
    class HasScale(typing.Protocol):
        scale: int

    class Dynamic:
        def __getattr__(self, name):
            LOG.append(name)
            if name == "scale":
                return 2
            raise AttributeError(name)

    def f(c, x):
        return x * (2 if isinstance(c, HasScale) else 3)

    _calls(f, Dynamic)


class _PlainW:
    def __init__(self):
        self.w = 3


class _FallbackW:
    def __init__(self):
        self.w = 3

    def __getattr__(self, name):
        LOG.append(name)
        return 3


def test_entry_for_a_plain_class_never_runs_another_class_hooks():
    # the entry traced with a plain object must not read ``c.w`` of an
    # object of another class (a hook would run in its check, or in the
    # slow paths that look at why it failed)
    def f(c, x):
        return x * c.w

    for other in (Counting, _FallbackW):
        bytegraph.reset()
        cf, be = compile_counting(f)
        x = torch.ones(2)
        cf(_PlainW(), x)
        obj = other()
        if other is _FallbackW:
            del obj.w   # ``obj.w`` now goes to __getattr__
        LOG.clear()
        expected = f(obj, x)
        eager_log = list(LOG)
        LOG.clear()
        torch.testing.assert_close(cf(obj, x), expected)
        assert LOG == eager_log, (other, LOG, eager_log)
        assert be.count == 2


def test_real_pretrained_config_is_guarded_without_its_hook():
    transformers = __import__("pytest").importorskip("transformers")
    cfg = transformers.T5Config(d_model=8, num_layers=1, num_heads=2, d_kv=4, d_ff=16, vocab_size=32)

    def f(cfg, x):
        return x * cfg.hidden_size + cfg.num_attention_heads

    cf, be = compile_counting(f)
    x = torch.ones(2)
    torch.testing.assert_close(cf(cfg, x), f(cfg, x))
    torch.testing.assert_close(cf(cfg, x), f(cfg, x))
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0
    cfg.hidden_size = 5   # written through the alias: d_model
    torch.testing.assert_close(cf(cfg, x), x * 5 + 2)
    assert be.count == 2
    bytegraph.reset()
    text = str(bytegraph.explain(f)(cfg, x))
    guards = text.split("--- guards ---")[1]
    # every read below the config bypasses its __getattribute__
    assert "cfg." not in guards.replace("type(cfg).", ""), guards

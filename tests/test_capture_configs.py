"""Config objects (issue #13): ``copy.copy``/``copy.deepcopy`` of user objects,
attribute writes through a class's own ``__setattr__``/``__delattr__``, and
dataclasses (frozen ones included) -- each compared with eager (results,
side effects, identity, exceptions) and checked to be captured."""

import copy
import copyreg
import dataclasses

import pytest
import torch

import bytegraph
from conftest import compile_counting


# ---------------------------------------------------------------------------
# classes


class Plain:
    def __init__(self, a=1):
        self.a = a
        self.lst = [1, 2]
        self.d = {"k": self.lst, "t": (1, 2), "n": None}


class Aliased:
    """A config that maps alias names, like Hugging Face's PreTrainedConfig."""
    attribute_map = {"hidden": "width"}

    def __init__(self):
        self.width = 4
        self.log = []

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Validated:
    """A ``__setattr__`` that validates, then writes with ``object.__setattr__``."""

    def __setattr__(self, key, value):
        if not isinstance(value, int):
            raise TypeError(f"{key} must be an int")
        object.__setattr__(self, key, value)

    def __delattr__(self, key):
        if key == "locked":
            raise AttributeError("locked")
        object.__delattr__(self, key)


class Doubling:
    def __setattr__(self, key, value):
        super().__setattr__(key, value * 2)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a = 1


class WithGetState:
    def __init__(self):
        self.a = 1
        self.cache = [9]

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["cache"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.cache = []


class WithCopy:
    def __init__(self):
        self.a = [1]

    def __copy__(self):
        out = WithCopy.__new__(WithCopy)
        out.a = "copied"
        return out


class WithDeepcopy:
    def __init__(self):
        self.a = 1

    def __deepcopy__(self, memo):
        return WithDeepcopy()


class WithReduce:
    def __init__(self, a):
        self.a = a

    def __reduce__(self):
        return (WithReduce, (self.a + 1,))


class Registered:
    def __init__(self):
        self.a = 1


copyreg.pickle(Registered, lambda o: (Registered, ()))


class HoldsTensor:
    def __init__(self):
        self.t = torch.ones(2)


@dataclasses.dataclass
class DC:
    a: int
    b: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: int = 2


def _norm(obj, seen=None):
    """A comparable form of ``obj``: user objects as their type and
    attributes, tensors as lists, and sharing as back-references."""
    seen = {} if seen is None else seen
    if isinstance(obj, (int, float, str, bool, type(None), type, torch.dtype)):
        return obj
    if id(obj) in seen:
        return ("ref", seen[id(obj)])
    seen[id(obj)] = len(seen)
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.tolist())
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_norm(o, seen) for o in obj])
    if isinstance(obj, dict):
        return ("dict", [(k, _norm(v, seen)) for k, v in obj.items()])
    if hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
        names = list(vars(obj)) if hasattr(obj, "__dict__") else []
        names += [n for n in getattr(type(obj), "__slots__", ()) if hasattr(obj, n)]
        return (type(obj).__qualname__, [(n, _norm(object.__getattribute__(obj, n), seen)) for n in names])
    return repr(obj)


def same(fn, make, calls=2):
    """``fn(*make())`` eager and compiled on fresh arguments each call: equal
    results, arguments afterwards and sharing; one graph, no break."""
    compiled, be = compile_counting(fn)
    out = None
    for _ in range(calls):
        eager_args, comp_args = make(), make()
        expected = fn(*eager_args)
        out = compiled(*comp_args)
        assert _norm((out, comp_args)) == _norm((expected, eager_args))
    stats = bytegraph.stats()
    assert be.count == 1 and stats.graph_breaks == 0 and stats.eager_fallbacks == 0, stats
    return out


def _captured(fn, *args):
    """Run ``fn`` compiled; assert one graph, no break, no fallback."""
    compiled, be = compile_counting(fn)
    out = compiled(*args)
    stats = bytegraph.stats()
    assert be.count == 1 and stats.graph_breaks == 0 and stats.eager_fallbacks == 0, stats
    return out


def _breaks(fn, *args):
    """``fn`` compiled and eager agree, and the compiled run had a graph break."""
    expected = fn(*args)
    compiled, be = compile_counting(fn)
    got = compiled(*args)
    assert bytegraph.stats().graph_breaks >= 1
    return expected, got


# ---------------------------------------------------------------------------
# deepcopy


def test_deepcopy_plain_object_is_new_and_independent():
    def f(x, o):
        c = copy.deepcopy(o)
        c.a = 5
        c.lst.append(3)
        return x + c.a + o.a, c.lst, o.lst, c.d["k"] is c.lst, c.d["t"] is o.d["t"], c is o

    out = same(f, lambda: (torch.ones(2), Plain()))
    assert out[1] == [1, 2, 3] and out[2] == [1, 2] and out[3] is True and out[4] is True and out[5] is False


def test_deepcopy_escapes_and_keeps_sharing():
    def f(x, o):
        c = copy.deepcopy(o)
        return x + 1, c

    o = Plain(3)
    out = _captured(f, torch.ones(2), o)[1]
    assert type(out) is Plain and out is not o and out.__dict__ == o.__dict__
    assert out.lst is not o.lst and out.d["k"] is out.lst and list(vars(out)) == list(vars(o))


def test_deepcopy_cycle_and_shared_objects():
    def f(x, o):
        o.me = o
        pair = [o, o]
        c = copy.deepcopy(pair)
        return x + 1, c[0] is c[1], c[0].me is c[0], c[0] is o

    o = Plain()
    out = _captured(f, torch.ones(2), o)
    assert out[1:] == (True, True, False)
    assert o.me is o  # the write to the original was replayed


def test_deepcopy_sees_pending_writes_and_original_unchanged_by_copy():
    def f(x, o):
        o.a = 10
        o.extra = "e"
        c = copy.deepcopy(o)
        c.a = 11
        return x + o.a + c.a, c.extra, list(vars(c))

    same(f, lambda: (torch.ones(2), Plain()))


def test_deepcopy_of_object_made_in_the_trace():
    def f(x):
        p = Plain(2)
        c = copy.deepcopy(p)
        p.lst.append(7)
        return x * c.a, c.lst, p.lst

    same(f, lambda: (torch.ones(2),))


def test_deepcopy_slots():
    def f(x, o):
        c = copy.deepcopy(o)
        c.b = 2
        return x + c.a + c.b, hasattr(o, "b"), c

    out = same(f, lambda: (torch.ones(2), Slotted()))
    assert out[2].a == 1 and out[2].b == 2


def test_deepcopy_runs_getstate_and_setstate():
    def f(x, o):
        c = copy.deepcopy(o)
        return x + c.a, c.cache, o.cache

    same(f, lambda: (torch.ones(2), WithGetState()))


def test_deepcopy_custom_reduce_is_traced():
    def f(x, o):
        c = copy.deepcopy(o)
        return x + c.a, type(c) is WithReduce

    same(f, lambda: (torch.ones(2), WithReduce(1)))


def test_deepcopy_aliased_config_then_setattr_through_its_hook():
    def f(x, cfg):
        c = copy.deepcopy(cfg)
        c.hidden = 8  # mapped to width by __setattr__
        return x * c.width, cfg.width, c.hidden, c

    out = same(f, lambda: (torch.ones(2), Aliased()))
    assert out[3].width == 8 and "hidden" not in vars(out[3])


def test_deepcopy_of_instance_dict_like_to_dict():
    def f(x, cfg):
        c = copy.deepcopy(cfg)
        out = copy.deepcopy(c.__dict__)
        out["model"] = "m"
        return x + 1, out, "model" in vars(c)

    same(f, lambda: (torch.ones(2), Aliased()))


def test_deepcopy_atomic_and_named_constants_are_kept():
    def f(x):
        d = {"dtype": torch.float32, "cls": Plain, "fn": len, "t": (1, "a"), "n": None}
        c = copy.deepcopy(d)
        return x + 1, c["dtype"] is torch.float32, c["cls"] is Plain, c["t"] is d["t"], c is d

    out = _captured(f, torch.ones(2))
    assert out[1:] == (True, True, True, False)


@pytest.mark.parametrize("obj", [WithDeepcopy(), Registered(), HoldsTensor(), torch.device("cpu")],
                         ids=["own-deepcopy", "copyreg", "tensor", "device"])
def test_deepcopy_unmodelled_protocols_break_cleanly(obj):
    def f(x, o):
        c = copy.deepcopy(o)
        return x + 1, type(c), c is o

    expected, got = _breaks(f, torch.ones(2), obj)
    assert expected[1:] == got[1:]


def test_deepcopy_with_memo_breaks():
    def f(x, o):
        return x + 1, copy.deepcopy(o, {}).a

    expected, got = _breaks(f, torch.ones(2), Plain())
    assert expected[1] == got[1]


# ---------------------------------------------------------------------------
# copy.copy


def test_shallow_copy_shares_attributes():
    def f(x, o):
        c = copy.copy(o)
        c.lst.append(5)
        c.a = 9
        return x + o.a + c.a, c.lst is o.lst, o.lst

    same(f, lambda: (torch.ones(2), Plain()))


def test_shallow_copy_runs_class_copy_hook():
    def f(x, o):
        c = copy.copy(o)
        return x + 1, c.a, o.a

    same(f, lambda: (torch.ones(2), WithCopy()))


def test_shallow_copy_escapes():
    def f(x, o):
        return x + 1, copy.copy(o)

    o = Plain()
    out = _captured(f, torch.ones(2), o)[1]
    assert type(out) is Plain and out is not o and out.lst is o.lst


# ---------------------------------------------------------------------------
# __setattr__ / __delattr__ hooks


def test_setattr_hook_on_existing_object_replays_generic_write():
    def f(x, o):
        o.b = 3  # Doubling.__setattr__ runs once, in the trace
        return x + o.b

    o = Doubling()
    _captured(f, torch.ones(2), o)
    assert o.b == 6  # not 12: the replay did not run the hook again


def test_setattr_hook_differential():
    def f(x, o):
        o.b = 3
        o.c = o.b + 1
        return x + o.c

    same(f, lambda: (torch.ones(2), Doubling()))


def test_setattr_hook_raising_is_the_programs_exception():
    def f(x, o):
        try:
            o.a = "no"
        except TypeError as e:
            return x - 1, str(e)
        return x, ""

    same(f, lambda: (torch.ones(2), Validated()))


def test_delattr_hook():
    def f(x, o):
        o.a = 1
        o.b = 2
        del o.a
        try:
            del o.locked
        except AttributeError:
            pass
        return x + o.b, hasattr(o, "a")

    o = Validated()
    same(f, lambda: (torch.ones(2), o))


def test_delattr_hook_replays_generic_delete():
    deletes = []

    class Counting:
        def __delattr__(self, key):
            deletes.append(key)
            object.__delattr__(self, key)

    def f(x, o):
        del o.a
        return x + 1

    o = Counting()
    o.a = 1
    _captured(f, torch.ones(2), o)
    assert deletes == ["a"] and not hasattr(o, "a")


def test_aliased_config_write_and_read_on_new_object():
    def f(x):
        c = Aliased()
        c.hidden = 16
        return x * c.hidden, vars(c), c

    out = same(f, lambda: (torch.ones(2),))
    assert out[2].width == 16


def test_setattr_hook_object_made_in_trace_escapes():
    def f(x):
        d = Doubling()
        d.v = 2
        return x + d.v, d

    out = same(f, lambda: (torch.ones(2),))
    assert out[1].v == 4


# ---------------------------------------------------------------------------
# dataclasses


def test_frozen_dataclass_constructed_and_read():
    def f(x):
        fr = Frozen(3)
        return x + fr.a + fr.b, fr

    out = same(f, lambda: (torch.ones(2),))
    assert out[1] == Frozen(3)


def test_dataclass_replace_and_write():
    def f(x, d):
        d.a = d.a + 1
        e = dataclasses.replace(d, a=10)
        return x + e.a + d.a, e, e.b is d.b

    same(f, lambda: (torch.ones(2), DC(1, [2])))


def test_dataclass_deepcopy_frozen():
    def f(x, fr):
        c = copy.deepcopy(fr)
        return x + c.a, c.b == fr.b, c is fr, type(c)

    same(f, lambda: (torch.ones(2), Frozen(4)))


def test_frozen_dataclass_write_raises_as_in_eager():
    def f(x):
        fr = Frozen(3)
        try:
            fr.a = 4
        except dataclasses.FrozenInstanceError as e:
            return x - 1, str(e), fr.a
        return x, "", fr.a

    expected = f(torch.ones(2))
    got = bytegraph.compile(f, backend="eager")(torch.ones(2))
    assert _norm(got) == _norm(expected)


def test_object_slots_through_reduce_ex_are_traced():
    def f(x, o):
        rv = o.__reduce_ex__(4)
        return x + 1, rv[0] is copyreg.__newobj__, rv[1][0] is Plain, sorted(rv[2])

    same(f, lambda: (torch.ones(2), Plain()))


def test_deepcopy_of_object_holding_a_tensor_breaks_and_matches():
    def f(x, o):
        c = copy.deepcopy(o)
        c.t.add_(1)
        return x + c.t, o.t

    o1, o2 = HoldsTensor(), HoldsTensor()
    expected = f(torch.ones(2), o1)
    got = bytegraph.compile(f, backend="eager")(torch.ones(2), o2)
    assert _norm(got) == _norm(expected)
    assert bytegraph.stats().graph_breaks >= 1

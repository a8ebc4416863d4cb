"""Buffered side effects (issue 3): mutations of pre-existing objects are
replayed once, in place, after the graph; new objects escape with their
aliasing intact.  Every test compares with eager Python."""

import pytest
import torch

import bytegraph
from conftest import CountingBackend


class Obj:
    pass


COUNTER = 0
TABLE = {}


def run_both(make_state, fn, *, graphs=1):
    """Run ``fn(x, *state)`` eagerly and compiled on equal fresh states; return both states and outputs."""
    x = torch.randn(3)
    eager_state = make_state()
    compiled_state = make_state()
    eager_out = fn(x, *eager_state)
    be = CountingBackend()
    cf = bytegraph.compile(fn, backend=be, fullgraph=True)
    compiled_out = cf(x, *compiled_state)
    assert be.count == graphs
    return eager_state, compiled_state, eager_out, compiled_out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, Obj):
        _same(a.__dict__, b.__dict__)
    else:
        assert a == b


def test_list_methods_on_preexisting_list_in_place():
    def f(x, lst):
        lst.append(x * 2)
        lst.insert(0, 5)
        lst.pop(1)
        lst[0] = 7
        lst.extend([1, 2])
        lst.remove(2)
        lst[1:2] = [x + 1, 9]
        del lst[-1]
        return x.sum()

    e, c, eo, co = run_both(lambda: ([1, 2],), f)
    _same(e, c)
    _same(eo, co)


def test_preexisting_list_object_is_not_replaced():
    def f(x, lst):
        lst.append(1)
        lst.clear()
        lst.append(x + 1)
        return x * 1

    lst = [0]
    alias = lst
    bytegraph.compile(f, backend=CountingBackend(), fullgraph=True)(torch.zeros(1), lst)
    assert alias is lst and len(lst) == 1
    torch.testing.assert_close(lst[0], torch.ones(1))


def test_dict_methods_on_preexisting_dict():
    def f(x, d):
        d["a"] = x
        d.setdefault("b", []).append(3)
        d.update(c=4)
        d.pop("z")
        d["z"] = 1  # re-inserted: moves to the end, as in Python
        v = d.get("missing", 10)
        return x * v

    e, c, eo, co = run_both(lambda: ({"z": 0, "y": 1},), f)
    _same(e, c)
    _same(eo, co)


def test_set_methods_on_preexisting_set():
    def f(x, s):
        s.add(3)
        s.discard(1)
        s.update({7, 8})
        s.remove(2)
        return x + len(s)

    e, c, eo, co = run_both(lambda: ({1, 2},), f)
    assert e == c
    _same(eo, co)


def test_attribute_writes_and_deletes_on_user_object():
    def f(x, o):
        o.attr = x + 1
        o.count = getattr(o, "count", 0) + 1
        del o.gone
        o.later = o.count * 2
        return x * o.count

    def state():
        o = Obj()
        o.gone = 1
        return (o,)

    e, c, eo, co = run_both(state, f)
    _same(e, c)
    assert not hasattr(c[0], "gone")
    _same(eo, co)


def test_global_write_and_read_back():
    def f(x):
        global COUNTER
        COUNTER += 1
        TABLE["last"] = COUNTER
        return x + COUNTER

    global COUNTER
    COUNTER = 0
    TABLE.clear()
    eager = f(torch.zeros(1)), COUNTER, dict(TABLE)
    COUNTER = 0
    TABLE.clear()
    be = CountingBackend()
    cf = bytegraph.compile(f, backend=be, fullgraph=True)
    compiled = cf(torch.zeros(1)), COUNTER, dict(TABLE)
    _same(eager, compiled)
    assert be.count == 1
    cf(torch.zeros(1))  # COUNTER changed: guarded, so this is 2 now, not a stale 1
    assert COUNTER == 2 and TABLE["last"] == 2


def test_new_list_escaping_twice_is_one_object():
    def f(x, lst, d):
        new = [x + 1]
        lst.append(new)
        d["new"] = new
        return new

    e, c, eo, co = run_both(lambda: ([], {}), f)
    assert c[0][0] is c[1]["new"] is co
    _same(e, c)


def test_aliasing_between_returned_containers():
    def f(x):
        shared = {"t": x * 2}
        pair = [shared, shared]
        return pair, (pair, x * 2)

    cf = bytegraph.compile(f, backend=CountingBackend(), fullgraph=True)
    pair, (pair2, t) = cf(torch.ones(1))
    assert pair[0] is pair[1] and pair is pair2
    assert pair[0]["t"] is not t  # two different tensors in eager too
    torch.testing.assert_close(pair[0]["t"], t)


def test_same_tensor_returned_twice_is_one_object():
    def f(x):
        y = x.sin()
        return y, [y, {"y": y}]

    cf = bytegraph.compile(f, backend=CountingBackend(), fullgraph=True)
    a, (b, d) = cf(torch.ones(2))
    assert a is b is d["y"]


def test_order_of_two_appends_is_preserved():
    def f(x, lst):
        lst.append(1)
        lst.append(x)
        lst.append(2)
        return x + 1

    e, c, eo, co = run_both(lambda: ([0],), f)
    _same(e, c)


def test_mutation_inside_inlined_helper_from_another_frame():
    def helper(lst, d, v):
        lst.append(v)
        d[v] = len(lst)

    def f(x, lst, d):
        for i in range(3):
            helper(lst, d, i)
        return x * len(lst)

    e, c, eo, co = run_both(lambda: ([], {}), f)
    _same(e, c)
    _same(eo, co)


def test_nested_preexisting_containers_update_in_place():
    def f(x, cfg):
        cfg["layers"].append({"w": x})
        cfg["layers"][0]["seen"] = True
        return x + 1

    def state():
        return ({"layers": [{"w": 0}]},)

    e, c, eo, co = run_both(state, f)
    _same(e, c)


def test_side_effects_happen_exactly_once_per_call():
    calls = []

    def f(x, log):
        log.append(len(log))
        return x + 1

    cf = bytegraph.compile(f, backend=CountingBackend(), fullgraph=True)
    log = []
    cf(torch.zeros(1), log)
    assert log == [0]
    # second call: the list's length changed (guarded), so this recompiles, still once
    cf(torch.zeros(1), log)
    assert log == [0, 1]

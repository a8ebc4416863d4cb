"""``OrderedDict.move_to_end`` in the trace (values/dicts.py ``DictValue.table``).

The OrderedDict's own order changes, its dict's table does not: both must
come out as eager's (``list(od)`` and ``dict.keys(od)``), for an
OrderedDict made in the frame and for one passed in (the moves replayed on
it), along with the iterator checks and errors CPython makes.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

import bytegraph
from bytegraph import config

from conftest import CountingBackend


def _orders(od):
    return list(od.items()), list(dict.keys(od))


def _check(fn, make_args, graphs=1):
    config.raise_on_error = True
    backend = CountingBackend()
    compiled = bytegraph.compile(fn, backend=backend)
    for _ in range(2):
        a_args, b_args = make_args(), make_args()
        try:
            want = ("ok", fn(*a_args))
        except Exception as e:  # noqa: BLE001 - compared below
            want = ("raised", type(e), str(e))
        try:
            got = ("ok", compiled(*b_args))
        except Exception as e:  # noqa: BLE001
            got = ("raised", type(e), str(e))
        assert want[0] == got[0], (want, got)
        if want[0] == "raised":
            assert want[1:] == got[1:]
        else:
            _same(want[1], got[1])
        for a, b in zip(a_args, b_args):
            _same(a, b)
    assert backend.count == graphs
    assert bytegraph.stats().graph_breaks == 0
    return compiled


def _same(a, b):
    if isinstance(a, OrderedDict):
        assert type(b) is OrderedDict and _orders(a) == _orders(b)
        return
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
        return
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    assert a == b


def test_move_to_end_in_the_frame_returned():
    def f(x):
        d = OrderedDict(a=1, b=2, c=3)
        d.move_to_end("a")
        d.move_to_end("c", last=False)
        return x + list(d.values())[0], d, list(d)

    _check(f, lambda: (torch.ones(2),))


def test_moves_then_inserts_deletes_and_popitem():
    def f(x):
        d = OrderedDict(a=1, b=2, c=3, e=5)
        d.move_to_end("b")
        d["z"] = 9
        del d["c"]
        d.move_to_end("a", False)       # already first: no change
        d.move_to_end("e", last=False)
        first = d.popitem(last=False)
        last = d.popitem()
        d["c"] = 7
        return x * len(d), d, first, last

    _check(f, lambda: (torch.ones(2),))


def test_move_to_end_on_a_passed_in_ordered_dict_is_replayed():
    def f(x, d):
        d.move_to_end("a")
        d["n"] = 4
        d.move_to_end("b", last=False)
        return x + d["a"]

    _check(f, lambda: (torch.ones(2), OrderedDict(a=1, b=2, c=3)))


def test_move_of_a_missing_key_raises_key_error():
    def f(x):
        d = OrderedDict(a=1)
        try:
            d.move_to_end("zz")
        except KeyError as e:
            return x + 1, str(e)
        return x, "none"

    _check(f, lambda: (torch.ones(2),))


@pytest.mark.parametrize("key,last", [("c", True), ("a", False), ("b", True), ("b", False)])
def test_iterating_while_moving(key, last):
    def f(x):
        d = OrderedDict(a=1, b=2, c=3)
        seen = []
        try:
            for k in d:
                seen.append(k)
                if k == "a":
                    d.move_to_end(key, last)
        except RuntimeError as e:
            seen.append(str(e))
        return x + len(seen), seen, d

    _check(f, lambda: (torch.ones(2),))


def test_equality_and_copy_follow_the_moved_order():
    def f(x):
        d = OrderedDict(a=1, b=2)
        e = OrderedDict(b=2, a=1)
        before = d == e
        d.move_to_end("a")
        c = d.copy()
        return x + 1, before, d == e, c, list(reversed(d))

    _check(f, lambda: (torch.ones(2),))


# -- random sequences of operations (differential) ------------------------------

_KEYS = "abcde"


def _program(ops, made_in_frame=False):
    """The source of a function applying ``ops`` to an OrderedDict (made in
    the frame, or passed in as ``d``), returning what each step saw."""
    lines = ["def f(x, d):", "    out = []"]
    if made_in_frame:
        lines.append("    d = OrderedDict(d)")
    for op, key, flag in ops:
        if op == "set":
            lines.append(f"    d[{key!r}] = len(d)")
        elif op == "del":
            lines.append(f"    try:\n        del d[{key!r}]\n    except KeyError:\n        out.append('KE')")
        elif op == "move":
            lines.append(f"    try:\n        d.move_to_end({key!r}, {flag})\n    except KeyError:\n"
                         "        out.append('KE')")
        elif op == "popitem":
            lines.append(f"    if d:\n        out.append(d.popitem(last={flag}))")
        elif op == "pop":
            lines.append(f"    out.append(d.pop({key!r}, None))")
        elif op == "read":
            lines.append("    out.append((list(d), list(reversed(d)), len(d)))")
        elif op == "iter_move":
            lines.append("    try:\n        for k in d:\n            out.append(k)\n"
                         f"            d.move_to_end(k, {flag})\n    except RuntimeError as e:\n"
                         "        out.append(str(e))")
    lines.append("    return x + len(out), out, d")
    return "\n".join(lines)


@pytest.mark.parametrize("made_in_frame", [False, True])
def test_random_sequences_of_ordered_dict_operations(made_in_frame):
    import random
    rng = random.Random(1234 + made_in_frame)
    config.raise_on_error = True
    for case in range(60):
        ops = [(rng.choice(["set", "del", "move", "move", "popitem", "pop", "read", "iter_move"]),
                rng.choice(_KEYS), rng.choice([True, False])) for _ in range(rng.randint(1, 9))]
        ns: dict = {"OrderedDict": OrderedDict}
        source = _program(ops, made_in_frame)
        exec(compile(source, f"<od case {case}>", "exec"), ns)
        fn = ns["f"]
        start = [(k, i) for i, k in enumerate(rng.sample(_KEYS, rng.randint(0, 5)))]
        want = fn(torch.ones(1), OrderedDict(start))
        bytegraph.reset()
        backend = CountingBackend()
        passed_in = OrderedDict(start)
        got = bytegraph.compile(fn, backend=backend)(torch.ones(1), passed_in)
        assert torch.equal(want[0], got[0]), source
        assert want[1] == got[1], source
        assert (got[2] is passed_in) != made_in_frame
        if made_in_frame:
            assert _orders(passed_in) == _orders(OrderedDict(start))
        assert _orders(want[2]) == _orders(got[2]), source
        assert backend.count == 1

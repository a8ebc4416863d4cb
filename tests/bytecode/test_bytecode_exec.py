"""Execution: reassembled real code must behave exactly like the original."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import random
import threading

import pytest

from _bytecode_testutil import deep_reassemble, load_reassembled_module, rebuild_function
from bytegraph.bytecode import assemble, copy_instrs, decode, instr

SAMPLE = {"a": [1, 2.5, None, True, {"b": "ü\n"}], "c": {"d": [], "e": {}}, "f": -0.0,
          "g": list(range(20)), "h": "x" * 40}


# --- hand-written functions covering many constructs --------------------------------

def f_try(x):
    out = []
    try:
        out.append(10 // x)
    except ZeroDivisionError as e:
        out.append(type(e).__name__)
    except (TypeError, ValueError):
        out.append("typeish")
    else:
        out.append("else")
    finally:
        out.append("finally")
    return out


def f_finally_loop(n):
    acc = []
    for i in range(n):
        try:
            if i == 2:
                continue
            if i == 5:
                break
            acc.append(i)
        finally:
            acc.append(-i)
    else:
        acc.append("no-break")
    return acc


def f_with(n):
    log = []

    @contextlib.contextmanager
    def cm(tag):
        log.append(("enter", tag))
        try:
            yield tag * 2
        except KeyError:
            log.append("swallowed")
        finally:
            log.append(("exit", tag))

    with cm(n) as v, cm(n + 1) as w:
        log.append(v + w)
    with cm(0):
        raise KeyError("x")
    lock = threading.Lock()
    with lock:
        log.append(lock.locked())
    return log


def f_gen(n):
    def inner(k):
        total = 0
        for i in range(k):
            got = yield i * i
            if got:
                total += got
        return total

    def outer(k):
        r = yield from inner(k)
        yield ("ret", r)

    g = outer(n)
    res = [next(g)]
    for i in range(n + 1):
        res.append(g.send(i))
    return res


def f_closures(n):
    count = 0

    def bump(k=1):
        nonlocal count
        count += k
        return count

    adders = [lambda x, i=i: x + i for i in range(n)]
    return [bump(), bump(3), [a(10) for a in adders], count]


def f_comprehensions(n):
    sq = [i * i for i in range(n) if i % 2]
    st = {i % 3 for i in range(n)}
    dc = {str(i): [j for j in range(i)] for i in range(n)}
    ge = sum(x for x in range(n) if x > 2)
    return sq, sorted(st), dc, ge


def f_misc(a, b=2, *args, c, d=4, **kw):
    s = f"{a!r:>6}|{b:03d}|{c!s}|{d}"
    first, *rest = (a, b, *args)
    if (m := len(rest)) > 1 and a < b <= c:
        s += "chain"
    match kw:
        case {"mode": "x", **others}:
            s += f"x{sorted(others)}"
        case {"mode": str(mode)}:
            s += mode
        case _:
            s += "none"
    x = a if a is not None else b
    y = dict(key=1, **kw)
    del first
    return s, rest, m, x, sorted(y), -a, ~b, not c, a ** 2 % 7, [*args][::2]


def f_except_star(n):
    out = []
    try:
        raise ExceptionGroup("g", [ValueError(n), TypeError(n)])
    except* ValueError as eg:
        out.append(len(eg.exceptions))
    except* TypeError:
        out.append("t")
    return out


async def f_async(n):
    async def agen(k):
        for i in range(k):
            await asyncio.sleep(0)
            yield i

    class ACM:
        async def __aenter__(self):
            return "in"

        async def __aexit__(self, *exc):
            return False

    out = [x async for x in agen(n)]
    async with ACM() as v:
        out.append(v)
    async for x in agen(2):
        out.append(-x)
    return out


HAND_CASES = [
    (f_try, [(2,), (0,), ("s",)]),
    (f_finally_loop, [(3,), (8,)]),
    (f_with, [(1,)]),
    (f_gen, [(3,)]),
    (f_closures, [(4,)]),
    (f_comprehensions, [(7,)]),
    (f_misc, [((1, 2, 3, 4), {"c": 5}), ((3,), {"c": 3, "mode": "x", "z": 1}),
              ((-1, 0), {"c": True, "mode": "q"})]),
    (f_except_star, [(1,)]),
]


def _call(f, args):
    if isinstance(args, tuple) and len(args) == 2 and isinstance(args[1], dict) \
            and isinstance(args[0], tuple):
        a, kw = args
    else:
        a, kw = args, {}
    try:
        return ("ok", f(*a, **kw))
    except Exception as e:  # compare exceptions too
        return ("err", type(e), str(e))


@pytest.mark.parametrize("f,argsets", HAND_CASES, ids=[c[0].__name__ for c in HAND_CASES])
def test_hand_written_functions(f, argsets):
    g = rebuild_function(f)
    assert g.__code__ is not f.__code__
    for args in argsets:
        assert _call(g, args) == _call(f, args)


def test_async_function():
    g = rebuild_function(f_async)
    assert asyncio.run(g(3)) == asyncio.run(f_async(3))


def test_stdlib_functions_directly():
    """Functions whose pure-Python code is actually reached at call time."""
    dumps = rebuild_function(json.dumps)
    assert dumps(SAMPLE, indent=2, sort_keys=True) == json.dumps(SAMPLE, indent=2,
                                                                   sort_keys=True)
    loads = rebuild_function(json.loads)
    text = json.dumps(SAMPLE)
    assert loads(text) == json.loads(text)

    import functools
    import inspect
    sig = rebuild_function(inspect.signature)
    assert str(sig(f_misc)) == str(inspect.signature(f_misc))
    reduce_user = rebuild_function(_reduce_user)
    assert reduce_user(10) == _reduce_user(10) == functools.reduce(lambda a, b: a * b,
                                                                    range(1, 11))


def _reduce_user(n):
    import functools
    import operator
    return functools.reduce(operator.mul, (i for i in range(1, n + 1)), 1)


def test_reassembled_json_modules():
    dec = load_reassembled_module("json.decoder")
    enc = load_reassembled_module("json.encoder")
    text = json.dumps(SAMPLE, indent=1)
    # Force the pure-Python paths (the C accelerators would bypass our code).
    assert dec.py_scanstring('"a\\u00fcb\\n"', 1) == json.decoder.py_scanstring(
        '"a\\u00fcb\\n"', 1)
    d = dec.JSONDecoder()
    import json.scanner as sc
    d.scan_once = sc.py_make_scanner(d)
    d.parse_object = dec.JSONObject
    d.parse_array = dec.JSONArray
    assert d.decode(text) == SAMPLE
    e = enc.JSONEncoder(indent=2, sort_keys=True)
    assert "".join(e.iterencode(SAMPLE)) == json.dumps(SAMPLE, indent=2, sort_keys=True)
    with pytest.raises(ValueError):
        "".join(enc.JSONEncoder(allow_nan=False, indent=0).iterencode([float("nan")]))


def test_reassembled_collections_functools_dataclasses():
    col = load_reassembled_module("collections")
    Point = col.namedtuple("Point", "x y", defaults=[0])
    assert Point(1)._asdict() == {"x": 1, "y": 0}
    c = col.Counter("abracadabra")
    assert c.most_common(2) == [("a", 5), ("b", 2)]
    assert (c - col.Counter("aab"))["a"] == 3
    od = col.OrderedDict.fromkeys("abc")
    od.move_to_end("a")
    assert list(od) == ["b", "c", "a"]
    cm = col.ChainMap({"a": 1}, {"a": 2, "b": 3})
    assert dict(cm) == {"a": 1, "b": 3}
    ud = col.UserDict(a=1)
    ud |= {"b": 2}
    assert ud.data == {"a": 1, "b": 2}

    ft = load_reassembled_module("functools")

    @ft.total_ordering
    class V:
        def __init__(self, v):
            self.v = v

        def __lt__(self, o):
            return self.v < o.v

        def __eq__(self, o):
            return self.v == o.v

        @ft.cached_property
        def double(self):
            return self.v * 2

    assert V(1) <= V(2) and V(3) >= V(2) and V(2).double == 4

    @ft.singledispatch
    def kind(x):
        return "obj"

    @kind.register
    def _(x: int):
        return "int"

    assert [kind(1), kind("s")] == ["int", "obj"]
    assert ft.partial(max, 3)(1) == 3

    dc = load_reassembled_module("dataclasses")

    @dc.dataclass(order=True, frozen=True)
    class Item:
        name: str
        tags: list = dc.field(default_factory=list, compare=False)
        n: int = 0

    it = Item("a", ["t"], 2)
    assert dc.asdict(it) == {"name": "a", "tags": ["t"], "n": 2}
    assert dc.astuple(it) == ("a", ["t"], 2)
    assert Item("a") < Item("b") and dc.replace(it, n=5).n == 5
    with pytest.raises(dc.FrozenInstanceError):
        it.n = 3


def test_reassembled_inspect_typing_enum_re():
    ins = load_reassembled_module("inspect")
    assert str(ins.signature(f_misc)) == "(a, b=2, *args, c, d=4, **kw)"
    assert ins.getsource(f_try) == __import__("inspect").getsource(f_try)

    en = load_reassembled_module("enum")

    class Color(en.Enum):
        RED = 1
        GREEN = en.auto()

    class Perm(en.IntFlag):
        R = 4
        W = 2

    assert Color(2).name == "GREEN" and [c.value for c in Color] == [1, 2]
    assert (Perm.R | Perm.W).value == 6 and Perm.R in (Perm.R | Perm.W)

    ty = load_reassembled_module("typing")
    assert ty.get_type_hints(_annotated) == {"x": int, "return": ty.Optional[str]}

    import re._parser as orig
    rp = load_reassembled_module("re._parser")
    for pat in [r"a(b|c)*\d+", r"(?P<x>[^a-z]{2,5}?)(?(x)y|z)", r"(?i)\bfoo\s*$"]:
        assert repr(list(rp.parse(pat))) == repr(list(orig.parse(pat)))


def _annotated(x: int) -> "str | None":
    return None


def test_reassembled_asyncio_tasks():
    tk = load_reassembled_module("asyncio.tasks")

    async def work(i):
        await tk.sleep(0)
        return i * 2

    async def main():
        res = await tk.gather(*(work(i) for i in range(4)))
        res.append(await tk.wait_for(work(5), timeout=5))
        done = [await f for f in tk.as_completed([work(6), work(7)])]
        return res, sorted(done)

    assert asyncio.run(main()) == ([0, 2, 4, 6, 10], [12, 14])


def test_random_nop_insertion_preserves_behaviour():
    """Insert NOPs (with the neighbour's exception entry) at random points."""
    rng = random.Random(1234)
    for f, argsets in HAND_CASES:
        instrs = copy_instrs(decode(f.__code__))
        out = []
        for k, ins in enumerate(instrs):
            if k and rng.random() < 0.3:
                out.append(instr("NOP", exn=ins.exn))
            out.append(ins)
        g = type(f)(assemble(out, f.__code__), f.__globals__, f.__name__,
                    f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        assert len(g.__code__.co_code) > len(f.__code__.co_code)
        for args in argsets:
            assert _call(g, args) == _call(f, args)


def test_module_exec_output():
    """A whole reassembled module body runs and prints the same thing."""
    src = "import json\nfor i in range(3):\n    print(json.dumps({'i': i}))\nprint(__name__)\n"
    code = compile(src, "<m>", "exec")
    outs = []
    for c in (code, deep_reassemble(code)):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(c, {"__name__": "m"})
        outs.append(buf.getvalue())
    assert outs[0] == outs[1]


def test_dataclasses_asdict_direct():
    @dataclasses.dataclass
    class P:
        x: int
        ys: list

    asdict = rebuild_function(dataclasses.asdict)
    assert asdict(P(1, [P(2, [])])) == dataclasses.asdict(P(1, [P(2, [])]))

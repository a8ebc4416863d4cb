"""collections.deque / Counter / OrderedDict / defaultdict and user-hashed
keys captured without graph breaks: compiled vs eager (results, the
pre-existing objects afterwards, their identity, exceptions), and one graph
with no break or fallback (a counting backend)."""

from __future__ import annotations

import collections

import pytest
import torch

import bytegraph
from bytegraph import config, diagnostics

from conftest import CountingBackend


def t(*v):
    return torch.tensor(v, dtype=torch.float32) if v else torch.randn(3)


def _norm(obj, memo=None):
    """A comparable picture of ``obj``: containers by type and contents,
    tensors by value, exceptions by type and message."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), obj.detach().flatten().tolist())
    if isinstance(obj, BaseException):
        return ("exc", type(obj).__name__, str(obj))
    if isinstance(obj, collections.deque):
        return ("deque", [_norm(v) for v in obj], obj.maxlen)
    if isinstance(obj, dict):
        extra = (obj.default_factory,) if isinstance(obj, collections.defaultdict) else ()
        return (type(obj).__name__, [(_norm(k), _norm(v)) for k, v in obj.items()]) + extra
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_norm(v) for v in obj])
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, sorted(repr(_norm(v)) for v in obj))
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, type(_norm))):
        return ("object", type(obj).__qualname__, _norm(vars(obj)))
    return obj


def _call(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 -- compared by type and message
        return None, e


def check(fn, make_args, *, calls=2, graphs=1, breaks=0, same_result_as_arg=None, fallbacks=0):
    """Run ``fn`` eagerly and compiled on fresh equal arguments (``make_args()``)
    ``calls`` times; compare results, exceptions and the arguments afterwards
    (mutated in place: the same objects, changed the same way).  Then the
    capture: ``graphs`` graphs, ``breaks`` breaks, no fallback."""
    be = CountingBackend()
    compiled = bytegraph.compile(fn, backend=be)
    events = []

    def listener(event, payload):
        if event in ("fallback", "break"):
            events.append(str(payload))

    diagnostics.add_listener(listener)
    try:
        for _ in range(calls):
            torch.manual_seed(0)
            eager_args = make_args()
            torch.manual_seed(0)
            comp_args = make_args()
            ids = [id(a) for a in comp_args]
            expected, eexc = _call(fn, eager_args)
            actual, aexc = _call(compiled, comp_args)
            assert _norm(aexc) == _norm(eexc), (aexc, eexc)
            assert _norm(actual) == _norm(expected)
            assert _norm(comp_args) == _norm(eager_args), "arguments afterwards differ"
            if eexc is None and isinstance(expected, tuple):
                # an argument returned is that very argument, in both
                assert [any(r is a for a in comp_args) for r in actual] == \
                    [any(r is a for a in eager_args) for r in expected]
            assert [id(a) for a in comp_args] == ids
            if same_result_as_arg is not None and eexc is None and not isinstance(expected, tuple):
                assert (actual is comp_args[same_result_as_arg]) == (expected is eager_args[same_result_as_arg])
    finally:
        diagnostics.remove_listener(listener)
    stats = bytegraph.stats()
    why = f"{events}; {stats}"
    if graphs is not None:
        assert be.count == graphs, why
    if breaks is not None:
        assert stats.graph_breaks == breaks, why
    if fallbacks is not None:
        assert stats.eager_fallbacks == fallbacks, why
    return be


# ---------------------------------------------------------------------------
# collections.deque


def test_deque_made_in_the_frame_every_method():
    def f(x):
        d = collections.deque([1, 2, 3, 2], maxlen=6)
        d.append(4)
        d.appendleft(0)
        d.append(5)           # maxlen: drops 0 from the left
        d.extend([6])         # drops 1
        d.extendleft([-1])    # drops 6 from the right
        a = d.pop()
        b = d.popleft()
        d.rotate(2)
        d.rotate(-1)
        d.rotate()
        n2 = d.count(2)
        i3 = d.index(3)
        d.remove(2)
        d.insert(1, 7)
        d.reverse()
        c = d.copy()
        c.clear()
        e = collections.deque(range(5), 3)
        it = [v for v in d]
        return (x * a + b, n2, i3, list(d), d.maxlen, len(d), 4 in d, 99 in d, d[0], d[-1], it, len(c),
                list(e), e.maxlen, d == collections.deque(list(d)), d != e, collections.deque([1, 2]) <
                collections.deque([1, 3]), collections.deque([1]) < collections.deque([1, 0]), bool(c))
    check(f, lambda: (t(1, 2),))


def test_deque_index_with_bounds_like_cpython():
    def f(x):
        d = collections.deque("ABCABC")
        return x + 1, [d.index("B", s, e) if "B" in "ABCABC"[s:e] else -1
                       for s in range(-8, 8, 3) for e in range(-8, 8, 3)]
    check(f, lambda: (t(1),))


def test_existing_deque_argument_mutated_in_place():
    def f(x, d):
        d.append(x * 2)
        d.appendleft(x)
        first = d.popleft()
        d.rotate(1)
        d[0] = d[0] + 1
        d.extend([x, x])
        return first + d[-1], len(d), d.maxlen

    check(f, lambda: (t(1, 2), collections.deque([t(1, 1), t(2, 2)], maxlen=4)))


def test_existing_deque_attribute_and_identity():
    class Holder:
        def __init__(self):
            self.q = collections.deque([1, 2, 3])

    def f(x, h):
        q = h.q
        q.append(len(q))
        q.popleft()
        return x * q[0], q

    check(f, lambda: (t(1), Holder()))
    h = Holder()
    comp = bytegraph.compile(f, backend="eager")
    q = h.q
    _, r = comp(t(1), h)
    assert r is q and h.q is q and list(q) == [2, 3, 3]


def test_deque_returned_and_stored_in_a_global():
    def f(x):
        global STORED
        STORED = collections.deque([x, x + 1], maxlen=2)
        STORED.append(x + 2)
        return STORED

    check(f, lambda: (t(1),))
    assert isinstance(STORED, collections.deque) and STORED.maxlen == 2


@pytest.mark.parametrize("op", ["pop", "popleft", "index", "remove", "maxlen", "getitem", "insert_full",
                                "rotate_type"])
def test_deque_exceptions_like_cpython(op):
    def f(x):
        d = collections.deque([1, 2], maxlen=2)
        e = collections.deque()
        try:
            if op == "pop":
                e.pop()
            elif op == "popleft":
                e.popleft()
            elif op == "index":
                d.index(5)
            elif op == "remove":
                d.remove(5)
            elif op == "maxlen":
                collections.deque([], -1)
            elif op == "getitem":
                d[2]
            elif op == "insert_full":
                d.insert(0, 3)
            else:
                d.rotate("a")
        except Exception as exc:  # noqa: BLE001
            return x + 1, type(exc).__name__, str(exc)
        return x
    check(f, lambda: (t(1),), breaks=None if op == "rotate_type" else 0, graphs=None)


@pytest.mark.parametrize("method", ["count", "index", "remove", "contains"])
def test_deque_search_whose_comparison_mutates_raises_like_cpython(method):
    class Mutating:
        def __init__(self, d):
            self.d = d

        def __eq__(self, other):
            self.d.append(0)
            return False

    def f(x):
        d = collections.deque([1, 2])
        d.appendleft(Mutating(d))
        try:
            if method == "contains":
                r = 5 in d
            else:
                r = getattr(d, method)(5)
        except Exception as exc:  # noqa: BLE001
            return x + 1, type(exc).__name__, str(exc), len(d)
        return x, r

    check(f, lambda: (t(1),))


def test_deque_changed_while_iterated_raises():
    def f(x):
        d = collections.deque([1, 2, 3])
        try:
            for v in d:
                if v == 2:
                    d.append(4)
        except RuntimeError as exc:
            return x + 1, str(exc), list(d)
        return x

    check(f, lambda: (t(1),))


def test_deque_empty_pop_escapes_as_index_error():
    def f(x, d):
        d.append(x)
        d.pop()
        return d.pop()

    # (the trace sees the frame raise: that outcome is cached and runs natively)
    check(f, lambda: (t(1), collections.deque()), graphs=None, fallbacks=1)


def test_deque_of_tensors_in_a_loop_is_unrolled():
    def f(x):
        window = collections.deque(maxlen=3)
        for i in range(6):
            x = x * 2 + i
            window.append(x)
        return sum(window), len(window)
    be = check(f, lambda: (t(1, 2),))
    assert be.count == 1


def test_deque_passed_in_and_returned_keeps_identity():
    def f(x, d):
        d.append(1)
        return d

    check(f, lambda: (t(1), collections.deque([0])), graphs=None, same_result_as_arg=1)


# ---------------------------------------------------------------------------
# long pure-Python loops run natively


def test_long_loop_without_tensor_work_runs_natively(monkeypatch):
    monkeypatch.setattr(config, "max_python_loop_iterations", 50)
    records = []

    def listener(event, payload):
        if event == "break":
            records.append(payload)

    def f(x):
        d = collections.deque()
        for i in range(200):
            d.append(i)
        total = 0
        while d:
            total += d.popleft()
        return x + total

    diagnostics.add_listener(listener)
    try:
        comp = bytegraph.compile(f, backend="eager")
        for _ in range(2):
            assert torch.equal(comp(t(1)), f(t(1)))
    finally:
        diagnostics.remove_listener(listener)
    assert records and all(r.kind == "python_loop" for r in records)
    # the loops' bodies ran as they are: nothing compiled per iteration
    assert bytegraph.stats().recompiles == 0


def test_long_loop_with_tensor_work_is_still_unrolled(monkeypatch):
    monkeypatch.setattr(config, "max_python_loop_iterations", 5)

    def f(x):
        for i in range(20):
            x = x + i
        return x

    check(f, lambda: (t(1),))


def test_long_loop_nested_in_a_loop_with_tensor_work_is_still_unrolled(monkeypatch):
    monkeypatch.setattr(config, "max_python_loop_iterations", 5)

    def f(x):
        for i in range(3):
            x = x * 2
            s = 0
            for j in range(10):
                s += j
            x = x + s
        return x

    check(f, lambda: (t(1),))


def test_short_pure_loops_still_unroll():
    def f(x):
        d = collections.deque()
        for i in range(200):
            d.append(i)
        return x + sum(d)

    check(f, lambda: (t(1),))


# ---------------------------------------------------------------------------
# collections.Counter


def test_counter_made_in_the_frame():
    def f(x):
        c = collections.Counter("abracadabra")
        c.update(["a", "z"])
        c.update(q=2)
        c.subtract({"b": 1})
        c.subtract("zz")
        d = collections.Counter(a=3, b=-1, e=2)
        e = collections.Counter({"k": 2})
        return (x * c["a"] + c["missing"], c.most_common(2), c.most_common(), sorted(c.elements()), c.total(),
                "a" in c, "missing" in c, len(c), list(c.items()), d, e, c.get("a"), c.copy(), type(c.copy()))
    check(f, lambda: (t(1, 2),))


@pytest.mark.parametrize("op", ["+", "-", "|", "&", "pos", "neg", "+=", "-=", "|=", "&=", "==", "!=", "<=",
                                "<", ">=", ">", "eq_zero"])
def test_counter_operators(op):
    def f(x):
        a = collections.Counter(a=3, b=1, c=-2)
        b = collections.Counter(a=1, b=4, d=1)
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "|":
            r = a | b
        elif op == "&":
            r = a & b
        elif op == "pos":
            r = +a
        elif op == "neg":
            r = -a
        elif op == "+=":
            a += b
            r = a
        elif op == "-=":
            a -= b
            r = a
        elif op == "|=":
            a |= b
            r = a
        elif op == "&=":
            a &= b
            r = a
        elif op == "==":
            r = a == b
        elif op == "!=":
            r = a != b
        elif op == "<=":
            r = a <= b
        elif op == "<":
            r = a < b
        elif op == ">=":
            r = a >= b
        elif op == ">":
            r = a > b
        else:
            r = collections.Counter("a") == collections.Counter({"a": 1, "b": 0})
        return x + 1, r, type(r).__name__
    check(f, lambda: (t(1),))


def test_counter_argument_updated_in_place():
    def f(x, c):
        c["a"] += 5
        c.update("xy")
        c.subtract(["b"])
        del c["k"]
        return x * c["a"], c["nothing"], c

    check(f, lambda: (t(1), collections.Counter("kkab")))


def test_counter_errors_like_cpython():
    def f(x):
        c = collections.Counter("ab")
        out = []
        for thunk in (lambda: collections.Counter.fromkeys("ab"), lambda: c + {"a": 1},
                      lambda: c.update(1), lambda: c.most_common("x")):
            try:
                thunk()
            except Exception as exc:  # noqa: BLE001
                out.append((type(exc).__name__, str(exc)))
        return x + 1, out, c
    # (results and messages only: str() of an exception breaks today)
    check(f, lambda: (t(1),), graphs=None, breaks=None, fallbacks=None)


def test_counter_of_tensor_sizes_in_a_model_like_loop():
    def f(xs):
        shapes = collections.Counter(tuple(x.shape) for x in xs)
        (common, n), = shapes.most_common(1)
        return sum(x.sum() for x in xs if tuple(x.shape) == common) * n

    check(f, lambda: ([torch.randn(2, 3), torch.randn(2, 3), torch.randn(4)],))


# ---------------------------------------------------------------------------
# defaultdict with a user default_factory


def test_defaultdict_with_a_user_factory_object():
    class Factory:
        def __init__(self):
            self.made = 0

        def __call__(self):
            self.made += 1
            return [self.made]

    def f(x, fac):
        d = collections.defaultdict(fac)
        d["a"].append(x)
        d["b"]
        d2 = collections.defaultdict(lambda: x * 2)
        return d2["q"] + 1, dict(d), fac.made, d.default_factory is fac

    check(f, lambda: (t(1), Factory()))


# ---------------------------------------------------------------------------
# keys of their own __hash__/__eq__


class Key:
    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, Key) and other.name == self.name


class StrLikeKey(Key):
    """Equal to the str of its name too (a str key and it are one key)."""

    def __eq__(self, other):
        return other == self.name if isinstance(other, str) else isinstance(other, Key) and other.name == self.name

    __hash__ = Key.__hash__


class Colliding(Key):
    """Every instance hashes alike: lookups walk the stored keys by __eq__."""

    def __hash__(self):
        return 7


def test_user_hashed_keys_in_a_dict_made_in_the_frame():
    def f(x, k):
        d = {Key("a"): 1, Key("b"): 2}
        d[Key("a")] = 5                 # the stored Key("a") object stays, its value changes
        d[k] = 7
        e = {k: x}
        first = next(iter(d))
        return (x * d[Key("a")] + d[k], len(d), Key("b") in d, Key("z") in d, d.get(Key("q"), 0),
                e[Key("w")], d.pop(Key("b")), len(d), first.name, d.setdefault(Key("n"), 3), list(d.values()))
    check(f, lambda: (t(1, 2), Key("w")))


def test_user_hashed_key_lookup_misses_raise_key_error():
    def f(x):
        d = {Key("a"): 1}
        try:
            d[Key("b")]
        except KeyError as e:
            return x + 1, e.args[0].name
        return x
    check(f, lambda: (t(1),))


def test_user_key_equal_to_a_str_key_is_that_key():
    def f(x):
        d = {"a": 1, "b": 2}
        d[StrLikeKey("a")] = 10          # lands on the "a" entry: "a" == key is asked (reflected)
        e = {StrLikeKey("b"): 1}
        e["b"] = 2                       # the stored key's __eq__ says yes
        return x + 1, list(d.items()), [(type(k).__name__, v) for k, v in e.items()], "a" in d
    check(f, lambda: (t(1),))


def test_colliding_hashes_compare_in_insertion_order():
    def f(x):
        d = {}
        for name in "abcab":
            d[Colliding(name)] = d.get(Colliding(name), 0) + 1
        del d[Colliding("b")]
        d[Colliding("b")] = 9
        return x + len(d), [(k.name, v) for k, v in d.items()]
    check(f, lambda: (t(1),))


def test_counter_of_user_keys():
    def f(x):
        c = collections.Counter([Key("a"), Key("b"), Key("a")])
        return x * c[Key("a")], [(k.name, n) for k, n in c.items()], c[Key("zz")], c.most_common(1)[0][0].name
    check(f, lambda: (t(1),))


def test_user_hash_unknown_while_tracing_breaks_cleanly():
    class TensorHash:
        def __init__(self, t):
            self.t = t

        def __hash__(self):
            return int(self.t.sum())

        def __eq__(self, other):
            return self is other

    def f(x):
        d = {TensorHash(x): 1}
        return x + 1, len(d)

    check(f, lambda: (t(1),), graphs=None, breaks=None)


def test_user_hash_with_side_effects_breaks_cleanly():
    calls = []

    class Noisy(Key):
        def __hash__(self):
            calls.append(self.name)
            return hash(self.name)

    def f(x):
        d = {Noisy("a"): 1}
        d[Noisy("a")] += 1
        return x + 1, list(d.values())

    check(f, lambda: (t(1),), graphs=None, breaks=None)
    assert calls == ["a", "a", "a"] * 4   # eager and compiled, twice each: each once per dict operation


def test_unhashable_user_class_raises_type_error():
    class NoHash:
        def __eq__(self, other):
            return True

    def f(x):
        try:
            {NoHash(): 1}
        except TypeError as e:
            return x + 1, str(e)
        return x
    check(f, lambda: (t(1),))


def test_identity_hashed_objects_still_key_by_identity():
    class Plain:
        pass

    def f(x, p):
        q = Plain()
        d = {p: 1, q: 2}
        return x + d[p] + d[q], len(d), Plain() in d
    check(f, lambda: (t(1), Plain()))


def test_deque_iterator_outlives_the_frame():
    def f(x, d):
        e = collections.deque([x, x + 1, x + 2])
        it = iter(e)
        first = next(it)
        it2 = iter(d)
        next(it2)
        return first * 2, it, e, it2

    be = CountingBackend()
    comp = bytegraph.compile(f, backend=be)
    for _ in range(2):
        d = collections.deque([1, 2, 3])
        _, it, e, it2 = comp(t(1), d)
        assert [v.tolist() for v in it] == [[2.0], [3.0]] and list(it2) == [2, 3]
        e.append(0)
    assert be.count == 1 and bytegraph.stats().graph_breaks == 0 and bytegraph.stats().eager_fallbacks == 0


def test_iterator_of_a_changed_deque_still_fails_like_cpython():
    def f(x):
        e = collections.deque([1, 2])
        it = iter(e)
        e.append(3)
        return x + 1, it

    comp = bytegraph.compile(f, backend="eager")
    _, it = comp(t(1))
    with pytest.raises(RuntimeError):
        next(it)


def test_dict_of_user_keys_returned_breaks_at_its_first_key():
    def f(x):
        y = x + 1
        d = {Key("a"): y}
        d[Key("a")] = y * 2
        return d

    be = CountingBackend()
    comp = bytegraph.compile(f, backend=be)
    for _ in range(2):
        r = comp(t(1))
        (k, v), = r.items()
        assert k.name == "a" and torch.equal(v, t(4))
    # (then the dict is a pre-existing one, used natively between graphs)
    assert bytegraph.stats().eager_fallbacks == 0 and bytegraph.stats().graph_breaks == 2


def test_user_hash_and_eq_run_once_per_cpython_call():
    # CPython's setdefault hashes once and compares once (test_dict's test_setdefault_atomic)
    class Hashed:
        def __init__(self):
            self.hash_count = 0
            self.eq_count = 0

        def __hash__(self):
            self.hash_count += 1
            return 42

        def __eq__(self, other):
            self.eq_count += 1
            return id(self) == id(other)

    def f(x, h1, h2):
        y = {h1: 5}
        y.setdefault(h2, [])
        return x + 1, h1.hash_count, h2.hash_count, h1.eq_count + h2.eq_count

    check(f, lambda: (t(1), Hashed(), Hashed()), graphs=None, breaks=None)


def test_user_hash_raising_after_a_state_change():
    # test_dict's test_pop: the hash fails once ``fail`` is set
    class Exc(Exception):
        pass

    class BadHash:
        fail = False

        def __hash__(self):
            if self.fail:
                raise Exc()
            return 42

    def f(x):
        d = {}
        b = BadHash()
        d[b] = 42
        b.fail = True
        try:
            d.pop(b)
        except Exc:
            return x + 1, len(d)
        return x
    check(f, lambda: (t(1),))


def test_items_assigned_in_a_deque_keep_its_live_iterators():
    # test_deque's test_iterator_pickle: d[i] = x does not end an iterator over d
    def f(x, d):
        for i in range(len(d)):
            d[i] = d[i] * 2
        return x + 1

    comp = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        d = collections.deque([1, 2, 3])
        it = iter(d)
        next(it)
        comp(t(1), d)
        assert list(it) == [4, 6] and list(d) == [2, 4, 6]
    assert bytegraph.stats().graph_breaks == 0 and bytegraph.stats().eager_fallbacks == 0

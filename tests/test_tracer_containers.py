"""Differential tests: tuples, lists, dicts, sets, ranges and slices built and
used inside the traced function (never mutating pre-existing containers)."""

import collections
import dataclasses
import typing

import pytest
import torch

import bytegraph

from conftest import assert_same, compile_counting


def t(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape)))


Pair = collections.namedtuple("Pair", ["left", "right"])


# ---------------------------------------------------------------------------
# tuples

def test_tuple_build_index_slice():
    def f(x, y):
        tup = (x, y, x + y, 3)
        return tup[2], tup[-1], tup[1:3], tup[::-1], len(tup)

    assert_same(f, t(2), t(3)[:2])


def test_tuple_unpack_and_swap():
    def f(x, y):
        a, b = x, y
        a, b = b, a
        return a - b

    assert_same(f, t(3), t(4)[:3])


def test_tuple_star_unpack_middle():
    def f(x):
        first, *mid, last = (x, x * 2, x * 3, x * 4)
        return first + last, mid, type(mid) is list

    assert_same(f, t(2))


def test_tuple_methods_and_concat():
    def f(x):
        tup = (1, 2, 2, 3)
        more = tup + (4,) + (x,)
        return more[-1] * tup.count(2) + tup.index(3), len(more), tup * 2

    assert_same(f, t(2))


def test_tuple_input_unpack():
    def f(pair):
        a, b = pair
        return a @ b

    assert_same(f, (t(2, 3), t(3, 2)))


def test_namedtuple_input_fields():
    def f(p):
        return p.left * 2 + p[1], p._fields

    assert_same(f, Pair(t(3), t(4)[:3]))


def test_namedtuple_built_inside_and_returned():
    def f(x):
        return Pair(x + 1, right=x - 1)

    out, _ = assert_same(f, t(3))
    assert type(out) is Pair


class Span(typing.NamedTuple):
    start: torch.Tensor
    length: int = 2

    def end(self):
        return self.start + self.length

    @property
    def doubled(self):
        return self.length * 2


def test_typing_namedtuple_methods_replace_and_asdict():
    def f(x):
        s = Span(x)
        r = s._replace(length=5)
        d = r._asdict()
        return s.end(), r.end() * r.doubled, d, type(r).__name__

    out, _ = assert_same(f, t(3))
    assert isinstance(out[2], dict) and list(out[2]) == ["start", "length"]


def test_namedtuple_replace_with_an_unknown_field_raises_like_python():
    def f(x):
        try:
            Pair(x, 1)._replace(middle=2)
        except (ValueError, TypeError) as e:   # TypeError from 3.13
            return x + 1, type(e).__name__, str(e)

    assert_same(f, t(3))


def test_nested_tuple_unpack():
    def f(x):
        (a, (b, c)), d = (x, (x + 1, x + 2)), 3
        return a * b * c + d

    assert_same(f, t(3))


# ---------------------------------------------------------------------------
# lists

def test_list_build_append_extend_pop():
    def f(x):
        out = [x]
        out.append(x * 2)
        out.extend([x * 3, x * 4])
        last = out.pop()
        out.insert(0, last)
        return out

    assert_same(f, t(2))


def test_list_index_slice_and_del():
    def f(x):
        lst = [x, x + 1, x + 2, x + 3, x + 4]
        del lst[1]
        lst[0] = lst[0] * 10
        lst[1:3] = [x - 1]
        return lst[::2], lst[-1], len(lst)

    assert_same(f, t(3))


def test_list_reverse_sort_constants():
    def f(x):
        ks = [3, 1, 2]
        ks.sort()
        rs = list(ks)
        rs.reverse()
        return x * ks[0] + rs[0], ks, rs

    assert_same(f, t(2))


def test_list_count_index_remove_clear():
    def f(x):
        lst = [1, 2, 3, 2]
        n = lst.count(2)
        i = lst.index(3)
        lst.remove(2)
        other = [x]
        other.clear()
        return x * n + i, lst, other

    assert_same(f, t(2))


def test_list_concat_repeat_and_iadd():
    def f(x):
        a = [x] + [x * 2]
        b = [0] * 3
        a += [x * 3]
        return a, b, [x] * 2

    assert_same(f, t(2))


def test_list_of_tensors_to_stack():
    def f(xs):
        ys = [x * i for i, x in enumerate(xs)]
        return torch.stack(ys).sum(0)

    assert_same(f, [t(3), t(4)[:3], t(5)[:3]])


def test_list_input_read_only():
    def f(xs):
        return xs[0] + xs[-1], len(xs), xs[1:]

    assert_same(f, [t(2), t(3)[:2], t(4)[:2]])


def test_list_copy_is_new_object():
    def f(x):
        a = [x + 1, 1]
        b = a.copy()
        b.append(2)
        return a, b, a is b

    assert_same(f, t(2))


# ---------------------------------------------------------------------------
# dicts

def test_dict_build_get_set_del():
    def f(x):
        d = {"a": x, "b": x * 2}
        d["c"] = d["a"] + d["b"]
        del d["a"]
        return d, d.get("z", 5), d.get("b") * 1

    assert_same(f, t(3))


def test_dict_methods_keys_values_items():
    def f(x):
        d = {"w": x, "v": x + 1}
        ks = list(d.keys())
        vs = sum(d.values())
        its = [(k, v * 2) for k, v in d.items()]
        return ks, vs, its, "w" in d, "q" not in d, len(d)

    assert_same(f, t(2))


def test_dict_update_setdefault_pop_popitem():
    def f(x):
        d = dict(a=1)
        d.update({"b": x}, c=x * 2)
        d.setdefault("a", 100)
        d.setdefault("e", x + 5)
        p = d.pop("b")
        k, v = d.popitem()
        return d, p, k, v, d.pop("missing", -1)

    assert_same(f, t(2))


def test_dict_merge_operators():
    def f(x):
        a = {"x": x, "n": 1}
        b = {"n": 2, "y": x * 3}
        c = a | b
        a |= {"z": 0}
        return c, a, {**a, "m": x}

    assert_same(f, t(2))


def test_dict_int_and_tuple_keys():
    def f(x):
        d = {0: x, (1, 2): x * 2, 3.5: x * 3, None: 4, True: "t"}
        return d[0] + d[(1, 2)] + d[3.5], d[None], d[True], list(d)

    assert_same(f, t(2))


def test_dict_input_read():
    def f(params):
        return params["w"] @ params["b"], sorted(params.keys())

    assert_same(f, {"w": t(2, 3), "b": t(3)})


def test_dict_from_zip_and_copy():
    def f(x):
        d = dict(zip(["a", "b"], [x, x * 2]))
        e = d.copy()
        e["c"] = 0
        return d, e

    assert_same(f, t(3))


def test_nested_dict_of_lists():
    def f(x):
        d = {"layers": [{"w": x}, {"w": x * 2}]}
        return sum(layer["w"] for layer in d["layers"]), d

    assert_same(f, t(2))


# ---------------------------------------------------------------------------
# sets

def test_set_build_and_methods():
    def f(x):
        s = {1, 2, 3}
        s.add(4)
        s.discard(1)
        s.remove(2)
        u = s | {10}
        i = s & {3, 4, 99}
        diff = s - {3}
        return x * len(s), s, u, i, diff, 3 in s, 1 not in s

    assert_same(f, t(2))


def test_set_subset_and_sorted():
    def f(x):
        a = {3, 1, 2}
        b = set([1, 2])
        return x + sorted(a)[0], b.issubset(a), a.union(b, {7}), frozenset(b), a.isdisjoint({9})

    assert_same(f, t(2))


def test_set_dedups_tensors_by_identity():
    def f(x, y):
        s = {x, y, x}
        return len(s) * x

    assert_same(f, t(2), t(3)[:2])


# ---------------------------------------------------------------------------
# comprehensions of each kind

def test_list_comprehension_with_filter():
    def f(x):
        return [x * i for i in range(5) if i % 2 == 0]

    assert_same(f, t(2))


def test_dict_comprehension_with_fstring_keys():
    def f(x):
        return {f"layer_{i}": x + i for i in range(3)}

    out, _ = assert_same(f, t(2))
    assert list(out) == ["layer_0", "layer_1", "layer_2"]


def test_set_comprehension():
    def f(x):
        sizes = {d % 3 for d in x.shape}
        return x.sum() * len(sizes), sizes

    assert_same(f, t(3, 4, 6))


def test_generator_expression_in_sum_and_tuple():
    def f(x):
        total = sum(x * i for i in range(4))
        parts = tuple(x[i] for i in range(x.shape[0]))
        return total, parts

    assert_same(f, t(3))


def test_nested_comprehension():
    def f(x):
        grid = [[x * (i + j) for j in range(2)] for i in range(3)]
        flat = [v for row in grid for v in row]
        return grid, len(flat), flat[-1]

    assert_same(f, t(2))


def test_comprehension_reads_outer_variable():
    def f(x, scale):
        return [x * scale + i for i in range(2)]

    assert_same(f, t(2), 3.0)


# ---------------------------------------------------------------------------
# ranges and slices

def test_range_properties_and_index():
    def f(x):
        r = range(2, 12, 3)
        return x * r[1] + len(r), r[-1], r.start, r.stop, r.step, list(r[1:]), 5 in r

    assert_same(f, t(2))


def test_reversed_range_and_negative_step():
    def f(x):
        acc = []
        for i in range(4, 0, -2):
            acc.append(x * i)
        return acc, list(reversed(range(3)))

    assert_same(f, t(2))


def test_slice_objects_and_attributes():
    def f(x):
        s = slice(1, None, 2)
        return x[s], s.start, s.stop, s.step, [0, 1, 2, 3, 4][s]

    assert_same(f, t(6))


# ---------------------------------------------------------------------------
# returning nested containers, identity

def test_return_nested_containers():
    def f(x, y):
        return {"pair": (x, [y, {"deep": (x + y,)}]), "n": [1, (2, 3)], "s": "str"}

    assert_same(f, t(2), t(3)[:2])


def test_same_tensor_returned_twice_is_same_object():
    def f(x):
        y = x * 2
        return y, y

    out, _ = assert_same(f, t(3))
    assert out[0] is out[1]


def test_same_tensor_twice_in_nested_structure():
    def f(x):
        y = x.relu()
        return {"a": [y], "b": (y, x + 1)}

    out, _ = assert_same(f, t(3))
    assert out["a"][0] is out["b"][0]


def test_input_returned_unchanged_is_same_object():
    def f(x, y):
        return x, y + 1

    x = t(3)
    assert_same(f, x, t(4)[:3])
    compiled, _ = compile_counting(f)
    res = compiled(x, t(3))
    assert res[0] is x


def test_same_list_returned_twice_is_same_object():
    def f(x):
        lst = [x + 1]
        return lst, lst

    out, _ = assert_same(f, t(2))
    assert out[0] is out[1]


def test_empty_containers_returned():
    def f(x):
        return x + 1, [], (), {}, set()

    assert_same(f, t(2))


# ---------------------------------------------------------------------------
# more container semantics

CONTAINER_CASES = [
    ("unpack_dict_gives_keys", lambda x: (x * 1.5, tuple({"p": 1, "q": 2}), [*{"k": x}])),
    ("enumerate_dict", lambda x: [(i, k) for i, k in enumerate({"a": x + 1, "b": 2})]),
    ("zip_unequal_lengths", lambda x: list(zip([x + 1, x], [1]))),
    ("list_slice_negative_step", lambda x: [x + 1, 2, 3, 4][::-2]),
    ("sequence_comparisons", lambda x: (x + 1, [1, 2] < [1, 3], (1, 2) == (1, 2), [1] == [1.0], (1,) != [1],
                                        (1, 2) >= (1,))),
    ("set_comparisons_and_xor", lambda x: (x + 1, {1, 2} ^ {2, 3}, {1, 2} <= {1, 2, 3}, {1} < {1, 2},
                                           {3} > {1}, {1, 2} == {2, 1})),
    ("dict_equality", lambda x: (x + 1, {"a": 1} == {"a": 1}, {"a": 1} != {"a": 2}, {"a": 1} == {"b": 1})),
    ("nested_equality", lambda x: (x + 1, [[1], (2,)] == [[1], (2,)], [[1]] == [[2]])),
    ("distinct_containers_are_not_identical", lambda x: (x + 1, {} is {}, [] is [], {"a": 1} is {"a": 1})),
    ("membership", lambda x: (x + 1, "a" in "cat", "z" in ("a", "b"), 3 in {"a": 3}.values(), 2 in [1, 2],
                              (1, 2) in [(1, 2)], "k" in {"k": 0}.keys())),
    ("tensor_in_list_by_identity", lambda x: (x + 1, x in [x], x in (x, 1))),
    ("tensor_is_none", lambda x: (x + 1, x is None, x is not None)),
    ("dict_views", lambda x: (x + 1, list({"a": 1}.keys()), len({"a": 1}.items()), "a" in {"a": 1}.keys(),
                              list({"a": x}.values())[0] * 2)),
    ("tuple_from_generator", lambda x: tuple(x * i for i in (1, 2))),
    ("dict_from_zip_string", lambda x: {k: v for k, v in zip("ab", (x, x + 1))}),
    ("nested_comprehension_with_condition", lambda x: [[j for j in range(i) if j % 2] for i in range(4)] + [x + 1]),
    ("star_in_list_display", lambda x: [*range(2), *[x + 1], *(3,)]),
    ("star_in_dict_and_set_display", lambda x: ({**{"a": x + 1}, "b": 2, **dict(c=3)}, {*range(3), *{5}})),
    ("tuple_repeat_concat", lambda x: (x + 1,) * 2 + (1,)),
    ("pop_while_truthy", lambda x: (lambda lst: [lst.pop() for _ in range(len(lst))])([x, x + 1])),
    ("enumerate_reversed", lambda x: [(i, v * 2) for i, v in enumerate(reversed([x, x + 1]))]),
    ("dict_get_default_list", lambda x: ({"a": [x]}.get("b", [x + 1])[0], {}.get("a"))),
    ("tuple_negative_slice", lambda x: (x, x + 1, x + 2)[-2:]),
    ("sorted_items_by_value", lambda x: (x + 1, sorted({"a": 3, "b": 1}.items(), key=lambda kv: kv[1]))),
    ("nested_unpack_in_comprehension", lambda x: [a * b for (a, b), c in [((x, 2), 1), ((x + 1, 3), 4)]]),
    ("dict_from_enumerate", lambda x: {i: v for i, v in enumerate([x, x * 2])}),
    ("set_from_shape_and_string", lambda x: (x + 1, set(x.shape), sorted(set("banana")))),
    ("zip_star_transpose", lambda x: list(zip(*[(1, x + 1), (2, x + 2)]))),
]


@pytest.mark.parametrize("name,fn", CONTAINER_CASES, ids=[n for n, _ in CONTAINER_CASES])
def test_container_semantics(name, fn):
    assert_same(fn, t(2, 3))


def test_torch_size_built_and_returned():
    def f(x):
        s = torch.Size([x.shape[1], x.shape[0]])
        return x.reshape(s), s, type(s) is torch.Size

    out, _ = assert_same(f, t(2, 3))
    assert type(out[1]) is torch.Size


def test_list_popped_tensor_keeps_identity():
    def f(x):
        y = x * 2
        lst = [y, x]
        return lst.pop(0), y

    out, _ = assert_same(f, t(2))
    assert out[0] is out[1]


def test_equal_numbers_are_one_dict_key():
    def f(x):
        d = {1: x}
        d[True] = x + 1
        s = {1}
        s.add(1.0)
        return d[1], len(d), len(s)

    assert_same(f, t(2))


def test_list_sort_and_slice_assignment_growing():
    def f(x):
        ks = [3, 1, 2]
        ks.sort(reverse=True)
        lst = [1, 2, 3]
        lst[1:2] = [x, x + 1, x * 2]
        return ks, lst

    assert_same(f, t(2))


class _OwnReplace(collections.namedtuple("_OwnReplace", "a b")):
    def _replace(self, **changes):
        return ("own", sorted(changes))

    def _asdict(self):
        return "own asdict"


def test_namedtuple_subclass_with_its_own_replace_and_asdict_runs_them():
    def f(x):
        p = _OwnReplace(x, 1)
        return p._replace(a=2), p._asdict(), x + 1

    out, _ = assert_same(f, t(3))
    assert out[0] == ("own", ["a"]) and out[1] == "own asdict"



@dataclasses.dataclass
class Settings:
    scale: float
    bias: torch.Tensor = None
    steps: int = dataclasses.field(default=3, init=False)


SETTINGS = Settings(2.0)


def test_dataclasses_replace_of_preexisting_and_new_objects():
    def f(x):
        a = dataclasses.replace(SETTINGS, bias=x)
        b = dataclasses.replace(a, scale=a.scale * 2)
        return b.bias * b.scale + a.steps, a is SETTINGS, type(b).__name__

    out, _ = assert_same(f, t(3))
    assert SETTINGS.bias is None


def test_dataclasses_replace_errors_match_python():
    def f(x):
        try:
            dataclasses.replace(SETTINGS, steps=4)
        except (ValueError, TypeError) as e:   # TypeError from 3.13
            return x + 1, type(e).__name__, str(e)

    assert_same(f, t(3))


def test_dataclasses_replace_with_the_wrong_positional_arguments_raises_like_python():
    def f(x):
        out = []
        for args in ((), (SETTINGS, 2)):
            try:
                dataclasses.replace(*args)
            except TypeError as e:
                out.append(str(e))
        return x + 1, out

    assert_same(f, t(3))


GROUPS = collections.defaultdict(list)


def test_defaultdict_and_ordereddict_made_in_the_trace():
    def f(x):
        counts = collections.defaultdict(int)
        for k in "abca":
            counts[k] += 1
        groups = collections.defaultdict(list, {"seed": [x]})
        groups["new"].append(x * 2)
        od = collections.OrderedDict([("z", x), ("a", 1)])
        return x * counts["a"], counts, groups, od, counts.get("zz", -1), "zz" in counts

    out, _ = assert_same(f, t(3))
    assert type(out[1]) is collections.defaultdict and out[1].default_factory is int
    assert type(out[3]) is collections.OrderedDict and list(out[3]) == ["z", "a"]


def test_preexisting_defaultdict_fills_missing_keys_in_place():
    def f(x):
        GROUPS["seen"].append(1)
        return x * len(GROUPS["seen"])

    GROUPS.clear()
    out = bytegraph.compile(f, backend="eager", fullgraph=True)(t(3))
    assert GROUPS == {"seen": [1]} and type(GROUPS) is collections.defaultdict
    torch.testing.assert_close(out, t(3))
    GROUPS.clear()
    GROUPS.default_factory = lambda: [0]  # a new factory: guarded, so a new trace
    out = bytegraph.compile(f, backend="eager", fullgraph=True)(t(3))
    assert GROUPS == {"seen": [0, 1]}
    torch.testing.assert_close(out, t(3) * 2)
    GROUPS.default_factory = list


CONFIG = {"sizes": [1, 2], "name": "cfg", "pair": (3, [4])}


def test_copy_and_deepcopy_of_containers():
    import copy

    def f(x):
        shallow = copy.copy(CONFIG)
        shallow["name"] = "changed"
        deep = copy.deepcopy(CONFIG)
        deep["sizes"].append(3)
        deep["pair"][1].append(5)
        shared = [1]
        twice = copy.deepcopy([shared, shared])
        lst = copy.copy([x, 1])
        return (x * len(deep["sizes"]), shallow, deep, twice[0] is twice[1], lst[0] is x,
                copy.deepcopy((1, 2)) == (1, 2), CONFIG)

    assert_same(f, t(3))
    assert CONFIG == {"sizes": [1, 2], "name": "cfg", "pair": (3, [4])}

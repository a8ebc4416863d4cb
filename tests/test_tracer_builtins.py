"""Differential tests: builtins, ``operator`` and ``math`` functions, f-strings."""

import functools
import math
import operator

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, compile_counting


def t(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + 7))


# Each case returns a tensor computed with the builtin's result, plus the
# result itself, so both the value and its use in the graph are compared.
BUILTIN_CASES = [
    ("len_list", lambda x: x * len([1, 2, 3])),
    ("len_tensor_dict_str", lambda x: (x * len(x), len({"a": 1}), len("abc"))),
    ("isinstance_tensor", lambda x: (x + 1, isinstance(x, torch.Tensor), isinstance(x, (int, list)))),
    ("isinstance_containers", lambda x: (x + 1, isinstance([x], list), isinstance((x,), tuple),
                                         isinstance({}, dict), isinstance(3, (float, int)))),
    ("range_list", lambda x: (x * 2, list(range(1, 8, 2)))),
    ("enumerate_start", lambda x: [x * i + j for j, i in enumerate([3, 4], start=10)]),
    ("zip_three", lambda x: [a * b + c for a, b, c in zip([x, x + 1], [2, 3, 4], (5, 6))]),
    ("min_max_numbers", lambda x: (x * min(3, 1, 2), max([4, 9, 2]), min((5, 6)), max(1.5, 2))),
    ("min_max_key_default", lambda x: (x * len(max(["aa", "b", "cccc"], key=len)), min([], default=7),
                                       min({"k": 3, "a": 1}))),
    ("sum_list_start", lambda x: (sum([1, 2, 3]), sum([x, x * 2], x), sum((0.5, 1.5), 10))),
    ("abs_number_and_tensor", lambda x: (abs(-3) * x, abs(x), abs(-2.5))),
    ("any_all", lambda x: (x + 1, any([0, 0, 3]), all([1, True, "a"]), any([]), all(()))),
    ("any_over_shapes", lambda x: x * 2 if all(d > 1 for d in x.shape) else x),
    ("getattr_hasattr", lambda x: (getattr(x, "shape"), hasattr(x, "shape"), hasattr(3, "no_such_attr"),
                                   getattr("s", "missing", 4), getattr(x, "sum")(), hasattr(x, "relu"))),
    ("int_float_bool", lambda x: (x * int(3.9), float("1.5"), int("12"), bool(0), bool([1]),
                                  float(x.shape[0]), int(True))),
    ("tuple_list_conversions", lambda x: (tuple([x, 1]), list((x + 1, 2)), list("ab"), tuple(range(3)))),
    ("dict_set_conversions", lambda x: (dict([("a", x + 1), ("b", 2)]), set([3, 1, 3]), dict(a=1, b=x))),
    ("sorted_reverse_key", lambda x: (x * sorted([3, 1, 2])[0], sorted([3, 1, 2], reverse=True),
                                      sorted(["ccc", "a", "bb"], key=len), sorted({"z": 1, "a": 2}))),
    ("reversed_list_tuple", lambda x: (list(reversed([x, x + 1, x + 2])), tuple(reversed((1, 2, 3))))),
    ("map_builtin_and_lambda", lambda x: (list(map(abs, [-1, 2, -3])), list(map(lambda a: a * x, [1, 2])),
                                          list(map(operator.add, [1, 2], [10, 20])))),
    ("filter_none_and_fn", lambda x: (x * len(list(filter(None, [0, 1, 2, 0]))),
                                      list(filter(lambda v: v % 2, range(6))))),
    ("round_numbers", lambda x: (round(2.567, 2), round(3.5), round(-0.5), round(7.0) * x, round(1234, -2))),
    ("divmod_numbers", lambda x: (x * divmod(17, 5)[0], divmod(-7, 2), divmod(7.5, 2))),
    ("pow_builtin", lambda x: (pow(2, 10), pow(x, 2), pow(3, 4, 5))),
    ("next_iter", lambda x: (next(iter([x + 1, 1])), next(iter([]), "dflt"))),
    ("callable_builtin", lambda x: (x + 1, callable(len), callable(3), callable(lambda: 0))),
    ("type_of_values", lambda x: (x + 1, type(3) is int, type(x) is torch.Tensor, type([]) == list)),
    ("str_repr_on_constants", lambda x: (x + 1, str(3), repr("a"), str(1.5), repr((1, "b")))),
    ("chr_ord_hash", lambda x: (x * ord("a"), chr(98), hash(("k", 1)) == hash(("k", 1)))),
    ("sum_empty_and_start", lambda x: (x + sum([]), sum([], 5), sum(range(4)))),
    ("min_max_of_shape", lambda x: x * min(x.shape) + max(*x.shape, 1)),
    ("abs_divmod_floats", lambda x: (x + 1, abs(-0.0), divmod(-7.5, 2), abs(-7))),
    ("int_float_bool_more", lambda x: (x + 1, int(-2.7), int("ff", 16), float(3), bool(""), bool(x.shape))),
    ("round_more", lambda x: (x + 1, round(1255, -1), round(2.5), round(0.125, 2), round(-1.5))),
    ("sorted_tuples_and_str", lambda x: (x + 1, sorted([(2, "a"), (1, "b")]), sorted("cab"))),
    ("max_with_key_lambda", lambda x: (x + 1, max({"a": 3, "b": 1}, key=lambda k: {"a": 3, "b": 1}[k]))),
    ("map_two_iterables", lambda x: list(map(lambda a, b: a * b, [x, x], [1, 2]))),
    ("filter_keeps_tensors", lambda x: list(filter(lambda v: v is not None, [x, None, x + 1]))),
    ("any_over_generator", lambda x: (x + 1, any(d == 3 for d in x.shape), all(d > 5 for d in x.shape))),
    ("reversed_dict", lambda x: (x + 1, list(reversed({"a": 1, "b": 2})))),
    ("int_operators", lambda x: (x * (7 // 2), -7 // 2, -7 % 3, 2 ** -1, 7 / 2, 1 << 3, ~5, 6 & 3, 6 | 1, 6 ^ 2)),
    ("chained_comparisons", lambda x: (x + 1, 1 < 2 < 3, 3 > 2 > 2, 1 <= 1 == 1.0)),
    ("getattr_on_modules", lambda x: getattr(F, f"re{'lu'}")(x) + getattr(torch, "sigmoid")(x)),
    ("hasattr_on_modules", lambda x: (x + 1, hasattr(torch, "relu"), hasattr(F, "nope"))),
    ("isinstance_metadata", lambda x: (x + 1, isinstance(x.shape, tuple), isinstance(x.dtype, torch.dtype),
                                       isinstance(None, type(None)))),
    ("dtype_and_device_attrs", lambda x: (x + 1, x.dtype.itemsize, x.dtype.is_complex, torch.float16 == torch.half,
                                          x.device.type, str(x.device))),
    ("float_infinities", lambda x: torch.clamp(x, max=float("inf"), min=-math.inf)),
    ("truth_of_builtins", lambda x: (x + 1, bool(None), bool({}), not [], not (1,), bool(range(0)))),
    ("complex_and_bytes", lambda x: (x + 1, complex(1, 2) * 2, abs(3 + 4j), b"ab" + b"c", len(b"xyz"))),
    ("bool_arithmetic", lambda x: (x * (True + True), True & False, 3 * False)),
    ("max_default_none", lambda x: (x + 1, max([], default=None), min(len("ab"), len("abc")), max("abc"))),
    ("range_len_and_equality", lambda x: (x + 1, len(range(0, 10, 3)), range(3) == range(0, 3))),
    ("string_repeat_join", lambda x: (x + 1, "ab" * 2 + "c", "-".join(("a",) * 3))),
    ("str_methods_misc", lambda x: (x + 1, "Ab".lower(), "a-b".split("-"), " s ".strip(), "x".join("ab"),
                                    "%d-%s" % (1, "a"), "{}{}".format(1, 2))),
]


@pytest.mark.parametrize("name,fn", BUILTIN_CASES, ids=[n for n, _ in BUILTIN_CASES])
def test_builtin(name, fn):
    assert_same(fn, t(4))


# ---------------------------------------------------------------------------
# operator module

OPERATOR_CASES = [
    ("arith_numbers", lambda x: (x * operator.add(2, 3), operator.sub(2, 5), operator.mul(3, 4),
                                 operator.truediv(7, 2), operator.floordiv(7, 2), operator.mod(7, 3),
                                 operator.pow(2, 5), operator.neg(4))),
    ("arith_tensors", lambda x: (operator.add(x, 1), operator.mul(x, x), operator.matmul(x, x),
                                 operator.neg(x), operator.truediv(x, 2))),
    ("compare", lambda x: (x + 1, operator.lt(1, 2), operator.ge(2, 3), operator.eq("a", "a"),
                           operator.ne(1, 1), operator.gt(x, 0))),
    ("logic", lambda x: (x + 1, operator.not_(0), operator.truth([1]), operator.and_(6, 3),
                         operator.or_(4, 1), operator.xor(5, 1), operator.invert(5))),
    ("identity_contains", lambda x: (x + 1, operator.is_(None, None), operator.is_not(x, None),
                                     operator.contains([1, 2], 2), operator.contains({"a": 1}, "b"))),
    ("getitem", lambda x: (operator.getitem(x, 0), operator.getitem([5, 6], -1),
                           operator.getitem({"k": x}, "k") + 1)),
    ("index_abs", lambda x: (x * operator.index(3), operator.abs(-4), operator.abs(x))),
    ("itemgetter", lambda x: (operator.itemgetter(1)([x, x * 2]), operator.itemgetter(0, 2)((x, 5, x + 1)),
                              sorted([(2, x), (1, x * 3)], key=operator.itemgetter(0))[0][1])),
    ("functools_reduce", lambda x: (functools.reduce(operator.mul, [x, x + 1, 2]),
                                    functools.reduce(lambda a, b: a + b, [1, 2, 3], x),
                                    functools.reduce(max, (3, 9, 2)), functools.reduce(operator.add, [], 7))),
    ("attrgetter", lambda x: (operator.attrgetter("shape")(x), operator.attrgetter("real", "dtype")(x),
                              operator.attrgetter("T.shape")(x.view(2, 2)) if x.numel() == 4 else None)),
]


@pytest.mark.parametrize("name,fn", OPERATOR_CASES, ids=[n for n, _ in OPERATOR_CASES])
def test_operator_module(name, fn):
    assert_same(fn, t(3, 3))


# ---------------------------------------------------------------------------
# math module (Python numbers only)

MATH_CASES = [
    ("sqrt", lambda x: x / math.sqrt(x.shape[-1])),
    ("misc", lambda x: (x + 1, math.log2(8), math.log10(100), math.atan2(1, 1), math.degrees(math.pi),
                        math.isqrt(17), math.comb(5, 2), math.perm(4, 2), math.dist((0, 0), (3, 4)))),
    ("log_exp", lambda x: x * math.log(8, 2) + math.exp(0)),
    ("trig", lambda x: x * math.cos(0.0) + math.sin(math.pi / 2) + math.tan(0)),
    ("floor_ceil_trunc", lambda x: (x + math.floor(2.7), math.ceil(2.1), math.trunc(-2.5))),
    ("prod_gcd_factorial", lambda x: x.reshape(-1) * math.prod(x.shape) + math.gcd(12, 18) + math.factorial(4)),
    ("isclose_isfinite", lambda x: (x + 1, math.isclose(0.1 + 0.2, 0.3), math.isfinite(math.inf),
                                    math.isnan(float("nan")))),
    ("constants", lambda x: x * math.pi + math.e - math.tau),
    ("hypot_copysign_fabs", lambda x: (x * math.hypot(3, 4), math.copysign(2, -1), math.fabs(-3))),
]


@pytest.mark.parametrize("name,fn", MATH_CASES, ids=[n for n, _ in MATH_CASES])
def test_math_module(name, fn):
    assert_same(fn, t(2, 3))


# ---------------------------------------------------------------------------
# f-strings and string methods on constants

def test_fstring_builds_dict_keys():
    def f(x):
        out = {}
        for i, name in enumerate(["q", "k", "v"]):
            out[f"{name}_{i:02d}"] = x * i
        return out

    out, _ = assert_same(f, t(2))
    assert list(out) == ["q_00", "k_01", "v_02"]


def test_fstring_with_conversions_and_shape():
    def f(x):
        tag = f"{x.shape[0]!r}-{'a'!s}-{x.dtype}-{1.25:.1f}"
        return {tag: x + 1}

    assert_same(f, t(3))


def test_string_methods_on_constants():
    def f(x, mode):
        parts = "a,b,c".split(",")
        key = "_".join(("x", "y")).upper() + parts[-1]
        scale = 2 if mode.startswith("tr") else 3
        return x * scale, key, mode.replace("train", "eval"), f"{mode:>8}"

    assert_same(f, t(2), "train")


def test_string_argument_selects_branch_and_recompiles():
    def f(x, act):
        if act == "relu":
            return x.relu()
        return x.sigmoid()

    compiled, be = compile_counting(f)
    x = t(4)
    for act in ("relu", "sigmoid", "relu"):
        torch.testing.assert_close(compiled(x, act), f(x, act))
    assert be.count == 2  # one graph per value of the guarded string


def test_str_join_of_list_built_inside():
    def f(x):
        parts = "a,b,c".split(",")
        return {"_".join(parts): x + 1}

    assert_same(f, t(2))


def test_hasattr_missing_tensor_attribute():
    def f(x):
        return x + 1, hasattr(x, "no_such_attr"), getattr(x, "missing", 4)

    assert_same(f, t(2))


def test_fstring_format_specs():
    def f(x):
        return {f"{math.pi:.3f}": x, f"{12:>5}|{'x':^3}": x + 1, f"{1e6:,.0f}": 0}

    assert_same(f, t(2))


def test_torch_size_method():
    def f(x):
        return x.reshape(x.shape.numel())

    assert_same(f, t(2, 3))


def test_reduce_of_empty_raises_like_python():
    def f(x):
        try:
            functools.reduce(operator.add, [])
        except TypeError as e:
            return x + 1, str(e)

    assert_same(f, t(3))

"""Differential tests: inlined user functions (defaults, keyword-only, *args,
**kwargs, unpacking calls, nesting, recursion, lambdas, other modules)."""

import functools

import pytest
import torch

import tracer_helpers
from conftest import assert_same
from tracer_helpers import apply_twice, depth_sum, scaled


def t(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + 3))


def helper_defaults(x, a=1, b=2.0, c=None):
    out = x * a + b
    if c is not None:
        out = out + c
    return out


def helper_kwonly(x, *, scale, shift=0.5):
    return x * scale + shift


def helper_varargs(*xs):
    return sum(xs[1:], xs[0]), len(xs)


def helper_kwargs(x, **opts):
    for name in sorted(opts):
        x = x + opts[name]
    return x, sorted(opts)


def helper_everything(a, b=2, *rest, k, m=3, **extra):
    return a * b + sum(rest) + k * m + len(extra), rest, extra


def helper_posonly(a, b, /, c):
    return a - b + c


def inner(x):
    return x.sin()


def middle(x):
    return inner(x) + inner(x * 2)


def outer(x):
    return middle(x) * middle(-x)


def factorial_like(x, n):
    return x if n <= 1 else n * factorial_like(x, n - 1)


def returns_tuple(x):
    return x + 1, x - 1


def test_defaults_positional_and_keyword():
    def f(x, y):
        return helper_defaults(x), helper_defaults(x, 3), helper_defaults(x, b=1.5, c=y)

    assert_same(f, t(3), t(4)[:3])


def test_keyword_only_arguments():
    def f(x):
        return helper_kwonly(x, scale=2), helper_kwonly(x, shift=-1, scale=3)

    assert_same(f, t(3))


def test_varargs():
    def f(x, y):
        return helper_varargs(x, y, x * y), helper_varargs(y)

    assert_same(f, t(3), t(4)[:3])


def test_var_kwargs():
    def f(x):
        return helper_kwargs(x, b=2, a=1), helper_kwargs(x)

    assert_same(f, t(3))


def test_all_parameter_kinds():
    def f(x):
        return helper_everything(x, 3, 4, 5, k=x, z=1, w=2)

    assert_same(f, t(2))


def test_positional_only():
    def f(x, y):
        return helper_posonly(x, y, c=2)

    assert_same(f, t(2), t(3)[:2])


def test_call_with_star_unpacking():
    def f(x, y):
        args = (x, y)
        more = [x * 2]
        return helper_varargs(*args, *more), helper_posonly(*args, 1)

    assert_same(f, t(3), t(4)[:3])


def test_call_with_double_star_unpacking():
    def f(x):
        opts = {"b": 0.5, "c": x}
        return helper_defaults(x, **opts), helper_kwonly(x, **{"scale": 4}), helper_kwargs(x, **opts, z=1)

    assert_same(f, t(3))


def test_call_with_mixed_star_and_double_star():
    def f(x):
        pos = [x, 2]
        kw = {"k": 1}
        return helper_everything(*pos, 7, **kw, m=2)

    assert_same(f, t(2))


def test_nested_calls():
    assert_same(outer, t(4))


def test_recursion_with_constant_depth():
    def f(x):
        return factorial_like(x, 4), depth_sum(x, 3)

    assert_same(f, t(3))


def test_function_returning_tuple_unpacked():
    def f(x):
        a, b = returns_tuple(x)
        return a * b

    assert_same(f, t(3))


def test_lambda_defined_and_called():
    def f(x):
        sq = lambda v, p=2: v ** p  # noqa: E731
        return sq(x) + sq(x, p=3)

    assert_same(f, t(3))


def test_lambda_as_argument_and_sort_key():
    def f(x):
        items = [(2, "b"), (1, "a"), (3, "c")]
        items = sorted(items, key=lambda kv: kv[0])
        return apply_twice(lambda v: v * 2 + 1, x), [v for _, v in items]

    assert_same(f, t(3))


def test_nested_def_reads_enclosing_variables():
    def f(x, scale):
        bias = x.mean()

        def g(v):
            return v * scale + bias
        return g(x), g(x * 2)

    assert_same(f, t(3), 1.5)


def test_function_from_other_module():
    def f(x):
        return scaled(x), scaled(x, factor=3), tracer_helpers.scaled(x, 1)

    assert_same(f, t(2))


def test_other_module_global_tensor_is_input():
    def f(x):
        return tracer_helpers.with_global_tensor(x)

    assert_same(f, t(2))


def test_other_module_closure_factory():
    def f(x):
        add3 = tracer_helpers.make_adder(3)
        return add3(x), tracer_helpers.make_adder(x)(x)

    assert_same(f, t(2))


def test_functools_partial():
    def f(x):
        p = functools.partial(helper_defaults, b=0.0)
        return p(x, 2), p(x)

    assert_same(f, t(3))


def test_global_lambda():
    def f(x):
        return GLOBAL_LAMBDA(x), GLOBAL_LAMBDA.__name__

    assert_same(f, t(3))


def test_pre_existing_partial_global():
    def f(x):
        return GLOBAL_PARTIAL(x)

    assert_same(f, t(3))


GLOBAL_PARTIAL = functools.partial(helper_kwonly, scale=5)
GLOBAL_LAMBDA = lambda v: v.relu() * 2  # noqa: E731


def test_function_objects_in_containers():
    def f(x):
        acts = {"relu": torch.relu, "tanh": torch.tanh, "mine": inner}
        return [fn(x) for fn in acts.values()], [act(x) for act in (torch.sigmoid, lambda v: v * 0)]

    assert_same(f, t(3))


def test_function_passed_as_argument():
    def f(x, fn):
        return fn(x) + fn(x + 1)

    assert_same(f, t(3), inner)


def test_function_attributes():
    def f(x):
        return x + 1, inner.__name__, helper_defaults.__qualname__

    assert_same(f, t(2))


def test_wrong_call_raises_type_error_like_python():
    def f(x):
        try:
            helper_kwonly(x, 2)
        except TypeError:
            return x + 1
        return x - 1

    assert_same(f, t(2))


def test_recursive_nested_function():
    def f(x):
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)
        return x * fact(4)

    assert_same(f, t(2))


def test_default_argument_tensor_is_an_input():
    default = torch.ones(2)

    def g(x, b=default):
        return x + b

    def f(x):
        return g(x)

    assert_same(f, t(2))


def test_root_keyword_and_varkw_arguments():
    def f(x, *, scale=2, **kw):
        return x * scale + len(kw), sorted(kw)

    assert_same(f, t(2), kwargs={"scale": 3, "z": 1})


def test_root_varargs():
    def f(*xs):
        return sum(xs), len(xs)

    assert_same(f, t(2), t(3)[:2], t(4)[:2])


def test_root_defaults_used():
    def f(x, y=None, n=3):
        return x * n if y is None else x + y

    assert_same(f, t(2))
    assert_same(f, t(2), kwargs={"n": 5})
    assert_same(f, t(2), t(3)[:2])


def test_lambda_forwarding_star_args_to_nested_def():
    def f(x):
        def g(a, *, k=2, **kw):
            return a * k + len(kw)
        h = lambda *a, **k: g(*a, **k)  # noqa: E731
        return h(x), h(x, k=3, z=1)

    assert_same(f, t(2))


def flatten(items):
    for item in items:
        if isinstance(item, list):
            yield from flatten(item)
        else:
            yield item


def test_generator_with_yield_from_is_run_whole():
    def f(x):
        return sum(flatten([x, [x * 2, [x + 1]], 3])), list(flatten([[1, 2], (3,)]))

    assert_same(f, t(3))


def test_module_modules_and_named_modules_walk():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 2)))

    def f(x):
        linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
        names = [n for n, _ in net.named_modules()]
        return net(x) * len(linears), names

    assert_same(f, t(2, 3))


@torch.compiler.disable
def left_alone(x):
    return x.sin() + 1


def test_compiler_disable_runs_the_call_natively():
    def f(x):
        return left_alone(x * 2) * 3

    assert_same(f, t(3), graphs=2, breaks=1)


def test_itertools_over_values_and_constants():
    import itertools
    import operator

    def f(x):
        pairs = list(itertools.product([x, x * 2], [1, 2]))
        combos = [a + b for a, b in itertools.combinations([x, x + 1, x + 2], 2)]
        perms = list(itertools.permutations("abc", 2))
        running = list(itertools.accumulate([x, x, x]))
        prod = list(itertools.accumulate([1, 2, 3], operator.mul, initial=10))
        return [a * b for a, b in pairs], combos, perms, running, prod, list(itertools.product([0, 1], repeat=2))

    assert_same(f, t(3))


def test_list_sort_with_a_key():
    def f(x):
        ts = [x[:1], x, x[:2]]
        ts.sort(key=lambda v: v.shape[0], reverse=True)
        names = ["bb", "a", "ccc"]
        names.sort(key=len)
        return ts, names

    assert_same(f, t(3))


def test_generator_used_as_a_generator_is_traced_lazily():
    import inspect
    import bytegraph
    from conftest import CountingBackend

    def gen():
        got = yield 1
        yield got * 2

    def sends(x):
        g = gen()
        next(g)
        return x * g.send(3)

    def returns(x):
        return (x * i for i in range(3))

    def returns_started(x):
        g = (x * i for i in range(3))
        next(g)
        return g

    # send() runs in the trace; an unstarted generator is rebuilt by calling
    # its function again; a started one cannot be, so that frame runs eagerly
    for fn, check, fallbacks in ((sends, lambda out: torch.equal(out, torch.ones(2) * 6), 0),
                                 (returns, lambda out: inspect.isgenerator(out) and len(list(out)) == 3, 0),
                                 (returns_started, lambda out: inspect.isgenerator(out) and len(list(out)) == 2, 1)):
        be = CountingBackend()
        out = bytegraph.compile(fn, backend=be)(torch.ones(2))
        assert check(out), fn.__name__
        assert bytegraph.stats().eager_fallbacks == fallbacks, fn.__name__
        out = bytegraph.compile(fn, backend=be)(torch.ones(2))
        assert check(out), fn.__name__
        bytegraph.reset()


def test_generator_consumed_inside_is_still_captured():
    def f(x):
        g = (x * i for i in range(1, 4))
        first = next(g)
        return first + sum(g), isinstance(g, type(i for i in ()))

    assert_same(f, t(3))


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b

    def __eq__(self, other):  # how the differential check compares results
        return type(other) is Slotted and self.b == other.b and torch.allclose(self.a, other.a)


class _WithDict:
    def __init__(self, a):
        self.a = a


def test_attribute_errors_of_objects_made_in_the_trace_carry_the_name_as_python():
    def f(x):
        o = _WithDict(x)
        errs = []
        for op in (lambda: o.b, lambda: delattr(o, "b")):
            try:
                op()
            except AttributeError as e:
                errs.append((str(e), e.name))
        return x + 1, errs

    assert_same(f, t(3))


def test_object_with_slots_made_in_the_trace():
    def f(x):
        o = Slotted(x, 2)
        o.b = o.b + 1
        errs = []
        # 3.13 words these "... and no __dict__ for setting new attributes", with the name
        for op in (lambda: setattr(o, "c", 1), lambda: delattr(o, "c")):
            try:
                op()
            except AttributeError as e:
                errs.append((str(e), e.name))
        del o.b
        try:
            del o.b     # a declared slot that is unset
        except AttributeError as e:
            errs.append((str(e), e.name))
        try:
            o.b         # a failed read carries the name
        except AttributeError as e:
            errs.append((str(e), e.name))
        o.b = 3
        return o.a * o.b, o, errs

    out, _ = assert_same(f, t(3), check_identity=False)
    assert type(out[1]) is Slotted and out[1].b == 3


def twice(fn):
    @functools.wraps(fn)
    def inner(*args):
        return fn(*args) * 2
    return inner


def module_level(y):
    """Adds one."""
    return y + 1


module_level.tag = "kept"


def test_functools_wraps_in_the_trace():
    def f(x):
        @twice
        def local(y):
            """Local doc."""
            return y - 1

        wrapped = twice(module_level)
        return (local(x), wrapped(x), local.__name__, local.__doc__, wrapped.__qualname__, wrapped.tag,
                wrapped.__wrapped__ is module_level)

    assert_same(f, t(3))


def test_function_made_in_the_trace_escapes_with_its_attributes():
    def f(x):
        @twice
        def local(y):
            return y * 3
        local.marker = 7
        return local, x + 1

    import bytegraph
    from conftest import CountingBackend
    be = CountingBackend()
    fn, y = bytegraph.compile(f, backend=be, fullgraph=True)(torch.ones(2))
    assert be.count == 1
    torch.testing.assert_close(y, torch.full((2,), 2.0))
    assert fn.__name__ == "local" and fn.marker == 7 and fn.__wrapped__.__name__ == "local"
    torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 6.0))

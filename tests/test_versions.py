"""Constructs whose bytecode differs between CPython 3.11, 3.12 and 3.13,
compiled vs eager on whichever interpreter runs the suite (issue #14).

Each test is differential (result, inputs afterwards, identity) and says how
many graphs and breaks it expects, so a frame that silently ran eagerly
fails.  What each exercises per version:

* comprehensions: 3.12 inlines them (PEP 709: ``LOAD_FAST_AND_CLEAR``, the
  outer binding restored by ``STORE_FAST`` of a maybe-NULL value);
* keyword calls: ``KW_NAMES`` + ``PRECALL`` + ``CALL`` (3.11), ``KW_NAMES`` +
  ``CALL`` (3.12), ``CALL_KW`` with the names on the stack (3.13), also
  across graph breaks;
* method calls and ``super()``: ``LOAD_METHOD`` (3.11), ``LOAD_ATTR`` with the
  method bit and ``LOAD_SUPER_ATTR`` (3.12+), the NULL above the callable (3.13);
* f-strings: ``FORMAT_VALUE`` (3.11, 3.12), ``CONVERT_VALUE`` /
  ``FORMAT_SIMPLE`` / ``FORMAT_WITH_SPEC`` (3.13);
* truth tests: implicit in the jumps (3.11, 3.12), ``TO_BOOL`` and
  COMPARE_OP's bool bit (3.13), where a data-dependent branch must break;
* ``with`` blocks inside loops, whose cleanup 3.12+ lay out after the loop;
* generators: ``END_FOR``/``END_SEND``, the StopIteration wrapper, throw()
  into ``yield from`` (``CLEANUP_THROW``).
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

import bytegraph
from bytegraph.bytecode import SPEC, assemble, decode, emit, instr
from conftest import assert_same, compile_counting


def t(*shape):
    return torch.randn(*shape) if shape else torch.randn(3)


# -- comprehensions (PEP 709 on 3.12+) ---------------------------------------------

def test_comprehension_restores_a_shadowed_outer_variable():
    def f(x):
        i = x * 10          # the comprehension's ``i`` must not clobber it
        ys = [x + i for i in range(3)]
        return i, torch.stack(ys).sum(0)

    assert_same(f, t())


def test_comprehension_variable_unbound_before_and_after():
    def f(x):
        ys = [x * j for j in range(3)]
        try:
            j  # noqa: F821 - unbound after the comprehension, as before it
            seen = True
        except NameError:
            seen = False
        return torch.stack(ys), seen

    assert_same(f, t())


def test_nested_comprehensions_with_a_break_inside():
    def f(x):
        return [[print(j, end="") or x * i * j for j in range(2)] for i in range(2)]

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert_same(f, t(), graphs=None, breaks=None)
    assert out.getvalue() == "0101" * 2 * 2


def test_dict_and_set_comprehensions_and_generator_expressions():
    def f(x):
        d = {k: x * k for k in range(3)}
        s = {k % 2 for k in range(5)}
        g = sum(x * k for k in range(4))
        return d[2], sorted(s), g

    assert_same(f, t(), graphs=1)


# -- calls ---------------------------------------------------------------------------

def _kw(a, b=1, *, c=2, **more):
    return a * b + c + sum(more.values())


def test_keyword_calls():
    def f(x):
        return _kw(x, c=3), _kw(x, b=2, c=1, d=4), _kw(a=x), _kw(x, **{"c": 5})

    assert_same(f, t())


def test_keyword_call_across_a_graph_break():
    def g(a, *, scale):
        print("in g")
        return a * scale

    def f(x):
        y = x + 1
        return g(y, scale=3) - 1, _kw(y, c=g(x, scale=2).sum())

    with contextlib.redirect_stdout(io.StringIO()):
        assert_same(f, t(), graphs=None, breaks=None)


def test_method_calls_and_zero_argument_super():
    class Base(torch.nn.Module):
        def forward(self, x):
            return x * 2

        def scale(self, x, by=1):
            return x * by

    class Child(Base):
        def forward(self, x):
            y = super().forward(x)
            return super(Child, self).scale(y, by=3) + self.scale(x)

    m = Child()
    assert_same(m, t())


def test_super_call_across_a_graph_break():
    class Base:
        def run(self, x):
            print("base")
            return x + 1

    class Child(Base):
        def run(self, x):
            return super().run(x) * 2

    obj = Child()

    def f(x):
        return obj.run(x)

    with contextlib.redirect_stdout(io.StringIO()):
        assert_same(f, t(), graphs=1, breaks=1)


# -- f-strings ------------------------------------------------------------------------

def test_fstrings_with_conversions_and_specs():
    def f(x):
        n, name, w = 3, "bg", 7
        s = f"{n} {n!r} {name!s:>5} {name!a} {n:0{w}d} {1.5:.2f}"
        return x * len(s), s

    assert_same(f, t())


# -- truth tests ------------------------------------------------------------------------

def test_size_comparisons_in_conditions():
    def f(x):
        if x.shape[0] < 4:
            y = x + 1
        else:
            y = x - 1
        if not x.shape[0] >= 10 and x.dim():
            y = y * 2
        return y

    assert_same(f, t())


def test_data_dependent_comparison_breaks_and_takes_the_right_branch():
    def f(x):
        if x.sum() < 0:          # 3.13: COMPARE_OP with its bool bit, no TO_BOOL
            return x - 1
        return x + 1

    for sign in (1.0, -1.0):
        bytegraph.reset()
        x = torch.ones(3) * sign
        cf, be = compile_counting(f)
        assert torch.equal(cf(x), f(x))
        assert torch.equal(cf(-x), f(-x))
        assert bytegraph.stats().graph_breaks >= 1


def test_truthiness_of_a_tensor_in_and_or_not():
    def f(x):
        a = bool(x.sum() > 0) and x.max() > 1
        b = not (x.min() > 0)
        return a, b, x * 2

    for v in (torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 0.5])):
        cf, _ = compile_counting(f)
        out, exp = cf(v), f(v)
        assert bool(out[0]) == bool(exp[0]) and out[1] == exp[1] and torch.equal(out[2], exp[2])


# -- with blocks inside loops -------------------------------------------------------------

@contextlib.contextmanager
def _tag(log, k):
    log.append(("in", k))
    yield k
    log.append(("out", k))


def test_with_block_in_a_loop_with_a_break_in_the_body():
    def f(x, log):
        for i in range(3):
            with torch.no_grad():
                x = x * 2
                print(i, end="")
            with _tag(log, i) as k:
                x = x + k
        return x

    with contextlib.redirect_stdout(io.StringIO()):
        assert_same(f, t(), [], graphs=None, breaks=None)


def test_exception_suppressed_by_a_with_block_in_a_loop():
    class Suppress:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return exc[0] is KeyError

    def f(x):
        out = []
        for i in range(4):
            with Suppress():
                if i % 2:
                    raise KeyError(i)
                out.append(x * i)
        return torch.stack(out)

    assert_same(f, t())


# -- generators -------------------------------------------------------------------------------

def test_generator_throw_and_close_through_yield_from():
    def f(x):
        log = []

        def inner():
            try:
                yield x
                yield x * 2
            except ValueError:
                log.append("caught")
                return "rv"
            finally:
                log.append("inner finally")

        def outer():
            r = yield from inner()
            log.append(r)
            yield x * 3

        g = outer()
        a = next(g)
        b = g.throw(ValueError)
        g.close()
        return a, b, log

    assert_same(f, t())


def test_stop_iteration_escaping_a_generator_is_a_runtime_error():
    def f(x):
        def gen():
            yield x
            raise StopIteration   # PEP 479: a RuntimeError for the caller
        try:
            list(gen())
        except RuntimeError as e:
            return x + 1, str(e)
        return x, ""

    assert_same(f, t(), graphs=None, breaks=None)


def test_for_loop_exhaustion_skips_end_for():
    def f(x):
        total = x
        for k in range(3):
            for j in (1, 2):
                total = total + k * j
        else:
            total = total * 2
        return total

    assert_same(f, t())


# -- the emission layer (bytecode.emit) -----------------------------------------------------------

def _run(body, *args, argnames=("x",)):
    template = (lambda x: None).__code__
    code = assemble(body, template, co_varnames=tuple(argnames), co_argcount=len(argnames))
    import types
    return types.FunctionType(code, {"__builtins__": __builtins__})(*args)


def test_emitted_calls_run_on_this_version():
    body = [instr("RESUME", arg=0)]
    body += emit.with_null([instr("LOAD_CONST", dict)])
    body += [instr("LOAD_FAST", "x"), instr("LOAD_CONST", 2)]
    body += emit.call(2, ("a", "b"))
    body += [instr("RETURN_VALUE")]
    assert _run(body, 7) == {"a": 7, "b": 2}


def test_emitted_function_with_closure_and_defaults():
    def outer():
        v = 5

        def inner(a=1):
            return a + v
        return inner

    inner_code = next(c for c in outer.__code__.co_consts if hasattr(c, "co_code"))
    cell = outer().__closure__[0]
    body = [instr("RESUME", arg=0),
            instr("LOAD_CONST", (10,)),                 # defaults (0x01)
            instr("LOAD_CONST", (cell,)),               # closure (0x08)
            instr("LOAD_CONST", inner_code)]
    body += emit.make_function(0x01 | 0x08)
    body += [instr("RETURN_VALUE")]
    fn = _run(body, None)
    assert fn() == 15 and fn(1) == 6


def test_place_null_moves_the_null_only_where_the_version_wants_it():
    seq = [instr("PUSH_NULL"), instr("LOAD_CONST", print), instr("LOAD_ATTR", "__name__"),
           instr("LOAD_CONST", 1)]
    assert emit.place_null(seq, 0, 1)
    names = [i.opname for i in seq]
    if SPEC.null_after_callable:
        assert names == ["LOAD_CONST", "LOAD_ATTR", "PUSH_NULL", "LOAD_CONST"]
    else:
        assert names == ["PUSH_NULL", "LOAD_CONST", "LOAD_ATTR", "LOAD_CONST"]
    # a NULL that belongs to an enclosing call is left alone
    seq2 = [instr("PUSH_NULL"), instr("LOAD_CONST", print), instr("LOAD_CONST", 1), instr("LOAD_CONST", 2)]
    assert not emit.place_null(seq2, 0, 1)


def test_decoded_code_has_one_spelling_per_operation():
    def f(x, y):
        a, b = x, y                      # 3.13: LOAD_FAST_LOAD_FAST / STORE_FAST_STORE_FAST
        s = x[1:2]                       # 3.12+: BINARY_SLICE
        x[0:1] = y                       # 3.12+: STORE_SLICE
        return a.append(b), s            # 3.12+: LOAD_ATTR with the method bit; RETURN_CONST elsewhere

    names = {i.opname for i in decode(f.__code__)}
    assert not names & {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST",
                        "BINARY_SLICE", "STORE_SLICE", "RETURN_CONST", "LOAD_FAST_CHECK"}
    assert "LOAD_METHOD" in names
    new = assemble(decode(f.__code__), f.__code__)
    assert new.co_code == f.__code__.co_code


# -- exceptions from calls run natively at a break ------------------------------------------------

@torch.compiler.disable
def _opaque_raises(x, y=1):
    raise KeyError("missing")


class _Log:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", et.__name__ if et else None))
        return False


@pytest.mark.parametrize("keyword", [True, False])
def test_exception_from_a_native_call_reaches_finally_and_with_exit(keyword):
    # The call breaks (torch.compiler.disable) and runs natively under the
    # handlers of the try and the with.  3.13 unwinds an error returned from
    # an inlined Python call from the instruction before the call: the
    # handlers must still run (emit.under_handler).
    def gen(n):
        for i in range(2):
            yield i

    def f(x, log):
        a = 1
        with _Log(log):
            try:
                a = _opaque_raises(4, y=a) if keyword else _opaque_raises(4, a)
            finally:
                log.append("fin")
                for v in gen(a):
                    log.append(v)
        return x + a

    x = t()
    eager_log, comp_log = [], []
    with pytest.raises(KeyError):
        f(x, eager_log)
    cf, _ = compile_counting(f)
    with pytest.raises(KeyError):
        cf(x, comp_log)
    assert comp_log == eager_log == ["enter", "fin", 0, 1, ("exit", "KeyError")]
    assert bytegraph.stats().graph_breaks >= 1


def test_a_call_alone_under_a_handler_is_caught():
    def g(x, y=1):
        raise KeyError("m")

    from bytegraph.bytecode import ExnEntry
    import types
    handler = instr("NOP")
    exn = ExnEntry(handler, 0, False)
    body = [instr("RESUME", arg=0)] + emit.with_null([instr("LOAD_CONST", g)])
    body += [instr("LOAD_CONST", 4), instr("LOAD_CONST", 5)]
    body += emit.under_handler(emit.call(2, ("y",), exn=exn), exn)
    body += [instr("RETURN_VALUE"), handler, instr("POP_TOP"), instr("LOAD_CONST", "caught"),
             instr("RETURN_VALUE")]
    code = assemble(body, (lambda: None).__code__)
    assert types.FunctionType(code, {})() == "caught"


# -- zero-argument super() where no generated frame can continue ----------------------------------

def test_super_without_arguments_in_a_method_without_parameters():
    # The break (inside unittest's __exit__ handling the RuntimeError) moved
    # to the raise, inside C.f: a generated continuation of f takes
    # parameters, where CPython's super() would read one ("arg[0] deleted").
    import unittest

    class T(unittest.TestCase):
        def test_a(self):
            class C:
                def f():
                    super()
            with self.assertRaisesRegex(RuntimeError, r"no arguments"):
                C.f()
            return "done"

    case = T("test_a")
    compiled, _ = compile_counting(T.test_a)
    saved = bytegraph.config.force_transform
    bytegraph.config.force_transform = True   # (pure-Python frames are transformed too)
    try:
        assert compiled(case) == T.test_a(case) == "done"
        assert bytegraph.stats().frames_transformed >= 1
    finally:
        bytegraph.config.force_transform = saved


def test_super_with_a_non_type_first_argument_raises_cpythons_type_error():
    class C:
        def method(self, x):
            return super(1, self).method(x)

    def f(x):
        try:
            return C().method(x)
        except TypeError as e:
            return x, str(e)

    assert_same(f, t(), graphs=None, breaks=None)


def test_sum_of_floats_matches_the_interpreters_summation():
    # 3.12+ sum() compensates float rounding: [0.1] * 10 sums to exactly 1.0
    def f(x):
        a = sum([0.1] * 10)
        b = sum([1, 2.5, True], 0.25)
        c = sum(x * k for k in range(3))
        d = sum([1, 2], x)
        return x * a, a, b, c, d

    assert_same(f, t())
    assert bytegraph.compile(lambda: sum([0.1] * 10), backend="eager")() == sum([0.1] * 10)


def test_super_method_call_on_a_proxy_breaking_at_the_super_load():
    # (CPython's test_descr.test_proxy_super) on 3.12+ the break lands on a
    # LOAD_SUPER_ATTR for a call, which leaves two values: run natively, it
    # must leave the attribute with its NULL, as a method load does
    class Proxy(object):
        def __init__(self, obj):
            self.__obj = obj

        def __getattribute__(self, name):
            if name.startswith("_Proxy__"):
                return object.__getattribute__(self, name)
            return getattr(self.__obj, name)

    class B(object):
        def f(self):
            return "B.f"

    class C(B):
        def f(self):
            return super(C, self).f() + "->C.f"

    def run():
        p = Proxy(C())
        return C.__dict__["f"](p)

    saved = bytegraph.config.force_transform
    bytegraph.config.force_transform = True
    try:
        compiled, _ = compile_counting(run)
        assert compiled() == run() == "B.f->C.f"
        assert bytegraph.stats().frames_transformed >= 1
    finally:
        bytegraph.config.force_transform = saved


# -- wt-adv: an inlined comprehension's own cell (3.12+ PEP 709) -------------------
#
# A comprehension variable that a lambda in the comprehension captures is a
# cell: 3.12+ save the frame's cell with LOAD_FAST_AND_CLEAR and MAKE_CELL a
# new one.  That cell is not the frame's (its writes must not reach the outer
# variable), and at a break inside the comprehension the continuation's
# closure takes it.

def _no_print():
    print("", end="")


def test_comprehension_cell_does_not_clobber_the_frames_cell():
    def f(x):
        i = x * 2
        fs = [lambda: i * x for i in range(3)]
        _no_print()
        return i, [g() for g in fs]

    assert_same(f, t(), graphs=2, breaks=1)


def test_comprehension_cell_lambdas_see_their_own_cell_after_a_break():
    def f(x):
        i = 5
        fs = [(lambda: i) for i in range(3)]
        g = lambda: i  # noqa: E731 - the frame's cell
        _no_print()
        i = 7
        return [h() for h in fs], g(), x + i

    assert_same(f, t(), graphs=None, breaks=None)


def test_comprehension_cell_with_a_break_inside_the_comprehension():
    def f(x):
        i = x * 2
        fs = [lambda: i * x for i in range(3) if _no_print() is None]
        return i, [g() for g in fs], [(lambda: k)() for k in range(3) if _no_print() is None]

    with contextlib.redirect_stdout(io.StringIO()):
        assert_same(f, t(), graphs=None, breaks=None)


# -- wt-adv: a callee writing the caller's locals through f_locals (3.13 PEP 667) ----

def _set_callers_a():
    import sys
    sys._getframe(1).f_locals["a"] = 5   # 3.13 writes through; earlier it is lost


def test_callee_writing_the_callers_locals_through_f_locals():
    def f(x):
        a = 1
        _set_callers_a()
        return a, x + a

    assert_same(f, t(), graphs=None, breaks=None)


# -- wt-adv: a comprehension in a class body reading an enclosing variable (3.12+) ----

def test_class_body_comprehension_reading_a_variable_the_class_also_binds():
    # 3.12+ inline it in the class body: ``y`` is then both a fast slot
    # (saved and restored around the comprehension) and the free variable
    # the comprehension reads; the class statement runs natively
    def f(x):
        y = 5

        class K:
            y = 1
            z = y
            w = [y * 2 for _ in range(2)]

            def get(self):
                return y
        _no_print()
        return K.z, K().get(), K.w, x + 1

    assert_same(f, t(), graphs=None, breaks=None)


# -- wt-adv: the frame's one locals() dict before 3.13 (PEP 667 made it a snapshot) ----

def test_locals_twice_in_a_frame_is_one_dict_before_313_and_two_after():
    # before 3.13 the second call refreshes and returns the first call's dict
    def f(x):
        a = 1
        d = locals()
        b = 2
        d2 = locals()
        d["a"] = 99
        return sorted(d), d is d2, a, x + b

    assert_same(f, t())


def test_locals_dict_across_a_break_before_313():
    # a continuation is another frame: before 3.13 its locals() would be a
    # new dict, so a frame that reads its dict again after a break runs eagerly
    def f(x):
        a = 1
        d = locals()
        _no_print()
        b = 2
        d2 = locals()
        del a
        d3 = locals()
        return sorted(d), d is d2, sorted(d3), x + b

    assert_same(f, t(), graphs=None, breaks=None)


def test_exec_then_locals_sees_execs_names_before_313():
    def f(x):
        a = 1
        exec("c = 3")
        return sorted(locals()), x + a

    assert_same(f, t(), graphs=None, breaks=None)


# -- wt-adv: a continuation of a local whose name is no identifier (3.11's ``.0``) ----

def test_locals_in_a_comprehension_continued_after_a_break():
    # 3.11 runs the comprehension in a frame of its own whose iterator is the
    # local ``.0``: as a continuation's parameter it is renamed, but the
    # comprehension's locals() must still show ``.0`` (3.12+ inline it)
    def f(x):
        i = 1
        r = [sorted(locals()) for j in range(2) if _no_print() is None]
        return r, x + i

    with contextlib.redirect_stdout(io.StringIO()):
        assert_same(f, t(), graphs=None, breaks=None)

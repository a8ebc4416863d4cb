"""Regression tests for Python semantics under bytegraph (issue 12).

Each test runs a program eagerly and compiled with ``force_transform`` (so
pure-Python frames are transformed too) and compares what a user can see:
results, printed output, state of mutated objects, exception types, and
whether the frame was really transformed rather than run eagerly.
"""

import contextlib
import enum
import io
import sys
import types

import pytest
import torch

import bytegraph
from bytegraph import config
from bytegraph.diagnostics import STATS


def run_both(fn, *args, **kwargs):
    """(eager outcome, compiled outcome, eager fallbacks) for ``fn(*args)``.

    An outcome is ``("ok", value)`` or ``("raise", exception type, str)``."""
    def outcome(f):
        try:
            return ("ok", f(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - the exception is the result
            return ("raise", type(e), str(e))

    eager = outcome(fn)
    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    before = STATS.eager_fallbacks, STATS.frames_compiled
    try:
        compiled = outcome(bytegraph.compile(fn, backend="eager"))
    finally:
        config.force_transform = saved
    return eager, compiled, STATS.eager_fallbacks - before[0], STATS.frames_compiled - before[1]


def assert_same_clean(fn, *args, **kwargs):
    """Compiled equals eager, and no frame ran eagerly."""
    eager, compiled, fallbacks, frames = run_both(fn, *args, **kwargs)
    assert compiled == eager
    assert fallbacks == 0 and frames > 0
    return compiled


# ---------------------------------------------------------------------------
# dicts keyed by classes, functions and enum members (unittest's
# _type_equality_funcs, dispatch tables)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def _double(v):
    return v * 2


TABLE = {int: "int", list: "list", _double: "double", Color.RED: "red"}


def test_dict_with_class_function_and_enum_keys_is_traced():
    def f(v):
        out = [TABLE.get(type(v)), TABLE[_double], TABLE.get(Color.RED), TABLE.get(Color.BLUE, "none")]
        return out, list(TABLE)[:2], _double in TABLE, str in TABLE

    assert_same_clean(f, 3)
    assert_same_clean(f, [1])


def test_dict_with_class_keys_guards_the_keys():
    table = {int: 1}

    def f():
        return table.get(float, "missing")

    compiled = bytegraph.compile(f, backend="eager")
    config.force_transform = True
    try:
        assert compiled() == "missing"
        table[float] = 2
        assert compiled() == 2
        del table[int]
        assert compiled() == 2
    finally:
        config.force_transform = False


# ---------------------------------------------------------------------------
# with statements, exceptions and their state, tracebacks (issue 12 item 3)


class _ExitRecorder:
    """A context manager whose __exit__ records its arguments and returns ``ret``."""

    def __init__(self, ret):
        self.ret = ret
        self.seen = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.seen = (exc_type, type(exc), tb is None, type(tb).__name__)
        return self.ret


class _Truth:
    def __init__(self, value):
        self.value = value

    def __bool__(self):
        return self.value


def test_with_exit_arguments_and_truth_of_its_result():
    def f(ret):
        cm = _ExitRecorder(ret)
        with cm:
            raise ValueError("body")
        return cm.seen

    for ret in (True, 1, "yes", _Truth(True)):
        assert_same_clean(f, ret)
    for ret in (False, 0, None, _Truth(False), _Truth(1)):  # the exception propagates (or __bool__ raises)
        eager, compiled, _, _ = run_both(f, ret)
        assert compiled == eager


class _NoEnter:
    def __exit__(self, *args):
        return False


class _NoExit:
    def __enter__(self):
        return self


def test_with_missing_enter_or_exit_raises_the_same_type_error():
    def f(cls):
        try:
            with cls():
                return "entered"
        except TypeError as e:
            return str(e)

    for cls in (_NoEnter, _NoExit, int):
        assert_same_clean(f, cls)


def test_exception_cause_notes_and_attributes_survive_the_trace():
    def f():
        try:
            raise ValueError("v") from TypeError("t")
        except ValueError as e:
            e.add_note("note")
            e.extra = 3
            kept = e.with_traceback(None)
        return (kept, repr(kept.__context__), repr(kept.__cause__), kept.__suppress_context__,
                kept.__notes__, kept.extra, str(kept), repr(kept), kept.__traceback__)

    def describe(out):
        kept = out[0]
        return (type(kept), kept.args, repr(kept.__context__), repr(kept.__cause__), kept.__suppress_context__,
                kept.__notes__, kept.extra, kept.__traceback__) + out[1:]

    expected = describe(f())
    bytegraph.reset()
    config.force_transform = True
    try:
        before = STATS.eager_fallbacks
        assert describe(bytegraph.compile(f, backend="eager")()) == expected
        assert STATS.eager_fallbacks == before
    finally:
        config.force_transform = False


def test_exception_context_is_kept_with_its_traceback():
    def f():
        try:
            try:
                {}["k"]
            except KeyError:
                raise ValueError("v")
        except ValueError as e:
            kept = e.with_traceback(None)
        return type(kept.__context__).__name__, kept

    def describe():
        name, kept = f()
        return name, kept.__context__.__traceback__ is None, kept.__suppress_context__

    eager, compiled, _, _ = run_both(describe)
    assert compiled == eager == ("ok", ("KeyError", False, False))


def test_exception_made_outside_every_handler_gets_the_callers_context():
    def f():
        try:
            raise ValueError("v")
        except ValueError as e:
            return e.with_traceback(None)

    compiled = bytegraph.compile(f, backend="eager")
    config.force_transform = True
    try:
        before = STATS.eager_fallbacks
        try:
            1 / 0
        except ZeroDivisionError as outer:
            eager_ctx = f().__context__
            assert eager_ctx is outer
            assert compiled().__context__ is outer
        assert compiled().__context__ is None
        assert STATS.eager_fallbacks == before
    finally:
        config.force_transform = False


def test_exception_with_a_traceback_is_not_rebuilt_without_it():
    def f():
        try:
            raise ValueError("v")
        except ValueError as e:
            return e

    eager, compiled, fallbacks, _ = run_both(lambda: f().__traceback__ is None)
    assert compiled == eager == ("ok", False)


def test_exception_attributes_exact_or_unsupported():
    def f(n):
        e = OSError(2, "missing")
        out = [type(e).__name__, e.errno, e.strerror, str(e), e.args]
        try:
            raise KeyError((1, 2)) if n else KeyError("x")
        except KeyError as k:
            out += [str(k), repr(k), k.args]
        try:
            ValueError("v").nope
        except AttributeError as a:
            out.append(str(a))
        try:
            raise 5
        except TypeError as t:
            out.append(str(t))
        return out

    assert_same_clean(f, 0)
    assert run_both(f, 1)[0] == run_both(f, 1)[1]


def test_user_exception_class_with_its_own_init_is_not_modelled_wrong():
    class MyError(Exception):
        def __init__(self, a, b):
            super().__init__(a)
            self.b = b

    def f():
        try:
            raise MyError(1, 2)
        except MyError as e:
            return e.args, e.b, str(e)

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager


def test_assert_raises_context_is_traced_whole():
    import unittest

    class T(unittest.TestCase):
        def runTest(self):
            pass

    case = T()

    def f(s):
        with case.assertRaises(ValueError) as cm:
            int(s)
        with case.assertRaises(KeyError):
            {}[s]
        return str(cm.exception), cm.exception.args, cm.exception.__traceback__

    assert_same_clean(f, "x")


def test_clear_frames_of_a_native_traceback_runs_after_the_graph():
    import traceback

    def g(tb):
        traceback.clear_frames(tb)
        return 1

    def native():
        local = [1]  # noqa: F841 - kept alive by the frame until cleared
        raise ValueError("v")

    try:
        native()
    except ValueError as e:
        tb = e.__traceback__
    frame = tb.tb_next.tb_frame
    assert frame.f_locals
    compiled = bytegraph.compile(g, backend="eager")
    config.force_transform = True
    try:
        before = STATS.eager_fallbacks, STATS.graph_breaks
        assert compiled(tb) == 1
        assert (STATS.eager_fallbacks, STATS.graph_breaks) == before
    finally:
        config.force_transform = False
    assert not frame.f_locals


def test_bare_raise_in_a_callee_re_raises_the_callers_exception():
    def reraise():
        raise

    def f():
        try:
            try:
                {}["k"]
            except KeyError:
                reraise()
        except KeyError as e:
            return "caller's", str(e)
        except RuntimeError as e:
            return "none", str(e)

    assert_same_clean(f)


# ---------------------------------------------------------------------------
# one tuple reached through two names keeps its identity across breaks


class _Nested:
    def __init__(self, *managers):
        self.managers = managers

    def __exit__(self, *exc_info):
        ex = exc_info
        for _ in collections_deque([1]):
            pass
        return ex is exc_info


def collections_deque(items):
    import collections
    return collections.deque(items)


def test_tuple_identity_survives_graph_breaks():
    def f():
        return _Nested().__exit__(None, None, None)

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager == ("ok", True)


def test_is_between_two_arguments_holding_one_tuple_is_guarded():
    def f(a, b):
        return a is b

    t = (1, 2)
    compiled = bytegraph.compile(f, backend="eager")
    config.force_transform = True
    try:
        assert compiled(t, t) is True
        assert compiled(t, (1, 2) + ()) is f(t, (1, 2) + ())
        assert compiled((3,), (3,) + ()) is f((3,), (3,) + ())
    finally:
        config.force_transform = False


# ---------------------------------------------------------------------------
# binding the compiled function's arguments (issue 12 item 5)

import functools  # noqa: E402


def _wrapped_target(a, b=10):
    return a + b


@functools.wraps(_wrapped_target)
def _wrapper_other_params(x, y=1, z=2):
    return (x, y, z)


@functools.wraps(_wrapped_target)
def _wrapper_varargs(*args, **kwargs):
    return _wrapped_target(*args, **kwargs)


@functools.wraps(_wrapped_target)
def _wrapper_swapped(b, a=None):
    return (a, b)


def test_functools_wraps_wrapper_binds_by_its_own_parameters():
    assert_same_clean(_wrapper_other_params, 5)
    assert_same_clean(_wrapper_other_params, 5, 6)
    assert_same_clean(_wrapper_varargs, 5)
    assert_same_clean(_wrapper_varargs, 5, b=1)
    assert_same_clean(_wrapper_swapped, 1, 2)


def test_functools_wraps_wrapper_is_not_retraced_on_every_call():
    bytegraph.reset()
    config.force_transform = True
    try:
        compiled = bytegraph.compile(_wrapper_varargs, backend="eager")
        before = STATS.cache_hits, STATS.eager_fallbacks
        for i in range(5):
            assert compiled(3, b=4) == 7
        assert STATS.cache_hits - before[0] == 4
        assert STATS.eager_fallbacks == before[1]
    finally:
        config.force_transform = False


# ---------------------------------------------------------------------------
# protocols: isinstance/issubclass hooks, truth and len checks, set operators,
# dict keys and set elements (issue 12 item 4)


class _CheckMeta(type):
    def __instancecheck__(cls, inst):
        return getattr(inst, "tag", None) == 42

    def __subclasscheck__(cls, sub):
        return sub is int


class _Checked(metaclass=_CheckMeta):
    pass


def test_isinstance_and_issubclass_honour_the_metaclass_hooks():
    def f(x):
        return (isinstance(x, _Checked), isinstance(x, (str, _Checked)), issubclass(int, _Checked),
                issubclass(str, _Checked), isinstance(x, int | str))

    assert_same_clean(f, _Tagged(42))
    assert_same_clean(f, _Tagged(1))


class _Tagged:
    def __init__(self, tag):
        self.tag = tag


def test_isinstance_argument_errors():
    def f(how):
        try:
            if how == 0:
                return isinstance(1, int, invalid=True)
            if how == 1:
                return isinstance(1)
            if how == 2:
                return isinstance(1, 5)
            return issubclass(1, int)
        except TypeError as e:
            return str(e)

    for how in range(4):
        assert_same_clean(f, how)


class _Len:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class _Bool:
    def __init__(self, v):
        self.v = v

    def __bool__(self):
        return self.v


def test_bool_and_len_results_are_checked():
    def f(o):
        try:
            return "yes" if o else "no"
        except (TypeError, ValueError) as e:
            return type(e).__name__, str(e)

    def g(o):
        try:
            return len(o)
        except (TypeError, ValueError) as e:
            return type(e).__name__, str(e)

    for o in (_Len(2), _Len(0), _Len(-1), _Len(2.0), _Len(True), _Bool(True), _Bool(1), _Bool(None)):
        assert_same_clean(f, o)
    for o in (_Len(3), _Len(-1), _Len("x"), _Bool(True)):
        assert_same_clean(g, o)


def test_callable_of_instances():
    class C:
        def __call__(self):
            return 1

    def f(o):
        return callable(o), callable(type(o))

    assert_same_clean(f, _Len(1))
    assert_same_clean(f, C())


def test_set_operators_with_sets_frozensets_and_other_operands():
    def f(s0, o):
        # (a new set: eager and compiled run on the same arguments, and the
        # in-place ``|=`` would change the caller's set between them; the
        # caller's sets changed in place: test_a_set_made_from_another_...)
        s = set(s0) if type(s0) is set else s0
        try:
            r = s | o
            d, i, x = s - o, s & o, s ^ o
            s2 = s
            s2 |= o
            return r, type(r).__name__, s2, type(s2).__name__, s2 is s, d, i, x, list(d), list(x)
        except TypeError as e:
            return str(e)

    for s in ({1, 2}, frozenset({1, 2})):
        for o in ({2, 3}, frozenset({3}), [1], 5):
            assert_same_clean(f, s, o)


def _set_outcomes(fn, make_args):
    """(result, the arguments afterwards) of ``fn`` eagerly and compiled, each on
    fresh arguments; sets shown with their iteration order."""
    def shown(v):
        if isinstance(v, (set, frozenset)):
            return (type(v).__name__, list(v))
        if isinstance(v, (list, tuple)):
            return [shown(x) for x in v]
        if isinstance(v, dict):
            return {k: shown(x) for k, x in v.items()}
        return v

    args = make_args()
    eager = shown([fn(*args), args])
    bytegraph.reset()
    args = make_args()
    saved = config.force_transform
    config.force_transform = True       # (no tensor work: traced all the same)
    before = STATS.frames_transformed + STATS.eager_fallbacks
    try:
        compiled = shown([bytegraph.compile(fn, backend="eager")(*args), args])
    finally:
        config.force_transform = saved
    # traced, or run eagerly with a logged reason (a pre-existing set changed
    # in the trace, then read by the rebuild of a set made from it earlier)
    assert STATS.frames_transformed + STATS.eager_fallbacks > before
    return eager, compiled


def _set_after_input_change(s):
    s.add(2)
    return s - {9}, s | {7}, s.union({4}), set(s), s & {2, 5}, s ^ {5}, s.copy(), frozenset(s)


def _set_then_input_change(s):
    t = s | {7}
    s.add(3)
    return t, s


def _set_then_operand_change():
    u = {1, 5}
    t, c, f = u | {7}, u.copy(), frozenset(u)
    u.add(3)
    u.discard(1)
    return t, c, f, u


def _set_from_list_then_list_change(lst):
    t = {1}.union(lst)
    lst.append(99)
    return t, lst


def _input_updated_from_set_then_set_change(s):
    u = {8}
    s |= u
    u.add(11)
    return s, u


def _input_updated_from_input_then_change(s, t):
    s.update(t)
    t.add(11)
    return s, t


def _set_updated_then_operand_change():
    s = {1}
    u = {2, 3}
    s.update(u)
    u.discard(2)
    return s, u


def _set_from_dict_then_dict_change(d):
    t = set(d)
    d["z"] = 1
    return t, d


@pytest.mark.parametrize("fn, make_args", [
    (_set_after_input_change, lambda: ({1, 5},)),
    (_set_then_input_change, lambda: ({1, 5},)),
    (_set_then_operand_change, lambda: ()),
    (_set_from_list_then_list_change, lambda: ([4, 5],)),
    (_input_updated_from_set_then_set_change, lambda: ({1},)),
    (_input_updated_from_input_then_change, lambda: ({1}, {2})),
    (_set_updated_then_operand_change, lambda: ()),
    (_set_from_dict_then_dict_change, lambda: ({"p": 0, "q": 1},)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_set_made_from_another_keeps_what_that_held_then(fn, make_args):
    # (a new set remembers how eager built it, to get its order; the operands
    # it was built from were read when it was rebuilt after the graph, with
    # whatever the trace had changed in them by then: s.add(2) then s - {9}
    # lost the 2, u | {7} then u.add(3) gained a 3)
    eager, compiled = _set_outcomes(fn, make_args)
    assert compiled == eager


class _EqByValue:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, _EqByValue) and other.v == self.v

    def __hash__(self):
        return hash(self.v)


def test_set_and_dict_keys_never_use_identity_for_value_equality():
    from collections import namedtuple
    P = namedtuple("P", "x y")

    def f(a, b):
        s = {a, b}
        d = {P(1, 2): "p", (1, 2): "t"}
        made = {_Tagged(1), _Tagged(1)}
        return len(s), d, len(made), len({P(1, 2), P(3, 4)})

    eager, compiled, _, _ = run_both(f, _EqByValue(1), _EqByValue(1))
    assert compiled == eager and eager[1][0] == 1
    assert run_both(f, 1, 1.0)[1] == run_both(f, 1, 1.0)[0]


class _LoudHash:
    """Records every __hash__ call: the trace must not run it behind the program's back."""

    calls = []

    def __hash__(self):
        _LoudHash.calls.append(1)
        return 1


def test_wrapping_an_object_does_not_hash_it():
    def f(o):
        return -1 if o is None else 1

    obj = _LoudHash()
    _LoudHash.calls.clear()
    assert_same_clean(f, obj)
    assert _LoudHash.calls == []


class _Container:
    def __init__(self):
        self.log = []

    def __contains__(self, item):
        self.log.append(("contains", item))
        return item == 1

    def __setitem__(self, key, value):
        self.log.append(("set", key, value))


class _Plain:
    pass


def test_in_and_item_assignment_use_the_special_methods():
    def f():
        c = _Container()
        c[1] = 2
        out = [1 in c, 2 in c, c.log]
        try:
            3 in _Plain()
        except TypeError as e:
            out.append(str(e))
        try:
            _Plain()[0] = 1
        except TypeError as e:
            out.append(str(e))
        return out

    assert_same_clean(f)


class _Prop:
    def __init__(self):
        self._v = 5

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        self._v = value * 2

    @property
    def ro(self):
        return 1


def test_properties_of_objects_made_in_the_trace():
    def f():
        p = _Prop()
        p.v = 10
        out = [p.v, p._v]
        try:
            p.ro = 3
        except AttributeError as e:
            out.append(str(e))
        try:
            del p.ro
        except AttributeError as e:
            out.append(str(e))
        return out

    assert_same_clean(f)


def test_objects_with_a_finalizer_are_not_made_in_the_trace():
    log = []

    class Fin:
        def __del__(self):
            log.append("del")

    def f():
        # (the count from this call: eager and compiled share ``log``)
        n = len(log)
        Fin()
        return len(log) - n

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager == ("ok", 1)


def test_list_item_errors_and_method_arity_are_pythons():
    def f(how):
        lst = [3, 1, 2]
        try:
            if how == 0:
                lst[::0] = []
            elif how == 1:
                lst["a"] = 1
            elif how == 2:
                lst.sort(None)
            elif how == 3:
                lst.append()
            else:
                return lst[::0]
        except (TypeError, ValueError) as e:
            return type(e).__name__, str(e), lst

    for how in range(5):
        assert_same_clean(f, how)


def test_immutable_copies_are_the_same_object():
    def f(t, fs):
        return (t * 1 is t, tuple(t) is t, t[:] is t, frozenset(fs) is fs, fs.copy() is fs,
                t[::-1] is t)

    assert_same_clean(f, (1, 2), frozenset({1}))


# list and tuple operations: CPython's errors, identities and live iterators


def _raises_type(exc_type, fn, *args):
    try:
        fn(*args)
    except exc_type as e:
        return type(e).__name__
    return "no error"


@pytest.mark.parametrize("call", [
    lambda a: a.append(), lambda a: a.append(1, 2), lambda a: a.clear(0), lambda a: a.insert(0),
    lambda a: a.insert("x", 1), lambda a: a.pop("x"), lambda a: a.count(), lambda a: a.copy(1),
    lambda a: a.reverse(1), lambda a: a.extend(), lambda a: a.sort(1, 2),
])
def test_list_method_argument_errors_are_cpythons(call):
    def f():
        a = [3, 1, 2]
        try:
            call(a)
        except TypeError as e:
            return "TypeError", str(e), a
        return "none", a

    assert_same_clean(f)


def test_list_setitem_with_a_bad_index_raises_type_error():
    def f():
        a = [1, 2, 3]
        out = []
        for idx in ("a", 1.5, None):
            try:
                a[idx] = 0
            except TypeError as e:
                out.append(str(e))
            try:
                del a[idx]
            except TypeError as e:
                out.append(str(e))
        try:
            a[::2] = [9]
        except ValueError as e:
            out.append(str(e))
        return out, a

    assert_same_clean(f)


def test_huge_repetition_runs_natively_and_raises_memory_error():
    def f():
        out = []
        for n in (sys.maxsize // 2, sys.maxsize):
            try:
                [1, 2] * n
            except (MemoryError, OverflowError) as e:
                out.append(type(e).__name__)
        try:
            [1] * 1.5
        except TypeError as e:
            out.append(str(e))
        return out

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


def test_tuple_times_one_is_the_same_tuple():
    def f(s):
        return id(s * 1) == id(s), id(1 * s) == id(s), s * 2

    assert_same_clean(f, (1, 2))


def test_reversed_list_is_live_and_rebuilt_as_a_list_reverseiterator():
    def f():
        a = [1, 2, 3, 4]
        it = reversed(a)
        first = next(it)
        a[1] = 20           # seen by the live iterator
        print("break", end="", file=io.StringIO())
        return first, it, a

    eager, compiled, _, _ = run_both(f)
    assert type(compiled[1][1]) is type(eager[1][1])
    assert list(compiled[1][1]) == list(eager[1][1]) == [3, 20, 1]


def test_exhausted_list_iterator_stays_exhausted_after_a_break():
    def f():
        a = [1]
        it = iter(a)
        rest = list(it)
        print("", end="", file=io.StringIO())
        a.append(2)
        return rest, list(it)

    assert run_both(f)[1] == ("ok", ([1], []))


def test_object_freed_after_exhausting_its_iterator_across_breaks():
    import gc
    import weakref

    def f(make):
        box = []

        class A(list):
            def __init__(self):
                box.append(weakref.ref(self))

        it = iter(A())
        try:
            next(it)
        except StopIteration:
            pass
        gc.collect()
        return box[0]() is None

    eager, compiled, _, frames = run_both(f, list)
    assert eager == ("ok", True) and compiled == eager and frames > 0


# ---------------------------------------------------------------------------
# dict keys and set elements hash and compare like CPython's


def test_unhashable_dict_key_raises_type_error():
    def f():
        d = {}
        out = []
        for key in ([1], {}, {1}):
            try:
                d[key] = 1
            except TypeError as e:
                out.append(str(e))
        return out

    assert_same_clean(f)


def test_equal_tuples_are_one_key():
    def f(t):
        d = {(1, t): "a"}
        d[(1, t)] = "b"
        return len(d), d[(1, t)]

    assert_same_clean(f, "x")
    eager, compiled, _, _ = run_both(f, torch.ones(1))
    assert compiled == eager


class _Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, _Point) and other.x == self.x

    def __hash__(self):
        return hash(self.x)


def test_keys_with_user_equality_are_never_compared_by_identity():
    def f():
        d = {_Point(1): "one"}
        return d.get(_Point(1)), _Point(2) in d, len({_Point(1), _Point(1)})

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager == ("ok", ("one", False, 1))


# ---------------------------------------------------------------------------
# object lifetimes across graph breaks: what eager frees, the compiled code
# frees at the same point


def test_rebound_argument_is_freed_before_the_next_break():
    import gc
    import weakref

    def f():
        s = {1, 2}
        p = weakref.proxy(s)   # a break: s is an argument of the continuation
        before = str(p)        # another break
        s = None
        gc.collect()
        try:
            str(p)
        except ReferenceError:
            return before, "freed"
        return before, "alive"

    # (the compiled function's own arguments are held by its caller during the
    # call, as with torch.compile's wrapper; continuations hold nothing extra)
    assert run_both(f)[:2] == (("ok", ("{1, 2}", "freed")),) * 2


def test_weakref_proxy_of_a_dead_object_is_held_not_read():
    import gc
    import weakref

    def f():
        s = {1}
        p = weakref.proxy(s)
        s = None
        gc.collect()
        try:
            return str(p)
        except ReferenceError:
            return "dead"

    assert run_both(f)[1] == ("ok", "dead")


def test_cycle_made_in_the_trace_is_collected_after_del():
    import gc
    import weakref

    def f():
        class C:
            pass
        obj = C()
        ref = weakref.ref(obj)
        container = {obj, 1}
        obj.x = iter(container)
        del obj, container
        gc.collect()
        return ref() is None

    eager, compiled, _, frames = run_both(f)
    assert eager == compiled == ("ok", True) and frames > 0


def test_dead_local_keeps_its_object_alive_until_rebound():
    import gc
    import weakref

    class Box:
        pass

    def f():
        b = Box()
        r = weakref.ref(b)
        gc.collect()          # b is never read again, but still bound
        alive = r() is not None
        b = None
        gc.collect()
        return alive, r() is None

    assert run_both(f)[:2] == (("ok", (True, True)), ("ok", (True, True)))


def test_frozenset_and_tuple_constructors_keep_identity():
    def f(t):
        fs = frozenset(t)
        return frozenset(fs) is fs, fs.copy() is fs, tuple(t) is t

    assert_same_clean(f, (1, 2))


def test_loop_with_unmodellable_dict_keys_keeps_every_local():
    class Key3:
        def __hash__(self):
            return hash("key3")

        def __eq__(self, other):
            return isinstance(other, Key3) or isinstance(other, str) and other == "key3"

    def f():
        dicts = []
        for key3 in ("key3", Key3()):
            dicts.append({"key1": 42, key3: 44})
            d = {}
            d[key3] = 1
            dicts.append(d)
        return len(dicts), [len(d) for d in dicts], dicts[1]["key3"]

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


def test_deeply_nested_structures_fall_back_instead_of_recursion_error():
    def f():
        a = []
        for _ in range(sys.getrecursionlimit() + 100):
            a = [a]
        try:
            repr(a)
        except RecursionError:
            return "recursion"
        return "ok"

    eager, compiled = run_both(f)[:2]
    assert compiled == eager
    if sys.version_info < (3, 12):   # (3.12's repr no longer counts C recursion against the limit)
        assert eager == ("ok", "recursion")

# graph breaks, resume functions, outlined loop bodies; lifetimes (issue 12
# items 2 and 6)


def test_return_in_inner_loop_after_a_break_in_nested_for_loops():
    def f(x):
        for i in range(3):
            for j in range(2):
                if x.max() > 1:
                    return (x * 2).tolist()
                x = x + 1
        return x.tolist()

    assert assert_same_clean(f, torch.zeros(2)) == ("ok", [4.0, 4.0])


def test_return_in_inner_loop_after_a_break_in_while_and_for_loops():
    def f(x):
        i = 0
        while i < 3:
            for j in range(2):
                if x.max() > 1:
                    return (x * 2).tolist()
                x = x + 1
            i += 1
        return x.tolist()

    assert assert_same_clean(f, torch.zeros(2)) == ("ok", [4.0, 4.0])


def test_break_and_continue_in_nested_loops_with_breaks_inside():
    def f(n):
        out = []
        for i in range(n):
            k = 0
            while True:
                print("", end="")
                k += 1
                if k > i:
                    break
                if k == 2:
                    continue
                out.append((i, k))
            for j in range(3):
                print("", end="")
                if j == i:
                    out.append(("hit", j))
                    break
            else:
                out.append("no break")
        return out

    assert_same_clean(f, 4)


def test_loop_body_local_bound_on_one_call_and_unbound_on_the_next():
    def f(x, flag):
        if flag:
            y = 1
        for i in range(2):
            print("", end="")
            x = x + 1
        try:
            return x + y
        except UnboundLocalError:
            return -x

    compiled = bytegraph.compile(f, backend="eager")
    config.force_transform = True
    try:
        assert compiled(0, True) == f(0, True) == 3
        assert compiled(0, False) == f(0, False) == -2
        assert compiled(5, True) == 8
    finally:
        config.force_transform = False


def _set_and_delete_global():
    global _BG_NEW_GLOBAL
    _BG_NEW_GLOBAL = 1
    r = _BG_NEW_GLOBAL + 1
    del _BG_NEW_GLOBAL
    return r, "_BG_NEW_GLOBAL" in globals()


def test_global_set_and_deleted_in_the_trace_is_not_replayed_as_a_delete():
    assert assert_same_clean(_set_and_delete_global) == ("ok", (2, False))
    assert "_BG_NEW_GLOBAL" not in globals()


def test_module_attribute_set_and_deleted_in_the_trace():
    mod = types.ModuleType("bg_scratch")

    def f():
        mod.attr = 1
        del mod.attr
        return hasattr(mod, "attr")

    assert assert_same_clean(f) == ("ok", False)
    assert not hasattr(mod, "attr")


def test_instance_attribute_set_and_deleted_in_the_trace():
    class O:
        pass

    o = O()

    def f():
        o.newattr = 1
        del o.newattr
        return hasattr(o, "newattr")

    assert assert_same_clean(f) == ("ok", False)
    assert not hasattr(o, "newattr")


def _closure_over(v):
    def g():
        return v
    return g


def test_local_holding_a_cell_object_survives_a_break():
    g = _closure_over(5)

    def f():
        c = g.__closure__[0]
        print("", end="")
        d = locals()
        return c.cell_contents, d["c"] is c, type(c).__name__

    assert assert_same_clean(f) == ("ok", (5, True, "cell"))


def test_locals_shows_a_cell_object_local_as_the_cell():
    g = _closure_over(7)

    def f():
        c = g.__closure__[0]
        return type(locals()["c"]).__name__

    assert assert_same_clean(f) == ("ok", "cell")


def _kw_helper(msg, buf):
    print(msg, flush=True, file=buf, end="!\n")


def test_breaking_keyword_call_in_an_inlined_helper_keeps_its_keywords():
    def f():
        buf = io.StringIO()
        _kw_helper("hi", buf)
        return buf.getvalue()

    assert assert_same_clean(f) == ("ok", "hi!\n")


def test_augmented_add_of_tensors_onto_an_int():
    def f(x):
        s = 0
        for t in x:
            s += t
        return s.tolist()

    assert_same_clean(f, torch.ones(3, 2))


def test_zero_argument_super_in_a_resume_function():
    class B:
        def m(self, x):
            return x + 1

    class C(B):
        def m(self, x):
            print("", end="")
            return super().m(x) * 2

    def f(x):
        return C().m(x)

    assert assert_same_clean(f, 3) == ("ok", 8)


class _Counted:
    alive = 0

    def __init__(self):
        _Counted.alive += 1

    def __del__(self):
        _Counted.alive -= 1


def _collect_quietly():
    import gc
    gc.collect()


_collect_quietly._torchdynamo_disable = True   # (runs natively: a break)


def test_objects_made_in_inlined_calls_are_freed_before_a_break():
    # CPython's test_scope.testLeaks: x dies when f1 returns
    def f():
        def f1():
            x = _Counted()

            def f2():
                return x
            f2()
        for i in range(3):
            f1()
        _collect_quietly()
        return _Counted.alive

    assert assert_same_clean(f) == ("ok", 0)


def test_deleted_local_is_not_kept_alive_by_the_compiled_frame():
    import weakref

    class T:
        pass

    def f():
        obj = T()
        ref = weakref.ref(obj)
        print("", end="")
        del obj
        _collect_quietly()
        return ref() is None

    assert assert_same_clean(f) == ("ok", True)


def test_deleted_argument_of_a_resume_function_is_collectable():
    import weakref

    class T:
        pass

    def g(obj):
        ref = weakref.ref(obj)
        print("", end="")
        del obj
        _collect_quietly()
        return ref() is None

    def f():
        return g(T())

    assert assert_same_clean(f) == ("ok", True)


def test_self_set_to_none_in_a_method_whose_self_is_a_cell_is_collectable():
    # CPython's test_scope.testCellLeak
    import weakref

    def f():
        class Tester:
            def dig(self):
                if 0:
                    lambda: self
                try:
                    1 / 0
                except Exception as exc:
                    self.exc = exc
                self = None
        tester = Tester()
        tester.dig()
        ref = weakref.ref(tester)
        del tester
        _collect_quietly()
        return ref() is None

    assert assert_same_clean(f) == ("ok", True)


# ---------------------------------------------------------------------------
# graph breaks inside exception handlers: the handled exception is
# re-established natively (issue 12)


def _assert_same_no_eager_run(fn, *args):
    """Compiled equals eager; frames ran eagerly only where the trace found
    they raise (an entry that runs the original code, counted as a fallback)."""
    eager, compiled, fallbacks, frames = run_both(fn, *args)
    assert compiled == eager
    assert frames > 0
    return compiled


def test_exc_info_inside_a_handler_after_a_break():
    def f():
        try:
            raise ValueError("a")
        except ValueError as e:
            print("", end="")
            info = sys.exc_info()
            return type(info[1]).__name__, info[1] is e, str(e)

    assert assert_same_clean(f) == ("ok", ("ValueError", True, "a"))


def test_bare_raise_after_a_break_in_a_handler():
    def f():
        try:
            try:
                raise ValueError("a")
            except ValueError:
                print("", end="")
                raise
        except ValueError as e:
            return str(e), e.__context__, e.__traceback__ is not None

    assert assert_same_clean(f) == ("ok", ("a", None, True))


def test_exception_raised_after_a_break_in_a_handler_chains_the_handled_one():
    def f():
        try:
            try:
                raise ValueError("a")
            except ValueError:
                print("", end="")
                raise KeyError("k")
        except KeyError as e:
            return repr(e.__context__), e.__context__.__traceback__ is not None

    assert assert_same_clean(f) == ("ok", ("ValueError('a')", True))


def test_handled_exception_is_restored_after_the_handler_and_in_nested_handlers():
    def f():
        try:
            1 / 0
        except ZeroDivisionError as e:
            try:
                raise KeyError("x")
            except KeyError as k:
                print("", end="")
                inner = (sys.exc_info()[0].__name__, k.__context__ is e)
            middle = sys.exc_info()[0].__name__
        return inner, middle, sys.exc_info()

    assert assert_same_clean(f) == ("ok", (("KeyError", True), "ZeroDivisionError", (None, None, None)))


def test_except_as_name_is_unbound_after_a_handler_with_a_break():
    def f():
        try:
            raise ValueError("a")
        except ValueError as e:
            print("", end="")
        try:
            e
        except NameError:
            return "unbound"
        return "bound"

    assert assert_same_clean(f) == ("ok", "unbound")


def test_break_in_a_handler_of_a_natively_raised_exception():
    def f(x):
        try:
            return x[5]
        except IndexError as e:
            print("", end="")
            return sys.exc_info()[0].__name__, str(e)

    assert assert_same_clean(f, [1]) == ("ok", ("IndexError", "list index out of range"))


def test_break_in_a_handler_inside_a_loop():
    def f():
        out = []
        for i in range(3):
            try:
                if i == 1:
                    raise ValueError(i)
                out.append(i)
            except ValueError as e:
                print("", end="")
                out.append((str(e), sys.exc_info()[0].__name__))
        return out, sys.exc_info()[0]

    assert assert_same_clean(f) == ("ok", ([0, ("1", "ValueError"), 2], None))


def test_raised_exception_object_keeps_its_identity_across_a_break():
    def f():
        err = KeyError("e")
        try:
            raise err
        except KeyError as e:
            print("", end="")
            return e is err, e.__traceback__ is not None

    assert assert_same_clean(f) == ("ok", (True, True))


def test_raise_from_after_a_break_in_a_handler():
    def f():
        try:
            raise ValueError("a")
        except ValueError as e:
            try:
                print("", end="")
                raise TypeError("t") from e
            except TypeError as t:
                return t.__cause__ is e, t.__context__ is e, t.__suppress_context__

    assert assert_same_clean(f) == ("ok", (True, True, True))


def _exc_type_now():
    print("", end="")
    return sys.exc_info()[0]


def test_inlined_helper_breaking_inside_a_callers_handler_sees_the_exception():
    def f():
        try:
            raise ValueError("a")
        except ValueError:
            r = _exc_type_now()
        return r, sys.exc_info()[0]

    assert assert_same_clean(f) == ("ok", (ValueError, None))


def _breaks_then_raises():
    print("", end="")
    raise KeyError("k")


def _calls_breaks_then_raises():
    return _breaks_then_raises()


def test_exception_from_a_continuation_inside_a_callers_handler_restores_exc_info():
    def g():
        try:
            raise ValueError("v")
        except ValueError:
            return _calls_breaks_then_raises()

    def f():
        try:
            g()
        except KeyError as k:
            ctx = repr(k.__context__)
        return ctx, sys.exc_info()

    assert _assert_same_no_eager_run(f) == ("ok", ("ValueError('v')", (None, None, None)))


class _ExitSeesTraceback:
    def __enter__(self):
        return self

    def __exit__(self, t, v, tb):
        self.seen = (t, tb is None)
        return True


def test_exit_of_a_with_block_gets_the_traceback_of_the_exception():
    def f():
        c = _ExitSeesTraceback()
        with c:
            raise ValueError
        return c.seen

    assert assert_same_clean(f) == ("ok", (ValueError, False))


def test_assert_raises_context_with_a_break_in_its_exit():
    import unittest

    class T(unittest.TestCase):
        def runTest(self):
            pass

    tc = T()

    def f():
        with tc.assertRaises(ZeroDivisionError) as cm:
            1 / 0
        return type(cm.exception).__name__, cm.exception.__traceback__, sys.exc_info()[0]

    assert assert_same_clean(f) == ("ok", ("ZeroDivisionError", None, None))


def test_bare_raise_in_a_helper_reraises_the_callers_handled_exception():
    def reraise():
        raise

    def f():
        try:
            try:
                raise ValueError("a")
            except ValueError:
                reraise()
        except ValueError as e:
            return str(e)

    assert assert_same_clean(f) == ("ok", "a")


def test_bare_raise_outside_any_handler_in_the_trace_runs_natively():
    def f():
        try:
            raise
        except RuntimeError as e:
            return type(e).__name__
    # the compiled function is called while its caller handles an exception:
    # a bare raise re-raises that one, as in Python

    def outer(fn):
        try:
            raise KeyError("outer")
        except KeyError:
            try:
                return fn()
            except KeyError as e:
                return "reraised " + str(e)

    config.force_transform = True
    try:
        compiled = bytegraph.compile(f, backend="eager")
        assert outer(compiled) == outer(f) == "reraised 'outer'"
        assert compiled() == f() == "RuntimeError"
    finally:
        config.force_transform = False


def _breaks_and_raises_key_error():
    print("", end="")
    raise KeyError("k")


def _passes_it_on():
    return _breaks_and_raises_key_error()


def test_exception_from_an_inner_continuation_reaches_an_outer_try():
    # the continuations below a call inside a try block run inside it
    def f():
        try:
            _passes_it_on()
        except KeyError as e:
            return "caught " + str(e)

    assert _assert_same_no_eager_run(f) == ("ok", "caught 'k'")


def test_reading_the_frames_own_unbound_cell_is_an_unbound_local_error():
    def f():
        def g():
            return y
        try:
            y
        except UnboundLocalError:
            r = "unbound local"
        except NameError:
            r = "name error"
        y = 2
        return r, g()

    assert assert_same_clean(f) == ("ok", ("unbound local", 2))


def test_reading_the_frames_own_unbound_cell_after_a_break():
    def f():
        def g():
            return y
        print("", end="")
        try:
            y
        except UnboundLocalError:
            r = "unbound local"
        except NameError:
            r = "name error"
        y = 2
        return r, g()

    assert assert_same_clean(f) == ("ok", ("unbound local", 2))


def test_free_variable_unbound_after_a_break_is_a_name_error():
    def f():
        def inner():
            print("", end="")
            return y
        try:
            inner()
        except UnboundLocalError:
            return "unbound local"
        except NameError:
            return "name error"
        y = 1

    assert _assert_same_no_eager_run(f) == ("ok", "name error")


def test_functools_wraps_wrapper_binds_its_own_parameters():
    import functools

    def deco(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            print("", end="")
            return func(*args, **kwargs), args, kwargs
        return wrapper

    @deco
    def target(a, b=2):
        return a + b

    def f():
        return target(1, b=5)

    assert assert_same_clean(f) == ("ok", (6, (1,), {"b": 5}))
    eager, compiled, fallbacks, _ = run_both(target, 1, b=5)
    assert compiled == eager == ("ok", (6, (1,), {"b": 5}))


def test_exception_created_with_keyword_attributes():
    def f():
        sentinel = "s"
        exc = AttributeError("Ouch", name="carry", obj=sentinel)
        return exc.name, exc.obj, exc.args

    assert _assert_same_no_eager_run(f) == ("ok", ("carry", "s", ("Ouch",)))


class _LoggedError(Exception):
    log = []

    def __init__(self, *args):
        _LoggedError.log.append(args)
        super().__init__(*args)


def test_exception_class_with_a_python_init_runs_it_once():
    def f():
        _LoggedError.log.clear()
        try:
            raise _LoggedError(1)
        except _LoggedError:
            pass
        return list(_LoggedError.log)

    assert _assert_same_no_eager_run(f) == ("ok", [(1,)])


def test_exception_raised_in_the_trace_and_kept_after_its_handler():
    # CPython's test_exceptions.test_context_of_exception_in_try_and_finally
    def f():
        try:
            try:
                te = TypeError(1)
                raise te
            finally:
                ve = ValueError(2)
                raise ve
        except Exception as e:
            exc = e
        return exc is ve, exc.__context__ is te, exc.__traceback__ is not None

    assert _assert_same_no_eager_run(f) == ("ok", (True, True, True))


def test_caught_exception_returned_keeps_its_traceback():
    def f():
        try:
            {}["missing"]
        except KeyError as e:
            err = e
        return err

    eager, compiled, _, _ = run_both(f)
    assert type(compiled[1]) is KeyError and compiled[1].args == eager[1].args
    assert compiled[1].__traceback__ is not None


def test_object_with_a_finalizer_made_and_dropped_in_the_trace_is_finalized():
    # CPython's test_exceptions.test_3114
    def f():
        seen = []

        class WithDel:
            def __del__(self):
                seen.append(sys.exc_info()[0])

        try:
            raise Exception(WithDel())
        except Exception:
            pass
        _collect_quietly()
        return seen

    assert _assert_same_no_eager_run(f) == ("ok", [None])


def test_a_class_made_in_the_frame_is_not_kept_alive_by_the_guards():
    # A type guard on an instance of a class made by a class statement in the
    # function must not hold the class: it (and its methods' cells) die as in
    # eager Python.
    import weakref

    refs = []

    def f(x):
        class Local:
            def __init__(self, v):
                self.v = v

        o = Local(x)
        refs.append(weakref.ref(Local))
        print("", end="")
        return o.v + 1

    assert _assert_same_no_eager_run(f, 1) == ("ok", 2)
    _collect_quietly()
    assert [r() for r in refs] == [None, None]


def test_a_finalizer_reached_through_a_local_class_runs_at_collection():
    # CPython's support.check_free_after_iterating: the instance lives in a
    # cycle through its class's __del__ closure; collecting it sets the cell.
    def check(iter, cls):
        done = False

        def wrapper():
            class A(cls):
                def __del__(self):
                    nonlocal done
                    done = True
                    next(it, None)

            it = iter(A())
            next(it, None)

        wrapper()
        _collect_quietly()
        return done

    assert _assert_same_no_eager_run(check, reversed, list) == ("ok", True)
    assert _assert_same_no_eager_run(check, iter, list) == ("ok", True)


def _count_down(n):
    return _count_down(n - 1) + 1 if n else 0


def test_deep_recursion_in_traced_code_is_not_a_recursion_error():
    def f():
        return _count_down(300)

    assert _assert_same_no_eager_run(f) == ("ok", 300)


def test_compiling_near_the_recursion_limit_falls_back_instead_of_raising():
    def deep(n, fn):
        return fn() if n == 0 else deep(n - 1, fn)

    def f():
        return _count_down(100)

    config.force_transform = config.raise_on_error = True
    old = sys.getrecursionlimit()
    compiled = bytegraph.compile(f, backend="eager")
    sys.setrecursionlimit(300)
    try:
        assert deep(60, compiled) == deep(60, f) == 100
    finally:
        sys.setrecursionlimit(old)
        config.force_transform = config.raise_on_error = False


class _Payload(Exception):
    def __init__(self, obj):
        self.obj = obj


def test_exception_state_is_freed_when_the_handler_ends_without_a_gc():
    # CPython's test_exceptions.testExceptionCleanupState ("complicated
    # construct"): reference counting alone frees the object; nothing the
    # compile made (traces are cycles) may keep it until a collection
    import weakref

    class Obj:
        pass

    def f():
        obj = Obj()
        wr = weakref.ref(obj)

        def inner_raising_func():
            local_ref = obj  # noqa: F841
            raise _Payload(obj)
        try:
            inner_raising_func()
        except _Payload:
            try:
                try:
                    raise
                finally:
                    raise
            except _Payload:
                pass
        obj = None
        return wr() is None

    import gc
    gc.disable()
    try:
        assert _assert_same_no_eager_run(f) == ("ok", True)
    finally:
        gc.enable()


def test_frame_that_falls_back_sees_the_callers_exception_not_bytegraphs():
    def body():
        # a generator frame runs eagerly (fallback) inside the caller's handler
        yield sys.exc_info()[1]
        try:
            raise KeyError("inner")
        except KeyError as k:
            yield k.__context__

    def g():
        return list(body())

    def f():
        try:
            raise ValueError("outer")
        except ValueError as e:
            got = g()
            return [type(x).__name__ for x in got], got[0] is e, got[1] is e

    assert _assert_same_no_eager_run(f) == ("ok", (["ValueError", "ValueError"], True, True))


def test_compiled_function_called_inside_a_handler_sees_the_handled_exception():
    def inner():
        print("", end="")
        return repr(sys.exc_info()[1])

    compiled_inner = bytegraph.compile(inner, backend="eager")

    def outer(fn):
        try:
            raise ValueError("outer")
        except ValueError:
            return fn()

    config.force_transform = True
    try:
        assert outer(compiled_inner) == outer(inner) == "ValueError('outer')"
    finally:
        config.force_transform = False


def test_native_exec_after_a_break_sees_the_frames_arguments():
    # CPython's test_scope.testClassAndGlobal: exec() reads the calling frame
    def f(obj):
        out = []
        exec("out.append(obj)")
        return out

    assert assert_same_clean(f, 5) == ("ok", [5])


def test_except_clause_matches_by_mro_not_by_subclasscheck():
    class Meta(type):
        def __subclasscheck__(cls, subclass):
            raise ValueError()

    class Mine(Exception, metaclass=Meta):
        pass

    def f():
        try:
            raise KeyError()
        except Mine:
            return "mine"
        except KeyError:
            return "key"

    assert assert_same_clean(f) == ("ok", "key")


def test_code_name_of_a_resumed_frame_in_a_traceback_is_the_functions():
    # CPython's test_exceptions.testSettingException reads tb_frame.f_code.co_name
    def f():
        try:
            print("", end="")
            raise KeyError("k")
        except KeyError:
            return sys.exc_info()[2].tb_frame.f_code.co_name

    assert assert_same_clean(f) == ("ok", "f")


class _OwnClassAttr:
    __class__ = 413


def test_class_attribute_named_dunder_class_shadows_the_type():
    def f():
        return _OwnClassAttr().__class__, _Plain().__class__

    assert_same_clean(f)


def test_dunder_class_of_a_builtin_container_is_its_type():
    def f():
        d, lst, s = dict(), [1], {1}
        return d.__class__ is dict, lst.__class__ is list, s.__class__ is set, (1,).__class__ is tuple

    assert_same_clean(f)


class _Proxy:
    def __init__(self, obj):
        self._Proxy__obj = obj

    def __getattribute__(self, name):
        if name.startswith("_Proxy__"):
            return object.__getattribute__(self, name)
        return getattr(self.__obj, name)


def test_objects_with_their_own_getattribute_are_not_read_around_it():
    def f(p):
        return isinstance(p, _Plain), p.__class__ is _Plain

    eager, compiled, _, _ = run_both(f, _Proxy(_Plain()))
    assert compiled == eager == ("ok", (True, True))


# ---------------------------------------------------------------------------
# finalizers run when eager runs them


def test_finalizer_of_a_replaced_dict_value_runs_at_the_write():
    def f():
        log = []

        class X:
            def __init__(self, i):
                self.i = i

            def __del__(self):
                log.append(self.i)

        d = {i: X(i) for i in range(3)}
        d[1] = None
        log.append("after write")
        del d[2]
        log.append("after del")
        return list(log)

    assert run_both(f)[:2] == (("ok", [1, "after write", 2, "after del"]),) * 2


def test_set_iteration_order_is_cpythons():
    def f(a):
        s = {3, 1, 2}
        s.add(a)
        s.discard(2)
        t = set("hello")
        u = {100, 5, 33} | {7, 1000}
        v = s.union([64, 32])
        return list(s), [x for x in t], list(u), list(v), sorted(t), s.pop(), list({*u, *t})

    assert_same_clean(f, 0)
    assert_same_clean(f, 17)


def test_pre_existing_set_mutations_keep_cpythons_order():
    def f(s):
        s.add(64)
        s.discard(3)
        s |= {128, 5}
        return s

    def call(fn):
        s = {3, 1, 2, 40}
        out = fn(s)
        return list(out), out is s

    eager = call(f)
    config.force_transform = True
    try:
        compiled = call(bytegraph.compile(f, backend="eager"))
    finally:
        config.force_transform = False
    assert compiled == eager


def test_object_with_del_made_in_the_trace_is_finalized():
    def f():
        log = []

        class Noisy:
            def __del__(self):
                log.append("del")

        n = Noisy()
        log.append("made")
        n = None
        log.append("after")
        return list(log)

    assert run_both(f)[:2] == (("ok", ["made", "del", "after"]),) * 2


def test_attribute_overwrite_runs_the_old_values_finalizer_on_time():
    class Noisy:
        def __init__(self, log):
            self.log = log

        def __del__(self):
            self.log.append("del")

    class Holder:
        pass

    def f(h, log):
        h.item = None
        log.append("after")
        return list(log)

    def call(fn):
        log = []
        h = Holder()
        h.item = Noisy(log)
        return fn(h, log)

    eager = call(f)
    config.force_transform = True
    try:
        compiled = call(bytegraph.compile(f, backend="eager"))
    finally:
        config.force_transform = False
    assert eager == compiled == ["del", "after"]


def test_while_loop_with_continue_and_a_break_inside_a_for_loop():
    buf = io.StringIO()

    def f():
        b = 2
        out = []
        for i in range(2):
            w = 0
            while w < 3:
                w += 1
                buf.write("x")
                if w == 2:
                    continue
                out.append((i, w))
        return b, out

    eager, compiled, fallbacks, frames = run_both(f)
    assert compiled == eager and fallbacks == 0 and frames > 0


def test_continue_inside_a_contextmanager_with_in_a_while_loop_with_breaks():
    # Program-generator seed 587: a while body's continue inside a
    # @contextmanager with leaves CPython's inner do-while loop before the
    # exit call; that loop must not be outlined with the exit on its stack.
    import contextlib

    log = []

    @contextlib.contextmanager
    def cm(tag):
        log.append(("in", tag))
        try:
            yield tag * 2
        finally:
            log.append(("out", tag))

    def f(y):
        w, u = 0, 0
        while w < 3:
            w += 1
            buf = io.StringIO()
            buf.write("x")
            print("", end="", file=buf)
            with cm(6) as c:
                u = (c + y + w) % 101
                if len(log) > 4:
                    continue
            log.append("k")
        return u, list(log)

    eager, compiled, fallbacks, frames = run_both(lambda: (f(1), log.clear())[0])
    assert compiled == eager and fallbacks == 0 and frames > 0


# ---------------------------------------------------------------------------
# ---------------------------------------------------------------------------
# Lazy generators and iterators (issue #12 item 1): a generator made in the
# trace runs only as far as its consumer asks, one item per next(); map,
# filter, zip, enumerate and itertools objects pull one input item at a time.

import itertools


def _gen_reads(box):
    for i in range(3):
        yield box[0] + i


def test_generator_interleaved_with_writes_to_a_list_it_reads():
    def f():
        box = [0]
        g = _gen_reads(box)
        a = next(g)
        box[0] = 10
        b = next(g)
        box[0] = 100
        return a, b, list(g)

    assert assert_same_clean(f) == ("ok", (0, 11, [102]))


GEN_STATE = 0


def test_generator_interleaved_with_writes_to_a_global_and_a_cell():
    def f():
        global GEN_STATE
        GEN_STATE = 0
        cell = 0

        def gen():
            for i in range(3):
                yield (GEN_STATE, cell, i)

        g = gen()
        out = [next(g)]
        GEN_STATE = 5
        cell = 7
        out.append(next(g))
        GEN_STATE = 6
        out.extend(g)
        return out

    assert assert_same_clean(f) == ("ok", [(0, 0, 0), (5, 7, 1), (6, 7, 2)])


def test_items_never_requested_have_no_side_effects():
    def f():
        log = []

        def gen():
            for i in range(5):
                log.append(i)
                yield i
        first = next(gen())
        found = any(x >= 1 for x in gen())
        pairs = list(zip([10], gen()))
        for x in gen():
            if x == 2:
                break
        a, b = (x for x in [1, 2, 3][:2])
        return first, found, pairs, log

    assert assert_same_clean(f)[1][3] == [0, 0, 1, 0, 0, 1, 2]


def test_generator_printing_items_prints_only_what_is_consumed():
    def f(buf):
        def gen():
            for i in range(4):
                print("item", i, file=buf)
                yield i
        g = gen()
        a = next(g)
        b = next(g)
        return a + b

    bufs = []
    for compiled in (False, True):
        buf = io.StringIO()
        fn = bytegraph.compile(f, backend="eager") if compiled else f
        config.force_transform = compiled
        try:
            assert fn(buf) == 1
        finally:
            config.force_transform = False
        bufs.append(buf.getvalue())
    assert bufs[0] == bufs[1] == "item 0\nitem 1\n"


def test_any_all_zip_and_in_stop_pulling_early():
    def f():
        log = []

        def gen(n):
            for i in range(n):
                log.append(i)
                yield i
        r = [any(x > 1 for x in gen(9)), all(x < 2 for x in gen(9)), list(zip(gen(9), "ab")),
             list(zip("ab", gen(9))), 3 in gen(9), next(filter(lambda x: x > 2, gen(9))),
             list(map(lambda x, y: (x, y), gen(9), [0, 1])), list(itertools.islice(gen(9), 1, 3))]
        return r, log

    assert_same_clean(f)


def test_returned_generator_is_a_real_generator_with_the_remaining_items():
    def gen(n, log):
        for i in range(n):
            log.append(i)
            yield i

    def fresh(log):
        return gen(3, log)

    def started(log):
        g = gen(3, log)
        next(g)
        return g

    def genexpr(xs):
        it = iter(xs)
        next(it)
        return (x * 2 for x in it)

    for fn, arg, remaining, clean in ((fresh, [], [0, 1, 2], True), (started, [], [1, 2], False),
                                      (genexpr, [1, 2, 3], [4, 6], True)):
        eager, compiled, fallbacks, _ = run_both(fn, list(arg))
        for outcome in (eager, compiled):
            assert outcome[0] == "ok" and isinstance(outcome[1], types.GeneratorType)
        assert list(eager[1]) == list(compiled[1]) == remaining
        assert (fallbacks == 0) == clean  # a started generator cannot be rebuilt: eager


def test_returned_map_filter_zip_enumerate_objects_are_real():
    def f(xs):
        m = map(lambda x: x * 10, xs)
        first = next(m)
        return first, m, filter(None, xs), zip(xs, xs), enumerate(xs, 5), reversed(xs)

    eager, compiled, fallbacks, _ = run_both(f, [0, 1, 2])
    assert fallbacks == 0
    for outcome in (eager, compiled):
        first, m, flt, z, en, rev = outcome[1]
        assert (type(m), type(flt), type(z), type(en)) == (map, filter, zip, enumerate)
        assert (first, list(m), list(flt), list(z), list(en)) == (0, [10, 20], [1, 2], [(0, 0), (1, 1), (2, 2)],
                                                                  [(5, 0), (6, 1), (7, 2)])


def test_generator_send_throw_close():
    def f():
        log = []

        def gen():
            try:
                x = yield 1
                log.append(("got", x))
                try:
                    yield x * 2
                except KeyError as e:
                    log.append(("caught", e.args))
                    yield "after"
                yield "last"
            finally:
                log.append("finally")
        g = gen()
        out = [next(g), g.send(5), g.throw(KeyError("k")), g.throw(KeyError, "v") if False else next(g)]
        g.close()
        g.close()
        try:
            next(g)
        except StopIteration as e:
            out.append(("stop", e.args))
        h = gen()
        h.close()  # never started: nothing runs
        try:
            gen().send(1)
        except TypeError as e:
            out.append(str(e))
        k = gen()
        next(k)
        try:
            k.throw(ValueError("boom"))
        except ValueError as e:
            out.append(("escaped", e.args))
        return out, log

    assert_same_clean(f)


def test_generator_return_value_and_yield_from():
    def f():
        def inner(n):
            got = []
            for i in range(n):
                got.append((yield i))
            return got

        def outer():
            r = yield from inner(2)
            yield ("inner returned", r)
            r2 = yield from [7, 8]
            return ("done", r2)

        g = outer()
        out = [next(g), g.send("a"), g.send("b"), next(g), next(g)]
        try:
            next(g)
        except StopIteration as e:
            out.append(e.value)
        try:
            next(g)  # exhausted stays exhausted, with no value
        except StopIteration as e:
            out.append(("again", e.args))
        return out

    assert assert_same_clean(f)[1][-2:] == [("done", None), ("again", ())]


def test_throw_and_close_through_yield_from():
    def f():
        log = []

        def inner():
            try:
                yield 1
                yield 2
            except ValueError:
                log.append("inner caught")
                return "recovered"
            finally:
                log.append("inner finally")

        def outer():
            try:
                r = yield from inner()
                log.append(("r", r))
                yield 3
            finally:
                log.append("outer finally")

        g = outer()
        out = [next(g), g.throw(ValueError)]
        g.close()
        h = outer()
        next(h)
        h.close()
        return out, log

    assert_same_clean(f)


def test_stop_iteration_inside_a_generator_is_a_runtime_error():
    def f():
        def gen():
            yield 1
            raise StopIteration("x")
        g = gen()
        out = [next(g)]
        try:
            next(g)
        except RuntimeError as e:
            out.append(str(e))
        out.append(next(g, "exhausted"))
        return out

    assert_same_clean(f)


def test_generator_already_executing_and_exception_inside():
    def f():
        def gen():
            yield next(g)
        g = gen()
        out = []
        try:
            next(g)
        except ValueError as e:
            out.append(str(e))

        def bad():
            yield 1
            yield 1 // 0
        b = bad()
        out.append(next(b))
        try:
            next(b)
        except ZeroDivisionError:
            out.append("zde")
        out.append(list(b))
        return out

    assert_same_clean(f)


def test_endless_generator_consumed_in_part():
    def f():
        def count():
            i = 0
            while True:
                yield i
                i += 1
        c = count()
        return [next(c), next(c)], list(itertools.islice(count(), 2, 5)), list(zip("abc", count()))

    assert_same_clean(f)


def test_unpacking_a_generator_pulls_one_past_the_targets():
    def f():
        log = []

        def gen():
            for i in range(5):
                log.append(i)
                yield i
        try:
            a, b = gen()
        except ValueError as e:
            return str(e), log

    assert assert_same_clean(f) == ("ok", ("too many values to unpack (expected 2)", [0, 1, 2]))


def test_reversed_of_an_iterator_is_a_type_error():
    def f():
        try:
            reversed(x for x in [1, 2])
        except TypeError as e:
            return str(e)

    assert_same_clean(f)


def test_generator_paused_inside_finally_block_is_not_dropped_silently():
    def f(log):
        def gen():
            try:
                yield 1
                yield 2
            finally:
                log.append("closed")
        g = gen()
        first = next(g)
        log.append("before return")
        return first

    # when the paused generator is dropped, its finally block runs: the trace
    # does not model when, so the frame runs eagerly (and the log is right)
    logs = []
    for compiled in (False, True):
        log = []
        fn = bytegraph.compile(f, backend="eager") if compiled else f
        config.force_transform = compiled
        try:
            fn(log)
        finally:
            config.force_transform = False
        logs.append(log)
    assert logs[0] == logs[1] == ["before return", "closed"]


def test_recursive_generators_with_yield_from():
    def f():
        def walk(tree):
            if isinstance(tree, list):
                for t in tree:
                    yield from walk(t)
            else:
                yield tree
        return list(walk([1, [2, [3, [4]], 5]]))

    assert assert_same_clean(f) == ("ok", [1, 2, 3, 4, 5])


def test_generator_expression_over_tensors_is_one_graph():
    from conftest import CountingBackend

    def f(xs):
        total = sum(x * 2 for x in xs)
        cat = torch.cat(list(x + 1 for x in xs))
        stacked = torch.stack(tuple(torch.relu(x) for x in xs))
        return total, cat, stacked, max(x.shape[0] for x in xs)

    xs = [torch.randn(3) for _ in range(3)]
    be = CountingBackend()
    bytegraph.reset()
    out = bytegraph.compile(f, backend=be)(xs)
    ref = f(xs)
    assert all(torch.equal(a, b) for a, b in zip(out[:3], ref[:3])) and out[3] == ref[3]
    assert be.count == 1
    assert bytegraph.stats().graph_breaks == 0 and bytegraph.stats().eager_fallbacks == 0


def test_break_inside_a_loop_over_a_generator_keeps_it_lazy():
    def f(x, log):
        def gen():
            for i in range(3):
                log.append(("make", i))
                yield x * i
        out = x
        for y in gen():
            log.append("body")
            out = out + y
            bytegraph.graph_break()
        return out

    logs = []
    for compiled in (False, True):
        log = []
        fn = bytegraph.compile(f, backend="eager") if compiled else f
        out = fn(torch.ones(2), log)
        assert torch.equal(out, torch.ones(2) * 4)
        logs.append(log)
    assert logs[0] == logs[1]


def test_map_object_live_across_a_break_runs_its_function_only_when_pulled():
    def f(x, log):
        m = map(lambda i: log.append(i) or x * i, [1, 2, 3])
        a = next(m)
        log.append("break")
        bytegraph.graph_break()
        return a + sum(m)

    logs = []
    for compiled in (False, True):
        log = []
        fn = bytegraph.compile(f, backend="eager") if compiled else f
        bytegraph.reset()
        assert torch.equal(fn(torch.ones(2), log), torch.ones(2) * 6)
        logs.append(log)
        if compiled:
            assert bytegraph.stats().eager_fallbacks == 0
    assert logs[0] == logs[1] == [1, "break", 2, 3]


class _OldStyleSeq:
    """Iterable only through __getitem__ (no __iter__)."""

    def __init__(self, n, log):
        self.n, self.log = n, log

    def __getitem__(self, i):
        self.log.append(i)
        if i >= self.n:
            raise IndexError(i)
        return i * 2


class _NotIterable:
    pass


def test_iterating_through_getitem_is_lazy_and_non_iterables_raise():
    def f():
        log = []
        it = iter(_OldStyleSeq(3, log))
        a = next(it)
        out = [a, list(it), list(filter(None, _OldStyleSeq(3, log))), 2 in _OldStyleSeq(9, log)]
        try:
            iter(_NotIterable())
        except TypeError as e:
            out.append(str(e))
        return out, log

    assert_same_clean(f)


class _SelfIterator:
    """An iterator object that is its own __iter__."""

    def __init__(self, n, log):
        self.i, self.n, self.log = 0, n, log

    def __iter__(self):
        return self

    def __next__(self):
        self.log.append(self.i)
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i


class _ReturnsList:
    def __iter__(self):
        return [1]


def test_pre_existing_iterator_objects_are_stepped_one_next_at_a_time(fresh=None):
    def f(it, seq, bad):
        log = it.log
        out = [any(x > 1 for x in it), list(it), list(filter(None, seq)), 4 in seq]
        try:
            iter(bad)
        except TypeError as e:
            out.append(str(e))
        return out, list(log)

    def args():
        log = []
        return _SelfIterator(4, log), _OldStyleSeq(3, log), _ReturnsList()

    eager = f(*args())
    eager_c, compiled, fallbacks, _ = run_both(f, *args())
    assert eager_c == ("ok", eager)
    bytegraph.reset()
    config.force_transform = True
    try:
        assert bytegraph.compile(f, backend="eager")(*args()) == eager
    finally:
        config.force_transform = False


def test_iteration_builtins_check_their_arguments_like_cpython():
    def f():
        out = []
        for call in (lambda: enumerate(), lambda: enumerate("ab", "a"), lambda: enumerate("ab", 2, 3),
                     lambda: enumerate(iterable=[], x=3), lambda: reversed(), lambda: reversed([], 1),
                     lambda: filter(None), lambda: map(abs), lambda: next(), lambda: range(3)[5],
                     lambda: iter()):
            try:
                call()
                out.append("no error")
            except (TypeError, IndexError) as e:
                out.append(type(e).__name__)
        out.append(list(enumerate(start=2, iterable="ab")))
        return out

    assert assert_same_clean(f)[1][-1] == [(2, "a"), (3, "b")]


def test_iterators_over_str_tuple_range_come_back_as_their_own_kind():
    def f(t):
        a = iter("xyz")
        next(a)
        b = iter((1, 2))
        list(b)
        c = iter(range(5))
        next(c)
        return a, b, c, iter(t), iter(b"ab")

    eager, compiled, fallbacks, _ = run_both(f, (3, 4))
    assert fallbacks == 0
    state = [[(type(i), i.__reduce__()) for i in o[1]] for o in (eager, compiled)]
    assert state[0] == state[1]


def test_reversed_list_follows_the_list_and_comes_back_as_a_list_reverseiterator():
    def f():
        lst = [1, 2, 3, 4]
        r = reversed(lst)
        a = next(r)
        lst.pop()
        b = next(r)
        lst.append(9)
        done = reversed([5])
        list(done)
        return a, b, r, done, lst

    eager, compiled, fallbacks, _ = run_both(f)
    assert fallbacks == 0
    state = [(o[1][:2], [(type(i), i.__reduce__()) for i in o[1][2:4]], list(o[1][2])) for o in (eager, compiled)]
    assert state[0] == state[1]


def test_builtins_called_with_wrong_arguments_raise_type_error():
    def f():
        out = []
        for call in (lambda: getattr(), lambda: getattr(1), lambda: hasattr(1), lambda: setattr(1, "a"),
                     lambda: delattr(1), lambda: divmod(1), lambda: round(), lambda: sum(),
                     lambda: sum([1], 2, 3), lambda: len(), lambda: isinstance(1, 2), lambda: abs(),
                     lambda: sorted(), lambda: sorted([1], None), lambda: sorted(iterable=[1])):
            try:
                call()
                out.append("no error")
            except TypeError:
                out.append("TypeError")
        out.append((round(number=2.5), round(2.567, ndigits=1), sum([1, 2], start=3)))
        return out

    assert assert_same_clean(f)[1][-1] == (2, 2.6, 6)


def test_frames_run_while_a_builtin_is_patched_do_not_break_the_compiler():
    from unittest import mock

    def f(x):
        with mock.patch("builtins.int") as m:
            y = int(x)
        return y is m.return_value, isinstance(3, int), len([x])

    config.raise_on_error = True
    try:
        assert run_both(f, "7")[:2] == (("ok", (True, True, 1)), ("ok", (True, True, 1)))
    finally:
        config.raise_on_error = False


def test_break_right_after_a_store_in_a_comprehension_keeps_the_null_slot():
    import weakref

    class Act:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k

    acts = {"a": Act(2), "b": Act(3)}
    log = []
    for a in acts.values():
        weakref.finalize(a, log.append, "fin")  # rebinding the loop variable breaks after it

    def f(x):
        return [fn(x) for fn in acts.values()], [act(x) for act in (abs, lambda v: v * 0)]

    eager, compiled, fallbacks, frames = run_both(f, -2)
    assert compiled == eager == ("ok", ([-4, -6], [2, 0]))
    assert fallbacks == 0 and frames > 0


def test_equal_strings_keep_their_identity_across_a_break():
    import operator

    def f():
        a = b = "xyzpdq"
        c = a[:3] + b[3:]
        print("", end="", file=io.StringIO())   # a break: a and c are rebuilt
        return operator.is_(a, c), a is c, operator.is_(a, b), a == c

    assert run_both(f)[:2] == (("ok", (False, False, True, True)),) * 2


def test_reversed_range_is_a_range_iterator():
    def f(n):
        it = reversed(range(n))
        first = next(it)
        print("", end="", file=io.StringIO())   # a break: the iterator is rebuilt
        return type(it).__name__, first, list(it)

    assert run_both(f, 4)[:2] == (("ok", ("range_iterator", 3, [2, 1, 0])),) * 2


def test_isinstance_of_a_plain_int_against_another_class_is_traced():
    def f(n):
        return isinstance(n, float), isinstance(n, (str, bytes)), isinstance(True, int)

    assert_same_clean(f, 3)


# ---------------------------------------------------------------------------
# symbolic bools in Python operators (CPython test_compare: ``assertEqual(a <
# b, comp < 0)`` once ``comp`` had become a dynamic int)


def test_symbolic_bool_compared_with_bool_is_specialized():
    def check(a, b, comp):
        print("break")  # every call resumes with a, b and comp as arguments
        lt = comp < 0
        return (a < b) == lt, lt != (a < b), lt + 1, (comp == 0) is True

    def f(rows):
        return [check(*r) for r in rows]

    rows = [(1, 2, -1), (3, 3, 0), (5, 4, 1), (7, 9, -1), (2, 2, 0), (True, 1, 0)]
    out = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        compiled = assert_same_clean(f, rows)
    finally:
        sys.stdout = saved
    assert compiled[1][1] == (True, False, 1, True)


# ---------------------------------------------------------------------------
# side-effect replay writes to the objects the trace saw, even when an
# earlier replayed write changes the path that leads to them (CPython
# test_compare: ``instances.sort(key=id)`` then ``inst.x = value``)


class _Box:
    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return f"Box({self.n}, {getattr(self, 'x', None)})"


_REPLAY_G = None


def test_replayed_writes_reach_objects_whose_path_changed():
    class Holder:
        pass

    def f(h, d, values):
        h.lst.sort(key=lambda o: o.n)  # reorders the list the items are reached through
        for o, v in zip(h.lst, values):
            o.x = v
        global _REPLAY_G
        old = _REPLAY_G
        _REPLAY_G = _Box(9)  # rebinds the global the old object was read from
        old.x = "old"
        inner = h.inner
        h.inner = _Box(7)  # replaces the attribute the old object was read from
        inner.x = "inner"
        d["a"], d["b"] = d["b"], d["a"]
        d["a"].x = "a"
        return h.lst

    def run(fn):
        global _REPLAY_G
        _REPLAY_G = g0 = _Box(0)
        h = Holder()
        h.lst, h.inner = [_Box(3), _Box(1), _Box(2)], _Box(6)
        i0 = h.inner
        d = {"a": _Box(4), "b": _Box(5)}
        return repr((fn(h, d, "abc"), g0, _REPLAY_G, i0, h.inner, d))

    config.force_transform = True
    try:
        bytegraph.reset()
        assert run(bytegraph.compile(f, backend="eager")) == run(f)
        assert STATS.frames_compiled > 0
    finally:
        config.force_transform = False


def test_sort_by_id_across_a_break_in_a_callee():
    class Item:
        pass

    def create(values):
        items = [Item() for _ in values]
        items.sort(key=id)  # id() of new objects breaks; the rest resumes
        for item, v in zip(items, values):
            item.x = v
        return items

    def f(values):
        out = []
        for _ in range(3):
            items = create(values)
            ids = [id(i) for i in items]
            out.append((ids == sorted(ids), [i.x for i in items]))
        return out

    for _ in range(3):
        assert_same_clean(f, (1, 2, 3, 4))


# ---------------------------------------------------------------------------
# --- wt-fc: functools / collections / copy / abc (extra CPython modules)


def _wtfc_break():
    sys._getframe(0)  # a graph break inside a callee
    return 1


def test_break_landing_on_a_delete_of_a_local_bound_in_the_trace():
    import copy
    import gc
    import weakref

    def f():
        class C(object):
            def __init__(self, i):
                self.i = i

        a, b, c, d = [C(i) for i in range(4)]
        u = weakref.WeakValueDictionary()
        u[a] = b
        u[c] = d
        v = copy.deepcopy(u)
        (x, y), (z, t) = sorted(v.items(), key=lambda pair: pair[0].i)
        assert x is not a and y is b
        # dropping x (a finalizer: weakref callbacks) breaks; DELETE_FAST y/z is
        # then native, on a slot the transformed code must have bound first
        del x, y, z, t
        del d
        gc.collect()
        return len(v)

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager


def test_nested_function_keeps_its_annotations():
    import functools
    import typing

    def f():
        def g(a: int, b: "str" = "x") -> list:
            pass

        def h():
            pass

        first = g.__annotations__
        hints = typing.get_type_hints(g)
        wrapper = functools.update_wrapper(lambda: None, g)
        h.__annotations__["k"] = 1  # the dict made on first read persists
        return (first, first is g.__annotations__, hints, wrapper.__annotations__ is first,
                h.__annotations__, g)

    eager, compiled, fallbacks, _ = run_both(f)
    assert compiled[1][:5] == eager[1][:5] and fallbacks == 0
    # the function rebuilt after the trace has them too
    assert compiled[1][5].__annotations__ == {"a": int, "b": "str", "return": list}


def test_nested_function_annotations_survive_a_break():
    def f():
        def g(a: int) -> str:
            pass
        _wtfc_break()
        return g.__annotations__

    assert_same_clean(f)


def test_frozenset_identity_across_a_break_in_a_callee():
    import copy

    def ident(y):
        sys._getframe(0)
        return y

    def f():
        x = frozenset([1, 2, 3])
        return ident(x) is x, copy.copy(x) is x, copy.deepcopy(x) is x

    assert_same_clean(f)


def test_locals_released_when_a_break_in_a_callee_resumes_the_frame():
    import weakref

    class C:
        pass

    def f():
        c = C()
        r = weakref.ref(c)
        _wtfc_break()
        del c  # the last reference: the frame that called the continuation must not hold another
        return r() is None

    def g():
        c = C()
        r = weakref.ref(c)
        try:
            raise ValueError
        except ValueError:
            _wtfc_break()
            del c
            return r() is None

    assert_same_clean(f)
    assert_same_clean(g)


class _WtfcPlain:
    pass


def _wtfc_touch(k, o):
    if k == 0:
        o.x = 1
        return dict(o.__dict__)
    if k == 1:
        d = o.__dict__
        d["y"] = 2
        return o.y
    d = vars(o)
    o.z = 3
    return d.get("z"), sorted(d)


def _wtfc_lru():
    import _functools
    import functools
    # an object made by a C constructor (a break), then written to
    w = _functools._lru_cache_wrapper(len, 2, False, functools._CacheInfo)
    w.cache_parameters = 5
    return dict(w.__dict__)


def test_instance_dict_and_buffered_attribute_writes_agree():
    def f(k):
        return _wtfc_touch(k, _WtfcPlain())

    for k in range(3):
        eager, compiled, _, _ = run_both(f, k)
        assert compiled == eager
    eager, compiled, _, _ = run_both(_wtfc_lru)
    assert compiled == eager


def test_abc_subclasshook_of_the_program_is_not_run_at_trace_time():
    import abc

    def f():
        class A(metaclass=abc.ABCMeta):
            @classmethod
            def __subclasshook__(cls, C):
                if cls is A:  # a cell the frame sets after the class is made
                    return "foo" in C.__dict__
                return NotImplemented

        class B:
            foo = 42

        return issubclass(A, A), issubclass(B, A), isinstance(B(), A), issubclass(int, A)

    def g():
        class Err(Exception):
            pass

        def boom():
            raise Err("from __subclasses__")

        class S(metaclass=abc.ABCMeta):
            __subclasses__ = boom

        try:
            issubclass(int, S)
        except Err as e:
            return str(e)

    assert_same_clean(f)
    assert_same_clean(g)


_WTFC_LOG = []


class _WtfcDescriptor:
    def __get__(self, obj, owner=None):
        _WTFC_LOG.append(owner)
        return len(_WTFC_LOG)


class _WtfcHolder:
    d = _WtfcDescriptor()


def test_class_attribute_descriptors_run_when_the_program_runs():
    import functools

    def f():
        return _WtfcHolder.d, _WtfcHolder.d

    config.force_transform = True
    try:
        bytegraph.reset()
        compiled = bytegraph.compile(f, backend="eager")
        _WTFC_LOG.clear()
        assert [compiled(), compiled()] == [(1, 2), (3, 4)]  # a Python __get__ runs on every read
    finally:
        config.force_transform = False

    def g():
        class MyMeta(type):
            @functools.cached_property
            def prop(self):
                return True

        class MyClass(metaclass=MyMeta):
            pass

        try:
            MyClass.prop  # the metaclass's descriptor runs natively, and raises
        except TypeError as e:
            return str(e)

    assert_same_clean(g)


def _wtfc_callback(_ref):
    pass


def test_break_landing_on_a_local_store_or_delete():
    import weakref

    class C:
        pass

    def deleted():
        c, d = C(), C()
        r = weakref.ref(d, _wtfc_callback)  # a finalizer: dropping c breaks after it
        r2 = weakref.ref(c, _wtfc_callback)
        _wtfc_break()
        del c
        del d  # the native instruction of that break
        return r() is None, r2() is None

    def stored():
        c, d = C(), C()
        r = weakref.ref(d, _wtfc_callback)
        r2 = weakref.ref(c, _wtfc_callback)
        _wtfc_break()
        c, d = None, 5  # STORE_FAST d is the native instruction
        return d, r() is None, r2() is None

    assert_same_clean(deleted)
    assert_same_clean(stored)


def test_abc_answers_are_guarded_by_registrations():
    import abc
    import collections.abc as cabc
    import functools

    def check(o, A):
        return isinstance(o, A), issubclass(type(o), A)

    def f():
        class A(abc.ABC):
            pass

        class B:
            pass

        out = [check(B(), A)]
        A.register(B)  # the compiled check() is reused: its answers must not be stale
        out.append(check(B(), A))
        return out

    def g():
        @functools.singledispatch
        def d(arg):
            return "base"

        class O(cabc.Sized):
            def __len__(self):
                return 0

        d.register(cabc.Sized, lambda arg: "sized")
        d.register(cabc.Set, lambda arg: "set")
        out = [d(O())]
        cabc.Set.register(O)
        out.append(d(O()))
        return out

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager
    eager, compiled, _, _ = run_both(g)
    assert compiled == eager == ("ok", ["sized", "set"])


class _WtfcDict(dict):
    def __init__(self, /, *args, **kwargs):
        super().__init__()  # a C method found through super(): bound to self
        self.upd(*args, **kwargs)

    def upd(self, it=None, /, **kwds):
        if it is not None:
            super().update(it)
        if kwds:
            super().update(kwds)


def test_c_methods_found_through_super_are_bound():
    import collections

    def f():
        d = _WtfcDict({"a": 1}, self=2)
        d.upd(b=3)
        c = collections.Counter("abca")
        c.update(self=42)
        return sorted(d.items()), sorted(c.items())

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager

# --- wt-descr: CPython's test_descr (instance and module dicts, class
# mutation, special-method lookup)




def _two(make):
    """A list of two fresh objects: the eager run pops one, the compiled run
    the other (both existed before the call)."""
    return [make(), make()]


def _plain_q():
    obj = _Plain()
    obj.q = 0
    return obj


def test_instance_dict_read_after_an_attribute_write_sees_the_write():
    def f(box):
        a = box.pop()
        a.x = 1
        return a.__dict__ == {"q": 0, "x": 1}, vars(a) == {"q": 0, "x": 1}, len(a.__dict__)

    assert run_both(f, _two(_plain_q))[:2] == (("ok", (True, True, 2)),) * 2


def test_instance_dict_held_before_an_attribute_write_sees_the_write():
    def f(box):
        a = box.pop()
        d = a.__dict__
        a.z = 3
        return sorted(d), "z" in d

    assert run_both(f, _two(_plain_q))[:2] == (("ok", (["q", "z"], True)),) * 2


def test_attribute_read_after_the_instance_dict_changed():
    def f(box):
        a = box.pop()
        a.__dict__.clear()
        return hasattr(a, "q")

    assert run_both(f, _two(_plain_q))[:2] == (("ok", False),) * 2


def _module_a():
    m = types.ModuleType("mm")
    m.a = 1
    return m


def test_module_dict_and_module_attributes_are_one_state():
    def f1(box):
        m = box.pop()
        m.foo = 1
        return sorted(k for k in m.__dict__ if not k.startswith("__"))

    def f2(box):
        m = box.pop()
        d = m.__dict__
        m.z = 3
        return "z" in d

    def f3(box):
        m = box.pop()
        del m.__dict__["a"]
        return hasattr(m, "a")

    assert run_both(f1, _two(_module_a))[:2] == (("ok", ["a", "foo"]),) * 2
    assert run_both(f2, _two(_module_a))[:2] == (("ok", True),) * 2
    assert run_both(f3, _two(_module_a))[:2] == (("ok", False),) * 2


def test_replayed_writes_reach_their_objects_as_they_were_before_the_writes():
    # box[1] is the popped list: its new contents must not be written through
    # box[1] after the pop has been replayed
    def f(pair):
        box = pair.pop()
        a = box.pop()
        a.append(5)
        box[0].update(k=1)
        return box, a

    def fresh():
        return [{}, [0]]

    assert run_both(f, _two(fresh))[:2] == (("ok", ([{"k": 1}], [0, 5])),) * 2


class _CountingGetattribute:
    """Its __getattribute__ is a descriptor that counts how often it is read."""

    reads = 0

    def __get__(self, obj, objtype=None):
        def getter(name):
            type(self).reads += 1
            raise AttributeError(name)
        return getter


class _Intercepted:
    __getattribute__ = _CountingGetattribute()


def test_an_object_whose_class_intercepts_attribute_reads_is_not_read_at_trace_time():
    def f(obj):
        start = _CountingGetattribute.reads
        try:
            getattr(obj, "attr")
        except AttributeError:
            pass
        held = [obj, obj]
        return _CountingGetattribute.reads - start, len(held)

    assert run_both(f, _Intercepted())[:2] == (("ok", (1, 2)),) * 2


class _OwnReversed:
    def __iter__(self):
        return iter([1, 2, 3])

    def __reversed__(self):
        return iter(["own"])


class _CountingDescriptor:
    """A class attribute whose every read through the class is counted."""

    reads = 0

    def __init__(self, impl):
        self.impl = impl

    def __get__(self, obj, owner):
        type(self).reads += 1
        return self.impl.__get__(obj, owner)


class _DescrReversed:
    __reversed__ = _CountingDescriptor(lambda self: iter([7]))
    __len__ = _CountingDescriptor(lambda self: 1)


def test_reversed_calls_the_class_own_reversed():
    def f(box):
        return list(reversed(_OwnReversed())), list(reversed(box.pop()))

    assert run_both(f, _two(_OwnReversed))[:2] == (("ok", (["own"], ["own"])),) * 2


def test_special_method_descriptors_are_read_once_as_python_does():
    def f(box):
        return list(reversed(box.pop())), list(reversed(_DescrReversed()))

    box = [_DescrReversed(), _DescrReversed(), _DescrReversed()]
    start = _CountingDescriptor.reads
    assert f(box) == ([7], [7])
    eager_reads = _CountingDescriptor.reads - start
    start = _CountingDescriptor.reads
    assert run_both(lambda: f(box))[1] == ("ok", ([7], [7]))
    assert _CountingDescriptor.reads - start == 2 * eager_reads


class _EvilKey:
    """A dict key equal in hash to 'attr' whose __eq__ deletes _ViciousC.attr."""

    def __hash__(self):
        return hash("attr")

    eqs = 0

    def __eq__(self, other):
        type(self).eqs += 1
        try:
            del _ViciousC.attr
        except AttributeError:
            pass
        return False


class _ViciousDescr:
    def __get__(self, ob, type=None):
        return 1


class _ViciousC:
    pass


def test_instance_dict_with_a_non_string_key_is_not_searched_at_trace_time():
    def f(c):
        return c.attr, hasattr(c, "attr")

    def fresh():
        _ViciousC.attr = _ViciousDescr()
        c = _ViciousC()
        c.__dict__[_EvilKey()] = 0
        return c

    def g(c):
        a = _EvilKey.eqs
        b = c.attr
        return b, _EvilKey.eqs - a

    eager = f(fresh()), g(fresh()), g(fresh())
    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    try:
        cg = bytegraph.compile(g, backend="eager")
        compiled = bytegraph.compile(f, backend="eager")(fresh()), cg(fresh()), cg(fresh())
    finally:
        config.force_transform = saved
    # (how often CPython's own lookup calls __eq__ can depend on what ran
    # before in the process, e.g. the type attribute cache: compare, do not fix)
    assert compiled == eager
    assert compiled[0] == (1, False) and compiled[1][0] == compiled[2][0] == 1 and compiled[1][1] >= 1


def test_a_dead_class_local_lives_as_long_as_in_python():
    import gc

    def f():
        class Base:
            pass

        class Sub(Base):   # never read again, but it lives until f returns
            pass
        gc.collect()
        return [c.__name__ for c in Base.__subclasses__()]

    assert run_both(f)[:2] == (("ok", ["Sub"]),) * 2


class _LookupA:
    f = 1

    def m(self):
        return "A"


class _LookupC:
    f = 2

    def m(self):
        return "C"


def test_class_attribute_lookups_are_not_served_stale_after_the_class_changes():
    class B(_LookupA):
        pass

    def made_here():
        b = B()
        try:
            z = b.zz
        except AttributeError:
            z = "none"
        return b.f, b.m(), z, bool(b)

    def given(b):
        try:
            z = b.zz
        except AttributeError:
            z = "none"
        return b.f, b.m(), z, bool(b)

    saved = config.force_transform
    config.force_transform = True
    try:
        bytegraph.reset()
        c1, c2 = bytegraph.compile(made_here, backend="eager"), bytegraph.compile(given, backend="eager")
        b = B()
        out = []
        for change in (lambda: None, lambda: setattr(_LookupA, "zz", 5), lambda: setattr(B, "__bases__", (_LookupC,)),
                       lambda: setattr(_LookupC, "__len__", lambda self: 0), lambda: setattr(B, "f", 3)):
            change()
            out.append(((made_here(), given(b)), (c1(), c2(b))))
    finally:
        config.force_transform = saved
        del _LookupA.zz, _LookupC.__len__
    for eager, compiled in out:
        assert eager == compiled


def test_a_one_argument_slice_is_rebuilt_across_a_break():
    def f(s):
        sl = slice(4)
        print("", end="", file=io.StringIO())   # a break: sl is rebuilt
        return s[sl], sl.start, sl.stop

    assert run_both(f, "hello")[:2] == (("ok", ("hell", None, 4)),) * 2


def test_a_bool_against_a_symbolic_int():
    def f(flag, n):
        out = []
        if flag == n:
            out.append("eq")
        if n > flag:
            out.append("gt")
        out.append(n + flag)
        out.append(flag * n)
        return out

    saved = config.force_transform
    config.force_transform = True
    try:
        bytegraph.reset()
        cf = bytegraph.compile(f, backend="eager")
        for flag, n in [(True, 1), (False, 0), (True, 5), (False, 7), (True, 1), (False, 0)]:
            assert cf(flag, n) == f(flag, n)
    finally:
        config.force_transform = saved


class _AliasedConfig:
    """Like transformers' PretrainedConfig: reads go through an alias map."""

    attribute_map = {"width": "hidden"}

    def __init__(self):
        self.hidden = 4

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def test_a_python_getattribute_is_traced():
    def f(cfg):
        return cfg.width * 2, cfg.hidden, getattr(cfg, "nope", "dflt")

    breaks = bytegraph.stats().graph_breaks
    assert assert_same_clean(f, _AliasedConfig()) == ("ok", (8, 4, "dflt"))
    assert bytegraph.stats().graph_breaks == breaks   # traced, not held


class _SizedIter:
    calls = []

    def __len__(self):
        type(self).calls.append("len")
        return 2

    def __iter__(self):
        return iter([1, 2])


def test_list_and_tuple_of_an_object_ask_its_len_first():
    def f(box):
        obj = box.pop()
        start = len(_SizedIter.calls)
        out = list(obj), tuple(obj), [*obj]
        return out, _SizedIter.calls[start:]

    assert run_both(f, _two(_SizedIter))[:2] == (("ok", (([1, 2], (1, 2), [1, 2]), ["len"] * 3)),) * 2


def test_a_range_iterator_from_before_the_trace_is_iterated_and_advanced():
    def f(n):
        it = iter(range(5))
        first = next(it)
        print("", end="", file=io.StringIO())   # a break: `it` reaches the rest as a real iterator
        second = next(it)
        return first, second, list(it), next(it, "done")

    breaks = bytegraph.stats().graph_breaks
    assert run_both(f, 5)[:2] == (("ok", (0, 1, [2, 3, 4], "done")),) * 2
    # only the print line breaks (the resume function iterates `it` itself, so a
    # loop it starts inside can be outlined rather than break every step)
    assert bytegraph.stats().graph_breaks - breaks == 2   # io.StringIO() and print()


def test_namedtuple_construction_binds_like_its_new():
    import collections

    P = collections.namedtuple("P", "x y", defaults=(7,))

    class Q(P):
        pass

    class R(P):
        def __new__(cls, a):
            return super().__new__(cls, a, a)

    def call(c, *a, **k):
        try:
            return c(*a, **k)
        except TypeError as e:
            return str(e)

    def f(v):
        return (call(P, 1), call(P, 1, 2, 3), call(P, x=1, y=v), call(P, v, x=2), call(P), call(P, z=3),
                call(P, [v], x=[v]), call(P, [v]), call(Q, v), type(call(Q, v)).__name__, call(R, v),
                type(call(R, v)).__name__)

    eager, compiled, _, _ = run_both(f, 3)
    assert compiled == eager


def test_namedtuple_subclass_with_an_instance_dict_is_an_object():
    import collections

    def f():
        class Point(collections.namedtuple("_Point", ["x", "y"])):
            pass

        a = Point(3, 4)
        d = a._asdict()
        a.w = 5
        return d, a.__dict__, a

    eager, compiled, _, _ = run_both(f)
    assert compiled[1][:2] == eager[1][:2] and compiled[1][2] == eager[1][2]


def test_closure_cells_of_a_function_read_without_a_source():
    import collections

    def f():
        # t._replace is a closure (over field_names and _map) reached through a
        # constant: its cells are read and handed on as the real cells
        T = collections.namedtuple("T", "itemgetter property self cls tuple")
        t = T(1, 2, 3, 4, 5)
        return t, t._replace(itemgetter=10, property=20, self=30, cls=40, tuple=50)

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager


def test_iter_of_a_self_iterator_is_the_object():
    from collections.abc import Generator

    class MG(Generator):
        def send(self, value):
            return value

        def throw(self, typ, val=None, tb=None):
            super().throw(typ, val, tb)

    def f():
        m = MG()
        return m is iter(m), iter(m) is iter(m), m.send(None) is next(m)

    assert_same_clean(f)

# ---------------------------------------------------------------------------
# --- wt-iter: dict iterators follow their dict; real iterators from before
# the trace (a loop's iterator carried across a break) are stepped by it


def _outcome(fn, make_args):
    """What a user sees of ``fn(*make_args())``: the result or the exception,
    and the arguments afterwards (each run on fresh arguments)."""
    args = make_args()
    try:
        return ("ok", fn(*args), args)
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return ("raise", type(e), str(e), args)


def run_fresh(fn, make_args):
    """(eager outcome, compiled outcome, eager fallbacks, break kinds), each run on fresh arguments."""
    eager = _outcome(fn, make_args)
    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    kinds = []
    before = STATS.eager_fallbacks

    def explained(*args):
        report = bytegraph.explain(fn)(*args)
        kinds.extend(r.kind for r in report.break_reasons)
        return report.result
    try:
        compiled = _outcome(explained, make_args)
    finally:
        config.force_transform = saved
    return eager, compiled, STATS.eager_fallbacks - before, kinds


def _brk(v):
    bytegraph.graph_break()
    return v


def test_dict_values_and_items_iterators_read_the_values_as_they_are_at_each_step():
    def f():
        d = {"a": 1, "b": 2, "c": 3}
        out = []
        for v in d.values():
            d["c"] = 30
            out.append(v)
        for k, v in d.items():
            d["c"] = 300
            out.append((k, v))
        return out, d

    assert assert_same_clean(f) == ("ok", ([1, 2, 30, ("a", 1), ("b", 2), ("c", 300)], {"a": 1, "b": 2, "c": 300}))


def test_dict_key_deleted_and_reinserted_under_its_iterator_is_not_followed_blindly():
    def f():
        d = {"a": 1, "b": 2}
        out = []
        for k in d:
            out.append(k)
            if k == "b":
                del d["b"]
                d["b"] = 5   # same size: CPython finds "b" again, in a new slot
        return out

    eager, compiled, _, _ = run_both(f)
    assert eager == compiled == ("raise", RuntimeError, "dictionary keys changed during iteration")


def test_dict_keys_replaced_under_an_iterator_across_breaks():
    def f(d):
        out = []
        for k in d:
            out.append(_brk(k))
            if k == "a":
                del d["c"]
                d["c"] = 0
            if k == "b":
                del d["b"]
                d["b"] = 0
        return out

    eager, compiled, _, _ = run_fresh(f, lambda: ({"a": 1, "b": 2, "c": 3},))
    assert eager == compiled
    assert eager[:3] == ("raise", RuntimeError, "dictionary keys changed during iteration")


def test_dict_with_holes_iterated_across_breaks_keeps_eagers_table():
    def f(d):
        del d["a"]
        d["a"] = 9   # a hole at the front of the table, "a" at its end
        out = []
        for k, v in d.items():
            out.append(_brk((k, v)))
            d[k] = v + 1
        return out

    eager, compiled, fallbacks, _ = run_fresh(f, lambda: ({"a": 1, "b": 2, "c": 3},))
    assert eager == compiled == ("ok", [("b", 2), ("c", 3), ("a", 9)], ({"b": 3, "c": 4, "a": 10},))
    assert fallbacks == 0


@pytest.mark.parametrize("make", [
    lambda d: iter(d), lambda d: iter(d.values()), lambda d: iter(d.items()), lambda d: iter(list(d)),
    lambda d: iter(tuple(d)), lambda d: iter(range(len(d))), lambda d: iter("abc"),
    lambda d: iter(b"abc"), lambda d: enumerate(d.values(), 5), lambda d: zip(d, range(2)),
], ids=["keys", "values", "items", "list", "tuple", "range", "str", "bytes", "enumerate", "zip"])
def test_real_iterator_carried_across_a_break_is_stepped_by_the_resumed_trace(make):
    def f(d):
        it = make(d)
        first = next(it)
        bytegraph.graph_break()   # it is a real iterator in the resume function
        alias = it
        second = next(it, "end")
        rest = []
        try:   # (not an outlined loop: the resumed trace steps the iterator itself)
            for v in it:
                rest.append(v)
        finally:
            pass
        return first, second, rest, alias is it, next(it, "done")

    eager, compiled, fallbacks, kinds = run_fresh(f, lambda: ({"a": 1, "b": 2, "c": 3},))
    assert eager == compiled and eager[0] == "ok"
    assert fallbacks == 0
    assert kinds == ["explicit_graph_break"]


def test_resume_function_with_a_real_iterator_is_guarded_on_its_container_and_position():
    def g(it, n):
        out = [next(it, None) for _ in range(n)]
        bytegraph.graph_break()
        out.append(list(it))
        return out

    def makers():
        d = {"a": 1, "b": 2, "c": 3}

        def partial_items():
            it = iter(d.items())
            next(it)
            return it

        def keys_replaced_under_it():
            dd = {"a": 1, "b": 2, "c": 3}
            it = iter(dd)
            next(it)
            del dd["a"]
            dd["a"] = 1   # same size: the iterator raises on its next step
            return it

        return [lambda: iter(d), lambda: iter(d.values()), lambda: iter([1, 2, 3]), lambda: iter((4, 5)),
                lambda: iter(range(5)), lambda: enumerate("abc"), lambda: zip([1, 2], "xy"), partial_items,
                lambda: iter({"x": 7}), keys_replaced_under_it]

    bytegraph.reset()
    saved = config.force_transform, config.cache_size_limit
    config.force_transform, config.cache_size_limit = True, 1000   # every variant compiled, none run eagerly
    try:
        compiled = bytegraph.compile(g, backend="eager")
        for make in makers():
            for n in (0, 1, 2, 5):
                assert _outcome(compiled, lambda: (make(), n))[:2] == _outcome(g, lambda: (make(), n))[:2]
    finally:
        config.force_transform, config.cache_size_limit = saved


def test_dict_mutated_in_a_loop_resumed_in_a_try_block():
    def f(d, stop):
        out = []
        try:
            for k, v in d.items():
                bytegraph.graph_break()
                out.append((k, v))
                if k == stop:
                    d[k] = -1
        finally:
            out.append("end")
        return out

    def holes():
        d = {"a": 1, "b": 2, "c": 3}
        del d["a"]
        d["a"] = 4
        return d

    for make, stop in [(lambda: {"a": 1, "b": 2}, "a"), (lambda: {"x": 1, "y": 2, "z": 3}, "z"), (holes, "c"),
                       (dict, "a")]:
        eager, compiled, fallbacks, _ = run_fresh(f, lambda: (make(), stop))
        assert eager == compiled and eager[0] == "ok"
        assert fallbacks == 0


def test_set_element_replaced_under_its_iterator_is_not_followed_blindly():
    def f():
        s = {1, 2, 3}
        out = []
        for x in s:
            out.append(x)
            if x == 1:
                s.discard(3)
                s.add(4)   # same size: CPython walks on through the changed table
        return out

    eager, compiled, _, _ = run_both(f)
    assert eager == compiled == ("ok", [1, 2, 4])


def test_exhausted_dict_iterators_across_a_break_ignore_their_dict():
    def f():
        d = {"a": 1}
        its = [iter(d), iter(d.values()), iter(d.items())]
        for it in its:
            list(it)
        bytegraph.graph_break()   # rebuilt as exhausted iterators of their own kinds
        d["b"] = 2
        return [type(it).__name__ for it in its], [list(it) for it in its]

    assert assert_same_clean(f) == ("ok", (["dict_keyiterator", "dict_valueiterator", "dict_itemiterator"],
                                           [[], [], []]))


def test_dict_update_with_a_pair_of_the_wrong_length_raises_as_in_python():
    def f():
        d = {"a": 1}
        try:
            d.update([("b", 2), ("c", 3, 4)])
        except ValueError as e:
            return str(e), d
        return None

    assert assert_same_clean(f) == ("ok", ("dictionary update sequence element #1 has length 3; 2 is required",
                                           {"a": 1, "b": 2}))


# --- wt-builtin: builtins' argument errors, dict.update, containment by
# identity, lazy range iterators, __dict__ aliasing


def _builtin_outcome(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return (type(e).__name__, str(e))


def test_builtin_calls_that_do_not_fit_the_signature_raise_cpythons_type_error():
    import functools

    def f():
        return [_builtin_outcome(all), _builtin_outcome(any, [1], []), _builtin_outcome(sum), _builtin_outcome(len), _builtin_outcome(abs, 1, 2),
                _builtin_outcome(divmod, 1), _builtin_outcome(min), _builtin_outcome(max, 1, 2, default=3), _builtin_outcome(min, [1], foo=2),
                functools.partial(pow, mod=10)(2, 6)]

    assert_same_clean(f)


def test_builtin_signature_errors_are_the_running_interpreters():
    # worded by each version's argument parser (3.13: "got an unexpected keyword
    # argument"), and by hand in enumerate: bytegraph asks the real builtin
    def f():
        return [_builtin_outcome(zip, [1], foo=2), _builtin_outcome(zip, [1], foo=2, strict=True),
                _builtin_outcome(enumerate, start=1), _builtin_outcome(enumerate, [1], foo=2),
                _builtin_outcome(enumerate, [1], iterable=[2]), _builtin_outcome(enumerate),
                _builtin_outcome(enumerate, [1], 2, 3), _builtin_outcome(max, [1], foo=2),
                _builtin_outcome(min, default=1), _builtin_outcome(round, 1.5, number=2),
                _builtin_outcome(round, ndigits=2), _builtin_outcome(sum, [1], foo=2)]

    assert_same_clean(f)


def test_attribute_builtins_reject_a_name_that_is_not_a_string():
    def f():
        return [_builtin_outcome(getattr, sys, 1), _builtin_outcome(getattr, sys, 1, "dflt"), _builtin_outcome(hasattr, sys, 1),
                _builtin_outcome(delattr, sys, 1), _builtin_outcome(setattr, sys, 1, 2)]

    assert_same_clean(f)


class _NoLen:
    def __getitem__(self, i):
        if i == 5:
            raise IndexError
        return i


def test_zip_with_a_huge_range_pulls_only_what_it_needs():
    def f():
        it = iter(range(2 ** 40))
        return list(zip(_NoLen(), range(2 ** 30))), next(it), next(it), type(it).__name__

    assert_same_clean(f)


class _Exc(Exception):
    pass


class _BadPairs:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        if self.i > 2:
            raise _Exc
        return (self.i, self.i)


class _KeysAttr:
    def __init__(self):
        self.keys = lambda: ["a"]   # an instance attribute: dict.update asks the object, not its type

    def __getitem__(self, k):
        return k * 2


def test_dict_update_error_paths_and_partial_updates():
    def f():
        d = {}
        out = [_builtin_outcome(d.update, [(1, 2, 3)]), _builtin_outcome(d.update, [(1, 2), 3]),
               _builtin_outcome(d.update, [(1, 2), "ab", "abc"]), _builtin_outcome(d.update, _BadPairs()), dict(d),
               _builtin_outcome(d.update, {}, {}), _builtin_outcome(dict, {}, {}), _builtin_outcome(dict, [(1, 2), [3, 4], "xy"]),
               _builtin_outcome(d.update, _KeysAttr()), _builtin_outcome(d.update, None)]
        return out, d

    assert_same_clean(f)


def test_dict_display_and_comprehension_keep_the_first_equal_key():
    def f(a, b):
        x, y = [a], [b]
        dicts = {a: x, b: y}, {k: [k] for k in (a, b)}, {**{a: x}, **{b: y}}, dict([(a, x), (b, y)])
        return [(type(k).__name__, v) for d in dicts for k, v in d.items()]

    assert assert_same_clean(f, 1, 1.0) == ("ok", [("int", [1.0])] * 4)


class _PlainObj:
    pass


def test_instance_dict_and_attributes_are_one_store():
    def f(o):
        o.a = 1
        d = o.__dict__
        d["b"] = 2
        r1 = o.b, d["a"]
        o.c = 3
        del o.a
        return r1, vars(o) is d, sorted(d), hasattr(o, "a"), o.c

    def g():
        o = _PlainObj()
        o.__dict__[1] = 1
        o.x = "x"
        d = o.__dict__
        return d == {1: 1, "x": "x"}, list(d.items())

    o1, o2 = _PlainObj(), _PlainObj()
    assert assert_same_clean(f, o1) == ("ok", ((2, 1), True, ["b", "c"], False, 3))
    f(o2)
    assert vars(o1) == vars(o2) == {"b": 2, "c": 3}
    assert_same_clean(g)


def test_containment_and_count_find_the_very_same_nan():
    nan = float("nan")

    def f(x, y):
        return x is y, x in [y], [x] == [y], [x].count(y), (x,) == (y,), {1: x} == {1: y}, x == y

    assert_same_clean(f, nan, nan)


def test_identity_of_equal_float_arguments_is_guarded():
    def f(x, y):
        return x is y, [x] == [y]

    nan, other_nan = float("nan"), float("nan")
    g = bytegraph.compile(f, backend="eager")
    saved = config.force_transform
    config.force_transform = True
    try:
        bytegraph.reset()
        assert g(nan, nan) == (True, True)
        assert g(nan, other_nan) == (False, False)
        a, b = 1.5, float("1.5")
        assert g(a, b) == (False, True) and g(a, a) == (True, True)
    finally:
        config.force_transform = saved


def test_set_comprehension_after_a_break_into_a_set_the_tracer_does_not_model():
    class Key:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            return self is other

    def f():
        s = {Key() for _ in range(3) if print("", end="", file=io.StringIO()) is None}
        return len(s)

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager == ("ok", 3) and frames > 0


def test_isinstance_of_builtin_objects_against_other_classes_does_not_break():
    # (unittest's assertRaises asks isinstance(expected, tuple) of a class)
    def f(c, lst):
        return isinstance(c, tuple), isinstance(c, type), isinstance(lst, (tuple, str)), isinstance(lst, list)

    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    try:
        assert bytegraph.compile(f, backend="eager", fullgraph=True)(ValueError, [1]) == (False, True, False, True)
    finally:
        config.force_transform = saved


def _shared_key_dicts(n):
    class C:
        pass

    out = []
    for _ in range(n):
        o = C()
        o.x, o.y, o.z = 1, 2, 3
        out.append(o.__dict__)
    return out


def test_a_failed_del_leaves_an_instance_dict_as_it_was():
    def f():
        a, b = _shared_key_dicts(2)
        before = sys.getsizeof(a)
        try:
            del a["q"]      # nothing changes: the dict must not be rebuilt after the graph
        except KeyError:
            pass
        return sys.getsizeof(a) == before, list(a), list(b)

    eager, compiled, fallbacks, _ = run_both(f)
    assert compiled == eager == ("ok", (True, ["x", "y", "z"], ["x", "y", "z"])) and fallbacks == 0


def test_a_loop_of_many_iterations_is_not_unrolled():
    def f(n):
        it = filter(bool, range(n))
        for _ in range(n):
            it = filter(bool, it)
        total = 0
        i = 0
        while i < n:
            total += i
            i += 1
        return total, next(it)

    saved = config.max_loop_iterations
    config.max_loop_iterations = 50
    try:
        breaks = STATS.graph_breaks
        assert assert_same_clean(f, 300) == ("ok", (44850, 1))
        assert STATS.graph_breaks > breaks
    finally:
        config.max_loop_iterations = saved


def test_vars_of_an_object_without_a_dict_is_a_type_error():
    def f():
        return _builtin_outcome(vars, 1), _builtin_outcome(vars, [1]), _builtin_outcome(vars, 1, 2)

    assert_same_clean(f)


FROM_HEX = float.fromhex


def test_alternate_constructors_of_builtin_types_are_folded():
    def f(s):
        return (FROM_HEX(s), float.fromhex(s), _builtin_outcome(FROM_HEX, "zz"), _builtin_outcome(FROM_HEX),
                int.from_bytes(b"\x01\x02", "big"), bytes.fromhex("0a0b"), str.maketrans("ab", "cd"))

    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    try:
        # one graph, no break: the calls are folded like math functions
        assert bytegraph.compile(lambda s: (FROM_HEX(s), int.from_bytes(b"\x01", "big")), backend="eager",
                                 fullgraph=True)("0x1p1") == (2.0, 1)
    finally:
        config.force_transform = saved
    assert_same_clean(f, "0x1.8p1")


# --- wt-dc: match flags, frozenset/namedtuple identity, annotations of functions made in the trace,
# argument errors, lifetimes across chained breaks, deep continuation nesting, isinstance on builtins


def test_match_sequence_and_mapping_follow_the_type_flags():
    import collections.abc

    class M(collections.UserDict, collections.abc.Sequence):
        pass

    class S(collections.UserList, collections.abc.Mapping):
        pass

    def check(x):
        match x:
            case [*_]:
                return "seq"
            case {}:
                return "map"
        return "none"

    def f():
        return check(M()), check(S()), check([1]), check({}), check("ab")

    assert assert_same_clean(f) == ("ok", ("map", "seq", "seq", "map", "none"))


def test_frozenset_reached_through_two_paths_is_one_object():
    def f():
        x = frozenset()
        match x:
            case frozenset(z):  # MATCH_CLASS breaks: x and z come back as two inputs
                pass
        return x is z

    assert run_both(f)[:2] == (("ok", True), ("ok", True))


def test_namedtuple_construction_is_a_new_object_each_call():
    import collections
    NT = collections.namedtuple("NT", "x y", defaults=[7])

    def make(*a, **k):
        return NT(*a, **k)

    def f():
        out = [make(1, 2) is make(1, 2), make(1), make(x=3)]
        for a, k in [((1, 2, 3), {}), ((), {}), ((1,), {"x": 2}), ((1,), {"z": 2})]:
            try:
                make(*a, **k)
            except TypeError as e:
                out.append(str(e))
        return out

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager and eager[1][0] is False
    # and the object is not a shared constant of the compiled code
    compiled_make = bytegraph.compile(lambda: make(1, 2), backend="eager")
    config.force_transform = True
    try:
        assert compiled_make() is not compiled_make()
    finally:
        config.force_transform = False


def test_argument_errors_have_cpythons_messages():
    def g(a, b, /, c, *, d, e=1):
        return a

    def h(a, b=2):
        return a

    def f():
        out = []
        for call in (lambda: g(), lambda: g(1, 2), lambda: g(1, 2, 3), lambda: g(1, b=2, c=3, d=4),
                     lambda: g(1, 2, 3, 4, d=5), lambda: h(), lambda: h(1, 2, 3), lambda: h(1, a=1),
                     lambda: h(1, c=2)):
            try:
                call()
            except TypeError as e:
                out.append(str(e))
        return out

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager and len(eager[1]) == 9


def test_function_made_in_the_trace_keeps_its_annotations():
    import dataclasses
    import functools
    import inspect

    def f():
        def g(a: int, b: "s" = 2) -> list:
            pass

        def h(a):
            pass
        ha = h.__annotations__
        ha["q"] = 3
        w = functools.wraps(g)(lambda: 0)

        @dataclasses.dataclass
        class C:
            x: int
        return (g.__annotations__, h.__annotations__, ha is h.__annotations__,
                w.__annotations__ is g.__annotations__, C.__doc__, str(inspect.signature(C.__init__)))

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager and eager[1][4] == "C(x: int)"


def test_continuation_after_a_chained_break_drops_the_callers_locals():
    import gc
    import weakref

    class Obj:
        pass

    def drop(g):
        g = None  # a generator has a finalizer: breaks inside this inlined call

    class Held(Exception):
        def __init__(self, obj):
            self.obj = obj

    def f():
        def gen():
            try:
                raise Held(o)  # the suspended generator holds o through the exception
            except Held:
                yield
        o = Obj()
        wr = weakref.ref(o)
        g = gen()
        next(g)
        drop(g)
        g = o = None
        gc.collect()
        return wr() is None

    assert run_both(f)[:2] == (("ok", True), ("ok", True))


def test_dropping_a_list_made_in_the_trace_runs_the_finalizers_of_its_items():
    def f():
        class C:
            alive = 0

            def __init__(self):
                C.alive += 1

            def __del__(self):
                C.alive -= 1
        l = [C(), C(), C()]
        n = C.alive
        del l
        return n, C.alive

    assert run_both(f)[:2] == (("ok", (3, 0)), ("ok", (3, 0)))


def test_loop_breaking_every_iteration_inside_a_with_block_does_not_nest():
    import contextlib

    def f(n):
        with contextlib.ExitStack() as stack:
            for _ in range(n):
                stack.callback(int)
        return n

    assert run_both(f, 5000)[:2] == (("ok", 5000), ("ok", 5000))


def test_isinstance_false_on_builtin_instances_is_traced():
    class Meta(type):
        pass

    class Proxyish:
        def __getattribute__(self, name):
            return int if name == "__class__" else object.__getattribute__(self, name)

    def f(t, d, p):
        return isinstance(t, Meta), isinstance(d, list), isinstance((1,), dict), isinstance(p, int)

    eager, compiled, _, _ = run_both(f, int, {}, Proxyish())
    assert compiled == eager == ("ok", (False, False, False, True))
    assert_same_clean(lambda t, d: (isinstance(t, Meta), isinstance(d, list)), int, {})
    assert STATS.graph_breaks == 0  # a class and a dict are no proxies: no break


def test_continuation_selected_while_a_builtin_is_deleted_runs_natively():
    import builtins

    def f():
        d = builtins.__dict__
        orig = d["iter"]
        del d["iter"]
        try:
            n = len(d) > 0  # (a module's dict is held, not modelled: a break, then a continuation)
            return n, "iter" in d
        finally:
            d["iter"] = orig

    assert run_both(f)[:2] == (("ok", (True, False)), ("ok", (True, False)))




# ---------------------------------------------------------------------------
# --- wt-od: OrderedDict, defaultdict and dicts through their own classes'
# methods: keyword arguments and errors as each class has them, copies and
# ``|`` keeping the class and default_factory, order-sensitive equality
# between OrderedDicts, iterators that read the dict as it is at each step,
# OrderedDicts that dict's own methods put out of step (not modelled).

import collections
import copy as _copy_module


def test_odict_methods_take_their_own_keywords():
    def f():
        od = collections.OrderedDict(a=1, b=2, c=3)
        out = [od.setdefault("g", default=9), od.pop("a", default=0), od.pop("zz", default=7),
               od.popitem(last=False), od.popitem(False), od.popitem()]
        try:
            collections.OrderedDict().popitem()
        except KeyError as e:
            out.append(repr(e))
        return out, od

    assert_same_clean(f)


def test_dict_methods_refuse_keywords():
    def f(name):
        d = {"a": 1}
        try:
            if name == "setdefault":
                d.setdefault("g", default=9)
            else:
                d.pop("a", default=0)
        except TypeError as e:
            return str(e), d
        return None, d

    assert_same_clean(f, "setdefault")
    assert_same_clean(f, "pop")


def test_odict_equality_is_order_sensitive_only_between_odicts():
    def f():
        a = collections.OrderedDict([("a", 1), ("b", 2)])
        b = collections.OrderedDict([("b", 2), ("a", 1)])
        return a == b, a != b, a == dict(b), dict(b) == a, a == collections.OrderedDict(a)

    assert_same_clean(f)


def test_defaultdict_copy_and_union_keep_the_factory():
    def f():
        i = collections.defaultdict(int, {1: 1, 2: 2})
        s = collections.defaultdict(str, {0: "zero", 1: "one"})
        c = i.copy()
        c[5]
        out = [(type(x).__name__, x.default_factory, list(x.items()))
               for x in (c, i | s, s | i, i | dict(s), dict(s) | i)]
        od = collections.OrderedDict(a=1)
        out += [(type(x).__name__, list(x.items())) for x in ({"b": 2} | od, od | {"b": 2}, od | i)]
        i.default_factory = list
        i[9]
        return out, i, i.default_factory

    assert_same_clean(f)


def test_defaultdict_factory_must_be_callable():
    def f():
        try:
            collections.defaultdict(5)
        except TypeError as e:
            return str(e)

    assert_same_clean(f)


def test_copies_of_odicts_and_defaultdicts():
    def f():
        od = collections.OrderedDict([("c", 1), ("b", [2])])
        dd = collections.defaultdict(list, {"x": [1]})
        d1, d2 = _copy_module.copy(od), _copy_module.deepcopy(od)
        d3 = _copy_module.deepcopy(dd)
        d3["new"]
        return (type(d1).__name__, d1 == od, d2["b"] is od["b"], d2 == od, type(d3).__name__,
                d3.default_factory, d3["x"] is dd["x"], d3)

    assert_same_clean(f)


def test_odict_changed_through_dict_methods_is_not_modelled():
    def f(which):
        od = collections.OrderedDict()
        od["spam"] = 1
        od["ham"] = 2
        if which == "setdefault":
            dict.setdefault(od, "eggs", 3)
        elif which == "pop":
            dict.pop(od, "spam")
        else:
            dict.clear(od)
        out = [len(od)]
        try:
            out.append(repr(od))
            out.append(list(od))
        except KeyError as e:
            out.append(("KeyError", str(e)))
        return out

    for which in ("setdefault", "pop", "clear"):
        eager, compiled, _, _ = run_both(f, which)
        assert compiled == eager


def test_odict_made_out_of_order_by_move_to_end_keeps_dicts_order():
    def make():
        od = collections.OrderedDict(a=1, b=2)
        od.move_to_end("a")
        return od

    def f(od):
        od["c"] = 3   # replayed on the real OrderedDict: its dict's order must stay eager's
        return list(od), list(dict.keys(od))

    eager = f(make())
    _, compiled, _, _ = run_both(f, make())
    assert compiled == ("ok", eager) == ("ok", (["b", "a", "c"], ["a", "b", "c"]))


def test_odict_iterators_raise_mutated():
    def f(op):
        od = collections.OrderedDict([(1, 1), (2, 2), (3, 3)])
        out = []
        try:
            for k, v in od.items():
                out.append((k, v))
                if op == "add":
                    od[k + 10] = 0
                elif op == "readd":
                    del od[k]
                    od[k] = 5
                elif op == "value":
                    od[3] = 99
                elif op == "clear":
                    od.clear()
                elif op == "last" and k == 3:
                    od[4] = 4    # after the last key: the iterator is done, no error
                elif op == "move":
                    od.move_to_end(1)
                elif op == "popitem":
                    od.popitem()
                elif op == "swap":   # one removed, one added: the size is as it was
                    del od[2]
                    od[9] = 9
        except RuntimeError as e:
            out.append(str(e))
        return out, od

    # clear: "changed size" up to 3.12, "mutated" from 3.13 (asked of the interpreter)
    for op in ("add", "readd", "value", "clear", "last", "move", "popitem", "swap"):
        assert_same_clean(f, op)


def test_dict_iterators_read_values_as_they_are_and_types():
    def f():
        d = {1: 1, 2: 2}
        out = []
        for k, v in d.items():
            d[2] = 99   # a value written during the loop is seen
            out.append((k, v))
        od = collections.OrderedDict(a=1, b=2)
        types_ = [type(x).__name__ for x in (od.keys(), iter(od), iter(od.items()), reversed(od),
                                                reversed(d), reversed(d.values()))]
        return out, types_, list(reversed(od)), list(reversed(d.items()))

    assert_same_clean(f)


def test_dict_update_reads_a_generator_one_pair_at_a_time():
    def f():
        d = {}
        d.update((k, len(d)) for k in "abc")
        try:
            d.update([(1, 2, 3)])
        except ValueError as e:
            d["err"] = str(e)
        try:
            collections.OrderedDict([(1, 2, 3)])
        except ValueError as e:
            d["oderr"] = str(e)
        return d

    assert_same_clean(f)


def test_equal_keys_keep_the_first_key_object():
    def f():
        a = {1: "a", 1.0: "b"}
        b = {x: x for x in (1, 1.0, True)}
        c = {1: 0, **{True: 1}}
        d = dict([(1, "x"), (1.0, "y")])
        return [(list(x.items()), [type(k).__name__ for k in x]) for x in (a, b, c, d)]

    assert_same_clean(f)


def test_dict_guard_tells_equal_keys_of_other_types_apart():
    def f(d):
        return [type(k).__name__ for k in d]

    fn = bytegraph.compile(f, backend="eager")
    saved = config.force_transform
    config.force_transform = True
    try:
        assert fn({1: "a"}) == ["int"]
        assert fn({True: "a"}) == ["bool"]
        assert fn({1.0: "a"}) == ["float"]
    finally:
        config.force_transform = saved


def test_copy_of_an_odict_with_attributes_keeps_them():
    def f(od):
        dup = _copy_module.copy(od)
        return type(dup).__name__, dup == od, dup.x is od.x, list(dup.items())

    od = collections.OrderedDict([("c", 1), ("b", 2)])
    od.x = ["x"]
    eager, compiled, _, _ = run_both(f, od)
    assert compiled == eager == ("ok", ("OrderedDict", True, True, [("c", 1), ("b", 2)]))


class _PlainAttrs:
    pass


def test_instance_dict_and_attribute_writes_stay_in_step():
    def f(which):
        o = _PlainAttrs()
        if which == "dict_then_attr":
            o.__dict__[1] = 1
            o.a = "a"
            return o.__dict__ == {1: 1, "a": "a"}, dict(o.__dict__)
        if which == "attr_then_vars":
            o.a = 7
            return dict(vars(o))
        if which == "held_dict":
            d = o.__dict__
            o.a = 9
            return dict(d)
        o.__dict__["a"] = 5
        return o.a

    for which in ("dict_then_attr", "attr_then_vars", "held_dict", "dict_then_read"):
        eager, compiled, _, _ = run_both(f, which)
        assert compiled == eager


def test_set_guards_tell_equal_elements_of_other_types_apart():
    def f(s):
        return [type(x).__name__ for x in s]

    fn = bytegraph.compile(f, backend="eager")
    saved = config.force_transform
    config.force_transform = True
    try:
        assert fn({1}) == ["int"]
        assert fn({True}) == ["bool"]
        assert fn(frozenset({1.0})) == ["float"]
        assert fn(frozenset({True})) == ["bool"]
    finally:
        config.force_transform = saved


def test_iterator_over_a_dict_with_holes_keeps_its_place_across_a_break():
    def make(cls):
        d = cls(a=1, b=2, c=3, d=4)
        del d["b"]    # a hole in the table before the iterator's position
        return d

    def f(d):
        it = iter(d)
        first = next(it), next(it)
        d["a"] = 100  # a value only: the dict is written back in place
        print("", end="", file=io.StringIO())   # a break: the iterator is rebuilt
        return first, list(it), list(d.items())

    for cls in (dict, collections.OrderedDict):
        eager = f(make(cls))
        _, compiled, _, _ = run_both(f, make(cls))
        assert compiled == ("ok", eager)


def test_set_iterators_notice_changes_as_cpython_does():
    def f(op):
        s = {1, 2}
        out = []
        try:
            for x in s:
                out.append(x)
                if op == "grow":
                    s.add(x + 10)
                else:             # same size, other elements: the hash table decides
                    s.remove(x)
                    s.add(x + 10)
                if len(out) > 20:
                    break
        except RuntimeError as e:
            out.append(str(e))
        return out, sorted(s)

    for op in ("grow", "swap"):
        eager, compiled, _, _ = run_both(f, op)
        assert compiled == eager


# ---------------------------------------------------------------------------
# attribute reads that run the program's code are traced or refused, never
# run at trace time (CPython test_dataclasses test_getting_field_calls_get: a
# Mock as a descriptor's __get__ was called three times for one read)


def test_descriptor_whose_get_is_a_callable_object_runs_once():
    from unittest.mock import Mock

    def f():
        class D:
            pass
        D.__set__ = Mock()  # a data descriptor: it wins over the instance dict
        D.__get__ = Mock(return_value=7)

        class C:
            i = D()
        c = C()
        D.__get__.reset_mock()  # (breaks: the read below is in a resume function)
        value = c.i
        return value, D.__get__.call_count

    assert assert_same_clean(f) == ("ok", (7, 1))


_CLASS_READS = []


class _LoggingDescriptor:
    def __get__(self, obj, cls):
        _CLASS_READS.append(("get", obj is None))
        return 42


class _LoggingMeta(type):
    def __getattr__(cls, name):
        _CLASS_READS.append(("meta", name))
        return name.upper()


class _WithClassHooks(metaclass=_LoggingMeta):
    i = _LoggingDescriptor()
    x = 1


def test_class_attribute_reads_call_python_descriptors_and_metaclass_getattr_once():
    def f():
        _CLASS_READS.clear()
        a = _WithClassHooks.i
        _WithClassHooks.x = 5
        b = _WithClassHooks.x
        c = _WithClassHooks.zzz
        _WithClassHooks.x = 1
        return a, b, c, list(_CLASS_READS)

    for _ in range(2):  # the second call runs the cached code and its guards
        assert assert_same_clean(f) == ("ok", (42, 5, "ZZZ", [("get", True), ("meta", "zzz")]))



# ---------------------------------------------------------------------------
# --- wt-ty: symbolic numbers meeting complex/NaN, ... (extra CPython modules)


def test_symbolic_int_compared_with_complex_and_nan():
    # an int argument turns symbolic after its value changes; sympy answered
    # ``Eq(s0, 42+0j)`` with False and raised on NaN
    def f(c, n):
        return (c == n, n == c, c != n, c + n, n * c, n == 1.5, n < float("nan"),
                n == float("inf"), n < float("inf"), n * [0])

    bytegraph.reset()
    config.force_transform = True
    try:
        cf = bytegraph.compile(f, backend="eager")
        for c, n in [((1 + 0j), 1), ((42 + 0j), 42), ((5 + 0j), 5), ((5 + 0j), 4)]:
            assert cf(c, n) == f(c, n)
    finally:
        config.force_transform = False


def test_number_constructor_with_only_keyword_objects():
    # complex(real=obj) has no positional argument: the break's message indexed args[0]
    class R:
        def __float__(self):
            return 2.5

        def __complex__(self):
            return 1j

    def f():
        return complex(real=R()), complex(imag=R()), float(R())

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


def test_issubclass_propagates_the_users_bases_exception():
    class B:
        pass

    class C:
        @property
        def __bases__(self):
            raise RuntimeError("bases")

    class NoBases:
        pass

    def f():
        out = []
        for args in ((B, C()), (C(), B), (B, NoBases()), (NoBases(), B)):
            try:
                out.append(issubclass(*args))
            except (RuntimeError, TypeError) as e:
                out.append((type(e).__name__, str(e)))
        try:
            isinstance(B(), C())
        except RuntimeError as e:
            out.append(str(e))
        return out

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


def test_object_whose_class_is_a_property_is_not_read_at_trace_time():
    log = []

    class P:
        @property
        def __class__(self):
            log.append("read")
            return int

    def f(p):
        del log[:]
        r = isinstance(p, int), isinstance(p, str)
        return r, list(log)

    eager, compiled, _, frames = run_both(f, P())
    assert compiled == eager and frames > 0


def test_fstring_format_errors_are_the_programs():
    def f(n):
        out = []
        for spec in (",,", "__", ",_", "_,", "d"):
            try:
                out.append(f"{n:{spec}}")
            except ValueError as e:
                out.append(str(e))
        try:
            out.append(f'{1:,,}')
        except ValueError as e:
            out.append(str(e))
        try:
            out.append(f"{10 ** 5000!s}")
        except ValueError as e:
            out.append(type(e).__name__)
        return out

    eager, compiled, _, frames = run_both(f, 1)
    assert compiled == eager and frames > 0


def test_iter_of_an_object_returning_itself_is_that_object():
    # iter(obj) is a UserIteratorValue around obj: ``is`` compared the wrapper
    class W:
        def __init__(self):
            self.n = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.n += 1
            if self.n > 3:
                raise StopIteration
            return self.n

    def f(ws):
        w = ws.pop()
        it = iter(w)
        new = W()
        it2 = iter(new)
        return (it is w, w is it, id(it) == id(w), next(it), list(it), [it][0] is w,
                it2 is new, new is it2, it2 is not it)

    eager, compiled, _, frames = run_both(f, [W(), W()])
    assert compiled == eager and frames > 0


def test_class_with_a_raising_metaclass_eq_is_wrapped_without_comparing():
    calls = []

    class BadType(type):
        def __eq__(self, other):
            calls.append("eq")
            return 1 / 0

        __hash__ = type.__hash__

    bt = BadType("bt", (), {})

    def f(cls):
        del calls[:]
        out = [cls.__name__]
        try:
            list[int] | list[cls]
        except ZeroDivisionError:
            out.append("zde")
        return out, list(calls)

    eager, compiled, _, frames = run_both(f, bt)
    assert compiled == eager and frames > 0


def test_constructing_a_class_whose_metaclass_shadows_module():
    class BadMeta(type):
        @property
        def __module__(self):
            return 1 / 0

    Bad = BadMeta("Bad", (), {"x": 1})

    def f():
        b = Bad()
        return b.x, type(b).__name__

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


def test_annotations_of_functions_made_in_the_trace():
    # MAKE_FUNCTION dropped the annotations: __annotations__ read {} and the
    # function returned had none
    def f():
        x = 1

        def g(a: int, b: "str" = 1, *, c: list = None) -> float:
            return x

        def k(y):
            return y

        d = g.__annotations__
        d["extra"] = bytes
        return g, d, g.__annotations__ is d, k.__annotations__, (lambda: 0).__annotations__

    eager, compiled, fallbacks, frames = run_both(f)
    assert compiled[0] == "ok" and fallbacks == 0 and frames > 0
    e, c = eager[1], compiled[1]
    assert c[1:] == e[1:]
    assert c[0].__annotations__ == e[0].__annotations__ and c[0].__annotations__ is c[1]


def test_isinstance_against_a_union_that_cannot_resolve_raises():
    import typing
    T = typing.TypeVar("T")

    def f(x):
        out = []
        for u in (int | T, typing.Union[int, T], T | int, typing.Union[T, int]):
            for check in (lambda: isinstance(x, u), lambda: isinstance(object(), u),
                          lambda: issubclass(int, u)):
                try:
                    out.append(check())
                except TypeError as e:
                    out.append(str(e))
        return out

    eager, compiled, _, frames = run_both(f, 1)
    assert compiled == eager and frames > 0


def test_huge_ints_across_calls_stay_exact():
    # ints that change between calls become symbolic; huge ones made the
    # shape environment's range analysis infinite (sympy: Invalid NaN comparison)
    def f(a, b):
        negative = a ^ b < 0
        a, b = abs(a), abs(b)
        if not b:
            raise ZeroDivisionError("division by zero")
        if a >= (2 ** 1024 - 2 ** 970) * b:
            raise OverflowError("int/int too large to represent as a float")
        d = a.bit_length() - b.bit_length()
        if d >= 0 and a >= 2 ** d * b or d < 0 and a * 2 ** -d >= b:
            d += 1
        exp = max(d, -1021) - 53
        a, b = a << max(-exp, 0), b << max(exp, 0)
        q, r = divmod(a, b)
        if 2 * r > b or 2 * r == b and q % 2 == 1:
            q += 1
        return -q if negative else q, exp

    def run(fn, *args):
        try:
            return fn(*args)
        except (ZeroDivisionError, OverflowError) as e:
            return type(e)

    bytegraph.reset()
    config.force_transform = True
    try:
        cf = bytegraph.compile(f, backend="eager")
        for a, b in [(1, 3), (7, 2), (9, 5), (10 ** 40, 3), (-(2 ** 200) + 1, 10 ** 30), (5, 10 ** 50),
                     (12345, 678), (2 ** 1100, 3), (3, 0)]:
            assert run(cf, a, b) == run(f, a, b)
    finally:
        config.force_transform = False


def test_a_trace_past_its_step_limit_breaks_and_stays_exact():
    # a loop over known items unrolls; test_complex's 14641 inlined calls
    # traced for minutes: past config.max_trace_steps the frame breaks
    def check(x, y):
        z = x * y
        return z / x if x != 0 else z

    def f(n):
        vals = [complex(i, j) for i in range(-n, n + 1) for j in range(-n, n + 1)]
        out = []
        for x in vals:
            for y in vals:
                out.append(check(x, y))
        return out

    saved = config.max_trace_steps
    config.max_trace_steps = 3000
    try:
        before = STATS.graph_breaks
        eager, compiled, _, frames = run_both(f, 2)
        assert compiled == eager and frames > 0
        assert STATS.graph_breaks > before
    finally:
        config.max_trace_steps = saved


def test_dropping_a_local_whose_class_property_raises():
    # the dropped object's finalizer check used isinstance, which read the
    # program's raising __class__ property at trace time
    class C:
        @property
        def __class__(self):
            raise RuntimeError("class")

    def check(c):
        try:
            return isinstance(c, bool)
        except RuntimeError as e:
            return str(e)

    def f():
        c = C()
        r = check(c)
        c = None
        return r, c

    eager, compiled, _, frames = run_both(f)
    assert compiled == eager and frames > 0


# ---------------------------------------------------------------------------
# class attribute lookups that run no code of the program at trace time
# (CPython test_descr: test_abstractmethods, test_type_lookup_mro_reference)


def test_reading_a_types_own_descriptor_that_raises():
    def f():
        try:
            type.__abstractmethods__
        except AttributeError as e:
            return "raised", str(e)
        return "no"

    assert assert_same_clean(f) == ("ok", ("raised", "__abstractmethods__"))


def test_class_dict_with_a_key_whose_eq_changes_the_bases():
    def f():
        class MyKey:
            def __hash__(self):
                return hash("mykey")

            def __eq__(self, other):
                X.__bases__ = (Base2,)

        class Base:
            mykey = "from Base"
            mykey2 = "from Base"

        class Base2:
            mykey = "from Base2"
            mykey2 = "from Base2"

        X = type("X", (Base,), {MyKey(): 5})
        return X.mykey, X.mykey2

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager == ("ok", ("from Base", "from Base2"))


def test_rebinding_a_local_to_an_object_holding_it_is_not_a_release():
    class Node:
        __slots__ = ["x"]

        def __init__(self, x):
            self.x = x

    def f(n):
        o = None
        for _ in range(n):
            o = Node(o)  # the old node lives on inside the new one
        depth = 0
        while o is not None:
            o, depth = o.x, depth + 1
        return depth

    assert assert_same_clean(f, 300) == ("ok", 300)


# --- an error coming back from a Python frame that a native instruction at a
# graph break pushed (3.13 looks its handler up at the unit before the call)


class _RaisingLibrary:
    def enter(self, x):
        raise TypeError(f"no {x}")


def test_error_from_a_python_callee_run_natively_at_a_break_reaches_the_handler():
    import contextlib

    def f():
        out = []
        try:
            contextlib.ExitStack().enter_context(1)   # runs natively between graphs
            out.append("not reached")
        except TypeError as e:
            out.append(str(e))
        try:
            stack = contextlib.ExitStack()
            stack.callback(_RaisingLibrary().enter, "cb")
            stack.close()
        except TypeError as e:
            out.append(str(e))
        return out

    assert assert_same_clean(f)[0] == "ok"


def _not_a_generator():
    raise RuntimeError("ran at cm()")


def _a_generator(a):
    yield a


def test_contextmanager_object_made_in_the_trace_calls_its_function_as_python():
    # _GeneratorContextManager.__init__ calls the function: a plain function
    # runs (and raises) there, a generator function's arguments bind there
    import contextlib

    def f():
        plain = contextlib.contextmanager(_not_a_generator)   # (a break: runs natively)
        gen = contextlib.contextmanager(_a_generator)
        out = []
        try:
            plain()
            out.append("made")
        except RuntimeError as e:
            out.append(str(e))
        try:
            gen(1, 2)
            out.append("made")
        except TypeError as e:
            out.append(str(e))
        with gen(3) as v:
            out.append(v)
        return out

    eager, compiled, _, _ = run_both(f)   # (the plain function's call runs natively)
    assert compiled == eager and eager[0] == "ok"


def test_sum_of_number_constants_is_the_real_sums():
    # 3.12+ sums floats with compensation; a run of constants then other items
    class Num:
        def __init__(self, v):
            self.v = v

        def __radd__(self, other):
            return other + self.v

    def f():
        return (sum([0.1] * 10), sum([1.0, 10e100, 1.0, -10e100]), sum([0.1] * 10, 0.5), sum([1, 2, 0.1, 0.2]),
                sum([0.1, 0.2, Num(0.3), 0.1, 0.2]), sum([True, 2, 3.5j]))

    assert_same_clean(f)


def test_super_with_arguments_that_do_not_fit_raises_cpythons_type_error():
    # 3.13 words the second one "obj (instance of int) is not an instance or subtype of type (...)"
    class Base:
        def method(self):
            return "base"

    class C(Base):
        def bad_type(self):
            return super(1, self).method()

        def bad_obj(self):
            return super(C, 1).method()

    def f():
        out = []
        for name in ("bad_type", "bad_obj"):
            try:
                getattr(C(), name)()
            except TypeError as e:
                out.append(str(e))
        return out

    assert_same_clean(f)


class _CountingMeta(type):
    calls = 0

    def __call__(cls, *args, **kwargs):
        _CountingMeta.calls += 1
        return type.__call__(cls, *args, **kwargs)


class _MetaCounted(metaclass=_CountingMeta):
    def __init__(self, v):
        self.v = v


def test_calling_a_class_runs_its_metaclass_call():
    def f():
        before = _CountingMeta.calls
        objs = [_MetaCounted(i) for i in range(3)]
        return _CountingMeta.calls - before, [o.v for o in objs]

    eager, compiled, _, _ = run_both(f)
    assert compiled == eager == ("ok", (3, [0, 1, 2]))


# ---------------------------------------------------------------------------
# --- wt-adv: locals by name around graph breaks (issue #14 adversarial pass)


@torch.compiler.disable
def _adv_native(v=None):
    return v


def test_eval_at_a_break_sees_only_the_users_locals():
    # the native eval runs in the transformed frame (or a continuation's):
    # bytegraph's temporaries and parameters must not be among its locals
    def f(x):
        a = 1
        return eval("sorted(locals())"), float((x + a).sum())

    def g(x):
        a = 1
        print("", end="")
        return eval("sorted(locals())"), float((x + a).sum())

    assert assert_same_clean(f, torch.ones(2))[1][0] == ["a", "x"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert assert_same_clean(g, torch.ones(2))[1][0] == ["a", "x"]


def test_locals_lists_variables_in_the_codes_order():
    # CPython: locals, then cells, then free variables -- not the order the
    # trace happened to bind or read them in
    def f(x):
        b = 2
        a = 1
        del b
        y = x + 1
        b = 3

        def g():
            return x + c
        c = 1
        return list(locals()), float(y.sum())

    assert assert_same_clean(f, torch.ones(2))[1][0] == ["x", "b", "a", "y", "g", "c"]


def test_locals_after_an_outlined_loop_lists_every_variable():
    def f(x):
        for i in range(2):
            a = _adv_native(i)
        return sorted(locals()), list(locals()), len(locals()), float(x.sum())

    assert assert_same_clean(f, torch.ones(2))[1][:3] == (["a", "i", "x"], ["x", "i", "a"], 3)


def test_locals_in_an_outlined_loop_body_sees_the_last_iterations_variables():
    def f(x):
        out = []
        for i in range(3):
            a = _adv_native(i)
            d = locals()
            out.append(sorted(d))
            print("", end="")
        return out

    # (before 3.13 the loop's locals() calls share the frame's one dict:
    # an outlined body would make one per iteration, so the frame runs eagerly)
    with contextlib.redirect_stdout(io.StringIO()):
        eager, compiled, _, _ = run_both(f, torch.ones(2))
    assert compiled == eager and compiled[1][2] == ["a", "d", "i", "out", "x"]


def test_loop_variable_bound_in_a_later_iteration_survives_a_break():
    # the outlined body's first trace saw no ``prev`` in its state dict; the
    # next iteration's dict has it, and the continuation must get it
    def f(x):
        out = []
        for i in range(3):
            _adv_native(i)
            if i > 0:
                out.append(prev)  # noqa: F821 - bound by the previous iteration
            prev = i
        return out, float(x.sum())

    assert assert_same_clean(f, torch.ones(2))[1][0] == [0, 1]


@contextlib.contextmanager
def _adv_cm(log, tag):
    log.append(("in", tag))
    try:
        yield tag * 2
    finally:
        log.append(("out", tag))


def _adv_gen(n):
    for i in range(n):
        yield i


def test_break_moved_to_a_generators_call_inside_a_contextmanager_with():
    # (fuzzer seed 968) the break after the with statement moves to the call
    # that made the paused generator, inside the @contextmanager's with: it
    # must move on to the with statement (was an internal error)
    def f(x):
        acc = []
        with _adv_cm(acc, 8):
            try:
                pass
            finally:
                it = _adv_gen(2)
                c = next(it)
        bytegraph.graph_break()
        return c, acc, x

    assert assert_same_clean(f, 1) == ("ok", (0, [("in", 8), ("out", 8)], 1))


class _AdvFin:
    def __init__(self, n, log):
        self.n, self.log = n, log

    def __del__(self):
        self.log.append(("del", self.n))


def test_dead_local_stored_by_the_native_instruction_lives_until_rebound():
    # ``a, b = b, a`` drops a finalizable object's reference mid-way: the
    # second store runs natively; ``a`` is dead (only rebound later) but
    # holds its object until ``a = None``
    def f():
        log = []
        a = _AdvFin(1, log)
        b = _AdvFin(2, log)
        a, b = b, a
        log.append("swapped")
        a = None
        log.append("a none")
        b = None
        return log

    assert assert_same_clean(f) == ("ok", ["swapped", ("del", 2), "a none", ("del", 1)])


def test_discarded_result_with_a_finalizer_is_freed_at_once():
    def f():
        log = []
        lst = [_AdvFin(1, log), _AdvFin(2, log)]
        lst.pop()
        log.append("popped")
        lst.clear()
        log.append("cleared")
        return log

    assert assert_same_clean(f) == ("ok", [("del", 2), "popped", ("del", 1), "cleared"])

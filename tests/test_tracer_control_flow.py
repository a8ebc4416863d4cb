"""Differential tests: loops over constant-length iterables, branches on
Python values, grad-mode ``with`` blocks, and exceptions raised and caught
inside the traced function."""

import pytest
import torch

from conftest import assert_same, compile_counting


def t(*shape, requires_grad=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + 11))
    return x.requires_grad_(requires_grad)


# ---------------------------------------------------------------------------
# loops

def test_for_over_range():
    def f(x):
        for i in range(3):
            x = x * 2 + i
        return x

    assert_same(f, t(3))


def test_for_over_list_of_tensors():
    def f(xs):
        acc = torch.zeros(2)
        for x in xs:
            acc = acc + x
        return acc

    assert_same(f, [t(2), t(3)[:2], t(4)[:2]])


def test_for_over_tensor_rows():
    def f(x):
        rows = []
        for row in x:
            rows.append(row.sum())
        return torch.stack(rows)

    assert_same(f, t(3, 4))


def test_for_over_dict_items_and_tuple():
    def f(x):
        weights = {"a": 1.0, "b": 2.0}
        for name, w in weights.items():
            x = x * w
        for k in ("p", "q"):
            x = x + len(k)
        return x

    assert_same(f, t(3))


def test_for_break_continue():
    def f(x):
        out = x
        for i in range(10):
            if i % 2 == 1:
                continue
            if i > 6:
                break
            out = out + i
        return out, i

    assert_same(f, t(3))


def test_for_else_runs_without_break():
    def f(x, limit):
        for i in range(3):
            if i == limit:
                x = x * 100
                break
        else:
            x = x - 1
        return x

    assert_same(f, t(2), 7)
    assert_same(f, t(2), 1)


def test_while_with_counter():
    def f(x):
        n = 0
        while n < 4:
            x = x.cos()
            n += 1
        return x, n

    assert_same(f, t(3))


def test_while_break_and_else():
    def f(x):
        i = 0
        while i < 5:
            i += 1
            if i == 3:
                break
        else:
            x = x * 0
        j = 0
        while j < 2:
            j += 1
        else:
            x = x + j
        return x

    assert_same(f, t(3))


def test_while_over_shrinking_shape():
    def f(x):
        while x.shape[0] > 1:
            x = x[: x.shape[0] // 2] + x[x.shape[0] // 2:]
        return x

    assert_same(f, t(8, 2))


def test_nested_loops_with_enumerate_zip():
    def f(xs, ws):
        total = 0
        for i, (x, w) in enumerate(zip(xs, ws)):
            for j in range(i + 1):
                total = total + x * w * j
        return total

    assert_same(f, [t(2), t(3)[:2], t(4)[:2]], [1.0, 2.0, 3.0])


# ---------------------------------------------------------------------------
# branches on Python values

def test_if_on_shape():
    def f(x):
        if x.shape[0] > 2:
            return x[:2]
        elif x.dim() == 1:
            return x * 2
        return x

    assert_same(f, t(5))
    assert_same(f, t(2))


def test_if_on_dtype():
    def f(x):
        if x.dtype == torch.float32:
            return x.double()
        if x.is_floating_point():
            return x + 1
        return x.float()

    assert_same(f, t(3))
    assert_same(f, t(3).double())
    assert_same(f, torch.arange(3))


def test_if_none_check():
    def f(x, mask=None):
        if mask is None:
            return x.relu()
        return x.masked_fill(mask, 0.0)

    assert_same(f, t(4))
    assert_same(f, t(4), t(4) > 0)


def test_if_on_flags_and_conditional_expression():
    def f(x, training, mode):
        y = x * 2 if training else x / 2
        if mode == "sum" and not training:
            return y.sum()
        return y

    assert_same(f, t(3), True, "sum")
    assert_same(f, t(3), False, "sum")


def test_if_on_requires_grad_and_grad_mode():
    def f(x):
        if x.requires_grad and torch.is_grad_enabled():
            return x * 3
        return x * 4

    assert_same(f, t(3, requires_grad=True))
    assert_same(f, t(3))


def test_branch_values_recompile_per_flag():
    def f(x, flag):
        return x + 1 if flag else x - 1

    compiled, be = compile_counting(f)
    x = t(3)
    for flag in (True, False, True, False):
        torch.testing.assert_close(compiled(x, flag), f(x, flag))
    assert be.count == 2


def test_boolean_operators_short_circuit():
    def f(x, a, b):
        c = a or b
        d = a and b
        e = (None or []) or "dflt"
        return x * (1 if c else 2), d, e, not a

    assert_same(f, t(2), 0, 5)
    assert_same(f, t(2), 3, 0)


def test_match_statement_on_constant():
    def f(x, kind):
        match kind:
            case "double":
                return x * 2
            case ("scale", k):
                return x * k
            case _:
                return x

    assert_same(f, t(2), "double")
    assert_same(f, t(2), ("scale", 5))


# ---------------------------------------------------------------------------
# grad mode

def test_no_grad_block():
    def f(x):
        with torch.no_grad():
            y = x * 2
        z = x * 3
        return y, z, y.requires_grad, z.requires_grad

    out, _ = assert_same(f, t(3, requires_grad=True))
    assert out[2] is False and out[3] is True


def test_enable_grad_inside_no_grad():
    def f(x):
        with torch.no_grad():
            a = x + 1
            with torch.enable_grad():
                b = x + 2
            c = x + 3
        return a, b, c

    out, _ = assert_same(f, t(2, requires_grad=True))
    assert [o.requires_grad for o in out] == [False, True, False]


def test_set_grad_enabled_with_flag():
    def f(x, flag):
        with torch.set_grad_enabled(flag):
            y = x.exp()
        return y, torch.is_grad_enabled()

    assert_same(f, t(3, requires_grad=True), False)
    assert_same(f, t(3, requires_grad=True), True)


def test_grad_mode_restored_after_call():
    def f(x):
        with torch.no_grad():
            return x * 2

    compiled, be = compile_counting(f)
    out = compiled(t(2, requires_grad=True))
    assert torch.is_grad_enabled()
    assert not out.requires_grad and be.count == 1


def test_compiled_under_outer_no_grad():
    def f(x):
        return x.sin(), torch.is_grad_enabled()

    with torch.no_grad():
        out, _ = assert_same(f, t(3, requires_grad=True))
    assert out[1] is False and not out[0].requires_grad


# ---------------------------------------------------------------------------
# exceptions raised and caught inside the trace

class Custom(Exception):
    pass


def raises_custom(x, bad):
    if bad:
        raise Custom("bad input")
    return x + 1


def test_try_except_else_finally():
    def f(x):
        log = []
        try:
            y = x * 2
        except ValueError:
            log.append("except")
            y = x
        else:
            log.append("else")
        finally:
            log.append("finally")
        return y, log

    assert_same(f, t(3))


def test_keyerror_from_dict_caught():
    def f(x):
        d = {"a": x}
        try:
            v = d["missing"]
        except KeyError as e:
            v = x * 10
            msg = e.args
        return v, msg

    assert_same(f, t(3))


def test_index_error_caught_and_finally_runs():
    def f(x):
        steps = []
        try:
            try:
                [1, 2][5]
            finally:
                steps.append("inner finally")
        except IndexError:
            steps.append("caught")
        return x + len(steps), steps

    assert_same(f, t(2))


def test_custom_exception_from_callee_caught_by_caller():
    def f(x):
        try:
            y = raises_custom(x, True)
        except Custom as e:
            y = x - 1
            why = str(e.args[0])
        return y, raises_custom(x, False), why

    assert_same(f, t(3))


def test_raise_and_catch_with_tuple_of_types():
    def f(x):
        try:
            raise ValueError("v")
        except (TypeError, ValueError) as e:
            kind = type(e).__name__
        return x * 2, kind

    assert_same(f, t(2))


def test_exception_in_loop_continues():
    def f(x):
        total = x
        for k in ["a", "b", "c"]:
            try:
                total = total + {"a": 1, "c": 3}[k]
            except KeyError:
                continue
        return total

    assert_same(f, t(2))


def test_reraise_caught_outside():
    def f(x):
        try:
            try:
                raise Custom("inner")
            except Custom:
                raise
        except Custom:
            return x * 5

    assert_same(f, t(2))


def test_assert_passes_on_shapes():
    def f(x):
        assert x.dim() == 2, "need a matrix"
        return x.T

    assert_same(f, t(2, 3))


def test_match_mapping_pattern():
    def f(x, cfg):
        match cfg:
            case {"act": "relu", **rest}:
                return x.relu(), rest
            case {"scale": s}:
                return x * s, {}
            case [a, b, *others]:
                return x * a * b, {"n": len(others)}
        return x - 1, {}

    assert_same(f, t(3), {"act": "relu", "p": 1})
    assert_same(f, t(3), {"scale": 3})
    assert_same(f, t(3), [2, 3, 4, 5])
    assert_same(f, t(3), "no match")


# ---------------------------------------------------------------------------
# more exception semantics

def test_finally_runs_after_return():
    def f(x):
        try:
            return x + 1
        finally:
            x = x * 2

    assert_same(f, t(2))


def test_zero_division_caught_and_message():
    def f(x):
        try:
            r = 1 / 0
        except ZeroDivisionError as e:
            r = str(e)
        return x + 1, r

    assert_same(f, t(2))


def test_except_base_class_catches_subclass():
    def f(x):
        try:
            {}["k"]
        except LookupError as e:
            k = type(e).__name__
        return x + 1, k

    assert_same(f, t(2))


def test_raise_from_inside_handler():
    def f(x):
        try:
            try:
                raise KeyError("a")
            except KeyError as e:
                raise ValueError("b") from e
        except ValueError as e2:
            m = e2.args[0]
        return x + 1, m

    assert_same(f, t(2))


def test_stop_iteration_from_next_caught():
    def f(x):
        it = iter([x])
        a = next(it)
        try:
            next(it)
        except StopIteration:
            a = a * 3
        return a

    assert_same(f, t(2))


def test_attribute_error_caught():
    def f(x):
        try:
            (1).foo
        except AttributeError:
            return x + 1
        return x

    assert_same(f, t(2))


def test_exception_name_unbound_after_handler():
    def f(x):
        try:
            raise ValueError()
        except ValueError as e:  # noqa: F841
            pass
        try:
            e  # noqa: F821
        except NameError:
            return x + 1
        return x

    assert_same(f, t(2))


def test_finally_in_callee():
    def g(x, log):
        try:
            return x * 2
        finally:
            log.append(1)

    def f(x):
        log = []
        return g(x, log), log

    assert_same(f, t(2))


def test_exception_from_tensor_op_caught():
    def f(x, y):
        try:
            z = x @ y  # shapes do not match
        except RuntimeError:
            z = x * 0
        return z

    assert_same(f, t(2, 3), t(2, 3))


def test_while_true_with_break():
    def f(x):
        i = 0
        while True:
            i += 1
            x = x + 1
            if i >= 3:
                break
        return x

    assert_same(f, t(2))


def test_continue_in_while():
    def f(x):
        i = 0
        while i < 5:
            i += 1
            if i % 2:
                continue
            x = x + i
        return x

    assert_same(f, t(2))


def test_loop_variable_after_loop():
    def f(x):
        for i in range(3):
            pass
        for j in []:  # noqa: B007
            pass
        return x * i

    assert_same(f, t(2))


def test_deleted_local_raises_unbound():
    def f(x):
        y = x + 1
        del y
        try:
            y  # noqa: F821
        except UnboundLocalError:
            return x * 2

    assert_same(f, t(2))


def test_outputs_built_in_loop_keep_order():
    def f(x):
        outs = {}
        for i in range(5):
            outs[f"o{4 - i}"] = x + i
        return outs

    out, _ = assert_same(f, t(2))
    assert list(out) == ["o4", "o3", "o2", "o1", "o0"]

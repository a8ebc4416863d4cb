"""bytegraph.torch_compat: the one place that knows how the supported torch
versions (2.13.x, 2.14.x) differ."""

import torch

from bytegraph import torch_compat


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class _Overrides(_Fn):
    @classmethod
    def apply(cls, x):
        return super().apply(x)


def test_exactly_one_shape_of_function_apply_is_resolved():
    # a Python classmethod (2.13) or the C method itself (2.14): one of the two
    assert (torch_compat.FUNCTION_APPLY_PY is None) != (torch_compat.FUNCTION_APPLY_C is None)


def test_is_autograd_function_apply():
    is_apply = torch_compat.is_autograd_function_apply
    assert is_apply(torch.autograd.Function.__dict__["apply"])
    assert is_apply(torch_compat.bound_apply(_Fn))
    # torch's apply bound to _Fn: a bound Python method on 2.13, a C method on 2.14
    assert is_apply(_Fn.apply)
    assert not is_apply(_Overrides.apply) and not is_apply(_Overrides.apply.__func__)
    assert not is_apply(len) and not is_apply([].append) and not is_apply(None)
    assert not is_apply(torch.autograd.Function.vjp)


def test_bound_apply_is_torchs_apply_even_when_overridden():
    x = torch.ones(2)
    torch.testing.assert_close(torch_compat.bound_apply(_Overrides)(x), x * 2)

"""Differential tests: tensors, torch functions, tensor methods/attributes,
indexing, in-place ops and Python operators on tensors."""

import operator

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, compile_counting


def t(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


# ---------------------------------------------------------------------------
# torch functions and torch.nn.functional

TORCH_FNS = [
    ("add", lambda x, y: torch.add(x, y)),
    ("add_alpha_kw", lambda x, y: torch.add(x, y, alpha=2.5)),
    ("mul_scalar", lambda x, y: torch.mul(x, 3)),
    ("matmul", lambda x, y: torch.matmul(x, y.T)),
    ("cat", lambda x, y: torch.cat([x, y], dim=0)),
    ("stack", lambda x, y: torch.stack((x, y), 1)),
    ("where", lambda x, y: torch.where(x > 0, x, y)),
    ("sum_dim_keepdim", lambda x, y: torch.sum(x, dim=1, keepdim=True) + y),
    ("mean_all", lambda x, y: torch.mean(x) * y),
    ("max_dim_namedtuple", lambda x, y: torch.max(x, dim=1).values + torch.max(y, dim=1)[1]),
    ("clamp", lambda x, y: torch.clamp(x, min=-0.5, max=0.5)),
    ("zeros_like", lambda x, y: torch.zeros_like(x) + y),
    ("ones_shape_from_input", lambda x, y: torch.ones(x.shape[0], 2) * 2),
    ("arange", lambda x, y: x + torch.arange(x.shape[1])),
    ("full", lambda x, y: torch.full((3, 4), 7.0) - x),
    ("einsum", lambda x, y: torch.einsum("ij,kj->ik", x, y)),
    ("chunk", lambda x, y: torch.chunk(x, 2, dim=1)),
    ("split_sizes", lambda x, y: torch.split(y, [1, 3], dim=1)),
    ("sort", lambda x, y: torch.sort(x, dim=1, descending=True)),
    ("topk", lambda x, y: torch.topk(x, 2)),
    ("cumsum", lambda x, y: torch.cumsum(x, 0)),
    ("outer", lambda x, y: torch.outer(x[0], y[1])),
    ("flatten", lambda x, y: torch.flatten(torch.stack([x, y]), 1)),
    ("tensor_from_literal", lambda x, y: x * torch.tensor([1.0, 2.0, 3.0, 4.0])),
    ("logical_and", lambda x, y: torch.logical_and(x > 0, y < 0)),
]


@pytest.mark.parametrize("name,fn", TORCH_FNS, ids=[n for n, _ in TORCH_FNS])
def test_torch_function(name, fn):
    assert_same(fn, t(3, 4), t(3, 4, 1)[..., 0])


FUNCTIONAL = [
    ("relu", lambda x: F.relu(x)),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("softmax", lambda x: F.softmax(x, dim=-1)),
    ("log_softmax", lambda x: F.log_softmax(x, 1)),
    ("leaky_relu", lambda x: F.leaky_relu(x, negative_slope=0.2)),
    ("linear", lambda x: F.linear(x, torch.ones(2, 4), torch.zeros(2))),
    ("normalize", lambda x: F.normalize(x, dim=0)),
    ("pad", lambda x: F.pad(x, (1, 2))),
    ("layer_norm", lambda x: F.layer_norm(x, (4,))),
    ("dropout_eval", lambda x: F.dropout(x, p=0.5, training=False)),
    ("mse_loss", lambda x: F.mse_loss(x, torch.zeros_like(x))),
    ("silu_sigmoid", lambda x: F.silu(x) + torch.sigmoid(x)),
]


@pytest.mark.parametrize("name,fn", FUNCTIONAL, ids=[n for n, _ in FUNCTIONAL])
def test_functional(name, fn):
    assert_same(fn, t(3, 4))


def test_conv2d_and_max_pool():
    def f(x, w):
        y = F.conv2d(x, w, padding=1)
        return F.max_pool2d(y, 2)

    assert_same(f, t(1, 2, 6, 6), t(3, 2, 3, 3))


def test_cross_entropy_with_int_targets():
    def f(logits, target):
        return F.cross_entropy(logits, target)

    compiled, be = compile_counting(f)
    logits = t(3, 4)
    for target in (torch.tensor([0, 2, 1]), torch.tensor([3, 3, 3])):
        # integer targets are graph inputs, not constants baked into the graph
        torch.testing.assert_close(compiled(logits, target), f(logits, target))
    assert be.count == 1


# ---------------------------------------------------------------------------
# tensor methods and attributes

METHODS = [
    ("view", lambda x: x.view(4, 3)),
    ("reshape_neg", lambda x: x.reshape(-1)),
    ("permute", lambda x: x.permute(1, 0).contiguous()),
    ("transpose", lambda x: x.transpose(0, 1)),
    ("unsqueeze_squeeze", lambda x: x.unsqueeze(0).squeeze(0)),
    ("expand", lambda x: x[:, :1].expand(3, 5)),
    ("sum_method_kw", lambda x: x.sum(dim=0)),
    ("mean_tuple_dims", lambda x: x.mean((0, 1))),
    ("max_method_no_dim", lambda x: x.max()),
    ("argmax", lambda x: x.argmax(dim=1)),
    ("to_dtype", lambda x: x.to(torch.float64)),
    ("float_int_roundtrip", lambda x: (x * 10).int().float()),
    ("type_as", lambda x: x.type_as(torch.zeros(1, dtype=torch.float16))),
    ("clone_detach", lambda x: x.clone().detach()),
    ("new_zeros", lambda x: x.new_zeros(2, 2)),
    ("masked_fill", lambda x: x.masked_fill(x < 0, 0.0)),
    ("pow_exp_log", lambda x: x.abs().pow(2).exp().log()),
    ("chained", lambda x: x.sin().cos().tanh().neg()),
    ("norm", lambda x: x.norm(dim=1)),
    ("split_method", lambda x: x.split(2, dim=1)),
    ("unbind", lambda x: x.unbind(0)),
    ("flip_roll", lambda x: x.flip(0).roll(1, 1)),
    ("T_attr", lambda x: x.T),
    ("mT_matmul", lambda x: x @ x.mT),
    ("bool_any", lambda x: (x > 0).any(dim=1)),
]


@pytest.mark.parametrize("name,fn", METHODS, ids=[n for n, _ in METHODS])
def test_tensor_method(name, fn):
    assert_same(fn, t(3, 4))


def test_metadata_attributes_are_constants():
    def f(x):
        return x + 1, x.shape, x.dtype, x.device, x.ndim, x.requires_grad, x.is_floating_point()

    out, _ = assert_same(f, t(2, 3))
    assert out[1] == torch.Size([2, 3]) and type(out[1]) is torch.Size


def test_size_dim_numel():
    def f(x):
        return x * x.size(1), x.size(), x.size(-1), x.dim(), x.numel(), len(x), x.shape[0] + x.shape[-1]

    assert_same(f, t(2, 5))


def test_shape_drives_reshape():
    def f(x):
        b, n = x.shape
        return x.reshape(n, b), x.view(b * n)

    assert_same(f, t(3, 4))


def test_shape_unpack_star():
    def f(x):
        *lead, last = x.shape
        return x.reshape(-1, last).sum(0), lead

    assert_same(f, t(2, 3, 4))


def test_dtype_metadata_compare():
    def f(x, y):
        same = x.dtype == y.dtype
        promoted = torch.promote_types(x.dtype, y.dtype)
        return (x + y).to(promoted), same, promoted, x.dtype.is_floating_point

    assert_same(f, t(3), t(3, dtype=torch.int64))


# ---------------------------------------------------------------------------
# indexing and slicing

INDEXING = [
    ("int", lambda x, i: x[1]),
    ("neg_int", lambda x, i: x[-1]),
    ("two_ints", lambda x, i: x[1, 2]),
    ("slice", lambda x, i: x[1:3]),
    ("slice_step", lambda x, i: x[::2, 1::2]),
    ("neg_slice", lambda x, i: x[:, -2:]),
    ("none", lambda x, i: x[None]),
    ("none_middle", lambda x, i: x[:, None, 0]),
    ("ellipsis", lambda x, i: x[..., 0]),
    ("ellipsis_none", lambda x, i: x[..., None, 1:]),
    ("int_tensor", lambda x, i: x[i]),
    ("bool_mask_where", lambda x, i: torch.where(x > 0, x, torch.zeros_like(x))[i]),
    ("tuple_index_var", lambda x, i: x[(slice(0, 2), 1)]),
    ("list_of_ints", lambda x, i: x[[0, 2]]),
    ("index_select", lambda x, i: x.index_select(1, i)),
    ("gather", lambda x, i: x.gather(0, torch.zeros(1, 4, dtype=torch.long))),
]


@pytest.mark.parametrize("name,fn", INDEXING, ids=[n for n, _ in INDEXING])
def test_indexing(name, fn):
    assert_same(fn, t(3, 4), torch.tensor([2, 0]))


def test_computed_slice_bounds():
    def f(x):
        n = x.shape[0] // 2
        return x[:n], x[n:], x[slice(1, None)]

    assert_same(f, t(6, 2))


def test_slice_with_variables_from_range():
    def f(x):
        return [x[i:i + 2] for i in range(0, x.shape[0], 2)]

    assert_same(f, t(6))


# ---------------------------------------------------------------------------
# in-place operations on inputs and on new tensors

def test_inplace_add_on_input():
    def f(x, y):
        x.add_(y)
        return x * 2

    assert_same(f, t(3), t(3, 1)[:, 0])


def test_inplace_returns_same_object():
    def f(x):
        y = x.mul_(3)
        return y, y is x

    out, _ = assert_same(f, t(4))
    assert out[1] is True


def test_setitem_int_on_input():
    def f(x):
        x[0] = 1
        return x.sum()

    assert_same(f, t(3, 2))


def test_setitem_slice_tensor_value():
    def f(x, y):
        x[:, 1:] = y
        x[..., 0] *= 2
        return x

    assert_same(f, t(3, 3), t(3, 2))


def test_setitem_mask_on_new_tensor():
    def f(x):
        y = x.clone()
        y[y < 0] = 0.0
        return y

    assert_same(f, t(4, 4))


def test_inplace_on_new_tensor_does_not_touch_input():
    def f(x):
        y = x + 0
        y.sub_(1).div_(2)
        y.clamp_(min=0)
        return y

    assert_same(f, t(5))


def test_augmented_assign_on_tensor():
    def f(x, y):
        z = x
        z += y       # in place on x: eager mutates the input
        z *= 2
        z -= 1
        return z

    assert_same(f, t(3), t(3, 1)[:, 0])


def test_augmented_assign_rebinds_scalar_tensor_op():
    def f(x):
        s = 0
        for i in range(3):
            s = s + x * i
        return s

    assert_same(f, t(2))


# ---------------------------------------------------------------------------
# Python operators on tensors and scalars

BINOPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
          operator.mod, operator.pow, operator.matmul]


@pytest.mark.parametrize("op", BINOPS, ids=lambda o: o.__name__)
def test_binary_operator_tensor_tensor(op):
    def f(x, y):
        return op(x, y)

    x = t(3, 3)
    assert_same(f, x, t(3, 3, 1)[..., 0].abs() + 0.5)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow],
                         ids=lambda o: o.__name__)
def test_binary_operator_scalar_both_sides(op):
    def f(x):
        return op(x.abs() + 1, 2), op(3, x.abs() + 1), op(x, 0.5)

    assert_same(f, t(4))


def test_bitwise_and_shift_ops_on_int_tensors():
    def f(a, b):
        return a & b, a | b, a ^ b, ~a, a << 1, a >> 1

    assert_same(f, t(6, dtype=torch.int64), t(7, dtype=torch.int64)[:6])


def test_comparisons_and_unary():
    def f(x, y):
        return x < y, x <= 0, x == y, x != 0.5, -x, +x, abs(x), (x > y) & (y > 0)

    assert_same(f, t(5), t(5, 1)[:, 0])


def test_scalar_arithmetic_mixes_with_shapes():
    def f(x):
        scale = 1.0 / (x.shape[-1] ** 0.5)
        return x * scale + x.numel() % 7

    assert_same(f, t(2, 4))


def test_int_and_bool_dtypes_flow():
    def f(x):
        m = x > 0
        return m.sum(), m.float().mean(), (x.long() + 1).dtype

    assert_same(f, t(10))


def test_requires_grad_input_result_flag():
    def f(x):
        return (x * 2).sum(), x.requires_grad

    out, _ = assert_same(f, t(3).requires_grad_())
    assert out[0].requires_grad and out[1] is True


# ---------------------------------------------------------------------------
# more metadata, views, identities

MORE_TENSOR_CASES = [
    ("shape_arithmetic", lambda x: (x + 1, x.shape + (1,), x.shape[1:], x.shape == (2, 3), type(x.shape[1:]))),
    ("size_passed_to_view", lambda x: x.view(x.size()[1], x.size(0))),
    ("len_of_shape", lambda x: x * len(x.shape)),
    ("is_leaf_and_grad_none", lambda x: (x + 1, x.is_leaf, x.grad is None)),
    ("return_metadata_objects", lambda x: (x + 1, x.dtype, x.size(), x.device, x.layout)),
    ("negative_index_ellipsis_none", lambda x: x[-1, ..., None]),
    ("isinstance_parameter_and_type_name", lambda x: (x + 1, isinstance(x, torch.nn.Parameter), type(x).__name__)),
    ("shape_to_list_tuple", lambda x: (x + 1, list(x.shape), tuple(x.shape), [*x.shape])),
    ("negative_size_and_stride", lambda x: (x.size(-2) * x, x.stride(), x.is_contiguous())),
    ("bool_tensor_ops", lambda x: ((x > 0) | (x < -1), (x > 0) ^ True, ~(x > 0))),
    ("where_with_scalars", lambda x: torch.where(x > 0, 1.0, 0.0)),
    ("new_ones_reversed_shape", lambda x: x.new_ones(x.shape[::-1])),
    ("rows_by_negative_range", lambda x: [x[i] for i in range(-1, -3, -1)]),
    ("slice_object_negative_stop", lambda x: x[slice(None, -1)]),
    ("tensor_dtype_constructors", lambda x: (torch.zeros(2, dtype=x.dtype, device=x.device), x.to(torch.int32))),
    ("unbind_unpack", lambda x: (lambda a, b: a * b)(*x)),
    ("tensor_format_type", lambda x: (x.double(), x.type(), x.element_size())),
]


@pytest.mark.parametrize("name,fn", MORE_TENSOR_CASES, ids=[n for n, _ in MORE_TENSOR_CASES])
def test_tensor_more(name, fn):
    assert_same(fn, t(2, 3))


def test_inplace_result_returned_with_input():
    def f(x):
        y = x.add_(1)
        return y, x

    out, _ = assert_same(f, t(2))
    assert out[0] is out[1]


def test_views_of_input_are_new_objects():
    def f(x):
        return x.view(-1), x[0], x

    assert_same(f, t(2, 3))


def test_input_inside_returned_container():
    def f(x, y):
        return [x, (y, x)], y * 2

    assert_same(f, t(2), t(3))


def test_inplace_on_requires_grad_input_under_no_grad():
    def f(x):
        with torch.no_grad():
            x.mul_(2)
        return x.sum()

    assert_same(f, t(3).requires_grad_())


def test_detach_drops_requires_grad():
    def f(x):
        return x.detach() * 2, (x * 2).requires_grad

    out, _ = assert_same(f, t(3).requires_grad_())
    assert not out[0].requires_grad and out[1] is True


def test_inplace_through_view_of_input():
    def f(x):
        row = x[1]
        row.add_(10)
        x[:, 0].zero_()
        return x

    assert_same(f, t(3, 2))


def test_setitem_with_tensor_index_and_value():
    def f(x, idx, v):
        x[idx] = v
        return x

    # one call: fresh random indices could repeat (index_put_ order is unspecified)
    assert_same(f, t(4, 2), torch.tensor([0, 3]), t(2, 2), calls=1)


def test_int_tensor_floor_div_and_mod():
    def f(a):
        return a // 2, a % 3, a / 2, -a

    assert_same(f, t(6, dtype=torch.int64))

"""Layer reuse against programs built to make it wrong (bytegraph/layer_reuse.py).

Each test is differential: the compiled model equals the eager one (values,
gradients), and the number of layers served by a recorded block is
asserted, so a layer that differs is traced on its own while the others
are still reused.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import bytegraph

from conftest import compile_counting


from test_layer_reuse import Block, Stack


def _model(block=Block, n=6):
    torch.manual_seed(0)
    return Stack(n, block=block).eval()


def _same_compiled(model, *args, reused, backend="eager"):
    """Compiled equals eager on ``args`` (twice: the second call runs the cache entry)."""
    cf, _ = compile_counting(model, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(cf(*args), model(*args))
    assert bytegraph.stats().layers_reused == reused


SCALE_BY_ID = {}


class ScaledById(Block):
    """Reads a per-layer number keyed by ``id(self)``: the identity is data."""

    def forward(self, x):
        return super().forward(x) * SCALE_BY_ID[id(self)]


@torch.no_grad()
def test_a_block_using_its_own_identity_is_not_reused():
    model = _model(ScaledById)
    for i, layer in enumerate(model.layers):
        SCALE_BY_ID[id(layer)] = float(i)
    _same_compiled(model, torch.randn(3, 16), reused=0)


class ScaledByIdOfPart(Block):
    def forward(self, x):
        return super().forward(x) * SCALE_BY_ID[id(self.up)]


@torch.no_grad()
def test_a_block_using_the_identity_of_a_part_is_not_reused():
    model = _model(ScaledByIdOfPart)
    for i, layer in enumerate(model.layers):
        SCALE_BY_ID[id(layer.up)] = float(i)
    _same_compiled(model, torch.randn(3, 16), reused=0)


def test_inference_tensors_as_arguments():
    # inference tensors keep no version counter: a write to them cannot be
    # told, so such blocks are traced as usual (it used to be an internal error)
    model = _model()
    with torch.inference_mode():
        x = torch.randn(3, 16)
        cf, be = compile_counting(model)
        torch.testing.assert_close(cf(x), model(x))
    assert be.count == 1 and bytegraph.stats().layers_reused == 0


class Divided(Block):
    def forward(self, x, gain=1.0):
        return super().forward(x) / gain


class EachLayer(Stack):
    """Every layer applied to the same input, with its own constant argument."""

    def forward(self, x, gains):
        return [layer(x, gain) for layer, gain in zip(self.layers, gains)]


@torch.no_grad()
def test_a_float_argument_matches_by_its_bits():
    # 0.0 == -0.0, but x / -0.0 is -inf: layer 2 is its own variant
    model = EachLayer(6, block=Divided).eval()
    gains = (0.0, 1.0, -0.0, 1.0, 1.0, 1.0)
    cf, _ = compile_counting(model)
    x = torch.randn(3, 16)
    for a, b in zip(cf(x, gains), model(x, gains)):
        torch.testing.assert_close(a, b)
    assert bytegraph.stats().layers_reused == 3



def _lowered(grad: bool):
    from bytegraph.block_graphs import lower_for_backend
    from torch._higher_order_ops.invoke_subgraph import invoke_subgraph
    bytegraph.reset()
    cf, be = compile_counting(_model())
    with torch.set_grad_enabled(grad):
        cf(torch.randn(3, 16))
    assert bytegraph.stats().layers_reused == (4 if grad else 5)
    lowered = lower_for_backend(be.graphs[0], "inductor")
    return sum(1 for n in lowered.graph.nodes if n.target is invoke_subgraph), lowered.meta


def test_inductor_training_graphs_call_the_blocks_inline_unless_switched_on(monkeypatch):
    # Inductor's invoke_subgraph backward (torch 2.13) computes wrong gradients
    # (tests/test_layer_reuse_inductor.py): by default training graphs get the
    # blocks' code inline; switched on, they share one subgraph compiled with
    # buffer reuse and donated buffers off; inference graphs always share it
    assert _lowered(grad=True)[0] == 0
    calls, meta = _lowered(grad=False)
    assert calls == 6 and "inductor_config_patches" not in meta
    monkeypatch.setattr(bytegraph.config, "reuse_blocks_inductor_training", True)
    calls, meta = _lowered(grad=True)
    assert calls == 6 and meta["inductor_config_patches"] == {"allow_buffer_reuse": False, "inplace_buffers": False}
    assert meta["functorch_config_patches"] == {"donated_buffer": False}


# -- random numbers: decided by the operators' tags --------------------------
#
# A block that draws random numbers is traced layer by layer, not reused; one
# whose random operators are switched off (or that has none, whatever its
# operators are called) is still reused.  Differential against eager under
# the same seed: outputs, gradients and the RNG state after the call.

def _attention(h, dropout_p):
    q = h.view(3, 2, 8).transpose(0, 1)
    return F.scaled_dot_product_attention(q, q, q, dropout_p=dropout_p).transpose(0, 1).reshape(3, 16)


#: name -> what the block does to its centred output (about half of it negative)
RANDOM_TAILS = {
    "sdpa_dropout": lambda m, h: _attention(h, 0.3),
    "dropout_training": lambda m, h: F.dropout(h, p=0.5, training=True),
    "dropout_module_training": lambda m, h: m.drop(h),
    "rrelu_training": lambda m, h: F.rrelu(h, training=True),
    "rand_like": lambda m, h: h + torch.rand_like(h),
    "gumbel_softmax": lambda m, h: F.gumbel_softmax(h, tau=0.5),
    "bernoulli_method": lambda m, h: h * h.detach().sigmoid().bernoulli(),
}

#: the same operators switched off, and deterministic ones with a random-sounding name: reused
DETERMINISTIC_TAILS = {
    "sdpa_no_dropout": lambda m, h: _attention(h, 0.0),
    "dropout_eval": lambda m, h: F.dropout(h, p=0.5, training=False),
    "dropout_p0": lambda m, h: F.dropout(h, p=0.0, training=True),
    "dropout_module_eval": lambda m, h: m.drop(h),
    "rrelu_eval": lambda m, h: F.rrelu(h),
    "alpha_dropout_default": lambda m, h: F.alpha_dropout(h, 0.5),     # training=False by default
    "normalize": lambda m, h: F.normalize(h, dim=-1),                   # "normal" in its name
    "poisson_nll_loss": lambda m, h: h + F.poisson_nll_loss(h, h.abs(), reduction="none").tanh(),
}


class Tailed(Block):
    """Block's operations, then ``tail`` (a class attribute set per test)."""

    tail = None

    def __init__(self, d=16):
        super().__init__(d)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, gain=1.0):
        out = super().forward(x, gain)
        return out + type(self).tail(self, out - out.mean(-1, keepdim=True))


def _tailed_model(tail, training):
    block = type(f"Tailed_{tail.__name__}", (Tailed,), {"tail": staticmethod(tail)})
    return _model(block).train(training)


def _step(fn, model, x, seed, grad):
    """``fn(x)`` (and its backward) after ``torch.manual_seed(seed)``: the
    output, the parameters' gradients, and the RNG state afterwards."""
    torch.manual_seed(seed)
    with torch.set_grad_enabled(grad):
        out = fn(x)
    grads = []
    if grad:
        out.sum().backward()
        grads = [p.grad for p in model.parameters()]
        model.zero_grad(set_to_none=True)
    return out.detach(), grads, torch.get_rng_state()


def _same_as_eager(model, backend, grad, seeds=(5, 6)):
    """Compiled against eager, seed by seed (the second call runs the cache
    entry): equal outputs, gradients and RNG states; the outputs of the
    seeds.  Everything ran in one graph (no break, no eager fallback)."""
    x = torch.randn(3, 16)
    cf, be = compile_counting(model, backend=backend)
    tol = dict(rtol=0, atol=0) if backend == "eager" else dict(rtol=1e-5, atol=1e-5)
    outs = []
    for seed in seeds:
        out, grads, rng = _step(model, model, x, seed, grad)
        c_out, c_grads, c_rng = _step(cf, model, x, seed, grad)
        torch.testing.assert_close(c_out, out, **tol)
        assert len(c_grads) == len(grads)
        for a, b in zip(c_grads, grads):
            torch.testing.assert_close(a, b, **tol)
        assert torch.equal(c_rng, rng), "the compiled call left the RNG elsewhere than eager"
        outs.append(c_out)
    stats = bytegraph.stats()
    assert be.count == 1 and stats.graph_breaks == 0 and stats.eager_fallbacks == 0
    return outs, stats.layers_reused


@pytest.mark.parametrize("backend,grad", [("eager", False), ("aot_eager", True)])
@pytest.mark.parametrize("name", list(RANDOM_TAILS))
def test_a_block_drawing_random_numbers_is_traced_per_layer(name, backend, grad):
    model = _tailed_model(RANDOM_TAILS[name], training=True)
    (first, second), reused = _same_as_eager(model, backend, grad)
    assert not torch.equal(first, second), "the block was meant to draw random numbers"
    assert reused == 0, "a block drawing random numbers was reused"


@pytest.mark.parametrize("backend,grad", [("eager", False), ("aot_eager", True)])
@pytest.mark.parametrize("name", list(DETERMINISTIC_TAILS))
def test_a_block_with_its_randomness_switched_off_is_still_reused(name, backend, grad):
    model = _tailed_model(DETERMINISTIC_TAILS[name], training=name == "dropout_p0")
    (first, second), reused = _same_as_eager(model, backend, grad)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    # with grad, the first layer's input (no grad) and the others' are two variants
    assert reused == (4 if grad else 5), "a deterministic block must still be reused"


def test_random_operators_are_told_by_their_tags_and_switches():
    from bytegraph.layer_reuse import draws_random
    aten = torch.ops.aten
    x, q = torch.ones(2), torch.ones(1, 2, 3, 8)
    assert draws_random(aten.randn_like.default, (x,)) and draws_random(aten.bernoulli.p, (x, 0.5))
    assert draws_random(aten.rrelu_with_noise.default, (x, x, 0.1, 0.3, True))
    assert not draws_random(aten.rrelu_with_noise.default, (x, x))              # training=False by default
    assert draws_random(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q, 0.1))
    assert not draws_random(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q))
    assert not draws_random(aten.native_dropout.default, (x, 0.5, False))
    assert draws_random(aten.native_dropout.default, (x, 0.5, None))             # train=None is on
    assert draws_random(aten.native_dropout.default, (x, 0.0, True))             # p=0 still draws the mask
    assert not draws_random(aten.add.Tensor, (x, x)) and draws_random(aten.normal.Tensor_float, (x,))

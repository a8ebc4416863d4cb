"""Layer reuse against programs built to make it wrong (bytegraph/layer_reuse.py).

Each test is differential: the compiled model equals the eager one (values,
gradients), and the number of layers served by a recorded block is
asserted, so a layer that differs is traced on its own while the others
are still reused.
"""

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


def test_inductor_training_graphs_share_the_blocks_without_buffer_reuse(monkeypatch):
    # Inductor's buffer reuse (torch 2.13) clobbered a tensor that a block's
    # backward still read (tests/test_layer_reuse_inductor.py): training graphs
    # share one subgraph and compile with it off; inference graphs keep it
    calls, meta = _lowered(grad=True)
    assert calls == 6 and meta["inductor_config_patches"] == {"allow_buffer_reuse": False}
    calls, meta = _lowered(grad=False)
    assert calls == 6 and "inductor_config_patches" not in meta
    monkeypatch.setattr(bytegraph.config, "reuse_blocks_inductor_training", False)
    assert _lowered(grad=True)[0] == 0      # the switch: the blocks' code inline

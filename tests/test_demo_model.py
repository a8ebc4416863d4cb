"""The bundled demo transformer: eager sanity checks and whole-model capture."""

import torch

import bytegraph
from examples import demo_model
from examples.demo_model import Config


def _counting_backend(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


# ---------------------------------------------------------------------------
# The model itself (plain eager PyTorch).
# ---------------------------------------------------------------------------


def test_output_shape_and_finite():
    model_fn, params, x = demo_model.build()
    y = model_fn(params, x)
    cfg = Config()
    assert y.shape == (cfg.batch, cfg.seq_len, cfg.d_model)
    assert torch.isfinite(y).all()


def test_init_is_deterministic():
    _, p1, x1 = demo_model.build()
    _, p2, x2 = demo_model.build()
    torch.testing.assert_close(x1, x2, rtol=0, atol=0)
    torch.testing.assert_close(p1, p2, rtol=0, atol=0)
    assert len(p1["layers"]) == Config().n_layers


def test_attention_is_causal():
    model_fn, params, x = demo_model.build()
    y = model_fn(params, x)
    x2 = x.clone()
    x2[:, -1] += 1.0  # perturb only the last position
    y2 = model_fn(params, x2)
    torch.testing.assert_close(y2[:, :-1], y[:, :-1])
    assert not torch.allclose(y2[:, -1], y[:, -1])


# ---------------------------------------------------------------------------
# Capture with bytegraph.
# ---------------------------------------------------------------------------


def test_compile_eager_backend_matches():
    bytegraph.reset()
    model_fn, params, x = demo_model.build()
    expected = model_fn(params, x)
    compiled = bytegraph.compile(model_fn, backend="eager")
    torch.testing.assert_close(compiled(params, x), expected)
    # A second call goes through the cache and still agrees.
    torch.testing.assert_close(compiled(params, x), expected)


def test_fullgraph_single_graph():
    bytegraph.reset()
    model_fn, params, x = demo_model.build()
    graphs = []
    compiled = bytegraph.compile(
        model_fn, backend=_counting_backend(graphs), fullgraph=True
    )
    expected = model_fn(params, x)
    torch.testing.assert_close(compiled(params, x), expected)
    assert len(graphs) == 1
    assert isinstance(graphs[0], torch.fx.GraphModule)

    # Same shapes and structure: no recompilation.
    torch.testing.assert_close(compiled(params, x), expected)
    assert len(graphs) == 1

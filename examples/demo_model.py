"""A small decoder-style transformer written as plain functions.

Nothing here uses ``torch.nn.Module``: the model is a tree of closures built by
factory functions, and the weights live in ordinary Python containers (a dict
of tensors per layer, a list of those dicts for the stack). That makes it a
good workload for a bytecode-level graph capturer: tracing it exercises
closures (``LOAD_DEREF``), inlined user functions, dict/list subscripts,
``for`` loops over Python lists, tensor attributes such as ``x.shape``,
``torch.nn.functional`` calls, the ``@`` operator and residual additions.

The traced code deliberately avoids what a young tracer may not handle yet:
no control flow on tensor *values*, no printing or logging, no generators,
no ``try``/``except`` and no functions defined inside the traced frames.
Every branch is on a Python value fixed when the model is built.

Usage::

    from examples.demo_model import build
    model_fn, params, x = build()
    y = model_fn(params, x)          # (batch, seq_len, d_model)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "Config",
    "build",
    "init_params",
    "make_attention",
    "make_block",
    "make_input",
    "make_mlp",
    "make_model",
]


@dataclass(frozen=True)
class Config:
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 3
    d_ff: int = 256
    seq_len: int = 32
    batch: int = 4
    eps: float = 1e-5
    act: str = "gelu"
    causal: bool = True
    seed: int = 0


# Activation functions the MLP factory knows about. The factory resolves the
# name once, so the traced code only ever sees a plain function object held in
# a closure cell.
_ACTIVATIONS = {
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
}


# ---------------------------------------------------------------------------
# Small module-level helpers: called (and so inlined) from the closures below.
# ---------------------------------------------------------------------------


def linear(x, w, b):
    """Affine map with the weight stored as (in_features, out_features)."""
    return x @ w + b


def split_heads(t, n_heads):
    """(batch, seq, d_model) -> (batch, n_heads, seq, head_dim)."""
    batch, seq, width = t.shape
    return t.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(t):
    """(batch, n_heads, seq, head_dim) -> (batch, seq, d_model)."""
    batch, n_heads, seq, head_dim = t.shape
    return t.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)


def layer_norm(x, p, prefix, eps):
    return F.layer_norm(x, (x.shape[-1],), p[prefix + "_w"], p[prefix + "_b"], eps)


# ---------------------------------------------------------------------------
# Factories. Each returns a nested function that closes over Python constants.
# ---------------------------------------------------------------------------


def make_attention(n_heads, d_model, causal=True):
    """Multi-head self-attention closing over ``n_heads``, its scale and a flag."""
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    scale = 1.0 / math.sqrt(d_model // n_heads)
    masked_value = float("-inf")

    def attention(p, x):
        seq = x.shape[1]
        q = split_heads(linear(x, p["wq"], p["bq"]), n_heads)
        k = split_heads(linear(x, p["wk"], p["bk"]), n_heads)
        v = split_heads(linear(x, p["wv"], p["bv"]), n_heads)
        scores = (q @ k.transpose(-2, -1)) * scale
        if causal:
            future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, masked_value)
        weights = F.softmax(scores, dim=-1)
        return linear(merge_heads(weights @ v), p["wo"], p["bo"])

    return attention


def make_mlp(act="gelu"):
    """Position-wise feed-forward network closing over its activation."""
    act_fn = _ACTIVATIONS[act]

    def mlp(p, x):
        hidden = act_fn(linear(x, p["w1"], p["b1"]))
        return linear(hidden, p["w2"], p["b2"])

    return mlp


def make_block(attention, mlp, eps=1e-5):
    """Pre-norm transformer block built from an attention and an MLP closure."""

    def block(p, x):
        x = x + attention(p, layer_norm(x, p, "ln1", eps))
        x = x + mlp(p, layer_norm(x, p, "ln2", eps))
        return x

    return block


def make_model(cfg: Config | None = None):
    """Return ``model(params, x)`` for the given configuration.

    ``params`` is the dict produced by :func:`init_params`; ``x`` is a float
    tensor of shape (batch, seq, d_model) with ``seq <= cfg.seq_len``.
    """
    cfg = cfg or Config()
    block = make_block(
        make_attention(cfg.n_heads, cfg.d_model, cfg.causal),
        make_mlp(cfg.act),
        cfg.eps,
    )
    eps = cfg.eps

    def model(params, x):
        h = x + params["pos"][: x.shape[1]]
        for layer in params["layers"]:
            h = block(layer, h)
        h = layer_norm(h, params, "ln_f", eps)
        return h @ params["w_out"]

    return model


# ---------------------------------------------------------------------------
# Deterministic parameters and inputs.
# ---------------------------------------------------------------------------


def init_params(cfg: Config | None = None):
    """Build the parameter tree with a fixed seed (GPT-2 style small init)."""
    cfg = cfg or Config()
    gen = torch.Generator().manual_seed(cfg.seed)
    d, f = cfg.d_model, cfg.d_ff

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    def zeros(*shape):
        return torch.zeros(*shape)

    def ones(*shape):
        return torch.ones(*shape)

    # Residual projections are scaled down with depth, as in GPT-2.
    resid_std = 0.02 / math.sqrt(2 * cfg.n_layers)
    layers = []
    for _ in range(cfg.n_layers):
        layers.append(
            {
                "ln1_w": ones(d),
                "ln1_b": zeros(d),
                "wq": normal(d, d),
                "bq": zeros(d),
                "wk": normal(d, d),
                "bk": zeros(d),
                "wv": normal(d, d),
                "bv": zeros(d),
                "wo": normal(d, d, std=resid_std),
                "bo": zeros(d),
                "ln2_w": ones(d),
                "ln2_b": zeros(d),
                "w1": normal(d, f),
                "b1": zeros(f),
                "w2": normal(f, d, std=resid_std),
                "b2": zeros(d),
            }
        )
    return {
        "pos": normal(cfg.seq_len, d),
        "layers": layers,
        "ln_f_w": ones(d),
        "ln_f_b": zeros(d),
        "w_out": normal(d, d, std=1.0 / math.sqrt(d)),
    }


def make_input(cfg: Config | None = None, seed: int = 1):
    cfg = cfg or Config()
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(cfg.batch, cfg.seq_len, cfg.d_model, generator=gen)


def build(cfg: Config | None = None):
    """Return ``(model_fn, params, x)`` ready to call as ``model_fn(params, x)``."""
    cfg = cfg or Config()
    return make_model(cfg), init_params(cfg), make_input(cfg)

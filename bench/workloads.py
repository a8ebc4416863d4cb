"""The benchmark workloads.

Each workload is a builder that returns a :class:`Case`: the callable to
compile (a plain function or an ``nn.Module``) and the arguments to call it
with.  Builders seed torch first, so the torch.compile worker and the bytegraph
worker of one workload see identical weights and inputs.

Workloads are grouped by what they stress:

* ``pointwise_N`` / ``ints_N``: tiny element-wise work, so the time is almost
  all frontend overhead (argument handling, guard checks, graph call);
* ``mlp``, ``cnn``: small ``nn.Module`` models;
* ``gpt_closures``: a GPT block stack built from closures by factory
  functions (no ``nn.Module``);
* ``layer_loop_tensors`` / ``layer_loop_modules``: a Python ``for`` loop over
  a list of weight tensors / of ``nn.Linear`` modules;
* ``graph_breaks``: a function with two breaks both frontends must take
  (a ``print`` to a devnull stream and a call to ``zlib.crc32``);
* ``hf_*``: Hugging Face ``transformers`` models from tiny configs with random
  weights (no hub access; ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import zlib
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Case:
    """What a worker compiles and calls: ``fn(*args, **kwargs)``."""

    fn: Callable
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def is_module(self) -> bool:
        return isinstance(self.fn, nn.Module)


@dataclasses.dataclass
class Workload:
    name: str
    builder: Callable[[], Case]
    description: str
    #: needs the optional ``transformers`` package
    needs_transformers: bool = False
    #: large enough for an inductor speedup to mean something
    inductor: bool = False
    #: part of the compile-time-at-scale plan (``make bench-scale``, issue 17)
    scale: bool = False

    def build(self) -> Case:
        torch.manual_seed(0)
        case = self.builder()
        if isinstance(case.fn, nn.Module):
            case.fn.eval()
        return case


WORKLOADS: Dict[str, Workload] = {}


def _register(name: str, builder: Callable[[], Case], description: str, **flags) -> None:
    WORKLOADS[name] = Workload(name, builder, description, **flags)


def workload(name: str, description: str, **flags):
    def deco(builder):
        _register(name, builder, description, **flags)
        return builder
    return deco


# ---------------------------------------------------------------------------
# overhead-bound: tiny pointwise work on N tensors / N ints


def pointwise(*xs):
    acc = torch.sin(xs[0])
    for x in xs[1:]:
        acc = acc + x * 0.5
    return torch.relu(acc) - 1.0


def _pointwise_case(n: int) -> Callable[[], Case]:
    def build() -> Case:
        return Case(pointwise, tuple(torch.randn(8) for _ in range(n)))
    return build


for _n in (1, 4, 16, 64):
    _register(f"pointwise_{_n}", _pointwise_case(_n), f"sin/add/mul/relu over {_n} tensor input(s) of 8 floats")


def scale_by_ints(x, *ns):
    total = 0
    for n in ns:
        total = total + n
    return x * total + len(ns)


def _ints_case(n: int) -> Callable[[], Case]:
    def build() -> Case:
        return Case(scale_by_ints, (torch.randn(8),) + tuple(range(1, n + 1)))
    return build


for _n in (1, 8, 64):
    _register(f"ints_{_n}", _ints_case(_n), f"one 8-float tensor plus {_n} Python int input(s)")


# ---------------------------------------------------------------------------
# small nn.Module models


class MLP(nn.Module):
    def __init__(self, d_in: int = 128, d_hidden: int = 512, d_out: int = 64, depth: int = 3):
        super().__init__()
        dims = [d_in] + [d_hidden] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norm = nn.LayerNorm(d_hidden)
        self.head = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        for layer in self.hidden:
            x = F.gelu(layer(x))
        return self.head(self.norm(x))


@workload("mlp", "nn.Module: 3 Linear+GELU layers (128->512), LayerNorm, head; batch 64", inductor=True)
def _mlp() -> Case:
    return Case(MLP(), (torch.randn(64, 128),))


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        )
        self.classifier = nn.Linear(64, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier(x)


@workload("cnn", "nn.Module: 3 conv blocks (BatchNorm, ReLU, MaxPool), pool, Linear; 8x3x32x32", inductor=True)
def _cnn() -> Case:
    return Case(SmallCNN(), (torch.randn(8, 3, 32, 32),))


# ---------------------------------------------------------------------------
# a GPT block stack built from closures (no nn.Module anywhere)


def _param(*shape, scale: float = 0.02) -> torch.Tensor:
    return torch.randn(*shape) * scale


def linear_factory(d_in: int, d_out: int) -> Callable:
    weight, bias = _param(d_out, d_in), torch.zeros(d_out)

    def apply(x):
        return F.linear(x, weight, bias)
    return apply


def norm_factory(dim: int, eps: float = 1e-5) -> Callable:
    gain, shift = torch.ones(dim), torch.zeros(dim)

    def apply(x):
        return F.layer_norm(x, (dim,), gain, shift, eps)
    return apply


def attention_factory(dim: int, heads: int) -> Callable:
    qkv = linear_factory(dim, 3 * dim)
    proj = linear_factory(dim, dim)
    head_dim = dim // heads
    scale = 1.0 / math.sqrt(head_dim)

    def split_heads(t, batch, seq):
        return t.view(batch, seq, heads, head_dim).transpose(1, 2)

    def apply(x):
        batch, seq, _ = x.shape
        q, k, v = qkv(x).chunk(3, dim=-1)
        q, k, v = (split_heads(t, batch, seq) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * scale
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        mixed = scores.softmax(dim=-1) @ v
        return proj(mixed.transpose(1, 2).reshape(batch, seq, dim))
    return apply


def feed_forward_factory(dim: int, expansion: int = 4) -> Callable:
    up = linear_factory(dim, expansion * dim)
    down = linear_factory(expansion * dim, dim)

    def apply(x):
        return down(F.gelu(up(x)))
    return apply


def block_factory(dim: int, heads: int) -> Callable:
    ln1, attn = norm_factory(dim), attention_factory(dim, heads)
    ln2, ffn = norm_factory(dim), feed_forward_factory(dim)

    def apply(x):
        x = x + attn(ln1(x))
        return x + ffn(ln2(x))
    return apply


def gpt_factory(dim: int = 64, heads: int = 4, layers: int = 4) -> Callable:
    blocks = [block_factory(dim, heads) for _ in range(layers)]
    final_norm = norm_factory(dim)

    def gpt(x):
        for block in blocks:
            x = block(x)
        return final_norm(x)
    return gpt


@workload("gpt_closures", "4 GPT blocks (d=64, 4 heads) from closure factories; 4x32 tokens", inductor=True)
def _gpt_closures() -> Case:
    return Case(gpt_factory(), (torch.randn(4, 32, 64),))


# ---------------------------------------------------------------------------
# Python loops over layers


def tanh_stack(x, layers):
    for weight, bias in layers:
        x = torch.tanh(x @ weight + bias)
    return x


@workload("layer_loop_tensors", "for-loop over a list of 16 (weight, bias) tensor pairs passed as an argument")
def _layer_loop_tensors() -> Case:
    layers = [(_param(32, 32, scale=0.2), _param(32)) for _ in range(16)]
    return Case(tanh_stack, (torch.randn(16, 32), layers))


def _linear_loop_fn(layers: List[nn.Linear]) -> Callable:
    def run_layers(x):
        for layer in layers:
            x = F.relu(layer(x))
        return x
    return run_layers


@workload("layer_loop_modules", "function looping over a closed-over list of 16 nn.Linear(32, 32)")
def _layer_loop_modules() -> Case:
    layers = [nn.Linear(32, 32) for _ in range(16)]
    return Case(_linear_loop_fn(layers), (torch.randn(16, 32),))


# ---------------------------------------------------------------------------
# two graph breaks both frontends take


_DEVNULL = open(os.devnull, "w")


def with_two_breaks(x):
    y = torch.sin(x) * 2.0
    print("between graphs", file=_DEVNULL)        # break 1: print
    y = torch.cos(y) + x
    tag = zlib.crc32(b"bytegraph")                  # break 2: a C function from outside torch
    return torch.relu(y) + (tag & 7)


@workload("graph_breaks", "pointwise code split by print(file=devnull) and zlib.crc32: 3 graphs, 2 breaks")
def _graph_breaks() -> Case:
    return Case(with_two_breaks, (torch.randn(8),))


# ---------------------------------------------------------------------------
# transformers models from tiny configs (random weights, never the hub)


def _hf():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def _token_ids(batch: int = 2, seq: int = 32, vocab: int = 1000) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


@workload("hf_gpt2", "transformers GPT2Model: 2 layers, d=64, 4 heads; 2x32 tokens", needs_transformers=True,
          inductor=True)
def _hf_gpt2() -> Case:
    tf = _hf()
    config = tf.GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    return Case(tf.GPT2Model(config), (_token_ids(),))


def _gpt2_layers(layers: int) -> Callable[[], Case]:
    def build() -> Case:
        tf = _hf()
        config = tf.GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=layers, n_head=4,
                               use_cache=False)
        return Case(tf.GPT2Model(config), (_token_ids(),))
    return build


for _layers in (4, 12, 16, 48):
    _register(f"hf_gpt2_L{_layers}", _gpt2_layers(_layers),
              f"transformers GPT2Model: {_layers} layers, d=64, 4 heads; 2x32 tokens (compile time at scale)",
              needs_transformers=True, scale=True)


@workload("hf_bert", "transformers BertModel: 2 layers, d=64, 4 heads; 2x32 tokens + attention mask",
          needs_transformers=True)
def _hf_bert() -> Case:
    tf = _hf()
    config = tf.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=128)
    ids = _token_ids()
    return Case(tf.BertModel(config), (ids,), {"attention_mask": torch.ones_like(ids)})


@workload("hf_llama", "transformers LlamaModel: 2 layers, d=64, 4 heads (2 kv); 2x32 tokens", needs_transformers=True)
def _hf_llama() -> Case:
    tf = _hf()
    config = tf.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                            use_cache=False)
    return Case(tf.LlamaModel(config), (_token_ids(),))


@workload("hf_resnet", "transformers ResNetModel: basic blocks, depths [1, 1], widths [16, 32]; 2x3x64x64",
          needs_transformers=True)
def _hf_resnet() -> Case:
    tf = _hf()
    config = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                             layer_type="basic")
    return Case(tf.ResNetModel(config), (torch.randn(2, 3, 64, 64),))


@workload("hf_vit", "transformers ViTModel: 2 layers, d=64, 4 heads, 32x32 image, 8x8 patches; batch 2",
          needs_transformers=True)
def _hf_vit() -> Case:
    tf = _hf()
    config = tf.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                          image_size=32, patch_size=8, num_channels=3)
    return Case(tf.ViTModel(config), (torch.randn(2, 3, 32, 32),))


# ---------------------------------------------------------------------------
# the recompile/memory workload (used by the ``memory`` metric only)


class ScaleConfig:
    """A plain user object passed to the compiled function on every call."""

    def __init__(self, scale: float):
        self.scale = scale


def scaled_sin(x, cfg):
    return torch.sin(x) * cfg.scale + x.shape[0]


MEMORY_WORKLOAD = "recompile_100"


# ---------------------------------------------------------------------------
# output comparison


def flatten_tensors(obj) -> List[torch.Tensor]:
    """Every tensor inside ``obj`` (tensors, tuples, lists, dicts, ModelOutput)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):      # includes transformers' ModelOutput
        return [t for v in obj.values() for t in flatten_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in flatten_tensors(v)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in flatten_tensors(getattr(obj, f.name))]
    return []


def compare(expected, actual, rtol: float, atol: float) -> Tuple[bool, float, str]:
    """(all close, max abs error, reason if not close) of two outputs."""
    exp, act = flatten_tensors(expected), flatten_tensors(actual)
    if not exp and not act:
        same = expected == actual
        return bool(same), 0.0, "" if same else "non-tensor outputs differ"
    if len(exp) != len(act):
        return False, float("inf"), f"{len(act)} output tensors, expected {len(exp)}"
    worst = 0.0
    for e, a in zip(exp, act):
        if e.shape != a.shape or e.dtype != a.dtype:
            return False, float("inf"), f"output {tuple(a.shape)}/{a.dtype}, expected {tuple(e.shape)}/{e.dtype}"
        if e.numel():
            diff = (e.detach().double() - a.detach().double()).abs()
            worst = max(worst, float(torch.nan_to_num(diff, nan=float("inf")).max()))
        if not torch.allclose(e.detach(), a.detach(), rtol=rtol, atol=atol, equal_nan=True):
            return False, worst, f"max abs error {worst:.3g}"
    return True, worst, ""

"""Real models (issue 5): Hugging Face ``transformers`` GPT-2, BERT, Llama,
ResNet and ViT from tiny configs with random weights (no hub access).

Each is compared with eager in inference and training mode, its graph count
is at most torch.compile's on the same model and input, and GPT-2 and ResNet
train for three optimizer steps with ``aot_eager`` to the same parameters.
"""

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import bytegraph  # noqa: E402
from conftest import CountingBackend  # noqa: E402

pytestmark = pytest.mark.models


def build(name):
    torch.manual_seed(0)
    t = transformers
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    if name == "gpt2":
        cfg = t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                           bos_token_id=0, eos_token_id=0)
        return t.GPT2Model(cfg), (ids,)
    if name == "bert":
        cfg = t.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           vocab_size=100)
        return t.BertModel(cfg), (ids,)
    if name == "llama":
        cfg = t.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                            intermediate_size=128, vocab_size=100)
        return t.LlamaModel(cfg), (ids,)
    if name == "resnet":
        cfg = t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_channels=3)
        return t.ResNetModel(cfg), (pixels,)
    cfg = t.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      image_size=32, patch_size=8)
    return t.ViTModel(cfg), (pixels,)


MODELS = ["gpt2", "bert", "llama", "resnet", "vit"]


def first_tensor(out):
    return out[0] if not isinstance(out, torch.Tensor) else out


def torch_compile_graphs(model, args):
    import torch._dynamo
    torch._dynamo.reset()
    be = CountingBackend()
    torch.compile(model, backend=be)(*args)
    torch._dynamo.reset()
    return be.count


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_eager_with_no_more_graphs_than_torch_compile(name, mode):
    model, args = build(name)
    getattr(model, mode)()
    reference_model = copy.deepcopy(model)
    be = CountingBackend()
    compiled = bytegraph.compile(model, backend=be)
    with torch.no_grad() if mode == "eval" else torch.enable_grad():
        torch.manual_seed(123)
        expected = first_tensor(reference_model(*args))
        torch.manual_seed(123)
        got = first_tensor(compiled(*args))
    # the eager backend runs the graph's ops in program order, so even dropout draws the same numbers
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert bytegraph.stats().eager_fallbacks == 0
    assert 1 <= be.count <= torch_compile_graphs(copy.deepcopy(reference_model), args)


@pytest.mark.parametrize("name", ["gpt2", "resnet"])
def test_three_training_steps_with_aot_eager_match_eager(name):
    model, args = build(name)
    if name == "gpt2":
        model.config.resid_pdrop = model.config.embd_pdrop = model.config.attn_pdrop = 0.0
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    model.train()
    other = copy.deepcopy(model)
    compiled = bytegraph.compile(other, backend="aot_eager")
    opt_e = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_c = torch.optim.SGD(other.parameters(), lr=0.05)
    for _ in range(3):
        for m, opt in ((model, opt_e), (compiled, opt_c)):
            opt.zero_grad()
            first_tensor(m(*args)).pow(2).mean().backward()
            opt.step()
    # tolerance: AOT autograd may fuse/reorder float reductions
    for (n, p), q in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=n)

"""The model zoo: Hugging Face ``transformers`` architectures built from tiny
configs with random weights (no hub access), each with inputs at three sizes.

Used by ``tests/test_model_zoo.py`` (correctness, training, recompiles, graph
counts) and by ``bench/zoo.py`` (graph counts beside torch.compile's, for the
README).  Every entry is a :class:`ZooModel`: how to build the model, its
inputs at three sizes, and what bytegraph is known to produce on it
(``graphs``: the graph count of one call at the first size; ``breaks``: the
break kinds allowed, each with why it is there).

Example::

    >>> from model_zoo import ZOO
    >>> model, inputs = ZOO["gpt2"].build()
    >>> len(inputs)
    3
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

Inputs = List[Tuple[tuple, dict]]

# The shared tiny shapes: 2 layers, width 64, 4 heads.
H = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=100)
ED = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
          encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100, max_position_embeddings=64)
V = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
         patch_size=8)
TEXT_LENGTHS = (8, 11, 16)
IMAGE_SIZES = ((1, 32), (2, 32), (3, 32))            # (batch, side): batch varies
IMAGE_SIDES = ((1, 32), (2, 48), (2, 64))            # resolution varies (convolutional models)


def ids(n: int, b: int = 2, seed: int = 1) -> torch.Tensor:
    """Token ids in [3, 100) (clear of the special tokens 0-2), reproducible per length."""
    return torch.randint(3, 100, (b, n), generator=torch.Generator().manual_seed(seed + n))


def pixels(b: int, side: int, channels: int = 3) -> torch.Tensor:
    return torch.randn(b, channels, side, side, generator=torch.Generator().manual_seed(1 + b + side))


def text_inputs(lengths=TEXT_LENGTHS) -> Inputs:
    return [((ids(n),), {}) for n in lengths]


def seq2seq_inputs(lengths=TEXT_LENGTHS) -> Inputs:
    return [((), dict(input_ids=ids(n), decoder_input_ids=ids(n - 3, seed=7))) for n in lengths]


def image_inputs(sizes=IMAGE_SIZES) -> Inputs:
    return [((pixels(b, s),), {}) for b, s in sizes]


def audio_inputs(lengths=(400, 560, 800)) -> Inputs:
    return [((torch.randn(2, n, generator=torch.Generator().manual_seed(n)),), {}) for n in lengths]


def without_dropout(config):
    """Every dropout-like probability of ``config`` set to 0, so that training
    steps compare exactly (the compiled graph's random draws need not line up
    with eager's under AOT autograd)."""
    for key, value in list(vars(config).items()):
        k = key.lower()
        if isinstance(value, float) and any(s in k for s in ("dropout", "drop", "pdrop", "mask_time_prob",
                                                               "mask_feature_prob")):
            setattr(config, key, 0.0)
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):   # nested sub-configs (CLIP)
            without_dropout(value)
    return config


def deterministic(model):
    """No randomness left in ``model``'s training mode: dropout modules, and
    the float probabilities modules keep for functional dropout or layer drop
    (``self.dropout = config.attention_dropout``), all set to 0."""
    without_dropout(model.config)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for key, value in list(vars(m).items()):
            if isinstance(value, float) and "drop" in key:
                setattr(m, key, 0.0)
    return model


@dataclass
class ZooModel:
    """One architecture: ``make(t)`` builds the model from the ``transformers``
    module ``t``; ``inputs()`` gives three (args, kwargs) sizes; ``graphs`` is
    bytegraph's recorded graph count for one call at the first size; ``breaks``
    maps each allowed break kind to why it is there."""
    name: str
    family: str
    make: Callable
    inputs: Callable[[], Inputs]
    graphs: int = 1
    breaks: Dict[str, str] = field(default_factory=dict)
    quick: bool = False          # part of the quick subset that `make test` runs
    #: why the third size may compile again (the model's own code specializes
    #: on the size, so torch.compile compiles again there too); empty: it may not
    third_size_compiles: str = ""

    def build(self, dropout: bool = True):
        import transformers
        torch.manual_seed(0)
        model = self.make(transformers)
        if not dropout:
            deterministic(model)
        return model, self.inputs()


def _entries() -> List[ZooModel]:
    Z = ZooModel
    txt, s2s, img = text_inputs, seq2seq_inputs, image_inputs
    decoders = [
        Z("gpt2", "decoder", lambda t: t.GPT2Model(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100,
                                                                   n_positions=64)), txt, quick=True),
        Z("llama", "decoder", lambda t: t.LlamaModel(t.LlamaConfig(**H, num_key_value_heads=2)), txt, quick=True),
        Z("mistral", "decoder", lambda t: t.MistralModel(t.MistralConfig(**H, num_key_value_heads=2)), txt),
        Z("qwen2", "decoder", lambda t: t.Qwen2Model(t.Qwen2Config(**H, num_key_value_heads=2)), txt),
        Z("qwen3", "decoder", lambda t: t.Qwen3Model(t.Qwen3Config(**H, num_key_value_heads=2, head_dim=16)), txt),
        Z("gemma", "decoder", lambda t: t.GemmaModel(t.GemmaConfig(**H, num_key_value_heads=2, head_dim=16)), txt),
        Z("gemma2", "decoder", lambda t: t.Gemma2Model(t.Gemma2Config(**H, num_key_value_heads=2, head_dim=16,
                                                                        sliding_window=8)), txt),
        Z("phi", "decoder", lambda t: t.PhiModel(t.PhiConfig(**H)), txt),
        Z("phi3", "decoder", lambda t: t.Phi3Model(t.Phi3Config(**H, num_key_value_heads=2, pad_token_id=0)), txt),
        Z("opt", "decoder", lambda t: t.OPTModel(t.OPTConfig(hidden_size=64, num_hidden_layers=2,
                                                               num_attention_heads=4, ffn_dim=128, vocab_size=100,
                                                               max_position_embeddings=64,
                                                               word_embed_proj_dim=64)), txt),
        Z("gpt_neo", "decoder", lambda t: t.GPTNeoModel(t.GPTNeoConfig(
            hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
            vocab_size=100, max_position_embeddings=64, window_size=8)), txt),
        Z("gpt_neox", "decoder", lambda t: t.GPTNeoXModel(t.GPTNeoXConfig(**H, max_position_embeddings=64)), txt),
        Z("gptj", "decoder", lambda t: t.GPTJModel(t.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                                  vocab_size=100, n_positions=64)), txt),
        Z("codegen", "decoder", lambda t: t.CodeGenModel(t.CodeGenConfig(n_embd=64, n_layer=2, n_head=4,
                                                                         rotary_dim=8, vocab_size=100,
                                                                         n_positions=64, n_ctx=64)), txt),
        Z("gpt_bigcode", "decoder", lambda t: t.GPTBigCodeModel(t.GPTBigCodeConfig(
            n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64)), txt),
        Z("bloom", "decoder", lambda t: t.BloomModel(t.BloomConfig(hidden_size=64, n_layer=2, n_head=4,
                                                                     vocab_size=100)), txt),
        Z("falcon", "decoder", lambda t: t.FalconModel(t.FalconConfig(hidden_size=64, num_hidden_layers=2,
                                                                        num_attention_heads=4, vocab_size=100)), txt),
        Z("stablelm", "decoder", lambda t: t.StableLmModel(t.StableLmConfig(**H, num_key_value_heads=2)), txt),
        Z("starcoder2", "decoder", lambda t: t.Starcoder2Model(t.Starcoder2Config(**H, num_key_value_heads=2)), txt),
        Z("olmo", "decoder", lambda t: t.OlmoModel(t.OlmoConfig(**H, num_key_value_heads=2)), txt),
        Z("biogpt", "decoder", lambda t: t.BioGptModel(t.BioGptConfig(**H, max_position_embeddings=64)), txt),
        Z("xglm", "decoder", lambda t: t.XGLMModel(t.XGLMConfig(d_model=64, num_layers=2, attention_heads=4,
                                                                 ffn_dim=128, vocab_size=100,
                                                                 max_position_embeddings=64)), txt),
        Z("ctrl", "decoder", lambda t: t.CTRLModel(t.CTRLConfig(n_embd=64, n_layer=2, n_head=4, dff=128,
                                                                  vocab_size=100)), txt),
        Z("xlnet", "decoder", lambda t: t.XLNetModel(t.XLNetConfig(d_model=64, n_layer=2, n_head=4, d_inner=128,
                                                                     vocab_size=100)), txt),
        # mixture of experts
        Z("mixtral", "moe", lambda t: t.MixtralModel(t.MixtralConfig(**H, num_key_value_heads=2, num_local_experts=4,
                                                                       num_experts_per_tok=2)), txt),
        Z("qwen2_moe", "moe", lambda t: t.Qwen2MoeModel(t.Qwen2MoeConfig(
            **H, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32)), txt),
        Z("olmoe", "moe", lambda t: t.OlmoeModel(t.OlmoeConfig(**H, num_key_value_heads=2, num_experts=4,
                                                                num_experts_per_tok=2)), txt),
    ]
    encoders = [
        Z("bert", "encoder", lambda t: t.BertModel(t.BertConfig(**H)), txt, quick=True),
        Z("roberta", "encoder", lambda t: t.RobertaModel(t.RobertaConfig(**H, max_position_embeddings=64)), txt),
        Z("xlm_roberta", "encoder", lambda t: t.XLMRobertaModel(t.XLMRobertaConfig(**H)), txt),
        Z("camembert", "encoder", lambda t: t.CamembertModel(t.CamembertConfig(**H)), txt),
        Z("distilbert", "encoder", lambda t: t.DistilBertModel(t.DistilBertConfig(n_layers=2, dim=64, n_heads=4,
                                                                                    hidden_dim=128,
                                                                                    vocab_size=100)), txt),
        Z("albert", "encoder", lambda t: t.AlbertModel(t.AlbertConfig(**H, embedding_size=32)), txt),
        Z("electra", "encoder", lambda t: t.ElectraModel(t.ElectraConfig(**H, embedding_size=32)), txt),
        Z("mobilebert", "encoder", lambda t: t.MobileBertModel(t.MobileBertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100,
            embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2)), txt),
        Z("convbert", "encoder", lambda t: t.ConvBertModel(t.ConvBertConfig(**H, embedding_size=64)), txt),
        Z("deberta", "encoder", lambda t: t.DebertaModel(t.DebertaConfig(**H)), txt),
        Z("deberta_v2", "encoder", lambda t: t.DebertaV2Model(t.DebertaV2Config(**H)), txt),
        Z("funnel", "encoder", lambda t: t.FunnelModel(t.FunnelConfig(d_model=64, n_head=4, d_head=16, d_inner=128,
                                                                        block_sizes=[1, 1], vocab_size=100)), txt,
          third_size_compiles="the pooled relative positions specialize on the length; torch.compile also "
                              "compiles a third graph"),
        Z("layoutlm", "encoder", lambda t: t.LayoutLMModel(t.LayoutLMConfig(**H)), txt),
        Z("mpnet", "encoder", lambda t: t.MPNetModel(t.MPNetConfig(**H)), txt),
        Z("megatron_bert", "encoder", lambda t: t.MegatronBertModel(t.MegatronBertConfig(**H)), txt),
        Z("squeezebert", "encoder", lambda t: t.SqueezeBertModel(t.SqueezeBertConfig(**H, embedding_size=64)), txt),
        Z("esm", "encoder", lambda t: t.EsmModel(t.EsmConfig(**H, pad_token_id=1, mask_token_id=2,
                                                              max_position_embeddings=64)), txt),
        Z("rembert", "encoder", lambda t: t.RemBertModel(t.RemBertConfig(**H, input_embedding_size=32,
                                                                          output_embedding_size=32)), txt),
        Z("clip_text", "clip", lambda t: t.CLIPTextModel(t.CLIPTextConfig(**H, max_position_embeddings=64)), txt),
    ]
    seq2seq = [
        Z("t5", "encoder-decoder", lambda t: t.T5Model(t.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                                  num_heads=4, vocab_size=100,
                                                                  decoder_start_token_id=0)), s2s, quick=True),
        Z("mt5", "encoder-decoder", lambda t: t.MT5Model(t.MT5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                                     num_heads=4, vocab_size=100,
                                                                     decoder_start_token_id=0)), s2s),
        Z("bart", "encoder-decoder", lambda t: t.BartModel(t.BartConfig(**ED)), s2s),
        Z("mbart", "encoder-decoder", lambda t: t.MBartModel(t.MBartConfig(**ED)), s2s),
        Z("m2m_100", "encoder-decoder", lambda t: t.M2M100Model(t.M2M100Config(**ED)), s2s),
        Z("plbart", "encoder-decoder", lambda t: t.PLBartModel(t.PLBartConfig(**ED)), s2s),
        Z("marian", "encoder-decoder", lambda t: t.MarianModel(t.MarianConfig(
            **ED, pad_token_id=1, decoder_start_token_id=1, eos_token_id=2)), s2s),
        Z("pegasus", "encoder-decoder", lambda t: t.PegasusModel(t.PegasusConfig(**ED)), s2s),
        Z("blenderbot", "encoder-decoder", lambda t: t.BlenderbotModel(t.BlenderbotConfig(**ED)), s2s),
        Z("blenderbot_small", "encoder-decoder",
          lambda t: t.BlenderbotSmallModel(t.BlenderbotSmallConfig(**ED)), s2s),
    ]

    def whisper_inputs():
        # whisper needs exactly 2 * max_source_positions frames; the decoder length varies
        return [((), dict(input_features=torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(n)),
                          decoder_input_ids=ids(n))) for n in TEXT_LENGTHS]

    def clip_inputs():
        return [((), dict(input_ids=ids(n), pixel_values=pixels(2, 32))) for n in TEXT_LENGTHS]

    W2V = dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
               num_conv_pos_embedding_groups=4)
    audio = [
        Z("whisper", "audio", lambda t: t.WhisperModel(t.WhisperConfig(
            **ED, num_mel_bins=16, max_source_positions=32, max_target_positions=64, pad_token_id=1,
            bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)), whisper_inputs),
        Z("wav2vec2", "audio", lambda t: t.Wav2Vec2Model(t.Wav2Vec2Config(**H, **W2V)), audio_inputs),
        Z("hubert", "audio", lambda t: t.HubertModel(t.HubertConfig(**H, **W2V)), audio_inputs),
        Z("wavlm", "audio", lambda t: t.WavLMModel(t.WavLMConfig(**H, **W2V, num_buckets=32,
                                                                  max_bucket_distance=64)), audio_inputs),
    ]
    vision = [
        Z("vit", "vision", lambda t: t.ViTModel(t.ViTConfig(**V)), img, quick=True),
        Z("deit", "vision", lambda t: t.DeiTModel(t.DeiTConfig(**V)), img),
        Z("beit", "vision", lambda t: t.BeitModel(t.BeitConfig(**V)), img),
        Z("dinov2", "vision", lambda t: t.Dinov2Model(t.Dinov2Config(**V)), img),
        Z("swin", "vision", lambda t: t.SwinModel(t.SwinConfig(image_size=32, patch_size=4, embed_dim=16,
                                                               depths=[1, 1], num_heads=[2, 2], window_size=4)), img),
        Z("resnet", "vision", lambda t: t.ResNetModel(t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32],
                                                                     depths=[1, 1])),
          lambda: image_inputs(IMAGE_SIDES), quick=True),
        Z("convnext", "vision", lambda t: t.ConvNextModel(t.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1],
                                                                           num_stages=2)),
          lambda: image_inputs(IMAGE_SIDES)),
        # TF-style padding branches on (side // 16) % 2: sides 48 and 80 take the same branch
        Z("mobilenet_v2", "vision", lambda t: t.MobileNetV2Model(t.MobileNetV2Config(image_size=32,
                                                                                     depth_multiplier=0.25)),
          lambda: image_inputs(((1, 32), (2, 48), (2, 80)))),
        Z("regnet", "vision", lambda t: t.RegNetModel(t.RegNetConfig(embedding_size=16, hidden_sizes=[16, 32],
                                                                     depths=[1, 1], groups_width=8)),
          lambda: image_inputs(IMAGE_SIDES)),
        Z("segformer", "vision", lambda t: t.SegformerModel(t.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
            patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), lambda: image_inputs(IMAGE_SIDES)),
        Z("clip", "clip", lambda t: t.CLIPModel(t.CLIPConfig(
            text_config=dict(**H, max_position_embeddings=64),
            vision_config=dict(**V), projection_dim=32)), clip_inputs),
    ]
    return decoders + encoders + seq2seq + audio + vision


ZOO: Dict[str, ZooModel] = {z.name: z for z in _entries()}


def first_tensor(out) -> torch.Tensor:
    """The main output tensor of a model call (``last_hidden_state``, ``logits``
    or the first element)."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("last_hidden_state", "logits_per_image", "logits"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    return out[0]


@dataclass
class HeadModel:
    """A task-head model trained with labels, so the loss (``CrossEntropyLoss``
    and friends built inside ``forward``, ``config.problem_type`` set there)
    is computed in the compiled code: ``make(t)`` builds it, ``batch()`` gives
    one keyword batch with ``labels``; ``graphs`` is bytegraph's recorded graph
    count for one training call, ``breaks`` the allowed break kinds."""
    name: str
    make: Callable
    batch: Callable[[], dict]
    graphs: int = 1
    breaks: Dict[str, str] = field(default_factory=dict)

    def build(self):
        import transformers
        torch.manual_seed(0)
        model = self.make(transformers)
        deterministic(model)
        return model, self.batch()


def _class_labels(b: int, n: int) -> torch.Tensor:
    return torch.randint(0, n, (b,), generator=torch.Generator().manual_seed(b * 7 + n))


def _heads() -> List[HeadModel]:
    M = HeadModel
    tokens = lambda: dict(input_ids=ids(11), labels=ids(11, seed=5))
    classify = lambda: dict(input_ids=ids(11), labels=_class_labels(2, 3))
    translate = lambda: dict(input_ids=ids(11), labels=ids(8, seed=7))
    image = lambda: dict(pixel_values=pixels(2, 32), labels=_class_labels(2, 10))
    return [
        M("gpt2_lm", lambda t: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100,
                                                               n_positions=64)), tokens),
        M("llama_lm", lambda t: t.LlamaForCausalLM(t.LlamaConfig(**H, num_key_value_heads=2)), tokens),
        M("mixtral_lm", lambda t: t.MixtralForCausalLM(t.MixtralConfig(**H, num_key_value_heads=2,
                                                                        num_local_experts=4,
                                                                        num_experts_per_tok=2)), tokens),
        M("bert_mlm", lambda t: t.BertForMaskedLM(t.BertConfig(**H)), tokens),
        M("roberta_cls", lambda t: t.RobertaForSequenceClassification(t.RobertaConfig(
            **H, max_position_embeddings=64, num_labels=3)), classify),
        M("distilbert_cls", lambda t: t.DistilBertForSequenceClassification(t.DistilBertConfig(
            n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=100, num_labels=3)), classify),
        M("t5_seq2seq", lambda t: t.T5ForConditionalGeneration(t.T5Config(
            d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=100, decoder_start_token_id=0,
            pad_token_id=0)), translate),
        M("bart_seq2seq", lambda t: t.BartForConditionalGeneration(t.BartConfig(**ED)), translate),
        M("vit_cls", lambda t: t.ViTForImageClassification(t.ViTConfig(**V, num_labels=10)), image),
        M("resnet_cls", lambda t: t.ResNetForImageClassification(t.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)), image),
    ]


HEADS: Dict[str, HeadModel] = {h.name: h for h in _heads()}

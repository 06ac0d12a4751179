"""This year's long-tail decoders (part B) and the multimodal wrappers transformers maps as causal LMs.

Every mapping below was read off the pinned transformers 5.24 (models/<family>/modular_<family>.py and
configuration_<family>.py); each quirk names the class it was read from. Where a config class derives a
field in `__post_init__` when the config omits it (HY-V3's `mlp_layer_types`, Flint's `layer_types` and
`mlp_only_layers`, …), the builder derives it the same way before handing the config to the generic
builder (`_derive`). tests/work/test_work_config_defaults.py holds every class registered here against
the transformers model built on the meta device (its total parameter count; for a wrapper, its
language-model submodule and LM head).

Wrappers (`…ForConditionalGeneration`, Fuyu): the accountant counts the language model only (its
`text_config`), with a note; the vision/audio towers and projectors are not counted. A wrapper's
`tie_word_embeddings` is the wrapper config's own (transformers PreTrainedModel.tie_weights reads
`self.config.tie_word_embeddings`, the top-level config), not its text config's.

Not registered (their math is not expressed by the specs; see docs/work.md): Dory (looped nGPT layers:
weights reused across loops), Dots3-Note (sliding-window MLA with per-layer latent widths), Inkling /
Inkling2 / Inkling2-Loop (short convolutions on K/V and on the residual stream, relative-position logits,
attention-residual blocks, looped layers), HRM-Text (hierarchical cycles over shared layer stacks),
Qwen4-Exp (hyper-connections, n-gram embeddings, a QSA indexer; its class defaults do not build),
Gemma3nForConditionalGeneration (its vision tower needs timm, absent here: no meta-model cross-check).
(MllamaForCausalLM is registered in builders/encoder_style.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders import gemma4, gqa, mla
from graphsim.work.builders.common import ALWAYS, MLP_BIAS, MoeFields, ffn_schedule, finish, read_frame
from graphsim.work.builders.gqa import ATTN_BIAS, GqaProfile
from graphsim.work.config import ConfigView
from graphsim.work.config_defaults import text_model_class
from graphsim.work.specs import (
    DenseFfn, GatedDeltaNet, GqaAttention, LayerSpec, LayerStack, MlaAttention, ModelSpec, Weight, WeightKind,
)

Builder = Callable[[ConfigView], ModelSpec]


def _derive(view: ConfigView, **fields: Any) -> ConfigView:
    """The view with the fields the config omits filled as the config class's __post_init__ fills them."""
    missing = {k: v for k, v in fields.items() if not view.has(k)}
    return ConfigView(dict(view.cfg, **missing), view.arch) if missing else view


def _first_dense(layers: int, dense: int) -> list[str]:
    return ["dense" if i < dense else "sparse" for i in range(layers)]


# --- HY-V3 (models/hy_v3) -------------------------------------------------------------------------
# HYV3Attention is ApertusAttention: q/k/v/o biased by attention_bias, per-head q_norm/k_norm.
# HYV3DecoderLayer: two norms; HYV3MoE (router `gate`, fp32) on the layers mlp_layer_types calls
# "sparse", else HYV3MLP (LlamaMLP: biases from mlp_bias). The MoE block holds the experts
# (Qwen3MoeExperts: fused gate_up, no biases), a shared HYV3MLP of moe_intermediate_size ×
# num_shared_experts (biased by mlp_bias like every LlamaMLP) and an e_score_correction_bias buffer
# (on the block, HYV3MoE.e_score_correction_bias). HYV3Config.__post_init__: without mlp_layer_types
# the first layer is dense, the rest sparse. (HYV3Config maps num_local_experts to num_experts.)
HYV3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=ALWAYS,
    moe=MoeFields("num_experts", "moe_intermediate_size", shared_count_key="num_shared_experts", layer_types=True,
                  score_bias=True, shared_module="shared_experts", shared_bias=MLP_BIAS),
)


def build_hy_v3(view: ConfigView) -> ModelSpec:
    layers = read_frame(view).layers
    return gqa.build_gqa_decoder(HYV3, _derive(view, mlp_layer_types=_first_dense(layers, 1)))


# --- Kolibri-1 (models/kolibri1) ------------------------------------------------------------------
# Kolibri1Attention is Exaone4Attention without its sliding pattern: q/k/v/o without biases
# (Kolibri1Config drops attention_bias), per-head q_norm/k_norm; the window from layer_types.
# Kolibri1DecoderLayer is Glm4DecoderLayer: four norms. Every layer a Kolibri1SparseMoeBlock
# (DeepseekV3MoE): a router `gate` with an e_score_correction_bias buffer (sigmoid scores), experts of
# moe_intermediate_size, an always-on shared MLP of shared_expert_intermediate_size (no gate, no bias).
# Kolibri1Config.__post_init__: without layer_types every 5th layer ((i + 1) % 5 == 0) is full.
KOLIBRI1 = GqaProfile(
    qk_norm=ALWAYS, attn_norms=2, ffn_norms=2,
    moe=MoeFields("num_experts", "moe_intermediate_size", shared_key="shared_expert_intermediate_size",
                  score_bias=True, shared_module="shared_experts"),
)


def build_kolibri1(view: ConfigView) -> ModelSpec:
    layers = read_frame(view).layers
    types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    return gqa.build_gqa_decoder(KOLIBRI1, _derive(view, layer_types=types))


# --- Flint (models/flint) -------------------------------------------------------------------------
# FlintAttention is Qwen3MoeAttention (q/k/v/o biased by attention_bias, per-head q/k norms) plus one
# learned sink logit per head (FlintAttention.sinks); sliding_window on the layer_types' sliding
# layers. Qwen3-MoE's sparse schedule (decoder_sparse_step, mlp_only_layers); dense layers are
# FlintMLP of intermediate_size; the MoE block adds a shared expert of shared_expert_intermediate_size
# without Qwen2-MoE's sigmoid gate (FlintSparseMoeBlock.forward adds it as is).
# FlintConfig.__post_init__: without layer_types, full on layers 0, 1, every i % 4 == 1 and the last;
# without mlp_only_layers, [0, 1].
FLINT = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=ALWAYS, sinks=True,
    moe=MoeFields("num_experts", "moe_intermediate_size", shared_key="shared_expert_intermediate_size",
                  sparse_schedule=True),
)


def build_flint(view: ConfigView) -> ModelSpec:
    n = read_frame(view).layers
    types = ["full_attention" if i < 2 or i % 4 == 1 or i == n - 1 else "sliding_attention" for i in range(n)]
    return gqa.build_gqa_decoder(FLINT, _derive(view, layer_types=types, mlp_only_layers=[0, 1]))


# --- AriaText (models/aria) -----------------------------------------------------------------------
# AriaTextAttention: Llama's (q/k/v/o biased by attention_bias); head_dim hidden/heads and MHA when
# the config leaves them None (AriaTextConfig.__post_init__). Every layer an AriaTextMoELayer: a router
# without bias (`router`), moe_num_experts experts of intermediate_size (AriaGroupedExpertsGemm, no
# biases), top moe_topk, and AriaSharedExpertsMLP of intermediate_size × moe_num_shared_experts with
# mlp_bias biases.
ARIA_TEXT = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS,
    moe=MoeFields("moe_num_experts", "intermediate_size", top_k_key="moe_topk", shared_count_key="moe_num_shared_experts",
                  router_module="router", shared_module="shared_experts", shared_bias=MLP_BIAS),
)


# --- Beam (models/beam) ---------------------------------------------------------------------------
# BeamAttention is Qwen3MoeAttention (biases from attention_bias, per-head q/k norms) plus an output
# gate: gate_proj (hidden → heads·head_dim, no bias) and a per-head gate_bias, attn_output ·
# sigmoid(gate_proj(x) + gate_bias) before o_proj. The full layers run without rotary embeddings (no
# weights). BeamDecoderLayer: four norms (input, post-attention, pre/post-feedforward). BeamMoE on the
# "sparse" mlp_layer_types: a DeepSeek-V3 router `gate` with e_score_correction_bias (grouped sigmoid
# top-k), experts of moe_intermediate_size (DeepseekV4Experts: fused gate_up, no bias), no shared
# expert; dense layers BeamMLP of intermediate_size. BeamConfig.__post_init__: without layer_types
# every 6th layer and the last are full; without mlp_layer_types the first min(3, layers) are dense.
BEAM = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=ALWAYS, attn_norms=2, ffn_norms=2,
    moe=MoeFields("num_experts", "moe_intermediate_size", layer_types=True, score_bias=True),
)


def build_beam(view: ConfigView) -> ModelSpec:
    n = read_frame(view).layers
    types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    types[-1] = "full_attention"
    spec = gqa.build_gqa_decoder(BEAM, _derive(view, layer_types=types, mlp_layer_types=_first_dense(n, min(3, n))))
    layers = []
    for layer in spec.stack.layers:
        attn = layer.attn
        assert isinstance(attn, GqaAttention)
        gate = (
            Weight("gate", "self_attn.gate_proj", WeightKind.MATRIX, (attn.heads * attn.head_dim, attn.hidden)),
            Weight("gate", "self_attn.gate_bias", WeightKind.VECTOR, (attn.heads,)),
        )
        layers.append(replace(layer, attn_extras=gate))
    return replace(spec, stack=LayerStack(tuple(layers)))


# --- LaraMini (models/lara_mini) ------------------------------------------------------------------
# LaraMiniConfig (a Qwen3NextConfig) lists per layer linear_attention / sliding_attention /
# full_attention; without layer_types the period-5 pattern [linear, sliding, linear, full, sliding].
# LaraMiniGatedDeltaNet is Qwen3_5GatedDeltaNet (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: the
# elements of GatedDeltaNet's in_proj_qkvz + in_proj_ba; conv1d without bias; dt_bias, A_log; a gated
# norm of linear_value_head_dim; out_proj). LaraMiniAttention is Qwen3Attention: no output gate,
# biases from attention_bias, per-head q/k norms, sliding_window on the sliding layers only; full layers
# run without rotary embeddings. Every layer a LaraMiniSparseMoeBlock (FlintSparseMoeBlock: experts of
# moe_intermediate_size and an ungated shared expert of shared_expert_intermediate_size); two norms.
# Embeddings tied by default (LaraMiniConfig.tie_word_embeddings = True).
_LARA_MOE = MoeFields("num_experts", "moe_intermediate_size", shared_key="shared_expert_intermediate_size")
_LARA_PATTERN = ("linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention")


def build_lara_mini(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    types = view.layer_types(frame.layers) or tuple(_LARA_PATTERN[i % 5] for i in range(frame.layers))
    bias = view.opt_bool("attention_bias", False)
    full = GqaAttention(
        hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads),
        head_dim=view.head_dim(frame.heads, frame.hidden), q_bias=bias, kv_bias=bias, o_bias=bias, qk_norm=True,
    )
    linear = GatedDeltaNet(
        hidden=frame.hidden, k_heads=view.req_int("linear_num_key_heads"), v_heads=view.req_int("linear_num_value_heads"),
        k_head_dim=view.req_int("linear_key_head_dim"), v_head_dim=view.req_int("linear_value_head_dim"),
        conv_kernel=view.req_int("linear_conv_kernel_dim"),
    )
    if linear.v_heads % linear.k_heads:
        raise ConfigError(f"config.json ({view.arch}): linear_num_value_heads {linear.v_heads} is not a multiple of "
                          f"linear_num_key_heads {linear.k_heads}; fix the config")
    ffns = ffn_schedule(view, frame.hidden, frame.layers, _LARA_MOE)
    layers = []
    for i, kind in enumerate(types):
        if kind == "linear_attention":
            layers.append(LayerSpec(linear, ffns[i]))
        elif kind == "full_attention":
            layers.append(LayerSpec(full, ffns[i]))
        elif kind == "sliding_attention":
            layers.append(LayerSpec(replace(full, window=view.req_int("sliding_window")), ffns[i]))
        else:
            raise ConfigError(f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not supported (expected "
                              "linear_attention, sliding_attention or full_attention)")
    return finish(view, frame, layers, tie_default=True)


# --- HY-V4 (models/hy_v4) -------------------------------------------------------------------------
# HYV4Attention is GlmMoeDsaAttention (DeepSeek MLA: q_a_proj/q_a_layernorm/q_b_proj, kv_a_proj_with_mqa/
# kv_a_layernorm/kv_b_proj, o_proj; biases from attention_bias) with DSA's lightning indexer
# (HYV4Indexer: wq_b, wk, a LayerNorm k_norm with bias, weights_proj, the last two fp32) on the layers
# indexer_types calls "full" (a "shared" layer reuses the previous full layer's top-k and has no
# indexer), plus an output gate gate_proj (hidden → heads·v_head_dim, no bias) and one fp32 sink logit per
# head (`sinks`). HYV4DecoderLayer (a DeepseekV4DecoderLayer): two norms and two hyper-connections
# (attn_hc, ffn_hc: HYV4HyperConnection fn (2·hc_mult × hc_mult·hidden), base (2·hc_mult), scale (2), all
# fp32; fn is a matmul on every token, the stream mixing elementwise); the model a hc_head
# (HYV4HyperHead: hc_fn (hc_mult × hc_mult·hidden), hc_base (hc_mult), hc_scale (1)). MLPs are
# Glm4MoeLite's (no biases); HYV4MoE on the "sparse" mlp_layer_types (router with e_score_correction_bias,
# n_routed_experts experts of moe_intermediate_size, n_shared_experts × moe_intermediate_size shared).
# HYV4Config.__post_init__: without mlp_layer_types the first layer is dense; layer_types are all
# "indexed_attention"; without indexer_types layer 0 and every (i − 1) % 4 == 0 run their own indexer.
def _hc(prefix: str, streams: int, hidden: int, outputs: int, scales: int, names: tuple[str, str, str]) -> tuple[Weight, ...]:
    fn, base, scale = names
    return (
        Weight("hc", f"{prefix}.{fn}", WeightKind.MATRIX, (outputs, streams * hidden), quantizable=False, element_bytes=4),
        Weight("hc", f"{prefix}.{base}", WeightKind.VECTOR, (outputs,), element_bytes=4),
        Weight("hc", f"{prefix}.{scale}", WeightKind.VECTOR, (scales,), element_bytes=4),
    )


def build_hy_v4(view: ConfigView) -> ModelSpec:
    n = read_frame(view).layers
    types = view.layer_types(n)
    if types is not None and any(t != "indexed_attention" for t in types):
        raise ConfigError(f"config.json ({view.arch}): layer_types must be 'indexed_attention' on every layer (the "
                          "only attention HYV4 builds); fix the config")
    indexers = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(n)]
    spec = mla.build_mla_decoder(
        mla.DEEPSEEK_V32, _derive(view, mlp_layer_types=_first_dense(n, min(1, n)), indexer_types=indexers),
    )
    streams = view.opt_int("hc_mult", 4)
    attn_hc = _hc("attn_hc", streams, spec.hidden, 2 * streams, 2, ("fn", "base", "scale"))
    ffn_hc = _hc("ffn_hc", streams, spec.hidden, 2 * streams, 2, ("fn", "base", "scale"))
    layers = []
    for layer in spec.stack.layers:
        attn = layer.attn
        assert isinstance(attn, MlaAttention)
        gate = (
            Weight("gate", "self_attn.gate_proj", WeightKind.MATRIX, (attn.heads * attn.v_head_dim, attn.hidden)),
            Weight("core", "self_attn.sinks", WeightKind.VECTOR, (attn.heads,), element_bytes=4),
        )
        layers.append(replace(layer, attn_extras=gate + attn_hc, ffn_extras=ffn_hc))
    head = _hc("hc_head", streams, spec.hidden, streams, 1, ("hc_fn", "hc_base", "hc_scale"))
    return replace(spec, stack=LayerStack(tuple(layers)), final_extras=head)


# --- Gemma-3n text (models/gemma3n, Gemma3nForCausalLM) ---------------------------------------------
# Gemma3nTextAttention: q/k/v/o biased by attention_bias, per-head q_norm/k_norm, a v_norm without
# weight; the last num_kv_shared_layers layers reuse an earlier layer's K/V (Gemma3nTextConfig.
# kv_sharing_modes "reuse": no k/v projections or norms). layer_types (else full every 5th layer,
# Gemma3nTextConfig.__post_init__); sliding layers over sliding_window. Gemma3nTextMLP: gated, no bias,
# intermediate_size per layer (a list, or one value for all). Gemma3nTextDecoderLayer: four norms;
# AltUp (correct_output_scale (hidden), correction_coefs (n × n), prediction_coefs (n² × n), modality_router
# (n × hidden), router_norm) over altup_num_inputs = n streams; Laurel (linear_left (rank × hidden),
# linear_right (hidden × rank), post_laurel_norm); the per-layer-input gate (ple × hidden), projection
# (hidden × ple) and post_per_layer_input_norm. Gemma3nTextModel: the per-layer embedding table
# (vocab_size_per_layer_input × layers·ple), per_layer_model_projection (layers·ple × hidden) and
# per_layer_projection_norm (ple) with the embedding; n − 1 altup_projections (hidden × hidden) at the
# start and n − 1 altup_unembed_projections at the end. The routers' and projections' matmuls run on every
# token; AltUp's stream predictions and corrections are elementwise mixes (no weights). The KV producer
# layers HF marks "store" keep their usual cache in vLLM (the accountant's layout).
def build_gemma3n_text(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    hidden, n = frame.hidden, frame.layers
    types = view.layer_types(n) or tuple("full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n))
    shared = view.opt_int("num_kv_shared_layers", 0, minimum=0) or 0
    if shared > n:
        raise ConfigError(f"config.json ({view.arch}): num_kv_shared_layers {shared} exceeds num_hidden_layers {n}")
    if 0 < shared < n and set(types[: n - shared]) != set(types):
        raise ConfigError(f"config.json ({view.arch}): the layers sharing K/V use a layer type no earlier layer "
                          "produces; fix layer_types or num_kv_shared_layers")
    widths_raw = view.cfg.get("intermediate_size", view.defaults.get("intermediate_size"))
    widths = list(view.opt_int_list("intermediate_size")) if isinstance(widths_raw, list) else \
        [view.req_int("intermediate_size")] * n
    if len(widths) != n or min(widths) < 1:
        raise ConfigError(f"config.json ({view.arch}): intermediate_size must give one positive width or one per "
                          f"layer ({n}); fix the config")
    bias = view.opt_bool("attention_bias", False)
    head_dim, kv_heads = view.head_dim(frame.heads, hidden), view.kv_heads(frame.heads)
    layers = []
    for i, kind in enumerate(types):
        if kind not in ("sliding_attention", "full_attention"):
            raise ConfigError(f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not sliding_attention or "
                              "full_attention")
        attn = GqaAttention(
            hidden=hidden, heads=frame.heads, kv_heads=kv_heads, head_dim=head_dim,
            window=view.req_int("sliding_window") if kind == "sliding_attention" else None,
            q_bias=bias, kv_bias=bias, o_bias=bias, qk_norm=True, block_norms=2, kv_shared=i >= n - shared,
        )
        layers.append(LayerSpec(attn, DenseFfn(hidden=hidden, intermediate=widths[i], block_norms=2)))
    streams, rank = view.req_int("altup_num_inputs"), view.req_int("laurel_rank")
    ple, ple_vocab = view.req_int("hidden_size_per_layer_input"), view.req_int("vocab_size_per_layer_input")
    m, v, norm = WeightKind.MATRIX, WeightKind.VECTOR, WeightKind.NORM
    extras = (
        Weight("altup", "altup.correct_output_scale", v, (hidden,)),
        Weight("altup", "altup.correction_coefs", m, (streams, streams)),
        Weight("altup", "altup.prediction_coefs", m, (streams * streams, streams)),
        Weight("altup", "altup.modality_router", m, (streams, hidden)),
        Weight("altup", "altup.router_norm", norm, (hidden,)),
        Weight("laurel", "laurel.linear_left", m, (rank, hidden)),
        Weight("laurel", "laurel.linear_right", m, (hidden, rank)),
        Weight("laurel", "laurel.post_laurel_norm", norm, (hidden,)),
        Weight("ple", "per_layer_input_gate", m, (ple, hidden)),
        Weight("ple", "per_layer_projection", m, (hidden, ple)),
        Weight("ple", "post_per_layer_input_norm", norm, (hidden,)),
    )
    embed_extras = (
        Weight("embed", "embed_tokens_per_layer", WeightKind.EMBEDDING, (ple_vocab, n * ple), quantizable=False),
        Weight("embed", "per_layer_model_projection", m, (n * ple, hidden)),
        Weight("embed", "per_layer_projection_norm", norm, (ple,)),
        *(Weight("embed", f"altup_projections.{j}", m, (hidden, hidden)) for j in range(streams - 1)),
    )
    final_extras = tuple(Weight("final_norm", f"altup_unembed_projections.{j}", m, (hidden, hidden))
                         for j in range(streams - 1))
    spec = finish(view, frame, layers, tie_default=True)
    return replace(spec, layer_extras=extras, embed_extras=embed_extras, final_extras=final_extras)


# --- Phi-4-multimodal (models/phi4_multimodal, Phi4MultimodalForCausalLM) ------------------------------
# One class with a flat config: Phi4MultimodalModel is Phi-3's decoder (fused qkv_proj and gate_up_proj
# without biases, two RMSNorms per layer, sliding_window on every layer when set) plus
# `embed_tokens_extend` (Phi4MultimodalFeatureEmbedding: the image and audio encoders and projectors that
# write their embeddings into the token sequence): the accountant counts the language model, not those
# towers (TOWERS names them for the meta-model cross-check). The checkpoints' vision/speech LoRA adapters
# are separate files transformers loads with PEFT; vLLM applies them only to multimodal requests.
TOWERS: dict[str, tuple[str, ...]] = {"Phi4MultimodalForCausalLM": ("model.embed_tokens_extend",)}


def build_phi4_multimodal(view: ConfigView) -> ModelSpec:
    spec = gqa.build_gqa_decoder(gqa.PHI3, view)
    note = (f"{view.arch}: accounts its language model; the image/audio embedding towers (model.embed_tokens_extend) "
            "are not counted")
    return replace(spec, notes=(*spec.notes, note))


# --- Multimodal wrappers: the language model in text_config ----------------------------------------

# Qwen3-VL's text config classes (models/qwen3_vl Qwen3VLTextConfig, models/qwen3_vl_moe
# Qwen3VLMoeTextConfig) are not Qwen3's: no sliding-window fields, max_position_embeddings 128000,
# and the MoE text config defaults to 60 experts of 1408, top-4, MHA 16 heads, head_dim None
# (hidden/heads). Their keyword defaults, copied from transformers 5.24 (tests/work/
# test_work_modern_b.py holds them equal to the installed classes), with the attribute_map aliases.
QWEN3_VL_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 128000, "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": True,
    "rope_parameters": None, "attention_bias": False, "attention_dropout": 0.0, "pad_token_id": None,
}
QWEN3_VL_MOE_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_key_value_heads": 16, "hidden_act": "silu", "max_position_embeddings": 128000,
    "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": True, "tie_word_embeddings": True,
    "rope_parameters": None, "attention_bias": False, "attention_dropout": 0.0, "decoder_sparse_step": 1,
    "moe_intermediate_size": 1408, "num_experts_per_tok": 4, "num_experts": 60, "output_router_logits": False,
    "router_aux_loss_coef": 0.001, "mlp_only_layers": None, "pad_token_id": None, "bos_token_id": None,
    "eos_token_id": None, "head_dim": None,
}
QWEN3_VL_MOE_TEXT_ALIASES = {"num_experts": "num_local_experts"}


@dataclass(frozen=True)
class LanguageModelOf:
    """A wrapper whose language model (its `text_config`) a registered builder expresses.

    `text_arch`: the registered class whose builder (and, unless `text_defaults` is given, whose config
    class defaults) express the text model; None: the class transformers builds for text_config's
    model_type (AutoModel.from_config: Fuyu, GOT-OCR2). `text_defaults`/`text_aliases`: the text config
    class's own keyword defaults when it is not the registered class's (Qwen3-VL).
    """

    text_arch: str | None
    builder: Builder | None = None  # None: the registered builder of text_arch (the registry's)
    text_defaults: Mapping[str, Any] | None = None
    text_aliases: Mapping[str, str] | None = None


def _text_view(wrapper: LanguageModelOf, registered: Mapping[str, Builder], view: ConfigView) -> ConfigView:
    """The view of a wrapper's language model: its text_config under the text class, read with the text
    config class's defaults."""
    text = view.cfg.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(f"config.json ({view.arch}) has no text_config object (the language model's config); add it")
    text_arch = wrapper.text_arch
    if text_arch is None:
        model_type = text.get("model_type")
        text_arch = text_model_class(model_type) if isinstance(model_type, str) else None
        if text_arch is None or text_arch not in registered or text_arch in WRAPPERS:
            raise ConfigError(
                f"config.json ({view.arch}): text_config.model_type {model_type!r} names no language model the work "
                "accountant registers; use a registered text model"
            )
    # Fields a wrapper states at its top level for the model it wraps (the registry's rule), and the
    # wrapper's own tie_word_embeddings (or its class default), which is what transformers ties by.
    inherited = {k: view.cfg[k] for k in ("torch_dtype", "dtype", "quantization_config") if k in view.cfg}
    tie = view.opt_bool("tie_word_embeddings", False)
    merged = inherited | {k: v for k, v in text.items() if k != "architectures"} | {"tie_word_embeddings": tie}
    text_view = ConfigView(merged, text_arch)
    if wrapper.text_defaults is not None:
        text_view.defaults = dict(wrapper.text_defaults)
        text_view.names = {}
        for alias, target in (wrapper.text_aliases or {}).items():
            text_view.names[target] = (target, alias)
            text_view.names[alias] = (alias, target)
    return text_view


def build_language_model(wrapper: LanguageModelOf, registered: Mapping[str, Builder], view: ConfigView) -> ModelSpec:
    text_view = _text_view(wrapper, registered, view)
    spec = (wrapper.builder or registered[text_view.arch])(text_view)
    note = (f"{view.arch}: accounts its language model ({text_view.arch}, from text_config); other towers are not "
            "counted")
    return replace(spec, notes=(*spec.notes, note))


def text_config_of(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """A registered wrapper's language-model config (architectures naming the text class), else None: what the
    engine reads a wrapper's context length and rotary cache from (registry.language_model_config)."""
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch not in WRAPPERS:
        return None
    from graphsim.work.registry import BUILDERS

    text_view = _text_view(WRAPPERS[arch], BUILDERS, ConfigView(cfg, arch))
    return dict(text_view.cfg, architectures=[text_view.arch])


WRAPPERS: dict[str, LanguageModelOf] = {
    # Gemma3ForConditionalGeneration: model.language_model is Gemma3TextModel (Gemma3TextConfig, the
    # config class of Gemma3ForCausalLM); lm_head tied by Gemma3Config.tie_word_embeddings (True).
    "Gemma3ForConditionalGeneration": LanguageModelOf("Gemma3ForCausalLM"),
    # Gemma4ForConditionalGeneration: model.language_model is Gemma4TextModel (Gemma4TextConfig).
    "Gemma4ForConditionalGeneration": LanguageModelOf("Gemma4ForCausalLM"),
    # Gemma4UnifiedForConditionalGeneration: model.language_model is Gemma4UnifiedTextModel.
    "Gemma4UnifiedForConditionalGeneration": LanguageModelOf("Gemma4UnifiedForCausalLM"),
    # GotOcr2ForConditionalGeneration: model.language_model = AutoModel.from_config(text_config) (a Qwen2
    # model by default) and its own lm_head (bias False).
    "GotOcr2ForConditionalGeneration": LanguageModelOf(None),
    # FuyuForCausalLM: model.language_model = AutoModel.from_config(text_config) (Persimmon by default),
    # vision_embed_tokens (a patch projection: not counted), its own lm_head (bias False).
    "FuyuForCausalLM": LanguageModelOf(None),
    # Qwen3VLForConditionalGeneration: model.language_model is Qwen3VLTextModel: Qwen3's decoder layers
    # (q/k norms, biases from attention_bias, no sliding window); the deepstack visual embeddings it
    # adds to the first layers' hidden states are the vision tower's (not counted).
    "Qwen3VLForConditionalGeneration": LanguageModelOf(
        "Qwen3ForCausalLM", text_defaults=QWEN3_VL_TEXT_DEFAULTS, text_aliases={},
    ),
    # Qwen3VLMoeForConditionalGeneration: Qwen3VLMoeTextModel is Qwen3-MoE's decoder (the sparse schedule
    # decoder_sparse_step / mlp_only_layers, router `gate`, experts of moe_intermediate_size, no shared
    # expert, dense layers of intermediate_size).
    "Qwen3VLMoeForConditionalGeneration": LanguageModelOf(
        "Qwen3MoeForCausalLM", text_defaults=QWEN3_VL_MOE_TEXT_DEFAULTS, text_aliases=QWEN3_VL_MOE_TEXT_ALIASES,
    ),
}


# --- Gemma-4 assistants (models/gemma4_assistant, gemma4_unified_assistant) ---------------------------
# Gemma4(Unified)AssistantForCausalLM is a drafter for speculative decoding: `model` is the text model its
# text_config names (AutoModel.from_config: Gemma4TextModel / Gemma4UnifiedTextModel) in which every layer
# reuses K/V (Gemma4AssistantConfig.validate_architecture: num_kv_shared_layers == num_hidden_layers,
# no per-layer inputs, no MoE block, no double-wide MLP): its attention reads the target model's caches
# (shared_kv_states) and keeps none. Its input is pre_projection (2·backbone_hidden_size → hidden, no
# bias) of the target's token embedding and hidden state, its output the logits (lm_head, tied to
# model.embed_tokens by default) and post_projection (hidden → backbone_hidden_size) of the last hidden
# state, both matmuls on every drafted token. use_ordered_embeddings (a centroid head that computes the
# logits of the top centroid_intermediate_top_k clusters only) is not expressed: refused.
ASSISTANTS = ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM")


def build_gemma4_assistant(view: ConfigView) -> ModelSpec:
    if view.opt_bool("use_ordered_embeddings", False):
        raise ConfigError(f"config.json ({view.arch}): use_ordered_embeddings (a centroid head that scores the top "
                          "clusters' tokens only) is not expressed by the work accountant; it counts a full lm_head")
    from graphsim.work.registry import BUILDERS

    text_view = _text_view(LanguageModelOf(None), BUILDERS, view)
    spec = BUILDERS[text_view.arch](text_view)
    backbone = view.req_int("backbone_hidden_size")
    m = WeightKind.MATRIX
    note = (f"{view.arch}: a drafter; every layer reads the target model's K/V (no cache of its own); its input is "
            "the target's embedding and hidden state (pre_projection), the target's work is not counted")
    return replace(
        spec, notes=(*spec.notes, note),
        embed_extras=(*spec.embed_extras, Weight("embed", "pre_projection", m, (spec.hidden, 2 * backbone))),
        final_extras=(*spec.final_extras, Weight("final_norm", "post_projection", m, (backbone, spec.hidden))),
    )


# The causal-LM classes (each built by its own config class's defaults).
TEXT_MODELS: dict[str, Builder] = {
    "HYV3ForCausalLM": build_hy_v3,
    "Kolibri1ForCausalLM": build_kolibri1,
    "FlintForCausalLM": build_flint,
    "BeamForCausalLM": build_beam,
    "LaraMiniForCausalLM": build_lara_mini,
    "AriaTextForCausalLM": partial(gqa.build_gqa_decoder, ARIA_TEXT),
    "HYV4ForCausalLM": build_hy_v4,
    "Gemma3nForCausalLM": build_gemma3n_text,
    "Phi4MultimodalForCausalLM": build_phi4_multimodal,
    **dict.fromkeys(ASSISTANTS, build_gemma4_assistant),
    # Gemma4UnifiedForCausalLM: Gemma4UnifiedTextModel is Gemma-4's text model without the MoE block and
    # per-layer inputs (Gemma4UnifiedTextConfig has neither; Gemma4UnifiedTextDecoderLayer is Gemma-2's
    # four-norm layer with Gemma-4's attention and MLP and a layer_scalar buffer): gemma4.py's builder
    # with this class's defaults.
    "Gemma4UnifiedForCausalLM": gemma4.build_gemma4_text,
}


def _wrapper_builder(name: str) -> Builder:
    def build(view: ConfigView) -> ModelSpec:
        from graphsim.work.registry import BUILDERS  # the registered text builders (built after this module)

        return build_language_model(WRAPPERS[name], BUILDERS, view)

    return build


ARCHITECTURES: dict[str, Builder] = {**TEXT_MODELS, **{name: _wrapper_builder(name) for name in WRAPPERS}}
# The classes whose config nests the text model's fields in text_config (the meta-model sweep reads their
# dimensions there); of these, WRAPPERS count their language-model submodule only.
TEXT_CONFIG_NESTED = frozenset(WRAPPERS) | frozenset(ASSISTANTS)

"""Decoders with softmax GQA attention: one generic builder, configured per architecture.

An architecture differs from its siblings only in traits its HF config class fixes or defaults
(which projections carry biases, q/k norms, how many norms a block owns, the sliding-window rule,
sinks, the MoE field names). `GqaProfile` records those traits; every dimension comes from the
config itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from graphsim.errors import ConfigError
from graphsim.work.builders.common import ALWAYS, MLP_BIAS, NEVER, Flag, MoeFields, ffn_schedule, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import GqaAttention, LayerSpec, ModelSpec, Weight, WeightKind


class WindowRule(Enum):
    """Which layers use `sliding_window` when the config has no `layer_types`."""

    ALL = "all"  # every layer (Mistral, Phi-3, Mixtral, Qwen3-MoE)
    FROM_MAX_WINDOW_LAYERS = "from_max_window_layers"  # layers i >= max_window_layers (Qwen2, Qwen3)
    ALTERNATE = "alternate"  # even layers sliding, odd layers full (Gemma-2, gpt-oss)
    PERIODIC = "periodic"  # layer i full when (i + period_shift) % period == 0, else sliding (Gemma-3, Cohere-2)
    NONE = "none"  # no sliding layers without `layer_types` (the class derives them only from other fields)


@dataclass(frozen=True)
class GqaProfile:
    qkv_bias: Flag = NEVER
    o_bias: Flag = NEVER
    qk_norm: Flag = NEVER
    qk_norm_full: bool = False  # q_norm over heads·head_dim and k_norm over kv_heads·head_dim
    attn_norms: int = 1
    ffn_norms: int = 1  # 0: parallel block sharing the attention's input norm (Cohere)
    post_norms: Flag | None = None  # a config flag that adds a post-norm to each block (HyperCLOVA X)
    parallel: Flag = NEVER  # a config flag for a parallel block: no FFN norm (StableLM use_parallel_residual)
    norm_bias: bool = False  # LayerNorms with a bias (block norms and the final norm)
    mlp_bias: Flag = MLP_BIAS
    mlp_gated: bool = True  # False: up → activation → down, no gate projection (relu², gelu MLPs)
    tie_default: bool = False
    sliding_default: int | None = None  # HF config default for sliding_window when the key is absent
    use_sliding: Flag = ALWAYS  # `use_sliding_window` gate (Qwen defaults it to false)
    window_rule: WindowRule = WindowRule.ALL
    period_key: str | None = None  # WindowRule.PERIODIC: config key of the period (else period_default)
    period_default: int = 1
    period_shift: int = 0
    sinks: bool = False
    moe: MoeFields | None = None
    qk_norm_bias: bool = False  # q/k LayerNorms with a bias (Persimmon, Phi)
    head_bias: Flag = NEVER  # lm_head with a bias (Phi; ERNIE-4.5-MoE from use_bias)
    norm_weights: bool = True  # False: non-parametric LayerNorms, no norm weights anywhere (OLMo)
    # per-layer parameters and persistent buffers outside the blocks, (module, shape) (Apertus' xIELU)
    layer_vectors: tuple[tuple[str, tuple[int, ...]], ...] = ()


ATTN_BIAS = Flag("attention_bias", False)
QK_NORM = ALWAYS

LLAMA = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS)
MISTRAL = GqaProfile(sliding_default=4096)
QWEN2 = GqaProfile(
    qkv_bias=ALWAYS, use_sliding=Flag("use_sliding_window", False), window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS,
    sliding_default=4096,
)
QWEN3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, use_sliding=Flag("use_sliding_window", False),
    window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS, sliding_default=4096,
)
PHI3 = GqaProfile()
MIXTRAL = GqaProfile(moe=MoeFields("num_local_experts", "intermediate_size", module="block_sparse_moe"))
QWEN3_MOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, use_sliding=Flag("use_sliding_window", False),
    sliding_default=4096,
    moe=MoeFields("num_experts", "moe_intermediate_size", sparse_schedule=True),
)
GEMMA2 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, attn_norms=2, ffn_norms=2, tie_default=True, sliding_default=4096,
    window_rule=WindowRule.ALTERNATE,
)

# --- The long tail: standard decoders whose math the GQA specs express. Each profile was read off the
# family's modelling file in transformers 5.24 (models/<family>/modeling_<family>.py: which nn.Linear
# layers take a bias and from which config key, which norms a decoder layer owns, the q/k norm
# shape, the sliding-window pattern its config class derives when `layer_types` is absent).
# tests/work/test_work_config_defaults.py holds each against the transformers model built on the
# meta device (parameter count) at its class defaults and with every boolean trait flipped.

# Gemma: Llama's attention (bias from attention_bias); head_dim 256 and tied embeddings come from
# GemmaConfig's defaults.
GEMMA = LLAMA
# Granite, Ernie-4.5 and Helium differ from Llama only in scalar multipliers or bias keys.
GRANITE = LLAMA
ERNIE4_5 = GqaProfile(qkv_bias=Flag("use_bias", False), o_bias=Flag("use_bias", False), mlp_bias=Flag("use_bias", False))
HELIUM = GqaProfile(qkv_bias=ATTN_BIAS)  # o_proj has no bias (modeling_helium.py HeliumAttention)
# Seed-OSS: q/k/v bias from attention_bias, o_proj from attention_out_bias.
SEED_OSS = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=Flag("attention_out_bias", False))
# GLM: q/k/v bias from attention_bias, o_proj without (GlmAttention); GLM-4 adds post-norms after
# attention and MLP (four norms per layer: Glm4DecoderLayer).
GLM = GqaProfile(qkv_bias=ATTN_BIAS)
GLM4 = GqaProfile(qkv_bias=ATTN_BIAS, attn_norms=2, ffn_norms=2)
# OLMo-2/3: post-norms only (two per layer), q_norm/k_norm over the full q/k width.
OLMO2 = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, qk_norm_full=True)
OLMO3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, qk_norm_full=True,
    window_rule=WindowRule.PERIODIC, period_default=4, period_shift=1,  # Olmo3Config: full when (i+1) % 4 == 0
)
# Ministral: every layer slides when sliding_window is set (MinistralConfig); Ministral-3 likewise
# (Ministral3Attention passes sliding_window to every layer).
MINISTRAL = GqaProfile()
# SmolLM3: Llama's biases; sliding only where layer_types says so and use_sliding_window is set.
SMOLLM3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, use_sliding=Flag("use_sliding_window", False), window_rule=WindowRule.NONE,
)
# CWM: no biases; every 4th layer (i % 4 == 0) full, the rest sliding (CwmConfig.__post_init__).
CWM = GqaProfile(window_rule=WindowRule.PERIODIC, period_default=4)
# Gemma-3 (text): Gemma-2's four norms plus per-head q/k norms; full every sliding_window_pattern-th layer.
GEMMA3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, attn_norms=2, ffn_norms=2,
    window_rule=WindowRule.PERIODIC, period_key="sliding_window_pattern", period_default=6, period_shift=1,
)
# VaultGemma: Gemma-2 without the two post-norms (VaultGemmaDecoderLayer deletes them).
VAULTGEMMA = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, window_rule=WindowRule.ALTERNATE)
# EXAONE-4: per-head q/k norms, post-norms only; full every sliding_window_pattern-th layer.
EXAONE4 = GqaProfile(
    qk_norm=QK_NORM, window_rule=WindowRule.PERIODIC, period_key="sliding_window_pattern", period_default=4,
    period_shift=1,
)
# Command-R (Cohere): parallel attention and MLP on one input norm; optional q/k LayerNorms over
# (heads, head_dim). Cohere-2 adds the sliding pattern and drops the q/k norms.
COHERE = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=Flag("use_qk_norm", False), qk_norm_full=True, ffn_norms=0)
COHERE2 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, ffn_norms=0, window_rule=WindowRule.PERIODIC,
    period_key="sliding_window_pattern", period_default=4, period_shift=1,
)
# HunYuan dense: per-head q/k norms (query_layernorm / key_layernorm).
HUNYUAN_DENSE = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM)
# HyperCLOVA X: Llama plus optional post-norms (use_post_norm).
HYPERCLOVAX = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, post_norms=Flag("use_post_norm", True))
# Qwen2-MoE: q/k/v bias from qkv_bias; Qwen's sparse schedule; one sigmoid-gated shared expert.
QWEN2_MOE = GqaProfile(
    qkv_bias=Flag("qkv_bias", True), use_sliding=Flag("use_sliding_window", False),
    window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS,
    moe=MoeFields(
        "num_experts", "moe_intermediate_size", shared_key="shared_expert_intermediate_size", shared_gate=True,
        sparse_schedule=True,
    ),
)
# OLMoE: q/k norms over the full width; every layer MoE (num_experts × intermediate_size).
OLMOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, qk_norm_full=True,
    moe=MoeFields("num_experts", "intermediate_size"),
)
# Granite-MoE: Mixtral-shaped experts (fused input_linear = gate+up); the shared variant adds an
# ungated shared MLP of shared_intermediate_size.
GRANITE_MOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS,
    moe=MoeFields("num_local_experts", "intermediate_size", module="block_sparse_moe", router_module="router"),
)
# MiniMax-M2: q/k norms over the full width; every layer MoE with a sigmoid router and a score-correction
# vector (MiniMaxM2SparseMoeBlock.e_score_correction_bias), experts of intermediate_size.
MINIMAX_M2 = GqaProfile(
    qk_norm=QK_NORM, qk_norm_full=True,
    moe=MoeFields("num_local_experts", "intermediate_size", score_bias=True),
)
# GLM-4.5 (Glm4Moe): GLM's q/k/v bias, optional per-head q/k norms (use_qk_norm); DeepSeek-style MoE
# after first_k_dense_replace dense layers, n_shared_experts × moe_intermediate_size shared experts,
# sigmoid router with score correction (Glm4MoeTopkRouter).
GLM4_MOE = GqaProfile(
    qkv_bias=ATTN_BIAS, qk_norm=Flag("use_qk_norm", False),
    moe=MoeFields(
        "n_routed_experts", "moe_intermediate_size", shared_count_key="n_shared_experts",
        first_dense_key="first_k_dense_replace", score_bias=True, shared_module="shared_experts",
    ),
)
# Arcee (AFM): Llama with an ungated relu² MLP (ArceeMLP: up_proj → act → down_proj).
ARCEE = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_gated=False)
# StarCoder2: LayerNorms with biases, every projection's bias from use_bias, an ungated c_fc → gelu →
# c_proj MLP (Starcoder2MLP), sliding window on every layer when set.
STARCODER2 = GqaProfile(
    qkv_bias=Flag("use_bias", True), o_bias=Flag("use_bias", True), mlp_bias=Flag("use_bias", True), mlp_gated=False,
    norm_bias=True,
)
# StableLM: LayerNorms with biases, q/k/v bias from use_qkv_bias (o_proj none), optional per-head q/k
# LayerNorms without bias (qk_layernorm: heads × head_dim weights), and a parallel block without the
# FFN norm when use_parallel_residual.
STABLELM = GqaProfile(
    qkv_bias=Flag("use_qkv_bias", False), qk_norm=Flag("qk_layernorm", False), qk_norm_full=True,
    parallel=Flag("use_parallel_residual", False), norm_bias=True,
)
# Jais-2: every projection biased (attention_bias, mlp_bias), an ungated relu² MLP, LayerNorms with biases.
JAIS2 = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_gated=False, norm_bias=True)
# Mellum: per-head q/k norms; sliding/full per layer_types; MoE or dense per mlp_layer_types
# (MellumDecoderLayer), experts of moe_intermediate_size.
MELLUM = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, window_rule=WindowRule.NONE,
    moe=MoeFields("num_local_experts", "moe_intermediate_size", layer_types=True),
)
# Solar Open: every layer MoE (SolarOpenDecoderLayer), n_shared_experts × moe_intermediate_size shared
# experts, sigmoid router with score correction.
SOLAR_OPEN = GqaProfile(
    qkv_bias=ATTN_BIAS,
    moe=MoeFields(
        "n_routed_experts", "moe_intermediate_size", shared_count_key="n_shared_experts", score_bias=True,
        shared_module="shared_experts",
    ),
)
# GPT-NeoX: fused query_key_value and dense with attention_bias, an ungated dense_h_to_4h → gelu →
# dense_4h_to_h MLP with biases, LayerNorms with biases (the parallel residual changes no weights).
GPT_NEOX = GqaProfile(
    qkv_bias=Flag("attention_bias", True), o_bias=Flag("attention_bias", True), mlp_bias=ALWAYS, mlp_gated=False,
    norm_bias=True,
)
# Emu3 (text model): Llama's layers (Emu3Attention / Emu3DecoderLayer subclass Llama's).
EMU3 = LLAMA
# FlexOlmo: OLMo-2's post-norms and full-width q/k norms with OLMoE's experts.
FLEX_OLMO = OLMOE
# Granite-SWA / GraniteMoE-SWA: Granite's (GraniteMoE's) layers plus one learned sink logit per head
# (GraniteSWAAttention.sinks); without layer_types every 4th layer from 0 is full, the rest slide over
# sliding_window (default 128) (models/granite_swa, granitemoe_swa configuration __post_init__).
GRANITE_SWA = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, sinks=True, sliding_default=128, window_rule=WindowRule.PERIODIC,
    period_default=4,
)
GRANITE_MOE_SWA = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, sinks=True, sliding_default=128, window_rule=WindowRule.PERIODIC,
    period_default=4,
    moe=MoeFields("num_local_experts", "intermediate_size", module="block_sparse_moe", router_module="router"),
)
# Apertus (and Apertus-1.5 text): Llama's attention biases, per-head q/k norms, an ungated up → xIELU →
# down MLP without biases (ApertusMLP bias=False) whose activation holds two learned scalars (alpha_p,
# alpha_n) and two persistent scalar buffers (beta, eps) per layer (models/apertus modeling_apertus.py).
APERTUS = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, mlp_gated=False, mlp_bias=NEVER,
    layer_vectors=(("mlp.act_fn.alpha_p", (1,)), ("mlp.act_fn.alpha_n", (1,)), ("mlp.act_fn.beta", ()),
                   ("mlp.act_fn.eps", ())),
)
# Persimmon: fused query_key_value and dense with biases (MHA), optional per-head q/k LayerNorms with
# biases (qk_layernorm), an ungated biased MLP, LayerNorms with biases (models/persimmon).
PERSIMMON = GqaProfile(
    qkv_bias=ALWAYS, o_bias=ALWAYS, qk_norm=Flag("qk_layernorm", True), qk_norm_bias=True, mlp_bias=ALWAYS,
    mlp_gated=False, norm_bias=True,
)
# Phi (1/1.5/2): q/k/v and dense with biases, optional per-head q/k LayerNorms with biases, a parallel
# block on one input LayerNorm (with bias), an ungated biased fc1 → gelu → fc2 MLP, a biased lm_head
# (models/phi modeling_phi.py).
PHI = GqaProfile(
    qkv_bias=ALWAYS, o_bias=ALWAYS, qk_norm=Flag("qk_layernorm", False), qk_norm_bias=True, ffn_norms=0,
    norm_bias=True, mlp_gated=False, mlp_bias=ALWAYS, head_bias=ALWAYS,
)
# OLMo (1): q/k/v/o biases from attention_bias, a SwiGLU MLP without biases (OlmoMLP bias=False), and
# non-parametric LayerNorms (OlmoLayerNorm has no weight): no norm weights anywhere (models/olmo).
OLMO = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_bias=NEVER, norm_weights=False)
# Nemotron (3/4, NemotronForCausalLM): Llama's attention biases, an ungated up → relu² → down MLP with
# mlp_bias, LayerNorm1P norms with biases (models/nemotron modeling_nemotron.py).
NEMOTRON = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_gated=False, norm_bias=True)
# ERNIE-4.5-MoE: ERNIE-4.5's use_bias on every projection, MoE layers by moe_layer_interval between
# moe_layer_start_index and moe_layer_end_index, moe_num_shared_experts × moe_intermediate_size of shared
# expert (biased like the dense MLP), a router with a per-expert score-correction vector
# (Ernie4_5_MoeStatics), unbiased experts and an lm_head biased by use_bias (models/ernie4_5_moe).
ERNIE4_5_MOE = GqaProfile(
    qkv_bias=Flag("use_bias", False), o_bias=Flag("use_bias", False), mlp_bias=Flag("use_bias", False),
    moe=MoeFields("moe_num_experts", "moe_intermediate_size", top_k_key="moe_k", shared_count_key="moe_num_shared_experts",
                  shared_module="shared_experts", score_bias=True, interval_schedule=True,
                  shared_bias=Flag("use_bias", False)),
    head_bias=Flag("use_bias", False),  # Ernie4_5_MoeForCausalLM.lm_head bias=config.use_bias
)
# EXAONE-MoE: EXAONE-4's attention (per-head q/k norms, no biases, full every sliding_window_pattern-th
# layer), unbiased MLPs, DeepSeekMoE after the first first_k_dense_replace dense layers (or per
# mlp_layer_types): a sigmoid router with a score-correction buffer and num_shared_experts ×
# moe_intermediate_size of shared expert (models/exaone_moe).
EXAONE_MOE = GqaProfile(
    qk_norm=QK_NORM, mlp_bias=NEVER, window_rule=WindowRule.PERIODIC, period_key="sliding_window_pattern",
    period_default=4, period_shift=1,
    moe=MoeFields("num_experts", "moe_intermediate_size", shared_count_key="num_shared_experts",
                  first_dense_key="first_k_dense_replace", layer_types=True, score_bias=True,
                  shared_module="shared_experts"),
)
# HunYuan-MoE-V1: HunYuan dense attention (per-head q/k norms, biases from attention_bias); every layer
# a MoE of num_experts gated experts of intermediate_size, top moe_topk, a router `gate.wg` without
# bias, and an unbiased shared MLP of intermediate_size (HunYuanMoEV1Moe.shared_mlp). moe_topk may be a
# per-layer list, as Hunyuan-A13B's config.json states it (HunYuanMoEV1Gate reads [layer_idx]); a num_experts
# list is refused, as HunYuanMoEV1Config refuses it (models/hunyuan_v1_moe).
HUNYUAN_MOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM,
    moe=MoeFields("num_experts", "intermediate_size", top_k_key="moe_topk", shared_key="intermediate_size",
                  shared_module="shared_mlp", router_module="gate.wg", per_layer_top_k=True),
)
# dots.llm1 (Dots1): Qwen3's attention (per-head q/k norms, biases from attention_bias; sliding from
# max_window_layers on when sliding_window is set), unbiased MLPs, DeepSeekMoE after
# first_k_dense_replace dense layers with a score-correction buffer and n_shared_experts ×
# moe_intermediate_size of shared expert (models/dots1).
DOTS1 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, mlp_bias=NEVER, sliding_default=4096,
    window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS,
    moe=MoeFields("n_routed_experts", "moe_intermediate_size", shared_count_key="n_shared_experts",
                  first_dense_key="first_k_dense_replace", score_bias=True, shared_module="shared_experts"),
)
GRANITE_MOE_SHARED = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS,
    moe=MoeFields(
        "num_local_experts", "intermediate_size", module="block_sparse_moe", router_module="router",
        shared_key="shared_intermediate_size", shared_module="shared_mlp",
    ),
)
GPT_OSS = GqaProfile(
    qkv_bias=Flag("attention_bias", True), o_bias=Flag("attention_bias", True), sliding_default=128,
    window_rule=WindowRule.ALTERNATE, sinks=True,
    moe=MoeFields("num_local_experts", "intermediate_size", expert_bias=True, router_bias=True, router_module="router"),
)


def layer_windows(view: ConfigView, layers: int, profile: GqaProfile) -> list[int | None]:
    """Per layer, the sliding window W or None (full causal attention)."""
    window = view.opt_int_or_null("sliding_window", profile.sliding_default) if profile.use_sliding.read(view) else None
    types = view.layer_types(layers)
    if types is not None:
        out: list[int | None] = []
        for i, kind in enumerate(types):
            if kind == "full_attention":
                out.append(None)
            elif kind == "sliding_attention":
                if window is None:
                    raise ConfigError(
                        f"config.json ({view.arch}): layer_types[{i}] is sliding_attention but sliding_window is "
                        "unset; add sliding_window"
                    )
                out.append(window)
            else:
                raise ConfigError(
                    f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not supported for this architecture "
                    "(expected full_attention or sliding_attention)"
                )
        return out
    if window is None:
        return [None] * layers
    if profile.window_rule is WindowRule.ALL:
        return [window] * layers
    if profile.window_rule is WindowRule.ALTERNATE:
        return [window if i % 2 == 0 else None for i in range(layers)]
    if profile.window_rule is WindowRule.NONE:
        return [None] * layers
    if profile.window_rule is WindowRule.PERIODIC:
        period = view.opt_int(profile.period_key, profile.period_default) if profile.period_key else profile.period_default
        return [None if (i + profile.period_shift) % period == 0 else window for i in range(layers)]
    first = view.req_int("max_window_layers", minimum=0)
    return [window if i >= first else None for i in range(layers)]


def build_gqa_decoder(profile: GqaProfile, view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    head_dim = view.head_dim(frame.heads, frame.hidden)
    kv_heads = view.kv_heads(frame.heads)
    qkv_bias, o_bias = profile.qkv_bias.read(view), profile.o_bias.read(view)
    attn_norms, ffn_norms = profile.attn_norms, profile.ffn_norms
    if profile.post_norms is not None and profile.post_norms.read(view):
        attn_norms, ffn_norms = 2, 2
    if profile.parallel.read(view):
        ffn_norms = 0
    if not profile.norm_weights:
        attn_norms = ffn_norms = 0
    ffns = ffn_schedule(view, frame.hidden, frame.layers, profile.moe, ffn_norms, profile.mlp_bias, profile.mlp_gated)
    layers = []
    for i, window in enumerate(layer_windows(view, frame.layers, profile)):
        attn = GqaAttention(
            hidden=frame.hidden,
            heads=frame.heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            window=window,
            q_bias=qkv_bias,
            kv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=profile.qk_norm.read(view),
            qk_norm_full=profile.qk_norm_full,
            qk_norm_bias=profile.qk_norm_bias,
            sinks=profile.sinks,
            block_norms=attn_norms,
        )
        layers.append(LayerSpec(attn, ffns[i]))
    spec = finish(view, frame, layers, profile.tie_default, norm_bias=profile.norm_bias)
    extras = tuple(Weight("extra", module, WeightKind.VECTOR, shape) for module, shape in profile.layer_vectors)
    return replace(spec, head_bias=profile.head_bias.read(view), final_norm=profile.norm_weights,
                   layer_extras=extras)

"""This year's dense and MoE decoders (part A of the long tail), each mapped onto the specs explicitly.

Every mapping below was read off the family's transformers 5.24 files (models/<family>/modeling_<family>.py
and configuration_<family>.py); the comment above each names what the family differs in from the
builder it reuses. tests/work/test_work_config_defaults.py holds each against the transformers model
built on the meta device (total parameter count) at its class defaults, stripped to the frame fields,
with every boolean weight trait flipped, and against transformers' resolved dimensions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders import gqa, mla
from graphsim.work.builders.common import NEVER, Flag, Frame, MoeFields, finish, read_frame
from graphsim.work.builders.gqa import ATTN_BIAS, QK_NORM, GqaProfile, WindowRule
from graphsim.work.config import ConfigView
from graphsim.work.specs import (
    DenseFfn, GqaAttention, LayerSpec, LayerStack, MlaAttention, ModelSpec, MoeFfn, Weight, WeightKind,
)

M, NORM, VEC = WeightKind.MATRIX, WeightKind.NORM, WeightKind.VECTOR


def _map_layers(spec: ModelSpec, fn: Callable[[int, LayerSpec], LayerSpec]) -> ModelSpec:
    return replace(spec, stack=LayerStack(tuple(fn(i, layer) for i, layer in enumerate(spec.stack.layers))))


def _raw(view: ConfigView, key: str) -> Any:
    """A field as stated, else the config class's default (for fields that are neither int nor bool)."""
    return view.cfg[key] if key in view.cfg else view.defaults.get(key)


def _mlp_kinds(view: ConfigView, layers: int, first_dense: int) -> tuple[str, ...]:
    """`mlp_layer_types` ("dense" / "sparse" per layer) when stated, else the first `first_dense` dense."""
    kinds = view.opt_str_list("mlp_layer_types")
    if kinds is None:
        return tuple("dense" if i < first_dense else "sparse" for i in range(layers))
    if len(kinds) != layers or any(k not in ("dense", "sparse") for k in kinds):
        raise ConfigError(
            f"config.json ({view.arch}): mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} "
            "layers; fix the config"
        )
    return kinds


def _windows(view: ConfigView, layers: int, derived: Callable[[int], bool]) -> list[int | None]:
    """Per layer the sliding window or None: `layer_types` when stated, else `derived(i)` says sliding."""
    window = view.opt_int_or_null("sliding_window", None)
    types = view.layer_types(layers) or tuple(
        "sliding_attention" if derived(i) else "full_attention" for i in range(layers)
    )
    out: list[int | None] = []
    for i, kind in enumerate(types):
        if kind not in ("full_attention", "sliding_attention"):
            raise ConfigError(
                f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not supported for this architecture "
                "(expected full_attention or sliding_attention)"
            )
        if kind == "sliding_attention" and window is None:
            raise ConfigError(
                f"config.json ({view.arch}): layer_types[{i}] is sliding_attention but sliding_window is unset; "
                "add sliding_window"
            )
        out.append(window if kind == "sliding_attention" else None)
    return out


# --- Phi-3.5-MoE (PhimoeForCausalLM) ---------------------------------------------------------------
# models/phimoe: LlamaAttention (q/k/v/o bias from attention_bias), LayerNorms with a bias (input,
# post-attention and the final norm: nn.LayerNorm elementwise_affine), Mixtral-shaped experts
# (num_local_experts × intermediate_size, gate_up fused) behind a router `mlp.router` without bias,
# lm_head bias from lm_head_bias; sliding_window, when set, masks every layer (PhimoeModel picks
# create_sliding_window_causal_mask for all layers). The sparsemixer routing is elementwise.
PHIMOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, norm_bias=True, mlp_bias=NEVER, head_bias=Flag("lm_head_bias", False),
    moe=MoeFields("num_local_experts", "intermediate_size", router_module="router"),
)


# --- Command A MoE (Cohere2MoeForCausalLM) ------------------------------------------------------------
def build_cohere2_moe(view: ConfigView) -> ModelSpec:
    """models/cohere2_moe: Cohere-2's parallel block (attention and FFN read one input norm, an RMSNorm
    when rms_norm_eps is set else a LayerNorm without bias: one weight either way), q/k/v/o bias from
    attention_bias, no q/k norms. FFN per mlp_layer_types: "dense" a gated MLP of
    prefix_dense_intermediate_size (else intermediate_size), "sparse" num_experts experts of
    intermediate_size (Cohere2MoeExperts), a router `mlp.gate` without bias, and a shared MLP of
    num_shared_experts × intermediate_size when num_shared_experts > 0. Without layer_types /
    mlp_layer_types, Cohere2MoeConfig.__post_init__ makes the first first_k_dense_replace layers dense
    (full every prefix_dense_sliding_window_pattern-th of them) and the rest full every
    sliding_window_pattern-th layer, the others sliding."""
    frame = read_frame(view)
    first_dense = view.opt_int("first_k_dense_replace", 0, minimum=0)
    prefix_period = view.opt_int("prefix_dense_sliding_window_pattern", 1)
    period = view.opt_int("sliding_window_pattern", 4)

    def sliding(i: int) -> bool:
        return (i + 1) % prefix_period != 0 if i < first_dense else (i - first_dense + 1) % period != 0

    windows = _windows(view, frame.layers, sliding)
    kinds = _mlp_kinds(view, frame.layers, first_dense)
    bias = view.opt_bool("attention_bias", False)
    width = view.req_int("intermediate_size")
    experts, top_k = view.req_int("num_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_experts {experts}; "
                          "fix the config")
    moe = MoeFfn(
        hidden=frame.hidden, expert_intermediate=width, experts=experts, top_k=top_k,
        shared_intermediate=view.opt_int("num_shared_experts", 0, minimum=0) * width, block_norms=0,
        shared_module="shared_experts",
    )
    dense = DenseFfn(frame.hidden, view.opt_int("prefix_dense_intermediate_size", width), block_norms=0)
    layers = [
        LayerSpec(
            GqaAttention(
                hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads),
                head_dim=view.head_dim(frame.heads, frame.hidden), window=window, q_bias=bias, kv_bias=bias, o_bias=bias,
            ),
            moe if kind == "sparse" else dense,
        )
        for window, kind in zip(windows, kinds, strict=True)
    ]
    return finish(view, frame, layers, tie_default=True)


# --- Trinity (AfmoeForCausalLM) -------------------------------------------------------------------
# models/afmoe: LlamaAttention (q/k/v/o bias from attention_bias) with per-head q/k RMSNorms and a
# separate unbiased output gate gate_proj (hidden → heads·head_dim, sigmoid per channel); four norms
# per layer (input, post-attention, pre-MLP, post-MLP); layers below num_dense_layers a gated MLP of
# intermediate_size, the rest num_experts experts of moe_intermediate_size, a router `mlp.router.gate`,
# a per-expert selection bias `mlp.expert_bias` (sigmoid scores + bias pick the top-k, as noaux_tc) and
# num_shared_experts × moe_intermediate_size of shared MLP; MLPs without bias (Qwen2MoeMLP). Without
# layer_types, AfmoeConfig.__post_init__ makes every global_attn_every_n_layers-th layer full
# ((i + 1) % n == 0), the rest sliding. mup_enabled only scales activations.
AFMOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=QK_NORM, attn_norms=2, ffn_norms=2, mlp_bias=NEVER,
    window_rule=WindowRule.PERIODIC, period_key="global_attn_every_n_layers", period_default=4, period_shift=1,
    moe=MoeFields("num_experts", "moe_intermediate_size", shared_count_key="num_shared_experts",
                  first_dense_key="num_dense_layers", score_bias=True, router_module="router.gate",
                  shared_module="shared_experts"),
)


def build_afmoe(view: ConfigView) -> ModelSpec:
    def gate(_: int, layer: LayerSpec) -> LayerSpec:
        attn = layer.attn
        assert isinstance(attn, GqaAttention)
        g = Weight("qkv", "self_attn.gate_proj", M, (attn.heads * attn.head_dim, attn.hidden))
        return replace(layer, attn_extras=(g,))

    return _map_layers(gqa.build_gqa_decoder(AFMOE, view), gate)


# --- Laguna (LagunaForCausalLM) -------------------------------------------------------------------
def build_laguna(view: ConfigView) -> ModelSpec:
    """models/laguna: AfmoeAttention's q/k/v/o (bias from attention_bias) and per-head q/k RMSNorms with a
    per-layer head count (num_attention_heads_per_layer, else num_attention_heads everywhere), no sigmoid
    gate_proj but a softplus output gate g_proj without bias: one gate per head (hidden → heads) when
    `gating` is true or "per-head", else one per channel (hidden → heads·head_dim). Two norms per layer.
    FFN per mlp_layer_types (LagunaConfig.__post_init__: layer 0 dense, the rest sparse): a gated MLP of
    intermediate_size, or num_experts experts of moe_intermediate_size with a sigmoid router `mlp.gate`,
    its e_score_correction_bias, and a gated shared MLP `mlp.shared_experts` of
    shared_expert_intermediate_size (no shared-expert gate); MLPs without bias (Qwen2MoeMLP). Sliding
    layers per layer_types (default: all full)."""
    frame = read_frame(view)
    head_dim = view.head_dim(frame.heads, frame.hidden)
    kv_heads = view.kv_heads(frame.heads)
    heads = view.opt_int_list("num_attention_heads_per_layer") or (frame.heads,) * frame.layers
    if len(heads) != frame.layers or any(h < 1 or h % kv_heads for h in heads):
        raise ConfigError(
            f"config.json ({view.arch}): num_attention_heads_per_layer must give each of the {frame.layers} layers a "
            f"positive multiple of num_key_value_heads {kv_heads}; fix the config"
        )
    gating = _raw(view, "gating")
    per_head = gating is True or gating == "per-head"
    bias = view.opt_bool("attention_bias", False)
    windows = _windows(view, frame.layers, lambda i: False)
    kinds = _mlp_kinds(view, frame.layers, 1)
    experts, top_k = view.req_int("num_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_experts {experts}; "
                          "fix the config")
    moe = MoeFfn(
        hidden=frame.hidden, expert_intermediate=view.req_int("moe_intermediate_size"), experts=experts, top_k=top_k,
        router_score_bias=True, shared_intermediate=view.opt_int("shared_expert_intermediate_size", 0, minimum=0),
        shared_module="shared_experts",
    )
    dense = DenseFfn(frame.hidden, view.req_int("intermediate_size"))
    layers = []
    for h, window, kind in zip(heads, windows, kinds, strict=True):
        attn = GqaAttention(
            hidden=frame.hidden, heads=h, kv_heads=kv_heads, head_dim=head_dim, window=window, q_bias=bias,
            kv_bias=bias, o_bias=bias, qk_norm=True,
        )
        g = Weight("qkv", "self_attn.g_proj", M, (h if per_head else h * head_dim, frame.hidden))
        layers.append(LayerSpec(attn, moe if kind == "sparse" else dense, attn_extras=(g,)))
    return finish(view, frame, layers, tie_default=False)


# --- nanochat (NanoChatForCausalLM) ---------------------------------------------------------------
# models/nanochat: Qwen3Attention's q/k/v/o (bias from attention_bias) with weightless q/k norms, every
# norm a parameter-free RMS norm (NanoChatRMSNorm = Llama4TextL2Norm: no weight, the final norm too),
# an ungated fc1 → relu² → fc2 MLP without bias; no sliding layers; final_logit_softcapping is elementwise.
NANOCHAT = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_gated=False, mlp_bias=NEVER, norm_weights=False)


# --- BitNet b1.58 (BitNetForCausalLM) -------------------------------------------------------------
def build_bitnet(view: ConfigView) -> ModelSpec:
    """models/bitnet: Llama's layers (q/k/v/o bias from attention_bias, a gated relu² MLP without bias:
    GemmaMLP) plus two sub-norms: attn_sub_norm (hidden_size) on the attention output before o_proj and
    ffn_sub_norm (intermediate_size) on the MLP's gated product before down_proj."""
    spec = gqa.build_gqa_decoder(GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_bias=NEVER), view)
    inter = view.req_int("intermediate_size")

    def sub_norms(_: int, layer: LayerSpec) -> LayerSpec:
        return replace(
            layer,
            attn_extras=(Weight("norm", "self_attn.attn_sub_norm", NORM, (spec.hidden,)),),
            ffn_extras=(Weight("norm", "mlp.ffn_sub_norm", NORM, (inter,)),),
        )

    return _map_layers(spec, sub_norms)


# --- Differential Transformer (DiffLlamaForCausalLM) ----------------------------------------------
def build_diffllama(view: ConfigView) -> ModelSpec:
    """models/diffllama: Llama's projections (bias from attention_bias on q/k/v/o; MLP without bias) and
    differential attention (arXiv:2410.05258): softmax(Q1K1ᵀ) − λ·softmax(Q2K2ᵀ) over head pairs, with
    four learned vectors per layer (lambda_q1, lambda_k1, lambda_q2, lambda_k2, head_dim each) and a
    weightless RMS group norm. Its work: the scores of every (query head, key) pair as plain GQA; the
    two maps of a head pair combine elementwise before one value product of width 2·head_dim per pair,
    which is the value work of plain GQA (H/2 pairs × 2·head_dim), so the core counts as GQA. KV cache:
    plain GQA (k and v of kv_heads·head_dim)."""
    spec = gqa.build_gqa_decoder(GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, mlp_bias=NEVER), view)
    kv_heads = {la.attn.kv_heads for la in spec.stack.layers if isinstance(la.attn, GqaAttention)}
    if any(k % 2 for k in kv_heads):
        raise ConfigError(f"config.json ({view.arch}): differential attention splits V over the KV heads, so "
                          f"num_key_value_heads must be even (DiffLlamaAttention), not {min(kv_heads)}; fix the config")

    def lambdas(_: int, layer: LayerSpec) -> LayerSpec:
        attn = layer.attn
        assert isinstance(attn, GqaAttention)
        names = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
        return replace(layer, attn_extras=tuple(Weight("core", f"self_attn.{n}", VEC, (attn.head_dim,)) for n in names))

    return _map_layers(spec, lambdas)


# --- A.X K1 (AXK1ForCausalLM) ----------------------------------------------------------------------
# models/axk1: DeepSeek-V3's MLA and DeepSeekMoE (sigmoid router with e_score_correction_bias, shared
# experts n_shared_experts × moe_intermediate_size, MLPs without bias), layers per mlp_layer_types
# (AXK1Config.__post_init__: dense below first_k_dense_replace, default 1, and where i % moe_layer_freq),
# plus a post_mlp_layernorm (RMSNorm, hidden) on the MoE block's output (AXK1MoE) — MoE layers only.
AXK1 = mla.MlaProfile(first_k_dense_default=1, topk_method_default="noaux_tc", mlp_bias=NEVER)


def build_axk1(view: ConfigView) -> ModelSpec:
    def post_norm(_: int, layer: LayerSpec) -> LayerSpec:
        if not isinstance(layer.ffn, MoeFfn):
            return layer
        return replace(layer, ffn_extras=(Weight("norm", "mlp.post_mlp_layernorm", NORM, (layer.ffn.hidden,)),))

    return _map_layers(mla.build_mla_decoder(AXK1, view), post_norm)


# --- DBRX (DbrxForCausalLM) -----------------------------------------------------------------------
# DbrxAttentionConfig / DbrxFFNConfig defaults (models/dbrx/configuration_dbrx.py): the nested
# attn_config / ffn_config dicts the accountant reads (the table holds only the top-level class's).
_DBRX_ATTN = {"kv_n_heads": 1}
_DBRX_FFN = {"ffn_hidden_size": 3584, "moe_num_experts": 4, "moe_top_k": 1}


def _sub(view: ConfigView, key: str, defaults: dict[str, int]) -> ConfigView:
    sub = _raw(view, key) or {}
    if not isinstance(sub, dict):
        raise ConfigError(f"config.json ({view.arch}) field '{key}' is {sub!r}, not an object; fix the config")
    inner = ConfigView(defaults | {k: v for k, v in sub.items() if v is not None}, view.arch)
    inner.defaults = {}  # its fields default to the sub-config class's, not the top-level class's
    return inner


def build_dbrx(view: ConfigView) -> ModelSpec:
    """models/dbrx: fused Wqkv (q of d_model, k and v of attn_config.kv_n_heads × head_dim, no bias) and
    out_proj without bias, head_dim = d_model / n_heads (DbrxAttention); two LayerNorms without bias per
    layer (norm_1, norm_2) and the final norm_f; every layer a MoE of ffn_config.moe_num_experts gated
    experts (w1, v1, w2) of ffn_hidden_size, top ffn_config.moe_top_k, router `ffn.router.layer` without
    bias; never tied (DbrxConfig refuses tie_word_embeddings). clip_qkv clamps elementwise."""
    frame = read_frame(view)
    attn_cfg, ffn_cfg = _sub(view, "attn_config", _DBRX_ATTN), _sub(view, "ffn_config", _DBRX_FFN)
    if frame.hidden % frame.heads:
        raise ConfigError(f"config.json ({view.arch}): d_model {frame.hidden} is not divisible by n_heads {frame.heads}; "
                          "fix the config")
    kv_heads = attn_cfg.req_int("kv_n_heads")
    if frame.heads % kv_heads:
        raise ConfigError(f"config.json ({view.arch}): n_heads {frame.heads} is not a multiple of attn_config.kv_n_heads "
                          f"{kv_heads}; fix the config")
    experts, top_k = ffn_cfg.req_int("moe_num_experts"), ffn_cfg.req_int("moe_top_k")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): ffn_config.moe_top_k {top_k} exceeds moe_num_experts {experts}; "
                          "fix the config")
    if view.opt_bool("tie_word_embeddings", False):
        raise ConfigError(f"config.json ({view.arch}): DBRX does not tie its embeddings (DbrxConfig refuses "
                          "tie_word_embeddings: true); set it to false")
    attn = GqaAttention(hidden=frame.hidden, heads=frame.heads, kv_heads=kv_heads, head_dim=frame.hidden // frame.heads)
    moe = MoeFfn(hidden=frame.hidden, expert_intermediate=ffn_cfg.req_int("ffn_hidden_size"), experts=experts,
                 top_k=top_k, module="ffn", router_module="router.layer")
    return finish(view, frame, [LayerSpec(attn, moe)] * frame.layers, tie_default=False)


# --- Cohere Compass / North (CohereCompassForCausalLM, the text model) --------------------------------
# models/cohere_compass: CohereCompassTextModel is Cohere-2's decoder (parallel attention and MLP on one
# LayerNorm without bias, q/k/v/o bias from attention_bias, a gated MLP without bias) with per-layer-type
# rope (NoPE layers change no weights); without layer_types every layer is full attention
# (CohereCompassTextConfig.__post_init__), sliding_window applies to layers the config names sliding.
COHERE_COMPASS = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, ffn_norms=0, mlp_bias=NEVER, window_rule=WindowRule.NONE)


# --- JetMoE (JetMoeForCausalLM) -------------------------------------------------------------------
def build_jetmoe(view: ConfigView) -> ModelSpec:
    """models/jetmoe: mixture of attention heads (JetMoeMoA, arXiv:2404.07413) — num_local_experts routed
    q/o expert pairs (input_linear: hidden → kv_heads·kv_channels, output_linear back, no bias) behind a
    router `self_attention.experts.router.layer`, top num_experts_per_tok per token, one bias vector after
    the experts combine, and one shared kv_proj (hidden → 2·kv_heads·kv_channels, no bias); each chosen
    expert's query heads attend the same K/V (key_states.repeat(1, top_k)), so the layer has
    kv_heads·top_k query heads (JetMoeConfig.__post_init__ sets num_attention_heads to exactly that,
    whatever the config states) and caches kv_heads heads of kv_channels. FFN: num_local_experts gated
    experts of intermediate_size (input_linear fuses gate and up), router `mlp.router.layer`, one bias
    vector after the combine (JetMoeMoE.bias). Two RMSNorms per layer; tied embeddings by default."""
    kv_heads, head_dim = view.req_int("num_key_value_heads"), view.req_int("kv_channels")
    experts, top_k = view.req_int("num_local_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_local_experts {experts}; "
                          "fix the config")
    frame = Frame(hidden=view.req_int("hidden_size"), layers=view.req_int("num_hidden_layers"), heads=kv_heads * top_k,
                  vocab=view.req_int("vocab_size"))
    attn = GqaAttention(hidden=frame.hidden, heads=frame.heads, kv_heads=kv_heads, head_dim=head_dim, o_bias=True,
                        moa_experts=experts, moa_top_k=top_k)
    moe = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("intermediate_size"), experts=experts,
                 top_k=top_k, router_module="router.layer")
    bias = Weight("routed", "mlp.bias", WeightKind.BIAS, (frame.hidden,))
    return finish(view, frame, [LayerSpec(attn, moe, ffn_extras=(bias,))] * frame.layers, tie_default=True)


# --- LongCat-Flash (LongcatFlashForCausalLM) ------------------------------------------------------
def build_longcat_flash(view: ConfigView) -> ModelSpec:
    """models/longcat_flash: each decoder layer holds two MLA sublayers (DeepSeek-V3.2's attention without
    the indexer, LongcatFlashMLA: q LoRA, bias from attention_bias), two dense gated MLPs of
    ffn_hidden_size (`mlps`), four RMSNorms, and one shortcut MoE fed from the first sublayer's
    post-attention norm: n_routed_experts gated experts of expert_ffn_hidden_size plus zero_expert_num
    zero-computation (identity) experts, a softmax router `mlp.router.classifier` over both (bias from
    router_bias) with an e_score_correction_bias buffer, top moe_topk. The accountant counts each
    decoder layer as two layers (transformers' num_hidden_layers = 2·num_layers, one KV cache per MLA
    sublayer): [MLA 0, MoE beside mlps[0]] and [MLA 1, mlps[1]]. A token's top-k picks land on real
    experts k·E/(E + Z) times under uniform routing (12·512/768 = 8 for LongCat-Flash, the average its
    report's expert-bias controller holds; arXiv:2509.01322 §2.1). transformers allocates gate_up_proj
    for the zero experts too (LongcatFlashExperts: total_experts rows, down_proj n_routed_experts), rows
    its forward never reads and the checkpoint does not hold; they are not counted."""
    hidden, heads, vocab = view.req_int("hidden_size"), view.req_int("num_attention_heads"), view.req_int("vocab_size")
    stated = view.opt_int("num_hidden_layers", None)  # LongcatFlashConfig: num_hidden_layers = 2 · num_layers
    blocks = stated // 2 if stated is not None else view.req_int("num_layers")
    frame = Frame(hidden=hidden, layers=2 * blocks, heads=heads, vocab=vocab)
    nope, rope = view.req_int("qk_nope_head_dim"), view.req_int("qk_rope_head_dim")
    qk_head_dim = view.opt_int("qk_head_dim", nope + rope)
    if qk_head_dim != nope + rope:
        raise ConfigError(f"config.json ({view.arch}): qk_head_dim {qk_head_dim} is not qk_nope_head_dim + "
                          f"qk_rope_head_dim ({nope + rope}); fix the config")
    attn = MlaAttention(
        hidden=hidden, heads=heads, q_lora_rank=view.opt_int("q_lora_rank", None), kv_lora_rank=view.req_int("kv_lora_rank"),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=view.req_int("v_head_dim"),
        bias=view.opt_bool("attention_bias", False),
    )
    experts, zero = view.req_int("n_routed_experts"), view.opt_int("zero_expert_num", 0, minimum=0)
    top_k = view.req_int("moe_topk")
    if top_k > experts + zero:
        raise ConfigError(f"config.json ({view.arch}): moe_topk {top_k} exceeds n_routed_experts + zero_expert_num "
                          f"({experts + zero}); fix the config")
    if top_k * experts % (experts + zero):
        raise ConfigError(
            f"config.json ({view.arch}): moe_topk·n_routed_experts ({top_k * experts}) is not a multiple of "
            f"n_routed_experts + zero_expert_num ({experts + zero}); the accountant counts the average real experts "
            "per token, k·E/(E + Z), only when it is whole"
        )
    dense_width = view.req_int("ffn_hidden_size")
    moe = MoeFfn(hidden=hidden, expert_intermediate=view.req_int("expert_ffn_hidden_size"), experts=experts,
                 top_k=top_k, zero_experts=zero, router_score_bias=True, router_bias=view.opt_bool("router_bias", False),
                 dense_intermediate=dense_width, router_module="router.classifier")
    first, second = LayerSpec(attn, moe), LayerSpec(attn, DenseFfn(hidden, dense_width))
    return finish(view, frame, [first, second] * blocks, tie_default=False)


# --- A.X K2 (AXK2ForCausalLM) ----------------------------------------------------------------------
# models/axk2: DeepSeek-V3.2's MLA with the DSA indexer on every layer (layer_types "indexed_attention")
# and DeepSeekMoE (sigmoid router with score correction, n_shared_experts × moe_intermediate_size shared,
# MLPs without bias; mlp_layer_types, else dense below first_k_dense_replace = 1 and where
# i % moe_layer_freq), with two changes: q_gate_proj replaces q_b_proj (reads [norm(q_a), q_a], emits q and a
# per-channel output gate: the MlaAttention q_gate trait), and gated RMSNorms (AXK2GatedRMSNorm: the norm's
# weight plus a low-rank gate MLP fc1 hidden → gated_norm_rank, fc2 back, no bias) as the input norm of every
# layer and as the post-attention norm of the MoE layers (dense layers keep a plain RMSNorm there).
AXK2 = mla.MlaProfile(first_k_dense_default=1, topk_method_default="noaux_tc", sparse_attention=True, mlp_bias=NEVER)


def build_axk2(view: ConfigView) -> ModelSpec:
    types = view.layer_types(view.req_int("num_hidden_layers"))
    if types is not None and any(t != "indexed_attention" for t in types):
        raise ConfigError(f"config.json ({view.arch}): layer_types must be 'indexed_attention' on every layer (the "
                          "only kind AXK2Attention builds); fix the config")
    rank = view.req_int("gated_norm_rank")
    spec = mla.build_mla_decoder(AXK2, view)

    def gate(block: str, hidden: int) -> tuple[Weight, ...]:
        norm = "input_layernorm" if block == "attn" else "post_attention_layernorm"
        return (Weight("norm", f"{norm}.mlp.fc1", M, (rank, hidden)), Weight("norm", f"{norm}.mlp.fc2", M, (hidden, rank)))

    def gated(_: int, layer: LayerSpec) -> LayerSpec:
        attn = layer.attn
        assert isinstance(attn, MlaAttention)
        return replace(layer, attn=replace(attn, q_gate=True), attn_extras=gate("attn", spec.hidden),
                       ffn_extras=gate("ffn", spec.hidden) if isinstance(layer.ffn, MoeFfn) else ())

    return _map_layers(spec, gated)


ARCHITECTURES: dict[str, Callable[[ConfigView], ModelSpec]] = {
    "PhimoeForCausalLM": partial(gqa.build_gqa_decoder, PHIMOE),
    "Cohere2MoeForCausalLM": build_cohere2_moe,
    "AfmoeForCausalLM": build_afmoe,
    "LagunaForCausalLM": build_laguna,
    "NanoChatForCausalLM": partial(gqa.build_gqa_decoder, NANOCHAT),
    "BitNetForCausalLM": build_bitnet,
    "DiffLlamaForCausalLM": build_diffllama,
    "AXK1ForCausalLM": build_axk1,
    "DbrxForCausalLM": build_dbrx,
    "JetMoeForCausalLM": build_jetmoe,
    "LongcatFlashForCausalLM": build_longcat_flash,
    "AXK2ForCausalLM": build_axk2,
    "CohereCompassForCausalLM": partial(gqa.build_gqa_decoder, COHERE_COMPASS),
}

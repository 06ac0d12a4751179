"""Linear-attention and recurrent families: Kimi Linear / Kimi-K3 (KDA + MLA), MiniMax-Text-01 (lightning
attention + softmax), MiniMax-M3 (softmax attention with a block top-k indexer), OLMo Hybrid, the Ling /
Bailing hybrid, RecurrentGemma, RWKV-4 and xLSTM (each builder's docstring says what it read where).

Each mapping is read off the transformers 5.24 modelling file named below; the per-request state
follows vLLM's `MambaStateShapeCalculator` / `MambaStateDtypeCalculator`
(vllm/model_executor/layers/mamba/mamba_utils.py).

**Kimi Linear** (`KimiLinearForCausalLM`; transformers models/kimi_linear): `layer_types` (else
`linear_attn_config.full_attn_layers` / `kda_layers`, 1-indexed, else full attention on every layer
i > 0 with i % 4 == 0), `mlp_layer_types` (else dense below `first_k_dense_replace`, default 1).
- KDA layers (`KimiLinearDeltaAttention`, H = linear_num_heads / linear_attn_config.num_heads heads
  of d = head_dim): q/k/v_proj (H·d × hidden each), one depthwise conv1d over the 3·H·d q/k/v
  channels (no bias), the forget gate f_a_proj (d × hidden) → f_b_proj (H·d × d) with dt_bias (H·d)
  and A_log (H), b_proj (H × hidden), the output gate g_a_proj (d × hidden) → g_b_proj (H·d × d), a
  per-head gated RMSNorm o_norm (d), o_proj (hidden × H·d). Recurrence (the gated delta rule with a
  per-channel decay): per token and head the state S (d × d) is read with the key (2·d²), takes the
  rank-1 delta update (2·d²) and is read with the query (2·d²): 6·H·d² FLOPs, as the gated delta
  net's (the decay and gates are elementwise). State per request (vLLM kda_state_shape /
  kda_state_dtype): conv 3·H·d × (kernel − 1) in the state dtype, recurrent H × d × d in float32.
- MLA layers (`KimiLinearAttention` = DeepSeek-V3 MLA, NoPE; q_proj when q_lora_rank is null).
- FFN: DeepSeek-V3 MoE (sigmoid router with the e_score_correction_bias buffer, n_shared_experts ×
  moe_intermediate_size shared width) on "sparse" layers, the dense MLP elsewhere.
Kimi-K3's checkpoint (remote code `configuration_kimi_k3` / `modeling_kimi_linear`, which transformers
does not ship: it cannot build K3, whose `hidden_act` "situ" it lacks) adds keys transformers'
class ignores; where the config states them the builder follows vLLM's kimi_linear.py, which loads
that checkpoint: `linear_attn_config.use_full_rank_gate` (one g_proj, H·d × hidden, instead of
g_a/g_b), `mla_use_output_gate` (KimiMLAAttention.g_proj, heads·v_head_dim × hidden),
`routed_expert_hidden_size` (latent MoE: routed_expert_down_proj hidden → latent, the experts in the
latent width, routed_expert_norm when `latent_moe_use_norm`, routed_expert_up_proj back; both
unquantized), and `attn_res_block_size` (attention residuals: per layer self_attention_res_norm,
mlp_res_norm and two 1 × hidden projections; once at the end output_attn_res_norm and
output_attn_res_proj). The block-residual mixing itself is elementwise and not counted.

**MiniMax-Text-01** (`MiniMaxForCausalLM`; transformers models/minimax): `layer_types` (default:
full attention on even layers, lightning attention on odd). Full layers: Mixtral attention (no
biases, `sliding_window` when set). Lightning layers (`MiniMaxLightningAttention`, H heads of d =
head_dim or hidden/H): qkv_proj (3·H·d × hidden), output_gate (H·d × hidden), an RMSNorm over H·d,
out_proj (hidden × H·d). Recurrence (linear attention with a per-head decay): per token and head the
state S (d × d) takes kᵀv (2·d²) and is read with q (2·d²): 4·H·d² FLOPs. State per request (vLLM
linear_attention_state_shape / linear_attention_state_dtype): H × d × d in the state dtype. The
class's decay tables (slope_rate, query/key/diagonal_decay) are persistent buffers computed from
the head count and layer index, not learned; vLLM recomputes them (minimax_text_01.py), so they are
not parameters here. Every layer is a Mixtral MoE (router `gate`, no shared expert).

**MiniMax-M3** (`MiniMaxM3VLForCausalLM`, the text model of transformers models/minimax_m3_vl; the
checkpoint's own config names `MiniMaxM3ForCausalLM`, registered as the same model): GQA with
per-head q/k norms; layers whose `layer_types` entry is "minimax_m3_sparse" (else
`sparse_attention_config.sparse_attention_freq`) carry a block top-k indexer (`BlockSparseIndexer`:
q_proj index_n_heads·index_head_dim × hidden, k_proj index_head_dim × hidden, q/k norms; legacy
`sparse_*` keys read as MiniMaxM3VLTextConfig.__post_init__ does) whose selected key blocks are the
only keys the attention reads. `mlp_layer_types` (else `moe_layer_freq`): a dense gated MLP of
dense_intermediate_size, or MoE (router with the score-correction buffer, experts of
intermediate_size, ONE shared expert of shared_intermediate_size whatever n_shared_experts says, as
MiniMaxM3VLSparseMoeBlock builds it). Multi-token-prediction modules are not counted. The index key
cache (one index_head_dim key per position, in the KV dtype) is the one transformers'
MiniMaxM3VLSparseCacheLayer keeps: no vLLM MiniMax-M3 model file was among the sources read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders.common import Frame, dense_ffn, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.dtypes import parse_dtype
from graphsim.work.specs import (
    AttentionSpec, BlockSparseIndexer, DenseFfn, FfnSpec, GatedDeltaNet, GqaAttention, LayerSpec, MlaAttention,
    ModelSpec, MoeFfn, RecurrentMixer, StatePart, Weight, WeightKind,
)

M, NORM, VEC, CONV, BIAS = WeightKind.MATRIX, WeightKind.NORM, WeightKind.VECTOR, WeightKind.CONV, WeightKind.BIAS
FP32 = parse_dtype("float32", "state")


def _sub_int(view: ConfigView, sub: dict[str, Any], key: str, fallback: str) -> int:
    """A positive int from a config sub-dict (the checkpoint's nesting), else the flat field / its class default."""
    if key in sub:
        value = sub[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"config.json ({view.arch}) field '{key}' is {value!r}, not a positive integer; fix the config")
        return value
    return view.req_int(fallback)


def _sub(view: ConfigView, key: str) -> dict[str, Any]:
    value = view.cfg.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config.json ({view.arch}) field '{key}' must be an object; fix the config")
    return value


def _types_from_indices(view: ConfigView, layers: int, sub: dict[str, Any], spec: tuple[tuple[str, str], ...]) -> list[str]:
    """Per-layer types from lists of 1-indexed layer numbers (KimiLinearConfig.__post_init__)."""
    types: list[str | None] = [None] * layers
    for key, kind in spec:
        for index in sub[key]:
            if not isinstance(index, int) or not 1 <= index <= layers:
                raise ConfigError(f"config.json ({view.arch}) linear_attn_config.{key} holds {index!r}; layers are "
                                  f"numbered 1..{layers}")
            types[index - 1] = kind
    missing = [i for i, t in enumerate(types) if t is None]
    if missing:
        raise ConfigError(f"config.json ({view.arch}) linear_attn_config lists no type for layer(s) "
                          f"{[i + 1 for i in missing]}; list each layer in full_attn_layers or kda_layers")
    return [t for t in types if t is not None]


def _check_types(view: ConfigView, types: list[str] | tuple[str, ...], allowed: tuple[str, ...], key: str) -> None:
    for i, kind in enumerate(types):
        if kind not in allowed:
            raise ConfigError(f"config.json ({view.arch}): {key}[{i}] is '{kind}'; expected one of {', '.join(allowed)}")


# --- Kimi Linear / Kimi-K3 ------------------------------------------------------------------------


def kda_mixer(
    hidden: int, heads: int, head_dim: int, kernel: int, full_rank_gate: bool, full_rank_forget: bool = False
) -> RecurrentMixer:
    """Kimi Delta Attention (transformers kimi_linear KimiLinearDeltaAttention; K3's full-rank gate from vLLM
    kimi_linear.py, whose in_proj_qkvgfab stacks q, k, v, g_proj, f_a_proj and b_proj; the Bailing hybrid's
    full-rank forget gate f_proj from transformers bailing_hybrid BailingHybridForgetGate)."""
    sa, p = "self_attn", heads * head_dim
    ws = [Weight("qkv", f"{sa}.{name}_proj", M, (p, hidden)) for name in ("q", "k", "v")]
    ws.append(Weight("core", f"{sa}.conv1d", CONV, (3 * p, kernel)))
    if full_rank_forget:
        ws.append(Weight("qkv", f"{sa}.forget_gate.f_proj", M, (p, hidden)))
    else:
        ws += [Weight("qkv", f"{sa}.forget_gate.f_a_proj", M, (head_dim, hidden)),
               Weight("qkv", f"{sa}.forget_gate.f_b_proj", M, (p, head_dim))]
    ws += [
        Weight("core", f"{sa}.forget_gate.dt_bias", VEC, (p,)),
        Weight("core", f"{sa}.forget_gate.A_log", VEC, (heads,)),
        Weight("qkv", f"{sa}.b_proj", M, (heads, hidden)),
    ]
    if full_rank_gate:
        ws.append(Weight("qkv", f"{sa}.g_proj", M, (p, hidden)))
    else:
        ws += [Weight("qkv", f"{sa}.g_a_proj", M, (head_dim, hidden)), Weight("qkv", f"{sa}.g_b_proj", M, (p, head_dim))]
    ws += [Weight("norm", f"{sa}.o_norm", NORM, (head_dim,)), Weight("out", f"{sa}.o_proj", M, (hidden, p))]
    return RecurrentMixer(
        hidden=hidden,
        mechanism="KDA",
        weights=tuple(ws),
        flops_per_token=6 * heads * head_dim * head_dim,
        state=(StatePart("conv", 3 * p, kernel - 1), StatePart("recurrent", heads, head_dim * head_dim, FP32)),
        state_source="vLLM MambaStateShapeCalculator.kda_state_shape, kda_state_dtype",
        activation_width=5 * p + heads + head_dim,  # q, k, v, gate, decay (H·d each), beta, and the output
    )


def _kimi_layer_types(view: ConfigView, layers: int, lin: dict[str, Any]) -> list[str]:
    stated = view.layer_types(layers)
    if stated is not None:
        types = list(stated)
    elif "full_attn_layers" in lin and "kda_layers" in lin:
        types = _types_from_indices(view, layers, lin, (("full_attn_layers", "full_attention"),
                                                        ("kda_layers", "linear_attention")))
    else:  # KimiLinearConfig.__post_init__ default
        types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(layers)]
    _check_types(view, types, ("full_attention", "linear_attention"), "layer_types")
    return types


def _kimi_mlp_types(view: ConfigView, layers: int) -> list[str]:
    stated = view.opt_str_list("mlp_layer_types")
    if stated is not None:
        if len(stated) != layers:
            raise ConfigError(f"config.json ({view.arch}): mlp_layer_types has {len(stated)} entries for {layers} layers; "
                              "fix the config")
        types = list(stated)
    else:  # KimiLinearConfig.__post_init__: first_k_dense_replace (default 1) dense layers, then MoE
        # (KimiLinearConfig reads it from the kwargs with 1 as its default; BailingHybridConfig's field defaults to 2)
        first = view.opt_int("first_k_dense_replace", 1, minimum=0)
        types = ["dense" if i < first else "sparse" for i in range(layers)]
    _check_types(view, types, ("dense", "sparse"), "mlp_layer_types")
    return types


def build_kimi_linear(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    lin = _sub(view, "linear_attn_config")
    heads = _sub_int(view, lin, "num_heads", "linear_num_heads")
    head_dim = _sub_int(view, lin, "head_dim", "linear_head_dim")
    kernel = _sub_int(view, lin, "short_conv_kernel_size", "linear_conv_kernel_dim")
    kda = kda_mixer(frame.hidden, heads, head_dim, kernel, bool(lin.get("use_full_rank_gate", False)))
    q_lora = view.opt_int("q_lora_rank", None)
    mla = MlaAttention(
        hidden=frame.hidden,
        heads=frame.heads,
        q_lora_rank=q_lora,
        kv_lora_rank=view.req_int("kv_lora_rank"),
        qk_nope_head_dim=view.req_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.req_int("qk_rope_head_dim"),
        v_head_dim=view.req_int("v_head_dim"),
        bias=view.opt_bool("attention_bias", False),
        output_gate=frame.heads * view.req_int("v_head_dim") if view.opt_bool("mla_use_output_gate", False) else 0,
    )
    experts, top_k = view.req_int("num_local_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_experts {experts}; "
                          "fix the config")
    moe_width = view.req_int("moe_intermediate_size")
    latent = view.opt_int("routed_expert_hidden_size", 0) or 0
    moe = MoeFfn(
        hidden=frame.hidden,
        expert_intermediate=moe_width,
        experts=experts,
        top_k=top_k,
        router_score_bias=True,  # DeepseekV3TopkRouter.e_score_correction_bias (a persistent buffer)
        shared_intermediate=(view.opt_int("n_shared_experts", 0, minimum=0) or 0) * moe_width,
        latent=latent,
        latent_names=("routed_expert_down_proj", "routed_expert_up_proj"),
        latent_norm="routed_expert_norm" if latent and view.opt_bool("latent_moe_use_norm", False) else "",
        latent_quantizable=False,
    )
    dense = dense_ffn(view, frame.hidden)
    ffns = {"dense": dense, "sparse": moe}
    attns: dict[str, AttentionSpec] = {"full_attention": mla, "linear_attention": kda}
    layers = [LayerSpec(attns[a], ffns[f])
              for a, f in zip(_kimi_layer_types(view, frame.layers, lin), _kimi_mlp_types(view, frame.layers), strict=True)]
    notes: list[str] = []
    spec = finish(view, frame, layers, tie_default=False)
    block = view.opt_int("attn_res_block_size", None)
    if block is not None:
        h = frame.hidden
        layer_extras = (Weight("res", "self_attention_res_norm", NORM, (h,)), Weight("res", "mlp_res_norm", NORM, (h,)),
                        Weight("res", "self_attention_res_proj", M, (1, h), quantizable=False),
                        Weight("res", "mlp_res_proj", M, (1, h), quantizable=False))
        embed_extras = (Weight("embed", "output_attn_res_norm", NORM, (h,)),
                        Weight("embed", "output_attn_res_proj", M, (1, h), quantizable=False))
        spec = replace(spec, layer_extras=layer_extras, embed_extras=embed_extras)
        notes.append(f"attention residuals every {block} layers (attn_res_block_size): their norms and 1 × hidden "
                     "projections are counted (the final pair with the embedding segment); the block mixing is "
                     "elementwise and not")
    mtp = view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers) not counted")
    # KimiLinearForCausalLM declares no tied weights (_tied_weights_keys = {})
    return replace(spec, tie_embeddings=False, notes=(*spec.notes, *notes))


# --- OLMo Hybrid ------------------------------------------------------------------------------------


def build_olmo_hybrid(view: ConfigView) -> ModelSpec:
    """OLMo Hybrid (transformers olmo_hybrid): gated-delta-net layers (pre-norms) and OLMo-3 attention layers
    (full-width q/k norms, post-norms), a dense MLP everywhere.

    OlmoHybridGatedDeltaNet holds the gated delta net's elements under other names (q/k/v_proj, a/b_proj,
    g_proj, o_proj for Qwen3-Next's in_proj_qkvz / in_proj_ba / out_proj; one conv over 2·key + value
    channels, A_log and dt_bias per value head, o_norm of the value head width), so it is a `GatedDeltaNet`
    (state: vLLM gated_delta_net_state_shape). OlmoHybridConfig.__post_init__ defaults: key and value heads
    = num_attention_heads, key head dim int(0.75·hidden / key heads), value head dim twice that, full
    attention on layers with i % 4 == 3 (the last layer when none is), and it refuses a stack without
    both layer kinds.
    """
    frame = read_frame(view)
    k_heads = view.opt_int("linear_num_key_heads", None) or frame.heads
    v_heads = view.opt_int("linear_num_value_heads", None) or frame.heads
    k_dim = view.opt_int("linear_key_head_dim", None) or int(0.75 * frame.hidden / k_heads)
    v_dim = view.opt_int("linear_value_head_dim", None) or 2 * k_dim
    linear = GatedDeltaNet(hidden=frame.hidden, k_heads=k_heads, v_heads=v_heads, k_head_dim=k_dim, v_head_dim=v_dim,
                           conv_kernel=view.req_int("linear_conv_kernel_dim"))
    bias = view.opt_bool("attention_bias", False)
    full = GqaAttention(hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads),
                        head_dim=view.head_dim(frame.heads, frame.hidden), q_bias=bias, kv_bias=bias, o_bias=bias,
                        qk_norm=True, qk_norm_full=True)
    types = view.layer_types(frame.layers)
    if types is None:
        listed = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(frame.layers)]
        if "full_attention" not in listed:
            listed[-1] = "full_attention"
        types = tuple(listed)
    _check_types(view, types, ("full_attention", "linear_attention"), "layer_types")
    if len(set(types)) != 2:
        raise ConfigError(f"config.json ({view.arch}): layer_types must hold both linear_attention and full_attention "
                          "layers (OlmoHybridConfig.validate_architecture); fix the config")
    mlp = dense_ffn(view, frame.hidden)
    attns: dict[str, AttentionSpec] = {"full_attention": full, "linear_attention": linear}
    return finish(view, frame, [LayerSpec(attns[t], mlp) for t in types], tie_default=False)


# --- Ling / Bailing hybrid ----------------------------------------------------------------------------


def build_bailing_hybrid(view: ConfigView) -> ModelSpec:
    """Bailing (Ling) hybrid (transformers bailing_hybrid): KDA layers with a full-rank forget gate (f_proj)
    and a full-rank output gate (g_proj), MLA layers with a per-head sigmoid gate (g_proj, heads × hidden),
    DeepSeek-V3 MoE after `first_k_dense_replace`.

    BailingHybridConfig.__post_init__: the KDA layers have num_attention_heads heads of the stated
    `head_dim` and a conv of `short_conv_kernel_size` taps; full attention on layers with
    (i + 1) % layer_group_size == 0 unless `layer_types` is stated; `mlp_layer_types` else dense below
    first_k_dense_replace. The router's weight is kept in float32 by the class (counted like the others);
    the multi-token-prediction layers (num_mtp_layers) are not built by transformers and not counted.
    """
    frame = read_frame(view)
    # __post_init__ sets linear_head_dim / linear_num_heads / linear_conv_kernel_dim from head_dim,
    # num_attention_heads and short_conv_kernel_size, then lets the same names win when the config states them
    head_dim = view.opt_int("linear_head_dim", None) or view.req_int("head_dim")
    heads = view.opt_int("linear_num_heads", None) or frame.heads
    kernel = view.opt_int("linear_conv_kernel_dim", None) or view.req_int("short_conv_kernel_size")
    kda = kda_mixer(frame.hidden, heads, head_dim, kernel, full_rank_gate=True, full_rank_forget=True)
    mla = MlaAttention(
        hidden=frame.hidden, heads=frame.heads, q_lora_rank=view.opt_int("q_lora_rank", None),
        kv_lora_rank=view.req_int("kv_lora_rank"), qk_nope_head_dim=view.req_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.req_int("qk_rope_head_dim"), v_head_dim=view.req_int("v_head_dim"),
        bias=view.opt_bool("attention_bias", False), output_gate=frame.heads,
    )
    types = view.layer_types(frame.layers)
    if types is None:
        group = view.req_int("layer_group_size")
        types = tuple("full_attention" if (i + 1) % group == 0 else "linear_attention" for i in range(frame.layers))
    _check_types(view, types, ("full_attention", "linear_attention"), "layer_types")
    experts, top_k = view.req_int("num_local_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_local_experts {experts}; "
                          "fix the config")
    width = view.req_int("moe_intermediate_size")
    moe = MoeFfn(hidden=frame.hidden, expert_intermediate=width, experts=experts, top_k=top_k, router_score_bias=True,
                 shared_intermediate=(view.opt_int("n_shared_experts", 0, minimum=0) or 0) * width)
    ffns: dict[str, FfnSpec] = {"dense": dense_ffn(view, frame.hidden), "sparse": moe}
    attns: dict[str, AttentionSpec] = {"full_attention": mla, "linear_attention": kda}
    layers = [LayerSpec(attns[a], ffns[f])
              for a, f in zip(types, _kimi_mlp_types(view, frame.layers), strict=True)]
    notes: list[str] = []
    mtp = view.opt_int("num_mtp_layers", 0, minimum=0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) (num_mtp_layers) not counted")
    if view.opt_bool("tie_word_embeddings", False):
        # BailingHybridForCausalLM declares no tied weights: lm_head is its own matrix
        notes.append("tie_word_embeddings is ignored: BailingHybridForCausalLM never ties lm_head to the embedding")
    return replace(finish(view, frame, layers, tie_default=False, notes=tuple(notes)), tie_embeddings=False)


# --- MiniMax-Text-01 ------------------------------------------------------------------------------


def lightning_mixer(hidden: int, heads: int, head_dim: int) -> RecurrentMixer:
    """MiniMax lightning attention (transformers minimax MiniMaxLightningAttention)."""
    sa, p = "self_attn", heads * head_dim
    ws = (
        Weight("qkv", f"{sa}.qkv_proj", M, (3 * p, hidden)),
        Weight("qkv", f"{sa}.output_gate", M, (p, hidden)),
        Weight("norm", f"{sa}.norm", NORM, (p,)),
        Weight("out", f"{sa}.out_proj", M, (hidden, p)),
    )
    return RecurrentMixer(
        hidden=hidden,
        mechanism="lightning attention",
        weights=ws,
        flops_per_token=4 * heads * head_dim * head_dim,
        state=(StatePart("kv", heads, head_dim * head_dim),),
        state_source="vLLM MambaStateShapeCalculator.linear_attention_state_shape, linear_attention_state_dtype",
        activation_width=5 * p,  # q, k, v, gate and the output
    )


def build_minimax_text01(view: ConfigView) -> ModelSpec:
    """MiniMax-Text-01's own config (remote code; vLLM minimax_text_01.py MiniMaxText01ForCausalLM): the same
    model as transformers' MiniMaxForCausalLM, its layer kinds in `attn_type_list` (0 lightning, 1 softmax; vLLM
    MiniMaxText01Model also reads `decoder_attention_types`), and, where `shared_intermediate_size` > 0, a shared
    MLP beside the experts mixed by a sigmoid/softmax coefficient (hidden → 1) (MiniMaxText01DecoderLayer)."""
    arch = view.arch
    view = ConfigView(view.cfg, "MiniMaxForCausalLM")  # MiniMaxConfig's defaults
    layers = view.req_int("num_hidden_layers")
    kinds = view.cfg.get("attn_type_list") or view.cfg.get("decoder_attention_types")
    types: tuple[str, ...] | None = None
    if kinds:
        if not isinstance(kinds, list) or len(kinds) != layers or any(k not in (0, 1) for k in kinds):
            raise ConfigError(f"config.json ({arch}): attn_type_list must hold 0 (lightning) or 1 (softmax) for each of "
                              f"the {layers} layers; fix the config")
        types = tuple("full_attention" if k == 1 else "linear_attention" for k in kinds)
    shared = view.cfg.get("shared_intermediate_size", 0) or 0
    if isinstance(shared, (list, bool)) or not isinstance(shared, int) or shared < 0:
        raise ConfigError(f"config.json ({arch}): shared_intermediate_size {shared!r} is not supported (one width for "
                          "every layer); fix the config")
    # the checkpoint's module names (vLLM's weight loader): block_sparse_moe, shared_mlp, coefficient
    return replace(build_minimax(view, types, shared, moe_module="block_sparse_moe"), architecture=arch)


def build_minimax(
    view: ConfigView, types: tuple[str, ...] | None = None, shared: int = 0, moe_module: str = "mlp"
) -> ModelSpec:
    frame = read_frame(view)
    head_dim = view.head_dim(frame.heads, frame.hidden)
    full = GqaAttention(hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads), head_dim=head_dim,
                        window=view.opt_int("sliding_window", None))
    linear = lightning_mixer(frame.hidden, frame.heads, head_dim)
    types = types or view.layer_types(frame.layers)
    if types is None:  # MiniMaxConfig.__post_init__
        types = tuple("full_attention" if (i + 1) % 2 else "linear_attention" for i in range(frame.layers))
    _check_types(view, types, ("full_attention", "linear_attention"), "layer_types")
    experts, top_k = view.req_int("num_local_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_local_experts {experts}; "
                          "fix the config")
    moe = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("intermediate_size"), experts=experts, top_k=top_k,
                 shared_intermediate=shared, shared_gate=bool(shared), module=moe_module,
                 shared_module="shared_mlp")
    attns: dict[str, AttentionSpec] = {"full_attention": full, "linear_attention": linear}
    layers = [LayerSpec(attns[t], moe) for t in types]
    note = ("lightning-attention decay tables (slope_rate, query/key/diagonal_decay buffers) are derived constants, "
            "not counted as parameters")
    return finish(view, frame, layers, tie_default=False, notes=(note,))


# --- MiniMax-M3 -----------------------------------------------------------------------------------

M3_CLASS = "MiniMaxM3VLForCausalLM"
_M3_LEGACY = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
              "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
              "index_local_blocks": "sparse_local_block"}


def _flag_list(view: ConfigView, values: Any, layers: int, key: str) -> list[bool]:
    if not isinstance(values, list) or len(values) != layers:
        raise ConfigError(f"config.json ({view.arch}): {key} must list one 0/1 per layer ({layers}); fix the config")
    return [bool(v) for v in values]


def build_minimax_m3(view: ConfigView) -> ModelSpec:
    arch = view.arch
    view = ConfigView(view.cfg, M3_CLASS)  # the class defaults of transformers' MiniMaxM3VLTextConfig
    frame = read_frame(view)
    sparse_cfg = _sub(view, "sparse_attention_config")
    # the legacy sparse_* keys win when stated (MiniMaxM3VLTextConfig.__post_init__ sets them after the flat ones)
    legacy = {flat: sparse_cfg[old] for flat, old in _M3_LEGACY.items() if old in sparse_cfg}
    ix_ints = {flat: _sub_int(view, legacy, flat, flat) for flat in _M3_LEGACY}
    indexer = BlockSparseIndexer(hidden=frame.hidden, heads=ix_ints["index_n_heads"], head_dim=ix_ints["index_head_dim"],
                                 block=ix_ints["index_block_size"], topk=ix_ints["index_topk_blocks"],
                                 local=ix_ints["index_local_blocks"])
    if indexer.local < 1 or indexer.local > indexer.topk:
        raise ConfigError(f"config.json ({arch}): index_local_blocks {indexer.local} must be between 1 and "
                          f"index_topk_blocks {indexer.topk}; fix the config")
    types = view.layer_types(frame.layers)
    if types is None:
        freq = sparse_cfg.get("sparse_attention_freq")
        types = (tuple("minimax_m3_sparse" if f else "full_attention"
                       for f in _flag_list(view, freq, frame.layers, "sparse_attention_freq"))
                 if freq is not None else ("full_attention",) * frame.layers)
    _check_types(view, types, ("full_attention", "minimax_m3_sparse"), "layer_types")
    mlp_types = view.opt_str_list("mlp_layer_types")
    if mlp_types is None:
        freq = view.cfg.get("moe_layer_freq")
        mlp_types = (tuple("sparse" if f else "dense" for f in _flag_list(view, freq, frame.layers, "moe_layer_freq"))
                     if freq is not None else ("sparse",) * frame.layers)
    elif len(mlp_types) != frame.layers:
        raise ConfigError(f"config.json ({arch}): mlp_layer_types has {len(mlp_types)} entries for {frame.layers} "
                          "layers; fix the config")
    _check_types(view, mlp_types, ("dense", "sparse"), "mlp_layer_types")
    dense_attn = GqaAttention(hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads),
                              head_dim=view.head_dim(frame.heads, frame.hidden), qk_norm=True)
    attns: dict[str, AttentionSpec] = {"full_attention": dense_attn,
                                       "minimax_m3_sparse": replace(dense_attn, block_indexer=indexer)}
    experts, top_k = view.req_int("num_local_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(f"config.json ({arch}): num_experts_per_tok {top_k} exceeds num_local_experts {experts}; "
                          "fix the config")
    moe = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("intermediate_size"), experts=experts, top_k=top_k,
                 router_score_bias=True, shared_intermediate=view.req_int("shared_intermediate_size"))
    ffns: dict[str, FfnSpec] = {
        "sparse": moe, "dense": DenseFfn(hidden=frame.hidden, intermediate=view.req_int("dense_intermediate_size")),
    }
    layers = [LayerSpec(attns[a], ffns[f]) for a, f in zip(types, mlp_types, strict=True)]
    notes: list[str] = []
    mtp = view.opt_int("num_mtp_modules", 0, minimum=0) or view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction module(s) not counted (transformers ignores the mtp.* weights)")
    spec = finish(view, frame, layers, tie_default=False, notes=tuple(notes))
    return replace(spec, architecture=arch)


# --- RecurrentGemma (Griffin) and RWKV-4 -----------------------------------------------------------------
# vLLM implements neither; their per-request state is the one transformers' own caches keep (cited per builder).


def build_recurrent_gemma(view: ConfigView) -> ModelSpec:
    """RecurrentGemma / Griffin (transformers recurrent_gemma). Layers cycle through `block_types`
    (RecurrentGemmaConfig.layers_block_type: (block_types × 100)[:layers]):

    - "recurrent": RecurrentGemmaRecurrentBlock: linear_y and linear_x (lru_width × hidden, with biases), a
      depthwise conv_1d over lru_width channels (conv1d_width taps, with a bias), the RG-LRU
      (recurrent_param (lru_width), block-diagonal input and recurrent gates: heads blocks of
      (lru_width/heads)² with biases, applied as matmuls), linear_out (hidden × lru_width, with a bias).
      The recurrence h = a·h + √(1 − a²)·(i·x) is diagonal: elementwise, no core FLOPs. State per request
      (RecurrentGemmaRecurrentBlock.conv1d_state, RecurrentGemmaRglru.recurrent_states): lru_width ×
      (conv1d_width − 1) conv elements in the model dtype and lru_width recurrent elements in float32 (the
      scan's acc_dtype).
    - "attention": local attention over `attention_window_size` positions, head_dim = hidden/heads whatever
      the config states (RecurrentGemmaConfig.__post_init__), q/k/v biases from attention_bias, o_proj with a
      bias.
    The MLP is gated with biases, of width intermediate_size // 2 (RecurrentGemmaMlp).
    """
    frame = read_frame(view)
    lru = view.opt_int("lru_width", None) or frame.hidden
    if lru % frame.heads:
        raise ConfigError(f"config.json ({view.arch}): lru_width {lru} is not divisible by num_attention_heads "
                          f"{frame.heads}; fix the config")
    block, kernel, h = lru // frame.heads, view.req_int("conv1d_width"), frame.hidden
    tb, rg = "temporal_block", "temporal_block.rg_lru"
    ws = (
        Weight("qkv", f"{tb}.linear_y", M, (lru, h)), Weight("qkv", f"{tb}.linear_y", BIAS, (lru,)),
        Weight("qkv", f"{tb}.linear_x", M, (lru, h)), Weight("qkv", f"{tb}.linear_x", BIAS, (lru,)),
        Weight("core", f"{tb}.conv_1d", CONV, (lru, kernel)), Weight("core", f"{tb}.conv_1d", BIAS, (lru,)),
        Weight("core", f"{rg}.recurrent_param", VEC, (lru,)),
        Weight("core", f"{rg}.input_gate_weight", M, (lru, block), quantizable=False),
        Weight("core", f"{rg}.input_gate_bias", BIAS, (lru,)),
        Weight("core", f"{rg}.recurrent_gate_weight", M, (lru, block), quantizable=False),
        Weight("core", f"{rg}.recurrent_gate_bias", BIAS, (lru,)),
        Weight("out", f"{tb}.linear_out", M, (h, lru)), Weight("out", f"{tb}.linear_out", BIAS, (h,)),
    )
    recurrent = RecurrentMixer(
        hidden=h, mechanism="RG-LRU", weights=ws, flops_per_token=0,
        state=(StatePart("conv", lru, kernel - 1), StatePart("recurrent", lru, 1, FP32)),
        state_source="transformers RecurrentGemmaRecurrentBlock.conv1d_state, RecurrentGemmaRglru.recurrent_states",
        activation_width=3 * lru,
    )
    bias = view.opt_bool("attention_bias", False)
    local = GqaAttention(hidden=h, heads=frame.heads, kv_heads=view.kv_heads(frame.heads), head_dim=h // frame.heads,
                         window=view.req_int("attention_window_size"), q_bias=bias, kv_bias=bias, o_bias=True)
    cycle = view.opt_str_list("block_types") or ("recurrent", "recurrent", "attention")
    _check_types(view, cycle, ("recurrent", "attention"), "block_types")
    mlp = DenseFfn(hidden=h, intermediate=view.req_int("intermediate_size") // 2, bias=True)
    attns: dict[str, AttentionSpec] = {"recurrent": recurrent, "attention": local}
    layers = [LayerSpec(attns[cycle[i % len(cycle)]], mlp) for i in range(frame.layers)]
    return finish(view, frame, layers, tie_default=True)


def build_rwkv(view: ConfigView) -> ModelSpec:
    """RWKV-4 (transformers rwkv RwkvForCausalLM). Per block: LayerNorms ln1/ln2 with biases (blocks[0] adds
    pre_ln, counted with the embedding); time mixing (RwkvSelfAttention): key, value, receptance
    (attention_hidden_size × hidden), output (hidden × attention_hidden_size), time_decay and time_first
    (attention_hidden_size), three time-mix vectors (hidden); channel mixing (RwkvFeedForward): key
    (intermediate × hidden), value (hidden × intermediate), receptance (hidden × hidden), two time-mix
    vectors. The WKV recurrence is per channel: elementwise, no core FLOPs. State per request and layer
    (RwkvModel.forward: five hidden-size vectors, the two token-shift states in the model dtype and the
    WKV numerator, denominator and running max in float32). The config has no attention heads.
    """
    hidden, layers, vocab = view.req_int("hidden_size"), view.req_int("num_hidden_layers"), view.req_int("vocab_size")
    inner = view.opt_int("attention_hidden_size", None) or hidden
    inter = view.opt_int("intermediate_size", None) or 4 * hidden
    at = "attention"
    ws = (
        *(Weight("qkv", f"{at}.{name}", M, (inner, hidden)) for name in ("key", "value", "receptance")),
        Weight("core", f"{at}.time_decay", VEC, (inner,)), Weight("core", f"{at}.time_first", VEC, (inner,)),
        *(Weight("qkv", f"{at}.time_mix_{name}", VEC, (hidden,)) for name in ("key", "value", "receptance")),
        Weight("out", f"{at}.output", M, (hidden, inner)),
    )
    mixer = RecurrentMixer(
        hidden=hidden, mechanism="RWKV-4 time mixing", weights=ws, flops_per_token=0,
        state=(StatePart("token shift", 2 * hidden, 1), StatePart("wkv", 3 * hidden, 1, FP32)),
        state_source="transformers RwkvModel.forward state (vLLM does not implement RWKV)",
        activation_width=4 * inner,
    )
    ffn = DenseFfn(hidden=hidden, intermediate=inter, gated=False, module="feed_forward")
    frame = Frame(hidden=hidden, layers=layers, heads=0, vocab=vocab)
    spec = finish(view, frame, [LayerSpec(mixer, ffn)] * layers, tie_default=False, norm_bias=True)
    ff = "feed_forward"
    layer_extras = (Weight("mlp", f"{ff}.receptance", M, (hidden, hidden)),
                    Weight("mlp", f"{ff}.time_mix_key", VEC, (hidden,)),
                    Weight("mlp", f"{ff}.time_mix_receptance", VEC, (hidden,)))
    embed_extras = (Weight("embed", "blocks.0.pre_ln", NORM, (hidden,)), Weight("embed", "blocks.0.pre_ln", BIAS, (hidden,)))
    return replace(spec, layer_extras=layer_extras, embed_extras=embed_extras)


def build_xlstm(view: ConfigView) -> ModelSpec:
    """xLSTM-7B style mLSTM stacks (transformers xlstm, the classes it defines when the `xlstm` package is absent).

    Each block: norm_mlstm, the mLSTM layer (xLSTMLayer: q, k of qk_dim = int(hidden·qk_dim_factor), v and the
    output-gate pre-activation of v_dim = int(hidden·v_dim_factor), input and forget gates with one biased
    output per head; `weight_mode` "fused" stacks the same elements; biases on the others with use_bias; a
    per-head LayerNorm over v_dim; out_proj), norm_ffn and a gated FFN of round_up(hidden·ffn_proj_factor,
    ffn_round_up_to_multiple_of) (xLSTMFeedForward). Recurrence per token and head (mLSTM, arXiv:2405.04517
    eq. 19-27): the matrix memory C (d_qk × d_v) takes the rank-1 update v·kᵀ (2·d_qk·d_v) and is read with q
    (2·d_qk·d_v); the normalizer n·q adds 2·d_qk: H·(4·d_qk·d_v + 2·d_qk) FLOPs. State per request (the mLSTM
    backend's (C, n, m) in `inference_state_dtype`, float32 by default): H·(d_qk·d_v + d_qk + 1). vLLM does not
    implement xLSTM. The config names its heads `num_heads`.
    """
    hidden, layers, vocab = view.req_int("hidden_size"), view.req_int("num_hidden_layers"), view.req_int("vocab_size")
    heads = view.req_int("num_heads")
    qk = int(hidden * float(view.cfg.get("qk_dim_factor", view.defaults.get("qk_dim_factor", 0.5))))
    v = int(hidden * float(view.cfg.get("v_dim_factor", view.defaults.get("v_dim_factor", 1.0))))
    if qk % heads or v % heads:
        raise ConfigError(f"config.json ({view.arch}): q/k width {qk} and v width {v} must divide into num_heads {heads}; "
                          "fix the config")
    bias = view.opt_bool("use_bias", False)
    ml = "mlstm_layer"
    ws: list[Weight] = []
    for name, width in (("q", qk), ("k", qk), ("v", v), ("ogate_preact", v)):
        ws.append(Weight("qkv", f"{ml}.{name}", M, (width, hidden)))
        if bias:
            ws.append(Weight("qkv", f"{ml}.{name}", BIAS, (width,)))
    for name in ("igate_preact", "fgate_preact"):
        ws += [Weight("qkv", f"{ml}.{name}", M, (heads, hidden), quantizable=False),
               Weight("qkv", f"{ml}.{name}", BIAS, (heads,))]
    ws.append(Weight("norm", f"{ml}.multihead_norm", NORM, (v,)))
    if bias:
        ws.append(Weight("norm", f"{ml}.multihead_norm", BIAS, (v,)))
    ws.append(Weight("out", f"{ml}.out_proj", M, (hidden, v)))
    if bias:
        ws.append(Weight("out", f"{ml}.out_proj", BIAS, (hidden,)))
    dqk, dv = qk // heads, v // heads
    state_dtype = parse_dtype(view.opt_str("inference_state_dtype", "float32"), "inference_state_dtype")
    mixer = RecurrentMixer(
        hidden=hidden, mechanism="mLSTM", weights=tuple(ws), flops_per_token=heads * (4 * dqk * dv + 2 * dqk),
        state=(StatePart("C", heads, dqk * dv, state_dtype), StatePart("n", heads, dqk, state_dtype),
               StatePart("m", heads, 1, state_dtype)),
        state_source="transformers xLSTM mLSTM backend state (C, n, m) in inference_state_dtype; vLLM does not implement xLSTM",
        activation_width=2 * qk + 2 * v,
    )
    factor = float(view.cfg.get("ffn_proj_factor", view.defaults.get("ffn_proj_factor", 2.667)))
    multiple = view.opt_int("ffn_round_up_to_multiple_of", 64)
    up = int(((hidden * factor + multiple - 1) // multiple) * multiple)  # configuration_xlstm round_up_to_next_multiple_of
    ffn = DenseFfn(hidden=hidden, intermediate=up, bias=bias, module="ffn")
    frame = Frame(hidden=hidden, layers=layers, heads=heads, vocab=vocab)
    # norm_mlstm / norm_ffn carry biases with use_bias; the final out_norm never does (xLSTMRMSNorm's default)
    notes: tuple[str, ...] = ()
    if view.opt_bool("tie_word_embeddings", False):
        # xLSTMForCausalLM declares no tied weights (_tied_weights_keys None): lm_head is its own matrix
        notes = ("tie_word_embeddings is ignored: xLSTMForCausalLM never ties lm_head to the embedding",)
    spec = replace(finish(view, frame, [LayerSpec(mixer, ffn)] * layers, tie_default=False, notes=notes),
                   tie_embeddings=False)
    if bias:
        extras = (Weight("norm", "norm_mlstm", BIAS, (hidden,)), Weight("norm", "norm_ffn", BIAS, (hidden,)))
        spec = replace(spec, layer_extras=extras)
    return spec


ARCHITECTURES = {
    "KimiLinearForCausalLM": build_kimi_linear,
    "MiniMaxForCausalLM": build_minimax,
    "MiniMaxText01ForCausalLM": build_minimax_text01,
    M3_CLASS: build_minimax_m3,
    # The MiniMax-M3 checkpoint's config.json names this class (remote code); transformers builds the same
    # text model as MiniMaxM3VLForCausalLM (registry.TRANSFORMERS_CLASS maps it for the cross-checks).
    "MiniMaxM3ForCausalLM": build_minimax_m3,
    "OlmoHybridForCausalLM": build_olmo_hybrid,
    "BailingHybridForCausalLM": build_bailing_hybrid,
    "RecurrentGemmaForCausalLM": build_recurrent_gemma,
    "RwkvForCausalLM": build_rwkv,
    "xLSTMForCausalLM": build_xlstm,
}
# architectures[0] spellings whose transformers class has another name
TRANSFORMERS_CLASS = {"MiniMaxM3ForCausalLM": M3_CLASS, "MiniMaxText01ForCausalLM": "MiniMaxForCausalLM"}

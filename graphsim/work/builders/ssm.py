"""State-space and short-convolution families: Mamba, Mamba2, Jamba, Bamba, Granite-4.0-H, Falcon-H1, Zamba2, LFM2.

Each builder is an explicit mapping read off the architecture's transformers modelling and
configuration files (transformers 5.24, `models/<family>/`); the per-request state is what vLLM
allocates for it (`vllm/model_executor/layers/mamba/mamba_utils.py` MambaStateShapeCalculator, cited
on the specs `Mamba1Mixer`, `Mamba2Mixer`, `ShortConv`). vLLM's `mamba_ssm_cache_dtype` defaults to
"auto" (the temporal state in the conv-state dtype, `MambaStateDtypeCalculator._mamba_state_dtype`);
only Nemotron-H and Qwen3.5 carry a config hook that changes it
(vllm/model_executor/models/config.py MODELS_CONFIG_MAP), so every mixer here has `ssm_dtype` None.

- `MambaForCausalLM`, `FalconMambaForCausalLM` (models/mamba, models/falcon_mamba): every layer is
  one RMSNorm and a Mamba-1 mixer (`mixer`), no FFN. intermediate = int(expand · hidden):
  MambaConfig.__post_init__ sets it from `expand` whatever `intermediate_size` the config states;
  dt_rank = ⌈hidden / 16⌉ when `time_step_rank` is "auto". FalconMamba's extra RMSNorms on B, C
  and dt (FalconMambaMixer.rms_forward) carry no weights: the same parameters as Mamba.
- `Mamba2ForCausalLM` (models/mamba2): one RMSNorm and a Mamba2 mixer per layer; intermediate =
  int(expand · hidden), which the scan reshapes into num_heads × head_dim (Mamba2Mixer.forward), so
  the two must agree (a config where they do not cannot run; refused by name).
- `JambaForCausalLM` (models/jamba): attention where i % attn_layer_period == attn_layer_offset,
  else a Mamba-1 mixer (`mamba`, with RMSNorms on dt, B and C: JambaMambaMixer); an FFN on every
  layer, routed (`num_experts` experts, top-k, no shared expert, router without bias) where
  i % expert_layer_period == expert_layer_offset and num_experts > 1 (JambaConfig.layers_num_experts),
  a dense gated MLP elsewhere; attention and MLPs without biases; intermediate = mamba_expand · hidden.
- `BambaForCausalLM` (models/bamba): attention on `attn_layer_indices`, a Mamba2 mixer (`mamba`)
  elsewhere, a dense gated MLP (mlp_bias) on every layer; mamba_d_head "auto" = mamba_expand ·
  hidden / mamba_n_heads (BambaConfig.__post_init__).
- `GraniteMoeHybridForCausalLM` (models/granitemoehybrid, Granite-4.0-H): `layer_types` (legacy
  "mamba" / "attention" read as linear_attention / full_attention, as NemotronH's) with Mamba2
  mixers (`mamba`) or attention (every projection biased by attention_bias); every layer has the
  shared MLP (`shared_mlp`, gated: input_linear emits gate and up) and, when num_local_experts > 0,
  routed experts beside it (block_sparse_moe). The muP multipliers are scalars, not parameters.
- `Lfm2ForCausalLM` (models/lfm2): `layer_types` ("full_attention" / "conv"), else
  `full_attn_idxs` (every layer when absent: Lfm2Config.__post_init__); attention with per-head
  q/k RMSNorms and no biases, short convs (`ShortConv`) elsewhere, a dense gated MLP on every layer
  whose width Lfm2MLP adjusts when block_auto_adjust_ff_dim: int(2 · I / 3), then
  (with block_ffn_dim_multiplier) int(m · ·) rounded up to block_multiple_of; the legacy keys
  `block_ff_dim` and `tie_embedding` win over intermediate_size / tie_word_embeddings
  (Lfm2Config.__post_init__ pops them). The final norm is `embedding_norm`.
- `Lfm2MoeForCausalLM` (models/lfm2_moe): the same mixers; a dense MLP of intermediate_size (no
  adjustment) on the first num_dense_layers layers, routed experts (moe_intermediate_size, a router
  and, with use_expert_bias, a persistent per-expert bias buffer) after; `layer_types` is required
  (the class has no default list and transformers cannot build the model without one).
- `Lfm3ForCausalLM` (models/lfm3): conv / sliding_attention / full_attention layers (default list
  from Lfm3Config.__post_init__: full where i % 4 == 2, sliding where i % 4 == 0 and i > 0, else
  conv); attention with head_dim, q/k norms per head and, with use_attention_gate, a sigmoid gate
  per head (`g_proj`, hidden → heads: a layer extra); sandwich norms (a post-norm after each block)
  when use_sandwich_norm. The vLLM snapshot read here has no LFM3 model: its conv state is laid out as
  vLLM lays out LFM2's (the same Lfm2ShortConv-style mixer), a derivation, not a vLLM citation.

- `FalconH1ForCausalLM` (models/falcon_h1): attention and a Mamba2 mixer side by side in every layer
  (`ParallelMixers`), then a gated MLP; see `build_falcon_h1`.

- `Zamba2ForCausalLM` (models/zamba2): Mamba2 layers and hybrid layers that run a shared transformer
  block (weights tied across the layers it serves: listed once with `Weight.uses`); see `build_zamba2`.

Not registered (it fails by name): Zamba (v1: per-head Mamba-1 mixers, ZambaMambaMixer's x_proj_weight /
dt_proj_weight parameters per mamba head; no vLLM model in the snapshot read, so no state layout to cite).
"""

from __future__ import annotations

import math
from dataclasses import replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import Frame, finish
from graphsim.work.config import ConfigView
from graphsim.work.specs import (
    AttentionSpec, DenseFfn, FfnSpec, GqaAttention, LayerSpec, Mamba1Mixer, Mamba2Mixer, ModelSpec, MoeFfn, NoFfn,
    ParallelMixers, ShortConv, Weight, WeightKind,
)

# configuration_utils._LEGACY_LAYER_TYPE_REMAP (the entries a Granite-4.0-H list can hold)
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}


def _number(view: ConfigView, key: str) -> float:
    """A numeric field (int or float), stated or the class default; required."""
    value = view.cfg[key] if key in view.cfg else view.defaults.get(key)
    if value is None:
        raise ConfigError(f"config.json ({view.arch}) is missing required field '{key}'; add it to the config")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"config.json ({view.arch}) field '{key}' is {value!r}, not a number; fix the config")
    return value


def _auto(view: ConfigView, key: str, auto: int) -> int:
    """A field the class resolves from "auto" (time_step_rank, mamba_dt_rank, mamba_d_head)."""
    value = view.cfg[key] if key in view.cfg else view.defaults.get(key, "auto")
    if value == "auto" or value is None:
        return auto
    return view.req_int(key)


def _frame(view: ConfigView, heads: bool = True) -> Frame:
    return Frame(hidden=view.req_int("hidden_size"), layers=view.req_int("num_hidden_layers"),
                 heads=view.req_int("num_attention_heads") if heads else 0, vocab=view.req_int("vocab_size"))


def _attention(view: ConfigView, frame: Frame, bias: bool = False, qk_norm: bool = False,
               window: int | None = None, block_norms: int = 1, head_dim: int | None = None) -> GqaAttention:
    return GqaAttention(
        hidden=frame.hidden, heads=frame.heads, kv_heads=view.kv_heads(frame.heads),
        head_dim=head_dim or view.head_dim(frame.heads, frame.hidden), window=window,
        q_bias=bias, kv_bias=bias, o_bias=bias, qk_norm=qk_norm, block_norms=block_norms,
    )


def _check_layers(view: ConfigView, types: tuple[str, ...], layers: int, allowed: tuple[str, ...],
                  key: str = "layer_types") -> None:
    if len(types) != layers:
        raise ConfigError(f"config.json ({view.arch}): {key} has {len(types)} entries but num_hidden_layers is "
                          f"{layers}; fix the config")
    for i, t in enumerate(types):
        if t not in allowed:
            raise ConfigError(f"config.json ({view.arch}): {key}[{i}] is '{t}'; expected one of {', '.join(allowed)}")


# --- Mamba-1 ------------------------------------------------------------------------------------
def build_mamba(view: ConfigView) -> ModelSpec:
    """MambaForCausalLM / FalconMambaForCausalLM: a stack of Mamba-1 mixers (MambaBlock: norm + mixer)."""
    frame = _frame(view, heads=False)
    mixer = Mamba1Mixer(
        hidden=frame.hidden,
        intermediate=int(_number(view, "expand") * frame.hidden),  # MambaConfig.__post_init__
        state_size=view.req_int("state_size"),
        conv_kernel=view.req_int("conv_kernel"),
        dt_rank=_auto(view, "time_step_rank", math.ceil(frame.hidden / 16)),
        conv_bias=view.opt_bool("use_conv_bias", True),
        proj_bias=view.opt_bool("use_bias", False),
    )
    layers = [LayerSpec(mixer, NoFfn(frame.hidden))] * frame.layers
    return finish(view, frame, layers, tie_default=True)


# --- Mamba2 -------------------------------------------------------------------------------------
def _mamba2(view: ConfigView, hidden: int, prefix: str, module: str, d_ssm: bool = False) -> Mamba2Mixer:
    """A Mamba2 mixer from `<prefix>n_heads`-style keys (Bamba, Granite-4.0-H, Falcon-H1: prefix "mamba_") or
    Mamba2Config's own names (prefix ""). `d_ssm`: a stated `mamba_d_ssm` is the intermediate width (Falcon-H1)."""
    if prefix:
        heads, expand = view.req_int("mamba_n_heads"), _number(view, "mamba_expand")
        stated = view.opt_int("mamba_d_ssm", None) if d_ssm else None
        intermediate = stated if stated is not None else int(expand * hidden)
        head_dim = _auto(view, "mamba_d_head", intermediate // heads)
        state, groups, kernel = (view.req_int("mamba_d_state"), view.req_int("mamba_n_groups"),
                                 view.req_int("mamba_d_conv"))
        conv_bias, proj_bias = view.opt_bool("mamba_conv_bias", True), view.opt_bool("mamba_proj_bias", False)
        heads_key = "mamba_n_heads"
    else:
        heads, intermediate = view.req_int("num_heads"), int(_number(view, "expand") * hidden)
        head_dim = view.req_int("head_dim")
        state, groups, kernel = view.req_int("state_size"), view.req_int("n_groups"), view.req_int("conv_kernel")
        conv_bias, proj_bias = view.opt_bool("use_conv_bias", True), view.opt_bool("use_bias", False)
        heads_key = "num_heads"
    if heads * head_dim != intermediate:
        raise ConfigError(
            f"config.json ({view.arch}): {heads_key} {heads} × head dim {head_dim} != expand × hidden_size "
            f"{intermediate}; the Mamba2 scan needs them equal: fix the config"
        )
    if heads % groups:
        raise ConfigError(f"config.json ({view.arch}): {heads_key} {heads} is not a multiple of the {groups} groups; "
                          "fix the config")
    return Mamba2Mixer(hidden=hidden, heads=heads, head_dim=head_dim, state_size=state, n_groups=groups,
                       conv_kernel=kernel, ssm_dtype=None, conv_bias=conv_bias, proj_bias=proj_bias, module=module)


def build_mamba2(view: ConfigView) -> ModelSpec:
    """Mamba2ForCausalLM: a stack of Mamba2 mixers (Mamba2Block: norm + mixer)."""
    frame = _frame(view, heads=False)
    layers = [LayerSpec(_mamba2(view, frame.hidden, "", "mixer"), NoFfn(frame.hidden))] * frame.layers
    return finish(view, frame, layers, tie_default=False)


# --- Jamba --------------------------------------------------------------------------------------
def build_jamba(view: ConfigView) -> ModelSpec:
    frame = _frame(view)
    period, offset = view.req_int("attn_layer_period"), view.opt_int("attn_layer_offset", 0, minimum=0)
    e_period, e_offset = view.req_int("expert_layer_period"), view.opt_int("expert_layer_offset", 0, minimum=0)
    if offset >= period or e_offset >= e_period:
        raise ConfigError(f"config.json ({view.arch}): a layer offset must be below its period (attn {offset}/{period}, "
                          f"expert {e_offset}/{e_period}); fix the config")
    mamba = Mamba1Mixer(
        hidden=frame.hidden,
        intermediate=int(_number(view, "mamba_expand") * frame.hidden),  # JambaMambaMixer.intermediate_size
        state_size=view.req_int("mamba_d_state"),
        conv_kernel=view.req_int("mamba_d_conv"),
        dt_rank=_auto(view, "mamba_dt_rank", math.ceil(frame.hidden / 16)),
        conv_bias=view.opt_bool("mamba_conv_bias", True),
        proj_bias=view.opt_bool("mamba_proj_bias", False),
        dt_norms=True,
        module="mamba",
    )
    attn = _attention(view, frame)
    dense = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"), module="feed_forward")
    experts, top_k = view.req_int("num_experts"), view.req_int("num_experts_per_tok")
    moe: FfnSpec = dense
    if experts > 1:  # JambaConfig.layers_num_experts: 1 expert is the dense JambaMLP
        if top_k > experts:
            raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_experts {experts}; "
                              "fix the config")
        moe = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("intermediate_size"), experts=experts,
                     top_k=top_k, module="feed_forward", router_module="router")
    layers = [
        LayerSpec(attn if i % period == offset else mamba, moe if i % e_period == e_offset else dense)
        for i in range(frame.layers)
    ]
    return finish(view, frame, layers, tie_default=False)


# --- Bamba and Granite-4.0-H --------------------------------------------------------------------
def build_bamba(view: ConfigView) -> ModelSpec:
    frame = _frame(view)
    attn_at = set(view.opt_int_list("attn_layer_indices"))
    mamba = _mamba2(view, frame.hidden, "mamba_", "mamba")
    attn = _attention(view, frame, bias=view.opt_bool("attention_bias", False))
    mlp = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"),
                   bias=view.opt_bool("mlp_bias", False), module="feed_forward")
    layers = [LayerSpec(attn if i in attn_at else mamba, mlp) for i in range(frame.layers)]
    return finish(view, frame, layers, tie_default=False)


def build_granite_moe_hybrid(view: ConfigView) -> ModelSpec:
    frame = _frame(view)
    types = view.opt_str_list("layer_types")
    types = tuple(_LEGACY.get(t, t) for t in types) if types is not None else ("linear_attention",) * frame.layers
    _check_layers(view, types, frame.layers, ("linear_attention", "full_attention"))
    mamba = _mamba2(view, frame.hidden, "mamba_", "mamba")
    attn = _attention(view, frame, bias=view.opt_bool("attention_bias", False))
    shared = view.req_int("shared_intermediate_size")
    experts = view.opt_int("num_local_experts", 0, minimum=0)
    ffn: FfnSpec
    if experts:
        top_k = view.req_int("num_experts_per_tok")
        if top_k > experts:
            raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_local_experts "
                              f"{experts}; fix the config")
        ffn = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("intermediate_size"), experts=experts,
                     top_k=top_k, shared_intermediate=shared, module="block_sparse_moe", router_module="router",
                     shared_module="shared_mlp")
    else:  # GraniteMoeHybridDecoderLayer: no block_sparse_moe, the shared MLP alone (Granite-4.0-H-Micro)
        ffn = DenseFfn(hidden=frame.hidden, intermediate=shared, module="shared_mlp")
    layers = [LayerSpec(mamba if t == "linear_attention" else attn, ffn) for t in types]
    return finish(view, frame, layers, tie_default=False)


# --- LFM2 / LFM2-MoE / LFM3 ---------------------------------------------------------------------
def _lfm_tie(view: ConfigView) -> bool | None:
    """The legacy `tie_embedding` key wins over tie_word_embeddings (Lfm2Config.__post_init__ pops it)."""
    legacy = view.cfg.get("tie_embedding")
    if legacy is None:
        return None
    if not isinstance(legacy, bool):
        raise ConfigError(f"config.json ({view.arch}) field 'tie_embedding' is {legacy!r}, not true/false; fix the config")
    return legacy


def _lfm2_ffn_width(view: ConfigView) -> int:
    """Lfm2MLP.__init__: block_ff_dim (legacy, wins) or intermediate_size, adjusted when block_auto_adjust_ff_dim."""
    width = view.req_int("block_ff_dim") if "block_ff_dim" in view.cfg else view.req_int("intermediate_size")
    if view.opt_bool("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = view.cfg.get("block_ffn_dim_multiplier", view.defaults.get("block_ffn_dim_multiplier"))
        if multiplier is not None:
            width = int(_number(view, "block_ffn_dim_multiplier") * width)
            step = view.req_int("block_multiple_of")
            width = step * ((width + step - 1) // step)
    return width


def _lfm2_types(view: ConfigView, layers: int) -> tuple[str, ...]:
    types = view.opt_str_list("layer_types")
    if types is None:
        if view.arch != "Lfm2ForCausalLM":
            raise ConfigError(f"config.json ({view.arch}) is missing 'layer_types' (one 'conv' or 'full_attention' per "
                              "layer; the config class has no default list); add it")
        idxs = set(view.opt_int_list("full_attn_idxs", tuple(range(layers))))
        types = tuple("full_attention" if i in idxs else "conv" for i in range(layers))
    return types


def _finish_lfm(view: ConfigView, frame: Frame, layers: list[LayerSpec]) -> ModelSpec:
    spec = finish(view, frame, layers, tie_default=True)
    tie = _lfm_tie(view) if view.arch != "Lfm3ForCausalLM" else None  # Lfm3Config pops no legacy key
    return replace(spec, tie_embeddings=tie) if tie is not None else spec


def build_lfm2(view: ConfigView) -> ModelSpec:
    frame = _frame(view)
    types = _lfm2_types(view, frame.layers)
    _check_layers(view, types, frame.layers, ("full_attention", "conv"))
    conv = ShortConv(hidden=frame.hidden, conv_kernel=view.req_int("conv_L_cache"), bias=view.opt_bool("conv_bias", False))
    attn = _attention(view, frame, qk_norm=True)
    if view.arch == "Lfm2ForCausalLM":
        ffns: list[FfnSpec] = [DenseFfn(hidden=frame.hidden, intermediate=_lfm2_ffn_width(view), module="feed_forward")]
        ffns *= frame.layers
    else:  # Lfm2MoeDecoderLayer: dense below num_dense_layers, routed experts after
        experts, top_k = view.req_int("num_experts"), view.req_int("num_experts_per_tok")
        if top_k > experts:
            raise ConfigError(f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds num_experts {experts}; "
                              "fix the config")
        dense = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"), module="feed_forward")
        moe = MoeFfn(hidden=frame.hidden, expert_intermediate=view.req_int("moe_intermediate_size"), experts=experts,
                     top_k=top_k, router_score_bias=view.opt_bool("use_expert_bias", True), module="feed_forward")
        first = view.opt_int("num_dense_layers", 0, minimum=0)
        ffns = [dense if i < first else moe for i in range(frame.layers)]
    layers = [LayerSpec(attn if t == "full_attention" else conv, f) for t, f in zip(types, ffns, strict=True)]
    return _finish_lfm(view, frame, layers)


def build_lfm3(view: ConfigView) -> ModelSpec:
    frame = _frame(view)
    types = view.opt_str_list("layer_types")
    if types is None:  # Lfm3Config.__post_init__
        types = tuple("full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                      for i in range(frame.layers))
    _check_layers(view, types, frame.layers, ("full_attention", "sliding_attention", "conv"))
    sandwich = view.opt_bool("use_sandwich_norm", True)
    norms = 2 if sandwich else 1  # operator_norm (+ post_operator_norm); ffn_norm (+ post_ffn_norm)
    bias = view.opt_bool("attention_bias", False)
    head_dim = view.opt_int("head_dim", None)
    conv = ShortConv(hidden=frame.hidden, conv_kernel=view.req_int("conv_L_cache"), bias=view.opt_bool("conv_bias", False),
                     block_norms=norms)
    full = _attention(view, frame, bias=bias, qk_norm=True, block_norms=norms, head_dim=head_dim)
    window = view.opt_int("sliding_window", None)
    sliding = _attention(view, frame, bias=bias, qk_norm=True, block_norms=norms, head_dim=head_dim, window=window)
    # Lfm3Attention.g_proj: a sigmoid gate per head (hidden → heads, no bias) on every attention layer
    gate = ((Weight("qkv", "self_attn.g_proj", WeightKind.MATRIX, (frame.heads, frame.hidden)),)
            if view.opt_bool("use_attention_gate", True) else ())
    mlp = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"), block_norms=norms,
                   module="feed_forward")
    mixers: dict[str, AttentionSpec] = {"conv": conv, "full_attention": full, "sliding_attention": sliding}
    layers = [LayerSpec(mixers[t], mlp, attn_extras=() if t == "conv" else gate) for t in types]
    return _finish_lfm(view, frame, layers)


# --- Falcon-H1 -----------------------------------------------------------------------------------
def build_falcon_h1(view: ConfigView) -> ModelSpec:
    """FalconH1ForCausalLM (models/falcon_h1): every layer runs attention and a Mamba2 mixer side by side on
    one input_layernorm (FalconH1DecoderLayer: outputs summed, muP multipliers are scalars), then a gated MLP
    (pre_ff_layernorm, mlp_bias). The mixer's width is mamba_d_ssm when stated, else mamba_expand · hidden
    (FalconH1Mixer.intermediate_size); mamba_d_head "auto" = that width / mamba_n_heads; in_proj takes
    mamba_proj_bias, out_proj projectors_bias; the gated RMSNorm exists only with mamba_rms_norm; attention
    projections take attention_bias; head_dim is the config's or hidden / heads."""
    frame = _frame(view)
    mamba = replace(
        _mamba2(view, frame.hidden, "mamba_", "mamba", d_ssm=True),
        block_norms=0, gated_norm=view.opt_bool("mamba_rms_norm", False),
        out_bias=view.opt_bool("projectors_bias", False),
    )
    mixers = ParallelMixers(_attention(view, frame, bias=view.opt_bool("attention_bias", False)), mamba)
    mlp = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"),
                   bias=view.opt_bool("mlp_bias", False), module="feed_forward")
    return finish(view, frame, [LayerSpec(mixers, mlp)] * frame.layers, tie_default=False)


# --- Zamba2 ---------------------------------------------------------------------------------------
def build_zamba2(view: ConfigView) -> ModelSpec:
    """Zamba2ForCausalLM (models/zamba2). `layers_block_type` (default list from Zamba2Config.__post_init__;
    legacy names remapped) holds Mamba2 layers ("linear_attention": Zamba2MambaDecoderLayer, input_layernorm +
    mixer) and hybrid layers ("hybrid": Zamba2HybridLayer): a shared transformer block, a per-layer `linear`
    (hidden → hidden, no bias), then a Mamba2 layer. The shared block (Zamba2AttentionDecoderLayer) reads
    concat(hidden, the embedding) of width 2·hidden: input_layernorm (2·hidden), attention (heads of
    2·hidden / heads, k/v of num_key_value_heads, no biases, o_proj to hidden), pre_ff_layernorm, a gated MLP
    (gate_up_proj, down_proj; add_bias_linear) of intermediate_size (4·hidden when absent). There are
    num_mem_blocks such blocks, hybrid layer k using block k mod num_mem_blocks; their weights are tied
    (Zamba2Model.get_layers), so each block is listed once, on its first hybrid layer, with `uses` = the
    hybrid layers it serves. Per hybrid layer the block holds LoRA-style adapters: gate_up (hidden → rank →
    2·intermediate) and, with use_shared_attention_adapter, q/k/v (2·hidden → rank → 2·hidden each).
    Mamba2: n_mamba_heads of int(mamba_expand · hidden) / n_mamba_heads, mamba_ngroups, the conv always
    biased (Zamba2MambaMixer: bias=True), in/out projections biased by add_bias_linear. vLLM keeps one
    attention KV cache per hybrid layer (vllm/model_executor/models/zamba2.py Zamba2Attention.dpa_list: "KV
    cache is unique for every attention layer") and a Mamba2 state per layer."""
    hidden, heads = view.req_int("hidden_size"), view.req_int("num_attention_heads")
    frame = Frame(hidden=hidden, layers=view.req_int("num_hidden_layers"), heads=heads, vocab=view.req_int("vocab_size"))
    if not view.opt_bool("tie_word_embeddings", True):
        # transformers ties every _tied_weights_keys entry, the shared blocks included, only with
        # tie_word_embeddings (PreTrainedModel.get_expanded_tied_weights_keys); vLLM shares the blocks regardless
        raise ConfigError(f"config.json ({view.arch}): tie_word_embeddings false makes transformers untie the shared "
                          "transformer blocks too (one per hybrid layer) while vLLM keeps them shared; graphsim does not "
                          "account that model: set tie_word_embeddings true, as the Zamba2 checkpoints do")
    types = view.opt_str_list("layers_block_type")
    if types is None:  # Zamba2Config.__post_init__
        types = (("linear_attention",) + (("linear_attention",) * 5 + ("hybrid",)) * 7 + ("linear_attention",) * 4
                 + ("hybrid",) + ("linear_attention",) * 3 + ("hybrid",) + ("linear_attention",) * 2)
    types = tuple(_LEGACY.get(t, t) for t in types)
    _check_layers(view, types, frame.layers, ("linear_attention", "hybrid"), key="layers_block_type")
    bias = view.opt_bool("add_bias_linear", False)
    expand, n_heads = _number(view, "mamba_expand"), view.req_int("n_mamba_heads")
    inner = int(expand * hidden)
    groups = view.req_int("mamba_ngroups")
    if inner % n_heads or n_heads % groups:
        raise ConfigError(f"config.json ({view.arch}): n_mamba_heads {n_heads} must divide mamba_expand × hidden_size "
                          f"{inner} and be a multiple of mamba_ngroups {groups}; fix the config")
    mamba = Mamba2Mixer(hidden=hidden, heads=n_heads, head_dim=inner // n_heads, state_size=view.req_int("mamba_d_state"),
                        n_groups=groups, conv_kernel=view.req_int("mamba_d_conv"), ssm_dtype=None, conv_bias=True,
                        proj_bias=bias, module="mamba")
    wide = 2 * hidden  # Zamba2Config.attention_hidden_size
    if wide % heads:
        raise ConfigError(f"config.json ({view.arch}): 2 × hidden_size {wide} is not divisible by num_attention_heads "
                          f"{heads}; fix the config")
    head_dim = wide // heads  # Zamba2Config.attention_head_dim
    kv_heads = view.kv_heads(heads)
    attn = GqaAttention(hidden=wide, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    inter = view.opt_int("intermediate_size", None) or 4 * hidden
    rank = view.req_int("adapter_rank")
    blocks = view.req_int("num_mem_blocks")
    hybrids = [i for i, t in enumerate(types) if t == "hybrid"]
    st, M = "shared_transformer", WeightKind.MATRIX

    def shared_block(uses: int) -> tuple[Weight, ...]:
        ws = [Weight("norm", f"{st}.input_layernorm", WeightKind.NORM, (wide,)),
              Weight("qkv", f"{st}.self_attn.q_proj", M, (heads * head_dim, wide), uses=uses),
              Weight("qkv", f"{st}.self_attn.k_proj", M, (kv_heads * head_dim, wide), uses=uses),
              Weight("qkv", f"{st}.self_attn.v_proj", M, (kv_heads * head_dim, wide), uses=uses),
              Weight("out", f"{st}.self_attn.o_proj", M, (hidden, heads * head_dim), uses=uses),
              Weight("norm", f"{st}.pre_ff_layernorm", WeightKind.NORM, (hidden,)),
              Weight("mlp", f"{st}.feed_forward.gate_up_proj", M, (2 * inter, hidden), uses=uses),
              Weight("mlp", f"{st}.feed_forward.down_proj", M, (hidden, inter), uses=uses)]
        if bias:
            ws += [Weight("mlp", f"{st}.feed_forward.gate_up_proj", WeightKind.BIAS, (2 * inter,)),
                   Weight("mlp", f"{st}.feed_forward.down_proj", WeightKind.BIAS, (hidden,))]
        return tuple(ws)

    # per hybrid layer: its linear, its gate_up adapter and, with use_shared_attention_adapter, q/k/v adapters
    own = [Weight("out", "linear", M, (hidden, hidden)),
           Weight("mlp", f"{st}.feed_forward.gate_up_proj_adapter.0", M, (rank, hidden)),
           Weight("mlp", f"{st}.feed_forward.gate_up_proj_adapter.1", M, (2 * inter, rank))]
    if view.opt_bool("use_shared_attention_adapter", False):
        for x in "qkv":
            own += [Weight("qkv", f"{st}.self_attn.linear_{x}_adapter.0", M, (rank, wide)),
                    Weight("qkv", f"{st}.self_attn.linear_{x}_adapter.1", M, (wide, rank))]
    hybrid = ParallelMixers(attn, replace(mamba, block_norms=1), attn_weights=False)
    carriers = {i: shared_block(len(hybrids[k::blocks])) for k, i in enumerate(hybrids[:blocks])}
    layers = []
    for i, t in enumerate(types):
        if t == "hybrid":
            layers.append(LayerSpec(hybrid, NoFfn(hidden), attn_extras=carriers.get(i, ()) + tuple(own)))
        else:
            layers.append(LayerSpec(mamba, NoFfn(hidden)))
    return finish(view, frame, layers, tie_default=True)


ARCHITECTURES = {
    "MambaForCausalLM": build_mamba,
    "FalconMambaForCausalLM": build_mamba,
    "Mamba2ForCausalLM": build_mamba2,
    "JambaForCausalLM": build_jamba,
    "BambaForCausalLM": build_bamba,
    "GraniteMoeHybridForCausalLM": build_granite_moe_hybrid,
    "Lfm2ForCausalLM": build_lfm2,
    "Lfm2MoeForCausalLM": build_lfm2,
    "Lfm3ForCausalLM": build_lfm3,
    "FalconH1ForCausalLM": build_falcon_h1,
    "Zamba2ForCausalLM": build_zamba2,
}

"""Nemotron-H and NVIDIA-Nemotron-3: a hybrid stack of single-block layers.

Read from transformers models/nemotron_h (configuration_nemotron_h.py, modeling_nemotron_h.py).
Every layer (NemotronHBlock) is one RMSNorm and ONE mixer, chosen per layer by
`layers_block_type` (its attribute_map alias `layer_types`), else the legacy
`hybrid_override_pattern` string (M = Mamba2, * = attention, - = MLP, E = MoE), else the class's
default list; the legacy names `mamba` / `attention` read as `linear_attention` / `full_attention`
(configuration_utils._LEGACY_LAYER_TYPE_REMAP). The layer count is the list's length
(NemotronHConfig.num_hidden_layers is a property of it; a stated num_hidden_layers is ignored).

- `linear_attention`: a Mamba2 mixer (`Mamba2Mixer`), dimensions from mamba_num_heads,
  mamba_head_dim, ssm_state_size, n_groups, conv_kernel; in_proj/out_proj biases from use_bias,
  the conv bias from use_conv_bias (the legacy mamba_n_groups / mamba_d_conv / mamba_conv_bias
  keys win when stated, as NemotronHConfig.__post_init__ reads them).
- `full_attention`: GQA without biases (NemotronHAttention builds q/k/v/o with bias=False whatever
  attention_bias says) and without rotary.
- `mlp`: an ungated relu² MLP (up, down; mlp_bias).
- `moe`: NemotronHMoE: a sigmoid router with a per-expert score-correction buffer, ungated relu²
  experts (up, down) of moe_intermediate_size, one ungated shared expert of
  moe_shared_expert_intermediate_size, and with moe_latent_size the latent projections around the
  experts (which then work in the latent width).

The multi-token-prediction layers (num_nextn_predict_layers) are not part of the serving forward
pass and are not counted (transformers builds none either).
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import Frame, finish
from graphsim.work.config import ConfigView
from graphsim.work.dtypes import parse_dtype
from graphsim.work.specs import (
    AttentionSpec, DenseFfn, FfnSpec, GqaAttention, LayerSpec, Mamba2Mixer, ModelSpec, MoeFfn, NoAttention, NoFfn,
)

# NemotronHConfig._pattern_to_list
_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
# configuration_utils._LEGACY_LAYER_TYPE_REMAP (the entries a Nemotron-H list can hold)
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
# NemotronHConfig.__post_init__: the layer list when neither a list nor a pattern is stated
_DEFAULT_TYPES = ("linear_attention", "moe", "full_attention", "mlp")


def _layer_types(view: ConfigView) -> tuple[str, ...]:
    types = view.opt_str_list("layers_block_type")
    if types is None:
        pattern = view.opt_str("hybrid_override_pattern", "")
        bad = sorted(set(pattern) - set(_PATTERN))
        if bad:
            raise ConfigError(
                f"config.json ({view.arch}): hybrid_override_pattern holds {''.join(bad)!r}; "
                "use M (Mamba2), * (attention), - (MLP) or E (MoE)"
            )
        types = tuple(_PATTERN[c] for c in pattern) if pattern else _DEFAULT_TYPES
    types = tuple(_LEGACY.get(t, t) for t in types)
    if not types:
        raise ConfigError(f"config.json ({view.arch}): layers_block_type is empty; list one type per layer")
    return types


def _legacy_int(view: ConfigView, legacy: str, key: str) -> int:
    """NemotronHConfig.__post_init__ pops the legacy mamba_* key when stated, else the field."""
    return view.req_int(legacy) if legacy in view.cfg else view.req_int(key)


def _mamba(view: ConfigView, hidden: int) -> Mamba2Mixer:
    conv_bias_key = "mamba_conv_bias" if "mamba_conv_bias" in view.cfg else "use_conv_bias"
    ssm = view.opt_str("mamba_ssm_cache_dtype", "float32")
    heads = view.req_int("mamba_num_heads")
    groups = _legacy_int(view, "mamba_n_groups", "n_groups")
    if heads % groups:
        raise ConfigError(
            f"config.json ({view.arch}): mamba_num_heads {heads} is not a multiple of n_groups {groups}; fix the config"
        )
    return Mamba2Mixer(
        hidden=hidden,
        heads=heads,
        head_dim=view.req_int("mamba_head_dim"),
        state_size=view.req_int("ssm_state_size"),
        n_groups=groups,
        conv_kernel=_legacy_int(view, "mamba_d_conv", "conv_kernel"),
        ssm_dtype=parse_dtype(ssm, "mamba_ssm_cache_dtype"),
        conv_bias=view.opt_bool(conv_bias_key, True),
        proj_bias=view.opt_bool("use_bias", False),
    )


def _moe(view: ConfigView, hidden: int) -> MoeFfn:
    experts = view.req_int("n_routed_experts")
    top_k = view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(
            f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds n_routed_experts {experts}; fix the config"
        )
    bias = view.opt_bool("mlp_bias", False)
    return MoeFfn(
        hidden=hidden,
        expert_intermediate=view.req_int("moe_intermediate_size"),
        experts=experts,
        top_k=top_k,
        router_score_bias=True,  # NemotronHTopkRouter.e_score_correction_bias (a persistent buffer)
        shared_intermediate=view.req_int("moe_shared_expert_intermediate_size"),
        shared_bias=bias,
        gated=False,
        latent=view.opt_int("moe_latent_size", 0, minimum=1) or 0,
        latent_bias=bias,
        module="mixer",
        shared_module="shared_experts",
    )


def build_nemotron_h(view: ConfigView) -> ModelSpec:
    types = _layer_types(view)
    hidden, heads = view.req_int("hidden_size"), view.req_int("num_attention_heads")
    frame = Frame(hidden=hidden, layers=len(types), heads=heads, vocab=view.req_int("vocab_size"))
    none_attn, none_ffn = NoAttention(hidden), NoFfn(hidden)
    blocks: dict[str, tuple[AttentionSpec, FfnSpec] | None] = dict.fromkeys(_PATTERN.values())

    def block(kind: str) -> tuple[AttentionSpec, FfnSpec]:
        made = blocks[kind]
        if made is None:
            if kind == "linear_attention":
                made = (_mamba(view, hidden), none_ffn)
            elif kind == "full_attention":
                attn = GqaAttention(hidden=hidden, heads=heads, kv_heads=view.kv_heads(heads),
                                    head_dim=view.head_dim(heads, hidden))
                made = (attn, none_ffn)
            elif kind == "mlp":
                mlp = DenseFfn(hidden=hidden, intermediate=view.req_int("intermediate_size"), gated=False,
                               bias=view.opt_bool("mlp_bias", False), module="mixer")
                made = (none_attn, mlp)
            else:
                made = (none_attn, _moe(view, hidden))
            blocks[kind] = made
        return made

    layers = []
    for i, kind in enumerate(types):
        if kind not in blocks:
            raise ConfigError(
                f"config.json ({view.arch}): layers_block_type[{i}] is '{kind}'; expected one of "
                "linear_attention (mamba), full_attention (attention), mlp, moe"
            )
        layers.append(LayerSpec(*block(kind)))
    notes: list[str] = []
    stated = view.cfg.get("num_hidden_layers")
    if isinstance(stated, int) and stated != len(types):
        notes.append(f"num_hidden_layers {stated} is ignored: the layer list has {len(types)} entries "
                     "(NemotronHConfig derives the depth from it)")
    mtp = view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers) not counted")
    if view.opt_bool("tie_word_embeddings", False):
        # NemotronHForCausalLM declares no tied weights (_tied_weights_keys = {}): lm_head is its own matrix
        notes.append("tie_word_embeddings is ignored: NemotronHForCausalLM never ties lm_head to the embedding")
    return replace(finish(view, frame, layers, tie_default=False, notes=tuple(notes)), tie_embeddings=False)

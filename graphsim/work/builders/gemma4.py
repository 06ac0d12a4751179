"""Gemma-4 (text): sliding/global attention with per-layer head widths, K=V global layers, KV sharing,
an optional MoE block beside the dense MLP, and per-layer input embeddings.

Read from transformers models/gemma4 (configuration_gemma4.py Gemma4TextConfig, modeling_gemma4.py):

- `layer_types` (else sliding except every 6th layer, Gemma4TextConfig.__post_init__); the last layer
  is always full attention. Sliding layers attend over `sliding_window`.
- Per layer, `per_layer_config` overrides `head_dim` / `num_key_value_heads` (keys are layer indices);
  a config without it states `global_head_dim` (default 512) and `num_global_key_value_heads` for the
  full layers, as __post_init__ builds per_layer_config from them (the KV-head override only with
  attention_k_eq_v).
- Gemma4TextAttention: q/k/v/o (bias attention_bias), q_norm and k_norm over head_dim, a v_norm
  without a scale (no weight); full layers with attention_k_eq_v have no v_proj. The last
  num_kv_shared_layers layers reuse an earlier layer's K/V (Gemma4TextConfig.kv_sharing_modes
  "reuse"): no k/v projections or norms, and with use_double_wide_mlp a dense MLP twice as wide.
- Gemma4TextDecoderLayer: four sandwich norms; with enable_moe_block a router (input scale,
  per-expert scale, a norm without weight, proj) and gated experts beside the dense MLP, with three
  more norms; a `layer_scalar` buffer; with hidden_size_per_layer_input the per-layer-input gate,
  projection and norm (and, on the model, the packed per-layer table, its projection and norm).

KV (vLLM vllm/model_executor/models/gemma4.py Gemma4Attention): every layer's Attention caches K and
V (a K=V layer loads K's weights into both slots of qkv_proj, so V is cached separately, normed
without a scale); a KV-sharing layer passes kv_sharing_target_layer_name (the last earlier layer of
its type) and keeps no cache of its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders.common import finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import DenseFfn, FfnSpec, GqaAttention, LayerSpec, ModelSpec, MoeFfn, Weight, WeightKind


def _layer_types(view: ConfigView, layers: int) -> list[str]:
    types = list(view.layer_types(layers) or
                 ("sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)))
    bad = [t for t in types if t not in ("sliding_attention", "full_attention")]
    if bad:
        raise ConfigError(f"config.json ({view.arch}): layer_types holds '{bad[0]}'; expected sliding_attention "
                          "or full_attention")
    types[-1] = "full_attention"  # Gemma4TextConfig.__post_init__ forces the last layer to full attention
    return types


def _overrides(view: ConfigView, types: list[str], k_eq_v: bool) -> dict[int, dict[str, Any]]:
    stated = view.cfg.get("per_layer_config")
    if stated is None:
        over: dict[str, Any] = {"head_dim": view.opt_int("global_head_dim", 512)}
        global_kv = view.opt_int("num_global_key_value_heads", None)
        if k_eq_v and global_kv is not None:
            over["num_key_value_heads"] = global_kv
        return {i: over for i, t in enumerate(types) if t == "full_attention"}
    if not isinstance(stated, dict):
        raise ConfigError(f"config.json ({view.arch}): per_layer_config is not an object of layer overrides")
    out: dict[int, dict[str, Any]] = {}
    for key, fields in stated.items():
        if not str(key).isdigit() or not isinstance(fields, dict) or set(fields) - {"head_dim", "num_key_value_heads"}:
            raise ConfigError(
                f"config.json ({view.arch}): per_layer_config[{key!r}] must map a layer index to head_dim and/or "
                "num_key_value_heads (the overrides the accountant reads)"
            )
        out[int(key)] = fields
    return out


def _kv_sharing_modes(view: ConfigView, layers: int, types: list[str]) -> list[str | None]:
    """Gemma4TextConfig.kv_sharing_modes: the last num_kv_shared_layers layers reuse K/V."""
    shared = view.opt_int("num_kv_shared_layers", 0, minimum=0) or 0
    if shared > layers:
        raise ConfigError(f"config.json ({view.arch}): num_kv_shared_layers {shared} exceeds num_hidden_layers {layers}")
    first = layers - shared
    if 0 < shared < layers and set(types[:first]) != set(types):
        raise ConfigError(f"config.json ({view.arch}): the layers sharing K/V use a layer type no earlier layer "
                          "produces; fix layer_types or num_kv_shared_layers")
    return [None if i < first else "reuse" for i in range(layers)]


def build_gemma4_text(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    hidden, heads = frame.hidden, frame.heads
    types = _layer_types(view, frame.layers)
    k_eq_v = view.opt_bool("attention_k_eq_v", False)
    overrides = _overrides(view, types, k_eq_v)
    modes = _kv_sharing_modes(view, frame.layers, types)
    window = view.req_int("sliding_window")
    bias = view.opt_bool("attention_bias", False)
    head_dim, kv_heads = view.head_dim(heads, hidden), view.kv_heads(heads)
    inter = view.req_int("intermediate_size")
    double_wide = view.opt_bool("use_double_wide_mlp", False)
    moe = view.opt_bool("enable_moe_block", False)

    def ffn(reuse: bool) -> FfnSpec:
        width = inter * (2 if double_wide and reuse else 1)
        if not moe:
            return DenseFfn(hidden=hidden, intermediate=width, block_norms=2)
        experts, top_k = view.req_int("num_experts"), view.req_int("top_k_experts")
        if top_k > experts:
            raise ConfigError(f"config.json ({view.arch}): top_k_experts {top_k} exceeds num_experts {experts}")
        return MoeFfn(hidden=hidden, expert_intermediate=view.req_int("moe_intermediate_size"), experts=experts,
                      top_k=top_k, dense_intermediate=width, router_scales=True, block_norms=5, module="",
                      router_module="router.proj")

    layers = []
    for i, kind in enumerate(types):
        over = overrides.get(i, {})
        hd, kv = int(over.get("head_dim", head_dim)), int(over.get("num_key_value_heads", kv_heads))
        if hd < 1 or kv < 1 or heads % kv:
            raise ConfigError(f"config.json ({view.arch}): layer {i} has head_dim {hd} and {kv} KV heads for "
                              f"{heads} heads; fix per_layer_config")
        sliding = kind == "sliding_attention"
        attn = GqaAttention(
            hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, window=window if sliding else None,
            q_bias=bias, kv_bias=bias, o_bias=bias, qk_norm=True, block_norms=2,
            k_eq_v=k_eq_v and not sliding, kv_shared=modes[i] == "reuse",
        )
        layers.append(LayerSpec(attn, ffn(modes[i] == "reuse")))

    # Gemma4TextDecoderLayer.layer_scalar: a (persistent) buffer of one element per layer
    extras = [Weight("scalar", "layer_scalar", WeightKind.VECTOR, (1,))]
    embed_extras: list[Weight] = []
    ple = view.opt_int("hidden_size_per_layer_input", 0, minimum=0) or 0
    notes: list[str] = []
    if ple:
        ple_vocab = view.req_int("vocab_size_per_layer_input")
        packed = frame.layers * ple
        embed_extras = [
            Weight("embed", "embed_tokens_per_layer", WeightKind.EMBEDDING, (ple_vocab, packed), quantizable=False),
            Weight("embed", "per_layer_model_projection", WeightKind.MATRIX, (packed, hidden)),
            Weight("embed", "per_layer_projection_norm", WeightKind.NORM, (ple,)),
        ]
        extras += [
            Weight("ple", "per_layer_input_gate", WeightKind.MATRIX, (ple, hidden)),
            Weight("ple", "per_layer_projection", WeightKind.MATRIX, (hidden, ple)),
            Weight("ple", "post_per_layer_input_norm", WeightKind.NORM, (hidden,)),
        ]
    if view.cfg.get("use_bidirectional_attention") == "all":
        notes.append("use_bidirectional_attention 'all': attention is accounted causal (the accountant's convention)")
    spec = finish(view, frame, layers, tie_default=True, notes=tuple(notes))
    return replace(spec, embed_extras=tuple(embed_extras), layer_extras=tuple(extras))

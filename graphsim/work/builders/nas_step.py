"""DeciLM (Llama-3.x-Nemotron Super/Ultra, NAS "Puzzle" models) and StepFun Step-3.x-Flash text models.

Neither family has a class in the pinned transformers (5.24): each checkpoint ships remote code and vLLM
has its own implementation. The mappings below were read from vLLM's model files and the remote
modelling code; their parameter totals are cross-checked against the model cards and hand-derived
goldens (tests/work/test_work_nas_step.py), NOT against a transformers meta-device model (there is no
class to build one from; `NO_TRANSFORMERS_CLASS` keeps them out of that sweep).

DeciLM (`DeciLMForCausalLM`; vllm/model_executor/models/nemotron_nas.py DeciLMDecoderLayer, and the
remote modeling_decilm.py DeciLMDecoderLayer it mirrors): a Llama decoder whose every layer states its
own block in `block_configs[i]`:
- `attention.no_op`: no attention and no input_layernorm (the layer is its FFN only; vLLM: no KV cache
  for the layer, DeciModel.forward skips it). Otherwise `n_heads_in_group` query heads share one KV head
  (kv_heads = num_attention_heads // n_heads_in_group), head_dim = hidden / heads unless the config states
  `head_dim` (DeciLMAttention is vLLM's LlamaAttention), q/k/v biases from `attention_bias` (or `bias`,
  overridden by `qkv_bias`) and o_proj's from `attention_bias`/`bias` (vLLM bias_o_proj).
- `attention.replace_with_linear`: input_layernorm and one bias-free hidden × hidden linear
  (`self_attn.linear_attn`; remote code DeciLMLinearAttention), no KV. vLLM's nemotron_nas.py does not
  build this block (it reads only `no_op`): counted as the remote code builds it.
- `ffn.no_op`: no MLP and no post_attention_layernorm. `ffn.replace_with_linear`: post_attention_layernorm
  and one bias-free hidden × hidden linear (`mlp.linear_mlp`, remote DeciLMLinearMLP). Otherwise a gated
  SiLU MLP (vLLM LlamaMLP, biases from `mlp_bias`) of width `ffn.intermediate_size`, or from `ffn_mult`:
  int(2 · ffn_mult · hidden / 3) rounded up to a multiple of 256 (nemotron_nas.py
  _ffn_mult_to_intermediate_size / _find_multiple).
- Refused by name (vLLM's nemotron_nas.py builds none of them, the remote code's newer blocks do): a
  windowed or sink attention (`window_length`, `num_sink_tokens`), Mamba or Llama-4 attention blocks, MoE
  or ungated FFN blocks.

Step-3.5/3.7-Flash (`Step3p5ForCausalLM`, the text model of the published `Step3p7ForConditionalGeneration`
checkpoints; vllm/model_executor/models/step3p5.py Step3p5DecoderLayer / Step3p5Attention / FusedMoEBlock):
- Attention: GQA with per-head zero-centred RMSNorms on q and k (GemmaRMSNorm of head_dim: one weight
  vector each), q/k/v biases from `attention_bias`, o_proj without; layers whose `layer_types[i]` equals
  `attention_other_setting["attention_type"]` take that block's num_attention_heads / num_attention_groups /
  head_dim (Step-3.7: 96 query heads on the sliding layers, 64 on the full ones); `sliding_attention` layers
  attend over `sliding_window` (vLLM per_layer_sliding_window; without layer_types the even layers slide);
  `use_head_wise_attn_gate`: g_proj (hidden → heads, no bias), a sigmoid gate per head on the attention
  output before o_proj. `layer_types` may list the MTP layers too (48 entries for 45 layers): only the first
  num_hidden_layers are read, as vLLM indexes it by layer.
- FFN: layers in `moe_layers_enum` (a comma-separated string; absent: every layer but 0) are MoE —
  `moe_num_experts` gated SiLU experts of `moe_intermediate_size`, top `moe_top_k`, a sigmoid router
  (`moe.gate`, hidden → experts, no bias) with a per-expert selection bias (`router_bias`, with
  `use_moe_router_bias`), and one always-on shared expert of `share_expert_dim` (`share_expert`, gated);
  the other layers a gated MLP of `intermediate_size`.
- The LM head is never tied (Step3p5ForCausalLM builds its own ParallelLMHead and ties nothing); the
  multi-token-prediction layers (`num_nextn_predict_layers`) are skipped by vLLM's main-model loader and
  not counted. vLLM keeps the router weight and bias in fp32 (FP32ReplicatedLinear); the accountant prices
  them in the model dtype (288 × 4097 values a layer: 2.4 MB of the 392 GB of Step-3.7-Flash, < 0.03 %).

`Step3p7FlashForCausalLM` is the spelling of aiconfigurator-core's curated flat config
(model_configs/stepfun-ai--Step-3.7-Flash_config.json; its sdk/common.py says the *Flash* spellings exist
only there) of the same text model, under generic key names: num_key_value_heads, num_experts,
num_experts_per_tok, first_k_dense_replace (layers below it dense, the rest MoE), share_expert_dim
(n_shared_experts must be 1). It states neither `attention_other_setting` nor `use_head_wise_attn_gate`, so
it is counted as written: 64 query heads on every layer and no gate (aiconfigurator reads it the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders.common import Frame, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import (
    AttentionSpec, DenseFfn, FfnSpec, GqaAttention, LayerSpec, ModelSpec, MoeFfn, NoAttention, NoFfn, Weight,
    WeightKind,
)

# --- DeciLM -----------------------------------------------------------------------------------------------


def _ffn_mult_to_intermediate(ffn_mult: float, hidden: int) -> int:
    """vLLM nemotron_nas.py _ffn_mult_to_intermediate_size: int(2·mult·hidden/3), up to a multiple of 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return width if width % 256 == 0 else width + 256 - width % 256


def _block(view: ConfigView, i: int, part: str, block: Any) -> dict[str, Any]:
    if not isinstance(block, dict):
        raise ConfigError(f"config.json ({view.arch}): block_configs[{i}].{part} must be an object; fix the config")
    return block


def _refuse(view: ConfigView, i: int, what: str) -> ConfigError:
    return ConfigError(
        f"config.json ({view.arch}): block_configs[{i}] {what}, which vLLM's nemotron_nas.py does not build and the "
        "work accountant does not express; not supported"
    )


def _decilm_attention(view: ConfigView, frame: Frame, i: int, attn: dict[str, Any]) -> tuple[AttentionSpec, tuple[Weight, ...]]:
    if attn.get("no_op"):
        return NoAttention(hidden=frame.hidden, block_norms=0), ()
    if attn.get("replace_with_linear"):  # remote DeciLMLinearAttention: input_layernorm + one linear
        return NoAttention(hidden=frame.hidden, block_norms=1), (
            Weight("linear", "self_attn.linear_attn", WeightKind.MATRIX, (frame.hidden, frame.hidden)),
        )
    for key in ("window_length", "num_sink_tokens", "mamba", "llama4", "sparsify"):
        if attn.get(key) is not None:
            raise _refuse(view, i, f"states attention.{key}")
    if attn.get("unshifted_sink") or attn.get("use_prefill_window_in_sink_attention"):
        raise _refuse(view, i, "asks for sink attention")
    group = attn.get("n_heads_in_group")
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or frame.heads % group:
        raise ConfigError(
            f"config.json ({view.arch}): block_configs[{i}].attention.n_heads_in_group is {group!r}; it must be a "
            f"positive divisor of num_attention_heads ({frame.heads})"
        )
    # vLLM DeciLMDecoderLayer: attention_bias or bias; qkv_bias, when stated, overrides the q/k/v bias only
    bias = view.opt_bool("attention_bias", False) or view.opt_bool("bias", False)
    qkv_bias = view.opt_bool("qkv_bias", bias)
    return GqaAttention(
        hidden=frame.hidden, heads=frame.heads, kv_heads=frame.heads // group,
        head_dim=view.head_dim(frame.heads, frame.hidden), q_bias=qkv_bias, kv_bias=qkv_bias, o_bias=bias,
    ), ()


def _decilm_ffn(view: ConfigView, frame: Frame, i: int, ffn: dict[str, Any]) -> tuple[FfnSpec, tuple[Weight, ...]]:
    if ffn.get("no_op"):
        return NoFfn(hidden=frame.hidden, block_norms=0), ()
    if ffn.get("replace_with_linear"):  # remote DeciLMLinearMLP: post_attention_layernorm + one linear
        return NoFfn(hidden=frame.hidden, block_norms=1), (
            Weight("linear", "mlp.linear_mlp", WeightKind.MATRIX, (frame.hidden, frame.hidden)),
        )
    for key in ("moe", "sparsify"):
        if ffn.get(key) is not None:
            raise _refuse(view, i, f"states ffn.{key}")
    if ffn.get("gated") is False:
        raise _refuse(view, i, "asks for an ungated FFN (ffn.gated false; vLLM's LlamaMLP is gated)")
    mult, width = ffn.get("ffn_mult"), ffn.get("intermediate_size")
    if isinstance(mult, (int, float)) and not isinstance(mult, bool) and mult > 0:
        intermediate = _ffn_mult_to_intermediate(float(mult), frame.hidden)
    elif isinstance(width, int) and not isinstance(width, bool) and width > 0:
        intermediate = width
    else:
        raise ConfigError(
            f"config.json ({view.arch}): block_configs[{i}].ffn states neither a positive ffn_mult nor "
            "intermediate_size; add one"
        )
    return DenseFfn(hidden=frame.hidden, intermediate=intermediate, bias=view.opt_bool("mlp_bias", False)), ()


def build_decilm(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    blocks = view.cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != frame.layers:
        raise ConfigError(
            f"config.json ({view.arch}): block_configs must list one block per layer ({frame.layers}); fix the config"
        )
    layers = []
    for i, raw in enumerate(blocks):
        raw = _block(view, i, "", raw)
        attn, attn_extras = _decilm_attention(view, frame, i, _block(view, i, "attention", raw.get("attention")))
        ffn, ffn_extras = _decilm_ffn(view, frame, i, _block(view, i, "ffn", raw.get("ffn")))
        layers.append(LayerSpec(attn, ffn, attn_extras=attn_extras, ffn_extras=ffn_extras))
    note = ("DeciLM: no transformers class; mapped from vLLM nemotron_nas.py and the remote modeling_decilm.py, "
            "parameter total checked against the model card")
    return finish(view, frame, layers, tie_default=False, notes=(note,))


# --- Step-3.5 / Step-3.7 ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepKeys:
    """Where a Step config spelling keeps each field (vLLM's Step3p5 names, or the curated flat names)."""

    kv_heads: str
    experts: str
    top_k: str
    other_setting: bool  # reads attention_other_setting / use_head_wise_attn_gate
    moe_enum: bool  # True: moe_layers_enum; False: first_k_dense_replace


STEP3P5 = StepKeys("num_attention_groups", "moe_num_experts", "moe_top_k", other_setting=True, moe_enum=True)
STEP3P7_FLASH = StepKeys("num_key_value_heads", "num_experts", "num_experts_per_tok", other_setting=False, moe_enum=False)


def _step_moe_layers(view: ConfigView, keys: StepKeys, layers: int) -> set[int]:
    if not keys.moe_enum:
        first = view.opt_int("first_k_dense_replace", 0, minimum=0)
        return set(range(first, layers))
    raw = view.cfg.get("moe_layers_enum")
    if raw is None:
        return set(range(1, layers))  # vLLM Step3p5DecoderLayer: every layer but 0
    try:
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return {int(str(x).strip()) for x in items if str(x).strip()}
    except (ValueError, TypeError):
        raise ConfigError(
            f"config.json ({view.arch}): moe_layers_enum is {raw!r}; list the MoE layer indices, e.g. \"3,4,5\""
        ) from None


def _step_layer_types(view: ConfigView, layers: int) -> tuple[str, ...] | None:
    types = view.opt_str_list("layer_types")
    if types is None:
        return None
    if len(types) < layers:
        raise ConfigError(
            f"config.json ({view.arch}): layer_types has {len(types)} entries for {layers} layers; fix the config"
        )
    bad = sorted({t for t in types[:layers]} - {"full_attention", "sliding_attention"})
    if bad:
        raise ConfigError(
            f"config.json ({view.arch}): layer_types holds {bad}; expected full_attention or sliding_attention"
        )
    return types[:layers]


def _step_geometry(view: ConfigView, keys: StepKeys, frame: Frame, kind: str | None) -> tuple[int, int, int]:
    """(query heads, KV heads, head_dim) of a layer of `kind` (vLLM Step3p5DecoderLayer.__init__)."""
    heads = frame.heads
    kv = view.opt_int(keys.kv_heads, heads)
    head_dim = view.head_dim(heads, frame.hidden)
    other = view.cfg.get("attention_other_setting") if keys.other_setting else None
    if isinstance(other, dict) and kind is not None and kind == other.get("attention_type"):
        heads = int(other.get("num_attention_heads") or heads)
        kv = int(other.get("num_attention_groups") or kv)
        head_dim = int(other.get("head_dim") or head_dim)
    if heads % kv:
        raise ConfigError(
            f"config.json ({view.arch}): {heads} attention heads are not a multiple of {kv} KV heads; fix the config"
        )
    return heads, kv, head_dim


def build_step(keys: StepKeys, view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    types = _step_layer_types(view, frame.layers)
    window = view.opt_int("sliding_window", None)
    gate = keys.other_setting and view.opt_bool("use_head_wise_attn_gate", False)
    bias = view.opt_bool("attention_bias", False)
    moe_layers = _step_moe_layers(view, keys, frame.layers)
    experts, top_k = view.req_int(keys.experts), view.req_int(keys.top_k)
    if top_k > experts:
        raise ConfigError(f"config.json ({view.arch}): {keys.top_k} {top_k} exceeds {keys.experts} {experts}; fix the config")
    if not keys.moe_enum and view.opt_int("n_shared_experts", 1, minimum=0) != 1:
        raise ConfigError(
            f"config.json ({view.arch}): n_shared_experts must be 1 (Step's MoE has one shared expert of "
            "share_expert_dim); fix the config"
        )
    moe = MoeFfn(
        hidden=frame.hidden, expert_intermediate=view.req_int("moe_intermediate_size"), experts=experts, top_k=top_k,
        router_score_bias=view.opt_bool("use_moe_router_bias", True), shared_intermediate=view.req_int("share_expert_dim"),
        module="moe", router_module="gate", shared_module="share_expert",
    )
    dense = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size"))
    layers = []
    for i in range(frame.layers):
        kind = types[i] if types is not None else ("sliding_attention" if i % 2 == 0 else "full_attention")
        sliding = window is not None and kind == "sliding_attention"
        heads, kv, head_dim = _step_geometry(view, keys, frame, kind if types is not None else None)
        attn = GqaAttention(
            hidden=frame.hidden, heads=heads, kv_heads=kv, head_dim=head_dim, window=window if sliding else None,
            q_bias=bias, kv_bias=bias, qk_norm=True,
        )
        extras = (Weight("gate", "self_attn.g_proj", WeightKind.MATRIX, (heads, frame.hidden)),) if gate else ()
        layers.append(LayerSpec(attn, moe if i in moe_layers else dense, attn_extras=extras))
    note = (f"{view.arch}: no transformers class; mapped from vLLM step3p5.py, parameter totals checked against the "
            "model card (MTP layers not counted)")
    spec = finish(view, frame, layers, tie_default=False, notes=(note,))
    # Step3p5ForCausalLM never ties its lm_head to the embedding, whatever tie_word_embeddings says
    return replace(spec, tie_embeddings=False)


# --- registration -----------------------------------------------------------------------------------------


def _step3p5(view: ConfigView) -> ModelSpec:
    return build_step(STEP3P5, view)


def _step3p7_flash(view: ConfigView) -> ModelSpec:
    return build_step(STEP3P7_FLASH, view)


ARCHITECTURES = {
    "DeciLMForCausalLM": build_decilm,
    "Step3p5ForCausalLM": _step3p5,
    "Step3p7FlashForCausalLM": _step3p7_flash,
}

# Text-model `model_type`s of remote-code wrappers (registry.language_model): the published Step-3.7-Flash is
# Step3p7ForConditionalGeneration whose text_config has model_type "step3p5" (vLLM step3p7.py
# Step3p7ForConditionalGeneration builds its language_model from config.text_config, a Step3p5ForCausalLM); the
# vision tower is not counted (the wrapper's note says so).
TEXT_MODEL_TYPES = {"step3p5": "Step3p5ForCausalLM"}

# Registered architectures without a class in the pinned transformers: no config-class defaults, no meta
# model; their cross-check is the model card and the vLLM source cited above.
NO_TRANSFORMERS_CLASS = frozenset(ARCHITECTURES)

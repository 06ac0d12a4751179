"""Qwen3-Next and Qwen3.5: gated-delta-net linear attention interleaved with gated full attention.

`layer_types` (or, when absent, `full_attention_interval`: layer i is full attention when
(i + 1) is a multiple of it) chooses the attention per layer. Full-attention layers are GQA with
q/k norms and an output gate (q_proj emits query and gate). The FFN follows the Qwen sparse
schedule, with one sigmoid-gated shared expert of `shared_expert_intermediate_size`.

Qwen3.5 (transformers models/qwen3_5, qwen3_5_moe) has the same two attention blocks (its
in_proj_qkv + in_proj_z + in_proj_b + in_proj_a hold the elements of Qwen3-Next's in_proj_qkvz and
in_proj_ba); the dense model has a dense MLP in every layer, the MoE model a MoE block (with the
gated shared expert) in every layer. Multi-token-prediction layers (`mtp_num_hidden_layers`) are
not part of the serving forward pass and are not counted. Qwen3.5 keeps the gated delta net's recurrent
state in its config's `mamba_ssm_dtype` (float32 in the released configs): vLLM's
`Qwen3_5ForConditionalGenerationConfig.verify_and_update_config` (vllm/model_executor/models/config.py, in
MODELS_CONFIG_MAP for Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration, whose text
model the accountant reads as Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM) sets mamba_ssm_cache_dtype to it
when left "auto"; Qwen3-Next has no such hook.
"""

from __future__ import annotations

from graphsim.errors import ConfigError
from graphsim.work.builders.common import MoeFields, ffn_schedule, finish, gqa_attention, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.dtypes import DType, parse_dtype
from graphsim.work.specs import AttentionSpec, GatedDeltaNet, LayerSpec, ModelSpec

QWEN3_NEXT_MOE = MoeFields(
    "num_experts",
    "moe_intermediate_size",
    shared_key="shared_expert_intermediate_size",
    shared_gate=True,
    sparse_schedule=True,
)
QWEN3_5_MOE = MoeFields(
    "num_experts", "moe_intermediate_size", shared_key="shared_expert_intermediate_size", shared_gate=True,
)


# the architectures whose vLLM config hook reads `mamba_ssm_dtype` (module docstring)
SSM_DTYPE_HOOK = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")


def _layer_types(view: ConfigView, layers: int) -> tuple[str, ...]:
    types = view.layer_types(layers)
    if types is not None:
        return types
    interval = view.opt_int("full_attention_interval", 4)
    assert interval is not None
    return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers))


def build_qwen3_next(view: ConfigView) -> ModelSpec:
    return build_gated_hybrid(QWEN3_NEXT_MOE, view)


def build_gated_hybrid(moe: MoeFields | None, view: ConfigView) -> ModelSpec:
    """Gated delta net + gated attention layers; FFNs per `moe` (None: dense MLPs)."""
    frame = read_frame(view)
    full = gqa_attention(view, frame, qk_norm=True, output_gate=True)
    linear = GatedDeltaNet(
        hidden=frame.hidden,
        k_heads=view.req_int("linear_num_key_heads"),
        v_heads=view.req_int("linear_num_value_heads"),
        k_head_dim=view.req_int("linear_key_head_dim"),
        v_head_dim=view.req_int("linear_value_head_dim"),
        conv_kernel=view.req_int("linear_conv_kernel_dim"),
        ssm_dtype=_ssm_dtype(view),
    )
    if linear.v_heads % linear.k_heads:
        raise ConfigError(
            f"config.json ({view.arch}): linear_num_value_heads {linear.v_heads} is not a multiple of "
            f"linear_num_key_heads {linear.k_heads}; fix the config"
        )
    ffns = ffn_schedule(view, frame.hidden, frame.layers, moe)
    layers = []
    for i, kind in enumerate(_layer_types(view, frame.layers)):
        if kind == "full_attention":
            attn: AttentionSpec = full
        elif kind == "linear_attention":
            attn = linear
        else:
            raise ConfigError(
                f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not supported "
                "(expected full_attention or linear_attention)"
            )
        layers.append(LayerSpec(attn, ffns[i]))
    notes: tuple[str, ...] = ()
    mtp = view.opt_int("mtp_num_hidden_layers", 0, minimum=0)
    if mtp:
        notes = (f"{mtp} multi-token-prediction layer(s) (mtp_num_hidden_layers) not counted",)
    return finish(view, frame, layers, tie_default=False, notes=notes)


def _ssm_dtype(view: ConfigView) -> DType | None:
    """Qwen3.5's `mamba_ssm_dtype` (config or config-class default; None when absent or for Qwen3-Next:
    vLLM's "auto")."""
    if view.arch not in SSM_DTYPE_HOOK:
        return None
    text = view.opt_str("mamba_ssm_dtype", "auto")
    return None if text == "auto" else parse_dtype(text, "mamba_ssm_dtype")

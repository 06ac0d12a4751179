"""DeepSeek-V2/V3 decoders: multi-head latent attention and DeepSeekMoE.

Layer i is MoE when `n_routed_experts` is set, `i >= first_k_dense_replace` and
`i % moe_layer_freq == 0`; other layers use a dense MLP of `intermediate_size`. Shared experts are
one MLP of width `n_shared_experts · moe_intermediate_size`. The score-correction vector exists
when `topk_method` is `noaux_tc` (V3). Multi-token-prediction layers (`num_nextn_predict_layers`)
are not part of the serving forward pass and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.errors import ConfigError
from graphsim.work.builders.common import MLP_BIAS, dense_ffn, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import FfnSpec, LayerSpec, MlaAttention, ModelSpec, MoeFfn


@dataclass(frozen=True)
class MlaProfile:
    first_k_dense_default: int  # HF config defaults: V2 0, V3 3
    topk_method_default: str  # V2 "greedy", V3 "noaux_tc"


DEEPSEEK_V2 = MlaProfile(first_k_dense_default=0, topk_method_default="greedy")
DEEPSEEK_V3 = MlaProfile(first_k_dense_default=3, topk_method_default="noaux_tc")


def _moe(view: ConfigView, hidden: int, profile: MlaProfile) -> MoeFfn | None:
    experts = view.opt_int("n_routed_experts", None)
    if experts is None:
        return None
    top_k = view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(
            f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds n_routed_experts {experts}; fix the config"
        )
    width = view.req_int("moe_intermediate_size")
    shared = view.opt_int("n_shared_experts", 0, minimum=0) or 0
    topk_method = view.opt_str("topk_method", profile.topk_method_default)
    return MoeFfn(
        hidden=hidden,
        expert_intermediate=width,
        experts=experts,
        top_k=top_k,
        router_score_bias=topk_method == "noaux_tc",
        shared_intermediate=shared * width,
        shared_bias=MLP_BIAS.read(view),  # DeepseekV2MLP / V3MLP: bias=config.mlp_bias (shared experts too)
        shared_module="shared_experts",
    )


def build_mla_decoder(profile: MlaProfile, view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    q_lora = view.opt_int("q_lora_rank", None)
    attn = MlaAttention(
        hidden=frame.hidden,
        heads=frame.heads,
        q_lora_rank=q_lora,
        kv_lora_rank=view.req_int("kv_lora_rank"),
        qk_nope_head_dim=view.req_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.req_int("qk_rope_head_dim"),
        v_head_dim=view.req_int("v_head_dim"),
        bias=view.opt_bool("attention_bias", False),
    )
    moe = _moe(view, frame.hidden, profile)
    first_dense = view.opt_int("first_k_dense_replace", profile.first_k_dense_default, minimum=0)
    freq = view.opt_int("moe_layer_freq", 1)
    layers = []
    dense: FfnSpec | None = None
    for i in range(frame.layers):
        if moe is not None and i >= first_dense and i % freq == 0:
            ffn: FfnSpec = moe
        else:
            dense = dense or dense_ffn(view, frame.hidden, bias=MLP_BIAS)
            ffn = dense
        layers.append(LayerSpec(attn, ffn))
    notes: tuple[str, ...] = ()
    mtp = view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes = (f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers) not counted",)
    return finish(view, frame, layers, tie_default=False, notes=notes)

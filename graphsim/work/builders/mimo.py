"""MiMo-V2-Flash: sliding-window / full attention hybrid with asymmetric q/k and v head widths,
sinks on sliding layers, and DeepSeek-style routed experts without shared experts.

Read off transformers models/mimo_v2_flash (MiMoV2FlashConfig.__post_init__, MiMoV2FlashAttention,
MiMoV2FlashDecoderLayer): without `layer_types`, layer 0 and every 6th layer ((i + 1) % 6 == 0)
are full attention, the rest sliding; sliding layers have twice `num_key_value_heads` and one
learned sink per head; q/k heads are `head_dim` wide and v heads `v_head_dim`; the window is
`sliding_window`, or `sliding_window_size` + 1 when the hub config states that key (SGLang's
reference attends to that many previous tokens plus the query). Without `mlp_layer_types`, layer 0
is a dense MLP and the rest MoE (`n_routed_experts` × `moe_intermediate_size`, sigmoid router with a
score-correction vector, no shared expert).
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import dense_ffn, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import FfnSpec, GqaAttention, LayerSpec, ModelSpec, MoeFfn


def build_mimo_v2_flash(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    types = view.layer_types(frame.layers) or tuple(
        "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention" for i in range(frame.layers)
    )
    size = view.opt_int("sliding_window_size", None)
    window = size + 1 if size is not None else view.req_int("sliding_window")
    bias = view.opt_bool("attention_bias", False)
    kv = view.req_int("num_key_value_heads")
    full = GqaAttention(
        hidden=frame.hidden,
        heads=frame.heads,
        kv_heads=kv,
        head_dim=view.req_int("head_dim"),
        value_dim=view.req_int("v_head_dim"),
        q_bias=bias,
        kv_bias=bias,
    )
    sliding = replace(full, kv_heads=2 * kv, window=window, sinks=True)
    experts = view.req_int("n_routed_experts")
    moe = MoeFfn(
        hidden=frame.hidden,
        expert_intermediate=view.req_int("moe_intermediate_size"),
        experts=experts,
        top_k=view.req_int("num_experts_per_tok"),
        router_score_bias=True,
    )
    mlp_types = view.opt_str_list("mlp_layer_types") or ("dense",) + ("sparse",) * (frame.layers - 1)
    if len(mlp_types) != frame.layers or len(types) != frame.layers:
        raise ConfigError(
            f"config.json ({view.arch}): layer_types / mlp_layer_types must have num_hidden_layers = {frame.layers} "
            "entries; fix the config"
        )
    layers = []
    dense: FfnSpec | None = None
    for i, (kind, mlp) in enumerate(zip(types, mlp_types, strict=True)):
        if kind not in ("full_attention", "sliding_attention") or mlp not in ("dense", "sparse"):
            raise ConfigError(
                f"config.json ({view.arch}): layer {i} is '{kind}' / '{mlp}'; expected full_attention or "
                "sliding_attention, and dense or sparse"
            )
        if mlp == "sparse":
            ffn: FfnSpec = moe
        else:
            dense = dense or dense_ffn(view, frame.hidden)
            ffn = dense
        layers.append(LayerSpec(sliding if kind == "sliding_attention" else full, ffn))
    return finish(view, frame, layers, tie_default=False)

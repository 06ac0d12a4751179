"""Decoders with softmax GQA attention: one generic builder, configured per architecture.

An architecture differs from its siblings only in traits its HF config class fixes or defaults
(which projections carry biases, q/k norms, how many norms a block owns, the sliding-window rule,
sinks, the MoE field names). `GqaProfile` records those traits; every dimension comes from the
config itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from graphsim.errors import ConfigError
from graphsim.work.builders.common import ALWAYS, NEVER, Flag, MoeFields, ffn_schedule, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import GqaAttention, LayerSpec, ModelSpec


class WindowRule(Enum):
    """Which layers use `sliding_window` when the config has no `layer_types`."""

    ALL = "all"  # every layer (Mistral, Phi-3, Mixtral, Qwen3-MoE)
    FROM_MAX_WINDOW_LAYERS = "from_max_window_layers"  # layers i >= max_window_layers (Qwen2, Qwen3)
    ALTERNATE = "alternate"  # even layers sliding, odd layers full (Gemma-2, gpt-oss)


@dataclass(frozen=True)
class GqaProfile:
    qkv_bias: Flag = NEVER
    o_bias: Flag = NEVER
    qk_norm: bool = False
    attn_norms: int = 1
    ffn_norms: int = 1
    tie_default: bool = False
    sliding_default: int | None = None  # HF config default for sliding_window when the key is absent
    use_sliding: Flag = ALWAYS  # `use_sliding_window` gate (Qwen defaults it to false)
    window_rule: WindowRule = WindowRule.ALL
    sinks: bool = False
    moe: MoeFields | None = None


ATTN_BIAS = Flag("attention_bias", False)

LLAMA = GqaProfile(qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS)
MISTRAL = GqaProfile(sliding_default=4096)
QWEN2 = GqaProfile(
    qkv_bias=ALWAYS, use_sliding=Flag("use_sliding_window", False), window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS,
    sliding_default=4096,
)
QWEN3 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=True, use_sliding=Flag("use_sliding_window", False),
    window_rule=WindowRule.FROM_MAX_WINDOW_LAYERS, sliding_default=4096,
)
PHI3 = GqaProfile()
MIXTRAL = GqaProfile(moe=MoeFields("num_local_experts", "intermediate_size", module="block_sparse_moe"))
QWEN3_MOE = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, qk_norm=True, use_sliding=Flag("use_sliding_window", False),
    sliding_default=4096,
    moe=MoeFields("num_experts", "moe_intermediate_size", sparse_schedule=True),
)
GEMMA2 = GqaProfile(
    qkv_bias=ATTN_BIAS, o_bias=ATTN_BIAS, attn_norms=2, ffn_norms=2, tie_default=True, sliding_default=4096,
    window_rule=WindowRule.ALTERNATE,
)
GPT_OSS = GqaProfile(
    qkv_bias=Flag("attention_bias", True), o_bias=Flag("attention_bias", True), sliding_default=128,
    window_rule=WindowRule.ALTERNATE, sinks=True,
    moe=MoeFields("num_local_experts", "intermediate_size", expert_bias=True, router_bias=True, router_module="router"),
)


def layer_windows(view: ConfigView, layers: int, profile: GqaProfile) -> list[int | None]:
    """Per layer, the sliding window W or None (full causal attention)."""
    window = view.opt_int_or_null("sliding_window", profile.sliding_default)
    if not profile.use_sliding.read(view):
        window = None
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
    first = view.req_int("max_window_layers", minimum=0)
    return [window if i >= first else None for i in range(layers)]


def build_gqa_decoder(profile: GqaProfile, view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    head_dim = view.head_dim(frame.heads, frame.hidden)
    kv_heads = view.kv_heads(frame.heads)
    qkv_bias, o_bias = profile.qkv_bias.read(view), profile.o_bias.read(view)
    ffns = ffn_schedule(view, frame.hidden, frame.layers, profile.moe, profile.ffn_norms)
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
            qk_norm=profile.qk_norm,
            sinks=profile.sinks,
            block_norms=profile.attn_norms,
        )
        layers.append(LayerSpec(attn, ffns[i]))
    return finish(view, frame, layers, profile.tie_default)

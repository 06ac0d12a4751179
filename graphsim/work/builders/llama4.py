"""Llama-4 (text): chunked local attention on RoPE layers, full attention on NoPE layers, MoE with a
shared expert on `moe_layers`.

Read off transformers models/llama4 (Llama4TextConfig.__post_init__, Llama4TextDecoderLayer,
Llama4TextMoe): NoPE layers are every `no_rope_layer_interval`-th (default 4) unless
`no_rope_layers` lists them; RoPE layers use chunked attention of `attention_chunk_size` (a query
at position q sees [C·⌊q/C⌋, q]) when it is set, else full; `layer_types` overrides both. MoE
layers are `moe_layers`, else every `interleave_moe_layer_step`-th from step − 1. A MoE block is
`num_local_experts` experts of `intermediate_size` (top-`num_experts_per_tok`, sigmoid router
without bias) plus one always-on shared expert of `intermediate_size`; other layers are a dense
MLP of `intermediate_size_mlp`. The q/k norm is an L2 norm without weights. Two norms per layer.
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import finish, gqa_attention, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import DenseFfn, FfnSpec, LayerSpec, ModelSpec, MoeFfn


def _layer_types(view: ConfigView, layers: int, chunk: int | None) -> tuple[str, ...]:
    types = view.layer_types(layers)
    if types is not None:
        return types
    no_rope = view.opt_int_list("no_rope_layers")
    if not no_rope:
        interval = view.opt_int("no_rope_layer_interval", 4)
        no_rope = tuple(int((i + 1) % interval != 0) for i in range(layers))
    if len(no_rope) != layers:
        raise ConfigError(
            f"config.json ({view.arch}): no_rope_layers has {len(no_rope)} entries but num_hidden_layers is {layers}; "
            "fix the config"
        )
    # no_rope_layers[i] = 1 means layer i uses RoPE (transformers' naming)
    return tuple("chunked_attention" if rope and chunk is not None else "full_attention" for rope in no_rope)


def _moe_layers(view: ConfigView, layers: int) -> set[int]:
    listed = view.opt_int_list("moe_layers", default=(-1,))
    if listed != (-1,):
        return set(listed)
    step = view.opt_int("interleave_moe_layer_step", 1)
    return set(range(step - 1, layers, step))


def build_llama4_text(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    chunk = view.opt_int_or_null("attention_chunk_size", 8192)
    base = gqa_attention(view, frame)
    experts = view.req_int("num_local_experts")
    width = view.req_int("intermediate_size")
    moe = MoeFfn(
        hidden=frame.hidden,
        expert_intermediate=width,
        experts=experts,
        top_k=view.req_int("num_experts_per_tok"),
        shared_intermediate=width,
        module="feed_forward",
        router_module="router",
        shared_module="shared_expert",
    )
    dense = DenseFfn(hidden=frame.hidden, intermediate=view.req_int("intermediate_size_mlp"), module="feed_forward")
    moe_layers = _moe_layers(view, frame.layers)
    layers = []
    for i, kind in enumerate(_layer_types(view, frame.layers, chunk)):
        if kind == "chunked_attention":
            if chunk is None:
                raise ConfigError(
                    f"config.json ({view.arch}): layer_types[{i}] is chunked_attention but attention_chunk_size is "
                    "unset; add attention_chunk_size"
                )
            attn = replace(base, chunk=chunk)
        elif kind == "full_attention":
            attn = base
        else:
            raise ConfigError(
                f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not supported "
                "(expected chunked_attention or full_attention)"
            )
        ffn: FfnSpec = moe if i in moe_layers else dense
        layers.append(LayerSpec(attn, ffn))
    return finish(view, frame, layers, tie_default=False)

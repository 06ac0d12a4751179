"""Builder pieces shared by every architecture: the stack's frame, FFN blocks, layer schedules."""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.errors import ConfigError
from graphsim.work.config import ConfigView
from graphsim.work.quant import parse_quantization
from graphsim.work.specs import DenseFfn, FfnSpec, GqaAttention, LayerSpec, LayerStack, ModelSpec, MoeFfn


@dataclass(frozen=True)
class Flag:
    """A boolean read from a config key with the HF config class's default (key None: fixed value)."""

    key: str | None
    default: bool

    def read(self, view: ConfigView) -> bool:
        return view.opt_bool(self.key, self.default) if self.key else self.default


NEVER = Flag(None, False)
ALWAYS = Flag(None, True)


@dataclass(frozen=True)
class Frame:
    """The fields every decoder has."""

    hidden: int
    layers: int
    heads: int
    vocab: int


def read_frame(view: ConfigView) -> Frame:
    return Frame(
        hidden=view.req_int("hidden_size"),
        layers=view.req_int("num_hidden_layers"),
        heads=view.req_int("num_attention_heads"),
        vocab=view.req_int("vocab_size"),
    )


def gqa_attention(view: ConfigView, frame: Frame, qk_norm: bool = False, output_gate: bool = False) -> GqaAttention:
    """Softmax attention from the config's heads, KV heads and head_dim, every projection's bias from
    `attention_bias` (default false)."""
    bias = view.opt_bool("attention_bias", False)
    return GqaAttention(
        hidden=frame.hidden,
        heads=frame.heads,
        kv_heads=view.kv_heads(frame.heads),
        head_dim=view.head_dim(frame.heads, frame.hidden),
        q_bias=bias,
        kv_bias=bias,
        o_bias=bias,
        qk_norm=qk_norm,
        output_gate=output_gate,
    )


def finish(
    view: ConfigView, frame: Frame, layers: list[LayerSpec], tie_default: bool, notes: tuple[str, ...] = (),
    norm_bias: bool = False,
) -> ModelSpec:
    dtype, source = view.dtype()
    return ModelSpec(
        architecture=view.arch,
        hidden=frame.hidden,
        vocab=frame.vocab,
        tie_embeddings=view.opt_bool("tie_word_embeddings", tie_default),
        stack=LayerStack(tuple(layers)),
        dtype=dtype,
        dtype_source=source,
        quant=parse_quantization(view.cfg),
        notes=notes,
        norm_bias=norm_bias,
    )


# --- FFN blocks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeFields:
    """Where an architecture's config keeps its MoE geometry, and the block's fixed traits."""

    experts_key: str
    intermediate_key: str
    top_k_key: str = "num_experts_per_tok"
    shared_key: str | None = None  # config key of the shared expert's width (Qwen3-Next)
    shared_gate: bool = False
    expert_bias: bool = False
    router_bias: bool = False
    module: str = "mlp"
    router_module: str = "gate"
    shared_module: str = "shared_expert"
    sparse_schedule: bool = False  # decoder_sparse_step / mlp_only_layers choose which layers are MoE
    shared_count_key: str | None = None  # DeepSeek-style: shared width = this count × the expert width
    first_dense_key: str | None = None  # layers below this index use the dense MLP (first_k_dense_replace)
    score_bias: bool = False  # sigmoid router with a per-expert score-correction vector (noaux_tc)
    layer_types: bool = False  # the config class lists "dense" / "sparse" per layer in mlp_layer_types
    # ERNIE-4.5-MoE: layer i is MoE when (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i
    # <= moe_layer_end_index (−1: the last layer) (Ernie4_5_MoeDecoderLayer, Ernie4_5_MoeConfig.__post_init__)
    interval_schedule: bool = False
    shared_bias: Flag | None = None  # the shared expert's biases (ERNIE-4.5-MoE: use_bias)
    # top-k may be a per-layer list (transformers' `moe_topk: int | list[int]`, HunYuanMoEV1Config, indexed by
    # layer in HunYuanMoEV1Gate; vLLM hunyuan_v1.py HunYuanSparseMoeBlock reads moe_topk[layer_id] likewise)
    per_layer_top_k: bool = False


def dense_ffn(
    view: ConfigView, hidden: int, key: str = "intermediate_size", norms: int = 1, bias: Flag = NEVER, gated: bool = True
) -> DenseFfn:
    return DenseFfn(hidden=hidden, intermediate=view.req_int(key), gated=gated, bias=bias.read(view), block_norms=norms)


def moe_ffn(
    view: ConfigView, hidden: int, fields: MoeFields, norms: int = 1, layer: int = 0, layers: int = 1
) -> MoeFfn:
    """The MoE block of layer `layer` of `layers` (the layer matters only with `fields.per_layer_top_k`)."""
    experts = view.req_int(fields.experts_key)
    top_k = (view.req_int_at(fields.top_k_key, layer, layers) if fields.per_layer_top_k
             else view.req_int(fields.top_k_key))
    if top_k > experts:
        raise ConfigError(
            f"config.json ({view.arch}): {fields.top_k_key} {top_k} exceeds {fields.experts_key} {experts}; fix the config"
        )
    shared = view.opt_int(fields.shared_key, 0, minimum=0) if fields.shared_key else 0
    if fields.shared_count_key:
        shared = (view.opt_int(fields.shared_count_key, 0, minimum=0) or 0) * view.req_int(fields.intermediate_key)
    return MoeFfn(
        hidden=hidden,
        expert_intermediate=view.req_int(fields.intermediate_key),
        experts=experts,
        top_k=top_k,
        expert_bias=fields.expert_bias,
        router_bias=fields.router_bias,
        router_score_bias=fields.score_bias,
        shared_intermediate=shared or 0,
        shared_gate=fields.shared_gate and bool(shared),
        shared_bias=fields.shared_bias.read(view) if fields.shared_bias else False,
        block_norms=norms,
        module=fields.module,
        router_module=fields.router_module,
        shared_module=fields.shared_module,
    )


MLP_BIAS = Flag("mlp_bias", False)


def ffn_schedule(
    view: ConfigView, hidden: int, layers: int, fields: MoeFields | None, norms: int = 1, bias: Flag = MLP_BIAS,
    gated: bool = True,
) -> list[FfnSpec]:
    """One FFN per layer: dense, all-MoE, or Qwen-style sparse schedule (decoder_sparse_step, mlp_only_layers)."""
    if fields is None:
        dense = dense_ffn(view, hidden, norms=norms, bias=bias, gated=gated)
        return [dense] * layers
    moe = moe_ffn(view, hidden, fields, norms, 0, layers)
    if fields.per_layer_top_k:  # every layer of such a class is MoE (HunYuanMoEV1DecoderLayer)
        return [moe_ffn(view, hidden, fields, norms, i, layers) for i in range(layers)]
    kinds = view.opt_str_list("mlp_layer_types") if fields.layer_types else None
    if kinds is not None:  # transformers 5's per-layer "dense" / "sparse" list, when the class has one
        if len(kinds) != layers or any(k not in ("dense", "sparse") for k in kinds):
            raise ConfigError(
                f"config.json ({view.arch}): mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} "
                "layers; fix the config"
            )
        dense = dense_ffn(view, hidden, norms=norms, bias=bias)
        return [moe if k == "sparse" else dense for k in kinds]
    if fields.interval_schedule:
        interval = view.opt_int("moe_layer_interval", 1) or 1
        start = view.opt_int("moe_layer_start_index", 0, minimum=0) or 0
        end = view.opt_int("moe_layer_end_index", -1, minimum=-1)
        last = layers - 1 if end is None or end == -1 else end
        dense = dense_ffn(view, hidden, norms=norms, bias=bias)
        return [moe if (i + 1) % interval == 0 and start <= i <= last else dense for i in range(layers)]
    if fields.first_dense_key:
        first = view.opt_int(fields.first_dense_key, 0, minimum=0) or 0
        dense = dense_ffn(view, hidden, norms=norms, bias=bias)
        return [dense if i < first else moe for i in range(layers)]
    if not fields.sparse_schedule:
        return [moe] * layers
    step = view.opt_int("decoder_sparse_step", 1)
    dense_only = set(view.opt_int_list("mlp_only_layers"))
    out: list[FfnSpec] = []
    for i in range(layers):
        if i not in dense_only and (i + 1) % step == 0:
            out.append(moe)
        else:
            out.append(dense_ffn(view, hidden, norms=norms))
    return out

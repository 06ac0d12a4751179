"""Weight tables: every parameter tensor of a spec, its segment, and its stored bytes.

Module paths follow the Hugging Face checkpoints (`model.layers.<i>.self_attn.q_proj`,
`model.layers.<i>.mlp.experts.gate_proj`, `lm_head`) so that a quantization config's
`modules_to_not_convert` can be matched against them; each path uses the first layer index of its
group.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.work.dtypes import Precision
from graphsim.work.specs import (
    AttentionSpec, CompressedAttention, DenseFfn, FfnSpec, GatedDeltaNet, GqaAttention, KvCompressor, LayerSpec,
    Mamba1Mixer, Mamba2Mixer, MlaAttention, ModelSpec, MoeFfn, NoAttention, NoFfn, ParallelMixers, RecurrentMixer,
    ShortConv, Weight, WeightKind,
)

M, NORM, BIAS, VEC = WeightKind.MATRIX, WeightKind.NORM, WeightKind.BIAS, WeightKind.VECTOR

ATTN_NORMS = ("input_layernorm", "post_attention_layernorm")
# 0: a parallel block (Cohere) whose attention and MLP read the same input norm
FFN_NORMS = {
    0: (), 1: ("post_attention_layernorm",), 2: ("pre_feedforward_layernorm", "post_feedforward_layernorm"),
    # Gemma-4's MoE layer: the dense MLP's two, the dense branch's post-norm, the routed branch's pre/post-norm
    5: ("pre_feedforward_layernorm", "post_feedforward_layernorm", "post_feedforward_layernorm_1",
        "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"),
}
BLOCK_NORMS = frozenset(ATTN_NORMS) | {name for names in FFN_NORMS.values() for name in names}


@dataclass(frozen=True)
class PlacedWeight:
    """A weight in its segment; `layers` is how many layers hold a copy (1 outside the stack)."""

    segment: str
    path: str
    weight: Weight
    layers: int = 1

    @property
    def elements(self) -> int:
        return self.weight.elements * self.layers


def _linear(part: str, module: str, out_f: int, in_f: int, bias: bool, **kw) -> list[Weight]:
    ws = [Weight(part, module, M, (out_f, in_f), **kw)]
    if bias:
        copies = {k: v for k, v in kw.items() if k in ("copies", "top_k")}
        ws.append(Weight(part, module, BIAS, (out_f,), **copies))
    return ws


def _norms(names: tuple[str, ...], hidden: int) -> list[Weight]:
    return [Weight("norm", name, NORM, (hidden,)) for name in names]


def attention_weights(attn: AttentionSpec) -> tuple[Weight, ...]:
    ws = _norms(ATTN_NORMS[: attn.block_norms], attn.hidden)
    if isinstance(attn, GqaAttention):
        sa, hd = "self_attn", attn.head_dim
        q_out = attn.heads * hd * (2 if attn.output_gate else 1)
        moa = {"copies": attn.moa_experts, "top_k": attn.moa_top_k} if attn.moa_experts else {}
        if moa:  # JetMoE MoA: routed q/o experts (JetMoeMoA.input_linear / output_linear) and their router
            ws += _linear("router", f"{sa}.experts.router.layer", attn.moa_experts, attn.hidden, False, quantizable=False)
            ws += _linear("qkv", f"{sa}.experts.input_linear", q_out // attn.moa_top_k, attn.hidden, False, **moa)
        else:
            ws += _linear("qkv", f"{sa}.q_proj", q_out, attn.hidden, attn.q_bias)
        if not attn.kv_shared:
            ws += _linear("qkv", f"{sa}.k_proj", attn.kv_heads * hd, attn.hidden, attn.kv_bias)
            if not attn.k_eq_v:
                ws += _linear("qkv", f"{sa}.v_proj", attn.kv_heads * attn.v_head_dim, attn.hidden, attn.kv_bias)
        if attn.qk_norm:
            q_w, k_w = (attn.heads * hd, attn.kv_heads * hd) if attn.qk_norm_full else (hd, hd)
            ws.append(Weight("norm", f"{sa}.q_norm", NORM, (q_w,)))
            if attn.qk_norm_bias:
                ws.append(Weight("norm", f"{sa}.q_norm", BIAS, (q_w,)))
            if not attn.kv_shared:
                ws.append(Weight("norm", f"{sa}.k_norm", NORM, (k_w,)))
                if attn.qk_norm_bias:
                    ws.append(Weight("norm", f"{sa}.k_norm", BIAS, (k_w,)))
        if attn.block_indexer is not None:  # transformers minimax_m3_vl MiniMaxM3VLIndexer
            bi, ix = attn.block_indexer, f"{sa}.indexer"
            ws += _linear("index", f"{ix}.q_proj", bi.heads * bi.head_dim, bi.hidden, False)
            ws += _linear("index", f"{ix}.k_proj", bi.head_dim, bi.hidden, False)
            ws += [Weight("index", f"{ix}.q_norm", NORM, (bi.head_dim,)), Weight("index", f"{ix}.k_norm", NORM, (bi.head_dim,))]
        if attn.sinks:
            ws.append(Weight("core", f"{sa}.sinks", VEC, (attn.heads,)))
        if moa:
            ws += _linear("out", f"{sa}.experts.output_linear", attn.hidden, attn.heads * attn.v_head_dim // attn.moa_top_k,
                          False, **moa)
            ws += [Weight("out", f"{sa}.experts.bias", BIAS, (attn.hidden,))] if attn.o_bias else []
        else:
            ws += _linear("out", f"{sa}.o_proj", attn.hidden, attn.heads * attn.v_head_dim, attn.o_bias)
    elif isinstance(attn, MlaAttention):
        sa = "self_attn"
        q_out = attn.heads * attn.qk_head_dim
        if attn.q_lora_rank:
            ws += _linear("q", f"{sa}.q_a_proj", attn.q_lora_rank, attn.hidden, attn.bias)
            ws.append(Weight("norm", f"{sa}.q_a_layernorm", NORM, (attn.q_lora_rank,)))
            if attn.q_gate:  # A.X-K2: q and the output gate from [norm(q_a), q_a]
                ws += _linear("q", f"{sa}.q_gate_proj", attn.heads * (attn.qk_head_dim + attn.v_head_dim),
                              2 * attn.q_lora_rank, False)
            else:
                ws += _linear("q", f"{sa}.q_b_proj", q_out, attn.q_lora_rank, False)
        else:
            ws += _linear("q", f"{sa}.q_proj", q_out, attn.hidden, False)
        ws += _linear("kv", f"{sa}.kv_a_proj_with_mqa", attn.kv_elements_per_token, attn.hidden, attn.bias)
        ws.append(Weight("norm", f"{sa}.kv_a_layernorm", NORM, (attn.kv_lora_rank,)))
        kv_b_out = attn.heads * (attn.qk_nope_head_dim + attn.v_head_dim)
        ws += _linear("kv", f"{sa}.kv_b_proj", kv_b_out, attn.kv_lora_rank, False)
        ws += _linear("out", f"{sa}.o_proj", attn.hidden, attn.heads * attn.v_head_dim, attn.bias)
        if attn.output_gate:  # gated MLA (Kimi-K3, Bailing hybrid): g_proj, a sigmoid gate on the heads' output
            ws += _linear("gate", f"{sa}.g_proj", attn.output_gate, attn.hidden, False)
        if attn.indexer is not None and not attn.indexer.shared:
            ix, ia = attn.indexer, f"{sa}.indexer"
            ws += _linear("index", f"{ia}.wq_b", ix.heads * ix.head_dim, ix.q_lora_rank, False)
            ws += _linear("index", f"{ia}.wk", ix.head_dim, ix.hidden, False)
            # k_norm is a LayerNorm (weight and bias); weights_proj stays bf16 in the fp8 checkpoints
            ws += [Weight("index", f"{ia}.k_norm", NORM, (ix.head_dim,)), Weight("index", f"{ia}.k_norm", BIAS, (ix.head_dim,))]
            ws += _linear("index", f"{ia}.weights_proj", ix.heads, ix.hidden, False, quantizable=False)
    elif isinstance(attn, GatedDeltaNet):
        la = "linear_attn"
        ws += _linear("qkv", f"{la}.in_proj_qkvz", 2 * attn.key_dim + 2 * attn.value_dim, attn.hidden, False)
        ws += _linear("qkv", f"{la}.in_proj_ba", 2 * attn.v_heads, attn.hidden, False)
        ws.append(Weight("core", f"{la}.conv1d", WeightKind.CONV, (attn.conv_dim, attn.conv_kernel)))
        ws.append(Weight("core", f"{la}.dt_bias", VEC, (attn.v_heads,)))
        ws.append(Weight("core", f"{la}.A_log", VEC, (attn.v_heads,)))
        ws.append(Weight("norm", f"{la}.norm", NORM, (attn.v_head_dim,)))
        ws += _linear("out", f"{la}.out_proj", attn.hidden, attn.value_dim, False)
    elif isinstance(attn, Mamba2Mixer):
        # transformers nemotron_h NemotronHMamba2Mixer: in_proj (z, xBC, dt), depthwise conv1d over xBC,
        # dt_bias / A_log / D per head, a gated RMSNorm over the inner width, out_proj
        mx = attn.module
        ws += _linear("in", f"{mx}.in_proj", attn.in_proj_width, attn.hidden, attn.proj_bias)
        ws.append(Weight("core", f"{mx}.conv1d", WeightKind.CONV, (attn.conv_dim, attn.conv_kernel)))
        if attn.conv_bias:
            ws.append(Weight("core", f"{mx}.conv1d", BIAS, (attn.conv_dim,)))
        ws += [Weight("core", f"{mx}.{name}", VEC, (attn.heads,)) for name in ("dt_bias", "A_log", "D")]
        if attn.gated_norm:
            ws.append(Weight("norm", f"{mx}.norm", NORM, (attn.intermediate,)))
        out_bias = attn.proj_bias if attn.out_bias is None else attn.out_bias
        ws += _linear("out", f"{mx}.out_proj", attn.hidden, attn.intermediate, out_bias)
    elif isinstance(attn, ParallelMixers):
        own = attention_weights(attn.attn) if attn.attn_weights else ()  # (shared weights: listed elsewhere)
        ws += [*own, *attention_weights(attn.mamba)]  # the attention owns the norm when it has weights
    elif isinstance(attn, Mamba1Mixer):
        # transformers mamba MambaMixer / jamba JambaMambaMixer: in_proj (x, z), depthwise conv1d over x,
        # x_proj (dt, B, C), dt_proj with its bias, A_log (intermediate × state), D, out_proj
        mx = attn.module
        ws += _linear("in", f"{mx}.in_proj", 2 * attn.intermediate, attn.hidden, attn.proj_bias)
        ws.append(Weight("core", f"{mx}.conv1d", WeightKind.CONV, (attn.intermediate, attn.conv_kernel)))
        if attn.conv_bias:
            ws.append(Weight("core", f"{mx}.conv1d", BIAS, (attn.intermediate,)))
        ws += _linear("in", f"{mx}.x_proj", attn.dt_rank + 2 * attn.state_size, attn.intermediate, False)
        ws += _linear("in", f"{mx}.dt_proj", attn.intermediate, attn.dt_rank, True)
        ws += [Weight("core", f"{mx}.A_log", VEC, (attn.intermediate, attn.state_size)),
               Weight("core", f"{mx}.D", VEC, (attn.intermediate,))]
        if attn.dt_norms:
            ws += [Weight("norm", f"{mx}.dt_layernorm", NORM, (attn.dt_rank,)),
                   Weight("norm", f"{mx}.b_layernorm", NORM, (attn.state_size,)),
                   Weight("norm", f"{mx}.c_layernorm", NORM, (attn.state_size,))]
        ws += _linear("out", f"{mx}.out_proj", attn.hidden, attn.intermediate, attn.proj_bias)
    elif isinstance(attn, ShortConv):
        # transformers lfm2 Lfm2ShortConv: in_proj (B, C, x), depthwise conv, out_proj; biases from conv_bias
        sc = attn.module
        ws += _linear("in", f"{sc}.in_proj", 3 * attn.hidden, attn.hidden, attn.bias)
        ws.append(Weight("core", f"{sc}.conv", WeightKind.CONV, (attn.hidden, attn.conv_kernel)))
        if attn.bias:
            ws.append(Weight("core", f"{sc}.conv", BIAS, (attn.hidden,)))
        ws += _linear("out", f"{sc}.out_proj", attn.hidden, attn.hidden, attn.bias)
    elif isinstance(attn, RecurrentMixer):
        ws += attn.weights  # every parameter, listed by its builder (graphsim/work/builders/linear_attn.py)
    elif isinstance(attn, NoAttention):
        pass
    elif isinstance(attn, CompressedAttention):
        ws += _compressed_attention_weights(attn)
    else:  # pragma: no cover - closed union
        raise TypeError(f"unknown attention spec {type(attn).__name__}")
    return tuple(ws)


def _compressor_weights(c: KvCompressor, prefix: str, part: str, hidden: int) -> list[Weight]:
    """kv_proj / gate_proj (bf16 in the fp8 checkpoints: DeepseekV4PreTrainedModel._keep_in_fp32_modules
    lists them as carrying no fp8 scales), the fp32 per-slot position bias and the entry's RMSNorm."""
    return [
        *_linear(part, f"{prefix}.kv_proj", c.proj_width, hidden, False, quantizable=False),
        *_linear(part, f"{prefix}.gate_proj", c.proj_width, hidden, False, quantizable=False),
        Weight(part, f"{prefix}.position_bias", VEC, (c.ratio, c.proj_width), element_bytes=4),
        Weight("norm", f"{prefix}.kv_norm", NORM, (c.head_dim,)),
    ]


def _compressed_attention_weights(attn: CompressedAttention) -> list[Weight]:
    """transformers models/deepseek_v4 DeepseekV4Attention (+ its CSA/HCA compressor and indexer)."""
    sa = "self_attn"
    ws = _linear("q", f"{sa}.q_a_proj", attn.q_lora_rank, attn.hidden, False)
    ws.append(Weight("norm", f"{sa}.q_a_norm", NORM, (attn.q_lora_rank,)))
    ws += _linear("q", f"{sa}.q_b_proj", attn.heads * attn.head_dim, attn.q_lora_rank, False)
    ws += _linear("kv", f"{sa}.kv_proj", attn.head_dim, attn.hidden, False)
    ws.append(Weight("norm", f"{sa}.kv_norm", NORM, (attn.head_dim,)))
    # DeepseekV4GroupedLinear: one (o_lora_rank × heads·head_dim/o_groups) block per group, stored stacked
    ws += _linear("out", f"{sa}.o_a_proj", attn.o_groups * attn.o_lora_rank, attn.heads * attn.head_dim // attn.o_groups,
                  False)
    ws += _linear("out", f"{sa}.o_b_proj", attn.hidden, attn.o_groups * attn.o_lora_rank, False)
    ws.append(Weight("core", f"{sa}.sinks", VEC, (attn.heads,), element_bytes=4))
    if attn.compressor is not None:
        ws += _compressor_weights(attn.compressor, f"{sa}.compressor", "compress", attn.hidden)
    if attn.index_compressor is not None:
        ix = f"{sa}.compressor.indexer"
        ws += _compressor_weights(attn.index_compressor, ix, "index", attn.hidden)
        ws += _linear("index", f"{ix}.q_b_proj", attn.index_heads * attn.index_compressor.head_dim, attn.q_lora_rank,
                      False)
        ws += _linear("index", f"{ix}.scorer.weights_proj", attn.index_heads, attn.hidden, False, quantizable=False)
    return ws


def _gated_mlp(part: str, prefix: str, hidden: int, inter: int, bias: bool, gated: bool = True, **kw) -> list[Weight]:
    ws: list[Weight] = []
    if gated:
        ws += _linear(part, f"{prefix}.gate_proj", inter, hidden, bias, **kw)
    ws += _linear(part, f"{prefix}.up_proj", inter, hidden, bias, **kw)
    ws += _linear(part, f"{prefix}.down_proj", hidden, inter, bias, **kw)
    return ws


def ffn_weights(ffn: FfnSpec) -> tuple[Weight, ...]:
    ws = _norms(FFN_NORMS[ffn.block_norms], ffn.hidden)
    if isinstance(ffn, DenseFfn):
        ws += _gated_mlp("mlp", ffn.module, ffn.hidden, ffn.intermediate, ffn.bias, ffn.gated)
    elif isinstance(ffn, MoeFfn):
        at = f"{ffn.module}." if ffn.module else ""  # Gemma-4 keeps router and experts on the layer itself
        if ffn.dense_intermediate:
            ws += _gated_mlp("mlp", "mlp", ffn.hidden, ffn.dense_intermediate, False)
        router = f"{at}{ffn.router_module}"
        slots = ffn.experts + ffn.zero_experts  # the router scores the zero-computation experts too
        ws += _linear("router", router, slots, ffn.hidden, ffn.router_bias, quantizable=False)
        if ffn.router_score_bias:
            ws.append(Weight("router", f"{router}.e_score_correction_bias", VEC, (slots,)))
        if ffn.router_scales:
            ws += [Weight("router", f"{router}.scale", VEC, (ffn.hidden,)),
                   Weight("router", f"{router}.per_expert_scale", VEC, (ffn.experts,))]
        width = ffn.latent or ffn.hidden  # the routed experts' input/output width
        if ffn.latent:
            ws += _linear("latent", f"{at}{ffn.latent_names[0]}", ffn.latent, ffn.hidden, ffn.latent_bias,
                          quantizable=ffn.latent_quantizable)
        ws += _gated_mlp(
            "routed", f"{at}experts", width, ffn.expert_intermediate, ffn.expert_bias, ffn.gated,
            copies=ffn.experts, top_k=ffn.real_top_k,
        )
        if ffn.latent:
            if ffn.latent_norm:
                ws.append(Weight("latent", f"{at}{ffn.latent_norm}", NORM, (ffn.latent,)))
            ws += _linear("latent", f"{at}{ffn.latent_names[1]}", ffn.hidden, ffn.latent, ffn.latent_bias,
                          quantizable=ffn.latent_quantizable)
        if ffn.shared_intermediate:
            shared = f"{at}{ffn.shared_module}"
            ws += _gated_mlp("shared", shared, ffn.hidden, ffn.shared_intermediate, ffn.shared_bias, ffn.gated)
            if ffn.shared_gate:
                ws += _linear("shared", f"{shared}_gate", 1, ffn.hidden, False, quantizable=False)
    elif isinstance(ffn, NoFfn):
        pass
    else:  # pragma: no cover - closed union
        raise TypeError(f"unknown FFN spec {type(ffn).__name__}")
    return tuple(ws)


def layer_block_weights(model: ModelSpec, layer: LayerSpec) -> tuple[tuple[str, tuple[Weight, ...]], ...]:
    """One layer's weights per block: ("attn", …), ("ffn", …), the layer's own extras included."""
    return (
        ("attn", attention_weights(layer.attn) + layer.attn_extras),
        ("ffn", ffn_weights(layer.ffn) + layer.ffn_extras + model.layer_extras),
    )


def embedding_weight(model: ModelSpec) -> PlacedWeight:
    width = model.table_width or model.embed_width or model.hidden
    shape = (model.embed_rows or model.vocab, width)
    w = Weight("embed", "model.embed_tokens", WeightKind.EMBEDDING, shape, copies=model.codebooks, quantizable=False)
    return PlacedWeight("embed", "model.embed_tokens", w)


def head_weight(model: ModelSpec) -> PlacedWeight | None:
    """The untied LM head; None when the head reuses the embedding table."""
    if model.tie_embeddings:
        return None
    width = model.head_width or model.embed_width or model.hidden
    w = Weight("head", "lm_head", M, (model.vocab, width), copies=model.codebooks, quantizable=False)
    return PlacedWeight("head", "lm_head", w)


def model_weights(model: ModelSpec) -> tuple[PlacedWeight, ...]:
    """Every parameter tensor of the model, in order: embedding, layers, final norm, head."""
    placed = [embedding_weight(model)]
    placed += [PlacedWeight("embed", f"model.{w.module}", w) for w in model.embed_extras]
    if model.embed_width is not None:  # OPT project_in: the looked-up rows of every new token
        w = Weight("embed", "project_in", M, (model.hidden, model.embed_width), quantizable=False)
        placed.append(PlacedWeight("embed", "model.project_in", w))
    for group in model.stack.groups():
        prefix = f"model.layers.{group.first_index}"
        for block, weights in layer_block_weights(model, group.spec):
            for w in weights:
                placed.append(PlacedWeight(group.segment(block, w.part), f"{prefix}.{w.module}", w, group.count))
                if model.norm_bias and w.kind is NORM and w.module in BLOCK_NORMS:
                    bias = Weight(w.part, w.module, BIAS, w.shape)
                    placed.append(PlacedWeight(group.segment(block, w.part), f"{prefix}.{w.module}", bias, group.count))
    placed += [PlacedWeight("final_norm", f"model.{w.module}", w) for w in model.final_extras]
    if model.final_norm:
        placed.append(PlacedWeight("final_norm", "model.norm", Weight("final_norm", "model.norm", NORM, (model.hidden,))))
        if model.norm_bias:
            placed.append(PlacedWeight("final_norm", "model.norm", Weight("final_norm", "model.norm", BIAS,
                                                                          (model.hidden,))))
    if model.embed_width is not None:  # OPT project_out: only the rows the head samples
        w = Weight("head", "project_out", M, (model.embed_width, model.hidden), quantizable=False)
        placed.append(PlacedWeight("head", "model.project_out", w))
    placed += [PlacedWeight("head", w.module, w) for w in model.head_extras]
    head = head_weight(model)
    if head is not None:
        placed.append(head)
    if model.head_bias:  # its own vector even when the matrix is tied (Phi)
        bias = Weight("head", "lm_head", BIAS, (model.vocab,), copies=model.codebooks)
        placed.append(PlacedWeight("head", "lm_head", bias))
    return tuple(placed)


def stored_bytes_per_copy(placed: PlacedWeight, precision: Precision) -> float:
    """Bytes one copy of this weight occupies in the checkpoint under `precision`."""
    w, quant = placed.weight, precision.quant
    if quant is not None and w.kind is M and w.quantizable:
        stored = quant.matrix_bytes_at(placed.path, w.shape[0], w.shape[1])
        if stored is not None:
            return stored
    if w.element_bytes is not None:
        return w.elements_per_copy * w.element_bytes
    return w.elements_per_copy * precision.weight.bytes_per_element

"""The KV layout of a model read off its traced graph, for architectures the work accountant has no builder for.

`kv_layout.py` lays the cache out from the accountant's config-derived `ModelSpec`; an architecture missing from
the accountant's registry (`graphsim.work.registry.BUILDERS`) has no spec, yet its graph may import. This module
reads, per decoder layer of the imported graph (`graphsim.importers.hf.import_hf`: one traced layer per layer
type, `Graph.schedule` maps every layer to its representative), the semantic nodes that keep per-sequence
state, and applies vLLM's per-rank cache shapes to their attributes:

- `Op.ATTENTION` without `kv_lora_rank`: K and V of `num_kv_heads` heads of `head_dim` / `v_head_dim` per token;
  `max(1, num_kv_heads // tp)` heads per rank (vLLM `ModelConfig.get_num_kv_heads`); a `sliding_window` keeps
  only the window (vLLM `SlidingWindowSpec`).
- `Op.ATTENTION` with `kv_lora_rank` (MLA): `kv_lora_rank + qk_rope_head_dim` elements per token, whole on
  every rank (vLLM `MLAAttentionSpec`); an `Op.SPARSE_INDEXER` in the same layer adds its fp8 key of
  `head_dim` plus one fp32 scale per 128 values (vLLM `DeepseekV32IndexerCache`).
- `Op.LINEAR_ATTENTION` "gated_delta_rule": recurrent state `num_v_heads / tp × k_head_dim × v_head_dim` plus
  the layer's `Op.CONV1D` state `channels / tp × (kernel_size − 1)` per request (vLLM
  `MambaStateShapeCalculator.gated_delta_net_state_shape`, vllm/model_executor/layers/mamba/mamba_utils.py).
- `Op.LINEAR_ATTENTION` "kda" (Kimi Delta Attention): the same shapes (vLLM `kda_state_shape`), the recurrent
  state in the node's `state_dtype` (float32: `kda_state_dtype`).
- `Op.LINEAR_ATTENTION` "mamba2_ssd": temporal state `num_v_heads / tp × v_head_dim × k_head_dim` in the node's
  `state_dtype` plus the conv state, n_groups (`num_k_heads`) not divisible by tp extended to tp
  (`mamba2_state_shape`, `extra_groups_for_head_shards`).
- `Op.LINEAR_ATTENTION` "mamba1" (Mamba-1's selective scan, channels as heads of one value): temporal state
  `channels / tp × state_size` in the node's `state_dtype` plus the conv state (`mamba1_state_shape`).
- an `Op.CONV1D` alone in its layer (no attention, no linear attention: LFM2's gated short conv), depthwise
  (groups == channels): its conv state `channels / tp × (kernel_size − 1)` per request in the state dtype
  (vLLM `MambaStateShapeCalculator.short_conv_state_shape`, `ShortConvSpec`).

Paging (groups, block sizes, hybrid alignment) is `kv_layout._groups`, the same as for accountant layouts.
Not derived here (refused or stated, never guessed): chunked local attention (Llama-4) is not distinguishable
from full attention in the graph's attributes, and cross-layer KV sharing (Gemma-3n / Gemma-4
`kv_sharing_target_layer_name`) is not detected, so such a layer is counted as keeping its own KV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from graphsim.ir.tensor import DType
from graphsim.serving.kv_layout import (
    DEFAULT_BLOCK_SIZE, MLA_BLOCK_SIZE, KvKind, KvLayout, KvLayoutError, LayerKv, _groups,
)

if TYPE_CHECKING:
    from graphsim.catalog import ResolvedModel
    from graphsim.ir import Graph, Node
    from graphsim.serving.capacity import KvCapacity
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.engine_config import EngineConfig

SOURCE = "traced graph"  # the layout's source, stated in `graphsim kv` and its JSON
INDEXER_QUANT_BLOCK = 128  # vLLM's indexer cache: one fp32 scale per 128 fp8 values (DeepseekV32IndexerCache)


def _layer_nodes(graph: Graph) -> list[list[Node]]:
    """The state-keeping nodes of every decoder layer, in order (a layer's representative's for untraced ones)."""
    from graphsim.ir import Op

    keep = (Op.ATTENTION, Op.LINEAR_ATTENTION, Op.CONV1D, Op.SPARSE_INDEXER)
    by_layer: dict[int, list[Node]] = {}
    for n in graph.nodes:
        if n.op in keep and n.layer is not None:
            by_layer.setdefault(n.layer, []).append(n)
    if graph.schedule is not None:
        rep = graph.schedule.representative
        return [by_layer.get(rep[tag], []) for tag in graph.schedule.tags]
    depth = graph.meta.num_layers or (max(by_layer) + 1 if by_layer else 0)
    return [by_layer.get(i, []) for i in range(depth)]


def _attention(node: Node, indexer: Node | None, tp: int, kv: DType) -> LayerKv:
    from graphsim.ir import AttentionAttrs, IndexerAttrs

    a = node.attrs_as(AttentionAttrs)
    b = kv.bytes_per_element
    if a.compress_ratio or node.target == "graphsim::compressed_attention":
        raise KvLayoutError(f"{node.scope}: compressed-KV attention (a sliding window plus compressed entries and their "
                            "compressor state) is not laid out from the traced graph; register the architecture with "
                            "the work accountant (graphsim/work/builders/deepseek_v4.py does for DeepseekV4ForCausalLM)")
    if a.kv_lora_rank:
        rope = a.qk_rope_head_dim or 0
        nbytes = (a.kv_lora_rank + rope) * b
        detail = f"({a.kv_lora_rank} latent + {rope} rope) × {b:g} B, whole on every rank"
        if indexer is not None:
            hd = indexer.attrs_as(IndexerAttrs).head_dim
            extra = hd + hd // INDEXER_QUANT_BLOCK * 4
            nbytes += extra
            detail += f" + indexer key {hd} fp8 + scales = {extra} B"
        return LayerKv(KvKind.MLA, int(nbytes), 0, None, detail + "")
    kvh = a.num_kv_heads
    if tp <= kvh and kvh % tp:
        raise KvLayoutError(f"{node.scope}: {kvh} kv heads are not divisible by tp = {tp}; pick a tp that divides them")
    if tp > kvh and tp % kvh:
        raise KvLayoutError(f"{node.scope}: tp = {tp} is not a multiple of its {kvh} kv heads; pick a tp that divides "
                            "or is a multiple of them")
    per_rank = max(1, kvh // tp)
    nbytes = per_rank * (a.head_dim + a.v_head_dim) * b
    rep = f" (replicated: {kvh} kv heads over {tp} ranks)" if tp > kvh else ""
    detail = (f"{per_rank} kv heads × ({a.head_dim} K + {a.v_head_dim} V) × {b:g} B{rep}")
    kind = KvKind.SLIDING if a.sliding_window else KvKind.FULL
    return LayerKv(kind, int(nbytes), 0, a.sliding_window or None, detail)


def _state(node: Node, conv: Node | None, tp: int, state: DType) -> LayerKv:
    from graphsim.ir import ConvAttrs, LinearAttentionAttrs

    a = node.attrs_as(LinearAttentionAttrs)
    if conv is None:
        raise KvLayoutError(f"{node.scope}: a {a.kind} layer without a short convolution in the traced graph; "
                            "graphsim cannot lay out its state (docs/serving.md, graph-derived KV layout)")
    c = conv.attrs_as(ConvAttrs)
    if a.num_v_heads % tp:
        raise KvLayoutError(f"{node.scope}: {a.num_v_heads} {a.kind} heads are not divisible by tp = {tp}; "
                            "pick a tp that divides them")
    channels = c.channels
    if a.kind == "mamba2_ssd" and a.num_k_heads % tp and a.num_k_heads != 1:
        raise KvLayoutError(f"{node.scope}: Mamba2 n_groups = {a.num_k_heads} is neither 1 nor divisible by tp = {tp} "
                            f"(vLLM MambaMixer2 replicates only a single group); pick a tp that divides it")
    if a.kind == "mamba2_ssd" and a.num_k_heads % tp:
        # extra_groups_for_head_shards: one group not divisible by tp is extended to tp (B and C each)
        channels += 2 * (tp - a.num_k_heads) * a.k_head_dim
    if channels % tp:
        raise KvLayoutError(f"{node.scope}: {channels} conv channels are not divisible by tp = {tp}; "
                            "pick a tp that divides them")
    conv_el = channels // tp * (c.kernel_size - 1)
    heads = a.num_v_heads // tp
    rec_el = heads * a.k_head_dim * a.v_head_dim
    if a.kind in ("mamba2_ssd", "mamba1"):  # Mamba-1: channels as heads of one value (mamba1_state_shape)
        ssm = DType(a.state_dtype) if a.state_dtype else state  # set by the importer (_ssm_state_dtypes)
        nbytes = conv_el * state.bytes_per_element + rec_el * ssm.bytes_per_element
        detail = (f"{'Mamba2' if a.kind == 'mamba2_ssd' else 'Mamba-1'} conv {channels // tp} × {c.kernel_size - 1} × "
                  f"{state.bytes_per_element:g} B + ssm {heads} heads × {a.v_head_dim} × {a.k_head_dim} × "
                  f"{ssm.bytes_per_element:g} B per request")
    elif a.state_dtype:  # KDA: the recurrent state in its own dtype (float32: mamba_utils.py kda_state_dtype)
        rec = DType(a.state_dtype)
        nbytes = conv_el * state.bytes_per_element + rec_el * rec.bytes_per_element
        detail = (f"{a.kind} conv {channels // tp} × {c.kernel_size - 1} × {state.bytes_per_element:g} B + recurrent "
                  f"{heads} heads × {a.k_head_dim} × {a.v_head_dim} × {rec.bytes_per_element:g} B per request")
    else:
        nbytes = (rec_el + conv_el) * state.bytes_per_element
        detail = (f"recurrent {heads} heads × {a.k_head_dim} × {a.v_head_dim} + conv {channels // tp} × "
                  f"{c.kernel_size - 1}, × {state.bytes_per_element:g} B per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def _short_conv(convs: list[Node], tp: int, state: DType) -> LayerKv:
    """A layer whose only state-keeping node is a depthwise causal conv (LFM2's short conv): vLLM keeps its last
    kernel_size − 1 inputs per request (`short_conv_state_shape(tp, hidden_size, conv_L_cache)`)."""
    from graphsim.ir import ConvAttrs

    node = convs[0]
    c = node.attrs_as(ConvAttrs)
    if len(convs) > 1 or c.groups != c.channels:
        raise KvLayoutError(f"{node.scope}: {len(convs)} conv node(s), groups {c.groups} of {c.channels} channels; "
                            "graphsim lays out one depthwise short conv per layer")
    if c.channels % tp:
        raise KvLayoutError(f"{node.scope}: {c.channels} short-conv channels are not divisible by tp = {tp}; "
                            "pick a tp that divides them")
    channels = c.channels // tp
    nbytes = channels * (c.kernel_size - 1) * state.bytes_per_element
    detail = (f"short conv {channels} channels × {c.kernel_size - 1} (kernel − 1) × {state.bytes_per_element:g} B "
              "per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def graph_layer_kv(graph: Graph, tp: int, kv: DType, state: DType) -> tuple[LayerKv, ...]:
    """One entry per decoder layer that keeps KV or state, from the graph's semantic nodes."""
    from graphsim.ir import Op

    out: list[LayerKv] = []
    for nodes in _layer_nodes(graph):
        attn = [n for n in nodes if n.op is Op.ATTENTION]
        lin = [n for n in nodes if n.op is Op.LINEAR_ATTENTION]
        conv = [n for n in nodes if n.op is Op.CONV1D]
        idx = [n for n in nodes if n.op is Op.SPARSE_INDEXER]
        if len(attn) + len(lin) > 1:
            raise KvLayoutError(f"layer {nodes[0].layer} of the traced graph has {len(attn) + len(lin)} attention "
                                "mixers; graphsim lays out one per layer")
        if attn:
            out.append(_attention(attn[0], idx[0] if idx else None, tp, kv))
        elif lin:
            out.append(_state(lin[0], conv[0] if conv else None, tp, state))
        elif conv:
            out.append(_short_conv(conv, tp, state))
    return tuple(out)


def graph_kv_layout(graph: Graph, kv: DType, state: DType, tp: int = 1, block_size: int | None = None,
                    reason: str = "") -> KvLayout:
    """The per-rank KV layout of `graph` (an imported, unpartitioned graph), labelled as graph-derived.
    `reason`: why the accountant's layout is not used (stated in the notes)."""
    if tp < 1:
        raise KvLayoutError(f"tp = {tp}; give --tp >= 1")
    layers = graph_layer_kv(graph, tp, kv, state)
    if not layers:
        raise KvLayoutError(f"the traced graph of {graph.meta.architecture or graph.name} has no attention or "
                            "state-keeping node; graphsim cannot lay out its KV cache")
    notes = [f"KV layout derived from the {SOURCE} (attention / linear-attention / conv nodes)"
             + (f": {reason}" if reason else ""),
             "not seen in the graph: cross-layer KV sharing and chunked local attention (counted as own full KV)"]
    if block_size is None:
        block_size = DEFAULT_BLOCK_SIZE
        if any(layer.kind is KvKind.MLA for layer in layers):
            block_size = MLA_BLOCK_SIZE
            notes.append("block size 64: vLLM's FlashMLA backend (Hopper) takes only 64-token blocks; set --block-size")
    if block_size < 1:
        raise KvLayoutError(f"block size {block_size}; give --block-size >= 1")
    groups, attn_bs, group_notes = _groups(layers, block_size)
    return KvLayout(graph.meta.architecture or graph.name, tp, kv, state, layers, groups, attn_bs,
                    tuple(notes + group_notes), source=SOURCE)


# --- `graphsim kv` for an architecture the accountant has no builder for ----------------------------------------
def accountant_lacks(cfg: dict[str, Any]) -> str | None:
    """Why the work accountant cannot lay out `cfg` (its architecture and any wrapped language model are
    unregistered), else None. Config-only, no torch."""
    from graphsim.work.registry import BUILDERS, architecture_of, language_model

    arch = architecture_of(cfg)
    if arch in BUILDERS or language_model(cfg, arch) is not None:
        return None
    return f"the work accountant has no builder for {arch} (graphsim/work/registry.py)"


def graph_blind_spots(cfg: dict[str, Any]) -> list[str]:
    """Notes for config fields that change the KV layout but that the graph's attention nodes do not carry, so the
    graph-derived layout counts those layers at full length (an upper bound on the KV, a lower bound on capacity):
    `attention_chunk_size` (chunked local attention, transformers' Llama4TextConfig; vLLM ChunkedLocalAttentionSpec)
    and `num_kv_shared_layers` (layers reading an earlier layer's KV, Gemma3nTextConfig; vLLM
    kv_sharing_target_layer_name)."""
    text = cfg.get("text_config")
    views = [cfg, text] if isinstance(text, dict) else [cfg]
    out = []
    for key, what in (("attention_chunk_size", "chunked local attention"),
                      ("num_kv_shared_layers", "cross-layer KV sharing")):
        value = next((v.get(key) for v in views if v.get(key)), None)
        if value:
            out.append(f"the config states {key} = {value} ({what}), which the traced graph does not show: those "
                       "layers are counted with their own full-length KV (an upper bound; capacity a lower bound)")
    return out


@dataclass(frozen=True)
class GraphKv:
    """`graphsim kv` of an unregistered architecture: the graph-derived layout and, with --kv-memory, the capacity.
    No memory budget: its weight term is the accountant's (`serving/memory.py`)."""

    config: DeploymentConfig
    model: ResolvedModel
    hardware_id: str
    engine: EngineConfig
    layout: KvLayout
    capacity: KvCapacity | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        lay, e = self.layout, self.engine
        return {
            "model": self.model.name, "architecture": self.model.architecture, "hardware": self.hardware_id,
            "tp": lay.tp, "precision": {"kv": lay.kv_dtype.label, "state": lay.state_dtype.label},
            "engine": {"max_num_batched_tokens": e.max_num_batched_tokens, "max_num_seqs": e.max_num_seqs,
                       "max_model_len": e.max_model_len, "max_model_len_source": e.max_model_len_source,
                       "block_size": lay.block_size,
                       "max_in_flight_tokens": e.max_in_flight_tokens},
            "layout": {
                "source": lay.source, "why": self.reason,
                "bytes_per_token_per_rank": lay.bytes_per_token,
                "state_bytes_per_request_per_rank": lay.state_bytes_per_request,
                "parts": [{"kind": p.layer.kind.value, "label": p.layer.label, "layers": p.layers,
                           "bytes_per_token_per_layer": p.layer.bytes_per_token, "bytes_per_token": p.bytes_per_token,
                           "state_bytes": p.state_bytes, "window": p.layer.window, "detail": p.layer.detail}
                          for p in lay.parts()],
                "groups": [{"kind": g.kind.value, "layers": g.layers, "real_layers": g.real_layers,
                            "block_size": g.block_size, "page_bytes": g.page_bytes, "window": g.window}
                           for g in lay.groups],
                "bytes_per_block": lay.bytes_per_block, "notes": list(lay.notes)},
            "memory": None,
            "capacity": self.capacity.to_json() if self.capacity is not None else None,
        }



def graph_dtypes(config: Any, graph: Graph, quant: Any) -> tuple[Any, Any, Any, Any]:
    """(quantization, weight, KV and recurrent-state dtypes) of a deployment read from its traced graph: the
    options first, then the checkpoint's KV quantization, else the graph's model dtype."""
    from graphsim.work.dtypes import parse_dtype

    weight = parse_dtype(config.dtype or graph.meta.dtype or "bfloat16", "--dtype")
    if config.kv_cache_dtype:
        kv = parse_dtype(config.kv_cache_dtype, "--kv-dtype")
    elif quant is not None and quant.kv_dtype:
        kv = parse_dtype(quant.kv_dtype, "kv_cache_quant_algo")
    else:
        kv = weight
    state = parse_dtype(config.mamba_ssm_cache_dtype, "--state-dtype") if config.mamba_ssm_cache_dtype else weight
    return quant, weight, kv, state

def plan_graph_kv(config: DeploymentConfig, model: ResolvedModel, reason: str) -> GraphKv:
    """The KV layout of `model` from its traced graph at the config's tp and dtypes, and the capacity of the
    config's --kv-memory. Parallelism and engines the graph path does not model are refused in one line."""
    from graphsim.costing.hardware import load_hardware
    from graphsim.importers.hf import import_hf
    from graphsim.quantization import parse_quantization
    from graphsim.serving.capacity import kv_capacity
    from graphsim.vllm_checks import config_heads_refusal

    par = config.parallel
    unsupported = [name for name, on in (
        ("--pipeline-parallel-size", par.pipeline_parallel_size > 1 or bool(par.pp_layer_partition)),
        ("-dcp / -pcp", par.decode_context_parallel_size * par.prefill_context_parallel_size > 1),
        ("--speculative-config", config.speculative_config is not None)) if on]
    if unsupported:
        raise KvLayoutError(f"{reason}; the traced-graph KV layout does not model {', '.join(unsupported)}: drop it")
    hw = config.interconnect.apply(load_hardware(config.hardware))
    text = model.config.get("text_config")  # a wrapper's context length etc. are its language model's
    heads_cfg = text if isinstance(text, dict) else model.config
    if refusal := config_heads_refusal(heads_cfg, par.tensor_parallel_size, config.engine.profile.engine):
        raise KvLayoutError(refusal)  # vLLM's first check, before any layer's
    engine = config.engine.resolve(hw, {**model.config, **text} if isinstance(text, dict) else model.config)
    if not engine.profile.is_vllm:
        raise KvLayoutError(f"{reason}; the traced-graph KV layout follows vLLM's paging only: give --engine vllm")
    graph, _ = import_hf(model, dtype=config.dtype)
    if not graph.meta.dynamic_tokens:
        # a static trace means a sequence mechanism ran as Python graphsim has no semantic op for (issue 16: DeepSeek-V4's
        # compressed attention reads as plain sliding-window attention); the state it keeps is not in the graph
        raise KvLayoutError(f"{reason}, and its graph traced only at a fixed token count (a sequence mechanism without "
                            "a semantic op in graphsim), so the graph cannot say what its KV cache keeps; "
                            "docs/adding-an-architecture.md")
    _, _, kv, state = graph_dtypes(config, graph, parse_quantization(model.config))
    layout = graph_kv_layout(graph, kv, state, par.tensor_parallel_size, config.engine.block_size, reason)
    layout = replace(layout, notes=(*layout.notes, *graph_blind_spots(model.config)))
    avail = config.engine.kv_cache_memory_bytes
    cap = (kv_capacity(layout, avail, engine.max_model_len, engine.max_in_flight_tokens, engine.profile)
           if avail is not None else None)
    return GraphKv(config, model, hw.id, engine, layout, cap, reason)

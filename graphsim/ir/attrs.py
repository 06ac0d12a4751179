"""Typed attributes per op kind.

Each op kind that carries information beyond its inputs' shapes has a frozen dataclass here;
`ATTRS_FOR_OP` says which class an op's attributes must be (verify() checks it). All attribute
classes serialise to JSON through `attrs_to_json` / `attrs_from_json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

from graphsim.ir.geometry import Geometry
from graphsim.ir.kernel import GEOMETRY_FOR_KIND, KernelAttrs, KernelKind, MergedKernel, Rows
from graphsim.ir.ops import Op


@dataclass(frozen=True)
class NoAttrs:
    pass


@dataclass(frozen=True)
class LinearAttrs:
    in_features: int
    out_features: int
    has_bias: bool = False


@dataclass(frozen=True)
class AttentionAttrs:
    """One semantic attention node: softmax(q·kᵀ·scale [+mask]) · v over the KV of each sequence."""

    num_heads: int
    num_kv_heads: int
    head_dim: int  # q/k head dim
    v_head_dim: int
    causal: bool = True
    sliding_window: int | None = None
    has_sinks: bool = False
    softcap: float | None = None
    scale: float | None = None
    kv_lora_rank: int | None = None  # MLA: compressed latent width (None for MHA/GQA)
    qk_rope_head_dim: int | None = None  # MLA: decoupled RoPE part of the key
    index_topk: int | None = None  # sparse (DSA) attention: each query attends to at most this many keys
    # compressed-KV attention (DeepSeek-V4): besides its sliding window, each query attends to the compressed
    # entries of every closed window of this many tokens (all, or the index_topk an indexer picks)
    compress_ratio: int | None = None
    # ALiBi (BLOOM, MPT, Falcon with `alibi`): a per-head linear bias on the key position instead of RoPE
    alibi: bool = False


@dataclass(frozen=True)
class LinearAttentionAttrs:
    """Recurrent (linear) attention such as the gated delta rule; state per sequence."""

    kind: str  # "gated_delta_rule", or "mamba2_ssd" (Mamba2's scan: k = B with groups as k heads and the
    # state size as k_head_dim, v = x with the SSM heads and their head_dim, q = C)
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    chunked: bool = True
    chunk_size: int = 0  # the engine kernel's chunk (Mamba2 configs' chunk_size); 0 when not stated
    state_dtype: str = ""  # DType value of the per-sequence state the engine keeps ("" = the op's dtype)


@dataclass(frozen=True)
class IndexerAttrs:
    """DSA's lightning indexer (DeepSeek-V3.2, GLM-5): per query, Σ_h w_h·relu(q_h·k) over every earlier key of
    the sequence (one key head), then the `topk` best keys, whose indices the sparse attention reads."""

    num_heads: int
    head_dim: int
    topk: int
    compress_ratio: int | None = None  # DeepSeek-V4: the keys are compressed entries, one per this many tokens
    # MiniMax-M3: scores are max-pooled per block of this many keys and `topk` BLOCKS are kept per query and index
    # head (one index head per KV group)
    block_size: int | None = None


@dataclass(frozen=True)
class MoEAttrs:
    """All routed experts of one MoE layer as a single node (weights are inputs)."""

    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    gated: bool = True
    has_bias: bool = False
    activation: str = "silu"


@dataclass(frozen=True)
class EmbeddingAttrs:
    num_embeddings: int
    embedding_dim: int


@dataclass(frozen=True)
class NormAttrs:
    eps: float | None = None
    normalized_dim: int | None = None


@dataclass(frozen=True)
class ReduceAttrs:
    dims: tuple[int, ...] = ()
    keepdim: bool = False


@dataclass(frozen=True)
class CastAttrs:
    to: str  # DType value


@dataclass(frozen=True)
class ConvAttrs:
    channels: int
    kernel_size: int
    groups: int = 1


@dataclass(frozen=True)
class CollectiveAttrs:
    group_size: int
    group: str = "tp"  # which parallel group: tp / ep / dp


@dataclass(frozen=True)
class OpaqueAttrs:
    target: str


Attrs = (
    NoAttrs | LinearAttrs | AttentionAttrs | LinearAttentionAttrs | IndexerAttrs | MoEAttrs | EmbeddingAttrs
    | NormAttrs | ReduceAttrs | CastAttrs | ConvAttrs | CollectiveAttrs | OpaqueAttrs | KernelAttrs
)

ATTR_CLASSES: dict[str, type] = {
    c.__name__: c
    for c in (NoAttrs, LinearAttrs, AttentionAttrs, LinearAttentionAttrs, IndexerAttrs, MoEAttrs, EmbeddingAttrs,
              NormAttrs, ReduceAttrs, CastAttrs, ConvAttrs, CollectiveAttrs, OpaqueAttrs, KernelAttrs)
}

# Op kinds whose attributes must be of a given class; all others take NoAttrs (or ReduceAttrs / CastAttrs).
ATTRS_FOR_OP: dict[Op, tuple[type, ...]] = {
    Op.LINEAR: (LinearAttrs,),
    Op.ATTENTION: (AttentionAttrs,),
    Op.LINEAR_ATTENTION: (LinearAttentionAttrs,),
    Op.SPARSE_INDEXER: (IndexerAttrs,),
    Op.MOE_EXPERTS: (MoEAttrs,),
    Op.EMBEDDING: (EmbeddingAttrs,),
    Op.RMS_NORM: (NormAttrs,),
    Op.LAYER_NORM: (NormAttrs,),
    Op.MEAN: (ReduceAttrs,),
    Op.SUM: (ReduceAttrs,),
    Op.MAX: (ReduceAttrs, NoAttrs),
    Op.SOFTMAX: (ReduceAttrs,),
    Op.CAST: (CastAttrs,),
    Op.CONV1D: (ConvAttrs,),
    Op.ALL_REDUCE: (CollectiveAttrs,),
    Op.ALL_GATHER: (CollectiveAttrs,),
    Op.REDUCE_SCATTER: (CollectiveAttrs,),
    Op.ALL_TO_ALL: (CollectiveAttrs,),
    Op.OPAQUE: (OpaqueAttrs,),
    Op.KERNEL: (KernelAttrs,),
}


def allowed_attrs(op: Op) -> tuple[type, ...]:
    return ATTRS_FOR_OP.get(op, (NoAttrs,))


def attrs_to_json(a: Any) -> dict[str, Any]:
    d = asdict(a)
    if isinstance(a, KernelAttrs):  # geometry as [field, value] pairs (Geometry.items)
        d["geometry"] = [list(p) for p in a.geometry.items()]
    for k, v in d.items():
        if isinstance(v, tuple):
            d[k] = list(v)
    return {"type": type(a).__name__, **d}


def attrs_from_json(d: dict[str, Any]) -> Any:
    d = dict(d)
    cls = ATTR_CLASSES[d.pop("type")]
    if cls is KernelAttrs:
        kind = KernelKind(d["kind"])
        return KernelAttrs(
            kind=kind, name=d["name"],
            geometry=GEOMETRY_FOR_KIND[kind].from_items(d["geometry"]), dtype=d["dtype"], rows=Rows(d["rows"]),
            covers=tuple(d.get("covers", ())), rule=d.get("rule", ""), approximate=bool(d.get("approximate")),
            merged=tuple(MergedKernel(KernelKind(m["kind"]), m["name"], m["scope"], bool(m.get("leads")), m.get("node", ""))
                         for m in d.get("merged", ())),
        )
    kwargs = {}
    for f in fields(cls):
        if f.name in d:
            v = d[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


def attrs_to_text(a: Any) -> str:
    if isinstance(a, NoAttrs):
        return ""
    parts = []
    for f in fields(a):
        v = getattr(a, f.name)
        if v is None or v == f.default:
            continue
        if isinstance(v, Enum):
            v = v.value
        elif isinstance(v, Geometry):
            v = v.items()
        elif f.name == "merged":  # a generated kernel's replaced kernels, as scope/name
            v = [f"{m.scope}/{m.name}" for m in v]
        parts.append(f"{f.name}={v}")
    return "{" + ", ".join(parts) + "}" if parts else ""

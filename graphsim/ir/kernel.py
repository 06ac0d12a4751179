"""Kernel nodes: what a serving engine launches, made by the fuse pass.

A kernel is an IR node with `Op.KERNEL` and `KernelAttrs`. Its key is model geometry and dtypes
only (DESIGN §4); the batch-dependent coordinate (`rows`: tokens or sequences in the step, or the
per-sequence lengths for attention) is supplied when the kernel is priced. The geometry is the typed
dataclass of the kernel's kind (`GEOMETRY_FOR_KIND`, classes in `graphsim.ir.geometry`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TypeVar

from graphsim.ir.geometry import (
    AttentionGeometry, CollectiveGeometry, Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry,
    Geometry, GeometryValue, IndexerGeometry, LinearAttentionGeometry, MoeExpertsGeometry, MoeRouterGeometry,
    NormGeometry, RotaryGeometry,
)

__all__ = ["GEOMETRY_FOR_KIND", "GeometryValue", "KernelAttrs", "KernelKind", "MergedKernel", "Rows"]

G = TypeVar("G", bound=Geometry)


class KernelKind(str, Enum):
    GEMM = "gemm"
    ATTENTION = "attention"  # prefill (varlen) or decode, chosen per batch when priced
    LINEAR_ATTENTION = "linear_attention"
    SPARSE_INDEXER = "sparse_indexer"  # DSA: index logits over every earlier key, then top-k per query
    RMS_NORM = "rms_norm"
    FUSED_ADD_RMS_NORM = "fused_add_rms_norm"
    LAYER_NORM = "layer_norm"
    ROTARY = "rotary"
    ACT_AND_MUL = "act_and_mul"
    ACTIVATION = "activation"
    EMBEDDING = "embedding"
    KV_CACHE_WRITE = "kv_cache_write"
    MOE_ROUTER = "moe_router"  # top-k selection over router logits (softmax/sigmoid + topk)
    MOE_EXPERTS = "moe_experts"  # routed experts: grouped GEMMs + activation + combine
    CONV1D = "conv1d"
    ELEMENTWISE = "elementwise"  # memory-bound placeholder (adds, casts, leftovers)
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"  # point-to-point between pipeline stages (costing/pipeline.py)

    @property
    def is_collective(self) -> bool:
        return self in (KernelKind.ALL_REDUCE, KernelKind.ALL_GATHER, KernelKind.REDUCE_SCATTER,
                        KernelKind.ALL_TO_ALL, KernelKind.SEND_RECV)


class Rows(str, Enum):
    """Which batch quantity gives a kernel's row count."""

    TOKENS = "tokens"  # Σ q_len (every token in the step)
    SEQUENCES = "sequences"  # one row per sequence (e.g. logits of the last token)
    NONE = "none"  # attention: priced from the per-sequence (q_len, kv_len) list
    ONCE = "once"  # independent of the batch (work on parameters or constants only)


# The geometry class of each kernel kind (KernelAttrs.__post_init__ checks it).
GEOMETRY_FOR_KIND: dict[KernelKind, type[Geometry]] = {
    KernelKind.GEMM: GemmGeometry,
    KernelKind.ATTENTION: AttentionGeometry,
    KernelKind.LINEAR_ATTENTION: LinearAttentionGeometry,
    KernelKind.SPARSE_INDEXER: IndexerGeometry,
    KernelKind.RMS_NORM: NormGeometry,
    KernelKind.FUSED_ADD_RMS_NORM: NormGeometry,
    KernelKind.LAYER_NORM: NormGeometry,
    KernelKind.ROTARY: RotaryGeometry,
    KernelKind.ACT_AND_MUL: ElementwiseGeometry,
    KernelKind.ACTIVATION: ElementwiseGeometry,
    KernelKind.EMBEDDING: EmbeddingGeometry,
    KernelKind.KV_CACHE_WRITE: ElementwiseGeometry,
    KernelKind.MOE_ROUTER: MoeRouterGeometry,
    KernelKind.MOE_EXPERTS: MoeExpertsGeometry,
    KernelKind.CONV1D: Conv1dGeometry,
    KernelKind.ELEMENTWISE: ElementwiseGeometry,
    KernelKind.ALL_REDUCE: CollectiveGeometry,
    KernelKind.ALL_GATHER: CollectiveGeometry,
    KernelKind.REDUCE_SCATTER: CollectiveGeometry,
    KernelKind.ALL_TO_ALL: CollectiveGeometry,
    KernelKind.SEND_RECV: CollectiveGeometry,
}


@dataclass(frozen=True)
class MergedKernel:
    """One kernel a generated kernel replaced (the `inductor` pass, passes/fuse/vllm_inductor.py): its kind, name and
    module scope as the custom-op graph had them, so the analyzer can give the generated kernel that kernel's rows."""

    kind: KernelKind
    name: str
    scope: str
    leads: bool = False  # its layer's first kernel in the custom-op graph (a next layer's input norm in a layer's tail)
    node: str = ""  # its node in the custom-op graph where two generated kernels stand for it (a rotary's q and k halves)


@dataclass(frozen=True)
class KernelAttrs:
    kind: KernelKind
    name: str  # the engine's kernel / op name, e.g. "fused_add_rms_norm"
    geometry: Geometry  # model-geometry key: the class GEOMETRY_FOR_KIND[kind], e.g. GemmGeometry(n=6144, k=4096)
    dtype: str  # DType value of the main operand
    rows: Rows = Rows.TOKENS
    covers: tuple[str, ...] = ()  # names of the aten-level nodes this kernel replaces
    rule: str = ""  # fuse rule that made it (with the engine source it follows)
    approximate: bool = False  # memory-bound placeholder, not a modelled engine kernel
    merged: tuple[MergedKernel, ...] = ()  # a generated kernel's replaced kernels, in graph order (else empty)

    def __post_init__(self) -> None:
        want = GEOMETRY_FOR_KIND[self.kind]
        if type(self.geometry) is not want:
            raise TypeError(f"kernel {self.name!r} ({self.kind.value}) has {type(self.geometry).__name__}, "
                            f"expected {want.__name__}")

    def geometry_as(self, cls: type[G]) -> G:
        """The geometry, typed as `cls` (TypeError if this kernel's kind has another geometry class)."""
        g = self.geometry
        if not isinstance(g, cls):
            raise TypeError(f"kernel {self.name!r} ({self.kind.value}) has {type(g).__name__}, not {cls.__name__}")
        return g

    def with_geometry(self, geometry: Geometry) -> KernelAttrs:
        return replace(self, geometry=geometry)


def merged_of(a: KernelAttrs, scope: str, leads: bool = False) -> tuple[MergedKernel, ...]:
    """The kernels `a` stands for when a pass merges it into a generated kernel: those it already replaced, else
    itself (its kind and name at `scope`, its node's module scope); `leads`: they begin their layer in the custom-op
    graph (the `inductor` pass's across_layers puts the next layer's input norm in a layer's trailing kernel)."""
    return tuple(replace(m, leads=True) for m in a.merged) if leads and a.merged else \
        a.merged or (MergedKernel(a.kind, a.name, scope, leads),)

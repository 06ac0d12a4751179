"""Kernel nodes: what a serving engine launches, made by the fuse pass.

A kernel is an IR node with `Op.KERNEL` and `KernelAttrs`. Its key is model geometry and dtypes
only (DESIGN §4); the batch-dependent coordinate (`rows`: tokens or sequences in the step, or the
per-sequence lengths for attention) is supplied when the kernel is priced.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

GeometryValue = int | float | str | bool


class KernelKind(str, Enum):
    GEMM = "gemm"
    ATTENTION = "attention"  # prefill (varlen) or decode, chosen per batch when priced
    LINEAR_ATTENTION = "linear_attention"
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

    @property
    def is_collective(self) -> bool:
        return self in (KernelKind.ALL_REDUCE, KernelKind.ALL_GATHER, KernelKind.REDUCE_SCATTER,
                        KernelKind.ALL_TO_ALL)


class Rows(str, Enum):
    """Which batch quantity gives a kernel's row count."""

    TOKENS = "tokens"  # Σ q_len (every token in the step)
    SEQUENCES = "sequences"  # one row per sequence (e.g. logits of the last token)
    NONE = "none"  # attention: priced from the per-sequence (q_len, kv_len) list
    ONCE = "once"  # independent of the batch (work on parameters or constants only)


@dataclass(frozen=True)
class KernelAttrs:
    kind: KernelKind
    name: str  # the engine's kernel / op name, e.g. "fused_add_rms_norm"
    geometry: tuple[tuple[str, GeometryValue], ...]  # model-geometry key, e.g. (("n", 6144), ("k", 4096))
    dtype: str  # DType value of the main operand
    rows: Rows = Rows.TOKENS
    covers: tuple[str, ...] = ()  # names of the aten-level nodes this kernel replaces
    rule: str = ""  # fuse rule that made it (with the engine source it follows)
    approximate: bool = False  # memory-bound placeholder, not a modelled engine kernel

    def geo(self, key: str, default: GeometryValue | None = None) -> GeometryValue | None:
        for k, v in self.geometry:
            if k == key:
                return v
        return default

    def with_geometry(self, **changes: GeometryValue) -> KernelAttrs:
        from dataclasses import replace

        geo = dict(self.geometry)
        geo.update(changes)
        return replace(self, geometry=tuple(geo.items()))

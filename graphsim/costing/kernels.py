"""Kernel table identities: the kinds of kernel profile.db holds, their geometry keys and points.

A *key* names one kernel geometry (model dimensions + dtypes only, DESIGN §5.4); a *point* gives
the batch-dependent coordinates (`m`, tokens, context, ...) that vary at evaluation. Every key
class says its table (`KIND`); every point class lists its coordinates in interpolation order
(outermost first). profile.db columns are these field names, so renaming a field is a schema change.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import ClassVar

from graphsim.costing.dtypes import KernelDtype


class TableKind(str, Enum):
    """One profile.db table per kind."""

    GEMM = "gemm"
    ATTENTION_PREFILL = "attention_prefill"
    ATTENTION_DECODE = "attention_decode"
    MLA_PREFILL = "mla_prefill"  # the MLA attention kernel alone
    MLA_DECODE = "mla_decode"
    MLA_MODULE_PREFILL = "mla_module_prefill"  # the engine's whole MLA module (projections included)
    MLA_MODULE_DECODE = "mla_module_decode"
    # the engine's whole DSA (sparse MLA) module: MLA projections, the indexer and the sparse attention; tables added
    # after schema version 1 was first written: an older profile.db without them reads them as empty (schema.ADDED)
    DSA_MODULE_PREFILL = "dsa_module_prefill"
    DSA_MODULE_DECODE = "dsa_module_decode"
    MOE = "moe"
    COLLECTIVE = "collective"
    ELEMENTWISE = "elementwise"  # norms, rotary, activations, adds: memory-bound per-token work


class CollectiveOp(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"  # point-to-point, one sender and one receiver (pipeline stages)


# the implementation of a send/recv between two GPUs on different nodes (costing/pipeline.py): priced on the network
SEND_RECV_NETWORK = "nccl@network"
# the `group` of a pipeline hop's CollectiveGeometry: inside one node, or between two nodes
PP_GROUP = "pp"
PP_NETWORK_GROUP = "pp-network"


class MoeRouting(str, Enum):
    """How tokens were spread over experts when the MoE kernel was timed."""

    BALANCED = "balanced"
    RANDOM = "random"
    POWER_LAW_1_01 = "power_law_1.01"
    POWER_LAW_1_2 = "power_law_1.2"


# ---- points (batch-dependent coordinates; all >= 1) -------------------------------------------


@dataclass(frozen=True)
class GemmPoint:
    m: int  # rows = tokens in the step


@dataclass(frozen=True)
class AttentionPrefillPoint:
    """`batch` sequences, each with `q_len` new tokens attending to `kv_len` keys (kv_len >= q_len;
    kv_len = cached prefix + q_len)."""

    batch: int
    q_len: int
    kv_len: int

    def __post_init__(self) -> None:
        if self.kv_len < self.q_len:
            raise ValueError(f"kv_len ({self.kv_len}) must be >= q_len ({self.q_len}): kv_len counts the new tokens too")


@dataclass(frozen=True)
class AttentionDecodePoint:
    """`batch` sequences, each with one new token attending to `kv_len` keys (cached + 1)."""

    batch: int
    kv_len: int


@dataclass(frozen=True)
class TokensPoint:
    tokens: int  # tokens in the step (MoE: before routing, i.e. not multiplied by topk)


@dataclass(frozen=True)
class MessagePoint:
    message_bytes: int  # bytes of the tensor each rank contributes (all-reduce: the full tensor)


Point = GemmPoint | AttentionPrefillPoint | AttentionDecodePoint | TokensPoint | MessagePoint


# ---- keys (model geometry + dtypes) --------------------------------------------------------------


class _Key:
    """A table's key: subclasses name their table and its point class as class keywords."""

    KIND: ClassVar[TableKind]
    POINT: ClassVar[type]

    def __init_subclass__(cls, kind: TableKind | None = None, point: type | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None and point is not None:
            cls.KIND, cls.POINT = kind, point


@dataclass(frozen=True)
class GemmKey(_Key, kind=TableKind.GEMM, point=GemmPoint):
    n: int  # output features
    k: int  # input features
    dtype: KernelDtype


@dataclass(frozen=True)
class _AttentionGeometry(_Key):
    num_heads: int  # query heads on this rank
    num_kv_heads: int  # KV heads on this rank
    head_dim: int
    dtype: KernelDtype
    kv_dtype: KernelDtype
    window: int = 0  # sliding window in tokens; 0 = full attention


# The prefill and decode keys of one geometry add no fields (the inherited frozen dataclass serves);
# only their table and point differ.
class AttentionPrefillKey(_AttentionGeometry, kind=TableKind.ATTENTION_PREFILL, point=AttentionPrefillPoint): ...
class AttentionDecodeKey(_AttentionGeometry, kind=TableKind.ATTENTION_DECODE, point=AttentionDecodePoint): ...


@dataclass(frozen=True)
class _MlaGeometry(_Key):
    num_heads: int  # query heads on this rank
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dtype: KernelDtype
    kv_dtype: KernelDtype


class MlaPrefillKey(_MlaGeometry, kind=TableKind.MLA_PREFILL, point=AttentionPrefillPoint): ...
class MlaDecodeKey(_MlaGeometry, kind=TableKind.MLA_DECODE, point=AttentionDecodePoint): ...


@dataclass(frozen=True)
class _MlaModuleGeometry(_MlaGeometry):
    hidden_size: int
    q_lora_rank: int  # 0: no low-rank query projection
    gemm_dtype: KernelDtype  # dtype of the module's projections


class MlaModulePrefillKey(_MlaModuleGeometry, kind=TableKind.MLA_MODULE_PREFILL, point=AttentionPrefillPoint): ...
class MlaModuleDecodeKey(_MlaModuleGeometry, kind=TableKind.MLA_MODULE_DECODE, point=AttentionDecodePoint): ...


# A DSA module key is an MLA module key (what reads an MLA module key's projections reads it the same) plus the
# indexer's geometry: its heads, head dim and the keys it keeps per query (DeepSeek-V3.2's index_n_heads,
# index_head_dim, index_topk).
@dataclass(frozen=True)
class DsaModulePrefillKey(MlaModulePrefillKey, kind=TableKind.DSA_MODULE_PREFILL, point=AttentionPrefillPoint):
    index_n_heads: int
    index_head_dim: int
    index_topk: int


@dataclass(frozen=True)
class DsaModuleDecodeKey(MlaModuleDecodeKey, kind=TableKind.DSA_MODULE_DECODE, point=AttentionDecodePoint):
    index_n_heads: int
    index_head_dim: int
    index_topk: int


@dataclass(frozen=True)
class MoeKey(_Key, kind=TableKind.MOE, point=TokensPoint):
    hidden_size: int
    inter_size: int  # per-expert intermediate size before MoE TP sharding
    topk: int
    num_experts: int  # routed experts in the whole model
    tp: int  # MoE tensor-parallel size
    ep: int  # expert-parallel size
    dtype: KernelDtype
    routing: MoeRouting = MoeRouting.BALANCED
    # Two expert matrices (up, down: a non-gated activation such as Nemotron-H's relu², vLLM FusedMoE
    # activation="relu2_no_mul", w1 [E, inter, hidden]) instead of three (gate+up, down: w1 [E, 2·inter, hidden]).
    # Not a table column: the MoE tables hold gated experts only (aiconfigurator collector/vllm/collect_moe.py
    # run_moe_torch builds w1 as [E, 2·inter, hidden] for every model), so a non-gated key reads no rows
    # (costing/interpolate.py `KernelPricer._measured_curve`) and a key read back from a table is gated.
    gated: bool = field(default=True, metadata={"column": False})

    @property
    def matrices(self) -> int:
        """Expert weight matrices per expert: gate, up and down when gated, else up and down."""
        return 3 if self.gated else 2


@dataclass(frozen=True)
class CollectiveKey(_Key, kind=TableKind.COLLECTIVE, point=MessagePoint):
    op: CollectiveOp
    num_gpus: int
    dtype: KernelDtype
    implementation: str = "nccl"  # e.g. nccl, vllm_custom_graph, vllm_custom_eager


@dataclass(frozen=True)
class ElementwiseKey(_Key, kind=TableKind.ELEMENTWISE, point=TokensPoint):
    """Per-token memory-bound work: `op` names it (rms_norm, rotary, silu_and_mul, add, ...),
    `width` is the per-token feature count it reads (e.g. hidden size)."""

    op: str
    width: int
    dtype: KernelDtype


KernelKey = (
    GemmKey | AttentionPrefillKey | AttentionDecodeKey | MlaPrefillKey | MlaDecodeKey
    | MlaModulePrefillKey | MlaModuleDecodeKey | DsaModulePrefillKey | DsaModuleDecodeKey | MoeKey | CollectiveKey
    | ElementwiseKey
)

KEY_CLASSES: dict[TableKind, type] = {
    cls.KIND: cls
    for cls in (GemmKey, AttentionPrefillKey, AttentionDecodeKey, MlaPrefillKey, MlaDecodeKey,
                MlaModulePrefillKey, MlaModuleDecodeKey, DsaModulePrefillKey, DsaModuleDecodeKey, MoeKey, CollectiveKey,
                ElementwiseKey)
}


@functools.cache
def coord_names(point_cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(point_cls))


def point_coords(point: Point) -> tuple[int, ...]:
    """A point's coordinates in interpolation order."""
    return tuple(getattr(point, name) for name in coord_names(type(point)))


def check_point(key: KernelKey, point: Point) -> None:
    """Raise ValueError unless `point` is the point type of `key`'s table with all coordinates >= 1."""
    if type(point) is not key.POINT:
        raise ValueError(f"{key.KIND.value} takes a {key.POINT.__name__}, got {type(point).__name__}")
    for name in coord_names(type(point)):
        value = getattr(point, name)
        if type(value) is int and value >= 1:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{key.KIND.value} coordinate {name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class Measurement:
    """One timed row: the representative time (median when we measured it; the collector's mean for
    imported data: see `ProfileMeta.time_statistic`) with spread and sample count where known."""

    time_us: float
    p10_us: float | None = None
    p90_us: float | None = None
    std_us: float | None = None
    samples: int | None = None
    kernel: str = ""  # implementation that ran (e.g. a cutlass or triton kernel label); not a key

    def __post_init__(self) -> None:
        if not (self.time_us > 0 and self.time_us < float("inf")):
            raise ValueError(f"time_us must be a finite positive number, got {self.time_us!r}")

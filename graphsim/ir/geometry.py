"""Kernel geometry: one frozen dataclass per kernel kind (DESIGN §4).

A geometry holds the model dimensions that identify a kernel — never a batch-dependent quantity
(those are supplied when the kernel is priced). Fuse rules build it, the partition passes split
it, `costing.kernel_map` turns it into a profile.db key, and the profiler builds its benchmark from
it, all through these typed fields. `KernelKind` → class is `kernel.GEOMETRY_FOR_KIND`.

`items()` lists a geometry as (field, value) pairs: the text form of a kernel node and the on-disk
form in graph JSON. A field declared with `_opt(...)` is left out while it holds its default (a
bias that is absent, a sliding window that is not MLA, …); every other field is always listed.
`from_items` reads the pairs back (missing optional fields take their defaults).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

GeometryValue = int | float | str | bool
_G = TypeVar("_G", bound="Geometry")


def _opt(default: Any) -> Any:
    """A field listed by `items()` only when it differs from `default`."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True, kw_only=True)
class Geometry:
    """Base of every kernel geometry."""

    def items(self) -> tuple[tuple[str, GeometryValue], ...]:
        out: list[tuple[str, GeometryValue]] = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("optional") and v == f.default:
                continue
            out.append((f.name, v))
        return tuple(out)

    def as_dict(self) -> dict[str, GeometryValue]:
        return dict(self.items())

    @classmethod
    def from_items(cls: type[_G], pairs: Iterable[tuple[str, Any]] | Iterable[list[Any]]) -> _G:
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for k, v in pairs:
            if k not in known:
                raise ValueError(f"{cls.__name__} has no field '{k}' (fields: {', '.join(sorted(known))})")
            kwargs[str(k)] = v
        return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class GemmGeometry(Geometry):
    """y[m, n] = x[m, k] · W[k, n]; a fused QKV projection also records its q/kv split, so the tp
    pass can split q by heads and keep whole KV heads per rank."""

    n: int
    k: int
    bias: bool = _opt(False)
    q_features: int | None = _opt(None)
    num_kv_heads: int | None = _opt(None)
    # block-diagonal: `groups` independent blocks, each n/groups outputs over its own k inputs (DeepSeek-V4's
    # grouped output projection); the tp pass gives each rank whole groups
    groups: int = _opt(1)


@dataclass(frozen=True, kw_only=True)
class AttentionGeometry(Geometry):
    """Softmax attention (prefill or decode is chosen per batch when priced). MLA when
    `kv_lora_rank` > 0; `kv_replicas` counts ranks holding the same KV head (tp > num_kv_heads)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int  # q/k head dim (nope + rope for MLA)
    v_head_dim: int
    window: int  # sliding window in tokens; 0 = full attention
    causal: bool
    sinks: bool = _opt(False)
    softcap: float = _opt(0.0)  # logit soft-capping; 0 = none
    kv_lora_rank: int = _opt(0)
    qk_rope_head_dim: int = _opt(0)
    kv_replicas: int = _opt(1)
    index_topk: int = _opt(0)  # sparse (DSA) attention: keys attended per query at most; 0 = dense
    # compressed-KV attention (DeepSeek-V4): + the entries of closed windows of this many tokens (top index_topk
    # of them when set), one shared K=V head; 0 = none
    compress_ratio: int = _opt(0)
    # bytes of one cached entry when the engine packs a token's shared K=V (and its compressed entries) in one
    # fixed-format row (vLLM's fp8_ds_mla for DeepSeek-V4: 584 B at head_dim 512); 0 = K and V in the kv dtype
    kv_entry_bytes: int = _opt(0)
    # ALiBi (BLOOM, MPT, Falcon with `alibi`): vLLM hands per-head slopes to the same kernel (flash_attn_varlen_func's
    # alibi_slopes, v1/attention/backends/flash_attn.py); priced as the kernel without them (one add per score)
    alibi: bool = _opt(False)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True, kw_only=True)
class LinearAttentionGeometry(Geometry):
    """Recurrent (linear) attention such as the gated delta rule, or Mamba2's scan (`kind` "mamba2_ssd": B/C
    groups as k heads, the state size as k_head_dim, SSM heads of head_dim as v heads; `chunk_size` its SSD
    chunk, `state_dtype` the DType value of its temporal state: the engine's mamba_ssm_cache_dtype)."""

    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    kind: str = _opt("gated_delta_rule")
    chunk_size: int = _opt(0)
    state_dtype: str = _opt("")


@dataclass(frozen=True, kw_only=True)
class IndexerGeometry(Geometry):
    """DSA's lightning indexer: `num_heads` query heads of `head_dim` scored against one key head, the best
    `topk` keys kept per query."""

    num_heads: int
    head_dim: int
    topk: int
    compress_ratio: int = _opt(0)  # DeepSeek-V4: keys are compressed entries, one per this many tokens
    block_size: int = _opt(0)  # MiniMax-M3: `topk` blocks of this many keys kept per query and index head


@dataclass(frozen=True, kw_only=True)
class RotaryGeometry(Geometry):
    """RoPE on q and k in place: `rot_dim` elements of each of the q and kv heads."""

    num_heads: int
    num_kv_heads: int
    rot_dim: int
    head_dim: int


@dataclass(frozen=True, kw_only=True)
class NormGeometry(Geometry):
    """RMS / layer norm: `width` elements per token, normalised in vectors of `dim` (dim < width for
    per-head q/k norms)."""

    width: int
    dim: int


@dataclass(frozen=True, kw_only=True)
class ElementwiseGeometry(Geometry):
    """A per-token memory-bound kernel: `width` elements written per token, `in_width` read when a
    reduction or concatenation reads more; a gating kernel over heads (fused_gdn_gating) also says
    its `num_v_heads`."""

    num_v_heads: int | None = _opt(None)
    width: int
    in_width: int | None = _opt(None)
    # token tensors of `width` elements it reads, when not one (a binary op on two such tensors reads 2): its
    # bytes are (reads + 1) x width a token instead of a read and a write (costing/roofline.py kernel_work)
    reads: int | None = _opt(None)


@dataclass(frozen=True, kw_only=True)
class EmbeddingGeometry(Geometry):
    vocab: int
    width: int


@dataclass(frozen=True, kw_only=True)
class Conv1dGeometry(Geometry):
    """Depthwise causal convolution over `channels` with a `kernel_size`-token window."""

    channels: int
    kernel_size: int


@dataclass(frozen=True, kw_only=True)
class MoeRouterGeometry(Geometry):
    num_experts: int
    top_k: int


@dataclass(frozen=True, kw_only=True)
class MoeExpertsGeometry(Geometry):
    """All routed experts of one MoE layer; `tp` splits each expert's intermediate size, `ep` spreads
    the experts over ranks."""

    hidden_size: int
    inter_size: int
    top_k: int
    num_experts: int
    tp: int = 1
    ep: int = 1
    activation: str = "silu"
    gated: bool = True
    bias: bool = _opt(False)


@dataclass(frozen=True, kw_only=True)
class CollectiveGeometry(Geometry):
    """A collective over `num_gpus` ranks of parallel group `group` (tp / ep); each row (token or
    sequence) carries `width` elements, `bytes_per_row` bytes; `reason` says what it joins."""

    num_gpus: int
    group: str
    width: int
    bytes_per_row: int
    reason: str


GEOMETRY_CLASSES: tuple[type[Geometry], ...] = (
    GemmGeometry, AttentionGeometry, LinearAttentionGeometry, IndexerGeometry, RotaryGeometry, NormGeometry, ElementwiseGeometry,
    EmbeddingGeometry, Conv1dGeometry, MoeRouterGeometry, MoeExpertsGeometry, CollectiveGeometry,
)

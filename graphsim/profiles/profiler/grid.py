"""Generic measurement grids (DESIGN §5 rule 5): powers of two and their midpoints over the full
deployment range, never points picked from one workload.

`Grid.full()` is the default on a GPU; `Grid.quick()` trims the top of every axis so a CPU run of
an 8B model ends in minutes. `Grid.trimmed(max_m=..., max_kv=...)` cuts the token-like axes or
the context axes of any grid. `points_for_key(key, grid)` gives the points a key is measured at.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, ElementwiseKey, GemmKey,
    GemmPoint, KernelKey, MlaDecodeKey, MlaPrefillKey, MoeKey, Point, TokensPoint,
)


def pow2_and_midpoints(lo: int, hi: int) -> tuple[int, ...]:
    """Every 2^i and 3·2^(i-1) in [lo, hi]: 1, 2, 3, 4, 6, 8, 12, 16, ..."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    out: set[int] = set()
    p = 1
    while p <= hi:
        for v in (p, p + p // 2):
            if lo <= v <= hi and v >= 1:
                out.add(v)
        p *= 2
    return tuple(sorted(out))


def doublings(start: int, hi: int) -> tuple[int, ...]:
    """start, 2·start, 4·start, ... up to hi."""
    out = []
    v = start
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


@dataclass(frozen=True)
class Grid:
    """The batch-dependent coordinates each kernel table is measured at."""

    gemm_m: tuple[int, ...]  # GEMM rows (tokens in the step)
    tokens: tuple[int, ...]  # per-token kernels (norms, rotary, activations, elementwise, embedding)
    moe_tokens: tuple[int, ...]  # MoE tokens before routing
    prefill_batch: tuple[int, ...]  # sequences per prefill point
    prefill_q: tuple[int, ...]  # new tokens per sequence
    prefill_max_kv: int  # kv_len runs over q_len · 2^j up to this
    decode_batch: tuple[int, ...]
    decode_kv: tuple[int, ...]

    @classmethod
    def full(cls) -> Grid:
        """The full generic range: m and tokens 1…16384, prefill q 16…8192 with
        kv = q, 2q, … ≤ 32768, decode batch 1…256 × kv 128…32768."""
        return cls(
            gemm_m=pow2_and_midpoints(1, 16384),
            tokens=pow2_and_midpoints(1, 16384),
            moe_tokens=pow2_and_midpoints(1, 16384),
            prefill_batch=(1,),
            prefill_q=pow2_and_midpoints(16, 8192),
            prefill_max_kv=32768,
            decode_batch=pow2_and_midpoints(1, 256),
            decode_kv=pow2_and_midpoints(128, 32768),
        )

    @classmethod
    def quick(cls) -> Grid:
        """The same generic grids with the top trimmed, for a CPU run in minutes."""
        return cls.full().trimmed(max_m=64, max_tokens=2048, max_moe_tokens=256, max_q=512, max_kv=2048,
                                  max_batch=16)

    def trimmed(self, *, max_m: int | None = None, max_tokens: int | None = None, max_moe_tokens: int | None = None,
                max_q: int | None = None, max_kv: int | None = None, max_batch: int | None = None) -> Grid:
        """A copy with every axis cut at the given maxima (None: unchanged)."""

        def cut(values: tuple[int, ...], hi: int | None) -> tuple[int, ...]:
            return values if hi is None else tuple(v for v in values if v <= hi)

        return replace(
            self,
            gemm_m=cut(self.gemm_m, max_m),
            tokens=cut(self.tokens, max_tokens),
            moe_tokens=cut(self.moe_tokens, max_moe_tokens),
            prefill_q=cut(self.prefill_q, max_q if max_kv is None else min(max_q or max_kv, max_kv)),
            prefill_max_kv=self.prefill_max_kv if max_kv is None else min(self.prefill_max_kv, max_kv),
            decode_batch=cut(self.decode_batch, max_batch),
            decode_kv=cut(self.decode_kv, max_kv),
        )

    def prefill_points(self) -> list[AttentionPrefillPoint]:
        return [AttentionPrefillPoint(b, q, kv) for b in self.prefill_batch for q in self.prefill_q
                for kv in doublings(q, self.prefill_max_kv)]

    def decode_points(self) -> list[AttentionDecodePoint]:
        return [AttentionDecodePoint(b, kv) for b in self.decode_batch for kv in self.decode_kv]


def points_for_key(key: KernelKey, grid: Grid, once_only: bool = False) -> list[Point]:
    """The grid points a key is measured at. `once_only`: every kernel behind the key runs once
    per step independent of the batch (`Rows.ONCE`), so only tokens=1 is ever looked up."""
    if isinstance(key, GemmKey):
        return [GemmPoint(m) for m in grid.gemm_m]
    if isinstance(key, (AttentionPrefillKey, MlaPrefillKey)):
        return list(grid.prefill_points())
    if isinstance(key, (AttentionDecodeKey, MlaDecodeKey)):
        return list(grid.decode_points())
    if isinstance(key, MoeKey):
        return [TokensPoint(t) for t in grid.moe_tokens]
    if isinstance(key, ElementwiseKey):
        return [TokensPoint(1)] if once_only else [TokensPoint(t) for t in grid.tokens]
    raise ValueError(f"no grid for {type(key).__name__}")

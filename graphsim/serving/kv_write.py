"""The KV-cache write of vLLM's FlashAttention backend: a kernel of its own that no profile row holds.

vLLM writes a step's keys and values into the paged cache with `reshape_and_cache_flash`, launched apart from the
attention kernel: inside `FlashAttentionImpl.forward` before vllm-project/vllm PR 25954 (2025-09-30), in
`do_kv_cache_update` since (vllm/v1/attention/backends/flash_attn.py at v0.19.0). aiconfigurator's attention rows
time `impl.forward` alone (collector/vllm/collect_attn.py `run_attention_torch`), on vLLM 0.24 (its H100 and H200
tables) and 0.14 (A100), all after that PR, so no row holds the write and graphsim's fused FlashAttention kernel
(`flash_attn_varlen`) is priced without it.

Priced here per step, for the simulator (as `host.EngineHost` adds the sampler's GPU time): one write per
FlashAttention kernel of the step's rank (the cost tree's leaves × multiplicity), of the step's tokens, each
reading and writing its K and V, `(head_dim + v_head_dim) × num_kv_heads` elements of the KV dtype — through the
profile's pricer as an elementwise key without rows, i.e. derived: max(the profile's launch floor, bytes /
achieved bandwidth) (costing/derived.py). Qwen3-0.6B on an H100: 28 writes of 3.07 µs (the floor) a decode step.
`graphsim predict`'s kernel tree does not carry it; MLA and other backends' writes are not priced apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KV_CACHE_WRITE = "reshape_and_cache_flash"
FLASH_ATTENTION = "flash_attn_varlen"  # vLLM's FlashAttention kernel after the fuse pass (passes/fuse/vllm.py)


@dataclass(frozen=True)
class KvCacheWrite:
    """GPU time of a step's KV-cache writes, by the step's token count (index 0: none)."""

    by_tokens_us: np.ndarray  # (max_tokens + 1,) µs
    writes: int  # FlashAttention kernels a step (one write each)

    def us(self, tokens):
        """µs of the writes of a step of `tokens` tokens (scalar or array; past the table: its last entry)."""
        i = np.minimum(np.asarray(tokens, dtype=np.int64), len(self.by_tokens_us) - 1)
        out = self.by_tokens_us[i]
        return float(out) if np.ndim(out) == 0 else out


def is_flash_attention(attrs: Any) -> bool:
    """A vLLM FlashAttention kernel (not MLA), whose KV-cache write is a launch of its own."""
    from graphsim.ir.geometry import AttentionGeometry
    from graphsim.ir.kernel import KernelKind

    g = attrs.geometry
    return (attrs.kind is KernelKind.ATTENTION and attrs.name == FLASH_ATTENTION and isinstance(g, AttentionGeometry)
            and not g.is_mla and g.num_kv_heads > 0)


def kv_cache_write(cost: Any, max_tokens: int) -> KvCacheWrite | None:
    """The writes of `cost`'s FlashAttention kernels for steps of 1..`max_tokens` tokens (a cost with `tree`,
    `pricer` and `dtypes`, pricing.TreeCost / MemoCost); None without them, without such kernels, or where the
    pricer has no time for the write."""
    from graphsim.costing.kernels import ElementwiseKey

    tree, pricer, dtypes = (getattr(cost, a, None) for a in ("tree", "pricer", "dtypes"))
    if tree is None or pricer is None or dtypes is None or max_tokens < 1:
        return None
    mult = np.asarray(tree.multiplicity, dtype=np.float64)
    tokens = np.arange(1, max_tokens + 1, dtype=np.float64)[:, None]
    total, writes = np.zeros(max_tokens + 1), 0
    for i, lf in enumerate(tree.leaves):
        if not is_flash_attention(lf.attrs):
            continue
        g = lf.attrs.geometry
        key = ElementwiseKey(KV_CACHE_WRITE, (g.head_dim + g.v_head_dim) * g.num_kv_heads, dtypes.kv)
        t, _ = pricer.times(key, tokens)
        if np.isnan(t).any():
            return None
        total[1:] += mult[i] * t
        writes += int(round(mult[i]))
    return KvCacheWrite(total, writes) if writes else None

"""Attention rows: prefill (`AttentionPrefillPoint(batch, q_len, kv_len)`) and decode
(`AttentionDecodePoint(batch, kv_len)`) for GQA/MHA keys and MLA keys.

`F.scaled_dot_product_attention` does the work: GQA through `enable_gqa`, causal with the
queries aligned to the end of the keys (kv_len - q_len cached tokens before them), a sliding
window through a boolean mask (as HF's sdpa path builds it). MLA runs in its decompressed form:
per-head keys of qk_nope + qk_rope dims and values of v_head_dim, as HF eager computes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, MlaDecodeKey, MlaPrefillKey,
)
from graphsim.ir.geometry import AttentionGeometry
from graphsim.profiles.profiler.base import BenchInputs, randn
from graphsim.profiles.profiler.device import Unmeasurable, check_budget, element_size, torch_dtype

AttentionKey = AttentionPrefillKey | AttentionDecodeKey | MlaPrefillKey | MlaDecodeKey


def attention_mask(q_len: int, kv_len: int, window: int, device: torch.device) -> torch.Tensor:
    """[q_len, kv_len] bool, True where query i (at position kv_len - q_len + i) may attend key j:
    j <= pos_i and, with a window, pos_i - j < window."""
    pos = torch.arange(kv_len - q_len, kv_len, device=device).unsqueeze(1)
    j = torch.arange(kv_len, device=device).unsqueeze(0)
    allowed = j <= pos
    if window > 0:
        allowed &= (pos - j) < window
    return allowed


class AttentionBench(BenchInputs[AttentionKey]):
    def __post_init__(self) -> None:
        k = self.key
        g = self.attrs.geometry
        geo = g if isinstance(g, AttentionGeometry) else None
        self.dtype = torch_dtype(k.dtype, "attention")
        if k.kv_dtype is not k.dtype:
            raise Unmeasurable(f"attention with a {k.kv_dtype.value} KV cache and {k.dtype.value} queries has no "
                               "plain torch op in the profiler")
        if isinstance(k, (MlaPrefillKey, MlaDecodeKey)):
            self.heads, self.kv_heads = k.num_heads, k.num_heads
            self.qk_dim, self.v_dim, self.window = k.qk_nope_head_dim + k.qk_rope_head_dim, k.v_head_dim, 0
            form = "MLA decompressed"
        else:
            self.heads, self.kv_heads, self.qk_dim, self.window = k.num_heads, k.num_kv_heads, k.head_dim, k.window
            self.v_dim = (geo.v_head_dim if geo else 0) or k.head_dim
            form = "GQA" if k.num_kv_heads != k.num_heads else "MHA"
        self.decode = isinstance(k, (AttentionDecodeKey, MlaDecodeKey))
        self.label = f"aten::scaled_dot_product_attention ({form}{', window mask' if self.window else ''})"
        ignored = [name for name, on in (("sinks", geo and geo.sinks), ("softcap", geo and geo.softcap)) if on]
        if ignored:
            self.notes = (f"attention measured without {' and '.join(ignored)} (sdpa has none; the key does not "
                          "carry them)",)

    def prepare(self, point: AttentionPrefillPoint | AttentionDecodePoint) -> Callable[[], Any]:
        if isinstance(point, AttentionDecodePoint):
            b, q_len, kv_len = point.batch, 1, point.kv_len
        else:
            b, q_len, kv_len = point.batch, point.q_len, point.kv_len
        dev, dt = self.info.device, self.dtype
        # sdpa's is_causal aligns queries to the first keys; with cached keys or a biting window, pass a mask
        needs_mask = (self.window > 0 and kv_len > self.window) or (q_len > 1 and kv_len != q_len)
        esize = element_size(dt)
        nbytes = esize * b * (self.heads * q_len * (self.qk_dim + 2 * self.v_dim)
                              + self.kv_heads * kv_len * (self.qk_dim + self.v_dim))
        if needs_mask:
            nbytes += q_len * kv_len + (4 * b * self.heads * q_len * kv_len if dev.type == "cpu" else 0)
        check_budget(self.info, nbytes, f"attention b={b} q={q_len} kv={kv_len}")
        q = randn((b, self.heads, q_len, self.qk_dim), dt, dev)
        k = randn((b, self.kv_heads, kv_len, self.qk_dim), dt, dev)
        v = randn((b, self.kv_heads, kv_len, self.v_dim), dt, dev)
        gqa = self.heads != self.kv_heads
        if needs_mask:
            mask = attention_mask(q_len, kv_len, self.window, dev)
            return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        causal = q_len > 1  # q_len == kv_len here: top-left and bottom-right alignment agree
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

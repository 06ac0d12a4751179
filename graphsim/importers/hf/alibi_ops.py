"""ALiBi attention as one semantic node while tracing.

BLOOM's attention module (transformers models/bloom/modeling_bloom.py `BloomAttention.forward`) does not dispatch
through `AttentionInterface`: it scores with `alibi.baddbmm(q, kᵀ)`, adds the mask, softmaxes in float32 and
multiplies by v, which traced as two `bmm`, a softmax and a cast (memory-bound placeholders carrying none of the
attention's work). vLLM runs it as its ordinary attention kernel with per-head ALiBi slopes
(model_executor/models/bloom.py `BloomAttention.__init__`: `Attention(..., alibi_slopes=alibi_slopes)`; the
FlashAttention backend passes them to `flash_attn_varlen_func(..., alibi_slopes=...)`,
v1/attention/backends/flash_attn.py `FlashAttentionImpl.forward`).

While tracing, a module recognised by what it holds (a fused `query_key_value` linear, a `dense` output linear,
`num_heads`, `head_dim`, `inv_norm_factor` and a `_reshape` that splits the fused projection into q, k, v) runs its
own projection and split, then one `graphsim::alibi_attention` node (`Op.ATTENTION` with `alibi=True`), then its
output projection and residual add as its module does. The slopes are computed inside the trace from the head count
(a constant: creation ops, absorbed by fuse), as vLLM computes them once at load (`_get_alibi_slopes`).

The reference CPU kernel adds `slope_h · j` (key position j) to the scores, BLOOM's bias (`build_alibi_tensor`:
slopes × the cumulative key position; a per-query constant shift would not change the softmax), so a tiny random
model gives transformers' eager logits (tests/importers/test_alibi.py).
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterator

import torch


@torch.library.custom_op("graphsim::alibi_attention", mutates_args=())
def alibi_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor,
                       scale: float) -> torch.Tensor:
    """q, k, v [B,H,S,D], slopes [H] → [B,S,H,D]: causal softmax(q·kᵀ·scale + slope_h·j) · v."""
    s = q.shape[2]
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    j = torch.arange(k.shape[2], device=q.device, dtype=torch.float32)
    scores = scores + slopes.float().reshape(1, -1, 1, 1) * j.reshape(1, 1, 1, -1)
    i = torch.arange(s, device=q.device)[:, None]
    scores = scores.masked_fill(torch.arange(k.shape[2], device=q.device)[None, :] > i, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
    return out.transpose(1, 2).contiguous()


@alibi_attention_op.register_fake
def _alibi_attention_fake(q, k, v, slopes, scale):
    b, h, s, _ = q.shape
    return q.new_empty((b, s, h, v.shape[-1]))


def alibi_slopes(num_heads: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The standard ALiBi slopes (Press et al. 2022, https://arxiv.org/abs/2108.12409; the same formula as
    transformers' `build_alibi_tensor` and vLLM bloom.py `_get_alibi_slopes`): for the closest power of two
    p ≤ H, base 2^(-8/p) to the powers 1..p, then the odd powers of 2^(-4/p) for the remaining heads. Built from
    `arange` and `pow` so that, in a trace, it is position arithmetic the fuse pass absorbs."""
    p = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(p) - 3)))
    slopes = torch.pow(base, torch.arange(1, p + 1, dtype=torch.float32, device=device))
    if p != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * p) - 3)))
        powers = torch.arange(1, 1 + 2 * min(p, num_heads - p), 2, dtype=torch.float32, device=device)
        slopes = torch.cat([slopes, torch.pow(extra, powers)])
    return slopes


def _is_fused_alibi_attention(m: torch.nn.Module) -> bool:
    return (isinstance(getattr(m, "query_key_value", None), torch.nn.Linear)
            and isinstance(getattr(m, "dense", None), torch.nn.Linear)
            and all(isinstance(getattr(m, a, None), (int, float)) for a in ("num_heads", "head_dim", "inv_norm_factor"))
            and callable(getattr(m, "_reshape", None)) and getattr(m, "pretraining_tp", 1) <= 1
            and "alibi" in getattr(type(m).forward, "__code__", types.SimpleNamespace(co_varnames=())).co_varnames)


def _alibi_attention_forward(self, hidden_states, residual, alibi, attention_mask, layer_past=None, use_cache=False,
                             output_attentions=False, **kwargs):
    """BloomAttention.forward with the scores, mask, softmax and value product as one graphsim::alibi_attention."""
    q, k, v = self._reshape(self.query_key_value(hidden_states))  # [B, H, S, D] each
    slopes = alibi_slopes(int(self.num_heads), q.device)
    context = torch.ops.graphsim.alibi_attention(q, k, v, slopes, float(self.inv_norm_factor))
    b, s = context.shape[0], context.shape[1]
    return self.dense(context.reshape(b, s, -1)) + residual, None  # dropout_add at inference: the add


@contextlib.contextmanager
def alibi_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each fused-QKV ALiBi attention module's forward for the semantic one; restore after."""
    swapped = [m for m in model.modules() if _is_fused_alibi_attention(m)]
    for m in swapped:
        m.forward = types.MethodType(_alibi_attention_forward, m)
    try:
        yield sorted({f"{type(m).__module__}.{type(m).__name__}.forward" for m in swapped})
    finally:
        for m in swapped:
            del m.forward

"""MiniMax-Text-01's lightning attention as one semantic op, so a trace keeps the token count symbolic.

transformers (models/minimax `MiniMaxLightningAttention.forward`) writes the linear attention inline: a Python
loop over blocks of `block_size` tokens (their count is a ceil-div of the token count: a guard, so the trace fell
back to a static one, the loop unrolled). While tracing, a module holding its fields (`qkv_proj`, `output_gate`,
`out_proj`, `norm`, `slope_rate`, `block_size`, `act_fn`; never matched by class name) has its forward swapped:
the projections, the activation, the RMSNorm over all heads, the sigmoid output gate and `out_proj` stay aten,
the recurrence is `graphsim::lightning_attention`:

    q, k, v [B, H, S, D] (after the activation), slope [H, 1, 1] → (o [B, H, S, D], state [B, H, D, D])

Linear attention with a per-head decay λ = exp(-slope) (Lightning Attention-2, arXiv:2401.04658): per token
S ← λ·S + kᵀv; o = q·S, which the block form computes exactly (intra-block (Q·Kᵀ ∘ decay)·V plus the carried
state). The reference kernel runs that recurrence in float32; a tiny model gives transformers' logits
(tests/importers/test_lightning.py). With a cache (generation) the original forward runs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from graphsim.importers.hf.swap import swapped_forwards


@torch.library.custom_op("graphsim::lightning_attention", mutates_args=())
def lightning_attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slope: torch.Tensor, block_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, v [B,H,S,D], slope [H,1,1] → (o [B,H,S,D] in q's dtype, state [B,H,D,D] fp32); `block_size` is the
    engine kernel's block (the result does not depend on it)."""
    b, h, s, d = q.shape
    decay = torch.exp(-slope.float().reshape(1, h, 1, 1))
    qf, kf, vf = q.float(), k.float(), v.float()
    state = torch.zeros(b, h, d, v.shape[-1])
    out = torch.empty(b, h, s, v.shape[-1])
    for t in range(s):
        state = decay * state + kf[:, :, t, :, None] * vf[:, :, t, None, :]
        out[:, :, t] = (qf[:, :, t, :, None] * state).sum(-2)
    return out.to(q.dtype), state


@lightning_attention_op.register_fake
def _lightning_attention_fake(q, k, v, slope, block_size):
    b, h, s, d = q.shape
    return q.new_empty((b, h, s, v.shape[-1])), q.new_empty((b, h, d, v.shape[-1]), dtype=torch.float32)


def _is_lightning(m: torch.nn.Module) -> bool:
    return all(hasattr(m, a) for a in ("qkv_proj", "output_gate", "out_proj", "norm", "slope_rate", "block_size",
                                       "act_fn", "num_attention_heads", "head_dim"))


def _lightning_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
    """MiniMaxLightningAttention.forward without a cache, its block loop as one `graphsim::lightning_attention`."""
    if cache is not None:
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask, cache, **kwargs)
    b, s, _ = hidden_states.shape
    h, d = self.num_attention_heads, self.head_dim
    qkv = self.act_fn(self.qkv_proj(hidden_states))
    qkv = sys.modules[type(self).__module__].apply_mask_to_padding_states(qkv, attention_mask)
    q, k, v = torch.split(qkv.reshape(b, s, h, 3 * d), d, dim=3)
    out, state = torch.ops.graphsim.lightning_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        self.slope_rate, int(self.block_size))
    out = self.norm(out.transpose(1, 2).reshape(b, s, h * d))
    out = F.sigmoid(self.output_gate(hidden_states)) * out
    return self.out_proj(out), state


@contextlib.contextmanager
def lightning_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each lightning attention's forward for the semantic one; restore after."""
    with swapped_forwards(model, lambda m: _lightning_forward if _is_lightning(m) else None) as names:
        yield names

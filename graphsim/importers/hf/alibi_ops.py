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
model gives transformers' eager logits (tests/passes/test_fuse_legacy.py).

Falcon (`FalconAttention`, recognised by its fused `query_key_value`, `dense`, head counts and layout flags) picks its
attention class from `FALCON_ATTENTION_CLASSES` by `config._attn_implementation`, which has no `graphsim` entry;
`register_attention_tables` adds one (its eager class) so the model builds, and its forward is swapped the same way:
its real KV heads (multi-query: 1; `new_decoder_architecture`: `num_kv_heads`, which its `_split_heads` broadcasts to
every query head), RoPE then `graphsim::attention`, or `graphsim::alibi_attention` (tiny Falcons give transformers'
sdpa logits, same test file).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from graphsim.importers.hf.custom_ops import IMPL_NAME


@torch.library.custom_op("graphsim::alibi_attention", mutates_args=())
def alibi_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor,
                       scale: float) -> torch.Tensor:
    """q [B,H,S,D], k, v [B,KVH,S,D], slopes [H] → [B,S,H,D]: causal softmax(q·kᵀ·scale + slope_h·j) · v."""
    s, h = q.shape[2], q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    v = v.repeat_interleave(h // v.shape[1], dim=1)
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


def _takes(m: torch.nn.Module, arg: str) -> bool:
    """Whether the module's forward has a parameter named `arg` (through decorators such as deprecate_kwarg)."""
    try:
        return arg in inspect.signature(type(m).forward).parameters
    except (TypeError, ValueError):
        return False


def _is_fused_alibi_attention(m: torch.nn.Module) -> bool:
    return (isinstance(getattr(m, "query_key_value", None), torch.nn.Linear)
            and isinstance(getattr(m, "dense", None), torch.nn.Linear)
            and all(isinstance(getattr(m, a, None), (int, float)) for a in ("num_heads", "head_dim", "inv_norm_factor"))
            and callable(getattr(m, "_reshape", None)) and getattr(m, "pretraining_tp", 1) <= 1
            and _takes(m, "alibi"))


def _alibi_attention_forward(self, hidden_states, residual, alibi, attention_mask, layer_past=None, use_cache=False,
                             output_attentions=False, **kwargs):
    """BloomAttention.forward with the scores, mask, softmax and value product as one graphsim::alibi_attention."""
    q, k, v = self._reshape(self.query_key_value(hidden_states))  # [B, H, S, D] each
    slopes = alibi_slopes(int(self.num_heads), q.device)
    context = torch.ops.graphsim.alibi_attention(q, k, v, slopes, float(self.inv_norm_factor))
    b, s = context.shape[0], context.shape[1]
    return self.dense(context.reshape(b, s, -1)) + residual, None  # dropout_add at inference: the add


def _is_falcon_attention(m: torch.nn.Module) -> bool:
    """Falcon's attention (models/falcon/modeling_falcon.py `FalconAttention`): a fused `query_key_value`, `dense`,
    the head counts and the two layout flags `_split_heads` reads."""
    return (isinstance(getattr(m, "query_key_value", None), torch.nn.Linear)
            and isinstance(getattr(m, "dense", None), torch.nn.Linear)
            and all(isinstance(getattr(m, a, None), int) for a in ("num_heads", "num_kv_heads", "head_dim"))
            and all(isinstance(getattr(m, a, None), bool) for a in ("new_decoder_architecture", "multi_query"))
            and callable(getattr(m, "_split_heads", None)))


def _falcon_attention_forward(self, hidden_states, alibi, attention_mask, position_ids=None, layer_past=None,
                              use_cache=False, output_attentions=False, position_embeddings=None, **kwargs):
    """FalconAttention.forward with its real KV heads (its `_split_heads` broadcasts them to every query head under
    `new_decoder_architecture`; vLLM falcon.py `FalconAttention` keeps `total_num_kv_heads`) and one attention node:
    `graphsim::attention` after RoPE, or `graphsim::alibi_attention` with the slopes scaled by `inv_norm_factor`
    (transformers adds ALiBi before that scale; vLLM falcon.py: `alibi_slopes = _get_alibi_slopes(...) *
    self.inv_norm_factor`)."""
    fused = self.query_key_value(hidden_states)
    b, s, _ = fused.shape
    h, d = self.num_heads, self.head_dim
    if self.new_decoder_architecture:
        qkv = fused.view(b, s, -1, h // self.num_kv_heads + 2, d)
        q, k, v = qkv[:, :, :, :-2].reshape(b, s, h, d), qkv[:, :, :, -2], qkv[:, :, :, -1]
    elif self.multi_query:
        qkv = fused.view(b, s, h + 2, d)
        q, k, v = qkv[:, :, :-2], qkv[:, :, -2:-1], qkv[:, :, -1:]
    else:
        qkv = fused.view(b, s, h, 3, d)
        q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if alibi is None:
        rope = sys.modules[type(self).__module__].apply_rotary_pos_emb  # the modelling file's own RoPE
        assert position_embeddings is not None, "Falcon's rotary attention is called with its cos/sin tables"
        cos, sin = position_embeddings
        q, k = rope(q, k, cos, sin)
        out = torch.ops.graphsim.attention(q, k, v, None, float(self.inv_norm_factor), True, 0, 0.0, 0, 0, None)
    else:
        slopes = alibi_slopes(h, q.device) * float(self.inv_norm_factor)
        out = torch.ops.graphsim.alibi_attention(q, k, v, slopes, float(self.inv_norm_factor))
    return self.dense(out.reshape(b, s, h * d)), None


def _is_mpt_attention(m: torch.nn.Module) -> bool:
    """MPT's attention (models/mpt/modeling_mpt.py `MptAttention`): a fused `Wqkv`, `out_proj`, `n_heads`, `head_dim`,
    `softmax_scale`, and a forward that takes the ALiBi `position_bias`."""
    return (isinstance(getattr(m, "Wqkv", None), torch.nn.Linear)
            and isinstance(getattr(m, "out_proj", None), torch.nn.Linear)
            and all(isinstance(getattr(m, a, None), int) for a in ("n_heads", "head_dim"))
            and isinstance(getattr(m, "softmax_scale", None), float)
            and _takes(m, "position_bias"))


def _mpt_attention_forward(self, hidden_states, position_bias, cache=None, attention_mask=None, **kwargs):
    """MptAttention.forward with one graphsim::alibi_attention node. Its `position_bias` [H, 1, L] is
    slope_h · (j - L + 1) over the config's max_seq_len L (`build_mpt_alibi_tensor`: the slopes of vLLM mpt.py
    `_get_alibi_slopes(total_num_heads, alibi_bias_max)`, a power of two rounded up); the slopes are read back from its
    second-to-last column (-slope_h), a constant the fuse pass absorbs. A per-query shift does not change the
    softmax, so slope_h · j is the same bias."""
    b, s = hidden_states.shape[:2]
    qkv = self.Wqkv(hidden_states)
    if self.clip_qkv:
        qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)
    q, k, v = (t.reshape(b, s, self.n_heads, self.head_dim).transpose(1, 2) for t in qkv.chunk(3, dim=2))
    slopes = -position_bias[:, 0, -2].float()
    out = torch.ops.graphsim.alibi_attention(q, k, v, slopes, float(self.softmax_scale))
    return self.out_proj(out.reshape(b, s, -1)), None


def _mask_never_none(create: Callable[..., Any]) -> Callable[..., Any]:
    """`create_causal_mask` that returns a [1, 1, 1, 1] placeholder where graphsim's attention materialises none
    (MptModel.forward calls `.to(torch.bool)` on it; the swapped attention never reads it)."""
    def wrapped(*args, **kwargs):
        mask = create(*args, **kwargs)
        if mask is None:
            embeds = kwargs.get("inputs_embeds")
            device = embeds.device if isinstance(embeds, torch.Tensor) else None
            return torch.zeros((1, 1, 1, 1), dtype=torch.bool, device=device)
        return mask

    return wrapped


def register_attention_tables() -> None:
    """Modelling files that pick their attention class from a table keyed by `config._attn_implementation` (Falcon's
    `FALCON_ATTENTION_CLASSES`) get a `graphsim` entry: their eager class, whose forward `alibi_patches` swaps while
    tracing. Without it the model cannot be built with graphsim's attention implementation."""
    import transformers.models.falcon.modeling_falcon as falcon

    from graphsim.importers.hf import table_attention

    falcon.FALCON_ATTENTION_CLASSES.setdefault(IMPL_NAME, falcon.FALCON_ATTENTION_CLASSES["eager"])
    table_attention.register_attention_tables()  # GPT-Neo's and GIT's tables


@contextlib.contextmanager
def alibi_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each fused-QKV attention module's forward (BLOOM's ALiBi attention, Falcon's rotary or ALiBi one) for
    the semantic one; restore after."""
    swapped, patched = [], []
    for m in model.modules():
        forward = (_alibi_attention_forward if _is_fused_alibi_attention(m)
                   else _falcon_attention_forward if _is_falcon_attention(m)
                   else _mpt_attention_forward if _is_mpt_attention(m) else None)
        if forward is not None:
            m.forward = types.MethodType(forward, m)
            swapped.append(m)
            mod = sys.modules.get(type(m).__module__)
            create = getattr(mod, "create_causal_mask", None)
            if forward is _mpt_attention_forward and mod is not None and create is not None \
                    and mod not in [p[0] for p in patched]:
                patched.append((mod, create))
                vars(mod)["create_causal_mask"] = _mask_never_none(create)
    try:
        yield sorted({f"{type(m).__module__}.{type(m).__name__}.forward" for m in swapped})
    finally:
        for m in swapped:
            del m.forward
        for mod, create in patched:
            vars(mod)["create_causal_mask"] = create

"""Semantic ops for compressed-KV attention and hyper-connections (DeepSeek-V4's mechanisms), so a trace keeps
the token count symbolic and each mechanism is one node.

transformers (models/deepseek_v4) writes them in Python over the whole sequence: a compressor pools every
`compress_rate` tokens' projections into one entry (`T // m` windows: a guard on the token count, so the trace
fell back to a static one), a lightning indexer scores queries against those entries and keeps the top-k,
attention concatenates them onto the sliding-window keys under a materialised mask, and each hyper-connection
runs a 20-step Sinkhorn loop (~140 aten ops, twice a layer). While tracing, modules are recognised by what they
hold (never by class name) and their forwards swapped:

- a KV compressor (`kv_proj`, `gate_proj`, `position_bias`, `kv_norm`, `compress_rate`, `rotary_emb`): its two
  projections stay aten linears, then `graphsim::kv_compress`: the softmax-gated pooling of each closed window
  (overlapping windows when the projections carry two series: 2 × head_dim), its RMSNorm and the RoPE of the
  entry's position, laid out per token — the entry of window w sits at row (w + 1)·m − 1, other rows zero — so
  its shape stays [B, T, head_dim];
- a lightning indexer over compressed keys (`q_b_proj`, `scorer.weights_proj`, `index_topk` and a compressor's
  fields): q projection and RoPE stay aten, then `graphsim::compressed_indexer`: the int32 indices [B, T, k] of
  the best `index_topk` entries each query may see (entry w iff w < (t + 1) // m), -1 padded;
- a compressed-KV attention (`q_a_proj`, `q_b_proj`, `kv_proj`, `o_a_proj`, `o_b_proj`, `sinks`,
  `sliding_window`, `compressor`): projections, norms, RoPE and the grouped output projection stay aten, the
  attention itself is `graphsim::compressed_attention`: one shared K=V head over the sliding window plus the
  compressed entries (all that are visible, or the indexer's picks), with per-head sinks;
- a hyper-connection (`fn`, `base`, `scale`, `hc_mult`, `hc_sinkhorn_iters`): `graphsim::hc_pre`, the norm of the
  flattened streams, its `fn` projection, pre/post/comb, the Sinkhorn projection and the collapse in one node
  (vLLM's MHCPreOp); the layer holding two of them (`attn_hc`, `ffn_hc`) updates its streams with
  `graphsim::hc_post` (post·out + combᵀ·streams, vLLM's MHCPostOp); the model's final collapse (`hc_fn`,
  `hc_base`, `hc_scale`) is `graphsim::hc_head` (vLLM's HCHeadOp).
- an independent hyper-connection (HunYuan-V4's iHC: `fn` projecting to pre and post gates only, 2n rows, a
  `hc_post_magnitude`, no comb and no Sinkhorn): `graphsim::ihc_pre` (post gates and the collapse, vLLM's
  triton_ihc_pre); the layer holding two of them updates its streams with `graphsim::ihc_post` (post·out + streams,
  vLLM's triton_ihc_post). Its final collapse has the fields above and is `graphsim::hc_head` too.

The reference kernels compute what transformers' no-cache forward computes (`tests/importers/test_compressed_ops.py`
compares logits on a tiny random model). With a cache (generation) the original forwards run.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from graphsim.importers.hf.swap import swapped_forwards


def _interleaved_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the trailing 2·cos.shape[-1] channels of x, pairs (2i, 2i+1) rotated (transformers deepseek_v4
    apply_rotary_pos_emb / rotate_half). cos, sin broadcast over x[..., :-rope]'s leading dims."""
    cos = cos.repeat_interleave(2, dim=-1)
    sin = sin.repeat_interleave(2, dim=-1)
    rd = cos.shape[-1]
    nope, rope = x[..., :-rd], x[..., -rd:]
    half = torch.stack((-rope[..., 1::2], rope[..., 0::2]), dim=-1).flatten(-2)
    rotated = ((rope.float() * cos) + (half.float() * sin)).to(x.dtype)
    return torch.cat([nope, rotated], dim=-1)


# --- KV compressor ----------------------------------------------------------------------------------
@torch.library.custom_op("graphsim::kv_compress", mutates_args=())
def kv_compress_op(
    kv: torch.Tensor, gate: torch.Tensor, position_bias: torch.Tensor, norm_weight: torch.Tensor,
    inv_freq: torch.Tensor, ratio: int, head_dim: int, eps: float, rope_scaling: float,
) -> torch.Tensor:
    """kv, gate [B,T,c·d] (c = 1, or 2 for overlapping windows), position_bias [m, c·d] → [B,T,d]: entry w (window
    [w·m, (w+1)·m)) at row (w+1)·m − 1, zeros elsewhere. Entry = RMSNorm(Σ_slots softmax(gate + bias) ⊙ kv), its
    trailing rope channels rotated at position w·m; with c = 2 its slots are window w−1's first series and window
    w's second (window 0's first half empty)."""
    b, t, width = kv.shape
    m, d = ratio, head_dim
    windows = t // m
    out = kv.new_zeros((b, t, d))
    if windows == 0:
        return out
    ck = kv[:, : windows * m].reshape(b, windows, m, width)
    cg = gate[:, : windows * m].reshape(b, windows, m, width) + position_bias
    if width == 2 * d:
        slots_kv = ck.new_zeros((b, windows, 2 * m, d))
        slots_g = cg.new_full((b, windows, 2 * m, d), float("-inf"))
        slots_kv[:, :, m:] = ck[..., d:]
        slots_g[:, :, m:] = cg[..., d:]
        slots_kv[:, 1:, :m] = ck[:, :-1, :, :d]
        slots_g[:, 1:, :m] = cg[:, :-1, :, :d]
        ck, cg = slots_kv, slots_g
    pooled = (ck * cg.softmax(dim=2, dtype=torch.float32).to(ck.dtype)).sum(dim=2)
    normed = pooled.float() * torch.rsqrt(pooled.float().pow(2).mean(-1, keepdim=True) + eps)
    entries = (norm_weight * normed).to(pooled.dtype)
    positions = torch.arange(windows, device=kv.device).float() * m
    freqs = positions[:, None] * inv_freq.float()[None, :]
    cos = (freqs.cos() * rope_scaling).to(entries.dtype)
    sin = (freqs.sin() * rope_scaling).to(entries.dtype)
    entries = _interleaved_rope(entries, cos, sin)
    out[:, m - 1 : windows * m : m] = entries
    return out


@kv_compress_op.register_fake
def _kv_compress_fake(kv, gate, position_bias, norm_weight, inv_freq, ratio, head_dim, eps, rope_scaling):
    return kv.new_empty((kv.shape[0], kv.shape[1], head_dim))


def _entries(laid_out: torch.Tensor, ratio: int) -> torch.Tensor:
    """[B, T, d] per-token layout → the [B, T // m, d] entries."""
    windows = laid_out.shape[1] // ratio
    return laid_out[:, ratio - 1 : windows * ratio : ratio]


# --- lightning indexer over compressed keys -----------------------------------------------------------
@torch.library.custom_op("graphsim::compressed_indexer", mutates_args=())
def compressed_indexer_op(
    q: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor, topk: int, ratio: int, scale: float,
) -> torch.Tensor:
    """q [B,T,H,D] (RoPE applied), keys [B,T,D] (kv_compress layout), weights [B,T,H] → int32 [B,T,topk]: the
    entries with the highest Σ_h H^-½·weights_h·relu(q_h·k)·scale among those query t may see (w < (t+1)//m),
    -1 where it sees fewer (transformers DeepseekV4Indexer / DeepseekV4IndexerScorer)."""
    b, t, h, _ = q.shape
    k = _entries(keys, ratio)
    out = torch.full((b, t, topk), -1, dtype=torch.int32, device=q.device)
    n = k.shape[1]
    if n == 0:
        return out
    scores = torch.relu(torch.einsum("bshd,bwd->bshw", q.float(), k.float())) * scale
    index = (scores * (weights.float() * h ** -0.5).unsqueeze(-1)).sum(dim=2)
    visible = (torch.arange(t, device=q.device) + 1) // ratio
    future = torch.arange(n, device=q.device)[None, :] >= visible[:, None]
    index = index.masked_fill(future, float("-inf"))
    kept = min(topk, n)
    picked = index.topk(kept, dim=-1).indices
    picked = torch.where(picked >= visible[None, :, None], torch.full_like(picked, -1), picked)
    out[..., :kept] = picked.to(torch.int32)
    return out


@compressed_indexer_op.register_fake
def _compressed_indexer_fake(q, keys, weights, topk, ratio, scale):
    return q.new_empty((q.shape[0], q.shape[1], topk), dtype=torch.int32)


# --- attention over a sliding window plus compressed entries -----------------------------------------
@torch.library.custom_op("graphsim::compressed_attention", mutates_args=())
def compressed_attention_op(
    q: torch.Tensor, kv: torch.Tensor, compressed: torch.Tensor | None, indices: torch.Tensor | None,
    sinks: torch.Tensor, scale: float, window: int, ratio: int, rope_dim: int,
) -> torch.Tensor:
    """q [B,H,T,D], kv [B,1,T,D] (one head read as key and value), compressed [B,T,D] (kv_compress layout) or
    None, indices [B,T,k] or None → [B,T,H,D]. Query t attends to keys j with t − W < j ≤ t and to the compressed
    entries w < (t+1)//m (only the indexer's picks when `indices` is given), with one sink logit per head.
    `rope_dim` (the trailing rotary channels of each head) says how an engine stores the entry; unused here."""
    b, h, t, _ = q.shape
    keys = kv[:, 0].float()  # [B,T,D]
    i = torch.arange(t, device=q.device)[:, None]
    j = torch.arange(t, device=q.device)[None, :]
    allowed = (j <= i) & ((i - j) < window)
    mask = (~allowed).expand(b, t, t)
    if compressed is not None:
        entries = _entries(compressed, ratio).float()
        n = entries.shape[1]
        visible = torch.arange(n, device=q.device)[None, :] < ((torch.arange(t, device=q.device) + 1) // ratio)[:, None]
        ok = visible.expand(b, t, n)
        if indices is not None:
            picked = torch.zeros(b, t, n + 1, dtype=torch.bool, device=q.device)
            picked.scatter_(-1, torch.where(indices < 0, n, indices).long(), True)
            ok = ok & picked[..., :n]
        keys = torch.cat([keys, entries], dim=1)
        mask = torch.cat([mask, ~ok], dim=-1)
    logits = torch.einsum("bhtd,bkd->bhtk", q.float(), keys) * scale
    logits = logits.masked_fill(mask[:, None], float("-inf"))
    sink = sinks.float().reshape(1, h, 1, 1).expand(b, h, t, 1)
    combined = torch.cat([logits, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)[..., :-1].to(q.dtype)
    out = torch.einsum("bhtk,bkd->bhtd", probs.float(), keys).to(q.dtype)
    return out.transpose(1, 2).contiguous()


@compressed_attention_op.register_fake
def _compressed_attention_fake(q, kv, compressed, indices, sinks, scale, window, ratio, rope_dim):
    b, h, t, d = q.shape
    return q.new_empty((b, t, h, d))


# --- hyper-connections ------------------------------------------------------------------------------
def _unweighted_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)


@torch.library.custom_op("graphsim::hc_pre", mutates_args=())
def hc_pre_op(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, iters: int, eps: float,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [B,T,n,D], fn [(2+n)·n, n·D] → post [B,T,n], comb [B,T,n,n] (fp32) and the block input [B,T,D]:
    mixes = fn · RMS(flatten(streams)); pre = σ(mix·s₀ + b) + ε, post = 2σ(mix·s₁ + b), comb = softmax(mix·s₂ + b)
    + ε made doubly stochastic by `iters` Sinkhorn-Knopp normalisations; block input Σ_i pre_i·stream_i
    (transformers DeepseekV4HyperConnection.forward; vLLM's MHCPreOp)."""
    b, t, n, _ = streams.shape
    mixes = F.linear(_unweighted_rms(streams.reshape(b, t, -1).float(), norm_eps), fn.float())
    pre_w, post_w, comb_w = mixes.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.float().split([n, n, n * n])
    s_pre, s_post, s_comb = scale.float().unbind(0)
    comb_w = comb_w.reshape(b, t, n, n)
    pre = torch.sigmoid(pre_w * s_pre + pre_b) + eps
    post = 2 * torch.sigmoid(post_w * s_post + post_b)
    comb = torch.softmax(comb_w * s_comb + comb_b.reshape(n, n), dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    collapsed = (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)
    return post, comb, collapsed


@hc_pre_op.register_fake
def _hc_pre_fake(streams, fn, base, scale, iters, eps, norm_eps):
    b, t, n, d = streams.shape
    f32 = torch.float32
    return (streams.new_empty((b, t, n), dtype=f32), streams.new_empty((b, t, n, n), dtype=f32),
            streams.new_empty((b, t, d)))


@torch.library.custom_op("graphsim::hc_post", mutates_args=())
def hc_post_op(out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """out [B,T,D] (the block's output), streams [B,T,n,D] → [B,T,n,D]: stream_j = post_j·out + Σ_i comb_ij·stream_i
    (transformers DeepseekV4DecoderLayer.forward; vLLM's MHCPostOp)."""
    dtype = streams.dtype
    return post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), streams)


@hc_post_op.register_fake
def _hc_post_fake(out, streams, post, comb):
    return torch.empty_like(streams)


@torch.library.custom_op("graphsim::hc_head", mutates_args=())
def hc_head_op(streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, eps: float,
               norm_eps: float) -> torch.Tensor:
    """streams [B,T,n,D] → [B,T,D]: Σ_i (σ(fn·RMS(flatten(streams))·s + b) + ε)_i·stream_i (transformers
    DeepseekV4HyperHead.forward; vLLM's HCHeadOp)."""
    flat = _unweighted_rms(streams.flatten(2).float(), norm_eps)
    pre = torch.sigmoid(F.linear(flat, fn.float()) * scale.float() + base.float()) + eps
    return (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)


@hc_head_op.register_fake
def _hc_head_fake(streams, fn, base, scale, eps, norm_eps):
    b, t, _, d = streams.shape
    return streams.new_empty((b, t, d))


@torch.library.custom_op("graphsim::ihc_pre", mutates_args=())
def ihc_pre_op(
    streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, magnitude: float, eps: float,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent hyper-connection (no comb): streams [B,T,n,D], fn [2n, n·D] → post [B,T,n] (fp32) and the block
    input [B,T,D]: mixes = fn · RMS(flatten(streams)); pre = σ(mix·s₀ + b) + ε, post = magnitude·σ(mix·s₁ + b) + ε;
    block input Σ_i pre_i·stream_i (transformers HYV4HyperConnection.forward; vLLM's triton_ihc_pre)."""
    n = streams.shape[-2]
    flat = streams.flatten(2).float()
    mixes = F.linear(_unweighted_rms(flat, norm_eps), fn.float())
    pre_w, post_w = mixes.split([n, n], dim=-1)
    pre_b, post_b = base.float().split([n, n])
    s_pre, s_post = scale.float().unbind(0)
    pre = torch.sigmoid(pre_w * s_pre + pre_b) + eps
    post = magnitude * torch.sigmoid(post_w * s_post + post_b) + eps
    return post, (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)


@ihc_pre_op.register_fake
def _ihc_pre_fake(streams, fn, base, scale, magnitude, eps, norm_eps):
    b, t, n, d = streams.shape
    return streams.new_empty((b, t, n), dtype=torch.float32), streams.new_empty((b, t, d))


@torch.library.custom_op("graphsim::ihc_post", mutates_args=())
def ihc_post_op(out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """out [B,T,D], streams [B,T,n,D], post [B,T,n] → [B,T,n,D]: stream_i = post_i·out + stream_i, in fp32
    (transformers HYV4DecoderLayer.forward; vLLM's triton_ihc_post)."""
    return (post.float().unsqueeze(-1) * out.float().unsqueeze(-2) + streams.float()).to(streams.dtype)


@ihc_post_op.register_fake
def _ihc_post_fake(out, streams, post):
    return torch.empty_like(streams)


# --- recognising the modules -------------------------------------------------------------------------
def _has(m: torch.nn.Module, *names: str) -> bool:
    return all(hasattr(m, a) for a in names)


def is_kv_compressor(m: torch.nn.Module) -> bool:
    return _has(m, "kv_proj", "gate_proj", "position_bias", "kv_norm", "compress_rate", "rotary_emb", "head_dim")


def is_compressed_indexer(m: torch.nn.Module) -> bool:
    return is_kv_compressor(m) and _has(m, "q_b_proj", "scorer", "index_topk", "num_heads")


def is_compressed_attention(m: torch.nn.Module) -> bool:
    return _has(m, "q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj", "sinks", "sliding_window", "compressor")


def is_hyper_connection(m: torch.nn.Module) -> bool:
    return _has(m, "fn", "base", "scale", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "input_norm")


def is_independent_hyper_connection(m: torch.nn.Module) -> bool:
    """A hyper-connection without the comb mixing: its fn projects to pre and post gates only (2n rows)."""
    if not _has(m, "fn", "base", "scale", "hc_mult", "hc_eps", "input_norm", "hc_post_magnitude") or _has(
            m, "hc_sinkhorn_iters"):
        return False
    fn, streams = m.fn, m.hc_mult
    return isinstance(fn, torch.Tensor) and fn.dim() == 2 and isinstance(streams, int) and fn.shape[0] == 2 * streams


def is_hyper_head(m: torch.nn.Module) -> bool:
    return _has(m, "hc_fn", "hc_base", "hc_scale", "hc_mult", "input_norm", "eps")


def is_hyper_layer(m: torch.nn.Module) -> bool:
    """A decoder layer whose residual is hyper-connection streams around its attention and MLP blocks."""
    return _has(m, "attn_hc", "ffn_hc", "self_attn", "mlp", "input_layernorm", "post_attention_layernorm") and all(
        is_hyper_connection(getattr(m, a)) for a in ("attn_hc", "ffn_hc"))


def is_independent_hyper_layer(m: torch.nn.Module) -> bool:
    """A decoder layer whose residual is independent hyper-connection streams around its attention and MLP."""
    return _has(m, "attn_hc", "ffn_hc", "self_attn", "mlp", "input_layernorm", "post_attention_layernorm") and all(
        is_independent_hyper_connection(getattr(m, a)) for a in ("attn_hc", "ffn_hc"))


def _rope_scaling(rotary: Any, kind: str) -> float:
    return float(getattr(rotary, f"{kind}_attention_scaling", 1.0))


def _compress(c: Any, hidden: torch.Tensor) -> torch.Tensor:
    """A KV compressor's projections (aten linears) and its pooling as one op (`c`: the compressor module)."""
    kind = getattr(c, "rope_layer_type", "compress")
    return torch.ops.graphsim.kv_compress(
        c.kv_proj(hidden), c.gate_proj(hidden), c.position_bias, c.kv_norm.weight,
        getattr(c.rotary_emb, f"{kind}_inv_freq"), int(c.compress_rate), int(c.head_dim),
        float(c.kv_norm.variance_epsilon), _rope_scaling(c.rotary_emb, kind),
    )


def _indices(ix: Any, hidden: torch.Tensor, q_residual: torch.Tensor, position_ids: torch.Tensor,
             rope) -> torch.Tensor:
    b, s, _ = hidden.shape
    keys = _compress(ix, hidden)
    kind = getattr(ix, "rope_layer_type", "compress")
    cos, sin = ix.rotary_emb(hidden, position_ids=position_ids, layer_type=kind)
    q = ix.q_b_proj(q_residual).view(b, s, -1, ix.head_dim).transpose(1, 2)
    q = rope(q, cos, sin).transpose(1, 2)
    weights = ix.scorer.weights_proj(hidden)
    return torch.ops.graphsim.compressed_indexer(q, keys, weights, int(ix.index_topk), int(ix.compress_rate),
                                                 float(ix.scorer.softmax_scale))


def _compressed_attention_forward(self, hidden_states, position_embeddings, position_ids, attention_mask=None,
                                  cache=None, **kwargs):
    """transformers' DeepseekV4Attention.forward with the compressor, indexer and attention as semantic ops."""
    if cache is not None:
        return type(self).forward(self, hidden_states, position_embeddings, position_ids, attention_mask,
                                  cache=cache, **kwargs)
    rope = sys.modules[type(self).__module__].apply_rotary_pos_emb
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    pe = position_embeddings
    cos, sin = pe[self.rope_layer_type] if isinstance(pe, dict) else pe
    q_residual = self.q_a_norm(self.q_a_proj(hidden_states))
    q = self.q_b_norm(self.q_b_proj(q_residual).view(*hidden_shape).transpose(1, 2))
    q = rope(q, cos, sin)
    kv = rope(self.kv_norm(self.kv_proj(hidden_states)).view(*hidden_shape).transpose(1, 2), cos, sin)
    compressed = indices = None
    ratio = 0
    c = self.compressor
    if c is not None:
        compressed, ratio = _compress(c, hidden_states), int(c.compress_rate)
        ix = getattr(c, "indexer", None)
        if ix is not None and is_compressed_indexer(ix):
            indices = _indices(ix, hidden_states, q_residual, position_ids, rope)
    out = torch.ops.graphsim.compressed_attention(q, kv, compressed, indices, self.sinks, float(self.scaling),
                                                  int(self.sliding_window), ratio, 2 * int(cos.shape[-1]))
    out = rope(out.transpose(1, 2), cos, -sin).transpose(1, 2)
    grouped = self.o_a_proj(out.reshape(*input_shape, self.config.o_groups, -1)).flatten(2)
    return self.o_b_proj(grouped), None


def _hyper_connection_forward(self, hidden_streams):
    """transformers' DeepseekV4HyperConnection.forward as one op."""
    return torch.ops.graphsim.hc_pre(hidden_streams, self.fn, self.base, self.scale, int(self.hc_sinkhorn_iters),
                                     float(self.hc_eps), float(self.input_norm.eps))


def _hyper_head_forward(self, x):
    """transformers' DeepseekV4HyperHead.forward as one op."""
    return torch.ops.graphsim.hc_head(x, self.hc_fn, self.hc_base, self.hc_scale, float(self.eps),
                                      float(self.input_norm.eps))


def _hyper_layer_forward(self, hidden_states, input_ids=None, **kwargs):
    """transformers' DeepseekV4DecoderLayer.forward with each stream update (post·out + combᵀ·streams) one op."""
    post, comb, collapsed = self.attn_hc(hidden_states)
    attn_output, _ = self.self_attn(self.input_layernorm(collapsed), **kwargs)
    hidden_states = torch.ops.graphsim.hc_post(attn_output, hidden_states, post, comb)
    post, comb, collapsed = self.ffn_hc(hidden_states)
    mlp_output = self.mlp(self.post_attention_layernorm(collapsed), input_ids=input_ids)
    return torch.ops.graphsim.hc_post(mlp_output, hidden_states, post, comb)


def _independent_hyper_connection_forward(self, hidden_streams):
    """transformers' HYV4HyperConnection.forward as one op: (post, block input)."""
    return torch.ops.graphsim.ihc_pre(hidden_streams, self.fn, self.base, self.scale, float(self.hc_post_magnitude),
                                      float(self.hc_eps), float(self.input_norm.eps))


def _independent_hyper_layer_forward(self, hidden_states, cache=None, **kwargs):
    """transformers' HYV4DecoderLayer.forward with each stream update (post·out + streams) one op; the attention's
    last output (the indexer's top-k, handed to the next layer) is returned beside the streams as there."""
    if cache is not None:
        return type(self).forward(self, hidden_states, cache=cache, **kwargs)
    post, collapsed = self.attn_hc(hidden_states)
    attn = self.self_attn(hidden_states=self.input_layernorm(collapsed), cache=cache, **kwargs)
    hidden_states = torch.ops.graphsim.ihc_post(attn[0], hidden_states, post)
    post, collapsed = self.ffn_hc(hidden_states)
    mlp_output = self.mlp(self.post_attention_layernorm(collapsed))
    return torch.ops.graphsim.ihc_post(mlp_output, hidden_states, post), attn[-1]


@contextlib.contextmanager
def compressed_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each compressed-KV attention's and hyper-connection's forward for the semantic one; restore after."""
    def choose(m: torch.nn.Module):
        for test, forward in ((is_compressed_attention, _compressed_attention_forward),
                              (is_hyper_connection, _hyper_connection_forward), (is_hyper_head, _hyper_head_forward),
                              (is_hyper_layer, _hyper_layer_forward),
                              (is_independent_hyper_connection, _independent_hyper_connection_forward),
                              (is_independent_hyper_layer, _independent_hyper_layer_forward)):
            if test(m):
                return forward
        return None

    with swapped_forwards(model, choose) as names:
        yield names

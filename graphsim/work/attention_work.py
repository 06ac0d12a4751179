"""Per-layer work of an attention core (the part without weights) for one group of sequences.

Conventions (per layer, per sequence of n new tokens after p cached; H query heads):

- Softmax attention: S = Σ_{i=1..n} min(p + i, W) scored (query, key) pairs per head
  (`attention_math.causal_pairs`). Score FLOPs 2·S·H·d_qk, value FLOPs 2·S·H·d_v. Softmax,
  scaling, masking, soft-capping and sinks are elementwise and not counted.
- KV cache: the cached positions some new token attends to are read once (not once per head or
  per query); the new positions later steps can attend to are written once.
- Chunked local attention (chunk C): position q attends to [C·⌊q/C⌋, q]; pairs Σ (q mod C + 1);
  the cached positions read are those in the first new token's chunk (p mod C); the new positions
  kept are those in the chunk of the next position (`attention_math.chunked_*`).
- MLA (latent cache of r = kv_lora_rank plus d_r = qk_rope_head_dim per token): two exact forms,
  and the cheaper one per sequence group is counted.
  *decompressed*: kv_b_proj re-expands the p cached latents, 2·p·r·H·(d_nope + d_v), then
  2·S·H·(d_nope + d_r + d_v);  *absorbed*: attention runs in latent space, 2·S·H·(2r + d_r).
  kv_b_proj on the n new tokens (or, absorbed, W_UK on queries and W_UV on outputs, the same
  2·n·r·H·(d_nope + d_v)) is counted in the `attn.kv` segment in both forms.
- DeepSeek sparse attention (MLA with a lightning indexer, `DsaIndexer`): the core above counts
  S = Σ min(p + i, k) pairs for top-k = k and reads at most min(p, n·k) cached latents; the indexer
  adds 2·(d_I + 1)·H_I FLOPs per causal (query, key) pair over the whole context and reads/writes
  its per-token key cache (vLLM's fp8 layout, `DsaIndexer.cache_bytes_per_token`).
- Gated delta net: per token and value head, 2·d_k·d_v each for reading the state with the key,
  the rank-1 state update and reading the output with the query: 6·H_v·d_k·d_v (decay and gates
  are elementwise). The recurrent state (H_v·d_k·d_v, in the spec's `ssm_dtype` when set) and the conv
  state (conv_dim·(kernel − 1)) are read once when p > 0 and written once per sequence.
- Mamba2 (SSD, recurrent form; Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060 §3-4): per
  token and head the state h (d_head × d_state) takes the rank-1 update dt·x ⊗ B (2·d_head·d_state)
  and the output reads it with C (2·d_head·d_state): 4·H·d_head·d_state (the decay exp(dt·A)·h, the D
  skip and the gate are elementwise). The depthwise conv is a weight (`WeightKind.CONV`). The
  temporal state (H·d_head·d_state, in the spec's `ssm_dtype`) and the conv state
  (conv_dim·(kernel − 1), in the state dtype) are read once when p > 0 and written once per sequence.
- DeepSeek-V4 compressed attention (`CompressedAttention`, shared K = V of d = head_dim, H heads):
  sliding pairs S_w = Σ min(p + i, W) plus compressed pairs S_c = Σ_t min(⌊(t + 1)/m⌋, k) (HCA: no
  cap; `attention_math.compressed_pairs`), 2·(S_w + S_c)·H·2d FLOPs (scores and values, both of
  width d). Each compressed entry emitted costs its softmax-gated pooling, 2·slots·d with slots =
  2m (CSA's overlapping windows) or m; the indexer (CSA) pools its own entries at d_I and scores every
  (query, visible entry) pair with H_I heads, H_I·(2·d_I + 2) each (as DSA's). Bytes as vLLM stores
  them (`deepseek_v4.py` in graphsim/work/builders cites each): the sliding-window cache (584 B a
  token at d = 512: fp8 nope, bf16 rope, scales) read for min(p, W − 1) positions and written for
  min(n, W − 1); the compressed cache (the same 584 B an entry) read for the visible cached entries
  (CSA: at most n·k) and written for the entries emitted; the indexer's key cache (fp8 + fp32 scale
  per 128) likewise over all cached entries; the compressors' fp32 state (`KvCompressor.state_written`
  / `state_read`: a token's kv and score are stored once if a later step needs them, and read back once,
  by the step whose window closes). The
  hyper-connection mixing around each block (4 × 4 stream mixes, the Sinkhorn projection) is
  elementwise and not counted; their weight matmuls are (`layers.attn.hc`, `layers.ffn.hc`).
- Mamba-1 (selective scan; Gu & Dao 2023, arXiv:2312.00752 §3, Algorithm 2): per token the state h
  (d_inner × d_state) takes the update dt·x ⊗ B (2·d_inner·d_state) and the output reads it with C
  (2·d_inner·d_state): 4·d_inner·d_state, Mamba2's count with d_inner = H·d_head (the decay
  exp(dt·A) and the D skip are elementwise; x_proj and dt_proj are weights). Temporal state
  d_inner·d_state and conv state d_inner·(kernel − 1), read once when p > 0 and written once.
- Short conv (LFM2 `ShortConv`): the depthwise conv is a weight (`WeightKind.CONV`) and the two gates
  are elementwise, so the core has no FLOPs; its conv state, hidden·(kernel − 1) elements in the
  state dtype, is read once when p > 0 and written once per sequence.
- A Mamba temporal state whose `ssm_dtype` is None is held in the state dtype (vLLM's
  mamba_ssm_cache_dtype "auto"); Nemotron-H's is float32 unless its config says otherwise.
- A layer without a mixer (`NoAttention`) has no core work. A layer reusing an earlier layer's K/V
  (Gemma-4 `kv_shared`) reads them like its own and writes none.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.work.attention_math import (
    cached_tokens_read, causal_pairs, chunked_cached_read, chunked_new_kept, chunked_pairs, closed_entries,
    compressed_pairs, new_tokens_kept,
)
from graphsim.work.dtypes import Precision
from graphsim.work.linear_work import block_sparse_core, recurrent_core
from graphsim.work.specs import (
    AttentionSpec, CompressedAttention, GatedDeltaNet, GqaAttention, KvCompressor, Mamba1Mixer, Mamba2Mixer,
    MlaAttention, NoAttention, ParallelMixers, RecurrentMixer, ShortConv,
)
from graphsim.workload import SeqGroup


@dataclass(frozen=True)
class CoreWork:
    flops: int
    state_read_bytes: float
    state_write_bytes: float
    form: str = ""  # MLA: "absorbed" or "decompressed"


def attention_core(attn: AttentionSpec, group: SeqGroup, precision: Precision) -> CoreWork:
    """Work of one layer's attention core for all `group.count` sequences of the group."""
    n, p, c = group.new_tokens, group.cached_tokens, group.count
    if isinstance(attn, GqaAttention):
        per_token = attn.kv_elements_per_token * precision.kv.bytes_per_element
        if attn.chunk is not None:
            pairs = chunked_pairs(n, p, attn.chunk)
            read, kept = chunked_cached_read(p, attn.chunk), chunked_new_kept(n, p, attn.chunk)
        else:
            pairs = causal_pairs(n, p, attn.window)
            read, kept = cached_tokens_read(n, p, attn.window), new_tokens_kept(n, p, attn.window)
        flops = 2 * pairs * attn.heads * (attn.head_dim + attn.v_head_dim)  # scores (d_qk) + values (d_v)
        if attn.block_indexer is not None:  # MiniMax-M3: block top-k keys and the indexer (linear_work.py)
            return CoreWork(*block_sparse_core(attn, attn.block_indexer, n, p, c, precision))
        if attn.kv_shared:
            kept = 0  # the producer layer wrote these positions' K/V; this layer only reads them
        return CoreWork(flops * c, read * per_token * c, kept * per_token * c)
    if isinstance(attn, MlaAttention):
        ix = attn.indexer
        # DSA: each new token attends to its top-k positions, min(p + i, k) of them — the same count
        # as a window of k; the cached latents some new token reads are at most min(p, n·k).
        pairs = causal_pairs(n, p, ix.topk if ix else None)
        latents = min(p, n * ix.topk) if ix else p
        h, r, dr = attn.heads, attn.kv_lora_rank, attn.qk_rope_head_dim
        decompressed = 2 * latents * r * h * (attn.qk_nope_head_dim + attn.v_head_dim) + 2 * pairs * h * (
            attn.qk_head_dim + attn.v_head_dim
        )
        absorbed = 2 * pairs * h * (2 * r + dr)
        form = "absorbed" if absorbed < decompressed else "decompressed"
        per_token = attn.kv_elements_per_token * precision.kv.bytes_per_element
        flops, read, written = min(absorbed, decompressed), latents * per_token, n * per_token
        if ix is not None and not ix.shared:
            # The indexer scores every (query, earlier position) pair: q·k per index head (2·d) and
            # the head-weighted sum (2 per head); it reads every cached index key once and writes the new ones.
            flops += causal_pairs(n, p) * ix.heads * (2 * ix.head_dim + 2)
            read += p * ix.cache_bytes_per_token
            written += n * ix.cache_bytes_per_token
        return CoreWork(flops * c, read * c, written * c, form)
    if isinstance(attn, GatedDeltaNet):
        flops = 6 * attn.v_heads * attn.k_head_dim * attn.v_head_dim * n
        ssm = attn.ssm_dtype or precision.state  # Qwen3.5: the config's mamba_ssm_dtype (builders/hybrid.py)
        state = (attn.recurrent_state_elements * ssm.bytes_per_element
                 + attn.conv_state_elements * precision.state.bytes_per_element)
        return CoreWork(flops * c, (state if p > 0 else 0.0) * c, state * c)
    if isinstance(attn, (Mamba2Mixer, Mamba1Mixer)):
        inner = attn.heads * attn.head_dim if isinstance(attn, Mamba2Mixer) else attn.intermediate
        flops = 4 * inner * attn.state_size * n
        ssm = attn.ssm_dtype or precision.state
        state = (attn.recurrent_state_elements * ssm.bytes_per_element
                 + attn.conv_state_elements * precision.state.bytes_per_element)
        return CoreWork(flops * c, (state if p > 0 else 0.0) * c, state * c)
    if isinstance(attn, ShortConv):
        state = attn.conv_state_elements * precision.state.bytes_per_element
        return CoreWork(0, (state if p > 0 else 0.0) * c, state * c)
    if isinstance(attn, ParallelMixers):  # both mixers' work and caches, side by side
        a, m = attention_core(attn.attn, group, precision), attention_core(attn.mamba, group, precision)
        return CoreWork(a.flops + m.flops, a.state_read_bytes + m.state_read_bytes,
                        a.state_write_bytes + m.state_write_bytes)
    if isinstance(attn, RecurrentMixer):
        return CoreWork(*recurrent_core(attn, n, p, c, precision))
    if isinstance(attn, NoAttention):
        return CoreWork(0, 0.0, 0.0)
    if isinstance(attn, CompressedAttention):
        return _compressed_core(attn, n, p, c)
    raise TypeError(f"unknown attention spec {type(attn).__name__}")  # pragma: no cover


# vLLM's fp8_ds_mla entry for DeepSeek-V4 (vllm/model_executor/layers/deepseek_v4_attention.py
# DeepseekV4MultiHeadLatentAttentionWrapper.__init__ head_bytes; sparse_swa.py get_kv_cache_shape "584B per
# token"): the nope part in fp8, the rope part in bf16, one scale byte per 64 nope values, one pad byte.
def v4_entry_bytes(head_dim: int, rope_dim: int) -> int:
    nope = head_dim - rope_dim
    return nope + 2 * rope_dim + nope // 64 + 1


# vLLM's indexer key cache (deepseek_v4_attention.py DeepseekV4Indexer.__init__ k_cache_head_dim): fp8 keys
# plus one fp32 scale per 128 values (quant_block_size 128), the same layout as DeepSeek-V3.2's.
def v4_index_entry_bytes(index_head_dim: int) -> int:
    return index_head_dim + index_head_dim // 128 * 4


def _pooling_flops(c: KvCompressor, new: int, cached: int) -> int:
    """Softmax-gated sum of the entries emitted by this step: 2·slots·d each (slots = coff·m)."""
    emitted = closed_entries(cached + new, c.ratio) - closed_entries(cached, c.ratio)
    return 2 * c.coff * c.ratio * c.head_dim * emitted


def compressed_core_parts(attn: CompressedAttention, n: int, p: int, c: int) -> dict[str, CoreWork]:
    """The compressed-attention core in the parts vLLM runs as separate kernels (their sum is the core):

    - `compute`: the attention over the window and the visible (CSA: top-k) compressed entries, the
      sliding-window cache read and written, the compressed entries read (FlashMLA sparse, sparse_swa.py);
    - `compressor`: the pooling of the entries this step closes, their cache write and the compressor's fp32
      state (deepseek_compressor.py DeepseekCompressor: _save_partial_states_kernel, the fused
      compress-norm-rope-insert kernel);
    - `index_compressor` (CSA): the same for the indexer's own compressor and key cache;
    - `indexer` (CSA): scoring every (query, visible entry) pair and reading the cached index keys
      (DeepseekV4Indexer → SparseAttnIndexer).
    A part the layer lacks is absent (sliding: compute only; HCA: compute and compressor)."""
    d, h = attn.head_dim, attn.heads
    entry = v4_entry_bytes(d, attn.rope_dim)
    pairs = causal_pairs(n, p, attn.window)
    read = cached_tokens_read(n, p, attn.window) * entry
    written = new_tokens_kept(n, p, attn.window) * entry
    parts: dict[str, CoreWork] = {}
    comp = attn.compressor
    if comp is not None:
        topk = attn.index_topk if attn.index_compressor is not None else None
        pairs += compressed_pairs(n, p, comp.ratio, topk)
        cached_entries = closed_entries(p, comp.ratio)
        read += (min(cached_entries, n * topk) if topk is not None else cached_entries) * entry
        # the compressors' fp32 state: written once for later steps, read back when a window closes
        parts["compressor"] = CoreWork(
            _pooling_flops(comp, n, p), comp.state_read(p, n) * 4,
            (closed_entries(p + n, comp.ratio) - cached_entries) * entry + comp.state_written(p, n) * 4)
        ix = attn.index_compressor
        if ix is not None:
            index_entry = v4_index_entry_bytes(ix.head_dim)
            parts["index_compressor"] = CoreWork(
                _pooling_flops(ix, n, p), ix.state_read(p, n) * 4,
                (closed_entries(p + n, ix.ratio) - closed_entries(p, ix.ratio)) * index_entry
                + ix.state_written(p, n) * 4)
            parts["indexer"] = CoreWork(compressed_pairs(n, p, ix.ratio) * attn.index_heads * (2 * ix.head_dim + 2),
                                        closed_entries(p, ix.ratio) * index_entry, 0)
    # scores and values, both over the shared K = V of width d
    parts = {"compute": CoreWork(2 * pairs * h * 2 * d, read, written), **parts}
    return {k: CoreWork(w.flops * c, w.state_read_bytes * c, w.state_write_bytes * c) for k, w in parts.items()}


def _compressed_core(attn: CompressedAttention, n: int, p: int, c: int) -> CoreWork:
    parts = compressed_core_parts(attn, n, p, c).values()
    return CoreWork(sum(w.flops for w in parts), sum(w.state_read_bytes for w in parts),
                    sum(w.state_write_bytes for w in parts))

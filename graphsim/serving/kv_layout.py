"""The KV cache of one deployment, per rank: what each layer stores, and how vLLM pages it.

Everything comes from the work accountant's config-derived `ModelSpec` (`graphsim.work`), never
from model names:

- softmax attention (GQA/MHA/MQA): K and V, `2 · kv_heads_per_rank · head_dim` elements per token
  and layer. vLLM keeps `max(1, kv_heads // tp)` KV heads per rank (`ModelConfig.get_num_kv_heads`),
  so beyond tp = kv_heads the heads are replicated, not split.
- sliding-window layers store the same per token but hold only the window (plus the in-flight
  chunk) per request.
- MLA stores the compressed latent and the rope key, `kv_lora_rank + qk_rope_head_dim` elements per
  token and layer, whole on every rank (vLLM `MLAAttentionSpec`: one "head", no V).
- linear attention (gated delta net) keeps a recurrent state and a conv state per request and
  layer, split over TP ranks (vLLM `MambaStateShapeCalculator.gated_delta_net_state_shape`); a
  Mamba2 mixer likewise (`mamba2_state_shape`, its temporal state in mamba_ssm_cache_dtype).
  A Mamba-1 mixer keeps a conv state and a temporal state of intermediate × state_size
  (`mamba1_state_shape`); LFM2's short conv keeps only its conv state, (L_cache − 1) × hidden
  (`short_conv_state_shape`). A temporal state in mamba_ssm_cache_dtype "auto" takes the state dtype.
  A layer without a mixer (Nemotron-H's MLP/MoE-only layers) keeps nothing.
- attention sinks (gpt-oss) are one learned logit per head: weights, not KV.

Paging follows vLLM 0.33.0 (`vllm/v1/core/kv_cache_planning.py`): layers with equal specs form
buckets; buckets are cut into KV-cache groups of equal layer count (the smallest bucket, or the
largest when it is < 1.5× the smallest, `_get_kv_cache_groups_uniform_page_size`); all groups share
one pool of blocks, a block holding `block_size` tokens of every layer of a group. Page sizes are
unified (`unify_kv_cache_spec_page_size`): with linear-attention state, the attention block size
is raised until an attention page holds at least one state page
(`Platform._align_hybrid_block_size`) and the state page is padded to it. With prefix caching (vLLM >= 0.24)
a request holds two pages of each state group (mamba_cache_mode "align": `with_mamba_cache_mode`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

import numpy as np

from graphsim.errors import GraphsimError
from graphsim.vllm_checks import attention_heads_refusal
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import (
    CompressedAttention, GatedDeltaNet, GqaAttention, Mamba1Mixer, Mamba2Mixer, MlaAttention, ModelSpec, NoAttention,
    ParallelMixers, RecurrentMixer, ShortConv,
)


class KvLayoutError(GraphsimError):
    """The KV cache cannot be laid out for this deployment (e.g. heads not divisible by TP)."""


class KvKind(str, Enum):
    FULL = "full"  # full causal attention: every token stays
    SLIDING = "sliding"  # sliding window: the window stays
    CHUNKED = "chunked"  # chunked local attention (Llama-4): the current chunk stays
    MLA = "mla"  # compressed latent, full causal
    STATE = "state"  # linear attention: a fixed state per request


DEFAULT_BLOCK_SIZE = 16  # vLLM CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py)
MLA_BLOCK_SIZE = 64  # FlashMLA's only kernel block size (vllm/v1/attention/backends/mla/flashmla.py)
V4_BLOCK_SIZE = 256  # DeepSeek-V4 (vllm/v1/attention/backends/mla/sparse_swa.py get_preferred_block_size)
V4_SWA_BLOCK = 64  # sparse_swa.py DeepseekV4SWACache.__init__: self.block_size = 64
V4_STATE_BLOCKS = {4: 4, 128: 8}  # model_executor/layers/deepseek_compressor.py CompressorStateCache.__init__
V4_PAGE_ALIGNMENT = 576  # fp8_ds_mla pages (vllm 0.33.0 models/deepseek_v4/compressor.py: alignment=576)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LayerKv:
    """What one layer keeps on one rank."""

    kind: KvKind
    bytes_per_token: int  # per rank; 0 for STATE
    state_bytes: int = 0  # per request per rank (STATE only)
    window: int | None = None
    detail: str = ""  # the arithmetic, e.g. "2 × 8 kv heads × 128 × 2 B"
    # tokens per stored entry: DeepSeek-V4's compressed caches keep one entry (`bytes_per_token` bytes) per
    # `ratio` tokens (vLLM MLAAttentionSpec compress_ratio)
    ratio: int = 1
    # a block size the engine fixes for this cache whatever the scheduler's (vLLM's DeepSeek-V4 caches: 64-token
    # SWA blocks, 4- or 8-token compressor-state blocks); its page is padded, never grown, to the largest page
    block_size: int | None = None
    # bytes a page is rounded up to (vLLM `_apply_alignment_padding`: DeepSeek-V4's fp8_ds_mla pages, 576)
    alignment: int | None = None
    # the backend lays the cache out block-outermost, so layers of several page sizes are packed into groups
    # rather than padded to one page (graphsim/serving/kv_packed.py)
    block_outermost: bool = False

    @property
    def label(self) -> str:
        if self.ratio > 1:
            return f"compressed 1/{self.ratio}"
        if self.kind is KvKind.SLIDING:
            return f"sliding window {self.window}"
        if self.kind is KvKind.CHUNKED:
            return f"chunked local attention {self.window}"
        return {KvKind.FULL: "full attention", KvKind.MLA: "MLA latent", KvKind.STATE: "linear-attention state"}[self.kind]


@dataclass(frozen=True)
class KvPart:
    """Layers with identical per-rank storage (for display)."""

    layer: LayerKv
    layers: int

    @property
    def bytes_per_token(self) -> int:
        return self.layer.bytes_per_token * self.layers

    @property
    def state_bytes(self) -> int:
        return self.layer.state_bytes * self.layers


@dataclass(frozen=True)
class KvGroup:
    """One vLLM KV-cache group: `layers` layers (padding included) sharing one block table."""

    kind: KvKind
    layers: int  # layer slots, padding included
    real_layers: int
    block_size: int  # tokens per block in this group (STATE: irrelevant)
    page_bytes: int  # one layer's page (block) in bytes, padded
    window: int | None = None
    # STATE: pages one request holds (vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes:
    # mamba_cache_mode "none" 1, "align" 2, each + num_speculative_blocks); see `with_mamba_cache_mode`
    state_pages: int = 1
    # a packed group (kv_packed.py): the bytes one block id holds for it, all its layers' pages (which differ;
    # `page_bytes` is then the largest); None: `layers` × `page_bytes`
    block_bytes: int | None = None

    def admission_blocks(self, tokens: int, in_flight_tokens: int) -> int:
        """Blocks one request at `tokens` must be able to hold (vLLM `max_admission_blocks_per_request` /
        `max_memory_usage_bytes` in vllm/v1/kv_cache_interface.py)."""
        if self.kind is KvKind.STATE:
            return self.state_pages
        if self.kind is KvKind.SLIDING:
            assert self.window is not None
            return cdiv(min(self.window - 1 + in_flight_tokens, tokens), self.block_size) + 1
        if self.kind is KvKind.CHUNKED:
            # ChunkedLocalAttentionSpec.max_admission_blocks_per_request: one chunk plus the in-flight tokens
            assert self.window is not None
            return cdiv(min(self.window + in_flight_tokens, tokens), self.block_size)
        return cdiv(tokens, self.block_size)


@dataclass(frozen=True)
class KvLayout:
    """The per-rank KV layout of a model at a tensor-parallel size, KV dtype and block size."""

    architecture: str
    tp: int
    kv_dtype: DType
    state_dtype: DType
    layers: tuple[LayerKv, ...]
    groups: tuple[KvGroup, ...]
    block_size: int  # the scheduler's block size (full-attention groups)
    notes: tuple[str, ...] = field(default=())
    source: str = "config accountant"  # or "traced graph" (graph_kv.py, architectures the accountant lacks)

    # --- sizes ---------------------------------------------------------------------------------
    def parts(self) -> tuple[KvPart, ...]:
        order: dict[LayerKv, int] = {}
        for layer in self.layers:
            order[layer] = order.get(layer, 0) + 1
        return tuple(KvPart(layer, n) for layer, n in order.items())

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token per rank, summed over all attention layers (window not applied; a compressed
        cache's entry counted per `ratio` tokens, the sum rounded up)."""
        return -(-sum(layer.bytes_per_token * self._lcm // layer.ratio for layer in self.layers) // self._lcm)

    @cached_property
    def _lcm(self) -> int:
        return math.lcm(*(layer.ratio for layer in self.layers)) if self.layers else 1

    @property
    def state_bytes_per_request(self) -> int:
        return sum(layer.state_bytes for layer in self.layers)

    @property
    def bytes_per_block(self) -> int:
        """Pool bytes per block id: the largest group's pages (vLLM `_get_kv_cache_bytes_per_block`)."""
        return max(g.block_bytes or g.layers * g.page_bytes for g in self.groups) if self.groups else 0

    @property
    def hybrid(self) -> bool:
        return len(self.groups) > 1 or any(g.kind in (KvKind.SLIDING, KvKind.CHUNKED, KvKind.STATE) for g in self.groups)

    @property
    def attention_and_state(self) -> bool:
        """Attention groups and linear-attention state groups both (a hybrid model's layout; the one kind whose
        mamba_cache_mode graphsim checked against vLLM logs, see `with_mamba_cache_mode`)."""
        kinds = {g.kind for g in self.groups}
        return KvKind.STATE in kinds and len(kinds) > 1

    @cached_property
    def single_block_size(self) -> int:
        """The block size when one full/MLA group holds every layer (blocks = cdiv(tokens, it)), else 0."""
        if len(self.groups) == 1 and self.groups[0].kind in (KvKind.FULL, KvKind.MLA):
            return self.groups[0].block_size
        return 0

    @property
    def prefix_cacheable(self) -> bool:
        """The simulator caches prefixes only where every group keeps every token (one full/MLA group)."""
        return len(self.groups) == 1 and self.groups[0].kind in (KvKind.FULL, KvKind.MLA)

    def bytes_for_request(self, tokens: int) -> int:
        """Per-rank bytes one request of `tokens` tokens needs at most (windows bounded, no in-flight)."""
        total = 0
        for layer in self.layers:
            if layer.kind is KvKind.STATE:
                total += layer.state_bytes
            elif layer.kind in (KvKind.SLIDING, KvKind.CHUNKED):
                assert layer.window is not None
                total += layer.bytes_per_token * min(tokens, layer.window)
            else:
                total += layer.bytes_per_token * cdiv(tokens, layer.ratio)
        return total

    def admission_blocks(self, tokens: int, in_flight_tokens: int) -> int:
        """Pool blocks one request at `tokens` may hold, summed over groups (vLLM
        `get_max_concurrency_for_kv_cache_config`)."""
        return sum(g.admission_blocks(tokens, in_flight_tokens) for g in self.groups)

    # --- blocks held by running requests (vectorised) ------------------------------------------
    def held_blocks(self, computed: np.ndarray, new: np.ndarray | int) -> np.ndarray:
        """Blocks a request holds once slots for `new` tokens after `computed` ones are allocated.

        Full/MLA groups hold every token's block; a sliding-window group frees the blocks wholly
        below `computed − (W − 1)` first (vLLM `SlidingWindowManager.remove_skipped_blocks`);
        a state group holds one page."""
        end = computed + new
        bs = self.single_block_size
        if bs:
            return -(-end // bs)
        total = np.zeros(np.shape(computed), dtype=np.int64)
        for g in self.groups:
            if g.kind is KvKind.STATE:
                total += g.state_pages
                continue
            blocks = -(-end // g.block_size)
            if g.kind is KvKind.SLIDING:
                assert g.window is not None
                skipped = np.maximum(computed - (g.window - 1), 0) // g.block_size
                blocks = blocks - skipped
            elif g.kind is KvKind.CHUNKED:
                # ChunkedLocalAttentionManager.remove_skipped_blocks (vllm/v1/core/single_type_kv_cache_manager.py):
                # blocks wholly before the current chunk's first token are freed.
                assert g.window is not None
                blocks = blocks - (computed // g.window * g.window) // g.block_size
            total += blocks
        return total

    def held_blocks_one(self, computed: int, new: int) -> int:
        return int(self.held_blocks(np.asarray([computed]), np.asarray([new]))[0])


# --- construction --------------------------------------------------------------------------------
def _gqa_layer(attn: GqaAttention, tp: int, kv: DType) -> LayerKv:
    kvh = attn.kv_heads
    # vLLM refuses a tp that does not divide the query heads first, in ModelConfig (Falcon-7B's 71 heads take no
    # tp > 1); the same one line as predict's (graphsim/vllm_checks.py)
    if refusal := attention_heads_refusal(attn.heads, tp):
        raise KvLayoutError(refusal)
    if tp <= kvh and kvh % tp:
        raise KvLayoutError(f"num_key_value_heads = {kvh} is not divisible by tp = {tp}; pick a tp that divides it")
    if tp > kvh and tp % kvh:
        raise KvLayoutError(f"tp = {tp} is not a multiple of num_key_value_heads = {kvh}; pick a tp that divides "
                            "or is a multiple of it")
    per_rank = max(1, kvh // tp)
    nbytes = per_rank * (attn.head_dim + attn.v_head_dim) * kv.bytes_per_element
    rep = f" (replicated: {kvh} kv heads over {tp} ranks)" if tp > kvh else ""
    if attn.v_head_dim == attn.head_dim:
        detail = f"2 (K,V) × {per_rank} kv heads × {attn.head_dim} × {kv.bytes_per_element:g} B{rep}"
    else:
        detail = (f"{per_rank} kv heads × ({attn.head_dim} K + {attn.v_head_dim} V) × "
                  f"{kv.bytes_per_element:g} B{rep}")
    if attn.sinks:
        detail += "; sinks: a learned logit per head (weights, no KV)"
    if attn.block_indexer is not None:
        # MiniMax-M3 sparse layers also cache one index key per position, whole on every rank (the indexer's
        # k_proj has one head; transformers MiniMaxM3VLSparseCacheLayer.idx_keys, in the KV dtype)
        extra = attn.block_indexer.cache_elements_per_token * kv.bytes_per_element
        nbytes += extra
        detail += f" + index key {attn.block_indexer.head_dim} × {kv.bytes_per_element:g} B"
    if attn.chunk is not None:
        return LayerKv(KvKind.CHUNKED, int(nbytes), 0, attn.chunk, detail)
    kind = KvKind.SLIDING if attn.window is not None else KvKind.FULL
    return LayerKv(kind, int(nbytes), 0, attn.window, detail)


def _mla_layer(attn: MlaAttention, kv: DType) -> LayerKv:
    width = attn.kv_elements_per_token
    nbytes = width * kv.bytes_per_element
    detail = (f"({attn.kv_lora_rank} latent + {attn.qk_rope_head_dim} rope) × {kv.bytes_per_element:g} B, "
              "whole on every rank")
    if attn.indexer is not None and not attn.indexer.shared:
        # DeepSeek sparse attention: vLLM adds a DeepseekV32IndexerCache per layer (one fp8 key of
        # index_head_dim plus an fp32 scale per 128 values), in the same block pool.
        nbytes += attn.indexer.cache_bytes_per_token
        detail += f" + indexer key {attn.indexer.head_dim} fp8 + scales = {attn.indexer.cache_bytes_per_token} B"
    return LayerKv(KvKind.MLA, int(nbytes), 0, None, detail)


def _state_layer(attn: GatedDeltaNet, tp: int, state: DType, num_spec: int = 0) -> LayerKv:
    """vLLM `MambaStateShapeCalculator.gated_delta_net_state_shape` and `gated_delta_net_state_dtype`
    (vllm/model_executor/layers/mamba/mamba_utils.py): the conv state, (kernel − 1 + num_spec) columns with
    speculative decoding's num_speculative_tokens, in the state dtype; the recurrent (temporal) state in
    mamba_ssm_cache_dtype — "auto" the conv state's dtype, Qwen3.5's config hook its `mamba_ssm_dtype` (the
    spec's `ssm_dtype`)."""
    if attn.v_heads % tp or attn.conv_dim % tp:
        raise KvLayoutError(f"linear_num_value_heads = {attn.v_heads} (conv channels {attn.conv_dim}) is not divisible "
                            f"by tp = {tp}; pick a tp that divides it")
    recurrent = (attn.v_heads // tp) * attn.k_head_dim * attn.v_head_dim
    conv = (attn.conv_dim // tp) * (attn.conv_kernel - 1 + num_spec)
    ssm, ssm_from = _ssm_dtype(attn.ssm_dtype, state)
    nbytes = recurrent * ssm.bytes_per_element + conv * state.bytes_per_element
    cols = attn.conv_kernel - 1 + num_spec
    if ssm == state:
        detail = (f"recurrent {attn.v_heads // tp} heads × {attn.k_head_dim} × {attn.v_head_dim} + conv "
                  f"{attn.conv_dim // tp} × {cols}, × {state.bytes_per_element:g} B per request")
    else:
        detail = (f"recurrent {attn.v_heads // tp} heads × {attn.k_head_dim} × {attn.v_head_dim} × "
                  f"{ssm.bytes_per_element:g} B ({ssm.label}, {ssm_from}) + conv {attn.conv_dim // tp} × "
                  f"{cols} × {state.bytes_per_element:g} B per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def _mamba2_layer(attn: Mamba2Mixer, tp: int, state: DType) -> LayerKv:
    """vLLM `MambaStateShapeCalculator.mamba2_state_shape` (vllm/model_executor/layers/mamba/mamba_utils.py):
    conv state (kernel − 1) × conv_dim / tp, where n_groups not divisible by tp (only n_groups == 1 is allowed)
    is extended to tp (`extra_groups_for_head_shards`), and temporal state heads / tp × head_dim × state_size in the
    model's SSM cache dtype."""
    problem = attn.tp_problem(tp)  # (n_groups == 1 below tp: the group is replicated, Mamba2Mixer.groups_at)
    if problem:
        raise KvLayoutError(problem)
    conv_dim = attn.conv_dim_at(tp)
    if conv_dim % tp:
        raise KvLayoutError(f"Mamba2 conv channels {conv_dim} are not divisible by tp = {tp}; pick a tp that divides them")
    conv = (conv_dim // tp) * (attn.conv_kernel - 1)
    temporal = (attn.heads // tp) * attn.head_dim * attn.state_size
    ssm, ssm_from = _ssm_dtype(attn.ssm_dtype, state)
    nbytes = conv * state.bytes_per_element + temporal * ssm.bytes_per_element
    detail = (f"Mamba2 conv {conv_dim // tp} × {attn.conv_kernel - 1} × {state.bytes_per_element:g} B + ssm "
              f"{attn.heads // tp} heads × {attn.head_dim} × {attn.state_size} × {ssm.bytes_per_element:g} B "
              f"({ssm.label}, {ssm_from}) per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def _ssm_dtype(ssm: DType | None, state: DType) -> tuple[DType, str]:
    """The temporal state's dtype: the spec's (Nemotron-H's config hook), else vLLM's mamba_ssm_cache_dtype
    "auto", the conv state's dtype (MambaStateDtypeCalculator._mamba_state_dtype)."""
    if ssm is None:
        return state, "mamba_ssm_cache_dtype auto: the state dtype"
    return ssm, "mamba_ssm_cache_dtype"


def _mamba1_layer(attn: Mamba1Mixer, tp: int, state: DType) -> LayerKv:
    """vLLM `MambaStateShapeCalculator.mamba1_state_shape` (vllm/model_executor/layers/mamba/mamba_utils.py):
    conv state (kernel − 1) × intermediate / tp, temporal state intermediate / tp × state_size."""
    if attn.intermediate % tp:
        raise KvLayoutError(f"Mamba intermediate size {attn.intermediate} is not divisible by tp = {tp}; pick a tp "
                            "that divides it")
    inner = attn.intermediate // tp
    ssm, ssm_from = _ssm_dtype(attn.ssm_dtype, state)
    nbytes = inner * (attn.conv_kernel - 1) * state.bytes_per_element + inner * attn.state_size * ssm.bytes_per_element
    detail = (f"Mamba conv {inner} × {attn.conv_kernel - 1} × {state.bytes_per_element:g} B + ssm {inner} × "
              f"{attn.state_size} × {ssm.bytes_per_element:g} B ({ssm.label}, {ssm_from}) per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def _short_conv_layer(attn: ShortConv, tp: int, state: DType) -> LayerKv:
    """vLLM `MambaStateShapeCalculator.short_conv_state_shape(tp, hidden_size, conv_L_cache)` (called by
    vllm/model_executor/models/lfm2.py and lfm2_moe.py get_mamba_state_shape_from_config): one conv state of
    (L_cache − 1) × hidden / tp in the state dtype (`short_conv_state_dtype`)."""
    if attn.hidden % tp:
        raise KvLayoutError(f"hidden_size {attn.hidden} (short-conv channels) is not divisible by tp = {tp}; pick a "
                            "tp that divides it")
    channels = attn.hidden // tp
    nbytes = channels * (attn.conv_kernel - 1) * state.bytes_per_element
    detail = (f"short conv {channels} channels × {attn.conv_kernel - 1} (conv_L_cache − 1) × "
              f"{state.bytes_per_element:g} B per request")
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def recurrent_state_layer(attn: RecurrentMixer, tp: int, state: DType) -> LayerKv:
    """A `RecurrentMixer`'s per-request state on one rank: each part's shards split over TP, in its own dtype or
    the state dtype (the vLLM function each builder cites in `state_source`)."""
    nbytes, parts = 0.0, []
    for part in attn.state:
        if part.shards % tp:
            raise KvLayoutError(f"{attn.mechanism} {part.name} state: {part.shards} heads/channels are not divisible by "
                                f"tp = {tp}; pick a tp that divides them")
        dtype = part.dtype or state
        nbytes += part.shards // tp * part.per_shard * dtype.bytes_per_element
        parts.append(f"{part.name} {part.shards // tp} × {part.per_shard} × {dtype.bytes_per_element:g} B")
    detail = f"{attn.mechanism}: " + " + ".join(parts) + f" per request ({attn.state_source})"
    return LayerKv(KvKind.STATE, 0, int(nbytes), None, detail)


def compressed_attention_kv(attn: CompressedAttention) -> tuple[LayerKv, ...]:
    """The caches vLLM allocates for one DeepSeek-V4 attention layer, each its own KV-cache spec, whole on
    every rank (one shared K=V head): fixed layouts of the fp8 cache format vLLM requires
    (vllm/model_executor/layers/deepseek_v4_attention.py DeepseekV4MLAAttention asserts an fp8 kv cache and
    switches it to fp8_ds_mla), whatever --kv-cache-dtype says.

    - the sliding-window cache (vllm/v1/attention/backends/mla/sparse_swa.py DeepseekV4SWACache:
      SlidingWindowMLASpec, window `sliding_window`), one 584-B entry a token (448 fp8 nope + 64 bf16 rope
      + 8 scale bytes at head_dim 512: `attention_work.v4_entry_bytes`);
    - CSA / HCA: the compressed cache, one such entry per `ratio` tokens (DeepseekV4MLAAttention
      .get_kv_cache_spec: MLAAttentionSpec compress_ratio); the compressor's fp32 state, kv + score of
      coff·head_dim each, a sliding window of coff·ratio tokens (deepseek_compressor.py
      CompressorStateCache);
    - CSA only: the indexer's key cache, fp8 index_head_dim + an fp32 scale per 128, one per `ratio`
      tokens (DeepseekV4Indexer / DeepseekV4IndexerCache), and the indexer compressor's state.
    Block sizes are vLLM's: 64 tokens for the window (DeepseekV4SWACache.block_size, so that its page equals a
    256-token block of 4-token entries), the scheduler's 256 for the compressed caches, 4 (ratio 4) or 8
    (ratio 128) tokens for the compressor state (CompressorStateCache.__init__); pages are then padded to the
    largest; each page is rounded up to 576 B (the fp8_ds_mla layout's alignment: CompressorStateCache /
    DeepseekV4SWACache / DeepseekV4IndexerCache get_kv_cache_spec, vllm 0.33.0), and the backend's block-outermost
    layout packs them (kv_packed.py)."""
    from graphsim.work.attention_work import v4_entry_bytes, v4_index_entry_bytes

    entry = v4_entry_bytes(attn.head_dim, attn.rope_dim)
    nope = attn.head_dim - attn.rope_dim
    how = f"{nope} fp8 nope + {attn.rope_dim} × 2 B rope + {nope // 64 + 1} scale/pad B = {entry} B"
    packed = {"alignment": V4_PAGE_ALIGNMENT, "block_outermost": True}
    out = [LayerKv(KvKind.SLIDING, entry, 0, attn.window, f"sliding-window K=V: {how} a token",
                   block_size=V4_SWA_BLOCK, **packed)]
    for c, index in ((attn.compressor, False), (attn.index_compressor, True)):
        if c is None:
            continue
        what = "indexer key" if index else "compressed K=V"
        nbytes = v4_index_entry_bytes(c.head_dim) if index else entry
        how_c = f"{c.head_dim} fp8 + fp32 scale per 128 = {nbytes} B" if index else how
        out.append(LayerKv(KvKind.MLA, nbytes, 0, None, f"{what}: {how_c} per {c.ratio} tokens", ratio=c.ratio,
                           **packed))
        state = c.state_elements_per_token * 4
        out.append(LayerKv(KvKind.SLIDING, state, 0, c.coff * c.ratio,
                           f"{'indexer ' if index else ''}compressor state: kv + score 2 × {c.proj_width} fp32 = "
                           f"{state} B a token over a window of {c.coff * c.ratio}",
                           block_size=V4_STATE_BLOCKS.get(c.ratio), **packed))
    return tuple(out)


def layer_kv(spec: ModelSpec, tp: int, precision: Precision, num_spec: int = 0) -> tuple[LayerKv, ...]:
    """One entry per layer that keeps KV or state (a layer without a mixer keeps none); `num_spec`: speculative
    decoding's num_speculative_tokens (a gated delta net's conv state keeps that many more columns)."""
    out = []
    for layer in spec.stack.layers:
        attn = layer.attn
        if isinstance(attn, NoAttention) or (isinstance(attn, GqaAttention) and attn.kv_shared):
            continue  # no mixer, or K/V read from an earlier layer's cache (vLLM kv_sharing_target_layer_name)
        if isinstance(attn, Mamba2Mixer):
            out.append(_mamba2_layer(attn, tp, precision.state))
        elif isinstance(attn, Mamba1Mixer):
            out.append(_mamba1_layer(attn, tp, precision.state))
        elif isinstance(attn, ShortConv):
            out.append(_short_conv_layer(attn, tp, precision.state))
        elif isinstance(attn, ParallelMixers):  # vLLM: an attention KV cache and a Mamba2 state, each its own spec
            out += [_gqa_layer(attn.attn, tp, precision.kv), _mamba2_layer(attn.mamba, tp, precision.state)]
        elif isinstance(attn, RecurrentMixer):
            out.append(recurrent_state_layer(attn, tp, precision.state))
        elif isinstance(attn, GqaAttention):
            out.append(_gqa_layer(attn, tp, precision.kv))
        elif isinstance(attn, MlaAttention):
            out.append(_mla_layer(attn, precision.kv))
        elif isinstance(attn, GatedDeltaNet):
            out.append(_state_layer(attn, tp, precision.state, num_spec))
        elif isinstance(attn, CompressedAttention):
            out.extend(compressed_attention_kv(attn))
        else:  # pragma: no cover - closed union
            raise TypeError(type(attn).__name__)
    return tuple(out)


def _groups(layers: tuple[LayerKv, ...], block_size: int) -> tuple[tuple[KvGroup, ...], int, list[str]]:
    notes: list[str] = []
    buckets: dict[LayerKv, int] = {}
    for layer in layers:
        buckets[layer] = buckets.get(layer, 0) + 1
    if not buckets:
        return (), block_size, notes
    attn_1tok = [b.bytes_per_token for b in buckets if b.kind is not KvKind.STATE]
    state_pages = [b.state_bytes for b in buckets if b.kind is KvKind.STATE]
    attn_bs = block_size
    if state_pages and attn_1tok:
        # vllm/platforms/interface.py `_align_hybrid_block_size`: smallest multiple of the block size
        # whose attention page holds one state page.
        need = max(state_pages)
        attn_bs = block_size * cdiv(need, block_size * max(attn_1tok))
        if attn_bs != block_size:
            notes.append(f"attention block size raised to {attn_bs} tokens so that an attention page holds one "
                         f"linear-attention state page (vLLM _align_hybrid_block_size)")
    sizes = {b: b.block_size or attn_bs for b in buckets}
    pages = {b: (b.state_bytes if b.kind is KvKind.STATE else b.bytes_per_token * cdiv(sizes[b], b.ratio))
             for b in buckets}
    max_page = max(pages.values())
    for b, page in list(pages.items()):  # unify_kv_cache_spec_page_size
        if page == max_page:
            continue
        if b.kind is not KvKind.STATE and b.block_size is None and max_page % page == 0:
            sizes[b] = attn_bs * (max_page // page)
        pages[b] = max_page
    counts = list(buckets.values())
    group_size = min(counts)
    if max(counts) < 1.5 * min(counts):
        group_size = max(counts)
    if len(buckets) == 1:
        group_size = counts[0]
    groups: list[KvGroup] = []
    padding = 0
    for b, n in buckets.items():
        n_groups = cdiv(n, group_size)
        padding += n_groups * group_size - n
        for i in range(n_groups):
            real = len(range(i, n, n_groups))
            groups.append(KvGroup(b.kind, group_size, real, sizes[b], pages[b], b.window))
    if padding:
        notes.append(f"{padding} padding layer(s) to make KV-cache groups equal (vLLM adds them too)")
    return tuple(groups), attn_bs, notes


def _page_key(layer: LayerKv, block_size: int) -> int:
    from graphsim.serving.kv_packed import layer_page

    return layer_page(layer, layer.block_size or block_size)


def with_mamba_cache_mode(layout: KvLayout, mode: str, speculative_blocks: int = 0) -> KvLayout:
    """`layout` with its state groups holding the pages vLLM's mamba_cache_mode gives a request
    (MambaSpec.max_memory_usage_bytes, vllm/v1/kv_cache_interface.py): "none" 1, "align" 2 (the running state
    and the block-aligned checkpoint prefix caching reuses), each + `speculative_blocks`. "align" keeps the
    attention block size of "none" (`Platform._align_hybrid_block_size`, vllm/platforms/interface.py: the
    chunk-aligned block size belongs to "all"). "all" (a state page per block of tokens, models declaring
    SupportsMambaPrefixCaching) is not modelled."""
    pages = {"none": 1, "align": 2}.get(mode)
    if pages is None:
        raise KvLayoutError(f"mamba_cache_mode '{mode}' is not modelled; use none or align")
    pages += speculative_blocks
    if not any(g.kind is KvKind.STATE for g in layout.groups) or pages == 1:
        return layout
    groups = tuple(replace(g, state_pages=pages) if g.kind is KvKind.STATE else g for g in layout.groups)
    note = (f"mamba_cache_mode {mode}: {pages} state pages a request per state group (prefix caching on; vLLM "
            "MambaSpec.max_memory_usage_bytes)")
    return replace(layout, groups=groups, notes=(*layout.notes, note))


def kv_layout(spec: ModelSpec, precision: Precision, tp: int = 1, block_size: int | None = None, num_spec: int = 0,
              extra_layers: tuple[LayerKv, ...] = ()) -> KvLayout:
    """The per-rank KV layout of `spec`. `block_size` None: 16, or 64 for MLA (FlashMLA). `num_spec`: speculative
    decoding's num_speculative_tokens (`layer_kv`); `extra_layers`: a draft's layers in the same pool."""
    if tp < 1:
        raise KvLayoutError(f"tp = {tp}; give --tp >= 1")
    layers = layer_kv(spec, tp, precision, num_spec) + extra_layers
    notes: list[str] = []
    if block_size is None:
        block_size = DEFAULT_BLOCK_SIZE
        if any(layer.ratio > 1 for layer in layers):
            block_size = V4_BLOCK_SIZE
            notes.append("block size 256: vLLM's DeepSeek-V4 backend prefers 256-token blocks "
                         "(sparse_swa.py DeepseekSparseSWABackend.get_preferred_block_size) for its compressed "
                         "caches; the window (64) and compressor state (4 / 8) fix their own; pages 576-B aligned")
        elif any(layer.kind is KvKind.MLA for layer in layers):
            block_size = MLA_BLOCK_SIZE
            notes.append("block size 64: vLLM's FlashMLA backend (Hopper) takes only 64-token blocks; "
                         "other MLA backends differ (CUTLASS MLA on Blackwell: 128), set --block-size")
    if block_size < 1:
        raise KvLayoutError(f"block size {block_size}; give --block-size >= 1")
    if any(layer.block_outermost for layer in layers) and len({_page_key(x, block_size) for x in layers}) > 1:
        from graphsim.serving.kv_packed import packed_groups  # (imports this module)

        groups, group_notes = packed_groups(layers, block_size)
        attn_bs = block_size
    else:
        groups, attn_bs, group_notes = _groups(layers, block_size)
    return KvLayout(spec.architecture, tp, precision.kv, precision.state, layers, groups, attn_bs,
                    tuple(notes + group_notes))

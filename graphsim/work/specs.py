"""What a model is made of, as far as necessary work is concerned: frozen, config-derived specs.

A `ModelSpec` holds an embedding, a `LayerStack` (one `LayerSpec` per decoder layer, each an
attention block and an FFN block) and an output head. Weight tables (`weights.py`) and per-step
work (`account.py`) are computed from these specs, never from graphs or kernels.

Segment names are `<place>.<block>.<part>`: `embed`, `head`, `final_norm`, and for layers
`layers.attn.qkv` or, when the stack mixes block kinds, `layers[sliding].attn.qkv`,
`layers[moe].ffn.routed`. The tag in brackets is the block's kind (`full`, `sliding`, `mla`,
`linear`, `mamba` for attention; `dense`, `moe` for FFNs; `none` for an absent block of a
single-block layer, which owns no weights) and appears only where kinds differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from math import prod

from graphsim.work.dtypes import DType
from graphsim.work.quant import Quantization


class WeightKind(Enum):
    MATRIX = "matrix"  # (out_features, in_features), applied as a matmul to each routed row
    CONV = "conv"  # depthwise causal conv weight (channels, kernel), 2·channels·kernel FLOPs per token
    EMBEDDING = "embedding"  # (vocab, hidden) lookup table
    NORM = "norm"  # norm scale vector
    BIAS = "bias"  # additive bias vector
    VECTOR = "vector"  # other learned vectors (attention sinks, decay parameters, score biases)


@dataclass(frozen=True)
class Weight:
    """One parameter tensor (per copy) and the segment part it belongs to."""

    part: str  # segment part, e.g. "qkv", "routed"
    module: str  # HF module path inside its layer (or model), matched against modules_to_not_convert
    kind: WeightKind
    shape: tuple[int, ...]
    copies: int = 1  # routed experts: one copy per expert
    top_k: int | None = None  # routed-expert tensors: copies one token uses (None: not routed)
    quantizable: bool = True  # a matrix a quantized checkpoint stores quantized (not routers, not the head)
    # Held by the model but doing no work in its causal forward (a decoder's cross-attention without
    # encoder states, BigBird's pooler): counted in the parameters and stored bytes, never read, no
    # FLOPs, not activated.
    idle: bool = False
    # bytes per element when the checkpoint stores this tensor apart from the model dtype (DeepSeek-V4 keeps
    # its hyper-connection mixes, sinks and compressor position biases in fp32, its hash table in int64);
    # None: the model dtype
    element_bytes: float | None = None
    # times one token passes through this weight in a forward (Zamba2's shared transformer block, applied at
    # every hybrid layer it serves): FLOPs × uses; stored, read and counted once
    uses: int = 1

    @property
    def elements_per_copy(self) -> int:
        return prod(self.shape)

    @property
    def elements(self) -> int:
        return self.elements_per_copy * self.copies

    @property
    def routed(self) -> bool:
        return self.top_k is not None

    @property
    def active_elements(self) -> int:
        """Elements one token uses: all, or top-k copies of a routed tensor."""
        return self.elements_per_copy * (self.top_k if self.top_k is not None else self.copies)


class AttentionKind(Enum):
    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"
    MLA = "mla"
    LINEAR = "linear"
    MAMBA = "mamba"
    CONV = "conv"  # a gated short convolution (LFM2: Lfm2ShortConv)
    PARALLEL = "parallel"  # attention and a Mamba2 mixer side by side (Falcon-H1)
    NONE = "none"  # a layer without a mixer block (Nemotron-H's MLP-only and MoE-only layers)
    CSA = "csa"  # DeepSeek-V4 compressed sparse attention: sliding window + top-k of compressed entries
    HCA = "hca"  # DeepSeek-V4 heavily compressed attention: sliding window + every compressed entry


@dataclass(frozen=True)
class GqaAttention:
    """Softmax attention with grouped KV heads (MHA when kv_heads == heads, MQA when 1).

    `window` is the sliding window W: a query attends to the W most recent positions, itself
    included (HF: `kv_idx > q_idx - W`). `output_gate`: q_proj also emits a per-channel gate
    (Qwen3-Next). `sinks`: one learned softmax sink logit per head (gpt-oss).
    """

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    window: int | None = None
    q_bias: bool = False
    kv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    qk_norm_full: bool = False  # q/k norms over all heads' width (OLMo-2, Cohere) instead of one head_dim
    qk_norm_bias: bool = False  # q/k norms are LayerNorms with a bias (Persimmon, Phi)
    output_gate: bool = False
    sinks: bool = False
    block_norms: int = 1  # hidden-size norms this block owns (pre-norm; Gemma-2 adds a post-norm)
    # Chunked local attention (Llama-4): a query at position q attends to [C·⌊q/C⌋, q] only.
    chunk: int | None = None
    value_dim: int | None = None  # V head width when it differs from head_dim (MiMo-V2-Flash: 192 q/k, 128 v)
    # Gemma-4 attention_k_eq_v (full layers): no v_proj, V is the (unscaled-norm) K projection; K and V are
    # still both cached (K is normed with a scale and rotated, V only normed).
    k_eq_v: bool = False
    # Gemma-4 num_kv_shared_layers: the layer reuses an earlier layer's K/V (no k/v projections or norms,
    # nothing written to a cache of its own; it reads the producer's)
    kv_shared: bool = False
    # Mixture of attention heads (JetMoE MoA, arXiv:2404.07413): q_proj and o_proj are `moa_experts` routed
    # experts behind their own router, `moa_top_k` per token, each owning heads / moa_top_k query heads over
    # the shared K/V; `o_bias` is one vector added after the experts combine
    moa_experts: int = 0
    moa_top_k: int = 0
    # MiniMax-M3 sparse layers: a block top-k indexer chooses the keys each query attends to
    block_indexer: BlockSparseIndexer | None = None

    @property
    def v_head_dim(self) -> int:
        return self.value_dim if self.value_dim is not None else self.head_dim

    @property
    def kind(self) -> AttentionKind:
        if self.chunk is not None:
            return AttentionKind.CHUNKED
        return AttentionKind.SLIDING if self.window is not None else AttentionKind.FULL

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_heads * (self.head_dim + self.v_head_dim)


@dataclass(frozen=True)
class DsaIndexer:
    """DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5).

    Every new token scores every earlier position with `heads` small heads over one shared key per
    position (`head_dim` wide); the top-`topk` positions are the only ones the MLA core attends to
    (transformers models/deepseek_v32 DeepseekV32Indexer). vLLM caches that key per token and layer
    as fp8 values plus one fp32 scale per 128 values (vllm/model_executor/models/deepseek_v2.py:
    Indexer.__init__ sizes DeepseekV32IndexerCache at head_dim + head_dim // quant_block_size * 4
    bytes, quant_block_size 128, num_kv_heads 1).
    """

    hidden: int
    q_lora_rank: int
    heads: int
    head_dim: int
    topk: int
    # GLM-5.2 `indexer_types` "shared": this layer runs no indexer and reuses the previous full
    # layer's top-k (transformers glm_moe_dsa GlmMoeDsaAttention.skip_topk: no indexer module).
    shared: bool = False

    QUANT_BLOCK = 128  # vLLM's indexer cache: one fp32 scale per 128 fp8 values

    @property
    def cache_bytes_per_token(self) -> int:
        """Index-key cache bytes per token (0 on a shared layer, which keeps no index keys)."""
        return 0 if self.shared else self.head_dim + self.head_dim // self.QUANT_BLOCK * 4


@dataclass(frozen=True)
class MlaAttention:
    """DeepSeek multi-head latent attention; the cache holds the compressed latent and the rope key."""

    hidden: int
    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    bias: bool = False  # attention_bias: on q_a_proj (or q_proj), kv_a_proj_with_mqa, o_proj
    # A.X-K2 q_gate_proj in place of q_b_proj: reads [norm(q_a), q_a] (2·q_lora_rank) and also emits a sigmoid
    # output gate of v_head_dim per head (elementwise on the attention output)
    q_gate: bool = False
    block_norms: int = 1
    indexer: DsaIndexer | None = None  # DeepSeek sparse attention: the core attends to top-k positions
    # g_proj's width, a sigmoid gate on the heads' output before o_proj (Kimi-K3: heads·v_head_dim; Ling/Bailing
    # hybrid: one per head); 0: none
    output_gate: int = 0

    kind = AttentionKind.MLA

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class GatedDeltaNet:
    """Linear attention with a gated delta rule (Qwen3-Next); per-request recurrent and conv state."""

    hidden: int
    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int
    block_norms: int = 1
    # the recurrent state's dtype; None: vLLM's mamba_ssm_cache_dtype "auto", the conv-state dtype
    # (MambaStateDtypeCalculator.gated_delta_net_state_dtype); Qwen3.5: its config's mamba_ssm_dtype
    ssm_dtype: DType | None = None

    kind = AttentionKind.LINEAR

    @property
    def key_dim(self) -> int:
        return self.k_heads * self.k_head_dim

    @property
    def value_dim(self) -> int:
        return self.v_heads * self.v_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @property
    def recurrent_state_elements(self) -> int:
        return self.v_heads * self.k_head_dim * self.v_head_dim

    @property
    def conv_state_elements(self) -> int:
        return self.conv_dim * (self.conv_kernel - 1)


@dataclass(frozen=True)
class Mamba2Mixer:
    """A Mamba2 (SSD) mixer (Nemotron-H; transformers models/nemotron_h NemotronHMamba2Mixer).

    in_proj emits the gate z (intermediate), the conv input x·B·C (conv_dim) and dt (heads);
    a depthwise causal conv over conv_dim channels; the selective scan keeps one state of
    head_dim × state_size per head; a gated RMSNorm over intermediate; out_proj back to hidden.
    intermediate = heads · head_dim (NemotronHMamba2Mixer.intermediate_size), conv_dim =
    intermediate + 2 · n_groups · state_size. Per request vLLM keeps the conv state
    ((kernel − 1) × conv_dim) and the temporal state (heads × head_dim × state_size)
    (vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.mamba2_state_shape);
    the temporal state is stored in `ssm_dtype` (the config's mamba_ssm_cache_dtype, float32 when
    absent: vllm/model_executor/models/config.py NemotronHForCausalLMConfig), the conv state in the
    state dtype (mamba_cache_dtype "auto" = the model dtype: MambaStateDtypeCalculator._mamba_state_dtype).
    """

    hidden: int
    heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    # None: vLLM's mamba_ssm_cache_dtype "auto", the temporal state in the state (conv) dtype
    # (MambaStateDtypeCalculator._mamba_state_dtype): every Mamba2 family but Nemotron-H
    ssm_dtype: DType | None
    conv_bias: bool = True  # use_conv_bias
    proj_bias: bool = False  # use_bias: in_proj and out_proj
    block_norms: int = 1
    module: str = "mixer"  # the mixer's module in its layer (Bamba, Granite-4.0-H: "mamba")
    gated_norm: bool = True  # the gated RMSNorm over intermediate (Falcon-H1: only with mamba_rms_norm)
    out_bias: bool | None = None  # out_proj's bias when it differs from in_proj's (Falcon-H1: projectors_bias)

    kind = AttentionKind.MAMBA

    @property
    def intermediate(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate + 2 * self.n_groups * self.state_size

    @property
    def in_proj_width(self) -> int:
        return self.intermediate + self.conv_dim + self.heads

    def groups_at(self, tp: int) -> int:
        """The B/C groups vLLM lays out over `tp` ranks: n_groups, padded to tp when tp does not divide it
        (`extra_groups_for_head_shards`, layers/mamba/mamba_mixer2.py MambaMixer2.__init__: every rank then holds
        the one group whole). vLLM allows that only for n_groups == 1; `tp_problem` names the other cases."""
        return self.n_groups if self.n_groups % tp == 0 else tp

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM's MambaMixer2 cannot run this mixer at `tp`, or None (its asserts: tp divides num_heads, and
        tp divides n_groups or n_groups == 1)."""
        if self.heads % tp:
            return f"mamba_num_heads = {self.heads} is not divisible by tp = {tp}; pick a tp that divides it"
        if self.n_groups % tp and self.n_groups != 1:
            return (f"Mamba2 n_groups = {self.n_groups} is neither 1 nor divisible by tp = {tp} (vLLM MambaMixer2 "
                    f"replicates only a single group); pick a tp that divides {self.n_groups}")
        return None

    def conv_dim_at(self, tp: int) -> int:
        """conv channels over all `tp` ranks (each holds conv_dim_at(tp) / tp): intermediate + 2 · groups_at · state."""
        return self.intermediate + 2 * self.groups_at(tp) * self.state_size

    def in_proj_width_at(self, tp: int) -> int:
        """in_proj outputs over all `tp` ranks (ColumnParallelLinear of intermediate + conv_dim + heads)."""
        return self.intermediate + self.conv_dim_at(tp) + self.heads

    @property
    def recurrent_state_elements(self) -> int:
        return self.heads * self.head_dim * self.state_size

    @property
    def conv_state_elements(self) -> int:
        return self.conv_dim * (self.conv_kernel - 1)


@dataclass(frozen=True)
class Mamba1Mixer:
    """A Mamba-1 selective-scan mixer (Gu & Dao 2023, arXiv:2312.00752; transformers models/mamba
    MambaMixer, models/jamba JambaMambaMixer).

    in_proj emits x and the gate z (2 · intermediate); a depthwise causal conv over the intermediate
    channels; x_proj makes dt (dt_rank), B and C (state_size each) from the conv output; dt_proj
    (dt_rank → intermediate, with a bias) expands dt; A_log is (intermediate × state_size) and D one per
    channel; out_proj back to hidden. `dt_norms`: Jamba's RMSNorms on dt (dt_rank), B and C (state_size)
    (JambaMambaMixer dt_layernorm / b_layernorm / c_layernorm). Per request vLLM keeps the conv state
    ((kernel − 1) × intermediate) and the temporal state (intermediate × state_size), both split over TP
    (vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.mamba1_state_shape).
    """

    hidden: int
    intermediate: int
    state_size: int
    conv_kernel: int
    dt_rank: int
    ssm_dtype: DType | None = None  # None: mamba_ssm_cache_dtype "auto" (the state dtype), as vLLM's default
    conv_bias: bool = True
    proj_bias: bool = False  # in_proj and out_proj
    dt_norms: bool = False
    block_norms: int = 1
    module: str = "mixer"  # Jamba: "mamba"

    kind = AttentionKind.MAMBA

    @property
    def recurrent_state_elements(self) -> int:
        return self.intermediate * self.state_size

    @property
    def conv_state_elements(self) -> int:
        return self.intermediate * (self.conv_kernel - 1)


@dataclass(frozen=True)
class ShortConv:
    """LFM2's gated short convolution (transformers models/lfm2 Lfm2ShortConv): in_proj makes B, C and x
    (3 · hidden), B·x runs through a depthwise causal conv of `conv_kernel` (conv_L_cache) taps over the
    hidden channels, C gates the result, out_proj back to hidden; every projection and the conv take a
    bias when `bias` (conv_bias). Per request vLLM keeps only the conv state, (conv_kernel − 1) × hidden,
    split over TP (MambaStateShapeCalculator.short_conv_state_shape, called with intermediate_size =
    hidden_size and conv_kernel = conv_L_cache by vllm/model_executor/models/lfm2.py
    Lfm2ForCausalLM.get_mamba_state_shape_from_config), in the state dtype (short_conv_state_dtype)."""

    hidden: int
    conv_kernel: int
    bias: bool = False
    block_norms: int = 1
    module: str = "conv"

    kind = AttentionKind.CONV

    @property
    def conv_state_elements(self) -> int:
        return self.hidden * (self.conv_kernel - 1)


@dataclass(frozen=True)
class StatePart:
    """One per-request state tensor of a `RecurrentMixer` layer, as vLLM allocates it.

    `shards` is the dimension vLLM splits over TP ranks (heads or channels; it must divide tp),
    `per_shard` the elements each of them holds; `dtype` None means the state dtype (vLLM's
    mamba_cache_dtype, "auto" = the model dtype)."""

    name: str
    shards: int
    per_shard: int
    dtype: DType | None = None

    @property
    def elements(self) -> int:
        return self.shards * self.per_shard


@dataclass(frozen=True)
class RecurrentMixer:
    """A linear-attention / recurrent token mixer stated by its parts (Kimi Delta Attention,
    MiniMax lightning attention, ...), for mechanisms whose weights follow no other spec.

    The builder lists every parameter (`weights`, module paths as transformers names them, parts
    `qkv`/`core`/`norm`/`out`), the recurrence's FLOPs per new token (`flops_per_token`: the work
    without weights, with its formula in the builder), and the per-request state vLLM keeps
    (`state`, read once when p > 0 and written once per sequence, like the gated delta net)."""

    hidden: int
    mechanism: str  # e.g. "KDA", "lightning attention"
    weights: tuple[Weight, ...]
    flops_per_token: int
    state: tuple[StatePart, ...]
    state_source: str  # the vLLM function the state layout is read from
    activation_width: int  # per-token elements of its widest intermediate (projection outputs), split over TP
    block_norms: int = 1

    kind = AttentionKind.LINEAR


@dataclass(frozen=True)
class BlockSparseIndexer:
    """MiniMax-M3's lightning indexer over blocks of keys (transformers minimax_m3_vl
    MiniMaxM3VLIndexer): `heads` index heads (one per KV group) of `head_dim` score every earlier
    key against one shared, cached index key per position; scores are max-pooled per block of
    `block` keys and each query keeps `topk` blocks (the `local` blocks ending at its own always
    among them), so the main attention attends to at most topk·block keys per query."""

    hidden: int
    heads: int
    head_dim: int
    block: int
    topk: int
    local: int = 1

    @property
    def cache_elements_per_token(self) -> int:
        return self.head_dim  # one index key per position (MiniMaxM3VLSparseCacheLayer.idx_keys)


@dataclass(frozen=True)
class ParallelMixers:
    """Softmax attention and a Mamba2 mixer side by side on the same normed input, their outputs summed
    (Falcon-H1: transformers models/falcon_h1 FalconH1DecoderLayer, one input_layernorm for both). Weights,
    core work and caches are the two mixers'; the layer keeps the attention's KV and the Mamba2 state (vLLM
    falcon_h1.py FalconH1ParallelHybrid holds a FalconH1AttentionDecoderLayer's Attention and a MambaMixer2,
    each with its own KV-cache spec). The block's norms are the attention's (`attn.block_norms`)."""

    attn: GqaAttention
    mamba: Mamba2Mixer
    block_norms: int = 0  # the inner mixers own theirs
    # False: the attention's weights are shared by several layers and listed once, on the first layer that
    # uses them, with `Weight.uses` (Zamba2's shared transformer); this layer keeps only its core work and KV
    attn_weights: bool = True

    kind = AttentionKind.PARALLEL

    @property
    def hidden(self) -> int:
        return self.attn.hidden


@dataclass(frozen=True)
class NoAttention:
    """No mixer in this layer: the layer is a single FFN block (Nemotron-H's `mlp` / `moe` layers).
    No weights, no core work, no KV."""

    hidden: int
    block_norms: int = 0

    kind = AttentionKind.NONE


@dataclass(frozen=True)
class KvCompressor:
    """DeepSeek-V4's KV compressor (transformers models/deepseek_v4 DeepseekV4CSACompressor /
    DeepseekV4HCACompressor / the indexer's own): every `ratio` source tokens close a window that emits
    ONE compressed entry of `head_dim`, a softmax-gated sum (gate + a learned per-slot position bias)
    over the window's projected tokens. With `overlap` (CSA) each token projects two series (2·head_dim)
    and entry w pools window w−1's first series with window w's second: 2·ratio slots of head_dim.

    vLLM keeps the not-yet-compressed tokens' projections (kv and score, fp32) in a per-layer state cache
    (vllm/model_executor/layers/deepseek_compressor.py CompressorStateCache: state_dim = 2·coff·head_dim
    fp32, a sliding window of coff·ratio tokens, coff = 2 with overlap).
    """

    ratio: int
    head_dim: int
    overlap: bool

    @property
    def coff(self) -> int:
        return 2 if self.overlap else 1

    @property
    def proj_width(self) -> int:
        """kv_proj / gate_proj output width (one or two series of head_dim)."""
        return self.coff * self.head_dim

    @property
    def state_elements_per_token(self) -> int:
        """fp32 kv + score state one source token keeps until its window(s) close."""
        return 2 * self.coff * self.head_dim

    def state_written(self, cached: int, new: int) -> int:
        """fp32 state elements a step of `new` tokens after `cached` must store for later steps: each new token
        in the window still open at the step's end (full width) and, with overlap, each new token of the last
        closed window (its first series, kv + score of head_dim each, which the next entry pools)."""
        end = cached + new
        closed = end // self.ratio * self.ratio
        written = (end - max(cached, closed)) * self.state_elements_per_token
        if self.overlap and closed:
            written += max(0, closed - max(cached, closed - self.ratio)) * 2 * self.head_dim
        return written

    def state_read(self, cached: int, new: int) -> int:
        """fp32 state elements of earlier steps a step reads back: only when a window closes in it, the cached
        tokens of that window (full width) and, with overlap, the window before's first series."""
        first = cached // self.ratio  # the window the first new token falls in
        if (cached + new) // self.ratio == first:
            return 0  # no window closes in this step
        read = (cached - first * self.ratio) * self.state_elements_per_token
        if self.overlap and first:
            read += self.ratio * 2 * self.head_dim
        return read


@dataclass(frozen=True)
class CompressedAttention:
    """DeepSeek-V4 attention (transformers models/deepseek_v4 DeepseekV4Attention; paper §2.3).

    Shared-KV MQA: one KV head of `head_dim` read as both key and value, queries through a q LoRA
    (q_a_proj → q_a_norm → q_b_proj), a learned sink per head, and a grouped low-rank output
    projection (o_a_proj: `o_groups` blocks of heads·head_dim/o_groups → o_lora_rank each; o_b_proj:
    o_groups·o_lora_rank → hidden). Every query attends to the last `window` positions (sliding part)
    and, when `compressor` is set, to compressed entries of the whole past: all of them (HCA), or the
    `index_topk` a lightning indexer picks (CSA: `index_compressor` + index heads over the q latent).
    A query at position t sees the ⌊(t + 1) / ratio⌋ entries whose windows have closed.
    """

    hidden: int
    heads: int
    head_dim: int
    rope_dim: int  # the trailing rotary slice of each head (qk_rope_head_dim)
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    compressor: KvCompressor | None = None
    index_compressor: KvCompressor | None = None  # CSA's indexer keys, at index_head_dim
    index_heads: int = 0
    index_topk: int = 0
    block_norms: int = 1

    @property
    def kind(self) -> AttentionKind:
        if self.compressor is None:
            return AttentionKind.SLIDING
        return AttentionKind.CSA if self.index_compressor is not None else AttentionKind.HCA

    @property
    def ratio(self) -> int:
        return self.compressor.ratio if self.compressor is not None else 0


AttentionSpec = (
    GqaAttention | MlaAttention | GatedDeltaNet | Mamba2Mixer | RecurrentMixer | NoAttention | Mamba1Mixer | ShortConv | CompressedAttention
    | ParallelMixers
)


class FfnKind(Enum):
    DENSE = "dense"
    MOE = "moe"
    NONE = "none"  # a layer without an FFN block (Nemotron-H's attention-only and Mamba-only layers)


@dataclass(frozen=True)
class DenseFfn:
    """A dense MLP: gated (SwiGLU/GeGLU: gate, up, down) or plain (up, down)."""

    hidden: int
    intermediate: int
    gated: bool = True
    bias: bool = False
    block_norms: int = 1
    module: str = "mlp"

    kind = FfnKind.DENSE


@dataclass(frozen=True)
class MoeFfn:
    """Routed experts (gated MLPs of width `expert_intermediate`), top-k routing, optional shared experts."""

    hidden: int
    expert_intermediate: int
    experts: int
    top_k: int
    expert_bias: bool = False  # biases on the expert matrices (gpt-oss)
    router_bias: bool = False  # bias on the router linear (gpt-oss)
    router_score_bias: bool = False  # per-expert score correction vector (DeepSeek-V3 noaux_tc)
    shared_intermediate: int = 0  # total width of the always-on shared expert(s); 0 = none
    shared_gate: bool = False  # sigmoid gate (hidden → 1) on the shared expert (Qwen3-Next)
    shared_bias: bool = False  # biases on the shared expert's matrices (DeepSeek-V2 with mlp_bias)
    gated: bool = True  # experts and shared expert gated (gate, up, down); False: up, down (Nemotron-H relu²)
    # Latent MoE (Nemotron-3 Super/Ultra moe_latent_size): fc1_latent_proj (hidden → latent) before the
    # routed experts, which then work in the latent width, and fc2_latent_proj (latent → hidden) after
    # (transformers nemotron_h NemotronHMoE); 0 = none, the experts read the hidden state.
    latent: int = 0
    latent_bias: bool = False  # biases on the latent projections (Nemotron-H: mlp_bias)
    # Kimi-K3 latent MoE (routed_expert_hidden_size): the projections are block_sparse_moe.routed_expert_down_proj /
    # routed_expert_up_proj, an RMSNorm (routed_expert_norm, latent_moe_use_norm) before the up projection, and
    # both stay unquantized (vLLM kimi_linear.py KimiMoE: ReplicatedLinear with quant_config=None)
    latent_names: tuple[str, str] = ("fc1_latent_proj", "fc2_latent_proj")
    latent_norm: str = ""
    latent_quantizable: bool = True
    # Gemma-4 enable_moe_block: a dense gated MLP (module `mlp`) of this width runs beside the routed
    # experts on every token (its own norms), and the router carries a per-channel input scale and a
    # per-expert output scale (Gemma4TextRouter.scale, .per_expert_scale)
    dense_intermediate: int = 0
    router_scales: bool = False
    # Zero-computation (identity) experts the router may pick besides the real ones (LongCat-Flash
    # zero_expert_num): the router and its score bias are experts + zero_experts wide, and under uniform
    # routing a token's top_k picks land on real experts top_k·E/(E + Z) times (`real_top_k`)
    zero_experts: int = 0
    block_norms: int = 1
    module: str = "mlp"
    router_module: str = "gate"
    shared_module: str = "shared_experts"

    kind = FfnKind.MOE

    @property
    def real_top_k(self) -> int:
        """Real experts a token uses on average: top_k, or top_k·E/(E + Z) with zero-computation experts
        (the builder holds it to an integer)."""
        return self.top_k * self.experts // (self.experts + self.zero_experts)


@dataclass(frozen=True)
class NoFfn:
    """No FFN in this layer: the layer is a single mixer block (Nemotron-H's attention and Mamba layers)."""

    hidden: int
    block_norms: int = 0

    kind = FfnKind.NONE


FfnSpec = DenseFfn | MoeFfn | NoFfn


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: a mixer (attention, linear attention, Mamba) and an FFN. A single-block
    layer (Nemotron-H) has `NoAttention` or `NoFfn` in the other slot."""

    attn: AttentionSpec
    ffn: FfnSpec
    # Weights of this layer that its block specs do not describe, placed in the attention or FFN block's
    # segments (A.X-K1's post_mlp_layernorm on MoE layers only, Laguna's per-head output gate g_proj, BitNet's
    # sub-norms): a MATRIX here is applied to every new token like any unrouted weight
    attn_extras: tuple[Weight, ...] = ()
    ffn_extras: tuple[Weight, ...] = ()


@dataclass(frozen=True)
class LayerGroup:
    """`count` layers with an identical spec; `first_index` names their modules for quantization rules."""

    spec: LayerSpec
    count: int
    first_index: int
    attn_tag: str  # "" or "[sliding]"
    ffn_tag: str  # "" or "[moe]"

    def segment(self, block: str, part: str) -> str:
        tag = self.attn_tag if block == "attn" else self.ffn_tag
        return f"layers{tag}.{block}.{part}"


@dataclass(frozen=True)
class LayerStack:
    """The decoder layers in order; identical specs are grouped and tagged by their block kinds."""

    layers: tuple[LayerSpec, ...]

    def __len__(self) -> int:
        return len(self.layers)

    def groups(self) -> tuple[LayerGroup, ...]:
        attn_kinds = {layer.attn.kind for layer in self.layers}
        ffn_kinds = {layer.ffn.kind for layer in self.layers}
        order: dict[LayerSpec, list[int]] = {}
        for index, layer in enumerate(self.layers):
            order.setdefault(layer, []).append(index)
        return tuple(
            LayerGroup(
                spec=spec,
                count=len(indices),
                first_index=indices[0],
                attn_tag=f"[{spec.attn.kind.value}]" if len(attn_kinds) > 1 else "",
                ffn_tag=f"[{spec.ffn.kind.value}]" if len(ffn_kinds) > 1 else "",
            )
            for spec, indices in order.items()
        )

    def schedule(self) -> tuple[str, ...]:
        """Per layer, `attn/ffn` kinds, e.g. ('sliding/moe', 'full/moe', …)."""
        return tuple(f"{layer.attn.kind.value}/{layer.ffn.kind.value}" for layer in self.layers)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only LM as the accountant sees it, built from config.json alone."""

    architecture: str
    hidden: int
    vocab: int
    tie_embeddings: bool
    stack: LayerStack
    dtype: DType  # parameter dtype from the config (torch_dtype / dtype)
    dtype_source: str  # "config torch_dtype", "config dtype" or "default"
    quant: Quantization | None = None
    notes: tuple[str, ...] = field(default=())
    # LayerNorm with a bias (StarCoder2, StableLM, Phi-MoE): every hidden-size block norm and the final
    # norm also hold a bias vector
    norm_bias: bool = False
    # Weights outside the two blocks: `embed_extras` sit with the embedding (Gemma-4's per-layer-input
    # table, its projection and norm: segment `embed`), `layer_extras` in every decoder layer (Gemma-4's
    # layer_scalar, per-layer-input gate/projection/norm: the layer's `ffn` block)
    embed_extras: tuple[Weight, ...] = ()
    layer_extras: tuple[Weight, ...] = ()
    head_bias: bool = False  # the untied LM head has a bias (Phi)
    # Weights after the last layer besides the final norm (DeepSeek-V4's hyper-connection head that
    # collapses the residual streams before the norm: segment `final_norm`)
    final_extras: tuple[Weight, ...] = ()
    final_norm: bool = True  # False: the final norm has no weights (OLMo's non-parametric LayerNorm)
    # Width of the word-embedding table and of the LM head when it differs from `hidden` (OPT-350m's
    # word_embed_proj_dim): an unbiased project_in (width → hidden) follows the lookup (segment `embed`, every
    # new token) and an unbiased project_out (hidden → width) precedes the head (segment `head`, sampled rows)
    embed_width: int | None = None
    # Positions an absolute position table can index (GPT-2's learned n_positions, OPT's max_position_embeddings,
    # CTRL's fixed sinusoidal table): a step whose sequences reach beyond it is refused, as the model cannot run
    # it; None: no such limit
    max_positions: int | None = None
    # Encoder-style LMs and encoder–decoder decoders (builders/encoder_style.py): the token table's rows
    # and width when they differ from vocab / hidden with no implied projections (MusicGen's vocab + 1;
    # ELECTRA's embedding_size, whose biased projections the builder states in the extras), the untied
    # head's input width (RemBERT's output_embedding_size), parallel token tables and heads (MusicGen's
    # num_codebooks) and weights applied to the sampled rows before the head (BERT's
    # cls.predictions.transform: segment `head`, a MATRIX sees one row per sequence)
    embed_rows: int | None = None
    table_width: int | None = None
    head_width: int | None = None
    codebooks: int = 1
    head_extras: tuple[Weight, ...] = ()

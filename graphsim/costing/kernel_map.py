"""From a kernel node of the IR to profile.db keys and batch-dependent coordinates.

`key_for(attrs, ...)` gives the table key of a kernel (model geometry + dtypes only, read from its
typed geometry); `kernel_rows(attrs, steps, dtypes)` converts a kernel once for a whole list of
steps into (key, coordinates) rows — the single conversion that both its time (the pricer) and its
work (`costing.roofline.kernel_work`) are read from. Attention is priced per sequence group of the
step — decode groups as decode points (batch, kv_len), prefill sequences one by one at
(1, q_len, kv_len) — and summed: vLLM's varlen kernel covers the whole ragged batch in one launch,
whose time this sum approximates (prefill attention is compute-bound, so sequences add).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from graphsim.costing import block_sparse, compressed, dsa, gdn, kda, lightning, mamba1, ssm
from graphsim.costing.collectives import NCCL_ROWS, CollectiveContext, plan_steps
from graphsim.costing.dtypes import KernelDtype, PeakClass, parse_kernel_dtype
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.kernels import (
    PP_NETWORK_GROUP, SEND_RECV_NETWORK, AttentionDecodeKey, AttentionPrefillKey, CollectiveKey, CollectiveOp,
    ElementwiseKey, GemmKey, KernelKey, MlaDecodeKey, MlaPrefillKey, MoeKey,
)
from graphsim.costing.moe_routing import BALANCED, RoutingModel
from graphsim.costing.roofline import READS_TAG, attended_pairs
from graphsim.ir.geometry import (
    AttentionGeometry, CollectiveGeometry, Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry,
    IndexerGeometry, LinearAttentionGeometry, MoeExpertsGeometry, MoeRouterGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.meta import GraphMeta
from graphsim.quantization import parse_quant_config
from graphsim.workload import Step


class NoKernelKey(ValueError):
    """A kernel that no profile.db table can hold (its time is reported missing)."""


_COLLECTIVES = {
    KernelKind.ALL_REDUCE: CollectiveOp.ALL_REDUCE, KernelKind.ALL_GATHER: CollectiveOp.ALL_GATHER,
    KernelKind.REDUCE_SCATTER: CollectiveOp.REDUCE_SCATTER, KernelKind.ALL_TO_ALL: CollectiveOp.ALL_TO_ALL,
    KernelKind.SEND_RECV: CollectiveOp.SEND_RECV,
}




@dataclass(frozen=True)
class Dtypes:
    """How IR dtype names become kernel dtypes for one deployment — and the deployment's MoE routing model, the
    other choice a kernel's key and point depend on beyond the graph (`costing.moe_routing`)."""

    kv: KernelDtype = KernelDtype.BF16
    fp8_block: bool = False  # fp8 weights with block scales (e.g. DeepSeek-V3's 128×128)
    routing: RoutingModel = BALANCED  # which MoE rows, at how many tokens (graphsim's default: moe_routing.DEFAULT)
    # no FP4 tensor cores (Hopper and older): vLLM runs FP4 weights on its Marlin W4A16 kernel
    # (quantization/utils/marlin_utils_fp4.py is_fp4_marlin_supported: SM >= 75; modelopt.py MarlinNvFp4LinearKernel)
    fp4_as_w4a16: bool = False

    def of(self, name: str) -> KernelDtype:
        """A kernel dtype; raises NoKernelKey for dtypes no kernel table holds (bool, complex)."""
        if name in ("bool", "c64", "i64", "i32", "i16", "u8"):
            raise NoKernelKey(f"no kernel tables hold {name} kernels")
        if name == "f8e4m3":
            return KernelDtype.FP8_BLOCK if self.fp8_block else KernelDtype.FP8
        if name == "f4":
            return KernelDtype.W4A16_MXFP4 if self.fp4_as_w4a16 else KernelDtype.MXFP4
        dtype = parse_kernel_dtype(name)
        if self.fp4_as_w4a16 and dtype is KernelDtype.NVFP4:
            return KernelDtype.INT4_WO  # 4-bit weights dequantized to 16-bit: the W4A16 rows and peak
        if self.fp4_as_w4a16 and dtype is KernelDtype.MXFP4:
            return KernelDtype.W4A16_MXFP4
        return dtype

    @classmethod
    def for_graph(cls, meta: GraphMeta, kv_dtype: str | None = None, routing: RoutingModel = BALANCED,
                  hardware: HardwareSpec | None = None) -> Dtypes:
        """The KV dtype is `kv_dtype` when given, else the checkpoint's (an fp8 cache from
        kv_cache_quant_algo / kv_cache_scheme: graphsim.quantization), else the model dtype. On `hardware`
        without an FP4 peak, FP4 weights are priced as vLLM's Marlin W4A16 fallback."""
        q = parse_quant_config(meta.quantization_config) if meta.quantization_config is not None else None
        block = q is not None and any(s.kernel_dtype == KernelDtype.FP8_BLOCK.value for s in q.schemes())
        model = meta.model_dtype.value if meta.model_dtype is not None else "bf16"  # other model dtypes price as bf16
        kv = kv_dtype or (q.kv_dtype if q is not None and q.kv_dtype else None) or model
        fp4_fallback = hardware is not None and hardware.peak_flops(PeakClass.FP4) is None
        return cls(kv=parse_kernel_dtype(kv), fp8_block=block, routing=routing, fp4_as_w4a16=fp4_fallback)


@dataclass(frozen=True)
class QuantSummary:
    """What a checkpoint's quantization did to the pricing: its schemes, the kernel dtype whose profile rows
    each GEMM / MoE kernel is keyed on (kernels per dtype), and the KV dtype with where it came from."""

    quantization: str
    gemm_rows: dict[str, int]
    kv: str
    kv_source: str  # "--kv-cache-dtype", "checkpoint" (kv_cache_quant_algo / kv_cache_scheme) or "model dtype"

    def line(self) -> str:
        rows = ", ".join(f"{k} ×{v}" for k, v in sorted(self.gemm_rows.items()))
        return f"quantization {self.quantization}; GEMM/MoE rows keyed on {rows}; KV {self.kv} ({self.kv_source})"


def quantization_summary(kernels: Sequence[KernelAttrs], meta: GraphMeta, dt: Dtypes,
                         kv_given: str | None = None) -> QuantSummary | None:
    """The QuantSummary of a kernel graph; None for an unquantized checkpoint."""
    if meta.quantization_config is None:
        return None
    q = parse_quant_config(meta.quantization_config)
    rows: dict[str, int] = {}
    for a in kernels:
        if a.kind in (KernelKind.GEMM, KernelKind.MOE_EXPERTS):
            name = dt.of(a.dtype).value
            rows[name] = rows.get(name, 0) + 1
    kv_source = "--kv-cache-dtype" if kv_given else ("checkpoint" if q.kv_dtype else "model dtype")
    return QuantSummary(q.describe(), rows, dt.kv.value, kv_source)


def is_mla(a: KernelAttrs) -> bool:
    return isinstance(a.geometry, AttentionGeometry) and a.geometry.is_mla


def key_for(a: KernelAttrs, dt: Dtypes, prefill: bool = True) -> KernelKey:
    """The profile.db key of a kernel. Attention has two (prefill / decode): pick with `prefill`."""
    dtype = dt.of(a.dtype)
    g = a.geometry
    if isinstance(g, GemmGeometry):
        return GemmKey(g.n, g.k, dtype)
    if isinstance(g, AttentionGeometry):
        if g.is_mla:
            rope = g.qk_rope_head_dim
            cls = MlaPrefillKey if prefill else MlaDecodeKey
            return cls(g.num_heads, g.kv_lora_rank, g.head_dim - rope, rope, g.v_head_dim, dtype, dt.kv)
        cls = AttentionPrefillKey if prefill else AttentionDecodeKey
        return cls(g.num_heads, g.num_kv_heads, g.head_dim, dtype, dt.kv, g.window)
    if isinstance(g, MoeExpertsGeometry):
        return MoeKey(g.hidden_size, g.inter_size, g.top_k, g.num_experts, g.tp, g.ep, dtype, dt.routing.table,
                      gated=g.gated)
    if isinstance(g, CollectiveGeometry):
        return CollectiveKey(_COLLECTIVES[a.kind], g.num_gpus, dtype)
    if isinstance(g, IndexerGeometry) and g.block_size:  # MiniMax-M3's block indexer: its prefill scores' key
        return ElementwiseKey(block_sparse.op_name(block_sparse.PREFILL, block_indexer_shape(a)), g.num_heads * g.head_dim,
                              dtype)
    if isinstance(g, IndexerGeometry):  # the prefill logits' key (kernel_rows prices decode and per-token rows too)
        return ElementwiseKey(dsa.op_name(dsa.PREFILL, indexer_shape(a)), g.num_heads * g.head_dim, dtype)
    if is_ssm_scan(a):  # the prefill kernel's key (kernel_rows prices decode and state rows besides)
        return ElementwiseKey(ssm.op_name(ssm.PREFILL, ssm_shape(a)), ssm_shape(a).io_elements, dtype)
    if is_mamba1(a):  # selective_scan_fn's key (kernel_rows prices decode and state rows besides), fp32 math
        shape = mamba1_shape(a)
        return ElementwiseKey(mamba1.op_name(mamba1.PREFILL, shape), shape.io_elements, KernelDtype(mamba1.COMPUTE_DTYPE))
    if is_kda(a):  # chunk_kda's key (kernel_rows prices fused_recurrent_kda and state rows besides)
        return ElementwiseKey(kda.op_name(kda.PREFILL, kda_shape(a)), kda_shape(a).io_elements, dtype)
    if is_gdn(a):  # chunk_gated_delta_rule's key (kernel_rows prices the decode and state rows besides)
        return ElementwiseKey(gdn.op_name(gdn.PREFILL, gdn_shape(a)), gdn_shape(a).io_elements, dtype)
    if is_lightning(a):  # lightning_attention's key (kernel_rows prices decode and state rows besides)
        shape = lightning_shape(a)
        return ElementwiseKey(lightning.op_name(lightning.PREFILL, shape), shape.heads * shape.head_dim, dtype)
    return ElementwiseKey(elementwise_op(a), per_token_width(a), dtype)


def per_token_width(a: KernelAttrs) -> int:
    """Elements each token reads or writes in a per-token kernel (the key's `width`)."""
    g = a.geometry
    if isinstance(g, RotaryGeometry):
        return (g.num_heads + g.num_kv_heads) * g.rot_dim
    if isinstance(g, LinearAttentionGeometry):
        return g.num_v_heads * g.v_head_dim
    if isinstance(g, MoeRouterGeometry):
        return g.num_experts
    if isinstance(g, Conv1dGeometry):
        return g.channels
    if isinstance(g, ElementwiseGeometry):
        # reductions read more per token than they write: key them on the wider side
        return max(g.width, g.in_width or 0)
    if isinstance(g, (NormGeometry, EmbeddingGeometry)):
        return g.width
    raise KeyError(f"kernel {a.name} ({a.kind.value}) has no per-token width")


def elementwise_op(a: KernelAttrs) -> str:
    """The key's op name; a norm over a vector shorter than the token (per-head q/k norms) says
    its vector length, since it runs more, shorter reductions than a norm over the hidden size."""
    g = a.geometry
    if isinstance(g, NormGeometry) and g.dim != g.width:
        return f"{a.name}/dim{g.dim}"
    if isinstance(g, ElementwiseGeometry) and g.reads is not None and g.reads != 1:
        return f"{a.name}{READS_TAG}{g.reads}"  # reads `reads` tensors of its width (roofline.kernel_work)
    return a.name


# --- one conversion per kernel: (key, coordinates) rows for a list of steps -------------------
@dataclass(frozen=True)
class StepArrays:
    """Steps as arrays: per step its tokens and sequences; per sequence group (all steps, in order)
    its step, new tokens, cached tokens and count."""

    tokens: np.ndarray
    seqs: np.ndarray
    g_step: np.ndarray
    g_new: np.ndarray
    g_cached: np.ndarray
    g_count: np.ndarray

    @classmethod
    def of(cls, steps: Sequence[Step]) -> StepArrays:
        gb, gn, gc, gk = [], [], [], []
        for b, s in enumerate(steps):
            for g in s.groups:
                gb.append(b)
                gn.append(g.new_tokens)
                gc.append(g.cached_tokens)
                gk.append(g.count)
        return cls(np.asarray([s.tokens for s in steps], dtype=np.float64),
                   np.asarray([s.sequences for s in steps], dtype=np.float64),
                   np.asarray(gb, dtype=np.int64), np.asarray(gn, dtype=np.float64),
                   np.asarray(gc, dtype=np.float64), np.asarray(gk, dtype=np.float64))

    @property
    def n_steps(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class KeyRows:
    """Rows of one profile.db key: coordinates (N, d) in the key's point field order, the step each
    row belongs to, and `order`, which sorts a kernel's rows of one step into point order."""

    key: KernelKey
    coords: np.ndarray
    step: np.ndarray
    order: np.ndarray
    note: str = ""  # how the key was chosen (a collective's implementation and rows), shown with its time
    weight: float = 1.0  # what each row's time counts for in the kernel's (a routing corpus's load bins: shares)


@dataclass(frozen=True)
class KernelRows:
    """A kernel's rows for a list of steps: its time (or work) in step b is the sum over its rows of
    step b. No rows and a `missing` reason when no profile.db table holds the kernel."""

    parts: tuple[KeyRows, ...] = ()
    missing: str = ""
    # rows whose per-step sum the time never falls below (a lower bound priced from other rows: a composite MLA
    # chunk after a cached prefix is never cheaper than the same chunk without one, composite.py); () for none
    floor: tuple[KeyRows, ...] = ()
    # per step, attention FLOPs the floor adds at the fastest attention rate measured on the GPU (a composite MLA
    # chunk's non-causal attention over its cached prefix, composite.py `context_attention_rate`); None for none
    floor_attention_flops: np.ndarray | None = field(default=None, compare=False)

    def sum_by_step(self, values: Sequence[np.ndarray], n_steps: int) -> np.ndarray:
        """Σ of per-row `values` (one array per part, aligned with its rows) for each step, added in
        point order (decode and prefill groups as the step lists them)."""
        out = np.zeros(n_steps)
        if not self.parts:
            return out
        v = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1) * p.weight
                            for x, p in zip(values, self.parts, strict=True)])
        step = np.concatenate([p.step for p in self.parts])
        idx = np.argsort(np.concatenate([p.order for p in self.parts]), kind="stable")
        np.add.at(out, step[idx], v[idx])
        return out

    def note(self, step: int) -> str:
        """The notes of the parts that price step `step` ('' when none has one)."""
        return "; ".join(dict.fromkeys(p.note for p in self.parts if p.note and np.any(p.step == step)))


def kernel_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes, coll: CollectiveContext | None = None) -> KernelRows:
    """The (key, coordinates) rows of kernel `a` for the steps in `arr` (see the module docstring). A collective's
    key names the implementation vLLM runs for each step's message (`costing.collectives.plan_collective` with
    `coll`; without it, NCCL rows of the kernel's dtype)."""
    try:
        if a.kind is KernelKind.ATTENTION and a.geometry_as(AttentionGeometry).kv_entry_bytes:
            return _compressed_attention_rows(a, arr, dt)
        if a.kind is KernelKind.SPARSE_INDEXER and a.geometry_as(IndexerGeometry).block_size:
            return _block_indexer_rows(a, arr, dt)
        if a.kind is KernelKind.ATTENTION and a.geometry_as(AttentionGeometry).index_topk and not is_mla(a):
            return _block_sparse_attention_rows(a, arr, dt)
        if a.kind is KernelKind.SPARSE_INDEXER and a.geometry_as(IndexerGeometry).compress_ratio:
            return _indexer_rows(a, arr, dt, a.geometry_as(IndexerGeometry).compress_ratio)
        if a.kind is KernelKind.ATTENTION and a.geometry_as(AttentionGeometry).index_topk:
            return _sparse_attention_rows(a, key_for(a, dt, prefill=False), arr, dt)
        if a.kind is KernelKind.SPARSE_INDEXER:
            return _indexer_rows(a, arr, dt)
        if a.kind is KernelKind.ATTENTION:
            return _attention_rows(key_for(a, dt, prefill=False), key_for(a, dt, prefill=True), arr)
        if is_ssm_scan(a):
            return _ssm_rows(a, arr, dt)
        if is_mamba1(a):
            return _mamba1_rows(a, arr, dt)
        if is_kda(a):
            return _kda_rows(a, arr, dt)
        if is_gdn(a):
            return _gdn_rows(a, arr, dt)
        if is_lightning(a):
            return _lightning_rows(a, arr, dt)
        key = key_for(a, dt)
    except NoKernelKey as e:  # e.g. a bool mask op of the eager target: reported missing
        return KernelRows(missing=str(e))
    n_b = arr.n_steps
    rows = arr.seqs if a.rows is Rows.SEQUENCES else np.ones(n_b) if a.rows is Rows.ONCE else arr.tokens
    steps = np.arange(n_b)
    if isinstance(a.geometry, MoeExpertsGeometry) and dt.routing.loads:
        # a routing corpus: per load bin, the balanced rows at the busiest expert's load, weighted (moe_routing)
        return KernelRows(tuple(KeyRows(key, np.ceil(rows * ratio).reshape(-1, 1), steps, steps, weight=share)
                                for ratio, share in dt.routing.loads))
    if a.kind is KernelKind.SEND_RECV and isinstance(a.geometry, CollectiveGeometry) and isinstance(key, CollectiveKey):
        # a pipeline hop (costing/pipeline.py): vLLM's send_tensor_dict runs torch.distributed / NCCL send-recv
        # between two GPUs; across nodes (its group says so) on the network
        net = a.geometry.group == PP_NETWORK_GROUP
        hop = CollectiveKey(CollectiveOp.SEND_RECV, 2, key.dtype, SEND_RECV_NETWORK if net else NCCL_ROWS)
        note = f"NCCL send/recv between pipeline stages, {'across nodes (network)' if net else 'inside a node (link)'}"
        return KernelRows((KeyRows(hop, np.maximum(1, rows * a.geometry.bytes_per_row).reshape(-1, 1), steps, steps,
                                   note),))
    if isinstance(a.geometry, CollectiveGeometry) and isinstance(key, CollectiveKey):
        return _collective_rows(key, np.maximum(1, rows * a.geometry.bytes_per_row), arr.tokens, coll)
    return KernelRows((KeyRows(key, rows.reshape(-1, 1), steps, steps),))


def is_ssm_scan(a: KernelAttrs) -> bool:
    """A Mamba2 scan kernel (priced per decode token, prefill token and prefill sequence: costing/ssm.py)."""
    return isinstance(a.geometry, LinearAttentionGeometry) and a.geometry.kind == "mamba2_ssd"


def ssm_shape(a: KernelAttrs) -> ssm.SsmShape:
    g = a.geometry_as(LinearAttentionGeometry)
    return ssm.SsmShape(heads=g.num_v_heads, head_dim=g.v_head_dim, state=g.k_head_dim, groups=g.num_k_heads,
                        chunk=g.chunk_size or ssm.DEFAULT_CHUNK, state_dtype=g.state_dtype or a.dtype)


def _ssm_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Decode tokens on selective_state_update, prefill tokens on the chunked scan, and each prefill sequence's
    state read and written once (costing/ssm.py): one part each, for the steps that have such rows."""
    shape, dtype = ssm_shape(a), dt.of(a.dtype)
    per_step = _recurrent_rows_per_step(arr, ssm.DECODE, ssm.PREFILL, ssm.PREFILL_STATE)
    return _elementwise_parts(per_step, lambda kernel: ElementwiseKey(
        ssm.op_name(kernel, shape), shape.state_elements if kernel == ssm.PREFILL_STATE else shape.io_elements, dtype))


def _recurrent_rows_per_step(arr: StepArrays, decode: str, prefill: str, prefill_state: str) -> dict[str, np.ndarray]:
    """A recurrent mixer's rows per step (Mamba2 scan, lightning attention): its decode tokens, its prefill tokens,
    and each prefill sequence's state read and written once."""
    n_b, dec = arr.n_steps, arr.g_new == 1
    return {
        decode: np.bincount(arr.g_step[dec], weights=arr.g_count[dec], minlength=n_b),
        prefill: np.bincount(arr.g_step[~dec], weights=(arr.g_new * arr.g_count)[~dec], minlength=n_b),
        prefill_state: np.bincount(arr.g_step[~dec], weights=arr.g_count[~dec], minlength=n_b),
    }


def _elementwise_parts(per_step: dict[str, np.ndarray], key_of: Callable[[str], ElementwiseKey]) -> KernelRows:
    """One part per kernel of `per_step` (kernel → its rows in each step) on the key `key_of(kernel)`, for the steps
    that have rows."""
    parts = []
    for kernel, rows in per_step.items():
        steps = np.flatnonzero(rows > 0)
        if len(steps):
            parts.append(KeyRows(key_of(kernel), rows[steps].reshape(-1, 1), steps, steps))
    return KernelRows(tuple(parts))


def is_mamba1(a: KernelAttrs) -> bool:
    """A Mamba-1 selective scan (priced per decode token, prefill token and prefill sequence: costing/mamba1.py)."""
    return isinstance(a.geometry, LinearAttentionGeometry) and a.geometry.kind == "mamba1"


def mamba1_shape(a: KernelAttrs) -> mamba1.Mamba1Shape:
    g = a.geometry_as(LinearAttentionGeometry)  # channels as v heads of one value, the state as k_head_dim
    return mamba1.Mamba1Shape(channels=g.num_v_heads * g.v_head_dim, state=g.k_head_dim,
                              state_dtype=g.state_dtype or a.dtype, act_dtype=a.dtype)


def _mamba1_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Decode tokens on selective_state_update, prefill tokens on selective_scan_fn, and each prefill sequence's
    state read and written once (costing/mamba1.py), keyed at fp32: the kernels' math dtype (the io dtype is in
    the op name)."""
    shape, dtype = mamba1_shape(a), KernelDtype(mamba1.COMPUTE_DTYPE)
    per_step = _recurrent_rows_per_step(arr, mamba1.DECODE, mamba1.PREFILL, mamba1.PREFILL_STATE)
    return _elementwise_parts(per_step, lambda kernel: ElementwiseKey(
        mamba1.op_name(kernel, shape), shape.state_elements if kernel == mamba1.PREFILL_STATE else shape.io_elements,
        dtype))


def is_kda(a: KernelAttrs) -> bool:
    """A Kimi Delta Attention kernel (priced per decode token, prefill-step token and sequence: costing/kda.py)."""
    return isinstance(a.geometry, LinearAttentionGeometry) and a.geometry.kind == "kda"


def kda_shape(a: KernelAttrs) -> kda.KdaShape:
    g = a.geometry_as(LinearAttentionGeometry)
    return kda.KdaShape(heads=g.num_v_heads, k_dim=g.k_head_dim, v_dim=g.v_head_dim,
                        chunk=g.chunk_size or kda.DEFAULT_CHUNK, state_dtype=g.state_dtype or "f32")


def _kda_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """fused_recurrent_kda rows in decode-only steps; chunk_kda rows for every token and state rows for every
    sequence of a step with a prefill (costing/kda.py rows_per_step)."""
    shape, dtype = kda_shape(a), dt.of(a.dtype)
    return _elementwise_parts(kda.rows_per_step(arr.g_step, arr.g_new, arr.g_count, arr.n_steps), lambda kernel: (
        ElementwiseKey(kda.op_name(kernel, shape),
                       shape.state_elements if kernel == kda.PREFILL_STATE else shape.io_elements, dtype)))


def block_indexer_shape(a: KernelAttrs) -> block_sparse.BlockIndexerShape:
    g = a.geometry_as(IndexerGeometry)
    return block_sparse.BlockIndexerShape(g.num_heads, g.head_dim, g.block_size, g.topk)


def _block_indexer_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """MiniMax-M3's block indexer (costing/block_sparse.py): its scores over every earlier index key, per (query,
    key) pair of prefill and of decode queries, and its per-token work."""
    shape = block_indexer_shape(a)
    pairs = dsa.causal_pairs(arr.g_new, arr.g_cached) * arr.g_count
    return _scored_pair_rows(arr, pairs, (block_sparse.PREFILL, block_sparse.DECODE, block_sparse.TOKENS),
                             lambda kernel: block_sparse.op_name(kernel, shape), shape.heads * shape.head_dim,
                             dt.of(a.dtype))


def _scored_pair_rows(arr: StepArrays, pairs: np.ndarray, kernels: tuple[str, str, str],
                      op_name: Callable[[str], str], width: int, dtype: KernelDtype) -> KernelRows:
    """An indexer's rows (DSA's, V4's compressed one, MiniMax-M3's block indexer): each step's scored (query, key)
    pairs of prefill queries and of decode queries, and its tokens (the per-token work), as elementwise rows of
    `op_name(kernel)` for the (prefill, decode, tokens) `kernels`."""
    dec = arr.g_new == 1
    prefill, decode, tokens = kernels
    per_step = {
        prefill: np.bincount(arr.g_step[~dec], weights=pairs[~dec], minlength=arr.n_steps),
        decode: np.bincount(arr.g_step[dec], weights=pairs[dec], minlength=arr.n_steps),
        tokens: arr.tokens,
    }
    return _elementwise_parts(per_step, lambda kernel: ElementwiseKey(op_name(kernel), width, dtype))


def _block_sparse_attention_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """GQA over each query's picked key blocks, at most `index_topk` keys (costing/block_sparse.py): decode groups
    on the dense decode key at min(context, index_topk) keys, prefill sequences on the prefill key with
    index_topk as its window."""
    g = a.geometry_as(AttentionGeometry)
    dtype, cap = dt.of(a.dtype), g.index_topk
    decode_key = AttentionDecodeKey(g.num_heads, g.num_kv_heads, g.head_dim, dtype, dt.kv, g.window)
    prefill_key = AttentionPrefillKey(g.num_heads, g.num_kv_heads, g.head_dim, dtype, dt.kv, cap)
    cached = np.where(arr.g_new == 1, np.minimum(arr.g_cached, cap - 1), arr.g_cached)
    clipped = StepArrays(arr.tokens, arr.seqs, arr.g_step, arr.g_new, cached, arr.g_count)
    return _attention_rows(decode_key, prefill_key, clipped)


def is_gdn(a: KernelAttrs) -> bool:
    """A gated delta rule (Qwen3-Next / Qwen3.5 gated DeltaNet: per decode token, prefill-step token and
    sequence: costing/gdn.py)."""
    return isinstance(a.geometry, LinearAttentionGeometry) and a.geometry.kind == "gated_delta_rule"


def gdn_shape(a: KernelAttrs) -> gdn.GdnShape:
    """The state dtype: the geometry's, else the activation dtype (vLLM's mamba_ssm_cache_dtype "auto":
    MambaStateDtypeCalculator.gated_delta_net_state_dtype takes the conv-state, i.e. model, dtype)."""
    g = a.geometry_as(LinearAttentionGeometry)
    return gdn.GdnShape(heads=g.num_v_heads, k_heads=g.num_k_heads, k_dim=g.k_head_dim, v_dim=g.v_head_dim,
                        chunk=g.chunk_size or gdn.DEFAULT_CHUNK, state_dtype=g.state_dtype or a.dtype)


def _gdn_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """fused_recurrent rows in decode-only steps; chunk_gated_delta_rule rows for every token and state rows for
    every sequence of a step with a prefill (costing/gdn.py rows_per_step)."""
    shape, dtype = gdn_shape(a), dt.of(a.dtype)
    return _elementwise_parts(gdn.rows_per_step(arr.g_step, arr.g_new, arr.g_count, arr.n_steps), lambda kernel: (
        ElementwiseKey(gdn.op_name(kernel, shape),
                       shape.state_elements if kernel == gdn.PREFILL_STATE else shape.io_elements, dtype)))


def is_lightning(a: KernelAttrs) -> bool:
    """MiniMax-Text-01's lightning attention (per decode token, prefill token and prefill sequence: costing/lightning.py)."""
    return isinstance(a.geometry, LinearAttentionGeometry) and a.geometry.kind == "lightning"


def lightning_shape(a: KernelAttrs) -> lightning.LightningShape:
    g = a.geometry_as(LinearAttentionGeometry)
    return lightning.LightningShape(g.num_v_heads, g.v_head_dim, g.chunk_size or lightning.DEFAULT_BLOCK,
                                    g.state_dtype or a.dtype)


def _lightning_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Decode tokens on linear_decode_forward_triton, prefill tokens on lightning_attention and each prefill
    sequence's state read and written once (vLLM linear_attn.py _prefill_and_mix_infer runs both in one step)."""
    shape, dtype = lightning_shape(a), dt.of(a.dtype)
    per_step = _recurrent_rows_per_step(arr, lightning.DECODE, lightning.PREFILL, lightning.PREFILL_STATE)
    return _elementwise_parts(per_step, lambda kernel: ElementwiseKey(
        lightning.op_name(kernel, shape),
        shape.state_elements if kernel == lightning.PREFILL_STATE else shape.heads * shape.head_dim, dtype))


def indexer_shape(a: KernelAttrs) -> dsa.IndexerShape:
    g = a.geometry_as(IndexerGeometry)
    return dsa.IndexerShape(g.num_heads, g.head_dim, g.topk)


def _indexer_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes, ratio: int = 0) -> KernelRows:
    """DSA's indexer (costing/dsa.py): its logits over every earlier key, per (query, key) pair of prefill and of
    decode queries, and its per-token work. Over compressed keys (`ratio`, DeepSeek-V4: costing/compressed.py)
    the pairs are each query's visible entries, Σ ⌊(t + 1)/m⌋."""
    shape = indexer_shape(a)
    if ratio:
        pairs = compressed.compressed_pairs(arr.g_new, arr.g_cached, ratio) * arr.g_count
    else:
        pairs = dsa.causal_pairs(arr.g_new, arr.g_cached) * arr.g_count
    return _scored_pair_rows(arr, pairs, (dsa.PREFILL, dsa.DECODE, dsa.TOKENS), lambda kernel: dsa.op_name(kernel, shape),
                             shape.heads * shape.head_dim, dt.of(a.dtype))


def _sparse_attention_rows(a: KernelAttrs, decode_key: KernelKey, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Sparse (DSA) MLA, absorbed for every query over min(context, top-k) keys (costing/dsa.py): decode groups
    on the MLA decode key at that key count; prefill queries as pairs, tokens and each sequence's keys read once."""
    g = a.geometry_as(AttentionGeometry)
    topk, parts = g.index_topk, []
    dec = arr.g_new == 1
    if dec.any():
        coords = np.stack([arr.g_count[dec], np.minimum(arr.g_cached[dec] + 1, topk)], axis=1)
        parts.append(KeyRows(decode_key, coords, arr.g_step[dec], np.flatnonzero(dec)))
    pre = ~dec
    if pre.any():
        step = arr.g_step[pre]
        pairs = attended_pairs(arr.g_new[pre], arr.g_cached[pre] + arr.g_new[pre], topk) * arr.g_count[pre]
        per_step = {
            dsa.ATTN_PAIRS: np.bincount(step, weights=pairs, minlength=arr.n_steps),
            dsa.ATTN_TOKENS: np.bincount(step, weights=(arr.g_new * arr.g_count)[pre], minlength=arr.n_steps),
            dsa.ATTN_KEYS: np.bincount(step, weights=((arr.g_cached + arr.g_new) * arr.g_count)[pre],
                                       minlength=arr.n_steps),
        }
        for kernel, rows in per_step.items():
            steps = np.flatnonzero(rows > 0)
            if len(steps):
                op = dsa.attention_op_name(kernel, g.num_heads, g.kv_lora_rank, g.qk_rope_head_dim, topk)
                key = ElementwiseKey(op, g.num_heads * g.kv_lora_rank, dt.kv if kernel == dsa.ATTN_KEYS else dt.of(a.dtype))
                parts.append(KeyRows(key, rows[steps].reshape(-1, 1), steps, steps))
    return KernelRows(tuple(parts))


def _compressed_attention_rows(a: KernelAttrs, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Compressed-KV attention (costing/compressed.py): per step its (query, key) pairs over the sliding window
    and the compressed entries, the keys read (a decode query its own; a prefill sequence its window and entries
    once) and its query tokens."""
    g = a.geometry_as(AttentionGeometry)
    n, p, c = arr.g_new, arr.g_cached, arr.g_count
    pairs = compressed.sliding_pairs(n, p, g.window)
    if g.compress_ratio:
        pairs = pairs + compressed.compressed_pairs(n, p, g.compress_ratio, g.index_topk)
    dec = n == 1
    entries = (p + n) // g.compress_ratio if g.compress_ratio else np.zeros_like(p)
    gathered = (np.minimum(p, max(g.window - 1, 0)) if g.window else p) + n + entries
    keys = np.where(dec, pairs, gathered)
    per_step = {
        compressed.ATTN_PAIRS: np.bincount(arr.g_step, weights=pairs * c, minlength=arr.n_steps),
        compressed.ATTN_KEYS: np.bincount(arr.g_step, weights=keys * c, minlength=arr.n_steps),
        compressed.ATTN_TOKENS: np.bincount(arr.g_step, weights=n * c, minlength=arr.n_steps),
    }
    parts = []
    for kernel, rows in per_step.items():
        steps = np.flatnonzero(rows > 0)
        if len(steps):
            op = compressed.attention_op(kernel, g.num_heads, g.head_dim, g.kv_entry_bytes)
            key = ElementwiseKey(op, g.num_heads * g.head_dim, dt.kv if kernel == compressed.ATTN_KEYS else dt.of(a.dtype))
            parts.append(KeyRows(key, rows[steps].reshape(-1, 1), steps, steps))
    return KernelRows(tuple(parts))


def _collective_rows(key: CollectiveKey, nbytes: np.ndarray, tokens: np.ndarray,
                     coll: CollectiveContext | None) -> KernelRows:
    """One part per implementation and rows the steps' messages are priced with (see `plan_steps`)."""
    parts = [KeyRows(plan.key, nbytes[steps].reshape(-1, 1), steps, steps, plan.note)
             for plan, steps in plan_steps(key.op, key.num_gpus, key.dtype, nbytes, tokens, coll)]
    return KernelRows(tuple(parts))


def _attention_rows(decode_key: KernelKey, prefill_key: KernelKey, arr: StepArrays) -> KernelRows:
    """One decode point (batch, kv_len) per decode group; one prefill point (1, q_len, kv_len) per
    prefill sequence."""
    parts = []
    group = np.arange(len(arr.g_step))
    dec = arr.g_new == 1
    if dec.any():
        coords = np.stack([arr.g_count[dec], arr.g_cached[dec] + 1], axis=1)
        parts.append(KeyRows(decode_key, coords, arr.g_step[dec], group[dec]))
    pre = ~dec
    if pre.any():
        # one point per prefill sequence: repeat each group's row `count` times
        reps = arr.g_count[pre].astype(np.int64)
        coords = np.stack([np.ones(int(reps.sum())), np.repeat(arr.g_new[pre], reps),
                           np.repeat(arr.g_cached[pre] + arr.g_new[pre], reps)], axis=1)
        parts.append(KeyRows(prefill_key, coords, np.repeat(arr.g_step[pre], reps), np.repeat(group[pre], reps)))
    return KernelRows(tuple(parts))

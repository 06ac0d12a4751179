"""Roofline times from a hardware spec: max(flops / peak, bytes / bandwidth) per kernel.

`kernel_work` gives the FLOPs and DRAM bytes a kernel must move at least (per rank), from its
key and points; `roofline_us` turns them into microseconds. Collectives are priced on the
interconnect instead: latency + bus bytes / link bandwidth (the network's where a group spans nodes). All functions take point coordinates
as an (N, d) array (d in the point class's field order) and return arrays, so a CostTree can price
many batches at once. These are lower-bound estimates, marked `roofline`, never `measured`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphsim.costing import block_sparse, compressed, dsa, gdn, kda, lightning, mamba1, ssm
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.kernels import (
    SEND_RECV_NETWORK, AttentionDecodeKey, AttentionPrefillKey, CollectiveKey, CollectiveOp, DsaModuleDecodeKey,
    DsaModulePrefillKey, ElementwiseKey, GemmKey, KernelKey, MlaDecodeKey, MlaModuleDecodeKey, MlaModulePrefillKey,
    MlaPrefillKey, MoeKey,
)
from graphsim.costing.network import network_steps, tree_allreduce_seconds_per_byte, tree_network_steps


@dataclass(frozen=True)
class KernelWork:
    """Per-point FLOPs and bytes (arrays of shape (N,))."""

    flops: np.ndarray
    bytes: np.ndarray


def _out_bytes(dtype: KernelDtype) -> float:
    return 4.0 if dtype is KernelDtype.FP32 else 2.0


def _gemm(m: np.ndarray, n: float, k: float, dtype: KernelDtype) -> KernelWork:
    flops = 2.0 * m * n * k
    nbytes = m * k * dtype.activation_bytes + k * n * dtype.weight_bytes + m * n * _out_bytes(dtype)
    return KernelWork(flops, nbytes)


def attended_pairs(q_len: np.ndarray, kv_len: np.ndarray, window: int) -> np.ndarray:
    """Query-key pairs of causal attention per sequence: query i of q_len (absolute position
    p = kv_len - q_len + i) sees min(p + 1, window) keys (window 0 = unbounded)."""
    q = q_len.astype(np.float64)
    kv = np.maximum(kv_len.astype(np.float64), q)
    prefix = kv - q
    pairs = q * prefix + q * (q + 1) / 2
    if window > 0:
        # subtract sum over positions p in [prefix, kv-1] of max(0, p + 1 - window)
        lo = np.maximum(prefix, window)  # first p with p + 1 - window > 0
        cnt = np.maximum(kv - lo, 0)
        first = lo + 1 - window
        pairs = pairs - cnt * first - cnt * (cnt - 1) / 2
    return pairs


def _attention(batch, q_len, kv_len, heads, kv_heads, qk_dim, v_dim, kv_row_bytes, window, dtype, kv_dtype) -> KernelWork:
    pairs = attended_pairs(q_len, kv_len, window)
    flops = 2.0 * batch * heads * pairs * (qk_dim + v_dim)
    keys_read = np.minimum(kv_len, window) if window > 0 else kv_len
    q_o_bytes = batch * q_len * heads * (qk_dim + v_dim) * dtype.activation_bytes
    kv_bytes = batch * keys_read * kv_row_bytes * kv_dtype.activation_bytes * kv_heads
    return KernelWork(flops, q_o_bytes + kv_bytes)


def _moe(tokens: np.ndarray, key: MoeKey) -> KernelWork:
    inter_rank = key.inter_size / key.tp
    pairs = tokens * key.topk / key.ep  # token-expert pairs this rank computes (even spread)
    mats = key.matrices  # gate + up + down, or up + down for a non-gated activation (MoeKey.gated)
    flops = 2.0 * pairs * mats * key.hidden_size * inter_rank
    local = key.num_experts / key.ep
    touched = local * (1 - (1 - 1 / key.num_experts) ** (tokens * key.topk))  # expected distinct experts
    weight_bytes = touched * mats * key.hidden_size * inter_rank * key.dtype.weight_bytes
    # the token in and out (2 · hidden), and the intermediates: the first GEMM's output (2 · inter gated, inter
    # not) and the activation's output (inter): matrices · inter either way
    act_bytes = pairs * (2 * key.hidden_size + mats * inter_rank) * key.dtype.activation_bytes
    return KernelWork(flops, weight_bytes + act_bytes)


READS_TAG = "/r"  # an elementwise key's op `name/r<n>`: the kernel reads n tensors of its width, writes one


def elementwise_reads(op: str) -> int:
    """Tensors of the key's width an elementwise kernel reads: n for `name/r<n>`, else one."""
    head, sep, tail = op.rpartition(READS_TAG)
    return int(tail) if sep and head and tail.isdigit() else 1


def kernel_work(key: KernelKey, coords: np.ndarray) -> KernelWork | None:
    """FLOPs and bytes for `key` at points `coords` (N, d); None for collectives (see
    `collective_roofline_us`)."""
    c = np.asarray(coords, dtype=np.float64).reshape(-1, len(key.POINT.__dataclass_fields__))
    if isinstance(key, GemmKey):
        return _gemm(c[:, 0], key.n, key.k, key.dtype)
    if isinstance(key, AttentionPrefillKey):
        return _attention(c[:, 0], c[:, 1], c[:, 2], key.num_heads, key.num_kv_heads, key.head_dim,
                          key.head_dim, 2 * key.head_dim, key.window, key.dtype, key.kv_dtype)
    if isinstance(key, AttentionDecodeKey):
        return _attention(c[:, 0], np.ones(len(c)), c[:, 1], key.num_heads, key.num_kv_heads, key.head_dim,
                          key.head_dim, 2 * key.head_dim, key.window, key.dtype, key.kv_dtype)
    if isinstance(key, (DsaModulePrefillKey, DsaModuleDecodeKey)):
        return _dsa_module(c, key)
    if isinstance(key, (MlaPrefillKey, MlaModulePrefillKey)):
        # prefill runs un-absorbed: per-head K of nope+rope dims and V of v dims, from the latent cache
        work = _attention(c[:, 0], c[:, 1], c[:, 2], key.num_heads, 1, key.qk_nope_head_dim + key.qk_rope_head_dim,
                          key.v_head_dim, key.kv_lora_rank + key.qk_rope_head_dim, 0, key.dtype, key.kv_dtype)
        tokens = c[:, 0] * c[:, 1]
        return _with_mla_projections(work, tokens, key) if isinstance(key, MlaModulePrefillKey) else work
    if isinstance(key, (MlaDecodeKey, MlaModuleDecodeKey)):
        # decode runs absorbed: every head attends over the shared latent (kv_lora_rank + rope)
        work = _attention(c[:, 0], np.ones(len(c)), c[:, 1], key.num_heads, 1, key.kv_lora_rank + key.qk_rope_head_dim,
                          key.kv_lora_rank, key.kv_lora_rank + key.qk_rope_head_dim, 0, key.dtype, key.kv_dtype)
        return _with_mla_projections(work, c[:, 0], key) if isinstance(key, MlaModuleDecodeKey) else work
    if isinstance(key, MoeKey):
        return _moe(c[:, 0], key)
    if isinstance(key, ElementwiseKey):
        scan = ssm.work(key.op, c[:, 0], key.dtype.activation_bytes)  # Mamba2 scan rows (costing/ssm.py)
        if scan is None:
            scan = kda.work(key.op, c[:, 0], key.dtype.activation_bytes)  # Kimi Delta Attention rows (costing/kda.py)
        if scan is None:  # gated delta rule rows (costing/gdn.py)
            scan = gdn.work(key.op, c[:, 0], key.dtype.activation_bytes)
        if scan is None:  # Mamba-1 selective scan rows (costing/mamba1.py)
            scan = mamba1.work(key.op, c[:, 0])
        if scan is None:
            scan = dsa.work(key.op, c[:, 0])  # DSA indexer rows (costing/dsa.py)
        if scan is None:  # MiniMax-M3's block indexer rows (costing/block_sparse.py)
            scan = block_sparse.work(key.op, c[:, 0], key.dtype.activation_bytes)
        if scan is None:  # MiniMax-Text-01's lightning attention rows (costing/lightning.py)
            scan = lightning.work(key.op, c[:, 0])
        if scan is None:
            scan = dsa.attention_work(key.op, c[:, 0], key.dtype.activation_bytes)  # DSA sparse MLA prefill rows
        if scan is None:  # compressed-KV attention, its compressor, hyper-connections (costing/compressed.py)
            scan = compressed.work(key.op, c[:, 0], key.dtype.activation_bytes)
        if scan is not None:
            return KernelWork(*scan)
        # read once, write once; an op reading several tensors of its width (`name/r<n>`, kernel_map.elementwise_op:
        # a binary add / sub / mul of two token tensors, n = 2) reads n and writes one
        nbytes = (elementwise_reads(key.op) + 1.0) * c[:, 0] * key.width * key.dtype.activation_bytes
        return KernelWork(np.zeros(len(c)), nbytes)
    return None


def _dsa_module(c: np.ndarray, key: DsaModulePrefillKey | DsaModuleDecodeKey) -> KernelWork:
    """A DSA module (prefill (batch, q, kv) or decode (batch, kv)): the sparse MLA runs absorbed (every head over
    the shared latent) and each query attends to at most `index_topk` keys, as many pairs as a window of that many;
    the indexer scores every earlier key, 2 · index heads · index head dim FLOPs a pair (costing/dsa.py); plus the
    MLA projections."""
    decode = isinstance(key, DsaModuleDecodeKey)
    batch, kv = c[:, 0], c[:, -1]
    q = np.ones(len(c)) if decode else c[:, 1]
    lat = key.kv_lora_rank + key.qk_rope_head_dim
    work = _attention(batch, q, kv, key.num_heads, 1, lat, key.kv_lora_rank, lat, key.index_topk, key.dtype,
                      key.kv_dtype)
    index_flops = 2.0 * batch * attended_pairs(q, kv, 0) * key.index_n_heads * key.index_head_dim
    work = KernelWork(work.flops + index_flops, work.bytes)
    return _with_mla_projections(work, batch * q, key)


def _with_mla_projections(work: KernelWork, tokens: np.ndarray, key: MlaModulePrefillKey | MlaModuleDecodeKey) -> KernelWork:
    h, r = key.hidden_size, key.kv_lora_rank
    qk = key.qk_nope_head_dim + key.qk_rope_head_dim
    shapes = [(h, r + key.qk_rope_head_dim), (key.num_heads * key.v_head_dim, h)]  # kv_a, o_proj as (k, n)
    if key.q_lora_rank:
        shapes += [(h, key.q_lora_rank), (key.q_lora_rank, key.num_heads * qk)]
    else:
        shapes += [(h, key.num_heads * qk)]
    shapes += [(r, key.num_heads * (key.qk_nope_head_dim + key.v_head_dim))]  # kv_b
    flops, nbytes = work.flops.copy(), work.bytes.copy()
    for k, n in shapes:
        g = _gemm(tokens, n, k, key.gemm_dtype)
        flops += g.flops
        nbytes += g.bytes
    return KernelWork(flops, nbytes)


_BUS_FACTOR = {
    CollectiveOp.ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    CollectiveOp.ALL_GATHER: lambda n: (n - 1) / n,
    CollectiveOp.REDUCE_SCATTER: lambda n: (n - 1) / n,
    CollectiveOp.ALL_TO_ALL: lambda n: (n - 1) / n,
    CollectiveOp.SEND_RECV: lambda n: 1.0,  # the whole message crosses one link (nccl-tests: SendRecv busBw = algBw)
}


def collective_roofline_us(spec: HardwareSpec, key: CollectiveKey, coords: np.ndarray) -> np.ndarray | None:
    """Ring-algorithm estimate on the spec's topology (`HardwareSpec.topology`): latency + bus factor × message
    bytes / per-direction bandwidth (NCCL's bus-bandwidth convention, nccl-tests doc/PERFORMANCE.md).

    Inside one node every hop runs on the node's link. A group spanning nodes (more GPUs than
    `gpus_per_node`) runs its ring through the network, whose hop is the slowest: every byte of the ring
    passes it, at one GPU's network bandwidth, and the latency adds the network's to the link's. NCCL can
    spread rings over several NICs and do better; give the bandwidth it reaches with --network-bandwidth. The
    network's latency is paid once per network step of the ring (`network.network_steps`: NCCL's nInterSteps,
    e.g. twice for an all-reduce over two nodes). An all-reduce across nodes takes the faster of the ring and NCCL's
    tree (`network.tree_network_steps`: 2·log2(nodes) network steps at a lower bandwidth), as NCCL's tuner picks per
    size: the tree for small messages over 4 or more nodes; over 2 nodes both take 2 steps and the ring wins."""
    topo = spec.topology()
    bw, lat = topo.link_bandwidth_bytes_per_s, topo.link_latency_us
    nodes = topo.nodes(key.num_gpus)
    tree_lat = None
    # a pipeline send/recv is between two GPUs; its key says when they sit on different nodes
    if nodes > 1 or (key.op is CollectiveOp.SEND_RECV and key.implementation == SEND_RECV_NETWORK):
        if topo.network_bandwidth_bytes_per_s <= 0:
            return None
        steps = max(1, network_steps(key.op, nodes))
        if key.op is CollectiveOp.ALL_REDUCE and nodes > 1:
            tree_lat = lat + tree_network_steps(nodes) * topo.network_latency_us
        bw, lat = min(bw, topo.network_bandwidth_bytes_per_s), lat + steps * topo.network_latency_us
    if bw <= 0:
        return None
    msg = np.asarray(coords, dtype=np.float64).reshape(-1)
    factor = _BUS_FACTOR[key.op](key.num_gpus) if key.num_gpus > 1 else 0.0
    ring = lat + factor * msg / bw * 1e6
    if tree_lat is None:
        return ring
    return np.minimum(ring, tree_lat + msg * tree_allreduce_seconds_per_byte(bw) * 1e6)


def on_device_key(spec: HardwareSpec, key: KernelKey) -> KernelKey:
    """The kernel `spec`'s GPU runs for `key`: DSA's sparse MLA rows at the query heads FlashMLA pads a rank's heads
    to there (`dsa.on_device`); every other key as it is."""
    if isinstance(key, ElementwiseKey):
        op = dsa.on_device(key.op, spec.compute_capability)
        if op != key.op:
            return ElementwiseKey(op, key.width, key.dtype)
    return key


def roofline_parts_us(spec: HardwareSpec, key: KernelKey, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(compute µs, memory µs) of each point, the two terms `roofline_us` takes the larger of; None for a
    collective, for a kernel without work, or where the spec has no peak for its dtype. Kernels that run at the
    same time on one device (concurrent streams) share its compute units and its memory bus, so their compute
    terms add and their memory terms add: the floor of an overlap (`cost_tree.Parallel`)."""
    if isinstance(key, CollectiveKey):
        return None
    work = kernel_work(on_device_key(spec, key), coords)
    if work is None or spec.memory_bandwidth_bytes_per_s <= 0:
        return None
    mem_us = work.bytes / spec.memory_bandwidth_bytes_per_s * 1e6
    if not np.any(work.flops):
        return np.zeros_like(mem_us), mem_us
    dtype = key.gemm_dtype if isinstance(key, (MlaModulePrefillKey, MlaModuleDecodeKey)) else key.dtype
    peak = spec.peak_flops(dtype)
    if peak is None or peak <= 0:
        return None
    return work.flops / peak * 1e6, mem_us


def roofline_us(spec: HardwareSpec, key: KernelKey, coords: np.ndarray) -> np.ndarray | None:
    """Roofline time in µs for each point, or None where the spec cannot price this kernel
    (no peak for its dtype, no bandwidth)."""
    if isinstance(key, CollectiveKey):
        return collective_roofline_us(spec, key, coords)
    work = kernel_work(on_device_key(spec, key), coords)
    if work is None or spec.memory_bandwidth_bytes_per_s <= 0:
        return None
    mem_s = work.bytes / spec.memory_bandwidth_bytes_per_s
    if not np.any(work.flops):
        return mem_s * 1e6
    dtype = key.gemm_dtype if isinstance(key, (MlaModulePrefillKey, MlaModuleDecodeKey)) else key.dtype
    peak = spec.peak_flops(dtype)
    if peak is None or peak <= 0:
        return None
    return np.maximum(work.flops / peak, mem_s) * 1e6

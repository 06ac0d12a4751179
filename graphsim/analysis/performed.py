"""The work a kernel performs, from its geometry: `costing.roofline.kernel_work`, split by what the
bytes move (weights, KV cache/state, activations) so it can be held against the accountant's
necessary parameter and state bytes.

FLOPs and total bytes are `kernel_work`'s; the weight and state parts follow the same formulas
(`costing/roofline.py`), and activations are the rest. A kernel kind whose bytes this module does
not split counts them all as activations.
"""

from __future__ import annotations

import numpy as np

from graphsim.costing import compressed, dsa, gdn, kda, lightning, mamba1, ssm
from graphsim.costing.kernel_map import KernelRows
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionPrefillKey, CollectiveKey, ElementwiseKey, GemmKey, KernelKey, MlaDecodeKey,
    MlaPrefillKey, MoeKey,
)
from graphsim.costing.roofline import kernel_work
from graphsim.ir.tensor import DType
from graphsim.work.analyzer import Performed


def _recurrent_state(op: str, rows: np.ndarray) -> np.ndarray | None:
    """The cached recurrent state a scan kernel's rows read and write (None: `op` is no scan row): the whole state
    once each per decode token (the decode kernels update it in place: costing/ssm.py, mamba1.py, kda.py, gdn.py,
    lightning.py) and per prefill sequence (the `.state` rows); none in the chunked prefill rows, whose chunk states
    are intermediates (activations). The conv state is the conv kernel's."""
    for mod in (ssm, mamba1, kda, gdn, lightning):
        parsed = mod.parse(op)
        if parsed is not None:
            kernel, shape = parsed
            if kernel == mod.PREFILL:
                return np.zeros(len(rows))
            return rows * 2.0 * shape.state_elements * DType(shape.state_dtype).bytes_per_element
    return None


def _split(key: KernelKey, c: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weight bytes, state bytes) per row of `c` (N, d), coordinates in the point's field order."""
    zero = np.zeros(len(c))
    if isinstance(key, GemmKey):
        return zero + key.k * key.n * key.dtype.weight_bytes, zero
    if isinstance(key, (AttentionPrefillKey, AttentionDecodeKey)):
        batch, kv_len = c[:, 0], c[:, -1]
        keys_read = np.minimum(kv_len, key.window) if key.window > 0 else kv_len
        return zero, batch * keys_read * 2 * key.head_dim * key.kv_dtype.activation_bytes * key.num_kv_heads
    if isinstance(key, (MlaPrefillKey, MlaDecodeKey)):
        batch, kv_len = c[:, 0], c[:, -1]
        return zero, batch * kv_len * (key.kv_lora_rank + key.qk_rope_head_dim) * key.kv_dtype.activation_bytes
    if isinstance(key, MoeKey):
        tokens = c[:, 0]
        local = key.num_experts / key.ep
        touched = local * (1 - (1 - 1 / key.num_experts) ** (tokens * key.topk))
        return touched * key.matrices * key.hidden_size * key.inter_size / key.tp * key.dtype.weight_bytes, zero
    if isinstance(key, ElementwiseKey) and key.op == "embedding":
        return nbytes / 2, zero  # the table rows read; the other half is the output written
    if isinstance(key, ElementwiseKey):  # sparse attention keys, indexer key caches, DeepSeek-V4 compressor state,
        # recurrent (scan) states
        state = compressed.state_bytes(key.op, c[:, 0])
        if state is None:
            state = dsa.state_bytes(key.op, c[:, 0], key.dtype.activation_bytes)
        if state is None:
            state = _recurrent_state(key.op, c[:, 0])
        if state is not None:
            return zero, state
    return zero, zero


def performed_work(rows: KernelRows, n_steps: int) -> list[Performed]:
    """FLOPs and bytes one instance of the kernel performs on one rank in each of `n_steps` steps, from
    the (key, coordinates) rows it was priced at (`Evaluation.rows`; zero for collectives)."""
    cols: tuple[list[np.ndarray], ...] = ([], [], [], [])
    for part in rows.parts:
        work = None if isinstance(part.key, CollectiveKey) else kernel_work(part.key, part.coords)
        if work is None:
            zero = np.zeros(len(part.coords))
            for col in cols:
                col.append(zero)
            continue
        param, state = _split(part.key, part.coords, work.bytes)
        for col, v in zip(cols, (work.flops, param, state, work.bytes - param - state), strict=True):
            col.append(v)
    flops, param, state, act = (rows.sum_by_step(col, n_steps) for col in cols)
    return [Performed(float(flops[b]), float(param[b]), float(state[b]), float(act[b])) for b in range(n_steps)]

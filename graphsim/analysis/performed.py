"""The work a kernel performs, from its geometry: `costing.roofline.kernel_work`, split by what the
bytes move (weights, KV cache/state, activations) so it can be held against the accountant's
necessary parameter and state bytes.

FLOPs and total bytes are `kernel_work`'s; the weight and state parts follow the same formulas
(`costing/roofline.py`), and activations are the rest. A kernel kind whose bytes this module does
not split counts them all as activations.
"""

from __future__ import annotations

import numpy as np

from graphsim.costing.kernel_map import Dtypes, points_for
from graphsim.costing.kernels import (
    AttentionDecodeKey,
    AttentionPrefillKey,
    CollectiveKey,
    ElementwiseKey,
    GemmKey,
    KernelKey,
    MlaDecodeKey,
    MlaPrefillKey,
    MoeKey,
    point_coords,
)
from graphsim.costing.roofline import kernel_work
from graphsim.ir.kernel import KernelAttrs
from graphsim.work.analyzer import Performed
from graphsim.workload import Step


def _split(key: KernelKey, c: np.ndarray, nbytes: float) -> tuple[float, float]:
    """(weight bytes, state bytes) of one point `c` (a 1-D coordinate array in the point's field order)."""
    if isinstance(key, GemmKey):
        return key.k * key.n * key.dtype.element_bytes, 0.0
    if isinstance(key, (AttentionPrefillKey, AttentionDecodeKey)):
        batch, kv_len = c[0], c[-1]
        keys_read = min(kv_len, key.window) if key.window > 0 else kv_len
        return 0.0, batch * keys_read * 2 * key.head_dim * key.kv_dtype.activation_bytes * key.num_kv_heads
    if isinstance(key, (MlaPrefillKey, MlaDecodeKey)):
        batch, kv_len = c[0], c[-1]
        return 0.0, batch * kv_len * (key.kv_lora_rank + key.qk_rope_head_dim) * key.kv_dtype.activation_bytes
    if isinstance(key, MoeKey):
        tokens = c[0]
        local = key.num_experts / key.ep
        touched = local * (1 - (1 - 1 / key.num_experts) ** (tokens * key.topk))
        return touched * 3 * key.hidden_size * key.inter_size / key.tp * key.dtype.element_bytes, 0.0
    if isinstance(key, ElementwiseKey) and key.op == "embedding":
        return nbytes / 2, 0.0  # the table rows read; the other half is the output written
    return 0.0, 0.0


def performed_work(attrs: KernelAttrs, step: Step, dtypes: Dtypes) -> Performed:
    """FLOPs and bytes one instance of the kernel performs on one rank for `step` (zero for collectives)."""
    total = Performed()
    for key, point in points_for(attrs, step, dtypes):
        if isinstance(key, CollectiveKey):
            continue
        coords = np.asarray([point_coords(point)], dtype=np.float64)
        work = kernel_work(key, coords)
        if work is None:
            continue
        flops, nbytes = float(np.sum(work.flops)), float(np.sum(work.bytes))
        param, state = (float(v) for v in _split(key, coords[0], nbytes))
        total = total + Performed(flops, param, state, nbytes - param - state)
    return total

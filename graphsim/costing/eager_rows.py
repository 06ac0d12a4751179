"""GEMM rows timed without CUDA graphs: their launch-bound times are host dispatch, not GPU time.

aiconfigurator's vLLM collector times block-scaled fp8 GEMMs eagerly, one layer instance per replay
(ai-dynamo/aiconfigurator collector/vllm/collect_gemm.py `run_gemm`: `outside_loop_count = 1 if gemm_type in
("fp8_block", "nvfp4") else 6` and `benchmark_with_power(..., use_cuda_graph=gemm_type != "fp8_block")`); every
other GEMM dtype is captured in a CUDA graph. An eagerly timed row reads max(host dispatch, GPU time): vLLM's
Python path of one fp8-block linear (activation quantisation + the GEMM) costs 55–155 µs of host time on H200 /
H100 (the smallest row of each kernel source in aiconfigurator-core 0.12: FlashInfer 55, DeepGEMM 78, CUTLASS
154 µs), so every small GEMM reads ~55–90 µs whatever its size: (n 2048, k 7168, m 64) reads 87.0 µs against
14.6 µs for vLLM's graphed per-tensor fp8 GEMM of the same shape and 12.0 / 12.4 µs for the graphed DeepGEMM
fp8-block rows of aiconfigurator's SGLang / TensorRT-LLM collectors on the same GPU. vLLM serves decode (and
mixed batches up to its capture sizes) from CUDA graphs, where none of that host time is on the GPU's path.

A row is therefore read as GPU time only where it is well above the dispatch floor: below `EAGER_BAND` × the
smallest time of the dtype's rows the row says only that the GPU took no longer, and the point is priced like a
point without rows (`derived`: launch floor, achieved bandwidth and compute share of the profile), never above
the row itself. Rows above the band (large GEMMs, GPU-bound) agree with the graphed fp8 rows (e.g. n 7168,
k 2048, m 8192: 231.8 µs fp8-block eager, 221.2 µs fp8 graphed) and are kept.
"""

from __future__ import annotations

from graphsim.costing.kernels import TableKind
from graphsim.costing.profile_db import ProfileDB

# (provenance source, engine) → GEMM dtypes its collector times eagerly (see the module docstring)
EAGER_TIMED: dict[tuple[str, str], frozenset[str]] = {("aiconfigurator-core", "vllm"): frozenset({"fp8_block"})}
# A row under twice the dispatch floor cannot be told from dispatch time plus noise: the eager rows of one key
# scatter by up to ~1.3× around their floor (n 2048, k 7168: 80–95 µs from m 32 to 2048), with single outliers
# to 2.6× (m 49: 132.6 µs) that the band does not catch; 2× keeps the GPU-bound rows (≥ 160 µs from m 4096).
EAGER_BAND = 2.0


def eager_dtypes(db: ProfileDB) -> frozenset[str]:
    """The GEMM dtypes whose rows in `db` were timed without CUDA graphs (by its provenance)."""
    prov = db.meta.provenance
    return EAGER_TIMED.get((prov.get("source", ""), db.meta.engine or prov.get("backend", "")), frozenset())


def eager_floors(db: ProfileDB) -> dict[str, float]:
    """dtype → the smallest time of its eagerly timed GEMM rows (the host dispatch floor), for `db`'s eager
    dtypes that have rows."""
    want = eager_dtypes(db)
    if not want:
        return {}
    return {d: t for d, t in db.min_time_by_dtype(TableKind.GEMM).items() if d in want}

def describe(dtype: str, floor_us: float) -> str:
    return (f"{dtype} GEMM rows timed without CUDA graphs (aiconfigurator collect_gemm.py): a row under "
            f"{EAGER_BAND:g} × their {floor_us:.1f} µs dispatch floor is host time, so the point is derived")

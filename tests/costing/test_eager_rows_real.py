"""The graphed stand-in for aiconfigurator's eagerly timed vLLM fp8_block GEMM rows (graphsim/costing/eager_rows.py),
held against evidence it does not read: the graphed fp8-block rows aiconfigurator-core's SGLang and TensorRT-LLM
collectors measured on the same GPU and shapes (collector/sglang/collect_gemm.py: per-token-group quant + DeepGEMM,
graph-captured). Imports the real H200 vLLM GEMM table: slow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def h200_db(tmp_path_factory):
    pytest.importorskip("aiconfigurator_core")
    from graphsim.costing import aiconfigurator_import as aic
    from graphsim.costing.profile_db import ProfileDB

    path = tmp_path_factory.mktemp("aic") / "h200.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", path, tables=["gemm_perf"])  # the GEMM rows are all it reads
    with ProfileDB.open(path) as db:
        yield db


def _graphed_fp8_block(engine: str) -> dict[tuple[int, int, int], float]:
    """(m, n, k) → µs of the engine's fp8_block rows in aiconfigurator-core's H200 tables (mean over kernel sources)."""
    import aiconfigurator_core
    import pyarrow.parquet as pq

    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / "h200_sxm" / "gemm" / engine
    (path,) = root.glob("*/gemm_perf.parquet")
    df = pq.read_table(path, columns=["gemm_dtype", "m", "n", "k", "latency"]).to_pandas()
    mean = df[df.gemm_dtype == "fp8_block"].groupby(["m", "n", "k"]).latency.mean() * 1e3  # ms → µs
    return {(int(m), int(n), int(k)): float(v) for (m, n, k), v in mean.items()}


def test_stand_in_lies_with_the_other_engines_graphed_rows(h200_db):
    pytest.importorskip("pyarrow")
    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.interpolate import DERIVED, KernelPricer
    from graphsim.costing.kernels import GemmKey, TableKind

    pricer = KernelPricer(h200_db)
    stand: dict[tuple[int, int, int], tuple[float, float]] = {}  # (m, n, k) → (stand-in µs, eager row µs)
    for key in h200_db.keys(TableKind.GEMM):
        if not isinstance(key, GemmKey) or key.dtype is not KernelDtype.FP8_BLOCK:
            continue
        rows = h200_db.rows(key)
        t, s = pricer.times(key, rows.coords)
        for m, ti, si, row in zip(rows.coords[:, 0], t, s, rows.times_us, strict=True):
            if si == DERIVED:  # the row was host time and the stand-in priced it
                stand[(int(m), key.n, key.k)] = (float(ti), float(row))
    assert len(stand) > 10_000  # every small row of the table (22,481 of 35,741 on aiconfigurator-core 0.12)
    for engine in ("sglang", "trtllm"):
        ref = _graphed_fp8_block(engine)
        both = [(stand[p][0] / ref[p], stand[p][1] / ref[p]) for p in stand if p in ref and ref[p] > 0]
        assert len(both) > 10_000
        ratio, eager = np.median(np.asarray(both), axis=0)
        # 2026-12-01: stand-in / graphed 1.22 (SGLang), 1.09 (TensorRT-LLM); eager row / graphed 4.9 and 4.5. The
        # stand-in must land within a third of the other engines' graph-captured time at the median, where the eager
        # rows it replaces are several times it
        assert 0.75 < ratio < 1.33, (engine, ratio)
        assert eager > 3.0, (engine, eager)

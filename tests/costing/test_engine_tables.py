"""aiconfigurator-core 0.12's SGLang and TensorRT-LLM tables for h200_sxm import like vLLM's, each under its own
backend and version, and price the engine's kernels (values read off the parquet files: gemm_perf rows with
m 2048, n 6144, k 4096 — sglang 0.5.14 bfloat16 0.1345075501 ms, fp8 0.0785146687 ms; trtllm 1.3.0rc20 bfloat16
0.1396346688 ms)."""

import importlib.util

import pytest

from graphsim.costing import aiconfigurator_import as aic
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernels import GemmKey, GemmPoint, TableKind
from graphsim.costing.profile_db import ProfileDB

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None or importlib.util.find_spec("pyarrow") is None,
    reason="aiconfigurator-core / pyarrow not installed (pip install 'graphsim[aiconfigurator]')",
)


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "version", "bf16_us", "fp8_us"), [
    ("sglang", "0.5.14", 134.5075501, 78.5146687), ("trtllm", "1.3.0rc20", 139.6346688, 101.5893353)])
def test_engine_gemm_tables_import(tmp_path, backend, version, bf16_us, fp8_us):
    out = tmp_path / f"h200_{backend}.db"
    report = aic.import_aiconfigurator("h200_sxm", backend, out, tables=["gemm_perf"])
    assert (report.backend, report.version) == (backend, version)
    with ProfileDB.open(out) as db:
        assert (db.meta.engine, db.meta.engine_version, db.meta.device) == (backend, version, "NVIDIA H200")
        assert db.count(TableKind.GEMM) > 100_000
        pricer = KernelPricer(db)
        assert pricer.time(GemmKey(6144, 4096, D.BF16), GemmPoint(2048)).time_us == pytest.approx(bf16_us, abs=1e-3)
        assert pricer.time(GemmKey(6144, 4096, D.FP8), GemmPoint(2048)).time_us == pytest.approx(fp8_us, abs=1e-3)


def test_engine_backends_are_listed_for_h200():
    root = aic.aiconfigurator_root()
    assert {"vllm", "sglang", "trtllm"} <= set(aic.list_backends(root, "h200_sxm"))
    assert aic.default_version(root, "h200_sxm", "sglang") == "0.5.14"
    assert aic.default_version(root, "h200_sxm", "trtllm") == "1.3.0rc20"

"""A Prediction prints a line per batch (not every kernel) and converts to one DataFrame row per kernel."""

from __future__ import annotations

import pytest

from graphsim.costing.predict import BatchReport, KernelRow, Prediction


def _prediction() -> Prediction:
    rows = [KernelRow("n1", "decoder", "gemm", "cutlass", 32, 10.0, 320.0, 0.8, "measured", 6.4e9, 3.2e6, False),
            KernelRow("n2", "decoder", "attention", "flash", 32, 2.5, 80.0, 0.2, "roofline", 1e8, 6.4e6, False)]
    batches = [BatchReport("decode:64x2048", 64, 64, 400.0, 400.0, "roofline", rows, []),
               BatchReport("prefill:1x2048", 2048, 1, None, 0.0, "missing", [], [], missing=["gemm"])]
    return Prediction("llama-3.1-8b", "h200_sxm", None, "roofline estimate: no profile.db\nsecond line", 1, 1, batches)


def test_repr_is_a_line_per_batch():
    text = repr(_prediction())
    assert text.splitlines() == [
        "Prediction(llama-3.1-8b on h200_sxm, tp 1, ep 1; roofline estimate: no profile.db)",
        "  decode:64x2048: 400.0 µs, worst source roofline, 2 kernels",
        "  prefill:1x2048: missing (1 kernel(s) without a time), worst source missing, 0 kernels"]


def test_to_pandas_has_a_row_per_kernel():
    pytest.importorskip("pandas")
    df = _prediction().to_pandas()
    assert df["batch"].tolist() == ["decode:64x2048"] * 2 and df["kernel"].tolist() == ["cutlass", "flash"]
    # 6.4e9 FLOP over 320 µs = 20 TFLOP/s; 3.2e6 B over 320 µs = 10 GB/s
    assert df["tflops_per_s"].iloc[0] == pytest.approx(20.0) and df["gb_per_s"].iloc[0] == pytest.approx(10.0)

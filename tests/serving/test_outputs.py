"""simulate's outputs at bounded memory: streamed iteration rows, per-request results (CSV/Parquet), the
Chrome trace (all requests or a stated sample), and the result object's repr / rich / pandas forms."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from serving_helpers import small_setup

from graphsim.serving import RequestSpec, parse_lengths, simulate, summarize, synthetic
from graphsim.serving import trace_export as te
from graphsim.serving.records import IterationLog


def _work(n=120, seed=1):
    return synthetic(n, 12.0, parse_lengths("100:2000", "in"), parse_lengths("20:300", "out"), seed=seed)


def _setup():
    return small_setup(num_blocks=500, max_num_seqs=48, mnbt=1024)


def test_streamed_rows_are_the_kept_rows_in_the_same_order(tmp_path, monkeypatch):
    monkeypatch.setattr(IterationLog, "FLUSH_ROWS", 300)  # many chunks, so the merge is exercised
    kept = simulate(_setup(), _work())
    spill = te.IterationSpill(tmp_path)
    streamed = simulate(_setup(), _work(), log=IterationLog(keep=False, sink=spill))
    assert len(spill.files) > 3 and len(streamed.iterations["start_s"]) == 0
    assert list(spill.rows()) == list(te.kept_rows(kept))
    a, b = summarize(kept).to_json(), summarize(streamed).to_json()
    for k in ("mean_batch_tokens", "mean_running", "little_l_observed"):  # summed chunk by chunk: same to rounding
        assert b.pop(k) == pytest.approx(a.pop(k), rel=1e-12)
    del a["wall_s"], b["wall_s"]
    assert a == b


def test_request_table_is_compact_and_reads_like_records():
    res = simulate(_setup(), _work(200))
    t = res.requests
    assert len(t) == 200 and t.nbytes == 200 * 89  # 5 float64 + 5 int64 + 2 int32 + 1 bool per request
    assert [r.id for r in t] == list(range(200)) and t[-1].id == 199 and t[5] == list(t)[5]
    assert t.completed_mask.all() and all(r.num_output_tokens == r.max_tokens for r in t)


def test_per_request_csv_and_parquet_hand_derived(tmp_path):
    # One request alone: arrival 0, 100 prompt tokens, 3 output tokens; the stand-in cost (serving_helpers.AffineCost)
    # prices its prefill at 5000 + 0.05·100 + 2·1 + 0.0005·(100·(0 + 100/2)/64) = 5007.0390625 µs → TTFT 5.0070390625 ms.
    # Each of the 2 decode iterations costs 5000 + 0.05 + 2 + 0.0005·(context + 1) µs with context 100..102.
    res = simulate(_setup(), [RequestSpec(0.0, 100, 3)])
    te.write_requests(res, tmp_path / "r.csv")
    (row,) = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert float(row["ttft_ms"]) == pytest.approx(5.0070390625, rel=1e-12)
    decode_us = (float(row["e2e_ms"]) - float(row["ttft_ms"])) * 1e3
    assert 2 * (5002.05 + 0.0005 * 101) - 1e-6 <= decode_us <= 2 * (5002.05 + 0.0005 * 103) + 1e-6
    assert float(row["tpot_ms"]) == pytest.approx(decode_us / 2 / 1e3, rel=1e-12)  # over the 2 tokens after the first
    assert (row["input_tokens"], row["output_tokens"], row["rejected"]) == ("100", "3", "False")
    pq = pytest.importorskip("pyarrow.parquet")
    te.write_requests(res, tmp_path / "r.parquet")
    tab = pq.read_table(tmp_path / "r.parquet").to_pydict()
    assert tab["ttft_ms"][0] == pytest.approx(5.0070390625, rel=1e-12) and tab["id"] == [0]


def test_rejected_requests_have_empty_latencies(tmp_path):
    res = simulate(small_setup(mml=1024), [RequestSpec(0.0, 5000, 10), RequestSpec(0.1, 100, 10)])
    te.write_requests(res, tmp_path / "r.csv")
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows[0]["rejected"] == "True" and rows[0]["ttft_ms"] == "" and rows[1]["ttft_ms"] != ""


def test_chrome_trace_has_every_request_or_a_stated_sample(tmp_path):
    res = simulate(_setup(), _work(150))
    full = te.chrome_trace(res)
    queued = {e["id"] for e in full["traceEvents"] if e.get("cat") == "request"}
    assert queued == set(range(150)) and full["otherData"]["requests_shown"] == 150
    assert full["otherData"]["sample"] == "all completed requests"
    assert sum(e["ph"] == "X" for e in full["traceEvents"]) == len(res.iterations["start_s"])
    te.write_chrome_trace(res, tmp_path / "t.json", sample=7)
    part = json.loads((tmp_path / "t.json").read_text())
    shown = {e["id"] for e in part["traceEvents"] if e.get("cat") == "request"}
    assert len(shown) == 7 and {0, 149} <= shown  # evenly spaced by id, both ends included
    assert part["otherData"]["sample"].startswith("7 of 150 completed requests")


def test_iteration_log_csv_and_jsonl(tmp_path):
    res = simulate(_setup(), _work(40))
    te.write_iteration_log(res, tmp_path / "it.csv")
    te.write_iteration_log(res, tmp_path / "it.jsonl")
    rows = list(csv.DictReader((tmp_path / "it.csv").open()))
    lines = [json.loads(x) for x in (tmp_path / "it.jsonl").read_text().splitlines()]
    n = len(res.iterations["start_s"])
    assert len(rows) == len(lines) == n and lines[0]["source"] == rows[0]["source"] == "roofline"
    assert [float(r["start_s"]) for r in rows] == sorted(float(r["start_s"]) for r in rows)


def test_result_prints_short_and_converts():
    res = simulate(_setup(), _work(300))
    text = repr(res)
    assert len(text) < 300 and "300 of 300 requests" in text and "\n" not in text
    from rich.console import Console

    console = Console(record=True, width=100)
    console.print(res)
    shown = console.export_text()
    assert "TTFT ms" in shown and len(shown) < 3000
    pd = pytest.importorskip("pandas")
    df = res.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 300 and {"ttft_ms", "tpot_ms", "e2e_ms"} <= set(df.columns)
    assert math.isclose(float(df["ttft_ms"].mean()), summarize(res).ttft_ms.mean, rel_tol=1e-12)


def test_itl_samples_are_run_length_encoded_without_loss():
    res = simulate(_setup(), _work(200))
    v, w, c = res.itl_runs
    assert set(np.unique(w).tolist()) <= set(range(1, 49))  # weights: batch sizes (max_num_seqs 48)
    assert len(v) < c.sum()  # the gaps of one iteration's batch repeat (most decode iterations here are segments,
    # one sample each; a step iteration's batch adds one gap per request, mostly one value)
    assert np.array_equal(np.repeat(v, c), res.itl_values) and res.itl_weights.dtype == np.float64

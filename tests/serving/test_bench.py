"""vllm bench serve semantics: its workload (random dataset, arrivals, --max-concurrency, a warm prefix cache),
its metrics and result keys, and `graphsim compare`. Expected values are derived by hand in the comments."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from graphsim.serving.bench_metrics import BenchSettings, bench_result, peak_concurrency, percentile_word
from graphsim.serving.blocks import BlockPool
from graphsim.serving.records import Request, RequestTable
from graphsim.serving.requests import (
    ClosedLoop, Lengths, WorkloadSpecError, bench_arrivals, bench_lengths, bench_random, warm_prefixes,
)
from graphsim.serving.simulator import Arrivals, SimulationResult


def _request(rid: int, arrival: float, first: float, finish: float, prompt: int, out: int) -> Request:
    r = Request(rid, arrival, prompt, out, None, 0, 10_000)
    r.first_token_t, r.finish_t = first, finish
    return r


def _tiny_result() -> SimulationResult:
    # Three requests, all sent at t = 0 (rate inf):
    #   A: prompt 10, 3 output tokens, first token 0.1 s, finish 0.3 s: gaps 0.1, 0.1; TPOT (0.3-0.1)/2 = 0.1 s
    #   B: prompt 20, 1 output token, first token 0.2 s, finish 0.2 s: no gap, no TPOT
    #   C: prompt 30, 5 output tokens, first token 0.3 s, finish 0.7 s: gaps 0.1 x 4; TPOT (0.7-0.3)/4 = 0.1 s
    table = RequestTable()
    for r in (_request(0, 0.0, 0.1, 0.3, 10, 3), _request(1, 0.0, 0.2, 0.2, 20, 1), _request(2, 0.0, 0.3, 0.7, 30, 5)):
        table.record(r)
    # Pooled gaps: six of 0.1 s, as the simulator keeps them (values, weights, counts): 0.1 s of weight 2 once (two
    # requests got a token in that iteration: 2 gaps) and 0.1 s of weight 1 four times (4 gaps).
    runs = (np.asarray([0.1, 0.1]), np.asarray([2.0, 1.0]), np.asarray([1, 4]))
    return SimpleNamespace(requests=table, itl_runs=runs)  # type: ignore[return-value]  # what bench_result reads


def test_metrics_of_three_requests_hand_derived():
    doc = bench_result(_tiny_result(), BenchSettings(model_id="m", num_prompts=3))
    # duration: from 0 to the last finish, 0.7 s
    assert doc["duration"] == pytest.approx(0.7)
    assert doc["completed"] == 3 and doc["failed"] == 0
    assert doc["total_input_tokens"] == 60 and doc["total_output_tokens"] == 9
    assert doc["request_throughput"] == pytest.approx(3 / 0.7)
    assert doc["output_throughput"] == pytest.approx(9 / 0.7)
    assert doc["total_token_throughput"] == pytest.approx(69 / 0.7)
    # TTFT 100, 200, 300 ms: mean 200, median 200, std sqrt((100²+0+100²)/3) = 81.65, p99 = 200 + 0.98·100 = 298
    assert doc["mean_ttft_ms"] == pytest.approx(200.0)
    assert doc["median_ttft_ms"] == pytest.approx(200.0)
    assert doc["std_ttft_ms"] == pytest.approx(math.sqrt(20000 / 3))
    assert doc["p99_ttft_ms"] == pytest.approx(298.0)
    # TPOT over A and C only (B has one output token): 100 ms each
    assert doc["mean_tpot_ms"] == pytest.approx(100.0) and doc["std_tpot_ms"] == pytest.approx(0.0)
    # ITL: six gaps of 100 ms pooled
    assert doc["mean_itl_ms"] == pytest.approx(100.0) and doc["p99_itl_ms"] == pytest.approx(100.0)
    # all three in flight from t = 0: peak concurrency 3
    assert doc["max_concurrent_requests"] == 3
    assert doc["request_rate"] == "inf" and doc["max_concurrency"] is None


# The keys `vllm bench serve --save-result` writes for a generative model without --save-detailed, default
# --percentile-metrics (ttft,tpot,itl) and --metric-percentiles (99), no --max-concurrency, no goodput, no ramp-up,
# no speculative decoding: vllm/benchmarks/serve.py (commit 009e6d4a) main_async (date … max_concurrency),
# benchmark() `result` (duration … rtfx, less the per-request lists main_async drops without --save-detailed:
# input_lens, output_lens, start_times, ttfts, itls, generated_texts, errors) and process_one_metric.
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "latencies",
    "queue_times", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")),
}


def test_result_keys_are_vllms():
    doc = bench_result(_tiny_result(), BenchSettings(model_id="m", num_prompts=3), extra={"version": "x"})
    assert set(doc) - {"graphsim"} == VLLM_KEYS
    detailed = bench_result(_tiny_result(), BenchSettings(model_id="m", num_prompts=3, save_detailed=True))
    # --save-detailed adds the per-request lists; `itls` per request is not simulated and is named as such
    assert set(detailed) - {"graphsim"} - VLLM_KEYS == {"input_lens", "output_lens", "start_times", "ttfts",
                                                       "generated_texts", "errors"}
    assert any(s.startswith("itls") for s in detailed["graphsim"]["not_simulated"])


def test_percentile_key_spelling_and_queue_metrics():
    assert percentile_word(99.0) == "99" and percentile_word(99.9) == "99.9"
    s = BenchSettings(model_id="m", num_prompts=3, request_rate=2.0, max_concurrency=2,
                      percentile_metrics=("ttft", "e2el"), metric_percentiles=(50.0, 99.9))
    doc = bench_result(_tiny_result(), s, due_s=[0.0, 0.0, 0.0])
    assert {"p50_ttft_ms", "p99.9_ttft_ms", "mean_e2el_ms", "mean_client_queue_time_ms",
            "mean_e2el_including_client_queue_ms"} <= set(doc)
    assert "mean_tpot_ms" not in doc


def _burst_result(speculative: object = None) -> SimulationResult:
    # Two requests sent at t = 0; the iteration log (start, duration, decode tokens):
    #   it0 0.0 + 0.2, no decode (both prefills): first tokens of A and B at 0.2
    #   it1 0.2 + 0.1, it2 0.3 + 0.1, it3 0.4 + 0.1: A and B decode, 2 tokens each, ending 0.3, 0.4, 0.5 (B done)
    #   it4 0.5 + 2.0: A's last token at 2.5 (A: 5 tokens, B: 4)
    table = RequestTable()
    for r in (_request(0, 0.0, 0.2, 2.5, 10, 5), _request(1, 0.0, 0.2, 0.5, 10, 4)):
        table.record(r)
    its = {"start_s": np.asarray([0.0, 0.2, 0.3, 0.4, 0.5]), "dur_s": np.asarray([0.2, 0.1, 0.1, 0.1, 2.0]),
           "decode_seqs": np.asarray([0, 2, 2, 2, 1])}
    runs = (np.asarray([0.1, 2.0]), np.asarray([2.0, 1.0]), np.asarray([3, 1]))
    return SimpleNamespace(requests=table, itl_runs=runs, iterations=its,  # type: ignore[return-value]
                           setup=SimpleNamespace(speculative=speculative))


def test_peak_output_tokens_from_the_iteration_log():
    # vLLM counts each token at its own time, in whole seconds from the first start. From the log: second 0 holds
    # the two first tokens (0.2) and the decodes ending at 0.3, 0.4, 0.5 (2 each): 8; second 2 holds A's last: 1.
    doc = bench_result(_burst_result(), BenchSettings(model_id="m", num_prompts=2))
    assert doc["max_output_tokens_per_s"] == 8
    assert "iteration log" in doc["graphsim"]["derived"]["max_output_tokens_per_s"]
    # Spread evenly instead (speculative decoding: the log does not count its tokens), A's 5 tokens at
    # linspace(0.2, 2.5, 5) = 0.2, 0.775, 1.35, 1.925, 2.5 put 2 in second 0, and B's 4 (0.2 … 0.5) all in second 0:
    # 6, the burst flattened
    spread = bench_result(_burst_result(speculative=object()), BenchSettings(model_id="m", num_prompts=2))
    assert spread["max_output_tokens_per_s"] == 6
    assert "spread evenly" in spread["graphsim"]["derived"]["max_output_tokens_per_s"]


def test_peak_concurrency_half_open():
    # [0, 1) and [1, 2) never overlap; [0.5, 1.5) overlaps both: peak 2
    assert peak_concurrency(np.asarray([0.0, 1.0]), np.asarray([1.0, 2.0])) == 1
    assert peak_concurrency(np.asarray([0.0, 1.0, 0.5]), np.asarray([1.0, 2.0, 1.5])) == 2


def test_arrivals_inf_constant_and_rescaled():
    assert list(bench_arrivals(3, math.inf)) == [0.0, 0.0, 0.0]
    # burstiness inf: gaps 1/rate = 0.5 s, summed: 0.5, 1.0, 1.5 (the first request waits its own gap)
    assert bench_arrivals(3, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5])
    # gamma gaps are rescaled so that the last request is due at n / rate = 50 s
    due = bench_arrivals(100, 2.0, 0.5, seed=1)
    assert due[-1] == pytest.approx(50.0) and np.all(np.diff(due) >= 0)
    with pytest.raises(WorkloadSpecError):
        bench_arrivals(3, 0.0)


def test_random_dataset_lengths():
    # r = 0.5 around 1000: [floor(500), ceil(1500)]; output floor at 1: 1 with r = 0.5 → [max(1, 0), ceil(1.5)] = [1, 2]
    assert bench_lengths(1000, 0.5) == Lengths(500, 1500)
    # vLLM's float arithmetic kept: 100 · 1.1 = 110.00000000000001 in binary floating point, so ceil gives 111
    assert bench_lengths(100, 0.1) == Lengths(90, 111)
    assert bench_lengths(1, 0.5, floor_one=True) == Lengths(1, 2)
    with pytest.raises(WorkloadSpecError):
        bench_lengths(100, 1.0)
    specs = bench_random(50, 1000, 100, range_ratio=0.5, prefix_len=24, seed=3)
    assert isinstance(specs, list)  # inputs [500, 1500] + the 24-token prefix; outputs [50, 150]
    assert all(524 <= s.input_tokens <= 1524 and 50 <= s.output_tokens <= 150 for s in specs)
    assert len({s.input_tokens for s in specs}) > 1
    assert all(s.prefix_id == "random-prefix" and s.prefix_tokens == 24 for s in specs)


def test_max_concurrency_sends_at_due_time_or_free_slot():
    specs = bench_random(3, 16, 4, request_rate=1.0, burstiness=math.inf, max_concurrency=2)
    assert isinstance(specs, ClosedLoop)
    arr = Arrivals(specs)
    # due at 1, 2, 3 s; two slots: the first two are sent when due
    assert arr.pop().arrival_s == pytest.approx(1.0) and arr.pop().arrival_s == pytest.approx(2.0)
    arr.on_finish(2.5)  # a slot frees at 2.5 s, before the third is due: sent at 3 s
    assert arr.pop().arrival_s == pytest.approx(3.0)


def test_warm_prefix_cache_lru():
    specs = bench_random(3, 40, 4, warm_prompts=2)
    assert isinstance(specs, list)
    assert warm_prefixes(specs) == [("prompt-0-0", 40), ("prompt-0-1", 40)]
    by_index = bench_random(3, 40, 4, warm_prompts={2})  # prompts by index: only the third was seen
    assert isinstance(by_index, list) and warm_prefixes(by_index) == [("prompt-0-2", 40)]
    # by index and cached tokens: prompt 0's first 16 (a shorter run sent them), prompt 1 up to its own 40 (a
    # longer run sent 100), prompt 2 none
    partial = bench_random(3, 40, 4, warm_prompts={0: 16, 1: 100, 2: 0})
    assert isinstance(partial, list) and warm_prefixes(partial) == [("prompt-0-0", 16), ("prompt-0-1", 40)]
    assert [s.warm for s in partial] == [True, True, False]
    pool = BlockPool(4)
    # 2 blocks of 16 per warm prompt (40 // 16); 3 prompts = 6 blocks > 4: the earliest two are dropped
    pool.warm([("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("c", 1)])
    assert not pool.is_cached(("a", 0)) and pool.is_cached(("c", 1)) and pool.cached_free == 4


def test_compare_rows(tmp_path):
    from graphsim.cli.compare_cmd import compare

    pred = {"duration": 10.0, "output_throughput": 110.0, "mean_ttft_ms": 90.0, "p99_ttft_ms": 200.0}
    meas = {"duration": 10.0, "output_throughput": 100.0, "mean_ttft_ms": 100.0, "p99_ttft_ms": 200.0}
    rows = {r["metric"]: r for r in compare(pred, meas)}
    # (110 - 100) / 100 = +10 %, (90 - 100) / 100 = -10 %
    assert rows["output_throughput"]["error_pct"] == pytest.approx(10.0) and rows["output_throughput"]["sign"] == "over"
    assert rows["mean_ttft_ms"]["error_pct"] == pytest.approx(-10.0) and rows["mean_ttft_ms"]["sign"] == "under"
    assert rows["p99_ttft_ms"]["sign"] == "equal"


def test_compare_cli(tmp_path):
    from graphsim.cli.app import main

    p, m = tmp_path / "p.json", tmp_path / "m.json"
    p.write_text(json.dumps({"duration": 2.0, "output_throughput": 50.0}))
    m.write_text(json.dumps({"duration": 2.0, "output_throughput": 40.0}))
    assert main(["compare", str(p), str(m), "--json"]) == 0
    (tmp_path / "bad.json").write_text("{}\n{}\n")
    assert main(["compare", str(p), str(tmp_path / "bad.json")]) == 2


def test_simulate_bench_options_need_the_random_dataset(capsys):
    from graphsim.cli.app import main

    assert main(["simulate", "llama-3.1-8b", "--rate", "1", "--random-range-ratio", "0.5"]) == 2
    assert "--dataset-name random" in capsys.readouterr().err
    assert main(["simulate", "llama-3.1-8b", "--dataset-name", "sharegpt"]) == 2
    assert "random dataset" in capsys.readouterr().err
    assert main(["simulate", "llama-3.1-8b", "--dataset-name", "random", "--metric-percentiles", "99,x"]) == 2


def test_simulate_random_dataset_refuses_graphsims_own_lengths(capsys):
    from graphsim.cli.app import main

    assert main(["simulate", "llama-3.1-8b", "--dataset-name", "random", "--input-len", "512"]) == 2
    assert "--random-input-len" in capsys.readouterr().err


def test_pooled_itl_statistics_from_counts():
    from graphsim.serving.bench_metrics import _counted_stats

    # values 1, 2, 3 s held 2, 1, 3 times: the list 1 1 2 3 3 3 (N = 6). Mean 13/6; population variance
    # (2·(7/6)² + (1/6)² + 3·(5/6)²) / 6 = (98 + 1 + 75) / 216; median at h = 5·0.5 = 2.5, between the 3rd (2)
    # and 4th (3) elements: 2.5; p25 at h = 1.25: 1 + 0.25·(2 − 1) = 1.25; p99 at h = 4.95: 3. All in ms.
    mean, median, std, pcts = _counted_stats(np.asarray([3.0, 1.0, 2.0]), np.asarray([3, 2, 1]), (25.0, 99.0))
    assert mean == pytest.approx(13 / 6 * 1e3) and median == pytest.approx(2500.0)
    assert std == pytest.approx(math.sqrt(174 / 216) * 1e3)
    assert pcts == [(25.0, pytest.approx(1250.0)), (99.0, pytest.approx(3000.0))]

"""benchmarks/data/lambdalabs_vllm_benchmark.json (Lambda's vLLM 0.5.4 runs, held out) and the harness's replay of
per-request lengths: every run's facts have a source and agree with its own totals; the client's scoring of requests
whose streamed text stayed empty (hand-derived); (slow) one run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "lambdalabs_vllm_benchmark.json"
COMMIT = "de55d46ea652cfc8f3edd3121a7a826f47d20611"


def test_every_run_states_its_source_and_its_lengths_add_up(benchmark_script):
    h = benchmark_script("validate_serving")
    runs, tests = h.load_runs()
    mine = [r for r in runs if r["file"] == DATA.name]
    assert len(mine) == 17
    for r in mine:
        t, b, m = tests[r["test_key"]], r["bench"], r["measured"]
        assert t["model"] in h.MODELS and t["gpu"] in h.GPU and t["vllm"] == "0.5.4"
        assert t["max_num_seqs"] == 1024 and t["gpu_memory_utilization"] == 0.95  # benchmark.py's server command
        assert r["source"] == f"https://github.com/LambdaLabsML/vllm-benchmark/blob/{COMMIT}/{r['server_log']['server']}"
        assert r["server_log"]["time"].startswith("202408")  # before vLLM 0.6.0 (2024-09-04): the 0.5.4 runs
        # the per-request lengths are the file's own: they add up to its totals, one per prompt
        assert len(b["input_lens"]) == len(b["output_lens"]) == b["num_prompts"] == m["completed"]
        assert sum(b["input_lens"]) == m["total_input_tokens"] and sum(b["output_lens"]) == m["total_output_tokens"]
        # the client's seed 0 takes the first P prompts of one shuffle: a run's prompts open the 320-prompt run's
        longest = max((x for x in mine if x["bench"]["model"] == b["model"]), key=lambda x: x["bench"]["num_prompts"])
        assert longest["bench"]["input_lens"][:b["num_prompts"]] == b["input_lens"]
    left_out = [r["id"] for r in mine if h.excluded(r, tests[r["test_key"]])]
    assert left_out == ["lam-mix2-l2k-n10", "lam-mix2-l2k-n80", "lam-mix2-l16k-n320"]  # cold start (the file says why)


def test_random_runs_still_need_their_output_length(benchmark_script):
    h = benchmark_script("validate_serving")
    run = {"bench": {"dataset_name": "sharegpt", "random_output_len": None}}
    assert h.excluded(run, {"model": "Mistral-7B-Instruct-v0.3"}) is None
    run["bench"]["dataset_name"] = "random"
    assert "random-output-len" in h.excluded(run, {"model": "Mistral-7B-Instruct-v0.3"})


def test_per_request_lengths(benchmark_script):
    h = benchmark_script("validate_serving")
    assert h.per_request_lengths({"random_input_len": 1024}, 3) is None
    bench = {"input_lens": [14, 30, 28, 12], "output_lens": [129, 0, 273, 169]}
    assert h.per_request_lengths(bench, 3) == ([14, 30, 28], [129, 0, 273])


def test_empty_text_requests_are_scored_as_the_client_scored_them(benchmark_script):
    h = benchmark_script("validate_serving")
    # three requests; the second streamed no text (recorded output 0), so the replay ran it for one token
    doc = {"ttfts": [0.1, 0.2, 0.3], "mean_ttft_ms": 200.0, "total_output_tokens": 5 + 1 + 3,
           "output_throughput": 9 / 2.0, "duration": 2.0, "graphsim": {}}
    h.score_empty_text_as_client(doc, [5, 0, 3])
    assert doc["mean_ttft_ms"] == pytest.approx((0.1 + 0.0 + 0.3) / 3 * 1e3)  # 133.33 ms: its TTFT counts as 0
    assert doc["total_output_tokens"] == 8 and doc["output_throughput"] == pytest.approx(8 / 2.0)  # its token: 0
    assert doc["graphsim"]["empty_text_requests"] == 1
    unchanged = {"ttfts": [0.1], "mean_ttft_ms": 100.0, "total_output_tokens": 5, "output_throughput": 2.5,
                 "duration": 2.0, "graphsim": {}}
    h.score_empty_text_as_client(unchanged, [5])
    assert unchanged["mean_ttft_ms"] == 100.0 and unchanged["graphsim"] == {}


@pytest.mark.slow
def test_one_sharegpt_run_end_to_end(tmp_path, capsys, benchmark_script):
    h = benchmark_script("validate_serving")
    assert h.main(["--subset", "lam-mis1-l2k-n10", "--json", "--profiles", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["runs"]
    # the replay sent the run's own ten requests: 1,585 prompt tokens and 2,490 output tokens recorded
    assert row["prompts"] == 10 and row["input_len"] == round(1585 / 10) and row["output_len"] == round(2490 / 10)
    assert set(row["error_pct"]) == {"mean_ttft_ms", "mean_tpot_ms", "output_throughput"}

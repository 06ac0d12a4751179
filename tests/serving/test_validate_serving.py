"""benchmarks/validate_serving.py: which earlier runs share a run's server (their prefix cache is carried over by
simulating them: tests/serving/test_prefix_handover.py), which runs are left out, the stored data, and (slow) one run
end to end."""

from __future__ import annotations

import json

import pytest


def _run(rid: str, n: int, in_len: int, out: int, time: str, seed: int = 0, pid: int = 1) -> dict:
    return {"id": rid, "file": "f.json", "test": 1,
            "bench": {"num_prompts": n, "random_input_len": in_len, "seed": seed},
            "measured": {"completed": n, "total_output_tokens": n * out}, "server_log": {"api_server_pid": pid, "time": time}}


def test_earlier_runs_are_the_same_servers(benchmark_script):
    h = benchmark_script("validate_serving")
    a, b, c = _run("a", 3, 100, 28, "01"), _run("b", 2, 300, 84, "02"), _run("c", 4, 100, 28, "03")
    other_pid, other_test = _run("d", 4, 100, 28, "00", pid=2), {**_run("e", 4, 100, 28, "00"), "test": 2}
    runs = [c, other_pid, a, other_test, b]
    assert [r["id"] for r in h.earlier_runs(c, runs)] == ["a", "b"]  # in log-time order, not the list's
    assert h.earlier_runs(a, runs) == []
    # the stored runs: a pid a restarted container logged again is another server (another host or another test)
    stored, _ = h.load_runs()
    by_id = {r["id"]: r for r in stored}
    assert [r["id"] for r in h.earlier_runs(by_id["dl22-t1-09"], stored)] == []  # pid 114, at .39, not t1-08's .35
    assert [r["id"] for r in h.earlier_runs(by_id["dl22-t1-08"], stored)] == []  # pid 114 at .35: a fresh server
    # pid 144 on 09-03: test 2 at 23:11 and 23:39, test 3 at 23:30 (another KV size: another server)
    assert [r["id"] for r in h.earlier_runs(by_id["dl22-t2-31"], stored)] == ["dl22-t2-29"]
    assert [r["id"] for r in h.earlier_runs(by_id["dl22-t3-33"], stored)] == []
    assert by_id["dl22-t1-08"]["server_log"]["host"] == "10.254.5.35"
    assert by_id["dl22-t1-09"]["server_log"]["host"] == "10.254.5.39"


def test_the_clients_test_request_is_the_runs_prompt_0(benchmark_script):
    h = benchmark_script("validate_serving")
    (spec,) = h.test_request(1021, 6986, 0)
    assert (spec.input_tokens, spec.output_tokens, spec.prefix_id, spec.prefix_tokens) == (1021, 6986, "prompt-0-0", 1021)


def test_left_out_runs_say_why(benchmark_script):
    h = benchmark_script("validate_serving")
    test = {"model": "Qwen2-7B-Instruct"}
    run = _run("x", 10, 1024, 1024, "01")
    run["bench"]["random_output_len"] = 1024
    assert h.excluded(run, test) is None
    run["incomplete"] = "894 of 1000 requests succeeded"
    assert "894" in h.excluded(run, test)


def test_stored_runs_are_complete_facts(benchmark_script):
    h = benchmark_script("validate_serving")
    runs, tests = h.load_runs()
    expected = {"dennislee22_vllm_benchmarking.json": 81, "kvcached_h100_qwen3_0.6b.json": 6,
                "gpustack_performance_lab.json": 32, "lambdalabs_vllm_benchmark.json": 17}
    assert {f: sum(r["file"] == f for r in runs) for f in expected} == expected  # runs per data file
    for r in runs:
        t = tests[r["test_key"]]
        assert t["model"] in h.MODELS and t["gpu"] in h.GPU
        assert r["source"].startswith("https://github.com/")
        assert {"mean_ttft_ms", "mean_tpot_ms", "output_throughput", "completed", "total_output_tokens"} <= set(r["measured"])


def test_two_node_runs_name_their_network(benchmark_script):
    h = benchmark_script("validate_serving")
    _, tests = h.load_runs()
    across = {k: t for k, t in tests.items() if t["tp"] > 1 and t["nodes"] > 1}
    assert set(across) == {"dennislee22_vllm_benchmarking:1", "dennislee22_vllm_benchmarking:9"}
    for t in across.values():
        # TCP over 10 GbE, MTU 1500: 1.25e9 · 1448 / 1538 B/s; the pod network's socket hop as the data states it
        # (249.8 µs, fitted by benchmarks/fit_network_latency.py, with its evidence beside it)
        assert "fit_network_latency.py" in t["network"]["hop_latency_evidence"]
        assert h.network_overrides(t["network"]) == pytest.approx(
            {"network_bandwidth_gb_s": 1.25 * 1448 / 1538, "network_latency_us": 249.8})
    # a network stated without a hop latency: NCCL's public bare-VM figure, 45.82 µs (costing/network.py)
    assert h.network_overrides({"transport": "tcp", "line_rate_gbit_s": 10})["network_latency_us"] == 45.82
    assert h.network_overrides(None) == {}
    with pytest.raises(ValueError, match="tcp"):
        h.network_overrides({"transport": "rdma"})


@pytest.mark.slow
def test_one_run_end_to_end(tmp_path, capsys, benchmark_script):
    h = benchmark_script("validate_serving")
    assert h.main(["--subset", "dl22-t5-46", "--json", "--profiles", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["runs"]
    assert row["id"] == "dl22-t5-46" and set(row["error_pct"]) == {"mean_ttft_ms", "mean_tpot_ms", "output_throughput"}


def test_a_run_whose_server_started_gets_at_least_the_start_up_floor(benchmark_script):
    # GPUStack test 4: Qwen3-32B, one A100 80GB, vLLM 0.11.0 defaults (--max-model-len 40,960), no startup log.
    # graphsim's estimate: 0.9 × 79.26 GiB − 61.02 GiB weights − 0.35 GiB activation − 0.5 GiB assumed ≈ 9.45 GiB,
    # fewer than one request needs; the server started, so vLLM's check_enough_kv_cache_memory held.
    # A block: 64 layers × 8 KV heads × 128 × 2 (K, V) × 2 B × 16 tokens = 4,194,304 B; 40,960 / 16 = 2,560 blocks;
    # the floor, one request and one block of slack: 2,561 × 4,194,304 = 10,741,612,544 B.
    h = benchmark_script("validate_serving")
    _, tests = h.load_runs()
    pred = h.Predictor(None)
    dep, _ = pred.deployment(tests["gpustack_performance_lab:4"])
    assert dep.capacity.bytes_per_block == 4_194_304 and dep.capacity.blocks_per_request == 2_560
    assert dep.capacity.available_bytes == 10_741_612_544 and dep.capacity.fits_one_request
    (est, floor), = pred.floored.values()
    assert floor == 10_741_612_544 and est < floor
    # a run whose estimate holds one request keeps it (GPUStack test 2: Qwen3-14B on the same A100)
    dep2, _ = pred.deployment(tests["gpustack_performance_lab:2"])
    assert len(pred.floored) == 1 and dep2.budget.source == "estimated"

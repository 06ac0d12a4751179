"""benchmarks/validate_serving.py: which prompts a run finds in the prefix cache (hand-derived), which runs are left
out, the stored data, and (slow) one run end to end."""

from __future__ import annotations

import json

import pytest


def _run(rid: str, n: int, in_len: int, out: int, time: str, seed: int = 0, pid: int = 1) -> dict:
    return {"id": rid, "file": "f.json", "bench": {"num_prompts": n, "random_input_len": in_len, "seed": seed},
            "measured": {"completed": n, "total_output_tokens": n * out}, "server_log": {"api_server_pid": pid, "time": time}}


def test_warm_prompts_replays_the_servers_lru(benchmark_script):
    h = benchmark_script("validate_serving")
    a = _run("a", 3, 100, 28, "01")  # 3 prompts of 100 in + 28 out: 128 tokens each
    b = _run("b", 2, 300, 84, "02")  # other prompts (another length): 384 tokens each
    c = _run("c", 4, 100, 28, "03")
    runs = [a, b, c]
    # Capacity 1,000 tokens: after a, 3 x 128 = 384; after b, 384 + 768 = 1,152 > 1,000: a's prompt 0 (128) goes,
    # 1,024 > 1,000: a's prompt 1 goes, 896. c finds a's prompt 2, and prompt 0 by the client's test request.
    assert h.warm_prompts(c, runs, 1000) == {0, 2}
    # Room for everything: c finds all three of a's prompts (it sends 4; the fourth is new)
    assert h.warm_prompts(c, runs, 10_000) == {0, 1, 2}
    # Another seed or another server: nothing but the test request's prompt
    assert h.warm_prompts(_run("d", 4, 100, 28, "03", seed=1), runs, 10_000) == {0}
    assert h.warm_prompts(_run("e", 4, 100, 28, "03", pid=2), runs, 10_000) == {0}


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
    assert len(runs) == 119  # 81 dennislee22 runs + 6 kvcached runs + 32 GPUStack performance-lab runs
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
        # TCP over 10 GbE, MTU 1500: 1.25e9 · 1448 / 1538 B/s, NCCL's socket hop 45.82 µs (costing/network.py)
        assert h.network_overrides(t["network"]) == pytest.approx(
            {"network_bandwidth_gb_s": 1.25 * 1448 / 1538, "network_latency_us": 45.82})
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

"""benchmarks/kv_band.py: the least KV cache a run's server could have started with, and the band's medians."""

from __future__ import annotations

import pytest


def test_floor_is_one_max_length_request(benchmark_script):
    kb = benchmark_script("kv_band")
    vs = benchmark_script("validate_serving")
    _, tests = vs.load_runs()
    budget, floor = kb.floor_gib(tests["gpustack_performance_lab:6"], vs.Predictor(None))
    # Qwen3-235B-A22B at TP8: 4 KV heads replicated to 1 a rank; a 16-token block holds 94 layers × 1 head × 128 ×
    # 2 (K, V) × 2 B × 16 = 770,048 B; one 262,144-token request needs 262,144 / 16 = 16,384 blocks, + 1 of slack:
    # 16,385 × 770,048 B = 12,617,236,480 B = 11.7507 GiB
    assert floor == pytest.approx(12_617_236_480 / 2**30)
    assert budget > floor  # graphsim's budget at 0.9 starts the server


def test_medians_per_group_and_side(benchmark_script):
    kb = benchmark_script("kv_band")
    e = {"mean_ttft_ms": 10.0, "mean_tpot_ms": -20.0, "output_throughput": 5.0}
    f = {"mean_ttft_ms": -30.0, "mean_tpot_ms": 2.0, "output_throughput": -1.0}
    rows = [{"group": "g", "at_budget": e, "at_floor": f},
            {"group": "g", "at_budget": f, "at_floor": {"failed": "CapacityError: ..."}}]
    m = kb.medians(rows)["g"]
    # at budget: |10|, |-30| → 20; |-20|, |2| → 11; |5|, |-1| → 3. At the floor only the run that did not fail
    assert m["at_budget"] == {"mean_ttft_ms": 20.0, "mean_tpot_ms": 11.0, "output_throughput": 3.0}
    assert m["at_floor"] == {"mean_ttft_ms": 30.0, "mean_tpot_ms": 2.0, "output_throughput": 1.0}

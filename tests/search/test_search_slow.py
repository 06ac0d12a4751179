"""Slow end-to-end searches: a MoE model with expert parallelism, and the benchmark configuration's size and speed."""

import pytest

from graphsim.serving import SLO, DeploymentConfig, Lengths
from graphsim.serving.search import meets, run_search
from graphsim.serving.search_space import SearchSpec

pytestmark = pytest.mark.slow


def test_moe_search_evaluates_expert_parallel_partitions(roofline_home):
    pytest.importorskip("torch")
    spec = SearchSpec(base=DeploymentConfig(model="qwen3-30b-a3b", hardware="h200"), gpus=4, isl=Lengths(2000, 2000), osl=Lengths(200, 200),
                      slo=SLO(2000, 30), max_num_seqs=(8, 64), max_num_batched_tokens=(8192,),
                      prefill_batched_tokens=(8192,), verify=1)
    res = run_search(spec)
    eps = {(r.candidate.pools[0].tp, r.candidate.pools[0].ep) for r in res.rows if r.candidate.mode == "agg"}
    assert {(2, 2), (4, 4)} <= eps
    ep_rows = [r for r in res.rows if any(p.ep > 1 for p in r.candidate.pools)]
    assert ep_rows and all(r.final.output_tokens_per_s_per_gpu > 0 for r in ep_rows)
    assert res.best is not None and meets(res.row(res.best).final, spec)


def test_benchmark_configuration_evaluates_over_a_thousand_candidates(roofline_home):
    pytest.importorskip("torch")
    spec = SearchSpec(base=DeploymentConfig(model="qwen3-32b", hardware="h200"), gpus=8, isl=Lengths(4000, 4000), osl=Lengths(1000, 1000),
                      slo=SLO(2000, 30))
    res = run_search(spec)
    assert len(res.rows) >= 1000
    assert res.timings["steady_state"] < 10.0  # 1.3 s on the 2-core development machine
    assert res.best is not None
    best = res.row(res.best)
    assert best.sim is not None and meets(best.sim, spec)

"""The benchmark's configuration: 10,000 Poisson requests on Llama-3.1-8B TP=1 (slow: run with -m slow)."""

import time

import pytest

from graphsim.serving import DeploymentConfig, parse_lengths, simulate, summarize, synthetic
from graphsim.serving.deployment import build_cost, plan_deployment


@pytest.mark.slow
def test_ten_thousand_requests_within_budget():
    pytest.importorskip("torch")
    dep = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100"))
    cost, _, _ = build_cost(dep)
    work = synthetic(10_000, 10.0, parse_lengths("1024:4096", "in"), parse_lengths("100:500", "out"), seed=0)
    c0 = time.process_time()
    res = simulate(dep.simulation_setup(cost), work)
    cpu = time.process_time() - c0
    s = summarize(res)
    assert s.completed == 10_000
    assert cpu < 10.0  # the target is ≤ 10 s wall on one core

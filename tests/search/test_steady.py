"""The steady-state fast path against the simulator it stands in for (affine iteration cost: fast)."""

import math

import pytest
from serving_helpers import AffineCost, llama_layout, small_setup

from graphsim.costing.hardware import load_hardware
from graphsim.serving import ClosedLoop, Lengths, simulate
from graphsim.serving.disagg import DisaggSetup, KvLink, simulate_disagg
from graphsim.serving.search_eval import window_metrics
from graphsim.serving.steady import aggregated_point, disaggregated_point

ISL, OSL = 1500, 200


def closed(clients):
    return ClosedLoop(clients, 4 * clients, Lengths(ISL, ISL), Lengths(OSL, OSL))


@pytest.mark.parametrize("clients,mnbt", [(1, 2048), (8, 2048), (32, 1024), (64, 4096)])
def test_aggregated_point_matches_the_simulation(clients, mnbt):
    cost = AffineCost()
    sim = simulate(small_setup(num_blocks=20_000, max_num_seqs=clients, mnbt=mnbt, cost=cost), closed(clients))
    m = window_metrics(sim.requests, clients)
    sp = aggregated_point(cost, ISL, OSL, clients, mnbt)
    assert sp.requests_per_s == pytest.approx(m["requests_per_s"], rel=0.03)
    assert sp.tpot_s * 1e3 == pytest.approx(m["tpot_ms"], rel=0.03)
    assert sp.ttft_s * 1e3 == pytest.approx(m["ttft_ms"], rel=0.6)  # TTFT is the loose one (waves)
    assert sp.output_tokens_per_s == pytest.approx(sp.requests_per_s * OSL)


@pytest.mark.parametrize("x,y,clients", [(1, 1, 16), (2, 1, 64), (1, 2, 32)])
def test_disaggregated_point_matches_the_simulation(x, y, clients):
    cost = AffineCost()
    link = KvLink.from_hardware(load_hardware("h200"))
    p = small_setup(num_blocks=20_000, mnbt=4096, replicas=x, cost=cost)
    d = small_setup(num_blocks=20_000, max_num_seqs=clients, replicas=y, router="least-outstanding", cost=cost)
    setup = DisaggSetup(p, d, link)
    sim = simulate_disagg(setup, closed(y * clients))
    m = window_metrics(sim.requests, y * clients)
    nbytes = setup.transfer_bytes(ISL)
    sp = disaggregated_point(cost, cost, ISL, OSL, x, y, clients, 4096, 2048, link.transfer_s(nbytes),
                             nbytes / link.bandwidth_bytes_per_s)
    assert sp.requests_per_s == pytest.approx(m["requests_per_s"], rel=0.05)
    assert sp.tpot_s * 1e3 == pytest.approx(m["tpot_ms"], rel=0.05)
    assert sp.ttft_s * 1e3 == pytest.approx(m["ttft_ms"], rel=0.6)


def test_prefill_bound_aggregated_queues_its_clients():
    cost = AffineCost(per_token_us=2.0)  # expensive prompts
    sp_small = aggregated_point(cost, ISL, OSL, 8, 1024)
    sp_big = aggregated_point(cost, ISL, OSL, 512, 1024)
    assert sp_big.bound == "prefill"
    assert sp_big.ttft_s > 10 * sp_small.ttft_s
    # packed iterations: throughput no more than the token budget allows
    assert sp_big.requests_per_s <= 1024 / (ISL + OSL - 1) / (cost.base * 1e-6) + 1e-9


def test_layouts_are_llamas():
    assert llama_layout().bytes_per_token == 131_072


def test_a_closed_loop_can_ramp_its_clients_up():
    loop = ClosedLoop(4, 8, Lengths(ISL, ISL), Lengths(OSL, OSL), ramp_s=2.0)
    assert [loop.start_s(i) for i in range(4)] == [0.0, 0.5, 1.0, 1.5]
    res = simulate(small_setup(num_blocks=20_000, max_num_seqs=4, mnbt=4096), loop)
    arrivals = [r.arrival for r in res.requests]
    assert {0.0, 0.5, 1.0, 1.5} <= set(arrivals) and len(res.completed) == 8
    assert min(a for a in arrivals if a not in (0.0, 0.5, 1.0, 1.5)) > 0.0  # re-sends come after completions


def test_window_metrics_of_a_run_where_nothing_completed():
    # no request finished (e.g. every one rejected): no rate, and no latency to average (was an IndexError)
    m = window_metrics([], 4)
    assert m["requests_per_s"] == 0.0 and m["output_tokens_per_s"] == 0.0
    assert all(math.isnan(m[k]) for k in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tpot_p90_ms"))

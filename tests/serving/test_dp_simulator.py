"""The lockstep simulator of data-parallel attention (serving/dp_simulator.py): vLLM's DP load balancing, every rank
stepping together for Max(own parts) + the MoE layers, idle ranks in the wave, hand-derived request times."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from graphsim.cli import options as opt
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.dp_simulator import DpSimulationSetup, MoeStepCost, simulate_dp
from graphsim.serving.requests import RequestSpec


class OwnCost:
    """A rank's own part: 100 µs + 1 µs per token (measured, code 0)."""

    def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
        return 100.0 + tokens, 0

    def decode_run_us(self, batch, ctx_mean0, k):  # pragma: no cover - segments are off for DP ranks
        raise AssertionError("no decode segments in lockstep")


class MoeCost(MoeStepCost):
    """The MoE layers: 20 µs + 1 µs per global token (an idle rank's dummy batch counts 1)."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def step_us(self, rank_tokens: Sequence[int]) -> tuple[float, int]:
        self.calls.append(list(rank_tokens))
        return 20.0 + sum(max(1, t) for t in rank_tokens), 0


@pytest.fixture(scope="module")
def dep():
    cfg = opt.deployment_data("qwen3-30b-a3b", "h200", 1, 1, data_parallel_size=2, enable_expert_parallel=True,
                              max_num_batched_tokens=2048, max_num_seqs=16)
    return plan_deployment(DeploymentConfig.parse(cfg))


def setup_of(dep, moe: MoeCost) -> DpSimulationSetup:
    return DpSimulationSetup(dep.simulation_setup(OwnCost(), replicas=2, host_time=False), moe)  # type: ignore[arg-type]


def test_two_ranks_by_hand(dep):
    # two 10-token prompts at t = 0, 2 output tokens each; vLLM's DP balancer (waiting × 4 + running) sends the
    # first to rank 0 (both 0) and the second to rank 1 (rank 0 now scores 4).
    # step 1, both prefill 10 tokens: max(100 + 10, 100 + 10) + (20 + 10 + 10) = 150 µs → first tokens at 150 µs
    # step 2, both decode 1 token: max(101, 101) + (20 + 1 + 1) = 123 µs → second tokens at 273 µs
    moe = MoeCost()
    res = simulate_dp(setup_of(dep, moe), [RequestSpec(0.0, 10, 2), RequestSpec(0.0, 10, 2)])
    done = res.completed
    assert len(done) == 2 and {r.replica for r in done} == {0, 1}
    for r in done:
        assert r.first_token_t == pytest.approx(150e-6) and r.finish_t == pytest.approx(273e-6)
    assert moe.calls == [[10, 10], [1, 1]]
    its = res.iterations
    assert list(its["replica"]) == [0, 1, 0, 1]
    assert np.allclose(its["dur_s"], [150e-6, 150e-6, 123e-6, 123e-6])  # every rank's row lasts the lockstep step
    assert res.gpus == 2 and [p["iterations"] for p in res.per_replica] == [1 + 1, 1 + 1]


def test_an_idle_rank_runs_the_dummy_batch(dep):
    # one request on rank 0; rank 1 idles with vLLM's dummy batch: own part max(100 + 10, 100 + 1) + MoE 20 + 10 + 1
    moe = MoeCost()
    res = simulate_dp(setup_of(dep, moe), [RequestSpec(0.0, 10, 2)])
    (r,) = res.completed
    assert r.first_token_t == pytest.approx((110 + 31) * 1e-6)
    assert r.finish_t == pytest.approx((110 + 31 + 101 + 22) * 1e-6)
    assert moe.calls == [[10, 0], [1, 0]]
    assert list(res.iterations["replica"]) == [0, 0]  # the dummy batch is not a scheduled iteration of rank 1


def test_the_wave_ends_when_no_rank_has_work(dep):
    # the second request arrives long after the first finished: the ranks sleep in between (no dummy steps)
    moe = MoeCost()
    res = simulate_dp(setup_of(dep, moe), [RequestSpec(0.0, 10, 2), RequestSpec(1.0, 10, 2)])
    assert len(moe.calls) == 4
    late = max(res.completed, key=lambda r: r.arrival)
    assert late.first_token_t == pytest.approx(1.0 + 141e-6)


@pytest.mark.slow
def test_real_costs_run_and_every_request_completes():
    pytest.importorskip("torch")
    import copy

    from graphsim.catalog import ResolvedModel, resolve_model
    from graphsim.serving import parse_lengths, summarize, synthetic
    from graphsim.serving.dp_attention import dp_simulation_setup

    cfg = copy.deepcopy(resolve_model("qwen3-30b-a3b").config)
    cfg.update(num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16,
               hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
               max_position_embeddings=4096)
    import graphsim.serving.deployment as deployment

    data = opt.deployment_data("qwen3-30b-a3b", "h200", 1, 1, data_parallel_size=4, enable_expert_parallel=True,
                               max_model_len=2048)
    d = deployment.plan_deployment(DeploymentConfig.parse(data), model=ResolvedModel("tiny-moe", cfg, "path", "test"))
    setup, note = dp_simulation_setup(d)
    assert "DP 4 × TP 1 attention, experts EP 4" in note
    wl = synthetic(40, 50.0, parse_lengths("64:128", "--input-len"), parse_lengths("8:16", "--output-len"), 0,
                   "poisson", 1.0, 0, 1)
    res = simulate_dp(setup, wl)
    s = summarize(res)
    assert s.completed == 40 and s.gpus == 4
    # lockstep: rows that start together last the same
    its = res.iterations
    for t in np.unique(its["start_s"])[:20]:
        assert np.ptp(its["dur_s"][its["start_s"] == t]) == 0.0


@pytest.mark.slow
def test_the_simulators_moe_part_is_predicts():
    """MoeStepCost (the simulator's MoE layers, shared experts beside them) prices what costing.dp_attention prices
    for one step: exactly above the 256-token stream limit; below it the simulator also carries the shared experts'
    input clone (a few µs a layer), which predict keeps in the ranks' own part."""
    pytest.importorskip("torch")
    import copy

    from graphsim.catalog import ResolvedModel, resolve_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.dp_attention import DataParallelMoe, price_dp_step
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.importers.hf import import_hf
    from graphsim.workload import parse_batch_spec

    cfg = copy.deepcopy(resolve_model("deepseek-v2-lite").config)
    cfg.update(num_hidden_layers=2, first_k_dense_replace=1, hidden_size=64, intermediate_size=128,
               moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
               num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16, vocab_size=96, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1)
    graph, _ = import_hf(ResolvedModel("tiny-dsv2", cfg, "path", "test"), full_depth=True, cache=False)
    cm = build_cost_model(graph, "h200", default_profile=False, moe_routing=parse_routing("balanced"))
    plan = DataParallelMoe(2, 1, True, "deepep_low_latency")
    moe = MoeStepCost(cm, plan)
    assert moe.overlaps and moe.shared_names
    big = price_dp_step(cm, plan, [parse_batch_spec("prefill:1x300"), parse_batch_spec("prefill:1x280")])
    def moe_part(p):  # predict's step less the ranks' own part (the tiny MLA has no rows or roofline: NaN)
        return p.experts_us + p.dispatch_us + p.combine_us + p.shared_us - p.hidden_us

    assert moe.step_us([300, 280])[0] == pytest.approx(moe_part(big), rel=1e-9)
    small = price_dp_step(cm, plan, [parse_batch_spec("decode:4x64")] * 2)
    extra = moe.step_us([4, 4])[0] - moe_part(small)
    assert 0 < extra < 0.05 * moe.step_us([4, 4])[0]


def test_replicas_are_independent_dp_groups(dep):
    # --replicas 2 of -dp 2: round robin over the groups, vLLM's balancer inside each: four 10-token prompts at
    # t = 0 land on ranks 0, 2, 1, 3; each group steps on its own, as in test_two_ranks_by_hand (150 µs, 273 µs)
    from dataclasses import replace

    from graphsim.serving.config import ParallelConfig

    s = setup_of(dep, MoeCost())
    s = DpSimulationSetup(replace(s.ranks, parallel=ParallelConfig(data_parallel_size=2, replicas=2)), s.moe)
    res = simulate_dp(s, [RequestSpec(0.0, 10, 2)] * 4)
    assert [r.replica for r in sorted(res.completed, key=lambda r: r.id)] == [0, 2, 1, 3]
    assert all(r.first_token_t == pytest.approx(150e-6) and r.finish_t == pytest.approx(273e-6) for r in res.completed)
    assert res.gpus == 4 and len(res.per_replica) == 4

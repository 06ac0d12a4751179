"""Attention–FFN disaggregation (graphsim/serving/afd.py): the ping-pong composition by hand, the split by node
kinds conserving work and weights, KV on the attention pool only, and the CLI's bad values."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from graphsim.serving.afd import AfdConfig, AfdError, compose_us, micro_step
from graphsim.workload import SeqGroup, Step, parse_batch_spec


def _one(x: float) -> np.ndarray:
    return np.asarray([[x]])


# --- the composition, by hand --------------------------------------------------------------------------------
def test_two_micro_batches_ring_full_matches_megascale_formula():
    # a = 30, d = 5, e = 20, c = 5 µs per layer and micro-batch, L = 4 layers, m = 2:
    # S = 30 + 5 + 20 + 5 = 60, T = 30; a round is max(2 × 30, 60) = 60; fill min(60 − 30, 1 × 30) = 30
    # → 4 × 60 + 30 = 270 µs, MegaScale-Infer's (T_a + T_e + 2·T_c) + T_f·(m·L − 1) = 60 + 30 × 7 = 270
    t = compose_us(_one(30), _one(5), _one(20), _one(5), [4], 2, np.zeros(1), np.zeros(1))
    assert t[0] == pytest.approx(270.0)


def test_two_micro_batches_transfer_bound_ring_not_full():
    # a = 10, d = 20, e = 10, c = 20: S = 60, T = 20, 2 × 20 < 60 so each micro-batch waits on its own trip:
    # micro-batch 1 ends layer 4 at 4 × 60 = 240, micro-batch 2 trails it by one stage (20) → 260 µs;
    # before/after: 3 µs and 7 µs per micro-batch on the attention pool, serial → + 2 × (3 + 7) = 280 µs
    t = compose_us(_one(10), _one(20), _one(10), _one(20), [4], 2, np.asarray([3.0]), np.asarray([7.0]))
    assert t[0] == pytest.approx(280.0)


def test_one_micro_batch_is_serial():
    # m = 1: no overlap, L × S = 3 × (4 + 1 + 6 + 1) = 36 µs
    t = compose_us(_one(4), _one(1), _one(6), _one(1), [3], 1, np.zeros(1), np.zeros(1))
    assert t[0] == pytest.approx(36.0)


def _ring_list_schedule(a: float, d: float, e: float, c: float, layers: int, m: int) -> float:
    """An independent event simulation: four resources (attention pool, A→F link, FFN pool, F→A link) each
    serving (layer, micro-batch) units in that order; a unit's stage starts when its previous stage is done
    and the resource is free."""
    free = [0.0] * 4
    ready = [0.0] * m  # when micro-batch j's previous layer came back
    for _layer in range(layers):
        for j in range(m):
            t = ready[j]
            for k, dur in enumerate((a, d, e, c)):
                t = max(t, free[k]) + dur
                free[k] = t
            ready[j] = t
    return max(ready)


@pytest.mark.parametrize(("a", "d", "e", "c"), [(30, 5, 20, 5), (10, 20, 10, 20), (7, 1, 9, 2), (5, 5, 5, 5),
                                                (1, 8, 2, 3)])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_composition_matches_an_event_simulation_of_the_ring(a, d, e, c, m):
    layers = 5
    want = _ring_list_schedule(a, d, e, c, layers, m)
    got = compose_us(_one(a), _one(d), _one(e), _one(c), [layers], m, np.zeros(1), np.zeros(1))[0]
    assert got == pytest.approx(want)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_layers_of_two_kinds_stay_close_to_the_event_simulation(m):
    """Layer kinds with different stage times (the per-kind sum with the first kind's fill is an approximation):
    DeepSeek-V3's 3 dense + 58 MoE layers with the stage times `predict --afd 8:8 --afd-attention-tp 1
    --afd-ffn-parallel ep -b decode:64x4096` printed (µs: a 235.4, d 83.4, c 19.2; e 202.9 dense, 863.0 MoE)."""
    dense, moe = (235.4, 83.4, 202.9, 19.2), (235.4, 83.4, 863.0, 19.2)
    free = [0.0] * 4
    ready = [0.0] * m
    for st in [dense] * 3 + [moe] * 58:
        for j in range(m):
            t = ready[j]
            for k, dur in enumerate(st):
                t = max(t, free[k]) + dur
                free[k] = t
            ready[j] = t
    a, d, e, c = (np.asarray([[dense[k]], [moe[k]]]) for k in range(4))
    got = compose_us(a, d, e, c, [3, 58], m, np.zeros(1), np.zeros(1))[0]
    assert got == pytest.approx(max(ready), rel=2e-3)


def test_micro_batches_split_decodes_and_chunks():
    # 64 decodes at 2048 in 2 micro-batches: 32 each; a 1024-token prefill chunk after 100 cached: pieces of
    # 512, the busiest (last) one after 100 + 512 = 612 cached; 5 decodes in 2: ⌈5/2⌉ = 3
    s = Step((SeqGroup(1, 2048, 64), SeqGroup(1024, 100, 1), SeqGroup(1, 10, 5)))
    assert micro_step(s, 2).groups == (SeqGroup(1, 2048, 32), SeqGroup(512, 612, 1), SeqGroup(1, 10, 3))
    assert micro_step(s, 1) == s


@pytest.mark.parametrize(("text", "m"), [("2x4", 2), ("0:4", 2), ("2:", 2), ("a:b", 2), ("2:4", 0), ("2:4", 65)])
def test_bad_afd_values_are_one_error(text, m):
    with pytest.raises(AfdError, match="--afd"):
        AfdConfig.parse(text, m)


# --- on traced tiny models -----------------------------------------------------------------------------------
def _tiny(name: str):
    from graphsim.catalog import ResolvedModel, resolve_model

    cfg = copy.deepcopy(resolve_model(name).config)
    cfg.pop("quantization_config", None)
    cfg.update(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=96, max_position_embeddings=4096, num_hidden_layers=2, num_experts=8,
               n_routed_experts=8, num_experts_per_tok=2, bos_token_id=1, eos_token_id=2)
    if name.startswith("deepseek"):  # layer 0 dense, layer 1 MoE with a shared expert
        cfg.update(first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=32, kv_lora_rank=16,
                   qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_shared_experts=1)
    else:
        cfg.update(head_dim=16)
    return ResolvedModel(f"tiny-{name}", cfg, "path", "test")


# DeepSeek-V3's tiny trace (dense layer 0, MoE layer 1 with a shared expert, MLA) takes ~6 s: slow
@pytest.fixture(scope="module", params=["qwen3-30b-a3b", pytest.param("deepseek-v3", marks=pytest.mark.slow)])
def traced(request):
    pytest.importorskip("torch")
    from graphsim.importers.hf import import_hf

    return import_hf(_tiny(request.param))[0]


def _models(graph, a: int, f: int, m: int = 1, ep: bool = False, link_gbps: float | None = None,
            latency_us: float | None = None, attention_tp: int = 0):
    from graphsim.serving.afd import build_afd_model

    return build_afd_model(graph, "h200", AfdConfig(a, f, m, ep, attention_tp), link_gbps=link_gbps,
                           link_latency_us=latency_us)


def _kernel_leaves(cm) -> list:
    """(leaf, instances) of a cost model's kernels (leaves that are graph nodes, with their layer multiplicity)."""
    names = {n.name for n in cm.graph.nodes}
    return [(lf, n) for lf, n in zip(cm.tree.leaves, cm.tree.multiplicity, strict=True) if lf.name in names]


def _totals(leaves_by_count, graph_nodes) -> tuple[float, float]:
    from graphsim.passes.partition.conservation import kernel_flops, weight_bytes

    flops = sum(kernel_flops(lf.attrs) * n for lf, n in leaves_by_count)
    weights = sum(weight_bytes(graph_nodes[lf.name][0], graph_nodes[lf.name][1]) * n for lf, n in leaves_by_count)
    return flops, weights


@pytest.mark.parametrize("size", [1, 2])
def test_split_conserves_flops_and_weights(traced, size):
    """Attention pool + FFN pool at tp = size hold exactly the unified tp = size model's FLOPs and weight bytes:
    every kernel on exactly one pool."""
    from graphsim.cost_model import build_cost_model

    afd = _models(traced, size, size)
    unified = build_cost_model(traced, "h200", tp=size, compiled=False)  # the pools price the custom-op graph (afd.build_afd_model)
    where = {n.name: (n, afd.attention.graph) for n in afd.attention.graph.nodes}
    where_f = {n.name: (n, afd.ffn.graph) for n in afd.ffn.graph.nodes}
    att = afd.split.attention_leaves()
    ffn = afd.split.ffn_leaves()
    assert not {lf.name for lf, _ in att} & {lf.name for lf, _ in ffn}
    assert sorted(lf.name for lf, _ in att + ffn) == sorted(lf.name for lf, _ in _kernel_leaves(unified))
    a_f, a_w = _totals(att, where)
    f_f, f_w = _totals(ffn, where_f)
    u_nodes = {n.name: (n, unified.graph) for n in unified.graph.nodes}
    u_f, u_w = _totals(_kernel_leaves(unified), u_nodes)
    assert a_f + f_f == pytest.approx(u_f)
    assert a_w + f_w == pytest.approx(u_w)
    assert f_f > 0 and a_f > 0


def test_ffn_pool_has_no_attention_and_no_kv(traced):
    from graphsim.ir.kernel import KernelKind

    afd = _models(traced, 2, 4, ep=True)
    kinds = {lf.attrs.kind for lf, _ in afd.split.ffn_leaves()}
    assert KernelKind.MOE_EXPERTS in kinds
    assert not kinds & {KernelKind.ATTENTION, KernelKind.KV_CACHE_WRITE, KernelKind.EMBEDDING}
    assert KernelKind.ATTENTION in {lf.attrs.kind for lf, _ in afd.split.attention_leaves()}


def test_one_micro_batch_on_a_free_link_is_the_unified_iteration(traced):
    """m = 1, a link of zero latency and (practically) infinite bandwidth: the AFD iteration is the unified
    model's sum of the same kernels (tp = 1 both), step by step."""
    from graphsim.cost_model import build_cost_model

    afd = _models(traced, 1, 1, m=1, link_gbps=1e12, latency_us=0.0)
    unified = build_cost_model(traced, "h200", tp=1, compiled=False)  # as the pools (afd.build_afd_model)
    steps = [parse_batch_spec(s) for s in ("decode:16x1000", "prefill:1x300")]
    got = afd.times(steps).total_us
    ev = unified.evaluate(steps)  # every kernel's own price in the unified model, summed serially
    idx = [i for i, lf in enumerate(unified.tree.leaves) if lf.name in {n.name for n in unified.graph.nodes}]
    want = (ev.leaf_time_us[idx] * unified.tree.multiplicity[idx, None]).sum(axis=0)
    assert got == pytest.approx(want, rel=1e-6)


def test_overlap_beats_serial_and_stays_above_the_floors(traced):
    from graphsim.serving.afd import floor_check

    steps = [parse_batch_spec("decode:64x2048")]
    serial = _models(traced, 2, 2, m=1).times(steps)
    pp = _models(traced, 2, 2, m=2).times(steps)
    floor_check(pp)
    floor_check(serial)
    # two micro-batches of 32 cost at most two serial iterations of 32 (no overlap at all) and, with the pools
    # overlapping, less than one iteration of 64 done twice serially
    assert pp.total_us[0] < 2 * serial.total_us[0]
    assert pp.total_us[0] >= max(pp.attention_busy_us()[0], pp.ffn_busy_us()[0])


def test_transfer_bytes_are_the_ffn_input_width_per_token(traced):
    # the tiny models' FFN input is hidden 64 bf16 = 128 B a token; 2 attention and 4 FFN GPUs: each FFN GPU
    # takes every token (128 B) while each attention GPU sends to 4/2 = 2 of them, so the busier side moves
    # 2 × 128 = 256 B a token in dispatch and max(1, 2/4) × 128 = 128 B in combine
    afd = _models(traced, 2, 4)
    assert afd.row_bytes == 128
    d, c = afd.transfer_bytes(np.asarray([10.0]))
    assert (d[0], c[0]) == (2560.0, 1280.0)


def test_attention_instances_feed_the_ffn_pool_together(traced):
    """2 attention instances of tp 1 and 1 FFN GPU, m = 1: each instance's attention prices its own batch, the FFN
    prices both instances' tokens at once (the single-instance model's FFN on the doubled step), and dispatch moves
    max(d = 2, F/a = 1) = 2 × the per-token bytes through the busier (FFN) GPU."""
    step = [parse_batch_spec("decode:24x512")]
    double = [parse_batch_spec("decode:48x512")]
    two = _models(traced, 2, 1, m=1, attention_tp=1).times(step)
    one = _models(traced, 1, 1, m=1).times(step)
    one_doubled = _models(traced, 1, 1, m=1).times(double)
    assert two.attention_us == pytest.approx(one.attention_us)
    assert two.ffn_us == pytest.approx(one_doubled.ffn_us)
    assert not np.allclose(two.ffn_us, one.ffn_us)
    afd = _models(traced, 2, 1, m=1, attention_tp=1)
    d, c = afd.transfer_bytes(np.asarray([10.0]))
    # 10 tokens × 128 B × max(2, 1/1) = 2560 B dispatch; combine 10 × 128 × max(1, 2/1) = 2560 B
    assert (d[0], c[0]) == (2560.0, 2560.0)


def test_bad_attention_tp_is_one_error():
    with pytest.raises(AfdError, match="--afd-attention-tp 3"):
        AfdConfig(4, 2, 2, False, 3)


# --- KV on the attention pool only -----------------------------------------------------------------------------
def test_kv_capacity_is_the_attention_pools_with_ffn_weights_moved_off():
    from graphsim.serving.afd import afd_deployment
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment

    dep = plan_deployment(DeploymentConfig.parse({"model": "qwen3-30b-a3b", "hardware": "h200",
                                                  "parallel": {"tensor_parallel_size": 2}}))
    afd = afd_deployment(dep, AfdConfig(2, 4))
    # Qwen3-30B-A3B: 48 layers of 128 experts of gate, up and down 2048 × 768 in bf16, split over 2 ranks:
    # 48 × 128 × 3 × 2048 × 768 × 2 B / 2 = 28,991,029,248 B; the router 48 × 128 × 2048 × 2 B = 25,165,824 B
    # stays whole on every rank → 29,016,195,072 B leave each attention GPU
    moved = 48 * 128 * 3 * 2048 * 768 * 2 // 2 + 48 * 128 * 2048 * 2
    assert moved == 29_016_195_072
    assert dep.budget.term("weights").bytes - afd.budget.term("weights").bytes == moved
    assert afd.budget.available_bytes - dep.budget.available_bytes == moved
    assert afd.layout == dep.layout  # the same per-rank KV layout (tp 2), more blocks
    assert afd.capacity.num_blocks == afd.budget.available_bytes // afd.layout.bytes_per_block
    assert afd.capacity.num_blocks > dep.capacity.num_blocks


def test_ffn_weights_that_do_not_fit_the_ffn_pool_are_refused():
    from graphsim.serving.afd import afd_deployment
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment

    # DeepSeek-V3's FFN weights (its ~650 billion expert parameters, fp8: over 600 GiB) cannot sit on one H200
    dep = plan_deployment(DeploymentConfig.parse({"model": "deepseek-v3", "hardware": "h200",
                                                  "parallel": {"tensor_parallel_size": 8}}))
    with pytest.raises(AfdError, match=r"FFN weights need .* FFN GPU"):
        afd_deployment(dep, AfdConfig(8, 1))


# --- CLI: bad values, one line, exit 2 ---------------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["--afd", "2x4"], ["--afd", "0:4"], ["--afd", "2:4", "--afd-micro-batches", "0"],
    ["--afd", "2:4", "--afd-ffn-parallel", "dp"], ["--afd-micro-batches", "3"], ["--afd", "2:4", "--tp", "4"],
    ["--afd", "2:4", "--afd-link-gbps", "0"], ["--afd", "4:2", "--afd-attention-tp", "3"],
    ["--afd-attention-tp", "2"],
])
@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_cli_refuses_bad_afd_values_in_one_line(capsys, command, args):
    from graphsim.cli.app import main

    workload = ["--concurrency", "4"] if command == "simulate" else []
    code = main([command, "qwen3-30b-a3b", "--gpu", "h200", *workload, *args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "afd" in err.lower(), err
    assert "Traceback" not in err



# --- search: AFD units beside aggregated and disaggregated ones ------------------------------------------------
def _search_spec(model: str, gpus: int = 4):
    from graphsim.serving.search_space import SearchSpec

    return SearchSpec.parse({"base": {"model": model, "hardware": "h200"}, "gpus": gpus, "tp": (1, 2),
                             "modes": ("afd",), "max_num_seqs": (64,), "max_num_batched_tokens": (8192,)})


def test_search_enumerates_afd_units_of_a_moe_model():
    from graphsim.catalog import resolve_model
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.afd_search import MICRO_BATCHES, afd_config_of
    from graphsim.serving.search_space import enumerate_candidates

    spec = _search_spec("qwen3-30b-a3b")
    cands, _ = enumerate_candidates(spec, resolve_model("qwen3-30b-a3b"), load_hardware("h200"))
    # (instance tp a, instances d, FFN GPUs F) with a, F in {1, 2}, d in {1, 2, 4} and a·d + F <= 4:
    # a=1: d=1 F=1,2; d=2 F=1,2 (d=4 leaves no FFN GPU); a=2: d=1 F=1,2 (d=2 leaves none) → 6, each m = 2, 3
    splits = sorted((c.pools[0].tp, c.pools[0].instances, c.pools[1].tp, c.micro_batches) for c in cands)
    want = [(1, 1, 1), (1, 1, 2), (1, 2, 1), (1, 2, 2), (2, 1, 1), (2, 1, 2)]
    assert splits == sorted((a, d, f, m) for a, d, f in want for m in MICRO_BATCHES)
    for c in cands:
        assert c.mode == "afd" and c.unit_gpus == c.pools[0].tp * c.pools[0].instances + c.pools[1].tp
        assert c.clients == 64 * c.pools[0].instances
        assert c.replicas == 4 // c.unit_gpus
        cfg = afd_config_of(c)
        assert cfg.expert_parallel == (cfg.ffn_gpus > 1)  # 128 experts split over 2 FFN GPUs
        assert c.label().startswith("afd ")


def test_search_prunes_afd_for_a_dense_model():
    from graphsim.catalog import resolve_model
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.search_space import enumerate_candidates

    spec = _search_spec("llama-3.1-8b")
    cands, pruned = enumerate_candidates(spec, resolve_model("llama-3.1-8b"), load_hardware("h200"))
    assert cands == []
    assert [p.reason for p in pruned] == ["the model has no routed experts: AFD splits MoE layers"]


@pytest.mark.parametrize(("mode", "ok"), [("all", True), ("agg,afd", True), ("afd", True), ("agg,pd", False)])
def test_search_mode_accepts_afd(capsys, mode, ok):
    from graphsim.cli.app import main

    if ok:  # parsing only: the spec is built, then --gpus 0 stops the search in one line
        code = main(["search", "qwen3-30b-a3b", "--gpu", "h200", "--mode", mode, "--gpus", "0"])
        assert "--mode" not in capsys.readouterr().err
    else:
        code = main(["search", "qwen3-30b-a3b", "--gpu", "h200", "--mode", mode])
        err = capsys.readouterr().err.strip()
        assert "unknown --mode" in err and len(err.splitlines()) == 1
    assert code == 2


def test_simulate_runs_afd_units_on_the_attention_pools_kv(traced, tmp_path, request):
    """A closed loop through 2 attention instances (tp 1) and 2 FFN GPUs: every request completes, the GPUs are
    2 + 2, the engines are the 2 instances, and each has the attention pool's KV blocks."""
    import json

    from graphsim.serving.afd import AfdCost, afd_deployment, afd_setup, build_afd_model
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment
    from graphsim.serving.requests import ClosedLoop, Lengths
    from graphsim.serving.simulator import simulate

    (tmp_path / "config.json").write_text(json.dumps(_tiny(request.node.callspec.params["traced"]).config))
    cfg = AfdConfig(2, 2, 2, False, 1)
    dep = plan_deployment(DeploymentConfig.parse({"model": str(tmp_path / "config.json"), "hardware": "h200",
                                                  "engine": {"max_num_seqs": 8, "max_model_len": 1024}}))
    dep = afd_deployment(dep, cfg)
    setup = afd_setup(dep, AfdCost(build_afd_model(traced, "h200", cfg)), cfg, host_time=False)
    res = simulate(setup, ClosedLoop(8, 24, Lengths(100, 100), Lengths(20, 20)))
    assert setup.gpus == 4 and setup.replicas == 2 and setup.num_blocks == dep.capacity.num_blocks
    assert res.requests.completed_mask.sum() == 24
    assert len(res.per_replica) == 2

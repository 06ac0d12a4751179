"""Context parallel in `graphsim search` (serving/cp_search.py): the pcp/dcp axes and their default, the refusals
pruned with their reasons, CP candidates' GPUs and memory, a long-prompt search under a tight TTFT where prefill
context parallel wins, and launch files carrying vLLM's --prefill-/--decode-context-parallel-size."""

from __future__ import annotations

import pytest

from graphsim.catalog import resolve_model
from graphsim.costing.hardware import load_hardware
from graphsim.serving import SLO, Lengths
from graphsim.serving.cp_search import CpPlan, prefill_floor_s
from graphsim.serving.search_space import PoolConfig, SearchSpec, SearchSpecError, enumerate_candidates

H200 = load_hardware("h200_sxm")


def _spec(model: str = "llama-3.1-8b", **changes) -> SearchSpec:
    d = dict(base={"model": model, "hardware": "h200_sxm"}, gpus=8, isl=Lengths(32768, 32768),
             osl=Lengths(256, 256), slo=SLO(500, 50), max_num_seqs=(4, 16), max_num_batched_tokens=(8192,),
             modes=("agg",), verify=0, seed=0)
    d.update(changes)
    return SearchSpec.parse(d)


def test_prefill_floor_is_the_models_prefill_flops_over_the_bf16_peak():
    # Llama-3.1-8B, one 32,768-token prompt, by hand:
    #   matmuls a layer: q 4096² + k, v 4096·1024 each + o 4096² + gate/up/down 3·4096·14336 = 218,103,808 params,
    #     × 32 layers × 2 FLOPs × 32,768 tokens = 457,396,837,154,816
    #   causal attention: scores and values 2·2·(32 heads·128) FLOPs per (query, key) pair, 32768·32769/2 pairs a
    #     layer, × 32 layers = 281,487,861,809,152
    #   the head on the last token: 2·128,256·4096 = 1,050,673,152
    #   → 7.3894e14 FLOPs over H200's dense BF16 peak 989.5 TFLOP/s = 0.7468 s (norms and the rest: < 0.1 %)
    flops = 2 * 32 * 218_103_808 * 32768 + 4 * 4096 * 32 * (32768 * 32769 // 2) + 2 * 128256 * 4096
    assert prefill_floor_s(_spec(), resolve_model("llama-3.1-8b"), H200) == pytest.approx(flops / 989.5e12, rel=1e-3)


def test_pcp_is_explored_by_default_only_when_one_gpu_cannot_prefill_within_the_ttft():
    model = resolve_model("llama-3.1-8b")
    # floor 747 ms (above): over a 500 ms TTFT → 1, 2, 4, 8 (powers of two to the budget)
    tight = CpPlan.make(_spec(), model, H200)
    assert tight.pcp == (1, 2, 4, 8) and "747 ms" in tight.pcp_default_reason
    # 800 ms TTFT, or no TTFT SLO: one GPU could meet it at its peak → no PCP
    assert CpPlan.make(_spec(slo=SLO(800, 50)), model, H200).pcp == (1,)
    assert CpPlan.make(_spec(slo=SLO(None, 50)), model, H200).pcp == (1,)
    # given: the list as given
    assert CpPlan.make(_spec(pcp=(2, 1)), model, H200).pcp == (1, 2)


def test_dcp_default_follows_the_kv_copies_of_the_tp_group():
    # Llama-3.1-8B has 8 KV heads: no rank of tp ≤ 8 holds a copy → dcp 1 only
    assert CpPlan.make(_spec(), resolve_model("llama-3.1-8b"), H200).dcp_sizes(8) == (1,)
    # Qwen3-30B-A3B has 4 KV heads: at tp8 two ranks hold each → dcp 1, 2
    qwen = CpPlan.make(_spec("qwen3-30b-a3b"), resolve_model("qwen3-30b-a3b"), H200)
    assert qwen.dcp_sizes(8) == (1, 2) and qwen.dcp_sizes(4) == (1,)
    # MLA (DeepSeek-V2-Lite): every rank of the TP group holds the one latent KV → up to tp
    mla = CpPlan.make(_spec("deepseek-v2-lite"), resolve_model("deepseek-v2-lite"), H200)
    assert mla.dcp_sizes(8) == (1, 2, 4, 8)


def test_dcp_default_only_where_the_kv_cache_bounds_the_concurrency():
    model = resolve_model("qwen3-30b-a3b")
    # tp8 duplicates each of the 4 KV heads on 2 ranks; 32k-token requests: the KV of a tp8 instance holds far
    # fewer than 1024 of them → dcp 2 explored; a grid of max_num_seqs 1 is not KV-bound → dcp 1 only
    bound, _ = enumerate_candidates(_spec("qwen3-30b-a3b", tp=(8,), max_num_seqs=(4, 1024)), model, H200)
    assert {c.pools[0].dcp for c in bound} == {1, 2}
    free, _ = enumerate_candidates(_spec("qwen3-30b-a3b", tp=(8,), max_num_seqs=(1,)), model, H200)
    assert {c.pools[0].dcp for c in free} == {1}


def test_enumeration_labels_cp_candidates_and_counts_pcp_gpus():
    cands, _ = enumerate_candidates(_spec(tp=(1, 2)), resolve_model("llama-3.1-8b"), H200)
    by = {c.label(): c for c in cands}
    c = by["agg tp2 pcp4, seqs 16, batch 8192"]
    assert c.pools[0].pcp == 4 and c.unit_gpus == 8 and c.replicas == 1
    assert by["agg tp1 pcp2, seqs 16, batch 8192 ×4"].unit_gpus == 2
    assert by["agg tp2, seqs 16, batch 8192 ×4"].pools[0].pcp == 1
    # the KV of a pcp4 instance is sharded over 4 ranks: 4× the blocks of its tp2 twin in each rank's memory
    assert c.memory[0].num_blocks == pytest.approx(4 * by["agg tp2, seqs 16, batch 8192 ×4"].memory[0].num_blocks,
                                                   rel=0.02)


def test_refused_cp_sizes_are_pruned_with_the_reason():
    spec = _spec("qwen3-30b-a3b", tp=(4, 8), pcp=(1, 2), dcp=(1, 2, 3, 4), max_num_seqs=(4,))
    cands, pruned = enumerate_candidates(spec, resolve_model("qwen3-30b-a3b"), H200)
    why = {p.label: p.reason for p in pruned if p.kind == "engine"}
    assert "must divide the tensor-parallel size 4" in why["agg tp4 dcp3"]
    assert "held by 1 rank(s)" in why["agg tp4 dcp2"]  # 4 KV heads over tp4: one head a rank, no copies
    assert "held by 2 rank(s)" in why["agg tp8 dcp4"]
    assert "not modelled" in why["agg tp4 pcp2 dcp2"]
    assert "over the budget of 8" in why["agg tp8 pcp2"]
    labels = {c.label() for c in cands}
    assert any(" tp8 dcp2" in lab for lab in labels) and any(" tp4 pcp2" in lab for lab in labels)
    assert not any("dcp3" in lab or "dcp4" in lab for lab in labels)


def test_linear_attention_models_refuse_cp_by_name():
    spec = _spec("qwen3-next-80b-a3b", tp=(4,), pcp=(1, 2), max_num_seqs=(4,))
    cands, pruned = enumerate_candidates(spec, resolve_model("qwen3-next-80b-a3b"), H200)
    assert any(p.label == "agg tp4 pcp2" and "linear-attention or Mamba" in p.reason for p in pruned)
    assert all(c.pools[0].pcp == 1 for c in cands)


def test_disagg_prefill_pools_get_pcp_and_decode_pools_dcp():
    spec = _spec("qwen3-30b-a3b", modes=("disagg",), gpus=16, tp=(2, 8), pcp=(1, 2), dcp=(1, 2), max_num_seqs=(16,),
                 prefill_batched_tokens=(8192,))
    cands, _ = enumerate_candidates(spec, resolve_model("qwen3-30b-a3b"), H200)
    pools = {(c.pools[0].tp, c.pools[0].pcp, c.pools[0].instances, c.pools[1].tp, c.pools[1].dcp, c.pools[1].instances)
             for c in cands}
    # 1P tp2 pcp2 (4 GPUs) + 1D tp8 dcp2 (8 GPUs: DCP inside the TP group, 2 ranks hold each of the 4 KV heads)
    assert (2, 2, 1, 8, 2, 1) in pools
    c = next(c for c in cands if c.pools[0].pcp == 2 and c.pools[0].tp == 2 and c.pools[0].instances == 1
             and c.pools[1].dcp == 2)
    assert c.unit_gpus == 12 and c.replicas == 1 and "1P tp2 pcp2" in c.label() and "1D tp8 dcp2" in c.label()
    assert all(c.unit_gpus <= 16 for c in cands)
    # pcp on prefill pools only, dcp on decode pools only; tp2 decode has no KV copies to shard
    assert all(c.pools[0].dcp == 1 and c.pools[1].pcp == 1 for c in cands)
    assert not any(c.pools[1].tp == 2 and c.pools[1].dcp == 2 for c in cands)


def test_base_and_list_cannot_both_set_dcp():
    spec = _spec(base={"model": "llama-3.1-8b", "hardware": "h200_sxm",
                       "parallel": {"decode_context_parallel_size": 2}}, dcp=(1, 2))
    with pytest.raises(SearchSpecError, match="one place"):
        enumerate_candidates(spec, resolve_model("llama-3.1-8b"), H200)


def test_launch_files_carry_the_context_parallel_sizes(tmp_path):
    from graphsim.serving.launch import engine_settings, parse_launch_sh, plan_instances, serve_argv, write_launch_files
    from graphsim.serving.search_space import Candidate

    spec = _spec()
    pool = PoolConfig("agg", 2, 1, 1, 16, 8192, pcp=4)
    s = engine_settings(spec, pool)
    assert s["prefill_context_parallel_size"] == 4 and "decode_context_parallel_size" not in s
    argv = serve_argv("m", s, 8000, False)
    assert argv[argv.index("--prefill-context-parallel-size") + 1] == "4"
    c = Candidate(0, "agg", (pool,), 1, 16)
    (inst,) = plan_instances(spec, c, 1, 8)
    assert inst.gpu_ids == tuple(range(8))  # tp2 × pcp4: 8 GPUs of the node
    write_launch_files(tmp_path, spec, c, 1, 8, {})
    (words,) = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert words[words.index("--prefill-context-parallel-size") + 1] == "4"
    assert "nvidia.com/gpu: 8" in (tmp_path / "deployment.yaml").read_text()  # the pod asks for all 8
    # decode context parallel: inside the TP group (no extra GPUs), vLLM's --decode-context-parallel-size
    qspec = _spec("qwen3-30b-a3b")
    qs = engine_settings(qspec, PoolConfig("decode", 8, 1, 1, 16, 8192, dcp=2))
    qargv = serve_argv("m", qs, 8000, True, "decode")
    assert qargv[qargv.index("--decode-context-parallel-size") + 1] == "2"
    assert "--prefill-context-parallel-size" not in qargv
    assert "--decode-context-parallel-size" not in serve_argv("m", engine_settings(spec, PoolConfig("agg", 2, 1, 1, 16,
                                                                                                      8192)), 8000, False)


@pytest.mark.slow
def test_pcp_wins_a_long_prompt_search_under_a_tight_ttft(roofline_home, hf_import, tmp_path):
    """Llama-3.1-8B on 8 H200s (roofline), 32k-token prompts, 256 output tokens, TTFT ≤ 500 ms, TPOT ≤ 50 ms. Without
    CP, tp2 misses the TTFT (a 32k prefill on 2 GPUs) and only tp8 meets it; with CP (default: the prefill floor on
    one GPU, 747 ms, is over the SLO) a tp2 × pcp4 instance on the same 8 GPUs meets it and serves more tokens per
    GPU (its per-rank matmuls see a quarter of each prompt with no all-reduce over 8 ranks). Both bests are verified
    by simulation."""
    from graphsim.serving.search import run_search
    from graphsim.serving.search_eval import make_context

    model = resolve_model("llama-3.1-8b")
    graph = hf_import("llama-3.1-8b")[0]

    def best(spec):
        cands, _ = enumerate_candidates(spec, model, H200)
        res = run_search(spec, context=make_context(spec, model, H200, cands, graph=graph))
        assert res.best is not None
        return res.rows[res.best]

    kw: dict = {"tp": (2, 8), "max_num_seqs": (4, 16), "verify": 2, "refine": 0}
    with_cp, without = best(_spec(**kw)), best(_spec(pcp=(1,), **kw))
    assert with_cp.candidate.pools[0].pcp > 1 and with_cp.sim is not None
    assert without.candidate.pools[0].pcp == 1 and without.candidate.pools[0].tp == 8
    assert with_cp.final.ttft_ms <= 500 and without.final.ttft_ms <= 500
    assert with_cp.final.output_tokens_per_s_per_gpu > without.final.output_tokens_per_s_per_gpu
    # the launch files of the winner carry the pcp size the prediction used, and give an instance tp × pcp GPUs
    from graphsim.serving.launch import parse_launch_sh, write_launch_files

    c = with_cp.candidate
    write_launch_files(tmp_path, _spec(**kw), c, c.replicas, 8, {})
    for words in parse_launch_sh((tmp_path / "launch.sh").read_text()):
        assert words[words.index("--prefill-context-parallel-size") + 1] == str(c.pools[0].pcp)
        assert words[words.index("--tensor-parallel-size") + 1] == str(c.pools[0].tp)
    assert f"nvidia.com/gpu: {c.pools[0].tp * c.pools[0].pcp}" in (tmp_path / "deployment.yaml").read_text()


@pytest.mark.parametrize("extra,message", [
    (["-pcp", "two"], "--prefill-context-parallel-size 'two'"),
    (["-dcp", "0"], "dcp"),
])
def test_bad_cp_lists_are_one_line_exit_2(capsys, monkeypatch, tmp_path, extra, message):
    from graphsim.cli.app import main

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path))
    assert main(["search", "llama-3.1-8b", "--gpu", "h200", "--isl", "32768", "--ttft", "500", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1

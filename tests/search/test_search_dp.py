"""Data-parallel attention + expert parallel in `graphsim search` (mode dp, serving/dp_search.py): the DP×EP
instances of a MoE model with their per-rank memory, the steady-state unit cost by hand, launch files carrying
--data-parallel-size and --enable-expert-parallel, and (slow) a search that simulates a DP×EP instance."""

from __future__ import annotations

import pytest

from graphsim.catalog import resolve_model
from graphsim.costing.hardware import load_hardware
from graphsim.serving import SLO, Lengths
from graphsim.serving.dp_search import DpUnitCost
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec, enumerate_candidates


def _spec(model: str = "qwen3-30b-a3b", **changes) -> SearchSpec:
    d = dict(base={"model": model, "hardware": "h200_sxm"}, gpus=8, isl=Lengths(1024, 1024), osl=Lengths(128, 128),
             slo=SLO(1000, 50), max_num_seqs=(16, 64), max_num_batched_tokens=(4096,), modes=("agg", "dp"), tp=(1,),
             verify=0, seed=0)
    d.update(changes)
    return SearchSpec.parse(d)


def test_dp_instances_of_a_moe_model():
    cands, _ = enumerate_candidates(_spec(), resolve_model("qwen3-30b-a3b"), load_hardware("h200"))
    by_label = {c.label(): c for c in cands}
    dp8 = by_label["dp8 tp1 ep8, seqs 64, batch 4096 a rank"]
    assert dp8.mode == "dp" and dp8.unit_gpus == 8 and dp8.replicas == 1 and dp8.clients == 8 * 64
    dp2 = by_label["dp2 tp1 ep2, seqs 64, batch 4096 a rank ×4"]
    plain = by_label["agg tp1, seqs 64, batch 4096 ×8"]
    # Qwen3-30B-A3B's routed experts (bf16) are 57,982,058,496 B; dp 2 keeps half on a GPU, dp 8 an eighth
    assert plain.memory[0].weights_bytes - dp2.memory[0].weights_bytes == 57_982_058_496 // 2
    assert plain.memory[0].weights_bytes - dp8.memory[0].weights_bytes == 57_982_058_496 * 7 // 8
    dense, _ = enumerate_candidates(_spec("llama-3.1-8b"), resolve_model("llama-3.1-8b"), load_hardware("h200"))
    assert dense and not [c for c in dense if c.mode == "dp"]


class Own:
    def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
        return 100.0 + tokens, 0


class Moe:
    def step_us(self, rank_tokens):
        return 20.0 + sum(rank_tokens), 1


def test_unit_cost_is_one_rank_plus_the_moe_layers_with_every_rank_alike():
    # 2 ranks of 4 tokens: own 100 + 4, MoE 20 + 4 + 4 → 132 µs, the worse source (1)
    assert DpUnitCost(Own(), Moe(), 2).step_us(4, 4, 4, 100.0, []) == (132.0, 1)


def test_launch_files_carry_data_parallel_and_expert_parallel(tmp_path):
    from graphsim.serving.launch import engine_settings, parse_launch_sh, plan_instances, write_launch_files

    spec = _spec()
    pool = PoolConfig("dp", 1, 8, 1, 64, 4096, dp=8)
    settings = engine_settings(spec, pool)
    assert settings["data_parallel_size"] == 8 and settings["enable_expert_parallel"]
    cand = Candidate(0, "dp", (pool,), 1, 8 * 64)
    (inst,) = plan_instances(spec, cand, 1, 8, [settings])  # one vllm serve spanning the node's 8 GPUs
    assert inst.gpu_ids == tuple(range(8))
    write_launch_files(tmp_path, spec, cand, 1, 8, {})
    (argv,) = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert argv[argv.index("--data-parallel-size") + 1] == "8" and "--enable-expert-parallel" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"


@pytest.mark.slow
def test_a_search_simulates_a_dp_instance(roofline_home):
    pytest.importorskip("torch")
    from graphsim.serving.search import run_search

    spec = _spec(gpus=4, modes=("dp",), max_num_seqs=(8,), verify=1, isl=Lengths(256, 256), osl=Lengths(16, 16))
    res = run_search(spec)
    best = res.to_json()["rows"][res.best]
    assert best["candidate"]["mode"] == "dp" and best["simulated"]["method"] == "simulated"
    steady, sim = best["steady_state"], best["simulated"]
    assert sim["output_tokens_per_s_per_gpu"] == pytest.approx(steady["output_tokens_per_s_per_gpu"], rel=0.5)

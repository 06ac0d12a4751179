"""Pipeline parallel in `graphsim search`: the pp axis (vLLM's guidance by default, a list to restrict it), the
pipelined candidates' memory, the steady-state cycle of pp micro-batches, and launch files carrying
--pipeline-parallel-size."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import ROOFLINE
from graphsim.serving import SLO, Lengths
from graphsim.serving.pipeline_engine import PipelineCost, PipelineCycleCost
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec, pp_options


def _spec(**changes) -> SearchSpec:
    d = dict(base={"model": "llama-3.1-8b", "hardware": "h200_sxm"}, gpus=16, isl=Lengths(1024, 1024),
             osl=Lengths(128, 128), slo=SLO(1000, 50), max_num_seqs=(16, 64), max_num_batched_tokens=(4096,),
             modes=("agg",), verify=0, seed=0)
    d.update(changes)
    return SearchSpec.parse(d)


def test_pp_axis_follows_vllms_guidance_unless_given():
    h200 = load_hardware("h200")  # 8 GPUs a node
    spec = _spec()
    # default: 1, and powers of two with tp × pp beyond one node (8 GPUs) within the 16-GPU budget
    assert pp_options(spec, h200, 8) == (1, 2)  # 8 × 2 = 16
    assert pp_options(spec, h200, 4) == (1, 4)  # 4 × 2 = 8 stays in a node; 4 × 4 = 16
    assert pp_options(_spec(gpus=4), h200, 1) == (1,)  # 4 GPUs: one node, no pipeline
    assert pp_options(_spec(pp=(1, 2, 4)), h200, 4) == (1, 2, 4)  # given: explored within the budget
    assert pp_options(_spec(pp=(1, 2, 4), gpus=8), h200, 4) == (1, 2)
    assert pp_options(_spec(pp=(1,)), h200, 8) == (1,)


def test_pipelined_candidates_use_tp_times_pp_gpus_and_stage_memory():
    from graphsim.serving.search_space import enumerate_candidates

    spec = _spec(gpus=4, tp=(1, 2), pp=(1, 2))
    from graphsim.catalog import resolve_model

    cands, _ = enumerate_candidates(spec, resolve_model("llama-3.1-8b"), load_hardware("h200"))
    by_label = {c.label(): c for c in cands}
    piped = by_label["agg tp1 pp2, seqs 64, batch 4096 ×2"]
    assert piped.unit_gpus == 2 and piped.replicas == 2 and piped.pools[0].pp == 2
    plain = by_label["agg tp1, seqs 64, batch 4096 ×4"]
    # a stage holds 16 of the 32 layers and one of the embedding / head: about half the weights of one GPU
    assert piped.memory[0].weights_bytes < 0.55 * plain.memory[0].weights_bytes
    assert "agg tp2 pp2, seqs 64, batch 4096" in by_label


class StageCost:
    def __init__(self, us: float) -> None:
        self.us = us

    def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
        return (self.us if tokens else 0.0), ROOFLINE

    def decode_run_us(self, batch, ctx_mean0, k):
        return np.full(k, self.us), np.full(k, ROOFLINE, dtype=np.int8)


def test_steady_cycle_of_pp_micro_batches_by_hand():
    # stages of 3 ms and 5 ms whatever the batch. 4 decodes → 2 micro-batches of 2: each needs 3 + 5 = 8 ms
    # through the pipeline, and stage 1 works 5 + 5 = 10 ms a cycle: cycle = max(8, 10) = 10 ms.
    cyc = PipelineCycleCost(PipelineCost([StageCost(3000.0), StageCost(5000.0)]))
    assert cyc.step_us(4, 4, 4, 100.0, [])[0] == pytest.approx(10_000.0)
    # 1 decode: one micro-batch, the other empty: max(8, 5) = 8 ms (the latency bound: a pipeline bubble)
    assert cyc.step_us(1, 1, 1, 100.0, [])[0] == pytest.approx(8_000.0)
    # 2 prompt chunks and 1 decode: micro-batch 0 = the decode + chunk 0, micro-batch 1 = chunk 1: max(8, 10) = 10
    assert cyc.step_us(1 + 64 + 32, 3, 1, 100.0, [(64, 0), (32, 0)])[0] == pytest.approx(10_000.0)


def test_launch_files_carry_the_pipeline_size(tmp_path):
    from graphsim.serving.launch import engine_settings, parse_launch_sh, plan_instances, write_launch_files

    spec = _spec()
    pool = PoolConfig("agg", 8, 1, 1, 64, 4096, 2)
    settings = engine_settings(spec, pool)
    assert settings["pipeline_parallel_size"] == 2 and settings["tensor_parallel_size"] == 8
    cand = Candidate(0, "agg", (pool,), 1, 64)
    inst = plan_instances(spec, cand, 2, 8, [settings])
    # each instance spans two 8-GPU nodes: instance 0 starts on node 0, instance 1 on node 2
    assert [i.node for i in inst] == [0, 2]
    write_launch_files(tmp_path, spec, cand, 1, 8, {})
    (argv,) = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    plain = engine_settings(spec, PoolConfig("agg", 8, 1, 1, 64, 4096))
    assert "pipeline_parallel_size" not in plain  # pp 1: the flag is left to vLLM's default

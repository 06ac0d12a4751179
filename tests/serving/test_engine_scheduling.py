"""Scheduler strategies of SGLang and TensorRT-LLM (serving/scheduler.py hooks, serving/engines.py sources) on the
affine stand-in cost: what each changes, checked on the iteration log and the block pool."""

from dataclasses import replace

import numpy as np
import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, parse_lengths, simulate, synthetic
from graphsim.serving.engine_versions import parse_engine
from graphsim.serving.engines import sglang_max_running_requests, sglang_memory_defaults, sglang_new_token_ratio
from graphsim.serving.scheduler import Engine


def setup(engine: str, num_blocks=2000, block_size=16, mnbt=2048, seqs=64, chunked=True):
    cfg = EngineConfig(mnbt, seqs, 8192, enable_chunked_prefill=chunked, profile=parse_engine(engine))
    return SimulationSetup(cfg, llama_layout(block_size=block_size), num_blocks, AffineCost(), ParallelConfig())


def work(n=200, rate=20.0, ins="500:3000", outs="50:300", seed=3):
    return synthetic(n, rate, parse_lengths(ins, "in"), parse_lengths(outs, "out"), seed=seed)


def test_sglang_prefill_steps_run_without_decodes():
    res = simulate(setup("sglang"), work())
    it = res.iterations
    prefill, decodes = np.asarray(it["prefill_tokens"]), np.asarray(it["decode_seqs"])
    assert (prefill > 0).any() and (decodes > 0).any()
    assert not ((prefill > 0) & (decodes > 0)).any()  # enable_mixed_chunk off: never both in one step
    vllm = simulate(setup("vllm"), work()).iterations
    assert ((np.asarray(vllm["prefill_tokens"]) > 0) & (np.asarray(vllm["decode_seqs"]) > 0)).any()  # vLLM mixes them
    assert len(res.requests) == 200 and all(r.finish_t > 0 for r in res.requests)


def test_trtllm_no_evict_never_preempts_where_vllm_does():
    # 300 blocks of 16 = 4800 tokens; prompts to 3000 and outputs to 300: vLLM admits on the prompt and preempts
    # when outputs grow, GUARANTEED_NO_EVICT reserves every admitted request's whole output
    v = simulate(setup("vllm", num_blocks=300, mnbt=4096, chunked=False), work(n=80))
    t = simulate(setup("trtllm", num_blocks=300, mnbt=4096, chunked=False), work(n=80))
    assert sum(r.preemptions for r in v.requests) > 0
    assert sum(r.preemptions for r in t.requests) == 0
    assert len(t.requests) == 80


def _engine(name: str, num_blocks=1000, block_size=1):
    s = setup(name, num_blocks=num_blocks, block_size=block_size)
    from graphsim.serving.records import IterationLog, Samples

    return Engine(0, s.engine, s.layout, num_blocks, s.cost, IterationLog(), Samples(), lambda r: None)


def test_sglang_admission_reserves_the_clipped_output_and_running_growth():
    from graphsim.serving.records import Request

    e = _engine("sglang")
    r = Request(0, 0.0, 600, 5000, None, 0, 8192)  # 600 prompt tokens, 5000 wanted, clipped to 4096 in the estimate
    # page 1: own = min(5000, 4096) + 1 page = 4097 tokens; nothing running → no others
    assert e._engine_reserve(r, 600) == 4097
    running = Request(1, 0.0, 100, 1000, None, 0, 8192)
    e.running.append(running)
    # others = min(1000 - 0, 4096) × ratio(0 decode steps) = 1000 × 0.7 = 700 → 4097 + 700
    assert e._engine_reserve(r, 600) == 4097 + 700
    e.decode_steps = 600  # fully decayed: 0.7 × 0.14 = 0.098 → int(98.0) = 98
    assert e._engine_reserve(r, 600) == 4097 + 98


def test_trtllm_admission_reserves_whole_outputs():
    from graphsim.serving.records import Request

    e = _engine("trtllm", block_size=32)
    r = Request(0, 0.0, 100, 200, None, 0, 8192)
    # final 300 tokens → cdiv(300, 32) = 10 blocks; current 100 → 4 blocks: own 6
    assert e._engine_reserve(r, 100) == 6
    run = Request(1, 0.0, 64, 64, None, 0, 8192)
    run.num_held_blocks = 2  # its 64 prompt tokens; it ends at 128 tokens = 4 blocks → 2 more
    e.running.append(run)
    assert e._engine_reserve(r, 100) == 6 + 2


def test_new_token_ratio_decays_to_its_floor():
    # environ.py: init 0.7, floor 0.7 × 0.14 = 0.098, 600 steps: 0.7 − 300 × (0.602 / 600) = 0.399 after 300
    assert sglang_new_token_ratio(0) == pytest.approx(0.7)
    assert sglang_new_token_ratio(300) == pytest.approx(0.399)
    assert sglang_new_token_ratio(10_000) == pytest.approx(0.098)


def test_sglang_memory_defaults_on_h200():
    # H200: 151397597184 B = 144384 MiB (< 160 GiB tier): chunk 8192, max_bs 512 at tp 8;
    # reserved = 512 + 8192 × 1.5 + 512 × 2 + 8 × 1 / 8 × 1024 = 512 + 12288 + 1024 + 1024 = 14848 MiB (> 10 GiB)
    # mem_fraction_static = round((144384 − 14848) / 144384, 3) = round(0.89716, 3) = 0.897
    d = sglang_memory_defaults(151397597184, tp=8)
    assert (d.chunked_prefill_size, d.cuda_graph_max_bs, d.reserved_mib) == (8192, 512, 14848)
    assert d.mem_fraction_static == 0.897
    # tp 1: 512 + 12288 + 256 × 2 + 1024 / 8 = 13440 → round(130944 / 144384, 3) = 0.907
    assert sglang_memory_defaults(151397597184, tp=1).mem_fraction_static == 0.907


def test_sglang_max_running_requests():
    # _resolve_max_num_reqs: min(max(min(tokens / ctx × 512, 4096), 2048), tokens // 2)
    assert sglang_max_running_requests(800_000, 40960) == 4096  # 800000 / 40960 × 512 = 10000 → capped at 4096
    assert sglang_max_running_requests(100_000, 40960) == 2048  # 1250 → raised to the 2048 floor
    assert sglang_max_running_requests(3000, 40960) == 1500  # tokens // 2 binds


def test_engine_configs_keep_vllm_unchanged():
    e = setup("vllm").engine
    assert e.profile.admission == "vllm" and not e.profile.prefill_priority
    assert replace(e.profile, engine="sglang").admission == "sglang"


def test_trtllm_prompt_longer_than_max_num_tokens_does_not_stall():
    # chunked prefill off, max_num_tokens 2048, prompts of 3000: TensorRT-LLM would refuse them; graphsim chunks
    # them rather than blocking the queue forever (docs/engines.md)
    res = simulate(setup("trtllm", num_blocks=4000, mnbt=2048, chunked=False), work(n=20, ins="3000", outs="10"))
    assert len(res.requests) == 20 and all(r.finish_t > 0 for r in res.requests)
    assert max(res.iterations["tokens"]) <= 2048


def test_engine_memory_fractions_are_each_engines_own():
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment
    from graphsim.serving.engine_config import EngineConfigError

    def plan(engine: dict):
        return plan_deployment(DeploymentConfig.parse({"model": "llama-3.1-8b", "hardware": "h200", "engine": engine}))

    sg = plan({"engine": "sglang", "mem_fraction_static": 0.8})
    weights = sg.budget.term("weights").bytes + sg.budget.term("rotary cos/sin cache").bytes
    over = sg.budget.term("runtime overhead (non-torch)").bytes
    # total × 0.8 − weights − overhead × 0.8 (the overhead term is scaled by the given fraction too)
    assert sg.budget.utilization == 0.8 and over == int(0.5 * 2**30 * 0.8)
    assert sg.budget.available_bytes == -(-151_397_597_184 * 8 // 10) - weights - over
    assert plan({"engine": "trtllm", "free_gpu_memory_fraction": 0.5}).budget.utilization == 0.5
    for bad in ({"engine": "vllm", "mem_fraction_static": 0.8}, {"engine": "sglang", "free_gpu_memory_fraction": 0.5}):
        with pytest.raises(EngineConfigError, match="setting, not"):
            plan(bad)

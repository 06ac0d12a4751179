"""Engine versions (`--engine vllm==X.Y`) and the host-time model: hand-derived values, arithmetic in comments."""

from __future__ import annotations

import json

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.costing.hardware import load_hardware
from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate, summarize
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.engine_versions import EngineVersionError, parse_engine
from graphsim.serving.host import EngineHost, HostModel
from graphsim.serving.requests import RequestSpec


@pytest.mark.parametrize(("text", "version", "family"), [
    ("vllm", (0, 33, 0), "v1-async"), ("vllm==0.10.1", (0, 10, 1), "v1"), ("vllm==0.6.3", (0, 6, 3), "v0"),
    ("vllm==0.7", (0, 7, 0), "v0"), ("0.8.0", (0, 8, 0), "v1"), ("vllm==0.13.0", (0, 13, 0), "v1"),
    ("vllm==0.14", (0, 14, 0), "v1-async"), ("vllm==0.6.3.post1", (0, 6, 3), "v0")])
def test_versions_map_to_families(text, version, family):
    p = parse_engine(text)
    assert (p.version, p.family) == (version, family)


@pytest.mark.parametrize("bad", ["sglang=0.5", "lmdeploy", "vllm==x", "vllm==0.4.2"])
def test_bad_engine_is_one_error(bad):
    with pytest.raises(EngineVersionError):
        parse_engine(bad)


# (engine, gpu) → (max_num_batched_tokens, max_num_seqs, prefix caching, chunked prefill, async, in-flight batches)
# for a model with an 8192-token context, read off each version's arg_utils.py (engine_versions.py cites them):
# V0: chunked prefill only above 32768 → max(8192, 2048) tokens, 256 seqs, no prefix caching, sync;
# 0.8.0: 8192 on a GPU named H100/H200 else 2048, 1024 seqs; 0.10.1: 8192/1024 on >= 70 GiB non-A100 else
# 2048/256; 0.33.0: B200 (>= 160 GiB) 16384/1024, H200 (141 GB = 131 GiB) 8192/1024, async → 2 batches in flight.
@pytest.mark.parametrize(("engine", "gpu", "want"), [
    ("vllm==0.6.3", "h100", (8192, 256, False, False, False, 1)),
    ("vllm==0.8.0", "a100", (2048, 1024, True, True, False, 1)),
    ("vllm==0.8.0", "h100", (8192, 1024, True, True, False, 1)),
    ("vllm==0.10.1", "a100", (2048, 256, True, True, False, 1)),
    ("vllm==0.10.1", "h200", (8192, 1024, True, True, False, 1)),
    ("vllm==0.10.1", "b200", (8192, 1024, True, True, False, 1)),
    ("vllm==0.20", "h100", (8192, 1024, True, True, True, 1)),
    ("vllm", "h200", (8192, 1024, True, True, True, 2)),
    ("vllm", "b200", (16384, 1024, True, True, True, 2))])
def test_family_defaults(engine, gpu, want):
    e = EngineArgs(engine=engine).resolve(load_hardware(gpu), {"max_position_embeddings": 8192})
    assert (e.max_num_batched_tokens, e.max_num_seqs, e.enable_prefix_caching, e.enable_chunked_prefill,
            e.async_scheduling, e.max_concurrent_batches) == want


def test_v0_long_context_turns_chunked_prefill_on():
    # V0 (0.6.3 EngineArgs.create_engine_config): max_model_len > 32768 and no sliding window → chunked, 512 tokens
    e = EngineArgs(engine="vllm==0.6.3").resolve(load_hardware("h100"), {"max_position_embeddings": 131072})
    assert (e.enable_chunked_prefill, e.max_num_batched_tokens, e.prefill_first) == (True, 512, False)


@pytest.mark.parametrize(("cfg", "chunked"), [
    ({"sliding_window": 4096}, False),  # a sliding window keeps V0's chunked prefill off
    ({"sliding_window": 131072, "use_sliding_window": False}, True)])  # Qwen2-style: the window is not used
def test_v0_chunked_default_and_sliding_windows(cfg, chunked):
    e = EngineArgs(engine="vllm==0.6.3").resolve(load_hardware("h100"), {"max_position_embeddings": 65536, **cfg})
    assert e.enable_chunked_prefill is chunked


def test_explicit_settings_beat_the_family():
    e = EngineArgs(engine="vllm==0.10.1", async_scheduling=True, enable_prefix_caching=False).resolve(
        load_hardware("h100"), {"max_position_embeddings": 8192})
    assert (e.async_scheduling, e.host.overlap, e.enable_prefix_caching) == (True, True, False)


# gpt-oss-120b, TP 4, A100 (max_num_batched_tokens 2048), max_model_len 16384, exactly 330,018 blocks of KV memory.
# Per rank: 8 KV heads / 4 = 2, head_dim 64, bf16: a layer's page is 2 (K, V) × 2 × 64 × 2 B × 16 tokens = 8,192 B;
# 18 sliding (window 128) + 18 full layers → 2 groups of 18, a block 18 × 8,192 = 147,456 B.
BLOCKS = 330_018
KV_BYTES = BLOCKS * 147_456


def _gpt_oss(engine: str):
    return plan_deployment(DeploymentConfig.parse({
        "model": "gpt-oss-120b", "hardware": "a100", "parallel": {"tensor_parallel_size": 4},
        "engine": {"engine": engine, "kv_cache_memory_bytes": KV_BYTES, "max_model_len": 16384}})).capacity


def test_gpt_oss_concurrency_vllm_0_10_1_reproduces_its_log():
    # 0.10.1: tokens = 330,018 // 2 groups × 16 = 2,640,144; per request: full cdiv(16384, 16) = 1,024 blocks,
    # sliding cdiv(min(127 + 2048, 16384), 16) + 1 = 136 + 1 = 137 → 1,161; 330,018 / 1,161 = 284.253.
    # The issue quotes vLLM 0.10.1 logging exactly "2,640,144 tokens / 284.25x" for this deployment.
    cap = _gpt_oss("vllm==0.10.1")
    assert (cap.num_blocks, cap.blocks_per_request) == (BLOCKS, 1161)
    assert cap.vllm_log_verbatim() == ("GPU KV cache size: 2,640,144 tokens",
                                       "Maximum concurrency for 16,384 tokens per request: 284.25x")


def test_gpt_oss_concurrency_newest_reserves_two_batches():
    # 0.33.0: sliding cdiv(min(127 + 2 × 2048, 16384), 16) + 1 = 264 + 1 = 265 → 1,289 blocks per request;
    # 330,018 / 1,289 = 256.026; tokens int(330,018 × 16,384 / 1,289) = int(4,194,736.2) = 4,194,736; one line (0.30+).
    cap = _gpt_oss("vllm")
    assert cap.blocks_per_request == 1289
    assert cap.vllm_log_verbatim() == ("GPU KV cache size: 4,194,736 tokens, Maximum concurrency for 16,384 tokens "
                                       "per request: 256.03x",)


def test_gpt_oss_concurrency_0_25_token_formula():
    # 0.25: one batch in flight (1,161 blocks as 0.10.1) but tokens = int(330,018 × 16,384 / 1,161) = 4,657,204
    assert _gpt_oss("vllm==0.25").vllm_log_lines() == ("GPU KV cache size: 4,657,204 tokens",
                                                       "Maximum concurrency for 16,384 tokens per request: 284.25x")


def test_gpt_oss_v0_pages_every_layer_full():
    # V0: a block holds 16 tokens of all 36 layers: 36 × 8,192 = 294,912 B → 48,663,134,208 // 294,912 = 165,009
    # blocks; CPU blocks 4 GiB // 294,912 = 14,563; concurrency 165,009 × 16 / 16,384 = 161.14.
    cap = _gpt_oss("vllm==0.6.3")
    assert cap.vllm_log_verbatim() == ("# GPU blocks: 165009, # CPU blocks: 14563",
                                       "Maximum concurrency for 16384 tokens per request: 161.14x")


def test_host_arithmetic_and_overlap():
    # host = 100 + 2 × 4 seqs + 0.5 × 10 tokens = 113 µs; sampling 4 rows × 100,000 logits × 10 B / 2e12 B/s = 2 µs
    sync = HostModel("t", step_us=100.0, per_seq_us=2.0, per_token_us=0.5, frontend_us=0.0, overlap=False)
    assert sync.host_us(10, 4) == 113.0
    h = EngineHost(sync, vocab=100_000, bandwidth_bytes_per_s=2e12)
    assert h.iteration_us(1000.0, 10, 4) == pytest.approx(1000 + 2 + 113)  # waits for the host
    over = EngineHost(sync.with_overlap(True), 100_000, 2e12)
    assert over.iteration_us(1000.0, 10, 4) == pytest.approx(1002.0)  # host hidden under the GPU step
    assert over.iteration_us(50.0, 10, 4) == pytest.approx(113.0)  # host longer than the GPU step


def test_host_constants_per_family_from_the_scheduler_benchmarks():
    from graphsim.serving.host import host_model

    # v1 (vLLM 0.10.1's Scheduler, benchmarks/host_scheduler.py): 12.6 µs at batch 1, 1470.6 at 256 →
    # per seq (1470.6 − 12.6) / 255 = 5.7176 + 60 (engine) = 65.7176; step 12.6 − 5.7 (host.py rounds it) = 6.9
    # + 273 (runner) = 279.9
    v1 = host_model("v1")
    assert (v1.step_us, v1.per_seq_us, v1.overlap) == (pytest.approx(279.9, abs=1e-6),
                                                       pytest.approx(65.7176, abs=1e-3), False)
    # v1-async (vLLM 0.19.0's AsyncScheduler, paired 0.19 / 0.10.1 ratios 1.403 at batch 1 and 1.390 at 256):
    # 12.6 × 1.403 = 17.6778, 1470.6 × 1.390 = 2044.134; scheduler per seq (2044.134 − 17.6778) / 255 = 7.9469;
    # runner + engine output per seq (benchmarks/host_engine.py, two runs, update_states + prepare_inputs +
    # bookkeeping + output over the same run's scheduler slope): (0.681 + 2.352 + 1.653 + 0.188) / 9.397 = 0.51868,
    # (0.577 + 2.394 + 1.442 + 0.146) / 8.612 = 0.52938, mean 0.52403 × 7.9469 = 4.1644; per seq 7.9469 + 4.1644
    # = 12.1113; step 17.6778 − 7.9469 = 9.7309 + 273 = 282.7309
    fast = host_model("v1-async")
    assert (fast.step_us, fast.per_seq_us, fast.overlap) == (pytest.approx(282.7309, abs=1e-3),
                                                             pytest.approx(12.1113, abs=1e-3), True)
    # the same iteration of 32 decoding sequences: (282.7309 − 279.9) + (12.1113 − 65.7176) × 32
    # = 2.8309 − 53.6063 × 32 = −1712.57 µs: 0.19's host is lighter (the 60 µs fitted on sync 0.10.1 is v1's only)
    assert fast.host_us(32, 32) - v1.host_us(32, 32) == pytest.approx(-1712.57, abs=0.01)
    # the per-sequence bound the vLLM 0.19.0 H100 runs set (benchmarks/data/kvcached_h100_qwen3_0.6b.json): a peak
    # of 16,751 output tokens/s leaves at most 1e6 / 16,751 = 59.70 µs a sequence a step
    assert fast.per_seq_us < 1e6 / 16_751


def _two_requests(engine: str) -> list:
    # every iteration 1 ms (AffineCost with only a base), no host time: scheduling alone. A: 100-token prompt,
    # 5 outputs, at 0; B: 100 tokens, 3 outputs, at 2.5 ms.
    p = parse_engine(engine)
    chunked = p.family != "v0"
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False, enable_chunked_prefill=chunked, profile=p,
                       async_scheduling=p.async_scheduling, max_concurrent_batches=1)
    setup = SimulationSetup(cfg, llama_layout(), 2000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=False)
    res = simulate(setup, [RequestSpec(0.0, 100, 5), RequestSpec(0.0025, 100, 3)])
    return [(round(r.first_token_t * 1e3, 6), round(r.finish_t * 1e3, 6)) for r in res.requests]


def test_v0_prefill_stalls_decodes():
    # V0: [0,1] A prefill (first token 1); [1,2], [2,3] A decodes; B waits from 2.5; [3,4] B's prompt alone —
    # A stalls; [4,5], [5,6] both decode: A's 5th token and B's 3rd at 6 ms.
    assert _two_requests("vllm==0.6.3") == [(1.0, 6.0), (4.0, 6.0)]
    # V1: [3,4] runs A's decode and B's prompt together; A's 5th token at 5 ms, B's 3rd at 6 ms.
    assert _two_requests("vllm==0.10.1") == [(1.0, 5.0), (4.0, 6.0)]


@pytest.mark.parametrize(("step_us", "overlap", "iteration_ms"), [
    (500.0, False, 1.5),  # 1000 µs of kernels + 500 µs host
    (500.0, True, 1.0),  # host hidden under the 1000 µs step
    (1500.0, True, 1.5)])  # host longer than the step: max(1000, 1500)
def test_host_time_is_in_every_iteration(step_us, overlap, iteration_ms):
    # one 100-token prompt with 3 outputs, 1 ms of kernels per iteration, no sampling term (vocab 0): three
    # iterations of `iteration_ms`; host_s logs what the host added beyond the kernels
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    host = EngineHost(HostModel("t", step_us, 0.0, 0.0, 0.0, overlap), vocab=0, bandwidth_bytes_per_s=2e12)
    setup = SimulationSetup(cfg, llama_layout(), 2000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=False, host=host)
    res = simulate(setup, [RequestSpec(0.0, 100, 3)])
    (r,) = res.requests
    assert (r.first_token_t * 1e3, r.finish_t * 1e3) == pytest.approx((iteration_ms, 3 * iteration_ms))
    assert res.iterations["host_s"] * 1e3 == pytest.approx([iteration_ms - 1.0] * 3)


def test_host_time_in_decode_segments():
    # 40 outputs with fast-forward on: the decode iterations run as segments priced in one call; each still takes
    # 1000 µs of kernels + 500 µs host, so the 40th token comes at 40 × 1.5 = 60 ms
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    host = EngineHost(HostModel("t", 500.0, 0.0, 0.0, 0.0, False), vocab=0, bandwidth_bytes_per_s=2e12)
    setup = SimulationSetup(cfg, llama_layout(), 2000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=True, host=host)
    res = simulate(setup, [RequestSpec(0.0, 100, 40)])
    assert res.requests[0].finish_t * 1e3 == pytest.approx(60.0)
    assert res.iterations["host_s"] * 1e3 == pytest.approx([0.5] * 40)
    assert summarize(res).host_share == pytest.approx(0.5 / 1.5)  # 0.5 ms of every 1.5 ms iteration


def test_kv_cli_engine_prints_that_versions_lines(capsys, tmp_path, monkeypatch):
    # the gpt-oss-120b deployment above through `graphsim kv --engine`: the lines vLLM 0.10.1 logs, and the profile
    from graphsim.cli.app import main

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    assert main(["kv", "gpt-oss-120b", "--gpu", "a100", "--tp", "4", "--max-model-len", "16384", "--kv-memory",
                 f"{KV_BYTES}B", "--engine", "vllm==0.10.1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["capacity"]["vllm_log_verbatim"] == ["GPU KV cache size: 2,640,144 tokens",
                                                  "Maximum concurrency for 16,384 tokens per request: 284.25x"]
    assert (d["engine"]["profile"]["family"], d["engine"]["async_scheduling"]) == ("v1", False)


def test_bad_engine_on_the_cli_is_a_usage_error(capsys):
    from graphsim.cli.app import main

    assert main(["kv", "llama-3.1-8b", "--engine", "vllm==0.2"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--engine" in err and "Traceback" not in err


def test_cuda_graph_term_only_from_0_20():
    # same H100 defaults (8192 / 1024) in both versions, so the budgets differ by the assumed 0.5 GiB of CUDA graphs
    # alone: vLLM < 0.20 captures them after the KV cache, inside the utilization headroom
    def budget(engine: str):
        return plan_deployment(DeploymentConfig.parse({"model": "llama-3.1-8b", "hardware": "h100",
                                                       "engine": {"engine": engine}})).budget

    old, new = budget("vllm==0.10.1"), budget("vllm")
    assert old.available_bytes - new.available_bytes == (1 << 30) // 2


@pytest.mark.parametrize("engine", ["vllm==0.6.3", "vllm==0.10.1"])
def test_fast_forward_is_exact_for_older_engines(engine):
    # decode segments priced in one call must give the iteration log of stepping one iteration at a time, with V0's
    # prefill-first policy and watermark, V1's chunk-only admission and host time in every iteration
    import numpy as np

    p = parse_engine(engine)
    chunked = p.family != "v0"
    cfg = EngineConfig(1024 if chunked else 4096, 32, 4096, enable_prefix_caching=chunked, enable_chunked_prefill=chunked,
                       profile=p, async_scheduling=False, max_concurrent_batches=1)
    rng = np.random.default_rng(0)
    specs = [RequestSpec(float(t), int(i), int(o)) for t, i, o in
             zip(np.cumsum(rng.exponential(0.05, 60)), rng.integers(50, 3000, 60), rng.integers(5, 200, 60), strict=True)]
    logs = []
    for ff in (True, False):
        setup = SimulationSetup(cfg, llama_layout(), 300, AffineCost(), ParallelConfig(), fast_forward=ff,
                                host=EngineHost(cfg.host, 128_256, 3.35e12))
        logs.append(simulate(setup, specs).iterations)
    for col in logs[0]:  # times summed in a different order (cumsum vs one by one): equal to rounding
        assert np.allclose(logs[0][col], logs[1][col], rtol=1e-12, atol=1e-12), col

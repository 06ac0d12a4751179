"""vLLM before 0.6 (0.5.x): the engine processes every step's outputs in line. `--engine vllm==0.5` takes host.py's
"v0-sync" host time (per step from the v0.6.0 blog's v0.5.3 profile, per sequence measured on V0's own code by
benchmarks/host_v0_output.py); everything else V0 does is 0.6's. Hand-derived values, arithmetic in comments."""

from __future__ import annotations

from dataclasses import replace

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.costing.hardware import load_hardware
from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.engine_versions import parse_engine
from graphsim.serving.host import EngineHost, host_model
from graphsim.serving.requests import RequestSpec


@pytest.mark.parametrize(("text", "host_family"), [
    ("vllm==0.5", "v0-sync"), ("vllm==0.5.4", "v0-sync"), ("vllm==0.5.5", "v0-sync"),
    ("vllm==0.6", "v0"), ("vllm==0.6.0", "v0"), ("vllm==0.6.3.post1", "v0"), ("vllm==0.7.3", "v0"),
    ("vllm==0.10.1", "v1")])
def test_the_split_is_the_release_with_async_output_processing(text, host_family):
    # PR 7049 (async output processor) shipped in 0.6.0 (blog.vllm.ai/2024/09/05/perf-update.html)
    assert parse_engine(text).host.family == host_family


def test_only_the_host_time_differs_from_0_6():
    old, new = parse_engine("vllm==0.5.4"), parse_engine("vllm==0.6.3")
    assert old.family == new.family == "v0"
    for prop in ("prefill_first", "watermark", "hybrid_kv", "kv_tokens_formula", "async_scheduling",
                 "reserve_full_isl", "enable_prefix_caching"):
        a, b = getattr(old, prop), getattr(new, prop)
        assert (a() if callable(a) else a) == (b() if callable(b) else b), prop
    h100 = load_hardware("h100")
    assert old.batch_defaults(h100, 2000, False) == new.batch_defaults(h100, 2000, False) == (2048, 256)
    # the front end and the API server's loop are the V0 family's (not re-measured for 0.5.x)
    o, n = old.host, new.host
    assert (o.frontend_us, o.api_per_chunk_us, o.api_per_output_us) == (n.frontend_us, n.api_per_chunk_us,
                                                                         n.api_per_output_us)


def test_v0_sync_constants():
    h = host_model("v0-sync")
    # per step: the blog's 29 % "scheduling" share of v0.5.3's 13 ms a token under light load: 0.29 × 13,000 = 3,770
    # per sequence: benchmarks/host_v0_output.py round 0 (the median sum of three): schedule 20.627 + sampler objects
    # 1.651 + _process_model_outputs 37.451 + cloudpickle 36.137 = 95.866 µs; the runner's and the sampler's
    # preparation from the six-part run, as a ratio to that run's four parts (its median round):
    # (21.781 + 9.132) / (28.114 + 2.285 + 46.675 + 51.357) = 30.913 / 128.431 = 0.240697;
    # 95.866 × 1.240697 = 118.9407 µs
    assert (h.step_us, h.per_seq_us, h.per_token_us, h.overlap) == (pytest.approx(3770.0), pytest.approx(118.9407),
                                                                    0.0, False)
    # a decode iteration of 320 sequences (Lambda's largest burst): 3,770 + 118.9407 × 320 = 3,770 + 38,061.02
    # = 41,831.02 µs of host; 0.6's: 4,000 + (5,500 − 4,000) / 256 × 320 = 4,000 + 1,875 = 5,875 µs
    assert h.host_us(320, 320) == pytest.approx(41_831.02)
    assert host_model("v0").host_us(320, 320) == pytest.approx(5_875.0)
    # at one sequence the pre-0.6 step is lighter: 3,770 + 118.9407 = 3,888.9407 against 4,000 + 5.859375 = 4,005.859
    assert h.host_us(1, 1) == pytest.approx(3_888.9407)
    assert host_model("v0").host_us(1, 1) == pytest.approx(4_005.859375)


def test_resolved_engine_args_carry_the_pre_0_6_host():
    e = EngineArgs(engine="vllm==0.5.4").resolve(load_hardware("h100"), {"max_position_embeddings": 8192})
    assert (e.host.family, e.host.step_us, e.host.per_seq_us, e.host.overlap) == (
        "v0-sync", pytest.approx(3770.0), pytest.approx(118.9407), False)
    assert parse_engine("vllm==0.5.4").to_json()["host"]["family"] == "v0-sync"


def test_a_pre_0_6_decode_step_in_a_simulation():
    # two 100-token prompts with 3 outputs each at t = 0, 1 ms of kernels an iteration, no sampling (vocab 0), the
    # pre-0.6 host not overlapped, no front end or API-server loop (those are tested apart): every iteration schedules both sequences, so it takes
    # 1,000 + 3,770 + 2 × 118.9407 = 5,007.8814 µs; first tokens at 5.0078814 ms, the third at 3 × that = 15.0236442 ms
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    engine_only = replace(host_model("v0-sync"), frontend_us=0.0, frontend_per_token_us=0.0, frontend_latency_us=0.0,
                          api_per_chunk_us=0.0, api_per_output_us=0.0)
    host = EngineHost(engine_only, vocab=0, bandwidth_bytes_per_s=2e12)
    setup = SimulationSetup(cfg, llama_layout(), 2000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=False, host=host)
    res = simulate(setup, [RequestSpec(0.0, 100, 3), RequestSpec(0.0, 100, 3)])
    for r in res.requests:
        assert (r.first_token_t * 1e3, r.finish_t * 1e3) == pytest.approx((5.0078814, 15.0236442))
    assert res.iterations["host_s"] * 1e3 == pytest.approx([4.0078814] * 3)


def test_older_than_0_5_names_the_oldest_profile():
    from graphsim.serving.engine_versions import EngineVersionError

    with pytest.raises(EngineVersionError, match=r"give --engine vllm==0\.5 or newer"):
        parse_engine("vllm==0.4.2")

"""Random sampling's GPU time in vLLM V1 (graphsim/serving/sampler.py): goldens from the trace's medians by hand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.engine_versions import parse_engine
from graphsim.serving.host import EngineHost, HostModel
from graphsim.serving.sampler import (
    GREEDY, RandomSampler, Sampling, SamplingError, check_engine, parse_sampling, random_sampler, with_sampling,
)

TOPK_TOPP = RandomSampler(filters=True, scale=1.0)
RANDOM = RandomSampler(filters=False, scale=1.0)


@pytest.mark.parametrize(("rows", "want_us"), [
    # from 8 rows: 34.6 + 3.204 r (without the filter) + 240.5 + 1.056 r (the Triton filter), where
    # 3.204 = ((701.1 - 346.1) - (488.1 - 293.3)) / 50, 34.6 = 194.8 - 50 × 3.204,
    # 1.056 = (346.1 - 293.3) / 50, 240.5 = 293.3 - 50 × 1.056
    (50, 34.6 + 160.2 + 240.5 + 52.8),  # 488.1: the trace's 50-row median span
    (100, 34.6 + 320.4 + 240.5 + 105.6),  # 701.1: the trace's 100-row median span
    (19, 34.6 + 60.876 + 240.5 + 20.064),  # 356.04 (the trace's one 19-row step: 335.4)
    (8, 34.6 + 25.632 + 240.5 + 8.448),  # 309.18: the first row count on the Triton filter
    (7, 514.5),  # below 8 rows: PyTorch's sort path, the 3-row step's span whatever the rows
    (1, 514.5),
    (0, 0.0),  # no rows, no sampler
])
def test_top_k_top_p_path(rows, want_us):
    assert TOPK_TOPP.us(rows) == pytest.approx(want_us, abs=1e-6)


def test_random_without_filter_is_the_line_at_every_row_count():
    assert RANDOM.us(50) == pytest.approx(194.8)  # 488.1 - 293.3: the span without the Triton filter
    assert RANDOM.us(4) == pytest.approx(34.6 + 4 * 3.204)  # 47.416: not measured below 8 rows (stated)
    assert RANDOM.us(np.asarray([0, 4, 100])) == pytest.approx([0.0, 47.416, 355.0])


def test_array_rows_take_each_path():
    assert TOPK_TOPP.us(np.asarray([0, 3, 8, 100])) == pytest.approx([0.0, 514.5, 309.18, 701.1])


def test_sampling_modes_follow_vllm():
    assert GREEDY.greedy and not GREEDY.filters
    assert Sampling(temperature=0.6, top_k=20, top_p=0.95).filters
    assert Sampling(temperature=0.6, top_k=0, top_p=1.0).greedy is False
    assert not Sampling(temperature=0.6, top_k=-1, top_p=1.0).filters  # -1 / 0 / 1.0: off
    assert not Sampling(temperature=0.0, top_k=20, top_p=0.95).filters  # temperature 0: greedy, filters off
    assert Sampling(temperature=5e-6, top_k=20).greedy  # below vLLM's _SAMPLING_EPS 1e-5


def test_greedy_gets_no_random_sampler_and_scaling_by_vocab_and_bandwidth():
    assert random_sampler(None, 151_936, 3.35e12) is None
    assert random_sampler(GREEDY, 151_936, 3.35e12) is None
    s = random_sampler(Sampling(0.7, 20, 0.8), 151_936, 3.35e12)
    assert s is not None and s.filters and s.scale == pytest.approx(1.0)  # the trace's own vocabulary and GPU
    # half the vocabulary on a GPU of half the bandwidth: 0.5 × 2 = 1.0; a quarter of it at the same bandwidth: 0.25
    half = random_sampler(Sampling(1.0), 151_936 // 2, 3.35e12 / 2)
    assert half is not None and not half.filters and half.scale == pytest.approx(1.0)
    quarter = random_sampler(Sampling(1.0, 0, 0.9), 151_936 // 4, 3.35e12)
    assert quarter is not None and quarter.us(100) == pytest.approx(701.1 * 0.25)


def test_engine_host_charges_the_random_sampler_instead_of_the_greedy_roofline():
    m = HostModel("t", step_us=0.0, per_seq_us=0.0, per_token_us=0.0, frontend_us=0.0, overlap=False)
    greedy = EngineHost(m, 151_936, 3.35e12)
    # greedy: 50 rows × 151,936 logits × 10 B / 3.35e12 B/s = 22.68 µs
    assert greedy.iteration_us(1000.0, 50, 50) == pytest.approx(1000.0 + 50 * 151_936 * 10 / 3.35e12 * 1e6)
    sampled = EngineHost(m, 151_936, 3.35e12, sampler=TOPK_TOPP)
    assert sampled.iteration_us(1000.0, 50, 50) == pytest.approx(1488.1)
    assert sampled.iteration_us(np.asarray([1000.0, 2000.0]), np.asarray([50, 100]),
                                np.asarray([50, 100])) == pytest.approx([1488.1, 2701.1])


def test_deployment_passes_the_sampling_to_its_host():
    dep = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100",
                                           engine=EngineArgs(engine="vllm==0.19.0", max_model_len=8192)))
    assert dep.engine_host().sampler is None  # default: greedy
    host = dep.engine_host(sampling=Sampling(0.6, 20, 0.95))
    assert host.sampler is not None and host.sampler.filters
    # Llama-3.1-8B's 128,256 logits on the h100 spec's 3.35 TB/s: 128,256 / 151,936
    assert host.sampler.scale == pytest.approx(128_256 / 151_936)


def test_parse_sampling_takes_vllm_bench_serves_options():
    assert parse_sampling(None, None, None) is None  # nothing given: greedy, as before PR 32723's bench
    s = parse_sampling(0.6, 20, 0.95)
    assert s is not None and (s.temperature, s.top_k, s.top_p) == (0.6, 20, 0.95) and s.filters
    only_p = parse_sampling(None, None, 0.9)  # vLLM's default temperature 1.0 when only a filter is given
    assert only_p is not None and only_p.temperature == 1.0 and only_p.filters
    greedy = parse_sampling(0.0, 20, None)
    assert greedy is not None and greedy.greedy and random_sampler(greedy, 151_936, 3.35e12) is None
    for bad in ((-0.1, None, None), (None, -2, None), (None, None, 1.5), (None, None, 0.0)):
        with pytest.raises(SamplingError):
            parse_sampling(*bad)


def test_with_sampling_swaps_the_sampler_of_a_setup_and_of_dp_ranks():
    m = HostModel("t", 0.0, 0.0, 0.0, 0.0, True)
    host = EngineHost(m, 151_936, 3.35e12)
    setup = SimpleNamespaceSetup(host=host)
    out = with_sampling(setup, Sampling(0.6, 20, 0.95), 151_936, 3.35e12)
    assert out.host.sampler == RandomSampler(True, 1.0) and host.sampler is None
    assert with_sampling(setup, GREEDY, 151_936, 3.35e12) is setup  # greedy: unchanged
    dp = DpLike(ranks=setup)
    assert with_sampling(dp, Sampling(1.0), 151_936, 3.35e12).ranks.host.sampler == RandomSampler(False, 1.0)
    with pytest.raises(SamplingError, match="--no-host-time"):
        with_sampling(SimpleNamespaceSetup(host=None), Sampling(1.0), 151_936, 3.35e12)
    assert with_sampling(SimpleNamespaceSetup(host=None), None, 151_936, 3.35e12).host is None


@dataclass(frozen=True)
class SimpleNamespaceSetup:
    host: EngineHost | None


@dataclass(frozen=True)
class DpLike:
    ranks: SimpleNamespaceSetup



def test_validation_data_records_what_its_runs_sampled(benchmark_script):
    # the kvcached runs (vLLM 0.19's bench, no --temperature) sampled with Qwen3's generation_config; the others are
    # greedy (older benches sent temperature 0): only they carry a "sampling" block, and it builds a Sampling
    h = benchmark_script("validate_serving")
    runs, tests = h.load_runs()
    sampled = {r["file"] for r in runs if "sampling" in tests[r["test_key"]]}
    assert sampled == {"kvcached_h100_qwen3_0.6b.json"}
    t = next(tests[r["test_key"]] for r in runs if r["file"] == "kvcached_h100_qwen3_0.6b.json")
    s = Sampling(**t["sampling"])
    assert (s.temperature, s.top_k, s.top_p, s.filters) == (0.6, 20, 0.95, True)


@pytest.mark.parametrize(("engine", "sampling", "refused"), [
    ("vllm==0.19.0", Sampling(0.6, 20, 0.95), None),  # the measured version
    ("vllm==0.33.0", Sampling(0.6, 20, 0.95), None),  # its topk_topp_triton.py too
    ("vllm==0.10.1", Sampling(0.6, 20, 0.95), "sorts the whole vocabulary"),  # no Triton filter in 0.10.1
    ("vllm==0.10.1", Sampling(0.6), None),  # temperature only: the same kernels without the filter
    ("vllm==0.6.3", Sampling(0.6), "only vLLM V1's sampler"),  # V0's sampler: not measured
    ("sglang", Sampling(0.6), "only vLLM V1's sampler"),
    ("trtllm", Sampling(1.0, 0, 0.9), "only vLLM V1's sampler"),
    ("sglang", GREEDY, None),  # greedy: the roofline, any engine
    ("vllm==0.6.3", None, None),
])
def test_random_sampling_only_where_it_was_measured(engine, sampling, refused):
    profile = parse_engine(engine)
    if refused is None:
        check_engine(sampling, profile)
    else:
        with pytest.raises(SamplingError, match=refused):
            check_engine(sampling, profile)

"""`--api-server-count` (vLLM's `vllm serve --api-server-count`): its per-version default, the front ends and stream
loops it adds (graphsim/serving/api_server.py), the search's cap, the CLI and the log, by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.api_server import ApiServers
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.engine_versions import parse_engine
from graphsim.serving.frontend import FrontEnd
from graphsim.serving.host import EngineHost, HostModel
from graphsim.serving.requests import RequestSpec

MS = 1e-3


@pytest.mark.parametrize(("engine", "dp", "expected"), [
    ("vllm==0.10.1", 4, 1),  # cli_args.py 0.10.1: default=1 whatever the dp size
    ("vllm==0.13", 2, 1),
    ("vllm==0.19", 4, 4),  # PR 32525: the dp size
    ("vllm==0.19", 1, 1),
    ("vllm", 8, 8),  # the newest
    ("sglang", 4, 1),
])
def test_default_follows_the_engine_version(engine, dp, expected):
    assert parse_engine(engine).api_server_count(dp) == expected


def test_a_given_count_wins_and_bad_counts_are_refused():
    from pydantic import ValidationError

    args = EngineArgs(api_server_count=3, engine="vllm==0.10.1")
    assert args.api_server_count == 3
    cfg = EngineConfig(8192, 64, 8192, api_server_count=3)
    assert cfg.api_servers(8) == 3
    assert EngineConfig(8192, 64, 8192, profile=parse_engine("vllm==0.10.1")).api_servers(8) == 1
    with pytest.raises(ValidationError):
        EngineArgs(api_server_count=0)


def test_two_front_ends_take_a_burst_in_pairs():
    # 10 ms of front end a request, four requests sent at 0, two API servers: they reach the engine at 10, 10, 20,
    # 20 ms (one server: 10, 20, 30, 40 ms)
    api = ApiServers(FrontEnd(10_000.0, 0.0, 0.0, servers=2), per_chunk_us=1.0, servers=1)
    for _ in range(4):
        api.send(0.0, 0)
    assert [api.take() / MS for _ in range(4)] == pytest.approx([10.0, 10.0, 20.0, 20.0])


def _setup(api_servers_per_engine: float) -> SimulationSetup:
    # 1 ms of kernels per iteration whatever it holds, no engine host time, no front end, 3 ms a stream chunk
    # (all of it per output)
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    model = HostModel("t", 0.0, 0.0, 0.0, 0.0, True, 0, api_per_chunk_us=3000.0, api_per_output_us=3000.0)
    host = EngineHost(model, vocab=0, bandwidth_bytes_per_s=2e12, api_servers_per_engine=api_servers_per_engine)
    return SimulationSetup(cfg, llama_layout(), 4000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                           fast_forward=False, host=host)


def test_three_servers_stream_one_engine_three_times_as_fast():
    # One request, 5 output tokens; the engine emits them at 1, 2, 3, 4, 5 ms. One server (3 ms an output): turns
    # 1–4, 4–13 (the 2, 3, 4 ms tokens), 13–16 ms (test_api_server.py). Three servers share the stream: 1 ms an
    # output: 1–2 (the 1 ms token), 2–3, 3–4, 4–5, 5–6 ms: the client sees the first token at 2 ms, the last at 6 ms.
    one = simulate(_setup(1.0), [RequestSpec(0.0, 100, 5)]).requests[0]
    assert (one.first_token_t / MS, one.finish_t / MS) == pytest.approx((4.0, 16.0))
    three = simulate(_setup(3.0), [RequestSpec(0.0, 100, 5)]).requests[0]
    assert (three.first_token_t / MS, three.finish_t / MS) == pytest.approx((2.0, 6.0))


def test_the_search_fast_path_caps_at_all_the_servers():
    from graphsim.serving.steady import aggregated_point

    # test_api_server.py's case (64 clients, 100-token prompts, 10 outputs, 1 ms iterations: the engine alone 6,400
    # requests/s), 20 ms of front end a request: one server 50 requests/s; two servers per engine 100/s; TTFT by
    # Little's law 64 / 100 − 9 × 1 ms = 0.631 s
    host = EngineHost(HostModel("t", 0.0, 0.0, 0.0, 20_000.0, True, 0, api_per_chunk_us=1000.0), vocab=0,
                      bandwidth_bytes_per_s=2e12, api_servers_per_engine=2.0)
    p = aggregated_point(AffineCost(1000.0, 0.0, 0.0, 0.0), 100, 10, 64, 8192, host=host)
    assert p.bound == "api server"
    assert p.requests_per_s == pytest.approx(100.0)
    assert p.ttft_s == pytest.approx(64 / 100 - 9e-3)
    assert dataclasses.replace(host, api_servers_per_engine=1.0).api_servers_per_engine == 1.0


def test_the_deployment_reports_and_binds_the_count():
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment

    def dep(engine: str, dp: int, count: int | None = None):
        doc = {"model": "llama-3.1-8b", "hardware": "h100_sxm",
               "parallel": {"tensor_parallel_size": 1, "data_parallel_size": dp},
               "engine": {"engine": engine, **({"api_server_count": count} if count else {})}}
        return plan_deployment(DeploymentConfig.parse(doc))

    # vLLM 0.10.1 at dp 2: one API server for two engines: each engine's stream at half a loop
    old = dep("vllm==0.10.1", 2)
    assert old.to_json()["engine"]["api_server_count"] == 1
    assert old.engine_host().api_servers_per_engine == pytest.approx(0.5)
    new = dep("vllm", 2)
    assert new.to_json()["engine"]["api_server_count"] == 2
    assert new.engine_host().api_servers_per_engine == pytest.approx(1.0)
    assert dep("vllm", 1, 4).engine_host().api_servers_per_engine == pytest.approx(4.0)


def test_cli_refuses_zero(capsys, tmp_path, monkeypatch):
    from graphsim.cli.app import main

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100_sxm", "--api-server-count", "0", "--rate", "1",
                 "--num-prompts", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--api-server-count" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_simulates_with_the_count(capsys):
    from graphsim.cli.app import main

    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100_sxm", "--api-server-count", "2", "--rate", "5",
                 "--num-prompts", "4", "--frontend-us", "2000", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    engine = json.loads(out.out)["deployment"]["engine"]
    assert engine["api_server_count"] == 2
    assert engine["host"]["frontend_us"] == 2000.0


def test_the_log_sets_the_count(tmp_path):
    from graphsim.serving.vllm_log import read_vllm_log

    log = tmp_path / "server.log"
    log.write_text("INFO 01-01 00:00:00 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-0.6B', "
                   "'api_server_count': 4, 'max_num_seqs': 128}\n")
    parsed = read_vllm_log(str(log))
    assert parsed.args["api_server_count"] == 4
    assert parsed.where["api_server_count"] == "non-default args"


def test_frontend_us_replaces_the_fitted_front_end_only():
    from graphsim.serving.host import FRONTEND_PER_TOKEN_US, FRONTEND_US

    v0101 = parse_engine("vllm==0.10.1")  # the fit's version: the tokenising term is FRONTEND_PER_TOKEN_US itself
    base = EngineConfig(8192, 64, 8192, profile=v0101).host
    assert base.frontend_us == FRONTEND_US == 12_500.0
    mine = EngineConfig(8192, 64, 8192, profile=v0101, frontend_us=2_000.0).host
    assert mine.frontend_us == 2_000.0
    assert mine.frontend_per_token_us == base.frontend_per_token_us == FRONTEND_PER_TOKEN_US  # tokenising stays
    assert mine.frontend_latency_us == base.frontend_latency_us
    assert EngineArgs(frontend_us=0.0).frontend_us == 0.0
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        EngineArgs(frontend_us=-1.0)


def test_frontend_us_sets_the_burst_spacing():
    # 2 ms of serial front end (no per-token, no latency part: HostModel built by hand), four prompts sent at 0,
    # one server: they reach the engine at 2, 4, 6, 8 ms
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False, frontend_us=2_000.0)
    model = dataclasses.replace(cfg.host, frontend_per_token_us=0.0, frontend_latency_us=0.0)
    assert model.frontend_us == 2_000.0
    host = EngineHost(model, vocab=0, bandwidth_bytes_per_s=2e12)
    setup = SimulationSetup(cfg, llama_layout(), 4000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=False, host=host)
    res = simulate(setup, [RequestSpec(0.0, 100, 2) for _ in range(4)])
    assert sorted(float(t) / MS for t in res.requests.column("reached_t")) == pytest.approx([2.0, 4.0, 6.0, 8.0])

"""The API server as one serial resource shared by the front end and streaming (graphsim/serving/api_server.py),
by hand."""

from __future__ import annotations

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.api_server import ApiServers
from graphsim.serving.frontend import FrontEnd
from graphsim.serving.host import API_SERVER_PER_CHUNK_US, EngineHost, HostModel, host_model
from graphsim.serving.requests import RequestSpec

MS = 1e-3


def test_an_ingestion_that_started_is_not_delayed_by_later_output():
    # 1 ms of service a request, 100 µs a chunk. r0 and r1 sent at 0: r0 is served 0–1 ms; at 1 ms nothing has been
    # emitted yet, so r1 is served 1–2 ms although 10 chunks become ready at 1.5 ms. Those wait for the server:
    # 2 ms + 10 × 0.1 ms = 3 ms, when the client sees them.
    api = ApiServers(FrontEnd(1000.0, 0.0, 0.0), per_chunk_us=100.0, servers=1)
    api.send(0.0, 0)
    api.send(0.0, 0)
    assert api.peek() == pytest.approx(1 * MS)
    assert api.take() == pytest.approx(1 * MS)
    assert api.peek() == pytest.approx(2 * MS)
    api.emit(0, 1.5 * MS, 10)
    assert api.take() == pytest.approx(2 * MS)
    api.drain()
    assert api.delivered(0, 1.5 * MS) == pytest.approx(3 * MS)


def test_output_and_ingestion_alternate_when_both_wait():
    # 1 ms a request, 100 µs a chunk, three requests sent at 0. r0: 0–1 ms. Chunks ready at 1.2 ms (5) are not
    # ready when the server frees at 1 ms: r1 1–2 ms. Then 5 more at 1.5 ms: at 2 ms both kinds wait and the last
    # job was an ingestion, so an output turn takes everything ready by 2 ms (10 chunks, 1 ms): 2–3 ms; then r2
    # 3–4 ms. A FIFO in the order of readiness would have served r2 (sent at 0) first, at 2–3 ms.
    api = ApiServers(FrontEnd(1000.0, 0.0, 0.0), per_chunk_us=100.0, servers=1)
    for _ in range(3):
        api.send(0.0, 0)
    assert api.take() == pytest.approx(1 * MS)
    api.emit(0, 1.2 * MS, 5)
    assert api.take() == pytest.approx(2 * MS)
    api.emit(0, 1.5 * MS, 5)
    assert api.peek() == pytest.approx(4 * MS)
    assert api.take() == pytest.approx(4 * MS)
    api.drain()
    assert api.delivered(0, 1.2 * MS) == pytest.approx(3 * MS)
    assert api.delivered(0, 1.5 * MS) == pytest.approx(3 * MS)


def test_advance_commits_turns_that_started():
    # no request waits: chunks ready at 1 ms (30, 3 ms of work) start a turn at 1 ms that ends at 4 ms, committed
    # at 1 ms; chunks ready at 2 ms wait for it
    api = ApiServers(FrontEnd(1000.0, 0.0, 0.0), per_chunk_us=100.0, servers=1)
    api.emit(0, 1 * MS, 30)
    api.advance(1 * MS)
    api.emit(0, 2 * MS, 10)
    api.advance(2 * MS)
    api.send(2.5 * MS, 0)
    api.emit(0, 4.5 * MS, 10)
    # at 4 ms both wait (the 2 ms chunks; the request sent at 2.5 ms) and the last job was an output turn → the
    # request goes first: 4–5 ms; then the 2 ms and 4.5 ms chunks (20 chunks): 5–7 ms
    assert api.peek() == pytest.approx(5 * MS)
    assert api.take() == pytest.approx(5 * MS)
    api.drain()
    assert [api.delivered(0, t * MS) / MS for t in (1, 2, 4.5)] == pytest.approx([4.0, 7.0, 7.0])


def _setup(frontend_us: float, per_chunk_us: float) -> SimulationSetup:
    # 1 ms of kernels per iteration whatever it holds, no engine host time, no sampling (vocab 0), no latency
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    model = HostModel("t", 0.0, 0.0, 0.0, frontend_us, True, 0, api_per_chunk_us=per_chunk_us)
    host = EngineHost(model, vocab=0, bandwidth_bytes_per_s=2e12)
    return SimulationSetup(cfg, llama_layout(), 4000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                           fast_forward=False, host=host)


def test_a_slow_stream_sets_the_tpot_the_client_sees():
    # One request, 5 output tokens, no front end, 3 ms a chunk. The engine emits a token at 1, 2, 3, 4, 5 ms (1 ms
    # iterations: the prefill, then 4 decodes). The server: a turn at 1 ms for the 1 ms token (3 ms) → 4 ms; at 4 ms
    # the 2, 3, 4 ms tokens (9 ms) → 13 ms; at 13 ms the 5 ms token → 16 ms. The client: first token 4 ms, last 16 ms:
    # TTFT 4 ms, TPOT (16 − 4) / 4 = 3 ms (the engine's own: 1 ms).
    res = simulate(_setup(0.0, 3000.0), [RequestSpec(0.0, 100, 5)])
    r = res.requests[0]
    assert r.first_token_t / MS == pytest.approx(4.0)
    assert r.finish_t / MS == pytest.approx(16.0)


def test_streaming_delays_the_next_requests_front_end():
    # Three 100-token prompts sent at 0 with 3 output tokens each; 2 ms of front end a request, 1 ms a chunk, 1 ms
    # iterations. r0 is ingested 0–2 ms, r1 2–4 ms (nothing was emitted by 2 ms). The engine runs r0's prefill 2–3 ms
    # and a decode 3–4 ms (tokens at 3 and 4 ms). At 4 ms the server has both kinds waiting after an ingestion: an
    # output turn for the 3 and 4 ms chunks, 4–6 ms, then r2 6–8 ms. So r2 reaches the engine at 8 ms (6 ms without
    # the stream's cost) and r0's first token reaches its client at 6 ms (engine: 3 ms).
    res = simulate(_setup(2000.0, 1000.0), [RequestSpec(0.0, 100, 3) for _ in range(3)])
    reached = sorted(float(t) / MS for t in res.requests.column("reached_t"))
    assert reached == pytest.approx([2.0, 4.0, 8.0])
    assert res.requests[0].first_token_t / MS == pytest.approx(6.0)
    base = simulate(_setup(2000.0, 0.0), [RequestSpec(0.0, 100, 3) for _ in range(3)])
    assert sorted(float(t) / MS for t in base.requests.column("reached_t")) == pytest.approx([2.0, 4.0, 6.0])


def test_every_engine_family_streams_at_the_measured_cost():
    for family in ("v0", "v1"):  # vLLM 0.10.1's output path
        assert host_model(family).api_per_chunk_us == API_SERVER_PER_CHUNK_US == 36.89
    # v1-async: vLLM 0.19.0's, 0.10.1's parts at 256 streams scaled by the 0.19 / 0.10.1 ratios (host_streaming.py):
    # 36.89 + 7.8 × (7.01 / 5.32 − 1) + 8.4 × (8.24 / 7.88 − 1) = 36.89 + 7.8 × 0.31767 + 8.4 × 0.04569 = 39.7516
    assert host_model("v1-async").api_per_chunk_us == pytest.approx(39.7516, abs=1e-3)


def _host(frontend_us: float, per_chunk_us: float) -> EngineHost:
    return EngineHost(HostModel("t", 0.0, 0.0, 0.0, frontend_us, True, 0, api_per_chunk_us=per_chunk_us), vocab=0,
                      bandwidth_bytes_per_s=2e12)


def test_the_search_fast_path_caps_throughput_at_the_api_server():
    from graphsim.serving.steady import aggregated_point

    # 1 ms an iteration whatever it holds; 64 clients, 100-token prompts, 10 output tokens. The engine: a request lives
    # N = 9 + 1 iterations, the prompts take 64 × 100 / (8192 − D) < 1 packed iteration, so a period is 10 ms: 6,400
    # requests/s. The API server: 10 ms of front end + 10 chunks × 1 ms = 20 ms a request → at most 50 requests/s,
    # 500 output tokens/s; TTFT by Little's law: 64 / 50 − 9 × 1 ms = 1.271 s.
    p = aggregated_point(AffineCost(1000.0, 0.0, 0.0, 0.0), 100, 10, 64, 8192, host=_host(10_000.0, 1000.0))
    assert p.bound == "api server"
    assert p.requests_per_s == pytest.approx(50.0)
    assert p.output_tokens_per_s == pytest.approx(500.0)
    assert p.ttft_s == pytest.approx(64 / 50 - 9 * 1e-3)
    # 10 µs a chunk and no front end: 0.1 ms a request, 10,000/s: the engine's 6,400/s stand
    q = aggregated_point(AffineCost(1000.0, 0.0, 0.0, 0.0), 100, 10, 64, 8192, host=_host(0.0, 10.0))
    assert q.bound == "decode"
    assert q.requests_per_s == pytest.approx(6400.0)

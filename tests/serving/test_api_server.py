"""The API server (graphsim/serving/api_server.py): the front end's FIFO beside the streaming loop, output turns,
merged chunks and the client's ITL, by hand."""

from __future__ import annotations

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.api_server import ApiServers
from graphsim.serving.frontend import FrontEnd
from graphsim.serving.host import API_SERVER_PER_CHUNK_US, EngineHost, HostModel, host_model
from graphsim.serving.requests import RequestSpec

MS = 1e-3


def test_ingestion_is_a_fifo_beside_the_streaming_loop():
    # 1 ms of front end a request, 100 µs a chunk, three requests sent at 0: they reach the engine at 1, 2 and 3 ms
    # whatever the loop streams meanwhile (10 chunks ready at 1.5 ms: a turn 1.5–2.5 ms, seen by the client at 2.5 ms)
    api = ApiServers(FrontEnd(1000.0, 0.0, 0.0), per_chunk_us=100.0, servers=1)
    for _ in range(3):
        api.send(0.0, 0)
    assert api.take() == pytest.approx(1 * MS)
    api.emit(0, 1.5 * MS, 10)
    assert api.peek() == pytest.approx(2 * MS)
    assert api.take() == pytest.approx(2 * MS)
    assert api.take() == pytest.approx(3 * MS)
    assert api.peek() == float("inf")
    api.drain()
    assert api.delivered(0, 1.5 * MS) == pytest.approx(2.5 * MS)


def test_a_turn_serves_every_job_ready_at_its_start():
    # 100 µs a chunk (all of it per chunk sent). Chunks ready at 1 ms (30: 3 ms of work) make a turn 1–4 ms; at 4 ms
    # the 2 ms job (10 chunks) is ready but the 4.5 ms one is not: a turn 4–5 ms; then the 4.5 ms job: 5–6 ms
    api = ApiServers(FrontEnd(0.0, 0.0, 0.0), per_chunk_us=100.0, servers=1)
    api.emit(0, 1 * MS, 30)
    api.emit(0, 2 * MS, 10)
    api.emit(0, 4.5 * MS, 10)
    api.drain()
    assert [api.delivered(0, t * MS) / MS for t in (1, 2, 4.5)] == pytest.approx([4.0, 5.0, 6.0])


def test_merged_outputs_pay_the_send_once_per_request():
    # 100 µs a chunk, of which 40 µs per output (process_outputs) and 60 µs per chunk sent. A 1 ms job of 10 chunks
    # at 0 ms: 10 × 100 µs = 1 ms, 0–1 ms. Meanwhile three jobs of 10, 10 and 4 requests became ready (0.2, 0.4,
    # 0.6 ms): one turn at 1 ms merges them: 40 µs × (10 + 10 + 4) + 60 µs × max(10, 10, 4) = 0.96 + 0.6 = 1.56 ms,
    # 1–2.56 ms (unmerged they would cost 2.4 ms)
    api = ApiServers(FrontEnd(0.0, 0.0, 0.0), per_chunk_us=100.0, servers=1, per_output_us=40.0)
    api.emit(0, 0.0, 10)
    for t, c in ((0.2, 10), (0.4, 10), (0.6, 4)):
        api.emit(0, t * MS, c)
    api.drain()
    assert api.delivered(0, 0.0) / MS == pytest.approx(1.0)
    assert api.delivered(0, 0.6 * MS) / MS == pytest.approx(2.56)


def _setup(frontend_us: float, per_chunk_us: float, per_output_us: float = 0.0) -> SimulationSetup:
    # 1 ms of kernels per iteration whatever it holds, no engine host time, no sampling (vocab 0), no latency
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    model = HostModel("t", 0.0, 0.0, 0.0, frontend_us, True, 0, api_per_chunk_us=per_chunk_us,
                      api_per_output_us=per_output_us)
    host = EngineHost(model, vocab=0, bandwidth_bytes_per_s=2e12)
    return SimulationSetup(cfg, llama_layout(), 4000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                           fast_forward=False, host=host)


def test_a_slow_stream_sets_the_tpot_the_client_sees():
    # One request, 5 output tokens, no front end, 3 ms a chunk, all of it per output (merging saves nothing). The
    # engine emits a token at 1, 2, 3, 4, 5 ms (1 ms iterations: the prefill, then 4 decodes). The server: a turn at
    # 1 ms for the 1 ms token (3 ms) → 4 ms; at 4 ms the 2, 3, 4 ms tokens (9 ms) → 13 ms; at 13 ms the 5 ms token →
    # 16 ms. The client: first token 4 ms, last 16 ms: TTFT 4 ms, TPOT (16 − 4) / 4 = 3 ms (the engine's own: 1 ms).
    res = simulate(_setup(0.0, 3000.0, 3000.0), [RequestSpec(0.0, 100, 5)])
    r = res.requests[0]
    assert r.first_token_t / MS == pytest.approx(4.0)
    assert r.finish_t / MS == pytest.approx(16.0)
    # the client got three chunks (4, 13, 16 ms; the 2, 3 and 4 ms tokens merged): two ITL samples, 9 and 3 ms, as
    # vllm bench serve records one per chunk after the first (the engine's own gaps: four of 1 ms)
    assert sorted(res.itl_values / MS) == pytest.approx([3.0, 9.0])
    # the same 3 ms all per chunk SENT: the 4 ms turn sends the three merged tokens as one chunk, 4–7 ms, then the
    # 5 ms token 7–10 ms: finish 10 ms, ITL samples 3 and 3 ms
    res = simulate(_setup(0.0, 3000.0, 0.0), [RequestSpec(0.0, 100, 5)])
    assert res.requests[0].finish_t / MS == pytest.approx(10.0)
    assert sorted(res.itl_values / MS) == pytest.approx([3.0, 3.0])


def test_streaming_does_not_delay_the_next_requests_front_end():
    # Three 100-token prompts sent at 0 with 3 output tokens each; 2 ms of front end a request, 1 ms a chunk, 1 ms
    # iterations. The requests reach the engine at 2, 4 and 6 ms with or without the streams' cost. r0's prefill runs
    # 2–3 ms: its first token is ready at 3 ms, a turn 3–4 ms sends it: its client sees it at 4 ms.
    res = simulate(_setup(2000.0, 1000.0), [RequestSpec(0.0, 100, 3) for _ in range(3)])
    assert sorted(float(t) / MS for t in res.requests.column("reached_t")) == pytest.approx([2.0, 4.0, 6.0])
    assert res.requests[0].first_token_t / MS == pytest.approx(4.0)
    base = simulate(_setup(2000.0, 0.0), [RequestSpec(0.0, 100, 3) for _ in range(3)])
    assert sorted(float(t) / MS for t in base.requests.column("reached_t")) == pytest.approx([2.0, 4.0, 6.0])
    assert base.requests[0].first_token_t / MS == pytest.approx(3.0)


def test_every_engine_family_streams_at_the_measured_cost():
    for family in ("v0", "v1"):  # vLLM 0.10.1's output path
        assert host_model(family).api_per_chunk_us == API_SERVER_PER_CHUNK_US == 36.89
    # v1-async: vLLM 0.19.0's, 0.10.1's parts at 256 streams scaled by the 0.19 / 0.10.1 ratios (host_streaming.py):
    # 36.89 + 7.8 × (7.01 / 5.32 − 1) + 8.4 × (8.24 / 7.88 − 1) = 36.89 + 7.8 × 0.31767 + 8.4 × 0.04569 = 39.7516
    assert host_model("v1-async").api_per_chunk_us == pytest.approx(39.7516, abs=1e-3)


def _host(frontend_us: float, per_chunk_us: float, per_output_us: float = 0.0) -> EngineHost:
    return EngineHost(HostModel("t", 0.0, 0.0, 0.0, frontend_us, True, 0, api_per_chunk_us=per_chunk_us,
                                api_per_output_us=per_output_us), vocab=0, bandwidth_bytes_per_s=2e12)


def test_the_search_fast_path_caps_throughput_at_the_api_server():
    from graphsim.serving.steady import aggregated_point

    # 1 ms an iteration whatever it holds; 64 clients, 100-token prompts, 10 output tokens. The engine: a request lives
    # N = 9 + 1 iterations, the prompts take 64 × 100 / (8192 − D) < 1 packed iteration, so a period is 10 ms: 6,400
    # requests/s. The API server's front end: 20 ms a request → at most 50 requests/s, 500 output tokens/s; TTFT by
    # Little's law: 64 / 50 − 9 × 1 ms = 1.271 s.
    cost = AffineCost(1000.0, 0.0, 0.0, 0.0)
    p = aggregated_point(cost, 100, 10, 64, 8192, host=_host(20_000.0, 1000.0))
    assert p.bound == "api server"
    assert p.requests_per_s == pytest.approx(50.0)
    assert p.output_tokens_per_s == pytest.approx(500.0)
    assert p.ttft_s == pytest.approx(64 / 50 - 9 * 1e-3)
    # the loop: 10 outputs × 2 ms each (per output, merged or not) = 20 ms a request → 50/s again
    q = aggregated_point(cost, 100, 10, 64, 8192, host=_host(0.0, 3000.0, 2000.0))
    assert q.bound == "api server"
    assert q.requests_per_s == pytest.approx(50.0)
    # 10 µs a chunk and no front end: 0.1 ms a request at most, 10,000/s: the engine's 6,400/s stand
    r = aggregated_point(cost, 100, 10, 64, 8192, host=_host(0.0, 10.0, 10.0))
    assert r.bound == "decode"
    assert r.requests_per_s == pytest.approx(6400.0)


def test_a_closed_loop_client_sends_when_it_gets_the_last_chunk():
    # vllm bench serve --max-concurrency 1: the next request waits for request_func to return, i.e. for the stream's
    # last chunk (benchmarks/serve.py limited_request_func). Two requests of 100 prompt tokens and 2 output tokens;
    # 1 ms iterations, 3 ms a chunk (all per output), no front end. r0 reaches the engine at 0: prefill 0–1 ms (token
    # 1), a decode 1–2 ms (token 2: the engine is done at 2 ms). The server: a turn at 1 ms for token 1, 1–4 ms; at
    # 4 ms the 2 ms token, 4–7 ms. The client gets r0's last chunk at 7 ms and sends r1 then: prefill 7–8 ms, its
    # first token sent 8–11 ms; its decode 8–9 ms, that token's turn at 11 ms, 11–14 ms.
    from graphsim.serving import ClosedLoop, Lengths

    loop = ClosedLoop(1, 2, Lengths(100, 100), Lengths(2, 2))
    res = simulate(_setup(0.0, 3000.0, 3000.0), loop)
    r0, r1 = res.requests[0], res.requests[1]
    assert r0.finish_t / MS == pytest.approx(7.0)
    assert r1.arrival / MS == pytest.approx(7.0)
    assert (r1.first_token_t / MS, r1.finish_t / MS) == pytest.approx((11.0, 14.0))
    # Had the client sent r1 when the ENGINE finished r0 (2 ms), r1 would run 2–3 and 3–4 ms and its tokens would
    # wait for the server: at 4 ms the 2, 3 and 4 ms tokens merge into one 9 ms turn, 4–13 ms.
    # Without a stream cost the client sees the engine's finish: r1 is sent at 2 ms
    fast = simulate(_setup(0.0, 0.0), ClosedLoop(1, 2, Lengths(100, 100), Lengths(2, 2)))
    assert fast.requests[1].arrival / MS == pytest.approx(2.0)

"""The front end as a FIFO queue before the engine (graphsim/serving/frontend.py), by hand."""

from __future__ import annotations

import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.frontend import FrontEnd, FrontEndQueue
from graphsim.serving.host import EngineHost, HostModel, host_model
from graphsim.serving.requests import ClosedLoop, Lengths, RequestSpec


def test_one_server_serves_a_burst_one_after_another():
    # 10 ms + 2 µs × 1000 tokens = 12 ms of service each, 5 ms latency; three requests sent at t = 0 reach the
    # engine at 12 + 5, 24 + 5, 36 + 5 ms; a fourth sent at 100 ms finds the server free: 100 + 12 + 5 = 117 ms
    q = FrontEndQueue(FrontEnd(10_000.0, 2.0, 5_000.0))
    got = [q.reach_s(t, 1000) * 1e3 for t in (0.0, 0.0, 0.0, 0.1)]
    assert got == pytest.approx([17.0, 29.0, 41.0, 117.0])


def test_two_servers_share_the_queue():
    # 12 ms service, no latency, two servers: requests at 0, 0, 0 reach at 12, 12 and 24 ms
    q = FrontEndQueue(FrontEnd(12_000.0, 0.0, 0.0, servers=2))
    assert [q.reach_s(0.0, 0) * 1e3 for _ in range(3)] == pytest.approx([12.0, 12.0, 24.0])


def test_latency_alone_delays_without_queueing():
    q = FrontEndQueue(FrontEnd(0.0, 0.0, 7_000.0))
    assert [q.reach_s(0.0, 500) * 1e3 for _ in range(3)] == pytest.approx([7.0, 7.0, 7.0])


def _setup(frontend_us: float, latency_us: float, replicas: int = 1) -> SimulationSetup:
    # 1 ms of kernels per iteration whatever it holds, no host step time and no sampling (vocab 0): only the front end
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    model = HostModel("t", 0.0, 0.0, 0.0, frontend_us, True, 0, frontend_latency_us=latency_us)
    host = EngineHost(model, vocab=0, bandwidth_bytes_per_s=2e12)
    return SimulationSetup(cfg, llama_layout(), 4000, AffineCost(1000.0, 0.0, 0.0, 0.0),
                           ParallelConfig(data_parallel_size=replicas), fast_forward=False, host=host)


def test_simulated_ttft_includes_the_front_end_queue():
    # three 100-token prompts sent at t = 0, 10 ms serial + 1 ms latency each: they reach the engine at 11, 21 and
    # 31 ms; each prefill is one 1 ms iteration (the engine is idle when each arrives), so the first tokens come at
    # 12, 22, 32 ms: TTFT 12, 22, 32 ms (measured from the send at 0)
    res = simulate(_setup(10_000.0, 1_000.0), [RequestSpec(0.0, 100, 2) for _ in range(3)])
    assert sorted(r.first_token_t * 1e3 for r in res.requests) == pytest.approx([12.0, 22.0, 32.0])
    assert all(r.arrival == 0.0 for r in res.requests)  # the client's send time is kept


def test_without_a_front_end_the_burst_is_one_batch():
    # the same burst with no front end: all three prompts are in the first 1 ms iteration
    res = simulate(_setup(0.0, 0.0), [RequestSpec(0.0, 100, 2) for _ in range(3)])
    assert [r.first_token_t * 1e3 for r in res.requests] == pytest.approx([1.0, 1.0, 1.0])


def test_closed_loop_clients_queue_at_the_front_end():
    # 2 clients, 4 requests of 1 output token, 10 ms serial, no latency: both first sends (t = 0) reach the engine
    # at 10 and 20 ms and finish 1 ms later (one iteration: prefill and its only token). The next sends, at 11 and
    # 21 ms, find the server busy until 20 ms and then with the other: they reach at 20 + 10 = 30 and 30 + 10 =
    # 40 ms. First tokens: 11, 21, 31, 41 ms
    loop = ClosedLoop(concurrency=2, num_requests=4, input_len=Lengths(100, 100), output_len=Lengths(1, 1))
    res = simulate(_setup(10_000.0, 0.0), loop)
    assert sorted(r.first_token_t * 1e3 for r in res.requests) == pytest.approx([11.0, 21.0, 31.0, 41.0])


def test_every_engine_family_carries_the_front_end():
    import graphsim.serving.host as host

    for family in ("v0", "v1", "v1-async"):
        m = host_model(family)
        assert (m.frontend_us, m.frontend_per_token_us, m.frontend_latency_us) == (
            host.FRONTEND_US, host.FRONTEND_PER_TOKEN_US, host.FRONTEND_LATENCY_US)


def test_each_request_shows_its_front_end_delay(tmp_path):
    # The burst above (10 ms serial + 1 ms latency, sent at t = 0) reaches the engine at 11, 21 and 31 ms: the
    # per-request results say so (reached_engine_s, frontend_ms = reached − sent), and the Perfetto trace has a
    # "front end" span from the send to the engine for each request, then "queued" from there to admission.
    import csv
    import json

    from graphsim.serving.trace_export import write_chrome_trace, write_requests

    res = simulate(_setup(10_000.0, 1_000.0), [RequestSpec(0.0, 100, 2) for _ in range(3)])
    rows = list(csv.DictReader(write_requests(res, tmp_path / "r.csv").read_text().splitlines()))
    assert sorted(float(r["frontend_ms"]) for r in rows) == pytest.approx([11.0, 21.0, 31.0])
    assert sorted(float(r["reached_engine_s"]) * 1e3 for r in rows) == pytest.approx([11.0, 21.0, 31.0])
    events = json.loads(write_chrome_trace(res, tmp_path / "t.json").read_text())["traceEvents"]
    spans = {(e["id"], e["ph"]): e["ts"] for e in events if e.get("name") == "front end"}
    assert sorted(spans[(i, "e")] - spans[(i, "b")] for i in range(3)) == pytest.approx([11e3, 21e3, 31e3])
    assert all(e["args"]["source"] == "derived" for e in events if e.get("name") == "front end" and e["ph"] == "b")


def test_without_a_front_end_the_delay_is_zero_and_no_span_is_drawn(tmp_path):
    import csv
    import json

    from graphsim.serving.trace_export import write_chrome_trace, write_requests

    res = simulate(_setup(0.0, 0.0), [RequestSpec(0.0, 100, 2) for _ in range(3)])
    rows = list(csv.DictReader(write_requests(res, tmp_path / "r.csv").read_text().splitlines()))
    assert [float(r["frontend_ms"]) for r in rows] == [0.0, 0.0, 0.0]
    events = json.loads(write_chrome_trace(res, tmp_path / "t.json").read_text())["traceEvents"]
    assert not [e for e in events if e.get("name") == "front end"]

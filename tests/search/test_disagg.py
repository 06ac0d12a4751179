"""Disaggregated prefill/decode simulation: requests and tokens conserved, the KV transfer priced from the
request's KV bytes over the link, and its place in TTFT; determinism and fast-forward equivalence."""

import math

import numpy as np
import pytest
from serving_helpers import (  # pyright: ignore[reportMissingImports] (conftest path)
    AffineCost, llama_layout, small_setup,
)

from graphsim.costing.hardware import load_hardware
from graphsim.serving import ClosedLoop, parse_lengths, summarize, synthetic
from graphsim.serving.disagg import DisaggSetup, KvLink, KvLinkError, simulate_disagg


def disagg(x=2, y=2, p_blocks=4000, d_blocks=4000, d_seqs=64, link=None, fast_forward=True, tp_p=1, tp_d=1):
    p = small_setup(num_blocks=p_blocks, mnbt=4096, replicas=x, layout=llama_layout(tp_p), fast_forward=fast_forward,
                    tp=tp_p)
    d = small_setup(num_blocks=d_blocks, max_num_seqs=d_seqs, replicas=y, router="least-outstanding",
                    layout=llama_layout(tp_d), fast_forward=fast_forward, tp=tp_d)
    return DisaggSetup(p, d, link or KvLink.from_hardware(load_hardware("h200")))


def open_loop(n=500, rate=10.0, seed=3):
    return synthetic(n, rate, parse_lengths("100:2000", "in"), parse_lengths("20:300", "out"), seed=seed)


def test_requests_and_tokens_are_conserved():
    w = open_loop()
    res = simulate_disagg(disagg(), w)
    done = res.completed
    assert len(res.requests) == len(w) and len(done) == len(w) and res.preemptions == 0
    assert sorted((r.arrival, r.num_prompt_tokens, r.max_tokens) for r in done) == sorted((s.arrival_s, s.input_tokens, s.output_tokens)
                                                                           for s in w)
    # the prefill pool computes every prompt once; the decode pool the last prompt token (recomputed) and the
    # output tokens after the first: one token per output token
    assert res.prefill_tokens == sum(r.num_prompt_tokens for r in done)
    assert res.decode_tokens == sum(r.max_tokens for r in done)
    assert all(r.num_output_tokens == r.max_tokens for r in done)
    ok = ~np.isnan(res.transfer_end_s)
    assert ok.sum() == len(done)
    s = summarize(res)
    assert s.gpus == 4 and s.completed == len(w)


def test_transfer_precedes_the_first_token_and_links_do_not_overlap():
    setup = disagg(x=1, y=2)
    res = simulate_disagg(setup, open_loop(300, rate=20.0))
    for r in res.completed:
        i = r.id
        assert res.prefill_done_s[i] >= r.arrival
        assert res.transfer_start_s[i] >= res.prefill_done_s[i]
        assert math.isclose(res.transfer_end_s[i] - res.transfer_start_s[i], setup.transfer_s(r.num_prompt_tokens), rel_tol=1e-9)
        assert r.first_token_t > res.transfer_end_s[i]  # then the decode side computes the last prompt token
        assert r.admitted_t >= res.transfer_end_s[i]
    # one prefill instance: its egress carries one transfer at a time
    order = np.argsort(res.transfer_start_s)
    starts, ends = res.transfer_start_s[order], res.transfer_end_s[order]
    assert (starts[1:] >= ends[:-1] - 1e-12).all()


def test_transfer_bytes_are_the_requests_kv_bytes_on_the_busier_side():
    setup = disagg(tp_p=1, tp_d=2)
    # Llama-3.1-8B: 131,072 B per token on one rank; 65,536 on each of two
    assert setup.prefill.layout.bytes_per_token == 131_072 and setup.decode.layout.bytes_per_token == 65_536
    assert setup.transfer_bytes(1000) == 1000 * 131_072
    link = setup.link
    assert link.bandwidth_bytes_per_s == 450e9 and link.latency_s == pytest.approx(5e-6)
    assert setup.transfer_s(1000) == pytest.approx(5e-6 + 131_072_000 / 450e9)
    assert link.source == "roofline"


def test_a_slow_link_adds_its_transfer_time_to_ttft():
    w = open_loop(200, rate=2.0)
    fast = summarize(simulate_disagg(disagg(), w))
    slow_link = KvLink(1e9, 1e-3, "given")
    slow = summarize(simulate_disagg(disagg(link=slow_link), w))
    mean_prompt = np.mean([s.input_tokens for s in w])
    extra_ms = (1e-3 + mean_prompt * 131_072 / 1e9) * 1e3
    assert slow.ttft_ms.mean - fast.ttft_ms.mean == pytest.approx(extra_ms, rel=0.15)
    assert slow.tpot_ms.mean == pytest.approx(fast.tpot_ms.mean, rel=0.02)


def test_closed_loop_with_kv_pressure_finishes_every_request():
    setup = disagg(x=1, y=1, d_blocks=900, d_seqs=64)
    res = simulate_disagg(setup, ClosedLoop(48, 300, parse_lengths("500:1500", "in"), parse_lengths("50:400", "out")))
    assert len(res.completed) == 300 and res.preemptions > 0  # preempted decodes recompute their prompt locally
    assert all(r.num_output_tokens == r.max_tokens for r in res.completed)


def test_fast_forward_is_the_same_simulation():
    w = ClosedLoop(40, 240, parse_lengths("200:1200", "in"), parse_lengths("50:300", "out"), seed=2)
    a = simulate_disagg(disagg(fast_forward=True), w)
    b = simulate_disagg(disagg(fast_forward=False), w)
    assert [(r.id, r.replica) for r in a.requests] == [(r.id, r.replica) for r in b.requests]
    for field in ("first_token_t", "finish_t"):  # segments sum iteration times in one call: equal to rounding
        assert [getattr(r, field) for r in a.requests] == pytest.approx([getattr(r, field) for r in b.requests],
                                                                         rel=1e-12)
    for k in a.iterations:
        np.testing.assert_allclose(a.iterations[k], b.iterations[k], rtol=1e-12, err_msg=k)
    assert (np.diff(a.iterations["start_s"]) >= 0).all()


def test_same_seed_same_output():
    w1, w2 = open_loop(seed=5), open_loop(seed=5)
    a, b = simulate_disagg(disagg(), w1), simulate_disagg(disagg(), w2)
    assert [(r.first_token_t, r.finish_t) for r in a.requests] == [(r.first_token_t, r.finish_t) for r in b.requests]


def test_rejects_prompts_longer_than_the_context_and_a_bad_link():
    from graphsim.serving import RequestSpec

    w = [RequestSpec(0.0, 9000, 10), RequestSpec(0.1, 100, 10)]
    res = simulate_disagg(disagg(), w)
    assert sum(r.rejected for r in res.requests) == 1 and len(res.completed) == 1
    with pytest.raises(KvLinkError):
        KvLink(0.0, 0.0)
    spec = load_hardware("h200")
    assert KvLink.from_hardware(spec, 100.0, 20.0).source == "given"


def test_affine_cost_stand_in_is_used():
    assert isinstance(disagg().prefill.cost, AffineCost)


def test_result_names_both_pools_and_exports_a_trace():
    from graphsim.serving.trace_export import chrome_trace

    setup = disagg(x=1, y=2)
    res = simulate_disagg(setup, open_loop(40, rate=5.0))
    assert res.setup is setup and res.gpus == 3 and setup.replicas == 3
    assert [row["pool"] for row in res.per_replica] == ["prefill", "decode", "decode"]
    names = [e["args"]["name"] for e in chrome_trace(res)["traceEvents"] if e["name"] == "process_name"]
    assert names == ["replica 0", "replica 1", "replica 2"]

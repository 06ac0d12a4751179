"""vLLM's batch queue with pipeline parallelism in the simulator (serving/pipeline_engine.py): batches in flight,
completion after every stage, the slowest stage's interval, bubbles; times worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from serving_helpers import AffineCost, small_setup

from graphsim.costing.interpolate import ROOFLINE
from graphsim.serving.pipeline_engine import PipelineCost, PipelineEngine, pipeline_times
from graphsim.serving.requests import RequestSpec
from graphsim.serving.simulator import run_events, simulate


class StageCost:
    """A stage that takes `us` whatever the batch."""

    def __init__(self, us: float) -> None:
        self.us = us

    def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
        return self.us, ROOFLINE

    def decode_run_us(self, batch, ctx_mean0, k):
        return np.full(k, self.us), np.full(k, ROOFLINE, dtype=np.int8)


def test_pipeline_times_fill_and_drain():
    # stages of 3 and 5 (s); batch 1 at 0: stage 0 on [0, 3], stage 1 on [3, 8]; batch 2 at 0 too: stage 0
    # waits for nothing (free at 3): [3, 6]; stage 1 waits for batch 1 (free at 8): [8, 13]. Stage 1 idles on
    # [0, 3] (the fill bubble) and stage 0 on [6, …] until a third batch comes.
    free = [0.0, 0.0]
    assert pipeline_times(0.0, [3.0, 5.0], free) == 8.0 and free == [3.0, 8.0]
    assert pipeline_times(0.0, [3.0, 5.0], free) == 13.0 and free == [6.0, 13.0]
    # host time delays the first stage: launched at 10 with 0.5 s of host time, stage 0 on [10.5, 13.5],
    # stage 1 on [13.5, 18.5]
    assert pipeline_times(10.0, [3.0, 5.0], free, host_s=0.5) == 18.5


def test_two_stages_two_micro_batches_by_hand():
    # 2 stages of 3 ms and 5 ms (constant), 2 requests at t = 0 of 100 prompt tokens and 2 output tokens,
    # max_num_batched_tokens 100: one prompt per batch, and vLLM's queue holds pp = 2 batches.
    #   t=0   batch A = request 0's prompt: stage 0 [0, 3], stage 1 [3, 8]        → A ends at 8
    #         queue not full: batch B = request 1's prompt (request 0 has nothing left to schedule):
    #         stage 0 [3, 6], stage 1 [8, 13] (waits for A)                       → B ends at 13
    #   t=8   A's output: request 0's first token (TTFT 8 ms); its decode launches: stage 0 [8, 11],
    #         stage 1 waits for B (free at 13): [13, 18]                          → ends at 18
    #   t=13  B's output: request 1's first token (TTFT 13 ms); its decode: stage 0 [13, 16], stage 1 [18, 23]
    #   t=18  request 0's second token: done at 18 (ITL 10 ms); t=23 request 1 done (ITL 10 ms)
    # Completions every 5 ms (the slowest stage) once the pipeline is full; stage 0 idles 2 ms of every 5
    # (the bubble: only 2 batches for a 3 + 5 ms pipeline).
    cost = PipelineCost([StageCost(3000.0), StageCost(5000.0)])
    setup = small_setup(mnbt=100, max_num_seqs=8, cost=cost, caching=False)
    specs = [RequestSpec(0.0, 100, 2), RequestSpec(0.0, 100, 2)]
    res = simulate(setup, specs)
    req = res.requests
    np.testing.assert_allclose(req.column("first_token_t"), [0.008, 0.013], rtol=0, atol=1e-12)
    np.testing.assert_allclose(req.column("finish_t"), [0.018, 0.023], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.itl_values, [0.010, 0.010], rtol=0, atol=1e-12)
    # the source shares count each batch's stage times once: 4 batches × (3 + 5) ms, all roofline (the stand-in's)
    assert res.source_us == {ROOFLINE: pytest.approx(4 * 8000.0)}


def test_one_batch_at_a_time_without_a_second_request():
    # a single request cannot fill the pipeline: each of its batches waits for the last one's output.
    # prompt batch [0, 8], decode 1 [8, 16], decode 2 [16, 24]: first token at 8 ms, done at 24 ms (3 tokens)
    cost = PipelineCost([StageCost(3000.0), StageCost(5000.0)])
    setup = small_setup(mnbt=100, cost=cost, caching=False)
    res = simulate(setup, [RequestSpec(0.0, 100, 3)])
    assert res.requests.column("first_token_t")[0] == pytest.approx(0.008, abs=1e-12)
    assert res.requests.column("finish_t")[0] == pytest.approx(0.024, abs=1e-12)


def test_the_engine_is_used_for_a_pipeline_cost_and_throughput_beats_one_stage_at_a_time():
    # 2 stages each half of an affine cost: with many requests the batches overlap, so the run ends sooner
    # than the same batches one after another (the sum of the stages each time), and every request finishes
    specs = [RequestSpec(0.001 * i, 512, 64) for i in range(40)]
    half = AffineCost(base_us=2500.0, per_token_us=0.025, per_seq_us=1.0, per_ctx_us=0.00025)
    piped = simulate(small_setup(cost=PipelineCost([half, half]), caching=False), specs)
    whole = simulate(small_setup(cost=AffineCost(), caching=False), specs)
    assert piped.requests.completed_mask.all() and whole.requests.completed_mask.all()
    assert np.nanmax(piped.requests.column("finish_t")) < np.nanmax(whole.requests.column("finish_t"))
    loop = run_events(small_setup(cost=PipelineCost([half, half]), caching=False), specs[:2])
    assert [type(e) for e in loop.engines] == [PipelineEngine]


@pytest.mark.parametrize("pp", [2, 4])
def test_preemption_and_prefix_caching_keep_every_request_whole(pp):
    # a KV cache too small for the load: requests in flight get preempted and readmitted; every request still gets
    # exactly its output tokens, in order in time, and every block comes back
    rng = np.random.default_rng(0)
    specs = [RequestSpec(0.002 * i, int(rng.integers(100, 2000)), int(rng.integers(5, 200)),
                         prefix_id="p" if i % 3 == 0 else None, prefix_tokens=64 if i % 3 == 0 else 0)
             for i in range(200)]
    half = AffineCost(base_us=2500.0, per_token_us=0.025, per_seq_us=1.0, per_ctx_us=0.00025)
    setup = small_setup(num_blocks=700, mnbt=1024, max_num_seqs=64, cost=PipelineCost([half] * pp), caching=True)
    loop = run_events(setup, specs)
    (engine,) = loop.engines
    assert isinstance(engine, PipelineEngine)
    assert engine.preemptions > 0  # the case this test is about
    t = loop.table
    assert t.completed_mask.all()
    np.testing.assert_array_equal(t.column("num_output_tokens"), [s.output_tokens for s in specs])
    assert np.all(t.column("first_token_t") >= t.column("arrival"))
    assert np.all(t.column("finish_t") >= t.column("first_token_t"))
    assert engine.pool.used == 0 and not engine.inflight and engine.running.size == 0

"""Scheduler invariants on an affine iteration cost (fast): budgets, KV accounting, no request lost or
duplicated, preempted requests finish, determinism, fast-forward equivalence, Little's law."""

from collections import Counter

import numpy as np
import pytest
from serving_helpers import AffineCost, llama_layout, small_setup

from graphsim.catalog import resolve_model
from graphsim.serving import ClosedLoop, Lengths, kv_layout, parse_lengths, simulate, summarize, synthetic
from graphsim.serving.scheduler import Engine
from graphsim.work import accounting


@pytest.fixture
def checked(monkeypatch):
    """Check the block pool after every planned and applied iteration: used = private + shared, within bounds."""
    calls = Counter()

    def check(e: Engine) -> None:
        n = e.running.size
        held = int(e.running.num_held_blocks[:n].sum())
        shared = sum(r.num_shared_blocks for r in e.running.requests)
        assert e.pool.used == held - shared + len(e.pool.shared_ref)
        assert 0 <= e.pool.used <= e.pool.num_blocks
        assert e.pool.cached_free <= e.pool.free
        assert n <= e.config.max_num_seqs
        calls["checks"] += 1

    start, finish = Engine.start, Engine.finish

    def start_checked(self, t, h):
        out = start(self, t, h)
        check(self)
        return out

    def finish_checked(self):
        out = finish(self)
        check(self)
        return out

    monkeypatch.setattr(Engine, "start", start_checked)
    monkeypatch.setattr(Engine, "finish", finish_checked)
    return calls


def specs(n=600, rate=12.0, seed=1, prefix=0, groups=3, ins="100:2000", outs="20:400"):
    return synthetic(n, rate, parse_lengths(ins, "in"), parse_lengths(outs, "out"), seed=seed, prefix_tokens=prefix,
                     prefix_groups=groups)


@pytest.mark.parametrize("prefix", [0, 1500])
def test_invariants_under_kv_pressure(checked, prefix):
    setup = small_setup(num_blocks=500, max_num_seqs=48, mnbt=1024)
    work = specs(prefix=prefix)
    finished = Counter()
    res = simulate(setup, work, progress=None)
    for r in res.requests:
        finished[r.id] += 1
    it = res.iterations
    # token budget and sequence cap never exceeded; KV never over-allocated
    assert it["tokens"].max() <= 1024 and it["seqs"].max() <= 48
    assert it["kv_used_blocks"].max() <= 500 and it["kv_used_blocks"].min() >= 0
    # no request lost or duplicated: every request finished once, with all its output tokens
    assert len(res.requests) == len(work) and set(finished.values()) == {1}
    assert all(not np.isnan(r.finish_t) and r.num_output_tokens == r.max_tokens for r in res.requests)
    assert sorted(r.id for r in res.completed) == list(range(len(work)))
    # tokens computed = prompt tokens + output tokens − 1 per request, plus recomputation after preemption
    produced = sum(r.max_tokens for r in res.requests)
    assert summarize(res).itl_ms.count == produced - len(work)
    # the pool ran short: requests were preempted, and every preempted request finished
    preempted = [r for r in res.requests if r.preemptions]
    assert res.preemptions > 0 and preempted and all(r.finish_t > r.first_token_t for r in preempted)
    assert checked["checks"] > 100
    for r in res.requests:
        assert r.arrival <= r.admitted_t <= r.first_token_t <= r.finish_t


def test_fast_forward_is_the_same_simulation():
    work = specs(n=400, prefix=1500)
    a = simulate(small_setup(num_blocks=500, mnbt=1024), work)
    b = simulate(small_setup(num_blocks=500, mnbt=1024, fast_forward=False), work)
    for k in a.iterations:
        np.testing.assert_allclose(a.iterations[k], b.iterations[k], rtol=1e-12, err_msg=k)
    assert [r.finish_t for r in a.requests] == pytest.approx([r.finish_t for r in b.requests], rel=1e-12)
    assert a.preemptions == b.preemptions > 0


def test_fixed_seed_gives_identical_output():
    runs = [summarize(simulate(small_setup(num_blocks=800), specs(seed=7, prefix=1000))).to_json() for _ in range(2)]
    for r in runs:
        r.pop("wall_s")
    assert runs[0] == runs[1]
    other = summarize(simulate(small_setup(num_blocks=800), specs(seed=8, prefix=1000))).to_json()
    assert other["e2e_ms"] != runs[0]["e2e_ms"]


def test_littles_law_on_a_steady_run():
    # Poisson arrivals at a load the engine sustains: L observed in the engine queues = λ · W
    work = synthetic(3000, 6.0, Lengths(200, 1200), Lengths(50, 250), seed=3)
    res = simulate(small_setup(num_blocks=4000, mnbt=2048), work)
    s = summarize(res)
    assert s.completed == 3000 and s.preemptions == 0
    assert s.little_l_observed == pytest.approx(s.little_lambda_w, rel=0.03)
    # and the engine kept up: throughput ≈ the offered rate
    assert s.requests_per_s == pytest.approx(6.0, rel=0.1)


def test_chunked_prefill_off_never_splits_a_prompt():
    work = specs(n=200, ins="500:3000")
    res = simulate(small_setup(num_blocks=20000, mnbt=4096, mml=4096, chunked=False), work)
    it = res.iterations
    assert it["tokens"].max() <= 4096 and res.preemptions == 0
    # prompts go in whole: every prefill iteration's tokens are a sum of whole prompts, in arrival order
    prompts = iter(r.num_prompt_tokens for r in sorted(res.requests, key=lambda r: r.admitted_t))
    for pre in it["prefill_tokens"][it["prefill_tokens"] > 0]:
        while pre > 0:
            pre -= next(prompts)
        assert pre == 0
    chunked = simulate(small_setup(num_blocks=20000, mnbt=1024, mml=4096), work).iterations
    assert chunked["tokens"].max() <= 1024  # with chunked prefill the same prompts are split


def test_prefix_caching_hits_shared_prefixes():
    work = specs(n=300, rate=4, prefix=1024, groups=2)
    prefill_heavy = AffineCost(per_token_us=20.0)  # 20 ms per 1,000 prompt tokens
    on = summarize(simulate(small_setup(num_blocks=3000, cost=prefill_heavy), work))
    off = summarize(simulate(small_setup(num_blocks=3000, caching=False, cost=prefill_heavy), work))
    # every request after the first of its prefix group hits the prefix's full blocks, at most
    # (prompt − 1) // 16 of them (vLLM computes at least the last prompt token)
    seen, expect = set(), 0
    for w in work:
        if w.prefix_id in seen:
            expect += min(w.prefix_tokens // 16, (w.input_tokens - 1) // 16) * 16
        seen.add(w.prefix_id)
    assert on.prefix_hit_rate == pytest.approx(expect / sum(w.input_tokens for w in work), rel=0.01)
    assert off.prefix_hit_rate == 0
    assert on.ttft_ms.mean < off.ttft_ms.mean


def test_closed_loop_keeps_concurrency():
    loop = ClosedLoop(8, 200, Lengths(100, 800), Lengths(10, 100), seed=2)
    res = simulate(small_setup(num_blocks=3000), loop)
    it = res.iterations
    assert (it["running"] + it["waiting"]).max() <= 8
    assert len(res.completed) == 200
    # each client's next request arrives when its previous one finishes
    finishes = sorted(r.finish_t for r in res.requests)
    arrivals = sorted(r.arrival for r in res.requests)[8:]
    assert set(np.round(arrivals, 12)) <= set(np.round(finishes, 12))


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding"])
def test_replicas_share_the_load(router, checked):
    work = specs(n=600, rate=20)
    one = summarize(simulate(small_setup(num_blocks=1500), work))
    res = simulate(small_setup(num_blocks=1500, replicas=3, router=router), work)
    three = summarize(res)
    per = Counter(r.replica for r in res.requests)
    assert set(per) == {0, 1, 2} and min(per.values()) > 150
    if router == "round-robin":
        assert sorted(per.values()) == [200, 200, 200]
    assert three.e2e_ms.mean < one.e2e_ms.mean
    assert three.gpus == 3 and three.completed == 600


def test_closed_loop_with_replicas():
    loop = ClosedLoop(12, 150, Lengths(100, 600), Lengths(10, 80), seed=4)
    res = simulate(small_setup(num_blocks=2000, replicas=2, router="least-outstanding"), loop)
    assert len(res.completed) == 150


def test_hybrid_layout_runs_without_prefix_caching(checked):
    acc = accounting(resolve_model("gpt-oss-20b").config)
    lay = kv_layout(acc.spec, acc.precision, 1)
    setup = small_setup(num_blocks=400, layout=lay, mnbt=1024)
    res = simulate(setup, specs(n=200, prefix=1000))
    s = summarize(res)
    assert s.completed == 200 and s.prefix_hit_rate == 0
    assert res.iterations["kv_used_blocks"].max() <= 400


def test_prompts_longer_than_max_model_len_are_rejected():
    work = specs(n=50, ins="100:3000")
    res = simulate(small_setup(num_blocks=2000, mml=2048, mnbt=2048), work)
    s = summarize(res)
    too_long = sum(1 for w in work if w.input_tokens >= 2048)
    assert too_long and s.rejected == too_long and s.completed == 50 - too_long
    # outputs are capped at max_model_len − prompt
    assert all(r.num_prompt_tokens + r.max_tokens <= 2048 for r in res.completed)


def test_gamma_arrivals_are_burstier():
    from graphsim.serving.requests import arrival_times

    rng = np.random.default_rng(0)
    gaps = np.diff(arrival_times(20000, 10.0, rng, "gamma", cv=3.0))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_decode_segments_price_many_iterations_per_call():
    cost = AffineCost()
    res = simulate(small_setup(num_blocks=3000, cost=cost), specs(n=100, rate=2))
    assert len(res.iterations["start_s"]) > 5 * cost.calls


def test_llama_layout_helper_is_the_catalog_model():
    assert llama_layout().bytes_per_token == 131_072

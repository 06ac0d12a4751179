"""The prefix cache one workload leaves to the next on the same engines (blocks.PrefixCache, simulate_after), and
the eviction order of a finished request's own blocks (vLLM's free queue: freed tail first, every block queued).
Expected values are derived by hand in the comments."""

from __future__ import annotations

from dataclasses import replace

import pytest
from serving_helpers import small_setup

from graphsim.serving import simulate, simulate_after
from graphsim.serving.blocks import STALE, BlockPool, PrefixCache
from graphsim.serving.requests import WorkloadSpecError, bench_random
from graphsim.serving.simulator import SimulationError


def test_a_finished_requests_own_blocks_queue_ahead_of_its_prefix():
    # 6 blocks. A request held prefix blocks (p, 0), (p, 1) and 2 blocks of its own; it finishes: its own 2 go to the
    # queue first, then its prefix tail first, so the queue is [own 2, (p, 1), (p, 0)] and 2 blocks were never used.
    pool = BlockPool(6)
    pool.alloc(4)
    assert pool.register(("p", 0)) and pool.register(("p", 1))
    pool.release(2)
    pool.queue_freed(7, 2)
    pool.release_shared(("p", 1))
    pool.release_shared(("p", 0))
    assert pool.used == 0 and pool.cached_free == 4
    # 3 new blocks: the 2 never used, then the oldest queued: one of the request's own (not a prefix block)
    pool.alloc(3)
    assert pool.evicted == 1 and pool.is_cached(("p", 1)) and pool.is_cached(("p", 0))
    # 2 more: the other own block, then (p, 1); (p, 0), freed last, stays
    pool.alloc(2)
    assert pool.evicted == 3 and not pool.is_cached(("p", 1)) and pool.is_cached(("p", 0))


def test_snapshot_hands_the_queue_over_in_order():
    pool = BlockPool(8)
    pool.alloc(5)
    assert pool.register(("a", 0))
    pool.release(4)
    pool.queue_freed(3, 4)  # request 3's own 4 blocks, then its prefix block
    pool.release_shared(("a", 0))
    entries = pool.snapshot()
    # request ids mean nothing to the next workload: the own blocks become an anonymous entry, in place
    assert entries == (((STALE, 0), 4), (("a", 0), 1))
    nxt = BlockPool(8)
    nxt.restore(entries)
    assert nxt.cached_free == 5 and nxt.is_cached(("a", 0)) and nxt.used == 0
    # a smaller pool keeps the most recently freed: 3 blocks = (a, 0) and 2 of the 4 anonymous ones
    small = BlockPool(3)
    small.restore(entries)
    assert small.snapshot() == (((STALE, 0), 2), (("a", 0), 1))
    with pytest.raises(AssertionError):
        nxt.restore(entries)  # not empty any more


def test_bench_random_keys_every_prompt_for_a_later_workload():
    specs = bench_random(3, 40, 4, seed=5, prompt_keys=True)
    assert isinstance(specs, list)
    assert [(s.prefix_id, s.prefix_tokens, s.warm) for s in specs] == [
        ("prompt-5-0", 40, False), ("prompt-5-1", 40, False), ("prompt-5-2", 40, False)]
    with pytest.raises(WorkloadSpecError, match="random-prefix-len"):
        bench_random(3, 40, 4, prefix_len=8, prompt_keys=True)


def test_back_to_back_runs_hit_what_the_first_left():
    # Blocks of 16 tokens. Run A: 3 prompts of 64 tokens (4 blocks each), 16 output tokens, one at a time
    # (--max-concurrency 1). Each request ends with 64 + 15 computed tokens = 79: 5 blocks (4 of its prompt, 1 own).
    # Run B: the same 3 prompts, 1 output token; a hit is at most (64 − 1) // 16 = 3 blocks = 48 tokens.
    a = bench_random(3, 64, 16, max_concurrency=1, prompt_keys=True)
    b = bench_random(3, 64, 1, prompt_keys=True)
    # Pool of 12 blocks. r0 takes 5 never-used blocks, frees them: queue [own0, p0 3, 2, 1, 0]. r1 takes 5 of the 7
    # never used: queue [own0, p0 3..0, own1, p1 3..0]. r2 takes the last 2 never used and evicts the 3 oldest:
    # own0, p0 block 3, p0 block 2. B's prompt 0 finds blocks 0 and 1 (32 tokens), prompts 1 and 2 three blocks each.
    setup = small_setup(num_blocks=12)
    assert simulate_after(setup, [a], b).requests.column("hit_tokens").tolist() == [32, 48, 48]
    # (had the own blocks been reused first, r2 would have taken own0 and evicted only p0 block 3: [48, 48, 48])
    # Pool of 15: A never evicts, every prompt stays: B hits 48 tokens each, sequential or all at once.
    big = small_setup(num_blocks=15)
    assert simulate_after(big, [a], b).requests.column("hit_tokens").tolist() == [48, 48, 48]
    at_once = bench_random(3, 64, 16, prompt_keys=True)
    assert simulate_after(big, [at_once], b).requests.column("hit_tokens").tolist() == [48, 48, 48]
    # No earlier workload: nothing cached; another seed: other prompts, nothing hit
    assert simulate_after(big, [], b).requests.column("hit_tokens").tolist() == [0, 0, 0]
    other = bench_random(3, 64, 1, seed=1, prompt_keys=True)
    assert simulate_after(big, [at_once], other).requests.column("hit_tokens").tolist() == [0, 0, 0]
    # the state is the result's: simulate() from A's prefix_cache is the same run as simulate_after
    left = simulate(big, at_once).prefix_cache
    assert isinstance(left, PrefixCache) and left.blocks() == 15 and len(left.shared_keys()) == 12
    again = simulate(replace(big, prefix_cache=left), b)
    assert again.requests.column("hit_tokens").tolist() == [48, 48, 48]


def test_a_prefix_cache_of_other_engines_is_refused():
    two = small_setup(num_blocks=15, replicas=2)
    one_engine = simulate(small_setup(num_blocks=15), bench_random(1, 32, 2, prompt_keys=True)).prefix_cache
    with pytest.raises(SimulationError, match="2 replicas"):
        simulate(replace(two, prefix_cache=one_engine), bench_random(1, 32, 2))

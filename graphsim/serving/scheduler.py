"""One vLLM V1-like engine: continuous batching with chunked prefill, block allocation with admission
and preemption (recompute), prefix caching on full blocks.

Follows vLLM 0.33.0 `Scheduler.schedule` (vllm/v1/core/sched/scheduler.py), FCFS:

1. Running requests, in admission order, each get `min(num_tokens − num_computed_tokens, budget)`
   new tokens until the token budget (`max_num_batched_tokens`) is spent. Slots are allocated in
   that order; when the pool is short, the last running request is preempted (blocks freed,
   computed tokens reset to 0, put at the front of the waiting queue) until the allocation fits or
   the request itself was preempted.
2. Only if nothing was preempted: waiting requests, in order, while budget is left and fewer than
   `max_num_seqs` run. A request's prefix-cache hit (full blocks, at most num_tokens − 1 tokens)
   counts as computed; it is admitted only if the blocks for its whole current sequence fit
   (`scheduler_reserve_full_isl`), and gets a chunk of `min(remaining, budget)` tokens (without
   chunked prefill it must fit whole). The first request that does not fit stops admission.
3. After the iteration, a request whose computed tokens reach its token count samples one token
   (the first one ends its prefill: TTFT); it finishes when it has its output tokens.

Engine strategies (`EngineProfile`, engine_versions.py / engines.py cite the sources): SGLang runs a step with
prefill work (waiting prompts, or the chunked one in progress) without decodes (`prefill_priority`), and admits a
prompt only when its clipped output and the running requests' estimated growth (`new_token_ratio`, decaying)
fit (`admission` "sglang"); TensorRT-LLM's GUARANTEED_NO_EVICT admits a request only when the blocks for its prompt
and all its output fit besides what every running request will still need (`admission` "no-evict").

The running set lives in numpy arrays, so an iteration costs a few vectorised operations whatever
the batch. Iterations in which every running request decodes one token and nothing else can change
(no arrival, no completion, the waiting queue blocked, enough free blocks) are run as one segment of
k iterations, priced in one call (`IterationCost.decode_run_us`) — the same iterations one at a time
would produce.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graphsim.serving.blocks import BlockPool
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.host import EngineHost
from graphsim.serving.kv_layout import KvLayout
from graphsim.serving.pricing import IterationCost, SourceMeter
from graphsim.serving.records import IterationLog, Request, Samples, TokenGaps
from graphsim.serving.speculative import SpecState

MAX_SEGMENT_ITERATIONS = 2048  # longest decode segment priced in one call


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One iteration: `num_scheduled_tokens[i]` new tokens for the i-th running request."""

    start_t: float
    end_t: float
    num_scheduled_tokens: np.ndarray
    source: int


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """`num_iterations` decode-only iterations in a row, every running request one token each."""

    start_t: float
    end_t: float
    num_iterations: int
    durations_s: np.ndarray


class RunningBatch:
    """The running requests in admission order. While a request runs its counters live here, in numpy
    arrays (the first `size` entries), and go back to its `Request` when it leaves (`sync`)."""

    COUNTERS = ("num_computed_tokens", "num_tokens", "num_output_tokens", "max_tokens", "num_held_blocks")

    def __init__(self, capacity: int) -> None:
        self.num_computed_tokens = np.zeros(capacity, dtype=np.int64)
        self.num_tokens = np.zeros(capacity, dtype=np.int64)
        self.num_output_tokens = np.zeros(capacity, dtype=np.int64)
        self.max_tokens = np.zeros(capacity, dtype=np.int64)
        self.num_held_blocks = np.zeros(capacity, dtype=np.int64)
        self.last_token_t = np.zeros(capacity)
        self.requests: list[Request] = []
        self.size = 0

    def append(self, r: Request) -> int:
        i = self.size
        for name in self.COUNTERS:
            getattr(self, name)[i] = getattr(r, name)
        self.last_token_t[i] = r.last_token_t
        self.requests.append(r)
        self.size += 1
        return i

    def sync(self, i: int) -> Request:
        """The i-th running request with its counters written back."""
        r = self.requests[i]
        for name in self.COUNTERS:
            setattr(r, name, int(getattr(self, name)[i]))
        r.last_token_t = float(self.last_token_t[i])
        return r

    def keep(self, keep: np.ndarray) -> None:
        """Keep the requests where `keep` is true, in order."""
        n = self.size
        m = int(keep.sum())
        for name in self.COUNTERS:
            arr = getattr(self, name)
            arr[:m] = arr[:n][keep]
        self.last_token_t[:m] = self.last_token_t[:n][keep]
        self.requests = [r for r, k in zip(self.requests, keep, strict=True) if k]
        self.size = m

    def pop(self) -> Request:
        """Remove the last running request, its counters written back."""
        r = self.sync(self.size - 1)
        self.requests.pop()
        self.size -= 1
        return r


class Engine:
    """One replica. `start(t, horizon)` plans the next iteration (or decode segment) and returns its end
    time (None when idle); `finish()` applies it at that time and calls `on_finish` for each request done."""

    def __init__(self, index: int, config: EngineConfig, layout: KvLayout, num_blocks: int, cost: IterationCost,
                 log: IterationLog, itl: Samples, on_finish: Callable[[Request], None]) -> None:
        self.index, self.config, self.layout, self.cost = index, config, layout, cost
        self.block_size = layout.block_size
        self.prefix_caching = config.enable_prefix_caching and layout.prefix_cacheable
        self.pool = BlockPool(num_blocks, self.prefix_caching)
        self.log, self.itl, self.on_finish = log, itl, on_finish
        self.gaps: TokenGaps | None = None  # with API servers: the gaps as engine times (records.py)
        self.waiting: deque[Request] = deque()
        self.running = RunningBatch(config.max_num_seqs)
        self.busy_until: float | None = None
        self.plan: StepPlan | SegmentPlan | None = None
        self.now_t = 0.0
        self.iterations = 0
        self.preemptions = 0
        self.registering: dict[int, Request] = {}  # insertion-ordered: deterministic
        self.fast_forward = True
        self.source_counts: dict[int, int] = {}
        self.meter: SourceMeter | None = None  # per-source shares of the committed iteration times (simulator sets it)
        self.host: EngineHost | None = None  # host time added to each iteration's GPU time (None: kernels only)
        self.chunks = 0  # requests that got tokens in the last single iteration applied (finish)
        self.admission = config.profile.admission  # "vllm" | "sglang" | "no-evict"
        self.decode_steps = 0  # SGLang: decode steps since the new-token ratio was reset
        self.spec: SpecState | None = None  # speculative decoding (speculative.py; the simulator sets it)

    # --- bookkeeping ---------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self.running.size + len(self.waiting)

    def has_work(self) -> bool:
        return self.running.size > 0 or bool(self.waiting)

    def add(self, r: Request) -> None:
        r.replica = self.index
        self.waiting.append(r)

    def _free_blocks(self, r: Request, preempt: bool) -> None:
        # vLLM frees a request's blocks tail first (SingleTypeKVCacheManager.free), each to the free queue's tail:
        # its own blocks queue ahead of its shared prefix's, whose head is freed last (blocks.py)
        pool = self.pool
        private = r.num_held_blocks - r.num_shared_blocks
        pool.release(private)
        if preempt and self.prefix_caching:
            full = r.num_computed_tokens // self.block_size - r.num_shared_blocks
            pool.cache_run(r.id, r.num_shared_blocks, min(full, private))
        elif self.prefix_caching:
            pool.queue_freed(r.id, private)
        for i in reversed(range(r.num_shared_blocks)):
            pool.release_shared((r.prefix_id, i))
        r.num_shared_blocks = 0
        r.num_held_blocks = 0
        self.registering.pop(r.id, None)

    def _preempt_last(self) -> Request:
        self.decode_steps = 0  # SGLang resets its new-token ratio on a retraction (simplified: to the init value)
        r = self.running.pop()
        self._free_blocks(r, preempt=True)
        r.num_computed_tokens = 0
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)
        return r

    # --- admission ---------------------------------------------------------------------------------
    def _prefix_hits(self, r: Request) -> tuple[int, int, int, int]:
        """(hit blocks, of which shared, of which currently evictable, blocks hit in its own cached run)."""
        if not self.prefix_caching:
            return 0, 0, 0, 0
        block_size, pool = self.block_size, self.pool
        max_hit = (r.num_tokens - 1) // block_size
        prefix_blocks = min(r.prefix_tokens // block_size, max_hit) if r.prefix_id is not None else 0
        hits = evictable = 0
        while hits < prefix_blocks:
            key = (r.prefix_id, hits)
            if key in pool.shared_ref:
                hits += 1
            elif pool.is_evictable(key):
                hits += 1
                evictable += 1
            else:
                break
        shared = hits
        run = pool.run(r.id)
        run_hits = 0
        if run is not None and run[0] <= hits < run[0] + run[1]:
            run_hits = min(run[0] + run[1], max_hit) - hits
            evictable += run_hits
            hits += run_hits
        return hits, shared, evictable, run_hits

    def _blocks_to_admit(self, r: Request, hits: int, evictable: int, upto: int | None = None) -> int:
        """Free blocks the head of the queue needs to be admitted: its whole current sequence
        (`scheduler_reserve_full_isl`, vLLM 0.20+) or, before, the tokens up to `upto` (computed + this chunk);
        V0 also keeps `watermark` of the blocks free (BlockSpaceManager.can_allocate)."""
        config = self.config
        tokens = min(r.num_tokens if config.reserve_full_isl or upto is None else upto, config.max_model_len)
        need = self.layout.admission_blocks(tokens, config.max_in_flight_tokens) - hits + evictable
        if self.admission != "vllm":
            need += self._engine_reserve(r, tokens)
        return need + int(config.watermark * self.pool.num_blocks)

    def _engine_reserve(self, r: Request, tokens: int) -> int:
        """Blocks beyond the current sequence that SGLang / TensorRT-LLM hold back before admitting `r`."""
        from graphsim.serving.engines import SGLANG_CLIP_MAX_NEW_TOKENS, sglang_new_token_ratio

        bs, n, running = self.block_size, self.running.size, self.running
        remaining_out = running.max_tokens[:n] - running.num_output_tokens[:n]
        if self.admission == "sglang":  # PrefillAdder.add_one_req / rem_total_tokens (+ page_size)
            own = min(r.max_tokens - r.num_output_tokens, SGLANG_CLIP_MAX_NEW_TOKENS) + bs
            others = float(np.minimum(remaining_out, SGLANG_CLIP_MAX_NEW_TOKENS).sum()) \
                * sglang_new_token_ratio(self.decode_steps)
            return -(-(own + int(others)) // bs)
        # no-evict: r's whole output, and what the running requests still need to finish
        final = self.layout.admission_blocks(min(r.num_prompt_tokens + r.max_tokens, self.config.max_model_len),
                                             self.config.max_in_flight_tokens)
        own = max(0, final - self.layout.admission_blocks(tokens, self.config.max_in_flight_tokens))
        ends = np.minimum(running.num_tokens[:n] + remaining_out, self.config.max_model_len)
        others = int(np.maximum(-(-ends // bs) - running.num_held_blocks[:n], 0).sum())
        return own + others

    def _admit(self, token_budget: int) -> tuple[Request, int, int] | None:
        """Try the head of the waiting queue; returns (request, running index, scheduled tokens) or None."""
        r = self.waiting[0]
        hits, shared, evictable, run_hits = self._prefix_hits(r)
        computed = hits * self.block_size
        new = r.num_tokens - computed
        # TensorRT-LLM refuses a prompt longer than max_num_tokens without chunked prefill; graphsim chunks it
        # instead of stalling the queue (docs/engines.md)
        never_fits = self.admission == "no-evict" and new > self.config.max_num_batched_tokens
        if not self.config.enable_chunked_prefill and new > token_budget and not never_fits:
            return None
        new = min(new, token_budget)
        if self._blocks_to_admit(r, hits, evictable, computed + new) > self.pool.free:
            return None
        self.waiting.popleft()
        pool = self.pool
        for i in range(shared):
            pool.acquire((r.prefix_id, i))
        if run_hits:
            pool.take_run(r.id, run_hits)
        elif pool.run(r.id) is not None:  # a run that cannot be used any more
            pool.take_run(r.id, 0)
        r.num_shared_blocks, r.num_held_blocks, r.num_computed_tokens = shared, hits, computed
        if r.hit_tokens < 0:
            r.hit_tokens = computed
        held = self.layout.held_blocks_one(computed, new)
        pool.alloc(held - r.num_held_blocks)
        r.num_held_blocks = held
        if np.isnan(r.admitted_t):
            r.admitted_t = self.now_t
        if r.prefix_id is not None and r.num_shared_blocks < r.prefix_tokens // self.block_size:
            self.registering[r.id] = r
        return r, self.running.append(r), new

    # --- planning ----------------------------------------------------------------------------------
    def start(self, t: float, horizon: float) -> float | None:
        """Plan the iteration starting at t (a decode segment may run up to the first iteration that
        starts at or after `horizon`). Returns its end time, or None if there is nothing to run."""
        self.now_t = t
        config, running, pool = self.config, self.running, self.pool
        token_budget = config.max_num_batched_tokens
        preempted = admitted = 0
        n = running.size
        all_decode = False
        first = self._prefill_first(token_budget) if config.prefill_first and self.waiting else None
        if first is None and config.profile.prefill_priority:  # SGLang: a prefill batch runs alone
            first = self._prefill_priority(token_budget)
            if first is None:
                self.decode_steps += 1 if n else 0
        if first is not None:  # V0 / SGLang: this step runs the admitted prompts (and SGLang's chunk) only
            scheduled, admitted = first, running.size - n
        elif n:
            computed, held = running.num_computed_tokens[:n], running.num_held_blocks[:n]
            remaining = running.num_tokens[:n] - computed
            if self.spec is not None:  # decoding requests carry their k drafts
                remaining = self.spec.with_drafts(remaining, running.num_output_tokens[:n])
            total = int(remaining.sum())
            if total <= token_budget:  # everyone gets all it needs
                scheduled = remaining
                new_held = self.layout.held_blocks(computed, self._slots(scheduled))
                all_decode = total == n
            else:
                scheduled = np.minimum(remaining, np.maximum(token_budget - (np.cumsum(remaining) - remaining), 0))
                new_held = np.where(scheduled > 0, self.layout.held_blocks(computed, self._slots(scheduled)), held)
            delta = new_held - held
            grow = int(delta.sum())
            if grow > pool.free:
                scheduled, preempted = self._allocate_with_preemption(scheduled, new_held)
                all_decode = False
            else:
                if self.layout.hybrid:
                    pool.release(int(-delta[delta < 0].sum()))
                    pool.alloc(int(delta[delta > 0].sum()))
                else:
                    pool.alloc(grow)
                held[:] = new_held
        else:
            scheduled = np.zeros(0, dtype=np.int64)
        if first is None and not preempted and self.waiting and not config.profile.prefill_priority:
            left = token_budget - int(scheduled.sum())
            added = []
            while left > 0 and self.waiting and running.size < config.max_num_seqs:
                got = self._admit(left)
                if got is None:
                    break
                added.append(got[2])
                left -= got[2]
                admitted += 1
            if added:
                scheduled = np.concatenate([scheduled[: running.size - admitted], np.asarray(added, dtype=np.int64)])
        n = running.size
        if n == 0 or not scheduled.any():
            if preempted:
                return self.start(t, horizon)  # everything was preempted: admit from the queue now
            self.decode_steps = 0  # idle: SGLang resets its new-token ratio
            self.plan = None
            self.busy_until = None
            return None
        computed = running.num_computed_tokens[:n]
        if all_decode and not admitted:
            # a decode segment: every running request decodes, nothing else can change
            if (self.fast_forward and not self.registering and int(running.num_output_tokens[:n].min()) >= 1
                    and self._waiting_blocked()):
                k, times_us, gpu_us, sources, held_per_iteration = self._segment_length(t, horizon)
                if k > 1:
                    return self._plan_segment(t, k, times_us, gpu_us, sources, held_per_iteration)
            num_decodes, decode_context_mean, chunks, prefill_tokens = n, float(computed.sum()) / n, [], 0
        else:
            decodes = scheduled == 1 if self.spec is None else self.spec.verifying(scheduled, running.num_output_tokens[:n])
            num_decodes = int(decodes.sum())
            decode_context_mean = float(computed[decodes].sum()) / num_decodes if num_decodes else 0.0
            chunked = (scheduled > 0) & ~decodes
            chunks = list(zip(scheduled[chunked].tolist(), computed[chunked].tolist(), strict=True))
            prefill_tokens = int(scheduled[chunked].sum())
        tokens, seqs = int(scheduled.sum()), int(np.count_nonzero(scheduled))
        gpu_us, source = self.cost.step_us(tokens, seqs, num_decodes, decode_context_mean, chunks)
        duration_us = self.host.iteration_us(gpu_us, tokens, seqs) if self.host is not None else gpu_us
        duration_s = duration_us * 1e-6
        end = t + duration_s
        self.plan = StepPlan(t, end, scheduled, source)
        self.log.row(t, duration_s, tokens, seqs, prefill_tokens, num_decodes, n, len(self.waiting), pool.used,
                     preempted, source, self.index, (duration_us - gpu_us) * 1e-6)
        self.iterations += 1
        self.source_counts[source] = self.source_counts.get(source, 0) + 1
        if self.meter is not None:
            self.meter.step(gpu_us, source, tokens, seqs, num_decodes, decode_context_mean, chunks)
        self.busy_until = end
        return end

    def _slots(self, scheduled: np.ndarray) -> np.ndarray:
        """Tokens to allocate KV slots for: with speculative decoding, verifying requests add vLLM's lookahead."""
        if self.spec is None:
            return scheduled
        return self.spec.slots(scheduled, self.running.num_output_tokens[: len(scheduled)])

    def _prefill_first(self, token_budget: int) -> np.ndarray | None:
        """V0's default policy (`Scheduler._schedule_default`, vllm/core/scheduler.py 0.6.3): admit waiting prompts,
        whole, within the token budget; if any was admitted the step runs them alone (the running requests do not
        decode). Returns the step's scheduled tokens (0 for the running requests), or None when none was admitted."""
        n0, left, added = self.running.size, token_budget, []
        while left > 0 and self.waiting and self.running.size < self.config.max_num_seqs:
            got = self._admit(left)
            if got is None:
                break
            added.append(got[2])
            left -= got[2]
        if not added:
            return None
        return np.concatenate([np.zeros(n0, dtype=np.int64), np.asarray(added, dtype=np.int64)])

    def _prefill_priority(self, token_budget: int) -> np.ndarray | None:
        """SGLang's `get_next_batch_to_run` (managers/scheduler.py, 0.5.14, enable_mixed_chunk off): the chunked
        request in progress continues and waiting prompts are admitted (chunked) within `chunked_prefill_size`
        tokens; if any prefill work was scheduled, the step runs it without decodes. Returns the step's scheduled
        tokens (0 for the decoding requests), or None for a decode step."""
        running, pool = self.running, self.pool
        n0 = running.size
        computed, held = running.num_computed_tokens[:n0], running.num_held_blocks[:n0]
        remaining = running.num_tokens[:n0] - computed
        scheduled = np.zeros(n0, dtype=np.int64)
        left = token_budget
        for i in np.flatnonzero(remaining > 1):  # prompts still being prefilled (the chunked request)
            if left <= 0:
                break
            take = int(min(remaining[i], left))
            grow = int(self.layout.held_blocks_one(int(computed[i]), take)) - int(held[i])
            if grow > pool.free:
                break
            pool.alloc(grow)
            held[i] += grow
            scheduled[i] = take
            left -= take
        added = []
        while left > 0 and self.waiting and running.size < self.config.max_num_seqs:
            got = self._admit(left)
            if got is None:
                break
            added.append(got[2])
            left -= got[2]
        if not added and not scheduled.any():
            return None
        return np.concatenate([scheduled, np.asarray(added, dtype=np.int64)])

    def _allocate_with_preemption(self, scheduled: np.ndarray, new_held: np.ndarray) -> tuple[np.ndarray, int]:
        """Allocate in running order; when short, preempt the last running request (vLLM FCFS)."""
        running, pool = self.running, self.pool
        held = running.num_held_blocks
        preempted = 0
        i = 0
        while i < running.size:
            if scheduled[i] > 0:
                need = int(new_held[i] - held[i])
                while need > pool.free and running.size > i:
                    self._preempt_last()
                    preempted += 1
                if running.size <= i:  # request i itself was preempted
                    break
                if need >= 0:
                    pool.alloc(need)
                else:
                    pool.release(-need)
                held[i] = new_held[i]
            i += 1
        return scheduled[: running.size].copy(), preempted

    def _waiting_blocked(self) -> bool:
        """True if no waiting request can be admitted in the coming decode-only iterations."""
        if not self.waiting:
            return True
        if self.layout.hybrid or self.admission == "sglang":
            # sliding windows free blocks as they slide; SGLang's reserve shrinks as outputs grow and its ratio
            # decays: re-check every iteration
            return False
        n = self.running.size
        if n >= self.config.max_num_seqs or self.config.max_num_batched_tokens - n <= 0:
            return True
        r = self.waiting[0]
        hits, _, evictable, _ = self._prefix_hits(r)
        chunk = min(r.num_tokens - hits * self.block_size, self.config.max_num_batched_tokens - n)
        # free blocks only shrink while decoding
        return self._blocks_to_admit(r, hits, evictable, hits * self.block_size + chunk) > self.pool.free

    def _segment_blocks(self, k: int) -> np.ndarray:
        """Blocks the running requests hold during each of k decode iterations (iteration j allocates
        slots up to token num_computed_tokens + j); entry 0 is what they hold now."""
        running = self.running
        n = running.size
        computed = running.num_computed_tokens[:n]
        block_size = self.layout.single_block_size
        held0 = int(running.num_held_blocks[:n].sum())
        if block_size:  # a request needs a new block at iteration j when (computed + j) % block_size == 0
            per_offset = np.bincount((-computed) % block_size, minlength=block_size)
            new_blocks = per_offset[np.arange(1, k) % block_size]
            return held0 + np.concatenate([[0], np.cumsum(new_blocks)])
        steps = computed[:, None] + np.arange(k, dtype=np.int64)[None, :]
        return self.layout.held_blocks(steps, np.ones_like(steps)).sum(axis=0)

    def _segment_length(self, t: float, horizon: float) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(iterations, their times with host time, their GPU times, sources, blocks held per iteration)."""
        running = self.running
        n = running.size
        k = int(min(int((running.max_tokens[:n] - running.num_output_tokens[:n]).min()), MAX_SEGMENT_ITERATIONS))
        if not self.layout.single_block_size:
            k = min(k, max(2, 200_000 // n))
        if k <= 1:
            return 1, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
        context_mean0 = float(running.num_computed_tokens[:n].sum()) / n
        first = min(k, 32)  # price a few first: the next arrival usually comes sooner
        gpu_us, sources = self.cost.decode_run_us(n, context_mean0, first)
        times_us = self.host.iteration_us(gpu_us, n, n) if self.host is not None else gpu_us
        ends = t + np.cumsum(times_us) * 1e-6
        if ends[-1] < horizon and first < k:
            gpu_us, sources = self.cost.decode_run_us(n, context_mean0, k)
            times_us = self.host.iteration_us(gpu_us, n, n) if self.host is not None else gpu_us
            ends = t + np.cumsum(times_us) * 1e-6
        k = min(len(times_us), 1 + int(np.searchsorted(ends[:-1], horizon, side="left")))
        held = self._segment_blocks(k)
        grow = held - held[0]
        if grow[-1] > self.pool.free:  # stop before the first iteration that would need preemption
            k = int(np.searchsorted(grow, self.pool.free, side="right"))
        return k, times_us[:k], gpu_us[:k], sources[:k], held[:k]

    def _plan_segment(self, t: float, k: int, times_us: np.ndarray, gpu_us: np.ndarray, sources: np.ndarray,
                      held_per_iteration: np.ndarray) -> float:
        running = self.running
        n = running.size
        durations_s = times_us * 1e-6
        ends = t + np.cumsum(durations_s)
        starts = np.empty(k)
        starts[0] = t
        starts[1:] = ends[:-1]
        end = float(ends[-1])
        computed, held = running.num_computed_tokens[:n], running.num_held_blocks[:n]
        if self.meter is not None:
            self.meter.run(gpu_us, sources, n, float(computed.sum()) / n)
        kv_used = self.pool.used + held_per_iteration - held_per_iteration[0]
        last_held = self.layout.held_blocks(computed + k - 1, 1)
        extra = int(held_per_iteration[-1] - held_per_iteration[0])
        if extra > 0:
            self.pool.alloc(extra)
        elif extra < 0:
            self.pool.release(-extra)
        held[:] = last_held
        self.plan = SegmentPlan(t, end, k, durations_s)
        self.log.block(starts, durations_s, n, n, 0, n, n, len(self.waiting), kv_used, 0, sources, self.index,
                       (times_us - gpu_us) * 1e-6)
        self.iterations += k
        self.decode_steps += k
        lo, hi = int(sources.min()), int(sources.max())
        if lo == hi:
            self.source_counts[lo] = self.source_counts.get(lo, 0) + k
        else:
            for code in range(lo, hi + 1):
                self.source_counts[code] = self.source_counts.get(code, 0) + int((sources == code).sum())
        self.busy_until = end
        return end

    # --- applying ------------------------------------------------------------------------------
    def finish(self) -> list[Request]:
        """Apply the planned iteration (or segment) at its end time; returns finished requests."""
        plan, self.plan = self.plan, None
        self.busy_until = None
        if plan is None:
            return []
        running, end = self.running, plan.end_t
        n = running.size
        computed, num_tokens = running.num_computed_tokens[:n], running.num_tokens[:n]
        num_output_tokens, max_tokens = running.num_output_tokens[:n], running.max_tokens[:n]
        last_token_t = running.last_token_t[:n]
        if isinstance(plan, SegmentPlan):
            k, durations_s = plan.num_iterations, plan.durations_s
            self.itl.add(plan.start_t + durations_s[0] - last_token_t)
            if k > 1:
                self.itl.add(durations_s[1:], n)
            if self.gaps is not None:
                ends = plan.start_t + np.cumsum(durations_s)
                self.gaps.add(self.index, last_token_t, float(ends[0]))
                self.gaps.add(self.index, ends[:-1], ends[1:], n)
            computed += k
            num_tokens += k
            num_output_tokens += k
            last_token_t[:] = end
            done = num_output_tokens >= max_tokens
        else:
            computed += plan.num_scheduled_tokens
            extra = self.spec.settle(computed, num_tokens, num_output_tokens, max_tokens) if self.spec else None
            produced = computed == num_tokens  # all it needed is computed (unscheduled requests still need ≥ 1)
            num_tokens[produced] += 1
            num_output_tokens[produced] += 1
            if extra is not None:  # accepted drafts are emitted with the target's token
                computed += extra
                num_tokens += extra
                num_output_tokens += extra
            gaps = last_token_t[produced]
            fresh = np.isnan(gaps)  # first tokens: TTFT, not ITL
            if fresh.all():
                pass
            elif fresh.any():
                self.itl.add(end - gaps[~fresh])
            else:
                self.itl.add(end - gaps)
            if self.gaps is not None:
                self.gaps.add(self.index, gaps[~fresh], end)
            if fresh.any():
                for i in np.flatnonzero(produced)[fresh]:
                    running.requests[i].first_token_t = end
            last_token_t[produced] = end
            self.chunks = int(np.count_nonzero(produced))  # stream chunks this iteration (api_server.py)
            if self.registering:
                self._register()
            done = produced & (num_output_tokens >= max_tokens)
        return self._finish(running, done, end)

    def _finish(self, running: RunningBatch, done: np.ndarray, end: float) -> list[Request]:
        """The running requests marked in `done` (a mask) finish at `end`: blocks freed, out of the batch,
        `on_finish` called for each; they are returned."""
        finished: list[Request] = []
        if done.any():
            for i in np.flatnonzero(done):
                r = running.sync(int(i))
                r.finish_t = end
                self._free_blocks(r, preempt=False)
                finished.append(r)
            running.keep(~done)
        for r in finished:
            self.on_finish(r)
        return finished

    def _register(self) -> None:
        """Full prefix blocks just computed become shared cached blocks (vLLM caches full blocks)."""
        index = {id(r): i for i, r in enumerate(self.running.requests)}
        for r in list(self.registering.values()):
            i = index.get(id(r))
            if i is None:
                self.registering.pop(r.id, None)
                continue
            computed = int(self.running.num_computed_tokens[i])
            upto = min(computed, r.prefix_tokens) // self.block_size
            while r.num_shared_blocks < upto and self.pool.register((r.prefix_id, r.num_shared_blocks)):
                r.num_shared_blocks += 1
            if r.num_shared_blocks < upto or r.num_shared_blocks >= r.prefix_tokens // self.block_size:
                self.registering.pop(r.id, None)


class DecodeEngine(Engine):
    """A decode instance of a disaggregated deployment: requests arrive with their prompt's KV (all but the
    last token) in place; prefix caching is the prefill side's business."""

    def __init__(self, index: int, config: EngineConfig, layout: KvLayout, num_blocks: int, cost: IterationCost,
                 log: IterationLog, itl: Samples, on_finish: Callable[[Request], None]) -> None:
        super().__init__(index, config, layout, num_blocks, cost, log, itl, on_finish)
        self.prefix_caching = False
        self.pool = BlockPool(num_blocks, False)
        self.transferred: dict[int, int] = {}  # request id → tokens whose KV arrived

    def receive(self, r: Request) -> None:
        self.transferred[r.id] = r.num_prompt_tokens - 1
        self.add(r)

    def _admit(self, token_budget: int) -> tuple[Request, int, int] | None:
        r = self.waiting[0]
        computed = self.transferred.get(r.id, 0)
        new = r.num_tokens - computed
        if not self.config.enable_chunked_prefill and new > token_budget:
            return None
        new = min(new, token_budget)
        if self._blocks_to_admit(r, 0, 0) > self.pool.free:
            return None
        self.waiting.popleft()
        self.transferred.pop(r.id, None)  # once admitted, a preemption recomputes locally
        r.num_shared_blocks, r.num_computed_tokens = 0, computed
        r.hit_tokens = max(r.hit_tokens, 0)  # transferred KV is not a prefix-cache hit
        r.num_held_blocks = self.layout.held_blocks_one(computed, new)
        self.pool.alloc(r.num_held_blocks)
        if np.isnan(r.admitted_t):
            r.admitted_t = self.now_t
        return r, self.running.append(r), new

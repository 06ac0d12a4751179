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

The running set lives in numpy arrays, so an iteration costs a few vectorised operations whatever
the batch. Iterations in which every running request decodes one token and nothing else can change
(no arrival, no completion, the waiting queue blocked, enough free blocks) are run as one segment of
k iterations, priced in one call (`IterationCost.decode_run_us`) — the same iterations one at a time
would produce.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from graphsim.serving.blocks import BlockPool
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.kv_layout import KvLayout
from graphsim.serving.pricing import IterationCost
from graphsim.serving.records import IterationLog, Request, Samples

SEGMENT_CAP = 2048  # longest decode segment priced in one call


_FIELDS = ("comp", "ntok", "outc", "maxo", "held")


class Engine:
    """One replica. `start(t, horizon)` plans the next iteration (or decode segment) and returns its end
    time (None when idle); `finish()` applies it at that time."""

    def __init__(self, index: int, cfg: EngineConfig, layout: KvLayout, num_blocks: int, cost: IterationCost,
                 log: IterationLog, itl: Samples, on_finish) -> None:
        self.index, self.cfg, self.layout, self.cost = index, cfg, layout, cost
        self.bs = layout.block_size
        self.caching = cfg.enable_prefix_caching and layout.prefix_cacheable
        self.pool = BlockPool(num_blocks, self.caching)
        self.log, self.itl, self.on_finish = log, itl, on_finish
        self.waiting: deque[Request] = deque()
        cap = cfg.max_num_seqs
        self.a = {k: np.zeros(cap, dtype=np.int64) for k in _FIELDS}
        self.last_t = np.zeros(cap)
        self.reqs: list[Request] = []
        self.n = 0
        self.busy_until: float | None = None
        self._plan: dict | None = None
        self.iterations = 0
        self.preemptions = 0
        self.registering: dict[int, Request] = {}  # insertion-ordered: deterministic
        self.fast_forward = True
        self.source_counts: dict[int, int] = {}

    # --- bookkeeping ---------------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self.n + len(self.waiting)

    def has_work(self) -> bool:
        return self.n > 0 or bool(self.waiting)

    def add(self, r: Request) -> None:
        r.replica = self.index
        self.waiting.append(r)

    def _append(self, r: Request) -> int:
        i = self.n
        for k in _FIELDS:
            self.a[k][i] = getattr(r, k)
        self.last_t[i] = r.last_t
        self.reqs.append(r)
        self.n += 1
        return i

    def _sync(self, i: int) -> Request:
        r = self.reqs[i]
        for k in _FIELDS:
            setattr(r, k, int(self.a[k][i]))
        r.last_t = float(self.last_t[i])
        return r

    def _compact(self, keep: np.ndarray) -> None:
        n = self.n
        m = int(keep.sum())
        for k in _FIELDS:
            arr = self.a[k]
            arr[:m] = arr[:n][keep]
        self.last_t[:m] = self.last_t[:n][keep]
        self.reqs = [r for r, k in zip(self.reqs, keep) if k]
        self.n = m

    def _free(self, r: Request, preempt: bool) -> None:
        pool = self.pool
        for i in reversed(range(r.nshared)):
            pool.release_shared((r.pid, i))
        private = r.held - r.nshared
        pool.release(private)
        if preempt and self.caching:
            full = r.comp // self.bs - r.nshared
            pool.cache_run(r.id, r.nshared, min(full, private))
        r.nshared = 0
        r.held = 0
        self.registering.pop(r.id, None)

    def _preempt_last(self, t: float) -> Request:
        i = self.n - 1
        r = self._sync(i)
        self._free(r, preempt=True)
        r.comp = 0
        r.preemptions += 1
        self.preemptions += 1
        self.reqs.pop()
        self.n -= 1
        self.waiting.appendleft(r)
        return r

    # --- admission ---------------------------------------------------------------------------------
    def _hits(self, r: Request) -> tuple[int, int, int, int]:
        """(hit blocks, of which shared, of which currently evictable, run blocks)."""
        if not self.caching:
            return 0, 0, 0, 0
        bs, pool = self.bs, self.pool
        max_hit = (r.ntok - 1) // bs
        npref = min(r.plen // bs, max_hit) if r.pid is not None else 0
        hits = evict = 0
        while hits < npref:
            key = (r.pid, hits)
            if key in pool.shared_ref:
                hits += 1
            elif pool.is_evictable(key):
                hits += 1
                evict += 1
            else:
                break
        shared = hits
        run = pool.run(r.id)
        run_hit = 0
        if run is not None and run[0] <= hits < run[0] + run[1]:
            run_hit = min(run[0] + run[1], max_hit) - hits
            evict += run_hit
            hits += run_hit
        return hits, shared, evict, run_hit

    def _admit(self, budget: int) -> tuple[Request, int, int] | None:
        """Try the head of the waiting queue; returns (request, index, scheduled tokens) or None."""
        r = self.waiting[0]
        hits, shared, evict, run_hit = self._hits(r)
        comp0 = hits * self.bs
        new = r.ntok - comp0
        if not self.cfg.enable_chunked_prefill and new > budget:
            return None
        new = min(new, budget)
        full = min(r.ntok, self.cfg.max_model_len)
        required = self.layout.admission_blocks(full, self.cfg.max_in_flight_tokens) - hits + evict
        if required > self.pool.free:
            return None
        self.waiting.popleft()
        pool = self.pool
        for i in range(shared):
            pool.acquire((r.pid, i))
        if run_hit:
            pool.take_run(r.id, run_hit)
        elif pool.run(r.id) is not None:  # a run that cannot be used any more
            pool.take_run(r.id, 0)
        r.nshared, r.held, r.comp = shared, hits, comp0
        if r.hit_tokens < 0:
            r.hit_tokens = comp0
        held = self.layout.held_blocks_one(comp0, new)
        pool.alloc(held - r.held)
        r.held = held
        if np.isnan(r.admitted_t):
            r.admitted_t = self._now
        if r.pid is not None and r.nshared < r.plen // self.bs:
            self.registering[r.id] = r
        return r, self._append(r), new

    # --- planning ----------------------------------------------------------------------------------
    def start(self, t: float, horizon: float) -> float | None:
        """Plan the iteration starting at t (a decode segment may run up to the first iteration that
        starts at or after `horizon`). Returns its end time, or None if there is nothing to run."""
        self._now = t
        cfg, a, pool = self.cfg, self.a, self.pool
        budget = cfg.max_num_batched_tokens
        preempted = 0
        n = self.n
        all_decode = False
        if n:
            comp, ntok, held = a["comp"][:n], a["ntok"][:n], a["held"][:n]
            need = ntok - comp
            total = int(need.sum())
            if total <= budget:  # everyone gets all it needs
                sched = need
                new_held = self.layout.held_blocks(comp, sched)
                all_decode = total == n
            else:
                sched = np.minimum(need, np.maximum(budget - (np.cumsum(need) - need), 0))
                new_held = np.where(sched > 0, self.layout.held_blocks(comp, sched), held)
            delta = new_held - held
            grow = int(delta.sum())
            if grow > pool.free:
                sched, preempted = self._allocate_with_preemption(sched, new_held)
                all_decode = False
            else:
                if self.layout.hybrid:
                    pool.release(int(-delta[delta < 0].sum()))
                    pool.alloc(int(delta[delta > 0].sum()))
                else:
                    pool.alloc(grow)
                held[:] = new_held
        else:
            sched = np.zeros(0, dtype=np.int64)
        admitted = 0
        if not preempted and self.waiting:
            left = budget - int(sched.sum())
            added = []
            while left > 0 and self.waiting and self.n < cfg.max_num_seqs:
                got = self._admit(left)
                if got is None:
                    break
                added.append(got[2])
                left -= got[2]
                admitted += 1
            if added:
                sched = np.concatenate([sched[: self.n - admitted], np.asarray(added, dtype=np.int64)])
        n = self.n
        if n == 0 or not sched.any():
            if preempted:
                return self.start(t, horizon)  # everything was preempted: admit from the queue now
            self._plan = None
            self.busy_until = None
            return None
        comp = a["comp"][:n]
        if all_decode and not admitted:
            # a decode segment: every running request decodes, nothing else can change
            if (self.fast_forward and not self.registering and int(a["outc"][:n].min()) >= 1
                    and self._waiting_blocked()):
                k, times, src, held_per_iter = self._segment_length(t, horizon)
                if k > 1:
                    return self._plan_segment(t, k, times, src, held_per_iter)
            dec_count, ctx_mean, chunks, prefill = n, float(comp.sum()) / n, [], 0
        else:
            dec = sched == 1
            dec_count = int(dec.sum())
            ctx_mean = float(comp[dec].sum()) / dec_count if dec_count else 0.0
            chunk = sched > 1
            chunks = list(zip(sched[chunk].tolist(), comp[chunk].tolist()))
            prefill = int(sched[chunk].sum())
        tokens, seqs = int(sched.sum()), int(np.count_nonzero(sched))
        dur_us, src = self.cost.step_us(tokens, seqs, dec_count, ctx_mean, chunks)
        dur = dur_us * 1e-6
        end = t + dur
        self._plan = {"kind": "step", "t": t, "end": end, "sched": sched, "src": src}
        self.log.row(t, dur, tokens, seqs, prefill, dec_count, n, len(self.waiting), pool.used, preempted, src,
                     self.index)
        self.iterations += 1
        self.source_counts[src] = self.source_counts.get(src, 0) + 1
        self.busy_until = end
        return end

    def _allocate_with_preemption(self, sched: np.ndarray, new_held: np.ndarray) -> tuple[np.ndarray, int]:
        """Allocate in running order; when short, preempt the last running request (vLLM FCFS)."""
        held, pool = self.a["held"], self.pool
        preempted = 0
        i = 0
        while i < self.n:
            if sched[i] > 0:
                d = int(new_held[i] - held[i])
                while d > pool.free and self.n > i:
                    self._preempt_last(self._now)
                    preempted += 1
                if self.n <= i:  # request i itself was preempted
                    break
                if d >= 0:
                    pool.alloc(d)
                else:
                    pool.release(-d)
                held[i] = new_held[i]
            i += 1
        return sched[: self.n].copy(), preempted

    def _waiting_blocked(self) -> bool:
        """True if no waiting request can be admitted in the coming decode-only iterations."""
        if not self.waiting:
            return True
        if self.layout.hybrid:
            return False  # sliding windows free blocks as they slide: re-check every iteration
        if self.n >= self.cfg.max_num_seqs or self.cfg.max_num_batched_tokens - self.n <= 0:
            return True
        r = self.waiting[0]
        hits, _, evict, _ = self._hits(r)
        full = min(r.ntok, self.cfg.max_model_len)
        required = self.layout.admission_blocks(full, self.cfg.max_in_flight_tokens) - hits + evict
        return required > self.pool.free  # free blocks only shrink while decoding

    def _segment_blocks(self, k: int) -> np.ndarray:
        """Blocks the running requests hold during each of k decode iterations (iteration j allocates
        slots up to token comp + j); entry 0 is what they hold now."""
        n, comp = self.n, self.a["comp"][: self.n]
        bs = self.layout.single_block_size
        held0 = int(self.a["held"][:n].sum())
        if bs:  # a request needs a new block at iteration j when (comp + j) % bs == 0
            per_offset = np.bincount((-comp) % bs, minlength=bs)
            inc = per_offset[np.arange(1, k) % bs]
            return held0 + np.concatenate([[0], np.cumsum(inc)])
        steps = comp[:, None] + np.arange(k, dtype=np.int64)[None, :]
        return self.layout.held_blocks(steps, np.ones_like(steps)).sum(axis=0)

    def _segment_length(self, t: float, horizon: float) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        a, n = self.a, self.n
        k = int(min(int((a["maxo"][:n] - a["outc"][:n]).min()), SEGMENT_CAP))
        if not self.layout.single_block_size:
            k = min(k, max(2, 200_000 // n))
        if k <= 1:
            return 1, np.zeros(0), np.zeros(0), np.zeros(0)
        c0 = float(a["comp"][:n].sum()) / n
        first = min(k, 32)  # price a few first: the next arrival usually comes sooner
        times, src = self.cost.decode_run_us(n, c0, first)
        ends = t + np.cumsum(times) * 1e-6
        if ends[-1] < horizon and first < k:
            times, src = self.cost.decode_run_us(n, c0, k)
            ends = t + np.cumsum(times) * 1e-6
        k = min(len(times), 1 + int(np.searchsorted(ends[:-1], horizon, side="left")))
        held = self._segment_blocks(k)
        grow = held - held[0]
        if grow[-1] > self.pool.free:  # stop before the first iteration that would need preemption
            k = int(np.searchsorted(grow, self.pool.free, side="right"))
        return k, times[:k], src[:k], held[:k]

    def _plan_segment(self, t: float, k: int, times: np.ndarray, src: np.ndarray, held_per_iter: np.ndarray) -> float:
        n = self.n
        durs = times * 1e-6
        ends = t + np.cumsum(durs)
        starts = np.empty(k)
        starts[0] = t
        starts[1:] = ends[:-1]
        end = float(ends[-1])
        a = self.a
        comp, held = a["comp"][:n], a["held"][:n]
        kv_used = self.pool.used + held_per_iter - held_per_iter[0]
        last_held = self.layout.held_blocks(comp + k - 1, 1)
        extra = int(held_per_iter[-1] - held_per_iter[0])
        if extra > 0:
            self.pool.alloc(extra)
        elif extra < 0:
            self.pool.release(-extra)
        held[:] = last_held
        self._plan = {"kind": "segment", "t": t, "end": end, "k": k, "durs": durs}
        self.log.block(starts, durs, n, n, 0, n, n, len(self.waiting), kv_used, 0, src, self.index)
        self.iterations += k
        lo, hi = int(src.min()), int(src.max())
        if lo == hi:
            self.source_counts[lo] = self.source_counts.get(lo, 0) + k
        else:
            for code in range(lo, hi + 1):
                self.source_counts[code] = self.source_counts.get(code, 0) + int((src == code).sum())
        self.busy_until = end
        return end

    # --- applying ------------------------------------------------------------------------------
    def finish(self) -> list[Request]:
        """Apply the planned iteration (or segment) at its end time; returns finished requests."""
        plan, self._plan = self._plan, None
        self.busy_until = None
        if plan is None:
            return []
        a, n, end = self.a, self.n, plan["end"]
        comp, ntok, outc, maxo = a["comp"][:n], a["ntok"][:n], a["outc"][:n], a["maxo"][:n]
        last_t = self.last_t[:n]
        if plan["kind"] == "segment":
            k, durs = plan["k"], plan["durs"]
            self.itl.add(plan["t"] + durs[0] - last_t)
            if k > 1:
                self.itl.add(durs[1:], n)
            comp += k
            ntok += k
            outc += k
            last_t[:] = end
            done = outc >= maxo
        else:
            comp += plan["sched"]
            produced = comp == ntok  # all it needed is computed (unscheduled requests still need ≥ 1)
            ntok[produced] += 1
            outc[produced] += 1
            gaps = last_t[produced]
            fresh = np.isnan(gaps)  # first tokens: TTFT, not ITL
            if fresh.all():
                pass
            elif fresh.any():
                self.itl.add(end - gaps[~fresh])
            else:
                self.itl.add(end - gaps)
            if fresh.any():
                for i in np.flatnonzero(produced)[fresh]:
                    self.reqs[i].first_token_t = end
            last_t[produced] = end
            if self.registering:
                self._register()
            done = produced & (outc >= maxo)
        finished: list[Request] = []
        if done.any():
            for i in np.flatnonzero(done):
                r = self._sync(int(i))
                r.finish_t = end
                self._free(r, preempt=False)
                finished.append(r)
            self._compact(~done)
        for r in finished:
            self.on_finish(r)
        return finished

    def _register(self) -> None:
        """Full prefix blocks just computed become shared cached blocks (vLLM caches full blocks)."""
        index = {id(r): i for i, r in enumerate(self.reqs)}
        for r in list(self.registering.values()):
            i = index.get(id(r))
            if i is None:
                self.registering.pop(r.id, None)
                continue
            comp = int(self.a["comp"][i])
            upto = min(comp, r.plen) // self.bs
            while r.nshared < upto and self.pool.register((r.pid, r.nshared)):
                r.nshared += 1
            if r.nshared < upto or r.nshared >= r.plen // self.bs:
                self.registering.pop(r.id, None)


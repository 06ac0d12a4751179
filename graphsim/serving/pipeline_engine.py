"""A pipeline-parallel vLLM V1 engine in the simulator: up to `pp` batches in flight, each through every stage.

vLLM V1 with pipeline parallelism runs `EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py), with a batch
queue of `max_concurrent_batches` = the pipeline-parallel size (vllm/config/vllm.py
`VllmConfig.max_concurrent_batches`: "PP requires PP-size concurrent batches to fill the pipeline"; older releases
state it on the multiprocessing / Ray executors): while the queue has room and the scheduler has requests it can schedule, it schedules
a batch and hands it to the executor without waiting; when the queue is full, or nothing more can be scheduled, it
blocks until the oldest batch's output comes back and updates the scheduler from it. The scheduler advances a
request's `num_computed_tokens` when it schedules it (`Scheduler._update_after_schedule`), so a request whose
tokens are all in flight has no new token to schedule and is skipped ("This may happen when PP>1 and we have
already scheduled all prompt tokens but they are not finished yet", `Scheduler.schedule`): the batches in flight
hold different requests, and a long prompt's next chunk may be scheduled while its last one is still in flight.

Timing. A batch's stages run in order, each on its own GPUs (`PipelineCost`: one `IterationCost` per stage, the
stage's incoming hidden-state transfer included); stage j of a batch starts when stage j−1 of the same batch has
ended and stage j has finished the batch before it:

    end_0 = max(launch + host, free_0) + s_0,   end_j = max(end_{j−1}, free_j) + s_j,   free_j = end_j

so a batch completes after all its stages (its latency is Σ s_j when nothing waits), full batches follow each other
at the slowest stage's time, and with fewer batches than stages some stages idle: the bubbles. Host time (the
engine's scheduling and input preparation, host.py) delays the batch's first stage. Outputs are applied, in
launch order, when a batch completes; that is when vLLM's engine core can schedule again.

Not modelled: speculative decoding with pp > 1 (refused), decode segments priced in one call (every batch is
priced on its own), and async scheduling's extra batch (with the V2 model runner vLLM keeps pp + 1 in flight; the
queue here is pp deep).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.kv_layout import KvLayout
from graphsim.serving.pricing import NUM_SOURCES, IterationCost, SourceMeter, new_meter
from graphsim.serving.records import IterationLog, Request, Samples
from graphsim.serving.scheduler import Engine, StepPlan


class PipelineCost:
    """One `IterationCost` per stage; a step's time is their sum (one batch through every stage) and the stage
    times of the last step priced are kept for the engine (`last_stage_us`)."""

    def __init__(self, stages: list[IterationCost]) -> None:
        self.stages = stages
        self.last_stage_us: list[float] = []

    @property
    def pp(self) -> int:
        return len(self.stages)

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        times, worst = [], 0
        for c in self.stages:
            t, s = c.step_us(tokens, seqs, dec_count, dec_ctx_mean, chunks)
            times.append(t)
            worst = max(worst, s)
        self.last_stage_us = times
        return float(sum(times)), worst

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        parts = [c.decode_run_us(batch, ctx_mean0, k) for c in self.stages]
        return sum((p[0] for p in parts), np.zeros(k)), np.maximum.reduce([p[1] for p in parts])

    def meter(self) -> SourceMeter:
        """Kernel-level source shares: every stage's own meter (`pricing.new_meter`), summed."""
        return PipelineMeter([new_meter(c) for c in self.stages])


class PipelineMeter:
    """The stages' meters side by side: each sees every batch (a batch runs on every stage)."""

    def __init__(self, meters: list[SourceMeter]) -> None:
        self.meters = meters
        self.basis = "kernel" if all(m.basis == "kernel" for m in meters) else "iteration worst source"

    def step(self, us: float, source: int, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
             chunks: list[tuple[int, int]]) -> None:
        for m in self.meters:  # a kernel-level meter reads the batch, not `us`; a worst-source one is given the sum
            m.step(us / len(self.meters), source, tokens, seqs, dec_count, dec_ctx_mean, chunks)

    def run(self, times_us: np.ndarray, sources: np.ndarray, batch: int, ctx_mean0: float) -> None:
        for m in self.meters:
            m.run(times_us / len(self.meters), sources, batch, ctx_mean0)

    def source_us(self) -> np.ndarray:
        return sum((m.source_us() for m in self.meters), np.zeros(NUM_SOURCES))


@dataclass
class InFlight:
    """A batch between its launch and the return of its output."""

    launch_t: float
    end_t: float
    requests: list[Request]
    produced: list[bool]  # the batch computes the request's last needed token: it samples one
    epochs: list[int]  # each request's preemption count at launch (a preempted request's batch is void for it)


def pipeline_times(launch_t: float, stage_s: list[float], free_s: list[float], host_s: float = 0.0) -> float:
    """When a batch launched at `launch_t` leaves the last stage, given when each stage is next free (`free_s`,
    updated in place); see the module docstring."""
    x = launch_t + host_s
    for j, s in enumerate(stage_s):
        x = max(x, free_s[j]) + s
        free_s[j] = x
    return x


class PipelineEngine(Engine):
    """`Engine` with vLLM's batch queue (module docstring): `start` launches batches until `pp` are in flight or
    nothing can be scheduled and returns when the oldest completes; `finish` applies that batch's outputs."""

    def __init__(self, index: int, config: EngineConfig, layout: KvLayout, num_blocks: int, cost: IterationCost,
                 log: IterationLog, itl: Samples, on_finish: Callable[[Request], None]) -> None:
        super().__init__(index, config, layout, num_blocks, cost, log, itl, on_finish)
        if not isinstance(cost, PipelineCost):
            raise TypeError("a PipelineEngine prices with a PipelineCost")
        self.pcost = cost
        self.inflight: deque[InFlight] = deque()
        self.free_s = [0.0] * cost.pp
        self._planning = False

    @property
    def pp(self) -> int:
        return self.pcost.pp

    def start(self, t: float, horizon: float) -> float | None:
        if self._planning:  # Engine.start planning again after preempting everything
            return Engine.start(self, t, horizon)
        self.now_t = t
        while len(self.inflight) < self.pp:
            self.fast_forward = False  # every batch on its own: a decode segment would hold the pipeline still
            self._planning = True
            try:
                end = Engine.start(self, t, horizon)
            finally:
                self._planning = False
            plan = self.plan
            if end is None or not isinstance(plan, StepPlan):
                break
            self._launch(t, plan)
        self.plan = None
        self.busy_until = self.inflight[0].end_t if self.inflight else None
        return self.busy_until

    def _launch(self, t: float, plan: StepPlan) -> None:
        """Advance the scheduled requests' computed tokens now (vLLM's scheduler does, at schedule time) and time
        the batch through the stages."""
        running = self.running
        n = running.size
        scheduled = plan.num_scheduled_tokens[:n]
        idx = np.flatnonzero(scheduled > 0)
        running.num_computed_tokens[:n] += scheduled
        produced = running.num_computed_tokens[:n] == running.num_tokens[:n]
        reqs = [running.requests[i] for i in idx]
        if self.registering:
            self._register()
        stage_us = list(self.pcost.last_stage_us)
        host_s = max(0.0, (plan.end_t - plan.start_t) - sum(stage_us) * 1e-6)
        end = pipeline_times(t, [s * 1e-6 for s in stage_us], self.free_s, host_s)
        self.inflight.append(InFlight(t, end, reqs, [bool(produced[i]) for i in idx], [r.preemptions for r in reqs]))

    def finish(self) -> list[Request]:
        """Apply the oldest batch's outputs at its completion."""
        self.busy_until = None
        if not self.inflight:
            return []
        b = self.inflight.popleft()
        end = b.end_t
        running = self.running
        index = {id(r): i for i, r in enumerate(running.requests)}
        done_idx: list[int] = []
        fresh_idx: list[int] = []
        gaps: list[float] = []
        for r, produced, epoch in zip(b.requests, b.produced, b.epochs, strict=True):
            i = index.get(id(r))
            if i is None or r.preemptions != epoch or not produced:
                continue
            running.num_tokens[i] += 1
            running.num_output_tokens[i] += 1
            last = running.last_token_t[i]
            if np.isnan(last):
                fresh_idx.append(i)
            else:
                gaps.append(end - last)
            running.last_token_t[i] = end
            if running.num_output_tokens[i] >= running.max_tokens[i]:
                done_idx.append(i)
        if gaps:
            self.itl.add(np.asarray(gaps))
        for i in fresh_idx:
            running.requests[i].first_token_t = end
        done = np.zeros(running.size, dtype=bool)
        done[done_idx] = True
        return self._finish(running, done, end)


class PipelineCycleCost:
    """A pipelined engine as the steady-state model (steady.py, search) sees an iteration: the step that serves
    every running request once. With pp batches in flight those requests are spread over pp micro-batches (decodes
    evenly, prompt chunks in turn), and the cycle until each has its next token is the longer of a micro-batch's
    latency (Σ_j s_j: a request waits for its own batch) and the busiest stage's work for all of them (Σ_k s_jk):

        cycle = max(max_k Σ_j s_jk, max_j Σ_k s_jk)

    An approximation of the batch queue (`PipelineEngine` simulates it): it assumes the micro-batches stay
    balanced."""

    def __init__(self, cost: PipelineCost) -> None:
        self.cost = cost

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        pp = self.cost.pp
        rows: list[list[float]] = []
        worst = 0
        for k in range(pp):
            dec = dec_count // pp + (1 if k < dec_count % pp else 0)
            mine = chunks[k::pp]
            if not dec and not mine:
                continue
            toks = dec + sum(n for n, _ in mine)
            times = []
            for c in self.cost.stages:
                t, s = c.step_us(toks, dec + len(mine), dec, dec_ctx_mean if dec else 0.0, mine)
                times.append(t)
                worst = max(worst, s)
            rows.append(times)
        if not rows:
            return 0.0, worst
        st = np.asarray(rows)
        return float(max(st.sum(axis=1).max(), st.sum(axis=0).max())), worst

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        out = [self.step_us(batch, batch, batch, ctx_mean0 + i, []) for i in range(k)]
        return np.asarray([t for t, _ in out]), np.asarray([s for _, s in out], dtype=np.int8)

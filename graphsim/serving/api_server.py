"""The API server as one serial resource: taking requests in and streaming their tokens out share one event loop.

vLLM's OpenAI server runs every request's front end (parse, tokenise, process the inputs, hand it to the engine
core: frontend.py) and every streamed token's way out on the same asyncio event loop of one process: the engine
core's outputs are pulled by one task (`AsyncLLM.output_handler`, vllm/v1/engine/async_llm.py 0.10.1), detokenised
and put into each request's collector (`OutputProcessor.process_outputs`), and each request's generator builds,
serialises and sends its stream chunk (`OpenAIServingCompletion.completion_stream_generator`; Starlette's
`StreamingResponse` on uvicorn). The engine core is another process and does not wait for it; the client sees a
token when the API server has sent it. When the loop has more work than time, tokens reach the client late (TPOT
and TTFT grow) and new requests reach the engine late, however fast the GPU is.

graphsim models one such server per engine replica (as `FrontEndQueue`, frontend.py) with two kinds of job:

    ingestion   one per request, ready when sent, service = frontend_us + frontend_per_token_us × prompt tokens
                (then frontend_latency_us, not serial, to reach the engine)
    output      one per engine iteration that emits tokens, ready when the iteration ends,
                service = per_chunk_us × stream chunks (one per request that got tokens in that iteration)

served one at a time. Ingestions go in the order sent (a shared queue over the replicas' servers, as before);
each server's output jobs in the order they became ready. When both kinds wait, the server alternates: an output
turn (every output job ready by then, merged, as the output handler drains what the engine core has sent) after an
ingestion and an ingestion after an output turn. Alternation is how the loop shares itself: asyncio runs the
ready callbacks in FIFO order, one slice of each task per loop iteration (`BaseEventLoop._run_once`), and the
output handler yields between chunks of outputs "to allow other asyncio tasks to run" (`await asyncio.sleep(0)`,
async_llm.py), so neither kind waits for the other's whole backlog.

A stream chunk's cost is measured, not fitted: host.py `API_SERVER_PER_CHUNK_US`, from benchmarks/host_streaming.py.
Closed-loop clients send their next request when the ENGINE finishes the previous one (the client-side finish is
only known later); open-loop arrivals (`vllm bench serve`'s request rates) are exact.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from graphsim.serving.frontend import FrontEnd

INF = float("inf")


@dataclass
class _Server:
    free_s: float = 0.0  # when its last committed job ends
    last_in: bool = False  # the last committed job was an ingestion
    ready: list[float] = field(default_factory=list)  # output jobs, in the order they became ready (per engine)
    cum: list[float] = field(default_factory=lambda: [0.0])  # cum[k]: work of the first k output jobs (s)
    head: int = 0  # the first output job not served
    covers: list[float] = field(default_factory=list)  # per output turn: the latest ready time it served
    dones: list[float] = field(default_factory=list)  # per output turn: when it ended


class ApiServers:
    """The API servers of one pool of engine replicas (server j streams engine j's tokens).

    The event loop reports each iteration's stream chunks (`emit`, in time order per engine), commits what is
    decided by now (`advance`), asks when the next request reaches the engine (`peek`: exact once every output
    job ready before it is known), takes it (`take`), and after the run (`drain`) maps engine times to the times
    the client saw them (`delivered`)."""

    def __init__(self, frontend: FrontEnd, per_chunk_us: float, servers: int) -> None:
        self.frontend = frontend
        self.per_chunk_s = per_chunk_us * 1e-6
        self.servers = [_Server() for _ in range(max(1, servers))]
        self._queue: deque[tuple[float, int]] = deque()  # ingestion FIFO: (sent, prompt tokens), in the order sent
        self._decided: tuple[float, int] | None = None  # the head's (reach, server) once computed

    # --- jobs coming in ---------------------------------------------------------------------------------
    def send(self, sent_s: float, prompt_tokens: int) -> None:
        """A request sent by a client (call in the order sent)."""
        self._queue.append((sent_s, prompt_tokens))
        self._decided = None

    def emit(self, server: int, ready_s: float, chunks: int) -> None:
        """An engine iteration ending at `ready_s` emitted tokens to `chunks` requests (stream chunks)."""
        if chunks > 0 and self.per_chunk_s > 0:
            s = self.servers[server]
            s.ready.append(ready_s)
            s.cum.append(s.cum[-1] + chunks * self.per_chunk_s)
            self._decided = None

    # --- the servers' decisions -------------------------------------------------------------------------
    @staticmethod
    def _run(s: _Server, sent_s: float, until_s: float, commit: bool) -> float:
        """Server `s`'s decisions from its committed state: output turns (alternating with ingestions when both
        wait) until it would start the ingestion sent at `sent_s` (returns that start) or a decision lies after
        `until_s` (returns inf). `commit` keeps the output turns served."""
        free, last_in, head, n = s.free_s, s.last_in, s.head, len(s.ready)
        while True:
            first_out = s.ready[head] if head < n else INF
            d = max(free, min(sent_s, first_out))
            if d > until_s or d == INF:
                start = INF
                break
            if sent_s <= d and (first_out > d or not last_in):
                start = d
                break
            k = bisect.bisect_right(s.ready, d, head, n)  # the turn serves every output job ready by d
            end = d + s.cum[k] - s.cum[head]
            if commit:
                s.covers.append(s.ready[k - 1])
                s.dones.append(end)
            free, last_in, head = end, False, k
        if commit:
            s.free_s, s.last_in, s.head = free, last_in, head
        return start

    def advance(self, now_s: float) -> None:
        """Commit the output turns that start by `now_s` (every output job ready by then must be known)."""
        sent = self._queue[0][0] if self._queue else INF
        for s in self.servers:
            self._run(s, sent, now_s, commit=True)

    def peek(self) -> float:
        """When the next request sent reaches the engine (inf when none is waiting)."""
        if not self._queue:
            return INF
        if self._decided is None:
            sent, tokens = self._queue[0]
            starts = [self._run(s, sent, INF, commit=False) for s in self.servers]
            j = min(range(len(starts)), key=starts.__getitem__)
            reach = starts[j] + self.frontend.service_s(tokens) + self.frontend.latency_us * 1e-6
            self._decided = (reach, j)
        return self._decided[0]

    def take(self) -> float:
        """The next request reaches the engine now (at `peek()`): commit its server's turns up to it."""
        reach = self.peek()
        assert self._decided is not None
        j = self._decided[1]
        s = self.servers[j]
        sent, tokens = self._queue.popleft()
        start = self._run(s, sent, INF, commit=True)
        s.free_s, s.last_in = start + self.frontend.service_s(tokens), True
        self._decided = None
        return reach

    def drain(self) -> None:
        """No more requests: serve every output job left."""
        for s in self.servers:
            self._run(s, INF, INF, commit=True)

    # --- what the client sees ---------------------------------------------------------------------------
    def delivered_array(self, server: int, times: np.ndarray) -> np.ndarray:
        """When tokens the engine emitted at `times` (iteration ends) reached the client: the end of the first
        output turn that served each; the time itself where no turn did (no per-chunk cost); NaN stays NaN."""
        s = self.servers[server]
        if not s.dones:
            return times
        covers, dones = np.asarray(s.covers), np.asarray(s.dones)
        i = np.searchsorted(covers, np.nan_to_num(times, nan=np.inf), side="left")
        out = np.where(i < len(dones), dones[np.minimum(i, len(dones) - 1)], times)
        return np.where(np.isnan(times), times, out)

    def delivered(self, server: int, t: float) -> float:
        """`delivered_array` for one engine time."""
        return float(self.delivered_array(server, np.array([t], dtype=float))[0])

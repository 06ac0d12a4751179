"""The API server: requests come in beside its event loop, tokens stream out on it.

vLLM's OpenAI server (one process per API server) takes each request in (parse, tokenise, process the inputs,
hand it to the engine core: frontend.py) and streams every output token out. The way out is one serial resource,
the server's asyncio event loop: the engine core's outputs are pulled by one task (`AsyncLLM.output_handler`,
vllm/v1/engine/async_llm.py 0.10.1), detokenised and put into each request's collector
(`OutputProcessor.process_outputs`), and each request's generator builds, serialises and sends its stream chunk
(`OpenAIServingCompletion.completion_stream_generator`; Starlette's `StreamingResponse` on uvicorn). The engine core
is another process and does not wait for it; the client sees a token when the server has sent it. When the loop has
more chunks than time, tokens reach the client late and in merged chunks (TPOT, ITL, E2E grow), however fast the
GPU is.

The way in (the front end's serial work, frontend.py) is a FIFO of its own BESIDE the loop, not a job on it: the
prompt is tokenised on a worker thread (`AsyncMicrobatchTokenizer`, one `ThreadPoolExecutor(max_workers=1)`,
vllm/utils/__init__.py 0.10.1; a batched call of the fast tokenizer, `PreTrainedTokenizerFast._batch_encode_plus` →
`Tokenizer.encode_batch`, which releases the GIL: huggingface/tokenizers bindings/python/src/tokenizer.rs
`py.allow_threads`), and a public run shows the loop kept streaming token by token while a burst was taken in:
vLLM 0.19.0 (kvcached's H100 runs, benchmarks/data/kvcached_h100_qwen3_0.6b.json) took 500 prompts sent at once in
over ~4.9 s (p99 TTFT), about 10 ms of serial work a request, yet its clients saw a mean ITL of 5.4–6.1 ms, as long
as the mean TPOT (5.1–5.7 ms): one token a chunk. Had each request held the loop for its ~10 ms, every stream would
have waited for it (chunks of several tokens, ITL ≥ 10 ms).

A deployment runs `--api-server-count` such servers (vLLM's default: one; the data-parallel size from 0.19,
engine_versions.py `api_server_count`). With several, each takes a share of the requests in and streams its own
requests' tokens (every API server talks to every engine; the scheduler sends each request's outputs to the API
server that sent it: `Scheduler.update_from_output` groups them by `request.client_index`, vllm/v1/core/sched/
scheduler.py 0.10.1). graphsim spreads each engine's stream evenly over them: with A servers for E
engines, each engine's stream is served as by one loop A/E times as fast (exact when A is a multiple of E and the
requests split evenly; with fewer servers than engines, one server's turns do not merge across engines here), and
the front end has A × replicas servers. In each

    ingestion   one per request, in the order sent, FIFO over the servers (frontend.FrontEndQueue's rule):
                reaches the engine at max(sent, server free) + frontend_us + frontend_per_token_us × prompt tokens
                + frontend_latency_us
    output      one job per engine iteration that emits tokens to c requests, ready when the iteration ends

Output jobs are served one turn at a time on the loop: a turn starts when the loop is free and a job is ready,
and serves every job ready by then, merged (the output handler drains what the engine core has sent; a request's
collector merges the tokens its generator has not taken yet, `RequestOutputCollector.put`), so the client sees
them as one chunk when the turn ends. A turn over jobs of c₁ … c_k requests costs

    per_output_us × Σ cᵢ  +  (per_chunk_us − per_output_us) × max cᵢ

`OutputProcessor.process_outputs` for every engine output, the chunk built and sent once per request (consecutive
iterations of one engine carry mostly the same requests: max cᵢ of them). One job alone costs per_chunk_us × c.

A stream chunk's cost is measured, not fitted: host.py `API_SERVER_PER_CHUNK_US`, from benchmarks/host_streaming.py.
Closed-loop clients send their next request when THEY get the previous one's last chunk: `vllm bench serve
--max-concurrency` holds a slot (an asyncio.Semaphore) for the whole of `request_func`, which returns when the
stream has ended (vllm/benchmarks/serve.py 0.10.1 `limited_request_func`). The turn that streams the finishing
iteration's chunk is known once it has started (`seen_s`; every job it merges is ready by then); the simulator
waits for that (simulator.EventLoop `_resends`). Open-loop arrivals (`vllm bench serve`'s request rates) are exact.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from graphsim.serving.frontend import FrontEnd

INF = float("inf")


@dataclass
class _Server:
    free_s: float = 0.0  # when its last committed output turn ends
    ready: list[float] = field(default_factory=list)  # output jobs, in the order they became ready (per engine)
    cum: list[float] = field(default_factory=lambda: [0.0])  # cum[k]: per-output work of the first k jobs (s)
    chunks: list[int] = field(default_factory=list)  # per output job: requests that got tokens
    head: int = 0  # the first output job not served
    covers: list[float] = field(default_factory=list)  # per output turn: the latest ready time it served
    dones: list[float] = field(default_factory=list)  # per output turn: when it ended


class ApiServers:
    """The API servers of one pool of engine replicas (server j streams engine j's tokens).

    The event loop reports each iteration's stream chunks (`emit`, in time order per engine), asks when the next
    request reaches the engine (`peek`) and takes it (`take`); after the run (`drain`: the output turns) it maps
    engine times to the times the client saw them (`delivered`)."""

    def __init__(self, frontend: FrontEnd, per_chunk_us: float, servers: int, per_output_us: float = 0.0) -> None:
        self.frontend = frontend
        self.per_chunk_s = per_chunk_us * 1e-6
        self.per_output_s = min(per_output_us, per_chunk_us) * 1e-6  # of a chunk's cost, paid per merged output
        self.servers = [_Server() for _ in range(max(1, servers))]
        self._queue: deque[tuple[float, int]] = deque()  # ingestion FIFO: (sent, prompt tokens), in the order sent
        self._ingest_free = [0.0] * max(1, frontend.servers)  # when each front end is next free (a heap)

    # --- jobs coming in ---------------------------------------------------------------------------------
    def send(self, sent_s: float, prompt_tokens: int) -> None:
        """A request sent by a client (call in the order sent)."""
        self._queue.append((sent_s, prompt_tokens))

    def emit(self, server: int, ready_s: float, chunks: int) -> None:
        """An engine iteration ending at `ready_s` emitted tokens to `chunks` requests (stream chunks)."""
        if chunks > 0 and self.per_chunk_s > 0:
            s = self.servers[server]
            s.ready.append(ready_s)
            s.cum.append(s.cum[-1] + chunks * self.per_output_s)
            s.chunks.append(chunks)

    # --- the servers' decisions -------------------------------------------------------------------------
    def _run(self, s: _Server, until_s: float) -> None:
        """Server `s`'s output turns that start by `until_s`: each starts when the loop is free and a job is ready
        and serves every job ready by its start."""
        free, head, n = s.free_s, s.head, len(s.ready)
        send_s = self.per_chunk_s - self.per_output_s
        while head < n:
            d = max(free, s.ready[head])
            if d > until_s:
                break
            k = bisect.bisect_right(s.ready, d, head, n)  # the turn serves every output job ready by d
            free = d + s.cum[k] - s.cum[head] + send_s * max(s.chunks[head:k])
            s.covers.append(s.ready[k - 1])
            s.dones.append(free)
            head = k
        s.free_s, s.head = free, head

    def peek(self) -> float:
        """When the next request sent reaches the engine (inf when none is waiting)."""
        if not self._queue:
            return INF
        sent, tokens = self._queue[0]
        return max(sent, self._ingest_free[0]) + self.frontend.service_s(tokens) + self.frontend.latency_us * 1e-6

    def take(self) -> float:
        """The next request reaches the engine now (at `peek()`)."""
        reach = self.peek()
        sent, tokens = self._queue.popleft()
        free = heapq.heappop(self._ingest_free)
        heapq.heappush(self._ingest_free, max(sent, free) + self.frontend.service_s(tokens))
        return reach

    def drain(self) -> None:
        """No more requests: serve every output job left."""
        for s in self.servers:
            self._run(s, INF)

    def seen_s(self, server: int, t: float, now: float) -> float | None:
        """When the client gets the chunk engine `server` emitted at `t` (an iteration's end), once the output turn
        that serves it has started by `now` (every job it merges is known then: call when the engine's iterations up
        to `now` are emitted); None while it has not (it starts at `turn_s` at the earliest)."""
        s = self.servers[server]
        self._run(s, now)
        i = bisect.bisect_left(s.covers, t)
        return s.dones[i] if i < len(s.dones) else None

    def turn_s(self, server: int) -> float:
        """When the server's next output turn starts, as far as its jobs so far say (inf when none waits)."""
        s = self.servers[server]
        return max(s.free_s, s.ready[s.head]) if s.head < len(s.ready) else INF

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

"""The engine's front end as a queue: when a request the client sent reaches the engine's scheduler.

vLLM's OpenAI server handles every request in one process before the engine sees it: the HTTP request is
parsed, the prompt tokenised and the inputs processed. Tokenisation runs on ONE worker thread per server
(vllm/entrypoints/openai/serving_engine.py, `OpenAIServing.__init__`: `self._tokenizer_executor =
ThreadPoolExecutor(max_workers=1)`, `_tokenize_prompt_input_async = make_async(…, executor=…)`, vLLM 0.6 –
0.10), and the rest of the request path shares the server's single asyncio event loop, so requests are served
one after another: a burst of N prompts reaches the engine over N service times, not at once. graphsim models
it as a FIFO queue with one server per engine replica (`servers`; vLLM runs one API server per engine unless
told otherwise) and two kinds of time per request (host.py has the constants and their sources):

    service_s  = frontend_us + frontend_per_token_us × prompt tokens     serial: holds the server
    latency_s  = frontend_latency_us                                      not serial: HTTP, input processing,
                                                                          the hop to the engine process
    reaches the engine at  max(sent, server free) + service_s + latency_s

Applied to the arrivals (open loop: in the order sent; closed loop: as each client sends), so TTFT, the
batches the engine forms and everything after follow. The way back (streaming each token) is a constant
shift that changes neither TPOT nor ITL; graphsim charges the whole non-serial latency on the way in.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class FrontEnd:
    """Per-request front-end times (µs) and the number of servers (FIFO, shared queue)."""

    per_request_us: float
    per_token_us: float
    latency_us: float
    servers: int = 1

    @property
    def active(self) -> bool:
        return self.per_request_us > 0 or self.per_token_us > 0

    def service_s(self, prompt_tokens: int) -> float:
        return (self.per_request_us + self.per_token_us * prompt_tokens) * 1e-6


class FrontEndQueue:
    """The servers' state: `reach_s(sent, tokens)` is when a request sent at `sent` reaches the engine (called
    in the order requests are sent)."""

    def __init__(self, frontend: FrontEnd) -> None:
        self.frontend = frontend
        self._free = [0.0] * max(1, frontend.servers)  # when each server is next free (a heap)

    def reach_s(self, sent_s: float, prompt_tokens: int) -> float:
        if not self.frontend.active:
            return sent_s + self.frontend.latency_us * 1e-6
        free = heapq.heappop(self._free)
        done = max(sent_s, free) + self.frontend.service_s(prompt_tokens)
        heapq.heappush(self._free, done)
        return done + self.frontend.latency_us * 1e-6

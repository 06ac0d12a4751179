"""What a simulation records: requests (static fields and outcomes), the per-iteration log, and
inter-token latency samples."""

from __future__ import annotations

import numpy as np


class Request:
    """One request: what was asked (vLLM's names: `num_prompt_tokens`, `max_tokens`), its progress while it
    runs (`num_computed_tokens`, `num_tokens`, `num_output_tokens`, the KV blocks it holds) and its outcome
    (times in seconds of simulated time: `arrival`, `admitted_t`, `first_token_t`, `finish_t`)."""

    __slots__ = (
        "admitted_t",
        "arrival",
        "finish_t",
        "first_token_t",
        "hit_tokens",
        "id",
        "last_token_t",
        "max_tokens",
        "num_computed_tokens",
        "num_held_blocks",
        "num_output_tokens",
        "num_prompt_tokens",
        "num_shared_blocks",
        "num_tokens",
        "preemptions",
        "prefix_id",
        "prefix_tokens",
        "rejected",
        "replica",
        "requested_output_tokens",
    )

    def __init__(self, request_id: int, arrival: float, num_prompt_tokens: int, output_tokens: int,
                 prefix_id: str | None, prefix_tokens: int, max_model_len: int) -> None:
        self.id, self.arrival, self.num_prompt_tokens = request_id, arrival, num_prompt_tokens
        self.requested_output_tokens = output_tokens
        self.rejected = num_prompt_tokens >= max_model_len
        self.max_tokens = max(1, min(output_tokens, max_model_len - num_prompt_tokens))
        self.prefix_id = prefix_id
        self.prefix_tokens = prefix_tokens if prefix_id is not None else 0
        self.replica = -1
        self.admitted_t = self.first_token_t = self.finish_t = float("nan")
        self.preemptions = 0
        self.hit_tokens = -1  # prefix-cache hit at first admission
        self.num_shared_blocks = 0  # prefix-cache blocks it holds with other requests (the first of its blocks)
        self.num_held_blocks = 0  # all the KV blocks it holds, shared ones included
        self.num_computed_tokens = 0
        self.num_tokens = num_prompt_tokens  # prompt + output tokens so far
        self.num_output_tokens = 0
        self.last_token_t = float("nan")


class IterationLog:
    """Per-iteration columns. A single iteration is a block of one row of scalars; a decode segment is a
    block of k rows whose columns are arrays (start, duration, KV blocks, source) or scalars."""

    NAMES = ("start_s", "dur_s", "tokens", "seqs", "prefill_tokens", "decode_seqs", "running", "waiting",
             "kv_used_blocks", "preempted", "source", "replica")
    _FLOAT = ("start_s", "dur_s")

    def __init__(self) -> None:
        self._blocks: list[tuple[int, tuple]] = []

    def row(self, *values) -> None:
        self._blocks.append((1, values))

    def block(self, *columns) -> None:
        """k rows at once: the first column is an array of k; other columns are arrays or scalars."""
        self._blocks.append((len(columns[0]), columns))

    def arrays(self) -> dict[str, np.ndarray]:
        sizes = np.asarray([m for m, _ in self._blocks], dtype=np.int64)
        offsets = np.cumsum(sizes) - sizes
        out = {}
        for j, name in enumerate(self.NAMES):
            vals = [c[j] for _, c in self._blocks]
            arr = [k for k, v in enumerate(vals) if isinstance(v, np.ndarray)]
            scalars = [v for v in vals]
            for k in arr:
                scalars[k] = 0
            dtype = np.float64 if name in self._FLOAT else np.int64
            col = np.repeat(np.asarray(scalars, dtype=dtype), sizes)
            for k in arr:  # scalar blocks repeat; array blocks are copied in
                col[offsets[k]:offsets[k] + sizes[k]] = vals[k]
            out[name] = col
        if len(out["start_s"]):
            order = np.argsort(out["start_s"], kind="stable")  # replicas interleave
            out = {k: v[order] for k, v in out.items()}
        return out


class Samples:
    """Inter-token latencies as (values, weight): a segment adds each iteration time once, weighted by
    its batch size."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._weights: list[float] = []

    def add(self, values: np.ndarray, weight: float = 1.0) -> None:
        if len(values):
            self._parts.append(values)
            self._weights.append(weight)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._parts:
            return np.zeros(0), np.zeros(0)
        v = np.concatenate(self._parts).astype(np.float64)
        w = np.repeat(np.asarray(self._weights, dtype=np.float64), [len(p) for p in self._parts])
        return v, w

"""What a simulation records: requests (static fields and outcomes; the outcomes kept in a compact
`RequestTable`), the per-iteration log, and inter-token latency samples, each in numpy columns so that a
million requests stay within a bounded memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, NamedTuple, overload

import numpy as np


class Request:
    """One request: what was asked (vLLM's names: `num_prompt_tokens`, `max_tokens`), its progress while it
    runs (`num_computed_tokens`, `num_tokens`, `num_output_tokens`, the KV blocks it holds) and its outcome
    (times in seconds of simulated time: `arrival` — when the client sent it —, `reached_t` — when it reached the
    engine, after the front end (frontend.py) —, `admitted_t`, `first_token_t`, `finish_t`)."""

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
        "reached_t",
        "rejected",
        "replica",
        "requested_output_tokens",
    )

    def __init__(self, request_id: int, arrival: float, num_prompt_tokens: int, output_tokens: int,
                 prefix_id: str | None, prefix_tokens: int, max_model_len: int) -> None:
        self.id, self.arrival, self.num_prompt_tokens = request_id, arrival, num_prompt_tokens
        self.reached_t = arrival  # set when it reaches the engine (the front end's delay is reached_t − arrival)
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


class RequestRecord(NamedTuple):
    """A request's outcome as the result keeps it (times in seconds of simulated time; NaN where it never
    got there, e.g. a rejected request)."""

    id: int
    arrival: float
    replica: int
    admitted_t: float
    first_token_t: float
    finish_t: float
    preemptions: int
    hit_tokens: int
    rejected: bool
    num_prompt_tokens: int
    max_tokens: int
    num_output_tokens: int
    requested_output_tokens: int
    reached_t: float


class RequestTable(Sequence[RequestRecord]):
    """Every request's outcome in compact columns, indexed by request id (arrival order): 89 bytes a
    request (five float64 times, five int64 counts, two int32, a bool) instead of a Python object each.
    Indexing or iterating gives `RequestRecord`s; the columns are `table.column(name)`."""

    DTYPES: ClassVar[dict[str, type]] = {
        "arrival": np.float64, "admitted_t": np.float64, "first_token_t": np.float64, "finish_t": np.float64,
        "replica": np.int32, "preemptions": np.int32, "hit_tokens": np.int64, "rejected": np.bool_,
        "num_prompt_tokens": np.int64, "max_tokens": np.int64, "num_output_tokens": np.int64,
        "requested_output_tokens": np.int64, "reached_t": np.float64}

    def __init__(self, capacity: int = 0) -> None:
        self._cols = {k: (np.full(capacity, np.nan) if t is np.float64 else np.zeros(capacity, dtype=t))
                      for k, t in self.DTYPES.items()}
        self._n = 0

    def record(self, r: Request) -> None:
        """Keep `r`'s outcome (its id is its row; ids are dense from 0)."""
        i = r.id
        if i >= len(self._cols["arrival"]):
            self._grow(max(2 * i + 2, 1024))
        for k, col in self._cols.items():
            col[i] = getattr(r, k)
        self._n = max(self._n, i + 1)

    def _grow(self, capacity: int) -> None:
        for k, col in self._cols.items():
            new = np.full(capacity, np.nan) if col.dtype == np.float64 else np.zeros(capacity, dtype=col.dtype)
            new[:len(col)] = col
            self._cols[k] = new

    def deliver(self, delivered: Callable[[int, np.ndarray], np.ndarray]) -> None:
        """First tokens and finishes as the clients saw them: `delivered(replica, engine times)` (api_server.py)."""
        n = self._n
        replica = self._cols["replica"][:n]
        for j in np.unique(replica).tolist():
            mask = replica == j
            for k in ("first_token_t", "finish_t"):
                col = self._cols[k]
                col[:n][mask] = delivered(int(j), col[:n][mask])

    def column(self, name: str) -> np.ndarray:
        """One column, per request id (a view: do not write to it)."""
        if name == "id":
            return np.arange(self._n)
        return self._cols[name][:self._n]

    @property
    def completed_mask(self) -> np.ndarray:
        """True for the requests that finished (not rejected, with a finish time)."""
        return ~self.column("rejected") & ~np.isnan(self.column("finish_t"))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._cols.values())

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[RequestRecord]: ...
    def __getitem__(self, i: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return RequestRecord(i, *(self._cols[f][i].item() for f in RequestRecord._fields[1:]))

    def __iter__(self) -> Iterator[RequestRecord]:
        step = 65536  # rows converted to Python at a time: iterating a million requests stays bounded
        for a in range(0, self._n, step):
            b = min(a + step, self._n)
            cols = [self._cols[f][a:b].tolist() for f in RequestRecord._fields[1:]]
            for j, row in enumerate(zip(*cols, strict=True)):
                yield RequestRecord(a + j, *row)

    def __repr__(self) -> str:
        return f"RequestTable({self._n:,} requests, {self.nbytes / 1e6:.1f} MB)"


class IterationLog:
    """Per-iteration columns. A single iteration is a block of one row of scalars; a decode segment is a
    block of k rows whose columns are arrays (start, duration, KV blocks, source) or scalars.

    Pending blocks are packed every `FLUSH_ROWS` rows into a chunk of compact columns (65 bytes a row);
    each chunk goes to `sink` (a streaming writer) when one is given, and is kept for `arrays()` only when
    `keep` is true. The totals a summary needs (`totals()`) are kept either way."""

    NAMES = ("start_s", "dur_s", "tokens", "seqs", "prefill_tokens", "decode_seqs", "running", "waiting",
             "kv_used_blocks", "preempted", "source", "replica", "host_s")
    _FLOAT = ("start_s", "dur_s", "host_s")  # host_s: engine host time in dur_s beyond the GPU kernels (host.py)
    # Stored narrower (every integer column comes back int64 from arrays()): the source code (< 8 codes) and
    # counts of requests or replicas (a run of 2³¹ requests would not fit in memory anyway); token and block
    # counts stay int64 (no bound an int32 is sure to hold).
    _COMPACT: ClassVar[dict[str, type]] = {"source": np.int8, "seqs": np.int32, "decode_seqs": np.int32, "running": np.int32,
                "waiting": np.int32, "preempted": np.int32, "replica": np.int32}
    FLUSH_ROWS = 1 << 16

    def __init__(self, keep: bool = True, sink: Callable[[dict[str, np.ndarray]], None] | None = None) -> None:
        self.keep, self.sink = keep, sink
        self._blocks: list[tuple[int, tuple]] = []
        self._pending_rows = 0
        self._chunks: list[dict[str, np.ndarray]] = []
        self._totals = IterationTotals()
        self._sorted: tuple[int, dict[str, np.ndarray]] | None = None

    def row(self, *values) -> None:
        self._blocks.append((1, values))
        self._pending_rows += 1
        if self._pending_rows >= self.FLUSH_ROWS:
            self.flush()

    def block(self, *columns) -> None:
        """k rows at once: the first column is an array of k; other columns are arrays or scalars."""
        self._blocks.append((len(columns[0]), columns))
        self._pending_rows += len(columns[0])
        if self._pending_rows >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Pack the pending blocks into one chunk (in the order they were logged)."""
        if not self._blocks:
            return
        blocks, self._blocks, self._pending_rows = self._blocks, [], 0
        sizes = np.asarray([m for m, _ in blocks], dtype=np.int64)
        offsets = np.cumsum(sizes) - sizes
        chunk = {}
        for j, name in enumerate(self.NAMES):
            vals = [c[j] for _, c in blocks]
            arr = [k for k, v in enumerate(vals) if isinstance(v, np.ndarray)]
            scalars = list(vals)
            for k in arr:
                scalars[k] = 0
            dtype = np.float64 if name in self._FLOAT else self._COMPACT.get(name, np.int64)
            col = np.repeat(np.asarray(scalars, dtype=dtype), sizes)
            for k in arr:  # scalar blocks repeat; array blocks are copied in
                col[offsets[k]:offsets[k] + sizes[k]] = vals[k]
            chunk[name] = col
        self._totals.add(chunk)
        if self.sink is not None:
            self.sink(chunk)
        if self.keep:
            self._chunks.append(chunk)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every row, in time order (replicas interleave); empty columns when the log was not kept."""
        self.flush()
        if self._sorted is not None and self._sorted[0] == len(self._chunks):
            return self._sorted[1]
        out = {}
        for name in self.NAMES:
            dtype = np.float64 if name in self._FLOAT else np.int64
            parts = [c[name] for c in self._chunks]
            out[name] = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)
        if len(out["start_s"]):
            order = np.argsort(out["start_s"], kind="stable")
            out = {k: v[order] for k, v in out.items()}
        self._sorted = (len(self._chunks), out)
        return out

    def totals(self) -> IterationTotals:
        """The sums over every row: from the time-ordered rows when they were kept (the same sums, to the
        last bit, whether or not a writer streamed them too), else as accumulated chunk by chunk."""
        self.flush()
        if not self.keep:
            return self._totals
        t = IterationTotals()
        t.add(self.arrays())
        return t


class IterationTotals:
    """Sums over the iteration log, accumulated chunk by chunk (what a summary needs without the rows):
    iterations, busy time, and time-weighted sums of batch tokens, running and running + waiting
    requests; tokens per replica."""

    def __init__(self) -> None:
        self.iterations = self.request_iterations = 0
        self.busy_s = self.tokens_dur = self.running_dur = self.in_system_dur = 0.0
        self.host_s = 0.0  # engine host time within busy_s (host.py)
        self.max_kv_used_blocks = 0
        self.tokens_by_replica: dict[int, int] = {}

    def add(self, c: dict[str, np.ndarray]) -> None:
        dur = c["dur_s"]
        self.iterations += len(dur)
        self.request_iterations += int(c["seqs"].sum())  # (request, iteration) pairs: the simulator's unit of work
        self.busy_s += float(dur.sum())
        self.host_s += float(c["host_s"].sum())
        self.tokens_dur += float((c["tokens"] * dur).sum())
        self.running_dur += float((c["running"] * dur).sum())
        self.in_system_dur += float(((c["running"] + c["waiting"]) * dur).sum())
        if len(dur):
            self.max_kv_used_blocks = max(self.max_kv_used_blocks, int(c["kv_used_blocks"].max()))
        reps, tokens = c["replica"], c["tokens"]
        for rep in np.unique(reps).tolist():
            self.tokens_by_replica[rep] = self.tokens_by_replica.get(rep, 0) + int(tokens[reps == rep].sum())


class Samples:
    """Inter-token latencies as (values, weight): a segment adds each iteration time once, weighted by
    its batch size. Stored run-length encoded (consecutive equal (value, weight) pairs once, with a count),
    packed every `FLUSH` additions: the gaps of one iteration's batch are mostly one value, so a run of a
    million requests keeps a few million runs, not a sample per token."""

    FLUSH = 4096

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._weights: list[float | np.ndarray] = []  # one weight for a part, or one per value
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, values: np.ndarray, weight: float | np.ndarray = 1.0) -> None:
        """Samples `values`, each of `weight` (a scalar, or an array as long as `values`)."""
        if len(values):
            self._parts.append(values)
            self._weights.append(weight)
            if len(self._parts) >= self.FLUSH:
                self._pack()

    def _pack(self) -> None:
        if not self._parts:
            return
        v = np.concatenate(self._parts).astype(np.float64)
        w = np.concatenate([np.broadcast_to(np.asarray(wt, dtype=np.float64), (len(p),))
                            for p, wt in zip(self._parts, self._weights, strict=True)])
        self._parts, self._weights = [], []
        new = np.ones(len(v), dtype=bool)
        new[1:] = (v[1:] != v[:-1]) | (w[1:] != w[:-1])
        starts = np.flatnonzero(new)
        # stored compact: weights are batch sizes (integers, exact in float32 below 2²⁴); a run lies within one pack
        # of FLUSH additions of at most MAX_SEGMENT_ITERATIONS or max_num_seqs samples each, far below 2³¹
        counts = np.diff(np.append(starts, len(v))).astype(np.int32)
        self._runs.append((v[starts], w[starts].astype(np.float32), counts))

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values, weights, counts) as float64, float64, int64: value i stands for counts[i] samples of
        weight weights[i]."""
        self._pack()
        if not self._runs:
            return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
        if len(self._runs) > 1:
            self._runs = [tuple(np.concatenate(x) for x in zip(*self._runs, strict=True))]  # type: ignore[list-item]
        v, w, c = self._runs[0]
        return v, w.astype(np.float64), c.astype(np.int64)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sample, expanded (for small runs and tests: a million requests make ~10⁸)."""
        v, w, c = self.runs()
        return np.repeat(v, c), np.repeat(w, c)


class TokenGaps:
    """Inter-token gaps kept as engine times, to be read as the client sees them (api_server.py): per token after
    a request's first, the engine time of its request's previous token and its own, by engine, with a weight (how
    many tokens share the pair). `client(delivered)` maps both ends through the API servers' delivery times: a gap
    is one of `vllm bench serve`'s ITL samples (one per stream chunk after the first) when the two tokens reached
    the client in different chunks; tokens one output turn delivered together are one chunk (the request's
    collector merged them, vllm/v1/engine/output_processor.py `RequestOutputCollector.put`), no sample.
    Compact as `Samples`: one iteration's gaps share its end, so equal previous times are kept once, counted."""

    FLUSH = 4096

    def __init__(self) -> None:
        self._adds: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        self._packed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, engine: int, prev: np.ndarray, end: float | np.ndarray, weight: float = 1.0) -> None:
        """Tokens ending at `end` (one time, or one per token) whose requests' previous tokens ended at `prev`."""
        prev = np.asarray(prev, dtype=np.float64)
        if not len(prev):
            return
        if np.ndim(end) == 0:
            prev, counts = np.unique(prev, return_counts=True)
            ends, weights = np.full(len(prev), float(end)), counts * float(weight)
        else:
            ends, weights = np.asarray(end, dtype=np.float64), np.full(len(prev), float(weight))
        self._adds.append((engine, prev, ends, weights))
        if len(self._adds) >= self.FLUSH:
            self._pack()

    def _pack(self) -> None:
        if self._adds:
            engines = np.concatenate([np.full(len(a[1]), a[0], dtype=np.int32) for a in self._adds])
            prev, ends, weights = (np.concatenate([a[k] for a in self._adds]) for k in (1, 2, 3))
            self._packed.append((engines, prev, ends, weights))
            self._adds = []

    def client(self, delivered: Callable[[int, np.ndarray], np.ndarray]) -> Samples:
        """The client's ITL samples: `delivered(engine, engine times)` gives when the client saw them."""
        self._pack()
        out = Samples()
        if not self._packed:
            return out
        engines, prev, ends, weights = (np.concatenate(x) for x in zip(*self._packed, strict=True))
        for j in np.unique(engines).tolist():
            m = engines == j
            gaps = delivered(int(j), ends[m]) - delivered(int(j), prev[m])
            keep = gaps > 0
            order = np.argsort(gaps[keep], kind="stable")  # equal gaps adjacent: Samples keeps them as one run
            out.add(gaps[keep][order], weights[m][keep][order])
        return out

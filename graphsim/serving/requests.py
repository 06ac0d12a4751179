"""Requests and workloads: synthetic arrivals (Poisson, gamma), lengths (fixed, uniform), shared
prefixes, closed-loop clients, and replay of a JSONL trace.

A trace line is a JSON object:

    {"arrival_s": 0.125, "input_tokens": 2048, "output_tokens": 256, "prefix_id": "sys-a", "prefix_tokens": 1024}

`arrival_s` (or `timestamp`) is seconds from the start; `prefix_id` / `prefix_tokens` are optional
and go together: requests with the same prefix id share their first `prefix_tokens` prompt tokens.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from graphsim.errors import GraphsimError
from graphsim.validation import Strict, read_text, validate


class WorkloadSpecError(GraphsimError):
    pass


@dataclass(frozen=True)
class RequestSpec:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int = 0


@dataclass(frozen=True)
class Lengths:
    """Fixed (`lo == hi`) or uniform integer lengths in [lo, hi]."""

    lo: int
    hi: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.lo == self.hi:
            return np.full(n, self.lo, dtype=np.int64)
        return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)

    @property
    def mean(self) -> float:
        return (self.lo + self.hi) / 2

    def label(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"uniform {self.lo}–{self.hi}"


_LEN = re.compile(r"^\s*(\d[\d_]*)(?:\s*[:\-]\s*(\d[\d_]*))?\s*$")


def parse_lengths(text: str, what: str) -> Lengths:
    """`1024` (fixed) or `1000:4000` / `1000-4000` (uniform, inclusive)."""
    m = _LEN.match(str(text))
    if not m:
        raise WorkloadSpecError(f"cannot read {what} '{text}'; write N (fixed) or LO:HI (uniform), e.g. 1000:4000")
    lo = int(m.group(1).replace("_", ""))
    hi = int(m.group(2).replace("_", "")) if m.group(2) else lo
    if lo < 1 or hi < lo:
        raise WorkloadSpecError(f"{what} '{text}': need 1 <= LO <= HI")
    return Lengths(lo, hi)


def arrival_times(n: int, rate: float, rng: np.random.Generator, process: str = "poisson", cv: float = 1.0) -> np.ndarray:
    """n arrival times (s) at `rate` req/s: Poisson (exponential gaps) or gamma gaps with coefficient of
    variation `cv` (cv = 1 is Poisson; > 1 burstier). The first request arrives at t = 0."""
    if rate <= 0:
        raise WorkloadSpecError(f"rate {rate}; give --rate > 0 (requests per second)")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif process == "gamma":
        if cv <= 0:
            raise WorkloadSpecError(f"cv {cv}; give --cv > 0")
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    else:
        raise WorkloadSpecError(f"unknown arrival process '{process}'; use poisson or gamma")
    t = np.cumsum(gaps)
    return t - t[0]


def _prefixes(rng: np.random.Generator, n: int, inputs: np.ndarray, prefix_tokens: int, prefix_groups: int):
    if prefix_tokens <= 0:
        return [None] * n, np.zeros(n, dtype=np.int64)
    if prefix_groups < 1:
        raise WorkloadSpecError("--prefix-groups must be >= 1")
    ids = rng.integers(0, prefix_groups, size=n)
    return [f"p{i}" for i in ids], np.minimum(prefix_tokens, inputs)


def synthetic(n: int, rate: float, input_len: Lengths, output_len: Lengths, seed: int = 0,
              process: str = "poisson", cv: float = 1.0, prefix_tokens: int = 0,
              prefix_groups: int = 1) -> list[RequestSpec]:
    """Open-loop synthetic requests; a fixed seed gives the same list."""
    if n < 1:
        raise WorkloadSpecError(f"{n} requests; give --num-requests >= 1")
    rng = np.random.default_rng(seed)
    t = arrival_times(n, rate, rng, process, cv)
    ins, outs = input_len.sample(rng, n), output_len.sample(rng, n)
    pids, plens = _prefixes(rng, n, ins, prefix_tokens, prefix_groups)
    return [RequestSpec(float(t[i]), int(ins[i]), int(outs[i]), pids[i], int(plens[i])) for i in range(n)]


class TraceLine(Strict):
    """One line of a trace file: a request's arrival, lengths and optional shared prefix. Other keys
    (request ids, metadata a trace exporter adds) are ignored; the required ones must be present."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

    arrival_s: float = Field(ge=0, le=1e9)  # ~32 years of trace
    input_tokens: int = Field(ge=1, le=1 << 31)
    output_tokens: int = Field(ge=1, le=1 << 31)
    prefix_id: str | int | None = None
    prefix_tokens: int = Field(0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _timestamp_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "arrival_s" not in data and "timestamp" in data:
            return {("arrival_s" if k == "timestamp" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _prefix_within_input(self) -> TraceLine:
        if self.prefix_id is not None and not 0 < self.prefix_tokens <= self.input_tokens:
            raise ValueError("prefix_id needs 0 < prefix_tokens <= input_tokens")
        return self


_TRACE_FIX = "each line is a JSON object with arrival_s, input_tokens, output_tokens (and optionally prefix_id with prefix_tokens)"


def load_trace(path: str | Path) -> list[RequestSpec]:
    p = Path(path)
    if not p.is_file():
        raise WorkloadSpecError(f"no trace file '{path}'")
    try:
        text = read_text(path, "trace", _TRACE_FIX)
    except ValueError as e:
        raise WorkloadSpecError(str(e)) from None
    out: list[RequestSpec] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadSpecError(f"{path}:{lineno}: not JSON ({e.msg}); {_TRACE_FIX}") from None
        try:
            t = validate(TraceLine, data, f"{path}:{lineno}", _TRACE_FIX)
        except ValueError as e:
            raise WorkloadSpecError(str(e)) from None
        out.append(RequestSpec(t.arrival_s, t.input_tokens, t.output_tokens,
                               None if t.prefix_id is None else str(t.prefix_id), t.prefix_tokens))
    if not out:
        raise WorkloadSpecError(f"trace '{path}' has no requests")
    out.sort(key=lambda r: r.arrival_s)
    return out


def write_trace(specs: list[RequestSpec], path: str | Path) -> Path:
    p = Path(path)
    with p.open("w") as f:
        for s in specs:
            d = {"arrival_s": s.arrival_s, "input_tokens": s.input_tokens, "output_tokens": s.output_tokens}
            if s.prefix_id is not None:
                d.update(prefix_id=s.prefix_id, prefix_tokens=s.prefix_tokens)
            f.write(json.dumps(d) + "\n")
    return p


@dataclass
class ClosedLoop:
    """`concurrency` clients, each sending its next request when the previous one finishes (plus
    `think_s`), until `num_requests` have been sent. Lengths are drawn in order from a seeded stream.
    Client i sends its first request at `i · ramp_s / concurrency` (default: all at once)."""

    concurrency: int
    num_requests: int
    input_len: Lengths
    output_len: Lengths
    seed: int = 0
    think_s: float = 0.0
    prefix_tokens: int = 0
    prefix_groups: int = 1
    ramp_s: float = 0.0

    def start_s(self, client: int) -> float:
        return self.ramp_s * client / self.concurrency

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.num_requests < 1:
            raise WorkloadSpecError("--concurrency and --num-requests must be >= 1")
        rng = np.random.default_rng(self.seed)
        n = self.num_requests
        ins, outs = self.input_len.sample(rng, n), self.output_len.sample(rng, n)
        pids, plens = _prefixes(rng, n, ins, self.prefix_tokens, self.prefix_groups)
        self._specs = [(int(ins[i]), int(outs[i]), pids[i], int(plens[i])) for i in range(n)]

    def spec(self, index: int, arrival_s: float) -> RequestSpec:
        i, o, pid, plen = self._specs[index]
        return RequestSpec(arrival_s, i, o, pid, plen)

"""Requests and workloads: synthetic arrivals (Poisson, gamma), lengths (fixed, uniform), shared
prefixes, closed-loop clients, and replay of a JSONL trace.

A trace line is a JSON object:

    {"arrival_s": 0.125, "input_tokens": 2048, "output_tokens": 256, "prefix_id": "sys-a", "prefix_tokens": 1024}

`arrival_s` (or `timestamp`) is seconds from the start; `prefix_id` / `prefix_tokens` are optional
and go together: requests with the same prefix id share their first `prefix_tokens` prompt tokens.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from graphsim.errors import GraphsimError
from graphsim.validation import Strict, read_text, validate


class WorkloadSpecError(GraphsimError):
    pass


@dataclass(frozen=True, slots=True)  # slots: a million-request workload is ~100 MB, not ~250 MB
class RequestSpec:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int = 0
    warm: bool = False  # the server already saw this prompt: its prefix blocks start in the prefix cache


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


MAX_TOKENS = 1 << 31  # a length beyond any context window (the trace reader's bound, TraceLine)
_LEN = re.compile(r"^\s*(\d[\d_]*)(?:\s*[:\-]\s*(\d[\d_]*))?\s*$")


def parse_lengths(text: str, what: str) -> Lengths:
    """`1024` (fixed) or `1000:4000` / `1000-4000` (uniform, inclusive)."""
    m = _LEN.match(str(text))
    if not m:
        raise WorkloadSpecError(f"cannot read {what} '{text}'; write N (fixed) or LO:HI (uniform), e.g. 1000:4000")
    lo = int(m.group(1).replace("_", ""))
    hi = int(m.group(2).replace("_", "")) if m.group(2) else lo
    if lo < 1 or hi < lo or hi > MAX_TOKENS:
        raise WorkloadSpecError(f"{what} '{text}': need 1 <= LO <= HI <= {MAX_TOKENS:,}")
    return Lengths(lo, hi)


def arrival_times(n: int, rate: float, rng: np.random.Generator, process: str = "poisson", cv: float = 1.0) -> np.ndarray:
    """n arrival times (s) at `rate` req/s: Poisson (exponential gaps) or gamma gaps with coefficient of
    variation `cv` (cv = 1 is Poisson; > 1 burstier). The first request arrives at t = 0."""
    if not rate > 0:  # NaN too
        raise WorkloadSpecError(f"rate {rate}; give --rate > 0 (requests per second)")
    if not 0 < cv < math.inf:  # refused with Poisson arrivals too (which ignore it): no cv is <= 0 or infinite
        raise WorkloadSpecError(f"cv {cv}; give a finite --cv > 0")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif process == "gamma":
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
    if len(inputs) and prefix_tokens > int(inputs.max()):  # a prompt's prefix is part of it, never longer
        raise WorkloadSpecError(f"--shared-prefix {prefix_tokens} is longer than every prompt (the longest is "
                                f"{int(inputs.max())} tokens); give a prefix shorter than --input-len")
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
    input_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TOKENS)
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
        except RecursionError:  # json's decoder recurses once per nesting level
            raise WorkloadSpecError(f"{path}:{lineno}: JSON nested too deeply to read; {_TRACE_FIX}") from None
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
    from graphsim.atomic import atomic_writer

    p = Path(path)
    with atomic_writer(p) as f:  # whole or not at all
        for s in specs:
            d = {"arrival_s": s.arrival_s, "input_tokens": s.input_tokens, "output_tokens": s.output_tokens}
            if s.prefix_id is not None:
                d.update(prefix_id=s.prefix_id, prefix_tokens=s.prefix_tokens)
            f.write(json.dumps(d) + "\n")
    return p


def check_servable(workload: list[RequestSpec] | ClosedLoop, max_model_len: int) -> None:
    """WorkloadSpecError when every prompt is at least max_model_len tokens: vLLM refuses each such request
    (vllm 0.10.1 entrypoints/openai/serving_engine.py `_validate_input`), so the run would serve nothing."""
    specs = workload.all_specs() if isinstance(workload, ClosedLoop) else workload
    shortest = min((s.input_tokens for s in specs), default=0)
    if specs and shortest >= max_model_len:
        raise WorkloadSpecError(f"every prompt is at least {shortest:,} tokens, and max_model_len is {max_model_len:,}: "
                                "vLLM would refuse every request; give shorter --input-len or a larger --max-model-len")


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
    # vLLM bench serve's --max-concurrency with a finite --request-rate: request i is due at schedule[i] and
    # sent at the later of that and a free slot (an asyncio.Semaphore, FIFO). `prebuilt`: the requests
    # (lengths, prefixes), drawn elsewhere; their arrival times are replaced by the send times.
    schedule: tuple[float, ...] = ()
    prebuilt: tuple[RequestSpec, ...] = ()

    def start_s(self, client: int) -> float:
        return self.schedule[client] if self.schedule else self.ramp_s * client / self.concurrency

    def due_s(self, index: int) -> float:
        """The earliest instant request `index` may be sent (0 without a schedule)."""
        return self.schedule[index] if self.schedule else 0.0

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.num_requests < 1:
            raise WorkloadSpecError("--concurrency and --num-requests must be >= 1")
        n = self.num_requests
        if self.schedule and len(self.schedule) != n:
            raise WorkloadSpecError(f"{len(self.schedule)} scheduled times for {n} requests")
        if self.prebuilt:
            if len(self.prebuilt) != n:
                raise WorkloadSpecError(f"{len(self.prebuilt)} prebuilt requests for --num-requests {n}")
            self._specs = [(s.input_tokens, s.output_tokens, s.prefix_id, s.prefix_tokens, s.warm) for s in self.prebuilt]
            return
        rng = np.random.default_rng(self.seed)
        ins, outs = self.input_len.sample(rng, n), self.output_len.sample(rng, n)
        pids, plens = _prefixes(rng, n, ins, self.prefix_tokens, self.prefix_groups)
        self._specs = [(int(ins[i]), int(outs[i]), pids[i], int(plens[i]), False) for i in range(n)]

    def spec(self, index: int, arrival_s: float) -> RequestSpec:
        i, o, pid, plen, warm = self._specs[index]
        return RequestSpec(arrival_s, i, o, pid, plen, warm)

    def all_specs(self) -> list[RequestSpec]:
        """Every request, at its due time (for what needs them before the run: a warm prefix cache)."""
        return [self.spec(k, self.due_s(k)) for k in range(self.num_requests)]


# --- vLLM bench serve's workload (`vllm bench serve --dataset-name random`) -----------------------------
# vllm/benchmarks/serve.py, get_request(): --request-rate inf sends every request at t = 0; otherwise the gap
# before each request is gamma(shape=burstiness, scale=1/(rate·burstiness)) (burstiness 1: exponential,
# a Poisson process; burstiness inf: the constant 1/rate), drawn from numpy's global generator seeded with
# --seed (main_async: np.random.seed(args.seed)); the gaps are summed from the first request on (the first
# request waits its own gap) and, without a ramp-up, rescaled so the last one is due at num_prompts / rate.
# vllm/benchmarks/datasets/random.py, RandomDataset.get_sampling_params(): input lengths uniform integers in
# [floor(L·(1−r)), ceil(L·(1+r))] (L = --random-input-len less the tokenizer's special tokens; 0 for Qwen2
# and Llama-3 completions prompts), output lengths likewise in [max(1, floor(O·(1−r))), max(1, ceil(O·(1+r)))],
# drawn in that order from numpy.default_rng(--seed); every prompt starts with the same --random-prefix-len
# random tokens. Prompts are (offset + i + arange(len)) % vocab sequences with a seeded offset, so a second
# run with the same seed sends the very same prompts (prefix-cache hits on a server that saw them).
BENCH_PREFIX_ID = "random-prefix"


def bench_arrivals(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """When each of n requests is due (s from the benchmark start), as vLLM bench serve's get_request."""
    if not request_rate > 0:
        raise WorkloadSpecError(f"--request-rate {request_rate:g}; give a rate > 0 requests/s, or inf (all at t = 0)")
    if not burstiness > 0:
        raise WorkloadSpecError(f"--burstiness {burstiness:g}; give a factor > 0 (1: Poisson; < 1 burstier)")
    if math.isinf(request_rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / request_rate)
    else:
        gaps = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    due = np.cumsum(gaps)
    return due * (n / request_rate / due[-1]) if due[-1] != 0 else due


def bench_lengths(mean: int, range_ratio: float, floor_one: bool = False) -> Lengths:
    """vLLM's random-dataset length range around `mean` for --random-range-ratio r (0 <= r < 1)."""
    if not 0.0 <= range_ratio < 1.0:
        raise WorkloadSpecError(f"--random-range-ratio {range_ratio:g}; give 0 <= r < 1 (as vLLM's random dataset)")
    lo, hi = math.floor(mean * (1 - range_ratio)), math.ceil(mean * (1 + range_ratio))
    if floor_one:
        lo, hi = max(lo, 1), max(hi, 1)
    if lo < 1:
        raise WorkloadSpecError(f"--random-input-len {mean} with range ratio {range_ratio:g} allows empty prompts; "
                                "raise the length or lower the ratio")
    return Lengths(lo, hi)


def bench_random(num_prompts: int, input_len: int = 1024, output_len: int = 128, range_ratio: float = 0.0,
                 prefix_len: int = 0, request_rate: float = math.inf, burstiness: float = 1.0,
                 max_concurrency: int | None = None, seed: int = 0,
                 warm_prompts: int | Collection[int] | Mapping[int, int] = 0,
                 prompt_keys: bool = False) -> list[RequestSpec] | ClosedLoop:
    """The requests `vllm bench serve --dataset-name random` sends (defaults: vLLM's, 1024 in / 128 out, rate inf).
    `warm_prompts`: prompts the server already saw (an earlier run with the same seed), by index, or a count k for
    the first k; they start in its prefix cache. A mapping index → tokens gives how many of the prompt's first
    tokens are cached (an earlier run with the same seed and another input length sent the same tokens up to the
    shorter length: vLLM's RandomDataset draws the offsets after lengths that do not consume its generator when
    range_ratio is 0, and builds prompt i from offsets[i] + i + arange(input_len)). Without --max-concurrency:
    arrivals at the due times; with it: at most that many in flight, each sent at the later of its due time and a
    free slot. `prompt_keys`: every prompt not warm is keyed by its seed and index over its whole length (prefix id
    `prompt-{seed}-{i}`), so a later workload on the same engines (`simulate_after`, `SimulationSetup.prefix_cache`)
    hits what this one left cached; not with --random-prefix-len (a request has one prefix key)."""
    if num_prompts < 1:
        raise WorkloadSpecError(f"--num-prompts {num_prompts}; give >= 1")
    if prefix_len < 0:
        raise WorkloadSpecError(f"--random-prefix-len {prefix_len}; give >= 0")
    if prompt_keys and prefix_len:
        raise WorkloadSpecError("prompts keyed for a later workload take no --random-prefix-len (a request has one "
                                "prefix key); give --random-prefix-len 0")
    rng = np.random.default_rng(seed)
    ins = bench_lengths(input_len, range_ratio).sample(rng, num_prompts) + prefix_len
    outs = bench_lengths(output_len, range_ratio, floor_one=True).sample(rng, num_prompts)
    due = bench_arrivals(num_prompts, request_rate, burstiness, seed)
    if isinstance(warm_prompts, int):
        cached: dict[int, int | None] = dict.fromkeys(range(warm_prompts))
    elif isinstance(warm_prompts, Mapping):
        cached = {i: int(t) for i, t in warm_prompts.items() if t > 0}
    else:
        cached = dict.fromkeys(warm_prompts)
    specs = []
    for i in range(num_prompts):
        if i in cached:  # its prompt (or its first tokens) was computed before: one key per prompt covers it
            held = cached[i]
            pid, plen, warm = f"prompt-{seed}-{i}", int(ins[i]) if held is None else min(held, int(ins[i])), True
        elif prompt_keys:  # its whole prompt, by the same key as a warm one
            pid, plen, warm = f"prompt-{seed}-{i}", int(ins[i]), False
        else:
            pid, plen, warm = (BENCH_PREFIX_ID, prefix_len, False) if prefix_len else (None, 0, False)
        specs.append(RequestSpec(float(due[i]), int(ins[i]), int(outs[i]), pid, plen, warm))
    if max_concurrency is None:
        return specs
    if max_concurrency < 1:
        raise WorkloadSpecError(f"--max-concurrency {max_concurrency}; give >= 1")
    return ClosedLoop(max_concurrency, num_prompts, Lengths(int(ins.min()), int(ins.max())),
                      Lengths(int(outs.min()), int(outs.max())), seed, prefix_tokens=prefix_len,
                      schedule=tuple(float(t) for t in due), prebuilt=tuple(specs))


def warm_prefixes(workload: list[RequestSpec] | ClosedLoop) -> list[tuple[str, int]]:
    """(prefix id, tokens) of the prompts a warm server holds, in the order it saw them."""
    specs = workload.all_specs() if isinstance(workload, ClosedLoop) else workload
    return [(s.prefix_id, s.prefix_tokens) for s in specs if s.warm and s.prefix_id is not None]

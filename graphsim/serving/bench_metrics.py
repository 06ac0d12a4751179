"""A simulation's results as `vllm bench serve --save-result` writes them: the same keys, the same units.

Every definition follows vLLM's benchmark client, vllm/benchmarks/serve.py (read at commit 009e6d4a):
- `calculate_metrics()`: per successful request TTFT (s), E2EL (`latency`, s), the inter-token gaps
  (`itl`, s) and, for output_len > 1, TPOT = (latency − ttft) / (output_len − 1); mean, median and std
  (population, `np.std`) and the selected percentiles (`np.percentile`, linear) of each, in ms, over
  the requests (TTFT, TPOT, E2EL) or over every gap of every request pooled (ITL); throughputs are
  totals over the benchmark duration (`completed / dur_s`, `sum(output_lens) / dur_s`,
  `(total_input + sum(output_lens)) / dur_s`).
- `benchmark()`: the duration runs from the benchmark start (before the first request is due) until
  the last request finishes; a request's times count from when it was sent (after the
  --max-concurrency semaphore), and `queue_times` is the wait for that semaphore;
  `max_concurrent_requests` sweeps the half-open intervals [start, start + latency);
  `max_output_tokens_per_s` buckets every token's time into whole seconds from the first start.
- `process_one_metric()`: the keys `mean_X_ms`, `median_X_ms`, `std_X_ms`, `pP_X_ms` (P written as an
  integer when it is one: `p99`, `p99.9`) for X in --percentile-metrics (default `ttft,tpot,itl`),
  plus `client_queue_time` (with --max-concurrency) and `e2el_including_client_queue` (with it and a
  finite rate).
- `main_async()`: the setup keys (date, backend, model_id, num_prompts, request_rate — the string
  "inf" for inf —, burstiness, max_concurrency), and without --save-detailed the per-request lists
  input_lens, output_lens, start_times, ttfts, itls, generated_texts and errors are dropped.

What the simulation cannot give is stated in the `graphsim` block rather than made up: per-request ITL
lists (the simulator pools inter-token gaps; the pooled ITL statistics are exact) and generated text.
`max_output_tokens_per_s` is counted from the iteration log where the simulation kept one and ran without
speculative decoding: each iteration's decode tokens at its end and every request's first token at its
first-token time, in whole seconds from the first start (`iteration_peak_tokens_per_s`; the engine's times,
which the client sees a streaming turn later). Otherwise (no log kept, speculative decoding) it is derived by
spreading each request's tokens evenly between its first and last token, which flattens bursts: DeepSeek-R1's
GPUStack 4000/200 run gave 1,636 tok/s that way against 3,089 from its iterations (measured 2,922).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from graphsim.atomic import atomic_writer
from graphsim.serving.simulator import SimulationResult

# --percentile-metrics: vLLM's allowed names and its default for generative models (serve.py, add_cli_args /
# main_async `default_percentile_metrics`).
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")
DEFAULT_METRIC_PERCENTILES = (99.0,)  # serve.py: --metric-percentiles default "99"
# Per-request lists `main_async` removes unless --save-detailed.
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


@dataclass(frozen=True)
class BenchSettings:
    """The `vllm bench serve` arguments the result file records."""

    model_id: str
    num_prompts: int
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    backend: str = "vllm"
    label: str | None = None
    tokenizer_id: str | None = None
    percentile_metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS
    metric_percentiles: tuple[float, ...] = DEFAULT_METRIC_PERCENTILES
    goodput_ms: dict[str, float] | None = None  # --goodput ttft:MS tpot:MS e2el:MS
    save_detailed: bool = False


def parse_percentiles(text: str) -> tuple[float, ...]:
    """--metric-percentiles "50,90,99" → (50.0, 90.0, 99.0); each in [0, 100]."""
    from graphsim.serving.requests import WorkloadSpecError

    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise WorkloadSpecError(f"--metric-percentiles '{text}': give comma-separated numbers, e.g. 50,90,99") from None
    if not values or any(not 0 <= p <= 100 for p in values):
        raise WorkloadSpecError(f"--metric-percentiles '{text}': each percentile must be in [0, 100]")
    return values


def parse_percentile_metrics(text: str) -> tuple[str, ...]:
    from graphsim.serving.requests import WorkloadSpecError

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in PERCENTILE_METRICS]
    if not names or bad:
        raise WorkloadSpecError(f"--percentile-metrics '{text}': use names from {','.join(PERCENTILE_METRICS)}")
    return names


def percentile_word(p: float) -> str:
    """vLLM's key spelling of a percentile: 99 → '99', 99.9 → '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def _stats(values: np.ndarray, percentiles: Sequence[float]) -> tuple[float, float, float, list[tuple[float, float]]]:
    """mean, median, std, [(p, value)] in ms of values in s, as vLLM's `np.mean(x or 0)` etc. (0 when empty)."""
    v = values if len(values) else np.zeros(1)
    return (float(np.mean(v)) * 1e3, float(np.median(v)) * 1e3, float(np.std(v)) * 1e3,
            [(p, float(np.percentile(v, p)) * 1e3) for p in percentiles])


def pooled_itls(res: SimulationResult) -> tuple[np.ndarray, np.ndarray]:
    """Every inter-token gap of every request (s), as (values, counts): the simulator's samples are iteration times,
    each weighted by the number of requests that got a token then (a count), and run-length encoded; value i stands
    for counts[i] gaps of vLLM's pooled list. Not expanded: a long run holds ~10⁹ gaps."""
    values, weights, counts = res.itl_runs
    per = np.rint(np.asarray(weights, dtype=np.float64)).astype(np.int64)  # requests per iteration: whole numbers
    return np.asarray(values, dtype=np.float64), per * np.asarray(counts, dtype=np.int64)


def _counted_stats(values: np.ndarray, counts: np.ndarray,
                   percentiles: Sequence[float]) -> tuple[float, float, float, list[tuple[float, float]]]:
    """`_stats` of the list holding counts[i] copies of values[i], without building it: mean and population std
    weighted by the counts; median and percentiles by numpy's default (linear) rule on the sorted list — position
    h = (N − 1)·p/100 between the elements at ⌊h⌋ and ⌈h⌉ — found in the cumulative counts."""
    keep = counts > 0
    v, c = values[keep], counts[keep]
    if len(v) == 0:
        return _stats(np.zeros(0), percentiles)
    order = np.argsort(v, kind="stable")
    v, c = v[order], c[order]
    n = int(c.sum())
    mean = float((v * c).sum() / n)
    std = float(np.sqrt((c * (v - mean) ** 2).sum() / n))
    ends = np.cumsum(c)  # the sorted list's element k is v[searchsorted(ends, k, 'right')]

    def at(k: int) -> float:
        return float(v[int(np.searchsorted(ends, k, side="right"))])

    def pct(q: float) -> float:
        h = (n - 1) * q / 100
        lo, hi = int(np.floor(h)), int(np.ceil(h))
        return at(lo) + (at(hi) - at(lo)) * (h - lo)

    return mean * 1e3, pct(50) * 1e3, std * 1e3, [(q, pct(q) * 1e3) for q in percentiles]


def peak_concurrency(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most requests in flight at once over half-open intervals [start, end) (a departure before an arrival
    at the same instant), as calculate_metrics' sweep."""
    events = sorted([(float(s), 1) for s in starts] + [(float(e), -1) for e in ends])
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def peak_tokens_per_s(starts: np.ndarray, firsts: np.ndarray, finishes: np.ndarray, outs: np.ndarray) -> float:
    """Most output tokens in one whole-second bucket counted from the first start; each request's tokens spread
    evenly from its first to its last token (derived: the simulator keeps no per-token times)."""
    if len(starts) == 0:
        return 0.0
    t0 = float(starts.min())
    n_buckets = int(np.ceil(float(finishes.max()) - t0)) + 1
    buckets = np.zeros(n_buckets)
    for f, e, n in zip(firsts, finishes, outs, strict=True):
        times = np.linspace(f, e, int(n)) if n > 1 else np.asarray([f])
        idx = (times - t0).astype(np.int64)
        np.add.at(buckets, idx[(idx >= 0) & (idx < n_buckets)], 1)
    return float(buckets.max())


def iteration_peak_tokens_per_s(res: SimulationResult, starts: np.ndarray) -> float | None:
    """Most output tokens in one whole-second bucket counted from the first start, from the iteration log: every
    decode token at the end of its iteration and every completed request's first token at its first-token time.
    None where the log was not kept or the setup decodes speculatively (a verifying request emits a variable
    number of tokens, which the log does not count)."""
    its = getattr(res, "iterations", None)
    if len(starts) == 0 or not its or "decode_seqs" not in its or len(its["decode_seqs"]) == 0:
        return None
    if getattr(res.setup, "speculative", None) is not None:
        return None
    table = res.requests
    first = table.column("first_token_t")[table.completed_mask]
    t0 = float(starts.min())
    times = np.concatenate([its["start_s"] + its["dur_s"], first]) - t0
    tokens = np.concatenate([its["decode_seqs"].astype(np.float64), np.ones(len(first))])
    keep = (times >= 0) & (tokens > 0)
    if not keep.any():
        return 0.0
    return float(np.bincount(times[keep].astype(np.int64), weights=tokens[keep]).max())


def bench_result(res: SimulationResult, settings: BenchSettings, due_s: Sequence[float] | np.ndarray | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result document of `vllm bench serve --save-result` for a simulation of its workload. `due_s`: when
    each request was due (the arrival schedule); a request sent later waited for --max-concurrency.
    `extra` is stored under the key `graphsim` (version, engine, profile, sources)."""
    table = res.requests
    ok = table.completed_mask
    arrival_all, first_all, finish_all = (table.column(k) for k in ("arrival", "first_token_t", "finish_t"))
    outs_all, ins_all = table.column("max_tokens").astype(np.int64), table.column("num_prompt_tokens").astype(np.int64)
    start, first, finish, outs, ins = arrival_all[ok], first_all[ok], finish_all[ok], outs_all[ok], ins_all[ok]
    n_all, n_ok = len(ok), int(ok.sum())
    ttft, e2el = first - start, finish - start
    multi = outs > 1
    tpot = (e2el[multi] - ttft[multi]) / (outs[multi] - 1)
    itl_values, itl_counts = pooled_itls(res)
    # The benchmark clock starts at 0, before the first request is due; it stops when the last one finishes.
    duration = float(finish.max()) if n_ok else 0.0
    dur = duration if duration > 0 else math.nan
    due = np.asarray(due_s if due_s is not None else arrival_all, dtype=np.float64)
    queue_all = arrival_all - due  # waited for a --max-concurrency slot
    queue = queue_all[ok]
    total_in, total_out = int(ins.sum()), int(outs.sum())
    peak = iteration_peak_tokens_per_s(res, start)
    s = settings
    good = None
    if s.goodput_ms:
        met = np.ones(n_ok, dtype=bool)
        tp_all = np.zeros(n_ok)
        tp_all[multi] = tpot  # vLLM: a request with one output token has TPOT 0 for goodput
        for name, values in (("ttft", ttft), ("tpot", tp_all), ("e2el", e2el)):
            if name in s.goodput_ms:
                met &= s.goodput_ms[name] / 1e3 >= values
        good = float(met.sum()) / dur
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": s.backend, "backend": s.backend,
        "label": s.label, "model_id": s.model_id, "tokenizer_id": s.tokenizer_id or s.model_id,
        "num_prompts": s.num_prompts,
        "request_rate": "inf" if math.isinf(s.request_rate) else s.request_rate,
        "burstiness": s.burstiness, "max_concurrency": s.max_concurrency,
        "duration": duration, "completed": n_ok, "failed": n_all - n_ok,
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": n_ok / dur, "request_goodput": good,
        "output_throughput": total_out / dur, "total_token_throughput": (total_in + total_out) / dur,
        "input_lens": ins_all.tolist(),
        "output_lens": np.where(ok, outs_all, 0).tolist(),
        "ttfts": np.where(ok, first_all - arrival_all, 0.0).tolist(),
        "latencies": np.where(ok, finish_all - arrival_all, 0.0).tolist(),
        "start_times": arrival_all.tolist(),
        "queue_times": queue_all.tolist(),
        "generated_texts": ["" for _ in range(n_all)],
        "errors": ["" if k else "prompt longer than max_model_len (rejected)" for k in ok.tolist()],
        "max_output_tokens_per_s": peak if peak is not None else peak_tokens_per_s(start, first, finish, outs),
        "max_concurrent_requests": peak_concurrency(start, finish),
        "rtfx": 0.0,
    }
    series = {"ttft": ttft, "tpot": tpot, "itl": None, "e2el": e2el}
    selected = [(m, series[m]) for m in s.percentile_metrics]
    if s.max_concurrency is not None:
        selected.append(("client_queue_time", queue))
        if not math.isinf(s.request_rate):
            selected.append(("e2el_including_client_queue", e2el + queue))
    for name, values in selected:
        mean, median, std, pcts = (_stats(values, s.metric_percentiles) if values is not None
                                   else _counted_stats(itl_values, itl_counts, s.metric_percentiles))
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = mean, median, std
        for p, v in pcts:
            out[f"p{percentile_word(p)}_{name}_ms"] = v
    if not s.save_detailed:
        for key in DETAILED_KEYS:
            out.pop(key, None)
    else:
        out.pop("itls", None)  # not simulated per request (see the module docstring)
    out["graphsim"] = {
        **(extra or {}),
        "not_simulated": ["itls (per-request lists; the pooled ITL statistics are exact)",
                          "generated_texts (empty strings)"] if s.save_detailed else [],
        "derived": {"max_output_tokens_per_s": "each iteration's decode tokens at its end and each first token, "
                    "from the iteration log (engine times)" if peak is not None
                    else "tokens spread evenly between each request's first and last token"},
    }
    return out


def write_result(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write the result document whole or not at all (graphsim.atomic: a temporary file beside it, renamed)."""
    with atomic_writer(path) as f:
        json.dump(doc, f, indent=1, default=float)

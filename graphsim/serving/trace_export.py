"""Exports of a simulation: the per-iteration log (JSONL or CSV), per-request results (CSV or Parquet)
and a Chrome trace for Perfetto. Every file is written through `graphsim.atomic` (a temporary file beside
the target, renamed when complete) and streamed: memory does not grow with the file.

The Chrome trace (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)
has one process per replica: a track of iterations (complete events, "X"; args: tokens, sequences,
prefill tokens, decode sequences, time source), counters of running / waiting requests and KV blocks
in use, and one async track per request (front end → queued → prefill → decode; the front end is the delay
between the client sending it and the engine seeing it, serving/frontend.py, its source `derived`). Open it at ui.perfetto.dev. Every
request is in it unless a sample is asked for (`sample=N`: N requests evenly spaced by id); its
`otherData` states how many requests it shows of how many.
"""

from __future__ import annotations

import csv
import heapq
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from graphsim.atomic import atomic_path, atomic_writer
from graphsim.costing.interpolate import SOURCES
from graphsim.errors import GraphsimError
from graphsim.serving.records import IterationLog, RequestTable
from graphsim.serving.simulator import SimulationResult

SRC_NAMES = [s.value for s in SOURCES]
ROW_DTYPE = np.dtype([(n, np.float64 if n in IterationLog._FLOAT else np.int64) for n in IterationLog.NAMES])
BATCH = 65536  # rows converted to Python objects at a time


class ExportError(GraphsimError):
    pass


def check_suffix(path: str, option: str, allowed: tuple[str, ...]) -> None:
    if Path(path).suffix.lower() not in allowed:
        raise ExportError(f"{option} '{path}': give a path ending in {' or '.join(allowed)}")


# --- the iteration log ---------------------------------------------------------------------------
class IterationSpill:
    """An `IterationLog` sink that keeps no rows in memory: each chunk, sorted by start time, goes to a
    file in a scratch directory; `rows()` merges them into one time-ordered stream (the order
    `IterationLog.arrays()` gives: stable on start time, in logging order)."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.files = directory, []

    def __call__(self, chunk: dict[str, np.ndarray]) -> None:
        order = np.argsort(chunk["start_s"], kind="stable")
        rec = np.empty(len(order), dtype=ROW_DTYPE)
        for name in IterationLog.NAMES:
            rec[name] = chunk[name][order]
        f = self.directory / f"{len(self.files):06d}.rows"
        rec.tofile(f)
        self.files.append(f)

    def rows(self) -> Iterator[tuple]:
        return heapq.merge(*(_read_rows(f) for f in self.files), key=lambda row: row[0])


def _read_rows(path: Path) -> Iterator[tuple]:
    with path.open("rb") as f:
        while True:
            block = np.fromfile(f, dtype=ROW_DTYPE, count=BATCH)
            if not len(block):
                return
            yield from block.tolist()


def kept_rows(res: SimulationResult) -> Iterator[tuple]:
    """The rows a result kept (`res.iterations`), in time order."""
    it = res.iterations
    n = len(it["start_s"])
    for a in range(0, n, BATCH):
        yield from zip(*(it[k][a:a + BATCH].tolist() for k in IterationLog.NAMES), strict=True)


def write_iteration_rows(rows: Iterable[tuple], path: str | Path) -> Path:
    """One row per iteration; `.csv` writes CSV, anything else JSON lines."""
    p = Path(path)
    names = IterationLog.NAMES
    src = names.index("source")
    with atomic_writer(p, newline="") as f:
        if p.suffix.lower() == ".csv":
            w = csv.writer(f)
            w.writerow(names)
            for row in rows:
                w.writerow(_named_source(row, src))
        else:
            for row in rows:
                f.write(json.dumps(dict(zip(names, _named_source(row, src), strict=True))) + "\n")
    return p


def _named_source(row: tuple, src: int) -> list:
    out = list(row)
    out[src] = SRC_NAMES[int(out[src])]
    return out


def write_iteration_log(res: SimulationResult, path: str | Path) -> Path:
    """The iteration log of a result that kept its rows (the default of `simulate`)."""
    return write_iteration_rows(kept_rows(res), path)


# --- per-request results ---------------------------------------------------------------------------
def request_columns(res: SimulationResult) -> dict[str, np.ndarray]:
    """One row per request (by id, arrival order): its lengths, replica, times (s: sent, reached the engine after
    the front end, admitted, first token, finished), the front end's delay and latencies (ms; TTFT,
    TPOT over the output tokens after the first as vllm bench serve counts it, E2E), preemptions and
    prefix-cache hit; a disaggregated run adds its prefill end and KV transfer. NaN where it does not
    apply (a rejected request; TPOT of a one-token output)."""
    t: RequestTable = res.requests
    arrival, first, finish = t.column("arrival"), t.column("first_token_t"), t.column("finish_t")
    outs = t.column("max_tokens")
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outs > 1, (finish - first) / np.maximum(outs - 1, 1), np.nan) * 1e3
    reached = t.column("reached_t")
    cols = {"id": t.column("id"), "arrival_s": arrival, "replica": t.column("replica"),
            "input_tokens": t.column("num_prompt_tokens"), "output_tokens": outs,
            "reached_engine_s": reached, "frontend_ms": (reached - arrival) * 1e3,
            "admitted_s": t.column("admitted_t"), "first_token_s": first, "finish_s": finish,
            "ttft_ms": (first - arrival) * 1e3, "tpot_ms": tpot, "e2e_ms": (finish - arrival) * 1e3,
            "preemptions": t.column("preemptions"), "prefix_hit_tokens": np.maximum(t.column("hit_tokens"), 0),
            "rejected": t.column("rejected")}
    for name in ("prefill_done_s", "transfer_start_s", "transfer_end_s", "transfer_bytes"):
        extra = getattr(res, name, None)
        if isinstance(extra, np.ndarray) and len(extra) == len(t):
            cols[name] = extra
    return cols


def write_requests(res: SimulationResult, path: str | Path) -> Path:
    """Per-request results (`request_columns`): `.csv` (empty cells for NaN) or `.parquet` (pyarrow),
    written in batches."""
    p = Path(path)
    check_suffix(str(p), "--requests-out", (".csv", ".parquet"))
    cols = request_columns(res)
    n = len(res.requests)
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise ExportError(f"--requests-out '{p}': Parquet needs pyarrow (pip install pyarrow), "
                              "or give a .csv path") from None
        schema = pa.schema([(k, pa.from_numpy_dtype(v.dtype)) for k, v in cols.items()])
        with atomic_path(p) as tmp, pq.ParquetWriter(tmp, schema) as w:
            for a in range(0, max(n, 1), BATCH):
                w.write_table(pa.table({k: v[a:a + BATCH] for k, v in cols.items()}, schema=schema))
        return p
    with atomic_writer(p, newline="") as f:
        w = csv.writer(f)
        w.writerow(list(cols))
        for a in range(0, n, BATCH):
            parts = [v[a:a + BATCH].tolist() for v in cols.values()]
            for row in zip(*parts, strict=True):
                w.writerow(["" if isinstance(x, float) and math.isnan(x) else x for x in row])
    return p


# --- the Chrome / Perfetto trace -------------------------------------------------------------------
class ChromeTraceWriter:
    """Streams a Chrome trace to an open text file: metadata at once, iteration events as the simulation
    logs them (an `IterationLog` sink), request tracks at the end (`finish`)."""

    def __init__(self, f: IO[str], replicas: int, sample: int | None = None) -> None:
        if sample is not None and sample < 1:
            raise ExportError(f"--trace-sample {sample}: give a number of requests >= 1 (or leave it out for all)")
        self.f, self.sample, self.events = f, sample, 0
        f.write('{"displayTimeUnit": "ms", "traceEvents": [\n')
        for rep in range(replicas):
            self._event({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
            self._event({"name": "thread_name", "ph": "M", "pid": rep, "tid": 0, "args": {"name": "iterations"}})

    def _event(self, e: dict[str, Any]) -> None:
        if self.events:
            self.f.write(",\n")
        self.f.write(json.dumps(e, separators=(",", ":")))
        self.events += 1

    def iterations(self, it: dict[str, np.ndarray]) -> None:
        n = len(it["start_s"])
        start_us, dur_us = (it["start_s"] * 1e6).tolist(), (it["dur_s"] * 1e6).tolist()
        cols = {k: it[k].tolist() for k in IterationLog.NAMES if k not in ("start_s", "dur_s")}
        for i in range(n):
            pre, dec, rep = cols["prefill_tokens"][i], cols["decode_seqs"][i], cols["replica"][i]
            name = "prefill+decode" if pre and dec else ("prefill" if pre else "decode")
            self._event({"name": name, "ph": "X", "pid": rep, "tid": 0, "ts": start_us[i], "dur": dur_us[i],
                         "args": {"tokens": cols["tokens"][i], "seqs": cols["seqs"][i], "prefill_tokens": pre,
                                  "decode_seqs": dec, "preempted": cols["preempted"][i],
                                  "source": SRC_NAMES[cols["source"][i]], "host_ms": cols["host_s"][i] * 1e3,
                                  "host_source": "derived"}})
            self._event({"name": "requests", "ph": "C", "pid": rep, "ts": start_us[i],
                         "args": {"running": cols["running"][i], "waiting": cols["waiting"][i]}})
            self._event({"name": "kv blocks used", "ph": "C", "pid": rep, "ts": start_us[i],
                         "args": {"blocks": cols["kv_used_blocks"][i]}})

    def finish(self, table: RequestTable) -> dict[str, Any]:
        """Write the request tracks (all, or the sample) and close the JSON; returns its `otherData`."""
        done = np.flatnonzero(table.completed_mask)
        if self.sample is not None and self.sample < len(done):
            done = done[np.unique(np.linspace(0, len(done) - 1, self.sample).round().astype(np.int64))]
        for a in range(0, len(done), BATCH):
            ids = done[a:a + BATCH]
            marked = ("arrival", "reached_t", "admitted_t", "first_token_t", "finish_t")
            cols = {k: table.column(k)[ids].tolist() for k in (*marked, "replica", "num_prompt_tokens", "max_tokens",
                                                               "preemptions")}
            for j, rid in enumerate(ids.tolist()):
                base = {"cat": "request", "id": rid, "pid": cols["replica"][j], "tid": 1}
                marks = [cols[k][j] for k in marked]
                for name, ta, tb in zip(("front end", "queued", "prefill", "decode"), marks, marks[1:], strict=False):
                    if tb > ta:
                        args = {"request": rid, "input_tokens": cols["num_prompt_tokens"][j],
                                "output_tokens": cols["max_tokens"][j], "preemptions": cols["preemptions"][j]}
                        if name == "front end":  # the host model's front-end constants (host.py)
                            args["source"] = "derived"
                        self._event(dict(base, name=name, ph="b", ts=ta * 1e6, args=args))
                        self._event(dict(base, name=name, ph="e", ts=tb * 1e6))
        total = int(table.completed_mask.sum())
        other = {"generator": "graphsim simulate", "requests_shown": len(done), "requests_completed": total,
                 "sample": ("all completed requests" if len(done) == total
                            else f"{len(done)} of {total} completed requests, evenly spaced by id (--trace-sample)")}
        self.f.write("\n], \"otherData\": " + json.dumps(other) + "}\n")
        return other


def chrome_trace(res: SimulationResult, sample: int | None = None) -> dict:
    """The trace of a result that kept its iteration rows, as a dict (small runs and tests)."""
    buf = io.StringIO()
    w = ChromeTraceWriter(buf, res.setup.replicas, sample)
    w.iterations(res.iterations)
    w.finish(res.requests)
    return json.loads(buf.getvalue())


def write_chrome_trace(res: SimulationResult, path: str | Path, sample: int | None = None) -> Path:
    p = Path(path)
    with atomic_writer(p) as f:
        w = ChromeTraceWriter(f, res.setup.replicas, sample)
        w.iterations(res.iterations)
        w.finish(res.requests)
    return p


def fan_out(*sinks: Callable[[dict[str, np.ndarray]], None] | None) -> Callable[[dict[str, np.ndarray]], None] | None:
    """One `IterationLog` sink that feeds several (None when there are none)."""
    live = [s for s in sinks if s is not None]
    if not live:
        return None

    def feed(chunk: dict[str, np.ndarray]) -> None:
        for s in live:
            s(chunk)

    return feed

"""Exports of a simulation: the per-iteration log (JSONL or CSV) and a Chrome trace for Perfetto.

The Chrome trace (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)
has one process per replica: a track of iterations (complete events, "X"; args: tokens, sequences,
prefill tokens, decode sequences, time source), counters of running / waiting requests and KV blocks
in use, and one async track per request (queued → prefill → decode). Open it at ui.perfetto.dev.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from graphsim.costing.interpolate import SOURCES
from graphsim.serving.simulator import SimulationResult


def write_iteration_log(res: SimulationResult, path: str | Path) -> Path:
    """One row per iteration; `.csv` writes CSV, anything else JSON lines."""
    p = Path(path)
    it = res.iterations
    names = list(it)
    cols = [it[k] for k in names]
    src_names = [s.value for s in SOURCES]
    with p.open("w", newline="") as f:
        if p.suffix.lower() == ".csv":
            w = csv.writer(f)
            w.writerow(names)
            for row in zip(*cols, strict=True):
                w.writerow([src_names[int(v)] if k == "source" else _py(v) for k, v in zip(names, row, strict=True)])
        else:
            for row in zip(*cols, strict=True):
                d = {k: (src_names[int(v)] if k == "source" else _py(v)) for k, v in zip(names, row, strict=True)}
                f.write(json.dumps(d) + "\n")
    return p


def _py(v):
    return float(v) if isinstance(v, (float, np.floating)) else int(v)


def chrome_trace(res: SimulationResult, max_requests: int = 2000, max_counters: int = 200_000) -> dict:
    it = res.iterations
    src_names = [s.value for s in SOURCES]
    events: list[dict] = []
    for rep in range(res.setup.replicas):
        events.append({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
        events.append({"name": "thread_name", "ph": "M", "pid": rep, "tid": 0, "args": {"name": "iterations"}})
    n = len(it["start_s"])
    start_us, dur_us = it["start_s"] * 1e6, it["dur_s"] * 1e6
    for i in range(n):
        pre, dec = int(it["prefill_tokens"][i]), int(it["decode_seqs"][i])
        name = "prefill+decode" if pre and dec else ("prefill" if pre else "decode")
        events.append({"name": name, "ph": "X", "pid": int(it["replica"][i]), "tid": 0, "ts": float(start_us[i]),
                       "dur": float(dur_us[i]),
                       "args": {"tokens": int(it["tokens"][i]), "seqs": int(it["seqs"][i]), "prefill_tokens": pre,
                                "decode_seqs": dec, "preempted": int(it["preempted"][i]),
                                "source": src_names[int(it["source"][i])]}})
    step = max(1, math.ceil(n / max_counters))
    for i in range(0, n, step):
        rep = int(it["replica"][i])
        events.append({"name": "requests", "ph": "C", "pid": rep, "ts": float(start_us[i]),
                       "args": {"running": int(it["running"][i]), "waiting": int(it["waiting"][i])}})
        events.append({"name": "kv blocks used", "ph": "C", "pid": rep, "ts": float(start_us[i]),
                       "args": {"blocks": int(it["kv_used_blocks"][i])}})
    for r in res.completed[:max_requests]:
        base = {"cat": "request", "id": r.id, "pid": r.replica, "tid": 1}
        phases = [("queued", r.arrival, r.admitted_t), ("prefill", r.admitted_t, r.first_token_t),
                  ("decode", r.first_token_t, r.finish_t)]
        for name, a, b in phases:
            if b > a:
                events.append(dict(base, name=name, ph="b", ts=a * 1e6,
                                   args={"request": r.id, "input_tokens": r.num_prompt_tokens, "output_tokens": r.max_tokens,
                                         "preemptions": r.preemptions}))
                events.append(dict(base, name=name, ph="e", ts=b * 1e6))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "graphsim simulate", "requests_shown": min(len(res.completed), max_requests)}}


def write_chrome_trace(res: SimulationResult, path: str | Path, max_requests: int = 2000) -> Path:
    p = Path(path)
    p.write_text(json.dumps(chrome_trace(res, max_requests)))
    return p

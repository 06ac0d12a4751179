"""torch.profiler Chrome-trace JSON (kineto) → Capture.

GPU traces: the launches are the device events (`kernel`, `gpu_memcpy`, `gpu_memset`), ordered by
device start time. Each is tied to the host call that launched it through its `correlation` id
(the `cuda_runtime` / `cuda_driver` event) — that host time and thread place it in an iteration
range — and, through `External id`, to the aten op that issued it (its name and recorded input
shapes).

CPU-only traces: the launches are the top-level `cpu_op` events, those not nested in another op
on the same thread (`aten::linear`, not the `aten::addmm` inside it). Nested ops are read only to
tell whether the top-level op did real work (a `reshape` that copies) or only re-described memory.
A launch's duration is then the host time of the op, including its nested ops.

Iterations come from `user_annotation` ranges (`record_function`) and `ProfilerStep#N` (see
`ranges.py`). `.json.gz` files are read directly.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from graphsim.capture import Capture, CaptureError, Iteration, Launch, LaunchClass
from graphsim.importers.captures.classify import classify_cpu_op, classify_kernel
from graphsim.importers.captures.ranges import IterationBuckets, Range, RangeIndex, pick_iterations

_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_RANGE_CATS = {"user_annotation"}
_TOL_US = 0.01  # rounding slack of the trace's microsecond timestamps


def read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:  # zlib.error: a damaged .gz body
        raise CaptureError(f"cannot read '{path}': {e}; give the trace file torch.profiler wrote, whole") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise CaptureError(f"'{path}' is not valid JSON ({e or 'nested too deeply to read'})") from None


def _thread(e: dict[str, Any]) -> str:
    return f"{e.get('pid', '')}:{e.get('tid', '')}"


def _shapes(args: dict[str, Any]) -> tuple[tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None]:
    dims = args.get("Input Dims")
    types = args.get("Input type")
    shapes = None
    if isinstance(dims, list):
        out = []
        for d in dims:
            if isinstance(d, list) and all(isinstance(x, int) for x in d):
                out.append(tuple(d))
            else:  # tensor lists and scalars: no single shape
                out.append(())
        shapes = tuple(out)
    dtypes = tuple(str(t) for t in types) if isinstance(types, list) else None
    return shapes, dtypes


def _events(data: Any, path: Path) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        events = data["traceEvents"]
    elif isinstance(data, list):
        events = data
    else:
        raise CaptureError(f"'{path}' is not a Chrome trace (no traceEvents list); export one with "
                           "torch.profiler's prof.export_chrome_trace(PATH)")
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e:
            try:
                e["_ts"] = float(e["ts"])
                e["_dur"] = max(0.0, float(e.get("dur", 0.0)))
            except (TypeError, ValueError):
                continue
            e["_cat"] = str(e.get("cat", "")).lower()
            out.append(e)
    return out


def load_torch_trace(path: str | Path, iteration_pattern: str | None = None) -> Capture:
    p = Path(path)
    return torch_trace_capture(p, read_json(p), iteration_pattern)


def torch_trace_capture(p: Path, data: Any, iteration_pattern: str | None = None) -> Capture:
    events = _events(data, p)
    if not events:
        raise CaptureError(f"'{p}' holds no complete ('X') events; record with torch.profiler and "
                           "export_chrome_trace")
    ranges = [Range(e["name"], e["_ts"], e["_ts"] + e["_dur"], _thread(e)) for e in events
              if e["_cat"] in _RANGE_CATS or (e["_cat"] == "cpu_op" and str(e.get("name", "")).startswith("ProfilerStep#"))]
    device_events = [e for e in events if e["_cat"] in _DEVICE_CATS]
    if device_events:
        device = "cuda"
        props = data.get("deviceProperties") if isinstance(data, dict) else None
        if isinstance(props, list) and props and isinstance(props[0], dict) and props[0].get("name"):
            device = str(props[0]["name"])
        return _gpu_capture(p, events, device_events, ranges, iteration_pattern, device)
    return _cpu_capture(p, events, ranges, iteration_pattern)


# ---- GPU ---------------------------------------------------------------------------------------

def _gpu_capture(p: Path, events, device_events, ranges, pattern, device: str) -> Capture:
    runtime: dict[Any, tuple[float, str]] = {}
    ops: dict[Any, dict[str, Any]] = {}
    for e in events:
        args = e.get("args") or {}
        if e["_cat"] in _RUNTIME_CATS and "correlation" in args:
            runtime[args["correlation"]] = (e["_ts"], _thread(e))
        elif e["_cat"] == "cpu_op" and "External id" in args:
            ops.setdefault(args["External id"], e)
    iters = pick_iterations(ranges, pattern, str(p))
    placed = IterationBuckets(iters)
    for e in sorted(device_events, key=lambda e: e["_ts"]):
        args = e.get("args") or {}
        name = str(e.get("name", ""))
        klass, op, label, plumbing = classify_kernel(name)
        if e["_cat"] == "gpu_memcpy" and klass is not LaunchClass.PLUMBING:
            klass, op, plumbing, label = LaunchClass.PLUMBING, "memcpy", "memcpy", name
        elif e["_cat"] == "gpu_memset" and klass is not LaunchClass.PLUMBING:
            klass, op, plumbing, label = LaunchClass.PLUMBING, "memset", "memset", name
        host = runtime.get(args.get("correlation"))
        src = ops.get(args.get("External id"))
        shapes, dtypes = _shapes(src.get("args") or {}) if src else (None, None)
        launch = Launch(name, e["_ts"], e["_dur"], klass, op, label, plumbing, str(args.get("stream", e.get("tid", ""))),
                        f"cuda:{args['device']}" if "device" in args else device, shapes, dtypes,
                        str(src.get("name", "")) if src else "")
        placed.add(launch, host)
    notes = []
    if not runtime:
        notes.append("no CUDA runtime events: kernels were placed in iterations by their device start time")
    if placed.unplaced:
        notes.append(f"{placed.unplaced} device launches fall outside every iteration range and are left out")
    return _capture(p, "GPU kernel time (device clock)", device, iters, placed.buckets, notes)


# ---- CPU ---------------------------------------------------------------------------------------

def _cpu_capture(p: Path, events, ranges, pattern) -> Capture:
    by_thread: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["_cat"] == "cpu_op" and not str(e.get("name", "")).startswith("ProfilerStep#"):
            by_thread[_thread(e)].append(e)
    if not by_thread:
        raise CaptureError(f"'{p}' has no cpu_op or kernel events; profile with "
                           "torch.profiler.profile(activities=[ProfilerActivity.CPU, ...])")
    tops: dict[str, list[tuple[dict[str, Any], list[str]]]] = {}
    for thread, evs in by_thread.items():
        evs.sort(key=lambda e: (e["_ts"], -e["_dur"]))
        out: list[tuple[dict[str, Any], list[str]]] = []
        end = float("-inf")
        for e in evs:
            if out and e["_ts"] < end - _TOL_US:  # starts inside the current top-level op: nested in it
                out[-1][1].append(str(e.get("name", "")))
            else:
                out.append((e, []))
                end = e["_ts"] + e["_dur"]
        tops[thread] = out
    iters = pick_iterations(ranges, pattern, str(p))
    notes = []
    if not iters:
        main = max(tops, key=lambda t: sum(e["_dur"] for e, _ in tops[t]))
        evs = tops[main]
        iters_used: list[Range] = [Range("capture", evs[0][0]["_ts"], max(e["_ts"] + e["_dur"] for e, _ in evs), main)]
        if len(tops) > 1:
            notes.append(f"no iteration ranges: the whole capture of thread {main} is one iteration")
    else:
        iters_used = iters
    index = RangeIndex(iters_used)
    scopes = _scope_finder(ranges, iters_used)
    buckets: dict[int, list[Launch]] = defaultdict(list)
    for thread, items in tops.items():
        for e, nested in items:
            i = index.find(e["_ts"], thread)
            if i is None:
                continue
            name = str(e.get("name", ""))
            klass, op, label, plumbing = classify_cpu_op(name, nested)
            shapes, dtypes = _shapes(e.get("args") or {})
            buckets[i].append(Launch(name, e["_ts"], e["_dur"], klass, op, label, plumbing, f"cpu:{thread}", "cpu",
                                     shapes, dtypes, scopes(e["_ts"], thread)))
    return _capture(p, "host time of each top-level aten op (nested ops included)", "cpu", iters_used, buckets, notes)


def _scope_finder(ranges: list[Range], iters: list[Range]):
    """Innermost annotation (other than the iteration ranges) holding a time point on a thread."""
    iter_keys = {(r.name, r.start_us, r.end_us) for r in iters}
    inner = [r for r in ranges if (r.name, r.start_us, r.end_us) not in iter_keys]
    if not inner:
        return lambda t, thread: ""
    by_thread: dict[str, list[Range]] = defaultdict(list)
    for r in inner:
        by_thread[r.thread].append(r)

    def find(t: float, thread: str) -> str:
        best = None
        for r in by_thread.get(thread, ()):
            if r.start_us <= t <= r.end_us and (best is None or r.end_us - r.start_us < best.end_us - best.start_us):
                best = r
        return best.name if best else ""

    return find


def _capture(p: Path, timebase: str, device: str, iters: list[Range], buckets: dict[int, list[Launch]],
             notes: list[str]) -> Capture:
    out = []
    if not iters:
        launches = buckets.get(0, [])
        if launches:
            start = min(x.start_us for x in launches)
            end = max(x.start_us + x.duration_us for x in launches)
            out.append(Iteration(0, "capture", start, end, tuple(sorted(launches, key=lambda x: x.start_us))))
    else:
        empty = 0
        for i, r in enumerate(iters):
            launches = buckets.get(i, [])
            if not launches:
                empty += 1
                continue
            out.append(Iteration(len(out), r.name, r.start_us, r.end_us,
                                 tuple(sorted(launches, key=lambda x: x.start_us))))
        if empty:
            notes.append(f"{empty} iteration ranges hold no launches and are left out")
    if not out:
        raise CaptureError(f"'{p}' holds no launches inside its iteration ranges; pick ranges with --range REGEX")
    return Capture(str(p), "torch-trace", device, timebase, tuple(out), tuple(notes))

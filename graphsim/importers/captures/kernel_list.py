"""A plain JSON kernel list → Capture: for traces from any tool, converted by hand or by script.

    {"format": "graphsim.kernels/1", "device": "NVIDIA H200",
     "iterations": [{"label": "decode:64x2048",
                     "kernels": [{"name": "vllm::rms_norm_kernel", "duration_us": 3.1,
                                  "stream": 7, "start_us": 0.0, "shapes": [[64, 4096]]}, ...]}]}

Also accepted: `{"kernels": [...]}` (one iteration; optional "label") or a bare list of kernel
objects; in a bare list, an `iteration` key on every kernel splits it into iterations (labelled
by the kernels' `phase`, when given). Durations: `duration_us` (or `time_us`, `dur_us`,
`duration_ns`). Without `start_us`, kernels run back to back in the order listed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from graphsim.capture import Capture, CaptureError, Iteration, Launch
from graphsim.importers.captures.classify import classify_kernel

_DURATION_KEYS = (("duration_us", 1.0), ("time_us", 1.0), ("dur_us", 1.0), ("duration_ns", 1e-3))


def _is_kernel(d: Any) -> bool:
    return isinstance(d, dict) and "name" in d and "ph" not in d and any(k in d for k, _ in _DURATION_KEYS)


def is_kernel_list(data: Any) -> bool:
    if isinstance(data, dict):
        if "traceEvents" in data:
            return False
        return isinstance(data.get("iterations"), list) or isinstance(data.get("kernels"), list)
    return isinstance(data, list) and bool(data) and _is_kernel(data[0])


def _launch(p: Path, where: str, k: Any, clock: float) -> Launch:
    if not isinstance(k, dict) or not isinstance(k.get("name"), str) or not k["name"]:
        raise CaptureError(f"'{p}': {where} needs a non-empty 'name'")
    dur = None
    for key, scale in _DURATION_KEYS:
        if key in k:
            try:
                dur = float(k[key]) * scale
            except (TypeError, ValueError):
                raise CaptureError(f"'{p}': {where} has a non-numeric {key} ({k[key]!r})") from None
            break
    if dur is None or not dur >= 0 or dur == float("inf"):
        raise CaptureError(f"'{p}': {where} needs a finite duration_us >= 0")
    start = k.get("start_us", clock)
    try:
        start = float(start)
    except (TypeError, ValueError):
        raise CaptureError(f"'{p}': {where} has a non-numeric start_us ({start!r})") from None
    shapes = k.get("shapes")
    if shapes is not None:
        try:
            shapes = tuple(tuple(int(x) for x in s) for s in shapes)
        except (TypeError, ValueError):
            raise CaptureError(f"'{p}': {where} has malformed shapes (expected a list of int lists)") from None
    klass, op, label, plumbing = classify_kernel(k["name"])
    return Launch(k["name"], start, dur, klass, op, label, plumbing, str(k.get("stream", "")), str(k.get("device", "")),
                  shapes, None, str(k.get("scope", "")))


def _iteration(p: Path, index: int, label: str, kernels: Any, where: str) -> Iteration:
    if not isinstance(kernels, list) or not kernels:
        raise CaptureError(f"'{p}': {where} needs a non-empty 'kernels' list")
    clock = 0.0
    launches = []
    for j, k in enumerate(kernels):
        x = _launch(p, f"{where} kernel {j}", k, clock)
        clock = x.start_us + x.duration_us
        launches.append(x)
    launches.sort(key=lambda x: x.start_us)
    start = launches[0].start_us
    end = max(x.start_us + x.duration_us for x in launches)
    return Iteration(index, label, start, end, tuple(launches))


def kernel_list_capture(p: Path, data: Any, iteration_pattern: str | None = None) -> Capture:
    device, notes = "", []
    iterations: list[Iteration] = []
    if isinstance(data, dict):
        device = str(data.get("device", ""))
        if isinstance(data.get("iterations"), list):
            for i, it in enumerate(data["iterations"]):
                if not isinstance(it, dict):
                    raise CaptureError(f"'{p}': iteration {i} is not an object with 'label' and 'kernels'")
                iterations.append(_iteration(p, i, str(it.get("label", f"iteration {i}")), it.get("kernels"),
                                             f"iteration {i}"))
        else:
            iterations.append(_iteration(p, 0, str(data.get("label", "capture")), data.get("kernels"), "the list"))
    else:
        if all(isinstance(k, dict) and "iteration" in k for k in data):
            groups: dict[Any, list[Any]] = {}
            for k in data:
                groups.setdefault(k["iteration"], []).append(k)
            for i, (key, ks) in enumerate(groups.items()):
                label = str(ks[0].get("phase", f"iteration {key}"))
                iterations.append(_iteration(p, i, label, ks, f"iteration {key}"))
        else:
            iterations.append(_iteration(p, 0, "capture", data, "the list"))
    if iteration_pattern:
        try:
            rx = re.compile(iteration_pattern)
        except re.error as e:
            raise CaptureError(f"--range '{iteration_pattern}' is not a valid regular expression ({e})") from None
        kept = [it for it in iterations if rx.search(it.label)]
        if not kept:
            raise CaptureError(f"no iteration of '{p}' matches --range '{iteration_pattern}'; labels: "
                               + ", ".join(sorted({it.label for it in iterations})[:12]))
        iterations = [Iteration(i, it.label, it.start_us, it.end_us, it.launches) for i, it in enumerate(kept)]
    timebase = str(data.get("timebase", "kernel time as listed")) if isinstance(data, dict) else "kernel time as listed"
    return Capture(str(p), "kernel-list", device or "unknown", timebase, tuple(iterations), tuple(notes))

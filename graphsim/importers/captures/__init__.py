"""Capture importers: real kernel traces → one normalised `Capture`.

    from graphsim.importers.captures import load_capture
    cap = load_capture("trace.json")            # torch.profiler Chrome trace (.json / .json.gz)
    cap = load_capture("report.sqlite")         # Nsight Systems SQLite export
    cap = load_capture("kernels.json")          # a plain JSON kernel list
    for it in cap.iterations: it.label, it.phase, it.launches

The format is read from the file's content, not its name. No torch is imported.
"""

from __future__ import annotations

from pathlib import Path

from graphsim.capture import Capture, CaptureError, Iteration, Launch, LaunchClass, phase_of
from graphsim.importers.captures.ranges import DEFAULT_ITERATION_PATTERN

__all__ = [
    "DEFAULT_ITERATION_PATTERN",
    "Capture",
    "CaptureError",
    "Iteration",
    "Launch",
    "LaunchClass",
    "load_capture",
    "phase_of",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def load_capture(path: str | Path, iteration_pattern: str | None = None) -> Capture:
    """Read a capture file; `iteration_pattern` (a regex over range names) picks the iteration ranges."""
    p = Path(path)
    if not p.is_file():
        raise CaptureError(f"no capture file at '{p}'")
    with p.open("rb") as f:
        head = f.read(16)
    if head == _SQLITE_MAGIC:
        from graphsim.importers.captures.nsys import load_nsys

        return load_nsys(p, iteration_pattern)
    from graphsim.importers.captures.torch_trace import read_json

    data = read_json(p)
    from graphsim.importers.captures.kernel_list import is_kernel_list, kernel_list_capture

    if is_kernel_list(data):
        return kernel_list_capture(p, data, iteration_pattern)
    from graphsim.importers.captures.torch_trace import torch_trace_capture

    return torch_trace_capture(p, data, iteration_pattern)

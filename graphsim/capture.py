"""The normalised capture: what a real run launched, per iteration, in order.

Every importer (torch profiler Chrome trace, Nsight Systems SQLite export, plain JSON kernel
list) produces a `Capture`: iterations (one forward step each, found from profiler or NVTX
ranges), each holding the ordered `Launch`es of that step with name, duration, stream and, where
the capture recorded them, input shapes. A launch is a GPU kernel / memcpy / memset, or — in a
CPU-only trace — a top-level aten op (one not nested in another op). Times are microseconds on
the capture's own clock. No torch here: captures are read on machines without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from graphsim.errors import GraphsimError


class CaptureError(GraphsimError):
    """An unreadable or unsuitable capture file (one-line message naming the fix)."""


class LaunchClass(str, Enum):
    """What kind of work a measured launch does, read from its name (see `classify.py`)."""

    GEMM = "gemm"
    GEMM_AUX = "gemm_aux"  # split-K reductions and the like, part of a GEMM
    ATTENTION = "attention"
    ATTENTION_AUX = "attention_aux"  # split-KV combine / merge of attention states
    KV_CACHE_WRITE = "kv_cache_write"
    NORM = "norm"
    ROTARY = "rotary"
    ACT_AND_MUL = "act_and_mul"
    ELEMENTWISE = "elementwise"  # pointwise, reductions, copies, cat, index/gather/scatter
    EMBEDDING = "embedding"
    MOE_ROUTER = "moe_router"
    MOE = "moe"  # routed-expert GEMM kernels
    MOE_AUX = "moe_aux"  # token sorting / alignment / sum around the expert GEMMs
    COLLECTIVE = "collective"
    CONV1D = "conv1d"
    LINEAR_ATTENTION = "linear_attention"
    PLUMBING = "plumbing"  # engine plumbing: memcpy, memset, fill, sampling, views, host bookkeeping
    OTHER = "other"  # a name no rule knows


@dataclass(frozen=True)
class Launch:
    name: str  # as recorded: demangled kernel name, or the aten op (`aten::linear`)
    start_us: float  # capture clock (device time for kernels, host time for CPU ops)
    duration_us: float
    klass: LaunchClass
    op: str = ""  # canonical op when known: `mul`, `linear`, `rms_norm`, `fused_add_rms_norm`, ...
    label: str = ""  # short display name (kernel name without templates/arguments, op detail in [])
    plumbing: str = ""  # for PLUMBING: memcpy, memset, fill, sampling, view, no-op, alloc, host, input prep
    stream: str = ""  # CUDA stream id, or `cpu:<thread>` for host ops
    device: str = ""
    shapes: tuple[tuple[int, ...], ...] | None = None  # input shapes, when the capture recorded them
    dtypes: tuple[str, ...] | None = None
    scope: str = ""  # innermost annotation range around it (e.g. a module name), if any

    @property
    def key(self) -> str:
        """What launches are grouped by when folded: the label (or name)."""
        return self.label or self.name

    def to_json(self) -> dict[str, Any]:
        d = {"name": self.name, "label": self.key, "class": self.klass.value, "op": self.op,
             "start_us": self.start_us, "duration_us": self.duration_us, "stream": self.stream}
        if self.plumbing:
            d["plumbing"] = self.plumbing
        if self.shapes is not None:
            d["shapes"] = [list(s) for s in self.shapes]
        if self.dtypes is not None:
            d["dtypes"] = list(self.dtypes)
        if self.scope:
            d["scope"] = self.scope
        return d


_COUNTER = re.compile(r"(?:[#_ .-]?\d+)$")


def phase_of(label: str) -> str:
    """The phase an iteration belongs to: its label without a trailing counter
    (`ProfilerStep#3` → `ProfilerStep`, `decode_17` → `decode`); batch-spec labels stay whole."""
    if ":" in label:
        return label
    stripped = _COUNTER.sub("", label)
    return stripped or label


@dataclass(frozen=True)
class Iteration:
    index: int  # position in the capture
    label: str  # the range that delimits it (`prefill:1x512`, `ProfilerStep#3`), or `capture`
    start_us: float
    end_us: float
    launches: tuple[Launch, ...]
    phase: str = ""

    def __post_init__(self) -> None:
        if not self.phase:
            object.__setattr__(self, "phase", phase_of(self.label))

    @property
    def wall_us(self) -> float:
        return max(0.0, self.end_us - self.start_us)

    @property
    def launch_us(self) -> float:
        """Sum of launch durations (kernels on several streams may overlap: this is not wall time)."""
        return sum(x.duration_us for x in self.launches)

    def work(self) -> list[Launch]:
        """The launches that are not engine plumbing, in order (what alignment sees)."""
        return [x for x in self.launches if x.klass is not LaunchClass.PLUMBING]

    def batch_spec(self) -> str | None:
        """The label as a batch spec (`prefill:1x512`, `decode:64x2048`) when it is one."""
        from graphsim.workload import WorkloadError, parse_batch_spec

        text = self.label.strip()
        try:
            parse_batch_spec(text)
        except WorkloadError:
            return None
        return text


@dataclass(frozen=True)
class Capture:
    path: str
    format: str  # torch-trace, nsys-sqlite, kernel-list
    device: str  # `cpu` or the GPU's name
    timebase: str  # what a launch duration is, e.g. "GPU kernel time" or "host time of the top-level aten op"
    iterations: tuple[Iteration, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def phases(self) -> dict[str, list[Iteration]]:
        out: dict[str, list[Iteration]] = {}
        for it in self.iterations:
            out.setdefault(it.phase, []).append(it)
        return out

    def select(self, iteration: int | None = None, phase: str | None = None) -> Iteration:
        """One iteration: by index, else the last of `phase` (warm), else the last of the capture."""
        if not self.iterations:
            raise CaptureError(f"'{self.path}' holds no launches")
        if iteration is not None:
            if not 0 <= iteration < len(self.iterations):
                raise CaptureError(f"iteration {iteration} is out of range; '{self.path}' has "
                                   f"{len(self.iterations)} (0..{len(self.iterations) - 1})")
            return self.iterations[iteration]
        if phase is not None:
            phases = self.phases()
            if phase not in phases:
                raise CaptureError(f"no phase '{phase}' in '{self.path}'; phases: {', '.join(phases)}")
            return phases[phase][-1]
        return self.iterations[-1]

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "format": self.format, "device": self.device, "timebase": self.timebase,
            "notes": list(self.notes),
            "iterations": [{"index": it.index, "label": it.label, "phase": it.phase, "start_us": it.start_us,
                            "end_us": it.end_us, "launches": [x.to_json() for x in it.launches]}
                           for it in self.iterations],
        }

"""Results of the accountant: per-segment work for a step, and per-segment parameter counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from graphsim.work.dtypes import Precision
from graphsim.workload import Step

WORK_FIELDS = (
    "flops",
    "param_read_bytes",
    "param_read_bytes_worst",
    "state_read_bytes",
    "state_write_bytes",
)


@dataclass(frozen=True)
class SegmentWork:
    """Necessary work of one semantic segment in one step (summed over the layers it spans).

    `param_read_bytes` is the expected value (MoE: uniform routing); `param_read_bytes_worst` the
    worst case (MoE: min(E, T·k) experts). Parameter counts are per model, not per step.
    """

    name: str
    flops: int = 0
    param_read_bytes: float = 0.0
    param_read_bytes_worst: float = 0.0
    state_read_bytes: float = 0.0
    state_write_bytes: float = 0.0
    params: int = 0
    params_activated: int = 0

    def __add__(self, other: SegmentWork) -> SegmentWork:
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "name"}
        return SegmentWork(self.name, **values)

    @property
    def bytes(self) -> float:
        """Expected necessary memory traffic: parameters read plus state read and written."""
        return self.param_read_bytes + self.state_read_bytes + self.state_write_bytes


def _matcher(match: str | Callable[[str], bool]) -> Callable[[str], bool]:
    if callable(match):
        return match
    return lambda name: name == match or name.endswith(match)


@dataclass(frozen=True)
class WorkReport:
    """Per-segment necessary work of one step, with the precision and notes that shaped it."""

    architecture: str
    step: Step
    precision: Precision
    segments: tuple[SegmentWork, ...]
    notes: tuple[str, ...] = ()

    def segment(self, name: str) -> SegmentWork:
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(f"no segment {name!r}; have {[s.name for s in self.segments]}")

    def sum(self, match: str | Callable[[str], bool] = lambda _: True) -> SegmentWork:
        """Sum of the segments whose name equals or ends with `match` (or satisfies it, if callable)."""
        pick = _matcher(match)
        out = SegmentWork("total" if not isinstance(match, str) else match)
        for s in self.segments:
            if pick(s.name):
                out = out + s
        return out

    @property
    def total(self) -> SegmentWork:
        return self.sum()

    @property
    def attention_flops(self) -> int:
        """FLOPs of the attention cores (scores, values, recurrences, short convs)."""
        return self.sum(".attn.core").flops

    @property
    def matmul_flops(self) -> int:
        """FLOPs of weight matmuls (projections, MLPs, experts, routers, head)."""
        return self.total.flops - self.attention_flops

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "step": {
                "label": self.step.label(),
                "tokens": self.step.tokens,
                "sequences": self.step.sequences,
                "groups": [asdict(g) for g in self.step.groups],
            },
            "precision": self.precision.describe(),
            "segments": [asdict(s) for s in self.segments],
            "total": asdict(self.total) | {"name": "total"},
            "attention_flops": self.attention_flops,
            "matmul_flops": self.matmul_flops,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class SegmentParams:
    name: str
    params: int
    params_activated: int
    stored_bytes: float


@dataclass(frozen=True)
class ParamReport:
    """Parameter counts per segment.

    `activated` counts the parameters one token's forward pass uses: everything except the routed
    experts it is not sent to and the input embedding table (a lookup reads one row of it; with
    tied embeddings the table is used whole by the head and counts). `activated_with_embedding`
    adds the input table, the convention of some model cards.
    """

    architecture: str
    precision: Precision
    segments: tuple[SegmentParams, ...]
    embedding: int
    tied_embeddings: bool
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(s.params for s in self.segments)

    @property
    def activated(self) -> int:
        return sum(s.params_activated for s in self.segments)

    @property
    def activated_with_embedding(self) -> int:
        return self.activated + (0 if self.tied_embeddings else self.embedding)

    @property
    def stored_bytes(self) -> float:
        return sum(s.stored_bytes for s in self.segments)

    def segment(self, name: str) -> SegmentParams:
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(f"no segment {name!r}; have {[s.name for s in self.segments]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "precision": self.precision.describe(),
            "total": self.total,
            "activated": self.activated,
            "activated_with_embedding": self.activated_with_embedding,
            "embedding": self.embedding,
            "tied_embeddings": self.tied_embeddings,
            "stored_bytes": self.stored_bytes,
            "segments": [asdict(s) for s in self.segments],
            "notes": list(self.notes),
        }

"""Where a kernel time came from, and the time itself (DESIGN §1: every number carries its source)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class TimeSource(str, Enum):
    """How a leaf time was obtained, best first. `MISSING` never carries a number."""

    MEASURED = "measured"  # an exact profile.db row
    INTERPOLATED = "interpolated"  # between profile.db rows (log-log), inside the measured range
    EXTRAPOLATED = "extrapolated"  # from profile.db rows, outside the measured range
    DERIVED = "derived"  # no rows for the kernel: the profile's achieved bandwidth and launch floor (costing/derived.py)
    ROOFLINE = "roofline"  # max(flops / peak, bytes / bandwidth) from a hardware spec
    MISSING = "missing"  # nothing to price it with

    @property
    def rank(self) -> int:
        """0 for the best source; a composed time takes the worst (highest) rank of its leaves."""
        return _RANK[self]


_RANK = {s: i for i, s in enumerate(TimeSource)}


def worst_source(sources: list[TimeSource] | tuple[TimeSource, ...]) -> TimeSource:
    """The least trustworthy of several sources (for a composed time)."""
    if not sources:
        return TimeSource.MISSING
    return max(sources, key=lambda s: s.rank)


@dataclass(frozen=True)
class Timing:
    """A kernel time in microseconds and its source. Missing is `time_us=None`, never 0."""

    time_us: float | None
    source: TimeSource
    detail: str = ""  # short human note: which rows, which spec, why missing

    def __post_init__(self) -> None:
        if self.source is TimeSource.MISSING:
            if self.time_us is not None:
                raise ValueError("a missing Timing carries no time (time_us=None)")
        else:
            if self.time_us is None or not math.isfinite(self.time_us) or self.time_us < 0:
                raise ValueError(f"a {self.source.value} Timing needs a finite time_us >= 0, got {self.time_us!r}")

    @property
    def is_missing(self) -> bool:
        return self.source is TimeSource.MISSING

    @classmethod
    def missing(cls, detail: str = "") -> Timing:
        return cls(None, TimeSource.MISSING, detail)

"""Iterations from annotation ranges: which ranges delimit one forward step, and what falls in them.

A capture marks its steps with ranges: torch.profiler's `ProfilerStep#N` and `record_function`
annotations, or NVTX push/pop and start/end ranges in Nsight Systems. By default a range whose
name looks like a step (`ProfilerStep#N`, a batch spec such as `prefill:1x512` / `decode:64x2048`,
or a name starting with prefill / decode / mixed / iteration / step / execute_model / forward) is
an iteration; where such ranges nest, the innermost ones are kept. `--range REGEX` picks the
ranges instead. A capture with no such range is one iteration, labelled `capture`.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass

from graphsim.capture import CaptureError, Launch

DEFAULT_ITERATION_PATTERN = (r"(?i)^(ProfilerStep#\d+|(prefill|decode|mixed)\b.*|iteration\b.*|step\b.*|"
                             r"execute_model\b.*|forward\b.*|model_forward\b.*)$")


@dataclass(frozen=True)
class Range:
    name: str
    start_us: float
    end_us: float
    thread: str = ""  # the thread that opened it ("" when unknown: matches any)

    def contains(self, t_us: float, thread: str = "") -> bool:
        if self.thread and thread and thread != self.thread:
            return False
        return self.start_us <= t_us <= self.end_us


def _compile(pattern: str | None) -> re.Pattern[str]:
    try:
        return re.compile(pattern or DEFAULT_ITERATION_PATTERN)
    except re.error as e:
        raise CaptureError(f"--range '{pattern}' is not a valid regular expression ({e})") from None


def pick_iterations(ranges: list[Range], pattern: str | None, path: str) -> list[Range]:
    """The iteration ranges, in time order (innermost where matching ranges nest)."""
    rx = _compile(pattern)
    hits = sorted((r for r in ranges if rx.search(r.name)), key=lambda r: (r.start_us, -r.end_us))
    if pattern and not hits:
        names = sorted({r.name for r in ranges})
        shown = ", ".join(names[:12]) + (" …" if len(names) > 12 else "")
        raise CaptureError(f"no range in '{path}' matches --range '{pattern}'; ranges: {shown or 'none'}")
    keep = []
    for r in hits:
        inner = any(o is not r and r.start_us <= o.start_us and o.end_us <= r.end_us
                    and (o.start_us, o.end_us) != (r.start_us, r.end_us) and (not r.thread or o.thread in ("", r.thread))
                    for o in hits)
        if not inner:
            keep.append(r)
    # identical duplicates (same name and span) collapse to one
    out: list[Range] = []
    for r in keep:
        if not out or (out[-1].name, out[-1].start_us, out[-1].end_us) != (r.name, r.start_us, r.end_us):
            out.append(r)
    return out


class RangeIndex:
    """Which iteration range holds a time point (iteration ranges do not nest after
    `pick_iterations`; ranges of different threads may overlap)."""

    def __init__(self, ranges: list[Range]) -> None:
        self.ranges = list(ranges)
        order = sorted(range(len(ranges)), key=lambda i: ranges[i].start_us)
        self._order = order
        self._starts = [ranges[i].start_us for i in order]
        self._max_end: list[float] = []  # latest end among the first k+1 ranges by start
        for i in order:
            self._max_end.append(max(ranges[i].end_us, self._max_end[-1] if self._max_end else ranges[i].end_us))

    def find(self, t_us: float, thread: str = "") -> int | None:
        """Index (into the list given) of the range holding `t_us` on `thread`, or None."""
        k = bisect.bisect_right(self._starts, t_us) - 1
        while k >= 0 and self._max_end[k] >= t_us:
            i = self._order[k]
            if self.ranges[i].contains(t_us, thread):
                return i
            k -= 1
        return None


class IterationBuckets:
    """Device launches sorted into iteration ranges: by the host call that launched them where it is
    known, else by their device start; with no iteration ranges every launch is iteration 0."""

    def __init__(self, iters: list[Range]) -> None:
        self.iters = iters
        self._index = RangeIndex(iters)
        self.buckets: dict[int, list[Launch]] = defaultdict(list)
        self.unplaced = 0  # launches outside every iteration range (left out)

    def add(self, launch: Launch, host: tuple[float, str] | None) -> None:
        """Place `launch`; `host` is the (time, thread) of the runtime call that launched it, if known."""
        if self.iters:
            i = self._index.find(host[0], host[1]) if host else self._index.find(launch.start_us)
            if i is None:
                self.unplaced += 1
                return
        else:
            i = 0
        self.buckets[i].append(launch)

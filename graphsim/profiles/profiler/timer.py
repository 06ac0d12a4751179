"""Repeated timing of one prepared kernel call: warm-up, samples, median and spread.

CPU: `time.perf_counter` around each call, repeated until at least `min_samples` samples and
`min_time_s` of timed work (slow calls stop after `max_time_s` with at least `floor_samples`).
CUDA: a CUDA event pair around each call, synchronised per sample, with the L2 cache flushed
(a buffer larger than L2 zeroed) before each sample so weights are read from HBM as in a real
forward pass, where each layer's weights are evicted by the other layers'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from graphsim.costing.kernels import Measurement

# A timing whose interquartile range exceeds this share of its median is re-measured (up to RETRIES more
# times, keeping the tightest) and reported as noisy if it stays above: torch.utils.benchmark's own gross
# variance threshold (torch/utils/benchmark/utils/common.py: _IQR_GROSS_WARN_THRESHOLD = 0.25, used by
# Measurement.meets_confidence / has_warnings).
SPREAD_LIMIT = 0.25
RETRIES = 2


@dataclass(frozen=True)
class TimingOptions:
    warmup_calls: int = 2  # at least this many untimed calls ...
    warmup_time_s: float = 0.02  # ... and until this much time has passed (but see max_time_s)
    min_samples: int = 20
    min_time_s: float = 0.05  # timed work to collect at least
    max_time_s: float = 2.0  # stop once this much was timed and floor_samples exist
    floor_samples: int = 3
    max_samples: int = 10_000
    flush_l2: bool = True  # CUDA only

    @classmethod
    def quick(cls) -> TimingOptions:
        return cls(warmup_calls=1, warmup_time_s=0.01, min_samples=20, min_time_s=0.05, max_time_s=0.5,
                   floor_samples=3)


def summarise(samples_s: list[float], kernel: str = "") -> Measurement:
    us = np.asarray(samples_s, dtype=np.float64) * 1e6
    us = np.maximum(us, 1e-3)  # a timer tick below a nanosecond is still a positive time
    return Measurement(
        time_us=float(np.median(us)),
        p10_us=float(np.percentile(us, 10)),
        p90_us=float(np.percentile(us, 90)),
        std_us=float(np.std(us, ddof=1)) if len(us) > 1 else 0.0,
        samples=len(us),
        kernel=kernel,
    )


def spread(samples_s: list[float]) -> float:
    """Interquartile range over median (0 for fewer than 4 samples: no quartiles to speak of)."""
    if len(samples_s) < 4:
        return 0.0
    q1, med, q3 = np.percentile(np.asarray(samples_s, dtype=np.float64), [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else 0.0


def time_steady(timer: CpuTimer | CudaTimer, fn: Callable[[], Any],
                retries: int = RETRIES) -> tuple[list[float], float, int]:
    """Time `fn`; while the spread (`spread`) is above SPREAD_LIMIT, time it again, up to `retries` more
    times. Returns the tightest samples, their spread and the number of timings made."""
    best = timer.time(fn)
    best_spread, tries = spread(best), 1
    while best_spread > SPREAD_LIMIT and tries <= retries:
        again = timer.time(fn)
        tries += 1
        s = spread(again)
        if s < best_spread:
            best, best_spread = again, s
    return best, best_spread, tries


def _enough(n: int, timed_s: float, opts: TimingOptions) -> bool:
    if n >= opts.max_samples:
        return True
    if n >= opts.min_samples and timed_s >= opts.min_time_s:
        return True
    return timed_s >= opts.max_time_s and n >= opts.floor_samples


class CpuTimer:
    """Samples of `clock` (wall time by default) around each call; `before`, when given, runs untimed
    ahead of each sample (e.g. to sweep the caches)."""

    def __init__(self, opts: TimingOptions, clock: Callable[[], float] = time.perf_counter) -> None:
        self.opts = opts
        self.clock = clock

    def time(self, fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> list[float]:
        opts = self.opts
        start = time.perf_counter()
        calls = 0
        while calls < opts.warmup_calls or (time.perf_counter() - start < opts.warmup_time_s
                                             and time.perf_counter() - start < opts.max_time_s):
            fn()
            calls += 1
        samples: list[float] = []
        timed = 0.0
        while not _enough(len(samples), timed, opts):
            if before is not None:
                before()
            t0 = self.clock()
            fn()
            dt = self.clock() - t0
            samples.append(dt)
            timed += dt
        return samples


class CudaTimer:
    def __init__(self, opts: TimingOptions, device: torch.device) -> None:
        self.opts = opts
        self.device = device
        self._flush: torch.Tensor | None = None
        if opts.flush_l2:
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
            self._flush = torch.empty(max(2 * l2, 256 * 2**20) // 4, dtype=torch.int32, device=device)

    def time(self, fn: Callable[[], Any]) -> list[float]:
        opts = self.opts
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        calls = 0
        while calls < opts.warmup_calls or time.perf_counter() - start < opts.warmup_time_s:
            fn()
            calls += 1
            torch.cuda.synchronize(self.device)
            if time.perf_counter() - start >= opts.max_time_s:
                break
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        samples: list[float] = []
        timed = 0.0
        while not _enough(len(samples), timed, opts):
            if self._flush is not None:
                self._flush.zero_()
            begin.record()
            fn()
            end.record()
            end.synchronize()
            dt = begin.elapsed_time(end) / 1e3  # ms → s
            samples.append(dt)
            timed += dt
        return samples


def make_timer(device: torch.device, opts: TimingOptions) -> CpuTimer | CudaTimer:
    return CudaTimer(opts, device) if device.type == "cuda" else CpuTimer(opts)

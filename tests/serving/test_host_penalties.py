"""benchmarks/host_penalties.py: the per-element fit and the timing loop (vLLM itself is not needed here)."""

from __future__ import annotations

import random

import pytest


def test_per_element_slope_through_origin(benchmark_script):
    hp = benchmark_script("host_penalties")
    # (100 elements, 2 µs) and (200, 4 µs): 0.02 µs = 20 ns an element; with (300, 9): (200 + 800 + 2700) µs·el /
    # (10^4 + 4·10^4 + 9·10^4) el² = 3700 / 140000 µs = 26.43 ns
    assert hp.per_element_ns([(100, 2.0), (200, 4.0)]) == pytest.approx(20.0)
    assert hp.per_element_ns([(100, 2.0), (200, 4.0), (300, 9.0)]) == pytest.approx(3700 / 140000 * 1e3)


def test_time_convert_calls_with_the_grid_shape(benchmark_script):
    hp = benchmark_script("host_penalties")
    seen = []
    us = hp.time_convert(lambda x: seen.append((len(x), len(x[0]), max(max(r) for r in x))), 3, 7, 50, 4,
                         random.Random(0))
    assert seen and all(s[:2] == (3, 7) and s[2] < 50 for s in seen) and len(seen) == 4
    assert us >= 0.0

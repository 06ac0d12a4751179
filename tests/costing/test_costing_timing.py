"""Timing / TimeSource invariants: missing is never a number, everything else is a finite time."""

import math

import pytest

from graphsim.costing.timing import TimeSource, Timing, worst_source


def test_missing_has_no_time():
    t = Timing.missing("nothing")
    assert t.time_us is None and t.is_missing and t.source is TimeSource.MISSING
    with pytest.raises(ValueError):
        Timing(0.0, TimeSource.MISSING)


@pytest.mark.parametrize("bad", [None, -1.0, math.nan, math.inf])
def test_priced_sources_need_a_finite_time(bad):
    with pytest.raises(ValueError):
        Timing(bad, TimeSource.MEASURED)


def test_frozen_and_ranked():
    t = Timing(1.5, TimeSource.INTERPOLATED)
    with pytest.raises(AttributeError):
        t.time_us = 2.0  # type: ignore[misc]
    assert worst_source([TimeSource.MEASURED, TimeSource.ROOFLINE, TimeSource.INTERPOLATED]) is TimeSource.ROOFLINE
    assert worst_source([]) is TimeSource.MISSING
    assert [s.value for s in TimeSource] == ["measured", "interpolated", "extrapolated", "derived", "roofline", "missing"]

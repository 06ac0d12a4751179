"""Workloads: lengths, arrivals, shared prefixes, trace replay."""

import numpy as np
import pytest
from serving_helpers import small_setup

from graphsim.serving import Lengths, load_trace, parse_lengths, simulate, summarize, synthetic
from graphsim.serving.requests import WorkloadSpecError, write_trace


def test_parse_lengths():
    assert parse_lengths("1024", "x") == Lengths(1024, 1024)
    assert parse_lengths("1000:4000", "x") == Lengths(1000, 4000)
    assert parse_lengths("1_000-4_000", "x") == Lengths(1000, 4000)
    for bad in ("0", "5:3", "abc", "1:2:3"):
        with pytest.raises(WorkloadSpecError):
            parse_lengths(bad, "--input-len")


def test_synthetic_is_seeded_and_in_range():
    a = synthetic(2000, 10.0, Lengths(1024, 4096), Lengths(100, 500), seed=5, prefix_tokens=512, prefix_groups=4)
    b = synthetic(2000, 10.0, Lengths(1024, 4096), Lengths(100, 500), seed=5, prefix_tokens=512, prefix_groups=4)
    assert a == b
    ins = np.array([s.input_tokens for s in a])
    assert ins.min() >= 1024 and ins.max() <= 4096 and abs(ins.mean() - 2560) < 60
    t = np.array([s.arrival_s for s in a])
    assert t[0] == 0 and np.all(np.diff(t) >= 0) and abs(np.diff(t).mean() - 0.1) < 0.01
    assert {s.prefix_id for s in a} == {"p0", "p1", "p2", "p3"} and {s.prefix_tokens for s in a} == {512}


def test_trace_round_trip_and_replay(tmp_path):
    work = synthetic(120, 5.0, Lengths(200, 900), Lengths(10, 60), seed=1, prefix_tokens=256, prefix_groups=2)
    path = write_trace(work, tmp_path / "t.jsonl")
    back = load_trace(path)
    assert back == work
    s = summarize(simulate(small_setup(num_blocks=3000), back))
    assert s.completed == 120 and s.prefix_hit_rate > 0


def test_trace_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1, "input_tokens": 10}\n')
    with pytest.raises(WorkloadSpecError, match=r"bad\.jsonl:2"):
        load_trace(p)
    p.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5, "prefix_id": "a"}\n')
    with pytest.raises(WorkloadSpecError, match="prefix_id needs"):
        load_trace(p)
    with pytest.raises(WorkloadSpecError, match="no trace file"):
        load_trace(tmp_path / "missing.jsonl")
    p.write_text('{"timestamp": 0.5, "input_tokens": 10, "output_tokens": 5}\n')
    assert load_trace(p)[0].arrival_s == 0.5

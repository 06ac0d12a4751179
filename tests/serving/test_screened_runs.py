"""benchmarks/data/screened_public_runs.json: public runs screened for the serving validation set and not taken. The
file adds no run to the harness, and every entry names where it is and why it cannot be replayed."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "screened_public_runs.json"


def test_screened_runs_add_nothing_to_the_harness(benchmark_script):
    h = benchmark_script("validate_serving")
    runs, tests = h.load_runs()
    assert not [r for r in runs if r["file"] == DATA.name]
    assert not [k for k in tests if k.startswith(DATA.stem + ":")]


def test_every_screened_run_says_where_and_why():
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    assert doc["tests"] == {} and doc["runs"] == []
    urls = [e["url"] for e in doc["left_out"]]
    assert len(urls) == len(set(urls)) == 13  # each source screened once
    for e in doc["left_out"]:
        assert e["url"].startswith("https://")
        assert e["what"].strip() and e["why"].strip()

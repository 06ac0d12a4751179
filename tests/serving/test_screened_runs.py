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
    assert len(urls) == len(set(urls)) == 27  # each source screened once (13 in the first pass, 14 in the second)
    for e in doc["left_out"]:
        assert e["url"].startswith("https://")
        assert e["what"].strip() and e["why"].strip()


def test_lambdas_september_files_stay_out_of_the_054_runs(benchmark_script):
    """The screened A100 files are dated 2024-09-07, after vLLM 0.6.0 (2024-09-04): the 0.5.4 runs taken from the same
    repository are all dated 2024-08, so none of the taken runs is one of them."""
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    (entry,) = [e for e in doc["left_out"] if "1xA100-80GB-SXM" in e["url"]]
    assert "20240907" in entry["why"] and "multi-step" in entry["why"]
    h = benchmark_script("validate_serving")
    runs, _ = h.load_runs()
    lam = [r for r in runs if r["file"] == "lambdalabs_vllm_benchmark.json"]
    assert lam and all(r["server_log"]["time"].startswith("202408") for r in lam)
    assert not [r for r in lam if "A100" in r["source"]]

"""`graphsim analyze` end to end: rich and JSON output, unsupported deployments, bad input (exit 2)."""

from __future__ import annotations

import json

import pytest

from graphsim.cli.app import main
from graphsim.work.analyzer import load_map, shipped_map_paths

pytest.importorskip("torch")

from analyze_helpers import imported


@pytest.fixture(autouse=True)
def traced_once(monkeypatch):
    """The command traces its model; reuse the session's traces (the import itself is tested elsewhere)."""
    import graphsim.importers.hf as hf

    real = hf.import_hf
    monkeypatch.setattr(hf, "import_hf", lambda model, dtype=None, **kw: (imported(model.name), None)
                        if dtype is None and hasattr(model, "name") else real(model, dtype=dtype, **kw))


def run(capsys, *args):
    code = main(["analyze", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rich_output_states_map_r6_r7_reconciliation_and_sources(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = run(capsys, "llama-3.1-8b", "--tp", "2", "--batch", "decode:64x2048")
    assert code == 0, err
    for text in ("necessary work: available", "gqa-dense v1", "R6 necessary-work coverage:", "R7 redundancy",
                 "reconciled with `graphsim work llama-3.1-8b --decode 64x2048`", "no measured data for h200_sxm",
                 "self_attn/flash_attn_varlen", "communication"):
        assert text in out, text
    assert "roofline" in out and "measured" not in out.replace("no measured data", "")


def test_narrow_terminal_gets_one_line_per_location(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "qwen3-30b-a3b", "--tp", "8")
    assert code == 0
    assert "self_attn/flash_attn_varlen [attn.core]:" in out and "KV heads replicated ×2" in out


def test_json(capsys):
    code, out, err = run(capsys, "llama-3.1-8b", "--batch", "prefill:1x2048", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["necessary_work_available"] and d["map"]["id"] == "gqa-dense v1" and d["reconciliation"]["ok"]
    assert d["work_command"] == "graphsim work llama-3.1-8b --prefill 2048@0"
    assert 0 < d["r6_coverage"]["share"] <= 1
    assert {r["source"] for r in d["locations"]} == {"roofline"}


def test_deployment_without_a_fitting_map_is_reported_unsupported(capsys):
    other = next(p for p in shipped_map_paths() if p.name == "mla-moe.json")
    code, out, err = run(capsys, "llama-3.1-8b", "--map", str(other), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["necessary_work_available"] is False and "closest is mla-moe v1" in d["reason"]
    assert "locations" not in d and "r6_coverage" not in d
    code, out, _ = run(capsys, "llama-3.1-8b", "--map", str(other))
    assert "necessary work: unavailable" in out and "R6" not in out


def test_draft_map_is_written(capsys, tmp_path):
    path = tmp_path / "draft.json"
    code, out, err = run(capsys, "llama-3.1-8b", "--draft-map", str(path), "--no-table")
    assert code == 0, err
    m = load_map(path)  # well formed; every location listed with no rows yet
    assert len(m.entries) == 12 and all(not e.rows for e in m.entries)
    code, out, _ = run(capsys, "llama-3.1-8b", "--map", str(path), "--json")
    assert json.loads(out)["necessary_work_available"] is False


@pytest.mark.parametrize("args, message", [
    (["llama-3.1-8b", "--tp", "2", "--ep", "4"], "--ep 1 or --ep equal to --tp"),
    (["llama-3.1-8b", "--batch", "decode:64"], "malformed batch spec"),
    (["llama-3.1-8b", "--gpu", "tpu9"], "tpu9"),
    (["not-a-model"], "not-a-model"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    code, _out, err = run(capsys, *args)
    assert code == 2
    assert message in err and err.strip().count("\n") == 0


def test_broken_map_file_is_one_line_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "graphsim.location-map"}')
    code, _, err = run(capsys, "llama-3.1-8b", "--map", str(bad))
    assert code == 2 and "location map bad.json" in err and err.strip().count("\n") == 0

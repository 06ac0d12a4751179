"""`graphsim work`: tables, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest
from work_helpers import load_config

from graphsim.cli.app import main
from graphsim.work import accounting, parse_step


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["work", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_step_table(capsys):
    rc, out, err = run(capsys, "llama-3.1-8b", "--prefill", "8192@0", "--decode", "256x4096")
    assert rc == 0, err
    assert "layers.attn.core" in out and "8192@0 + 256x4096" in out and "T = 8,448 new tokens" in out


def test_params_table_keeps_tags(capsys):
    rc, out, _ = run(capsys, "deepseek-v3", "--params")
    assert rc == 0
    assert "layers[moe].ffn.routed" in out and "671,026,419,200" in out


def test_json_matches_the_library(capsys):
    rc, out, _ = run(capsys, "qwen3-30b-a3b", "--prefill", "1024@0", "--decode", "32x2048", "--params", "--json")
    assert rc == 0
    data = json.loads(out)
    want = accounting(load_config("Qwen3-30B-A3B")).step(parse_step(["1024@0"], ["32x2048"]))
    assert data["work"]["total"]["flops"] == want.total.flops
    assert data["work"]["step"]["tokens"] == 1024 + 32
    assert data["params"]["total"] == 30_532_122_624
    assert {s["name"] for s in data["work"]["segments"]} >= {"layers.ffn.routed", "layers.attn.core"}


def test_dtype_options(capsys):
    rc, out, _ = run(capsys, "llama-3.1-8b", "--decode", "8x1024", "--kv-dtype", "fp8", "--json")
    assert rc == 0
    data = json.loads(out)["work"]
    assert data["precision"]["kv"] == "fp8"
    assert data["total"]["state_read_bytes"] == 8 * 1024 * 32 * (2 * 8 * 128) * 1


def test_model_from_a_config_path(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load_config("Gemma-2-9b")))
    rc, out, _ = run(capsys, str(path), "--params", "--json")
    assert rc == 0 and json.loads(out)["params"]["total"] == 9_241_705_984


def _one_line_error(capsys, *args: str) -> str:
    rc, _, err = run(capsys, *args)
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("flag,value", [("--prefill", "8192"), ("--prefill", "x@1"), ("--decode", "256@4096")])
def test_malformed_workload(capsys, flag, value):
    assert "malformed" in _one_line_error(capsys, "llama-3.1-8b", flag, value)


def test_missing_field_and_bad_dims(capsys, tmp_path):
    cfg = load_config("Llama-3.1-8B")
    del cfg["num_attention_heads"]
    path = tmp_path / "missing.json"
    path.write_text(json.dumps(cfg))
    assert "'num_attention_heads'" in _one_line_error(capsys, str(path), "--params")

    cfg = load_config("Llama-3.1-8B") | {"hidden_size": 4100}
    path = tmp_path / "dims.json"
    path.write_text(json.dumps(cfg))
    line = _one_line_error(capsys, str(path), "--decode", "1x1")
    assert "not divisible" in line and "head_dim" in line


def test_unsupported_architecture_and_dtype(capsys, tmp_path):
    path = tmp_path / "unknown.json"
    path.write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"]}))
    assert "supported: " in _one_line_error(capsys, str(path), "--params")
    assert "unknown --dtype" in _one_line_error(capsys, "llama-3.1-8b", "--params", "--dtype", "fp5")

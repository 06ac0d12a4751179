"""`graphsim profile` on the command line: a JSON summary on a tiny config, clean errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from profiler_helpers import tiny_config

from graphsim.cli.app import main


def test_cuda_without_cuda_is_one_line_exit_2(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc = main(["profile", "--device", "cuda", "--model", "llama-3.1-8b", "-o", str(tmp_path / "x.db")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "--device cpu" in err and "CUDA" in err
    assert not (tmp_path / "x.db").exists()


def test_bad_kind_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["profile", "--model", "llama-3.1-8b", "--kinds", "gemmm", "-o", str(tmp_path / "x.db")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "gemmm" in err


def test_json_summary_on_a_tiny_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config()))
    out = tmp_path / "tiny.db"
    args = ["profile", "--device", "cpu", "--model", str(cfg), "--kinds", "gemm,rms_norm,attention_decode",
            "--quick", "--max-m", "2", "--max-kv", "128", "--threads", "1", "-o", str(out), "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows_written"] > 0 and summary["rows_skipped_existing"] == 0
    assert {k["table"] for k in summary["keys"]} == {"gemm", "attention_decode"}
    assert summary["threads"] == 1 and summary["target"] == "eager"
    assert main(args) == 0  # rerun: everything is already there
    again = json.loads(capsys.readouterr().out)
    assert again["rows_written"] == 0 and again["rows_skipped_existing"] == summary["rows_written"]
    assert main(["profile", "--device", "cpu", "--model", str(cfg), "--kinds", "gemm", "--quick", "--max-m", "2",
                 "--threads", "2", "-o", str(out)]) == 2  # resuming with another thread count is refused

"""A config that states no context length (the real Falcon-Mamba-7B and Mamba-Codestral-7B configs) is served at
the engine's fallback of 2048 tokens, as vLLM does (`_get_and_verify_max_len`: "Assuming the model's maximum length
is 2048"), and kv / simulate say so (text and --json)."""

from __future__ import annotations

import json

from transformers import FalconMambaConfig

from graphsim.cli.app import main

# vLLM's possible_keys (derive_max_model_len_and_key / _get_and_verify_max_len, 0.10.1 to 0.33.0)
VLLM_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
             "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# a tiny Falcon-Mamba: like the real 7B config.json, none of vLLM's keys
TINY = {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "hidden_size": 64,
        "num_hidden_layers": 2, "vocab_size": 128, "state_size": 16, "expand": 2, "conv_kernel": 4}


def _write(tmp_path) -> str:
    (tmp_path / "fm").mkdir()
    (tmp_path / "fm" / "config.json").write_text(json.dumps(TINY))
    return str(tmp_path / "fm" / "config.json")


def test_transformers_falcon_mamba_states_no_context_length():
    # the class defaults hold none either, so nothing fills one in when the config is loaded
    assert not set(VLLM_KEYS) & set(FalconMambaConfig().to_dict())


def test_kv_serves_at_vllms_fallback_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    cfg = _write(tmp_path)
    assert main(["kv", cfg, "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["engine"]["max_model_len"] == 2048
    assert d["engine"]["max_model_len_source"].startswith("vllm==0.33.0's fallback")
    assert "_get_and_verify_max_len" in d["engine"]["max_model_len_source"]
    cap = d["capacity"]
    # a pure Mamba model: one state page per request, and vLLM counts each page as max_model_len tokens, so the
    # logged size is num_blocks × 2048 and the concurrency is stated for 2,048 tokens per request
    assert cap["blocks_per_request"] == 1 and cap["tokens"] == cap["num_blocks"] * 2048
    assert "Maximum concurrency for 2,048 tokens per request" in cap["vllm_log_verbatim"][0]
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["kv", cfg, "--gpu", "h100", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "max_model_len 2,048: sglang==0.5.14's fallback" in out and "get_context_length" in out


def test_given_length_is_no_fallback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    assert main(["kv", _write(tmp_path), "--gpu", "h100", "--max-model-len", "8192", "--json"]) == 0
    e = json.loads(capsys.readouterr().out)["engine"]
    assert (e["max_model_len"], e["max_model_len_source"]) == (8192, "given (--max-model-len)")


def test_simulate_refuses_prompts_of_the_fallback_length(tmp_path, capsys, monkeypatch):
    # vLLM refuses a prompt of max_model_len tokens or more (entrypoints/openai/serving_engine.py _validate_input):
    # at the fallback 2048, prompts of 2048 tokens are all refused, so there is nothing to simulate (exit 2)
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    args = ["simulate", _write(tmp_path), "--gpu", "h100", "--concurrency", "2", "--num-prompts", "4",
            "--input-len", "2048", "--output-len", "4"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "every prompt is at least 2,048 tokens, and max_model_len is 2,048" in err

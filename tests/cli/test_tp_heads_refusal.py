"""A tp that does not divide the query heads: kv, simulate and predict refuse with the same one line, vLLM's own
(ModelConfig.verify_with_parallel_config, worded once in graphsim/vllm_checks.py), exit 2."""

from __future__ import annotations

import json

import pytest

from graphsim.cli.app import main

# 20 query heads over 4 kv heads: at tp 8 the kv heads replicate (8 is a multiple of 4), the query heads do not split
CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 320, "intermediate_size": 512,
       "num_hidden_layers": 2, "num_attention_heads": 20, "num_key_value_heads": 4, "vocab_size": 256,
       "max_position_embeddings": 4096}
LINE = ("error: vLLM refuses this model at tensor parallel size 8: 'Total number of attention heads (20) must be "
        "divisible by tensor parallel size (8)' (ModelConfig.verify_with_parallel_config); choose a -tp that divides 20")


def _cfg(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "400")  # one line, unwrapped
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(CFG))
    return str(tmp_path / "m" / "config.json")


def _refusal(capsys, argv: list[str]) -> str:
    assert main(argv) == 2, argv
    return capsys.readouterr().err.strip()


def test_kv_and_simulate_quote_vllm(tmp_path, capsys, monkeypatch):
    cfg = _cfg(tmp_path, monkeypatch)
    assert _refusal(capsys, ["kv", cfg, "--gpu", "h200", "--tp", "8"]) == LINE
    assert _refusal(capsys, ["simulate", cfg, "--gpu", "h200", "--tp", "8", "-n", "3", "--rate", "1"]) == LINE


@pytest.mark.slow  # predict traces the model first (~10 s on 2 cores)
def test_predict_says_the_same(tmp_path, capsys, monkeypatch):
    assert _refusal(capsys, ["predict", _cfg(tmp_path, monkeypatch), "--gpu", "h200", "--tp", "8"]) == LINE


def test_the_configs_heads_for_every_layout(tmp_path, capsys, monkeypatch):
    # vLLM reads the heads off the config before any layer: DeepSeek-V2-Lite's 16 MLA heads and Qwen3-Next's 16
    # attention heads at tp 3 are its refusal too (kv laid out MLA at tp 3 before, and named Qwen3-Next's linear heads)
    _cfg(tmp_path, monkeypatch)
    for name in ("deepseek-v2-lite", "qwen3-next-80b-a3b"):
        assert _refusal(capsys, ["kv", name, "--tp", "3"]) == (
            "error: vLLM refuses this model at tensor parallel size 3: 'Total number of attention heads (16) must be "
            "divisible by tensor parallel size (3)' (ModelConfig.verify_with_parallel_config); choose a -tp that "
            "divides 16")


def test_other_engines_say_whose_split_it_is(tmp_path, capsys, monkeypatch):
    cfg = _cfg(tmp_path, monkeypatch)
    err = _refusal(capsys, ["kv", cfg, "--gpu", "h200", "--tp", "8", "--engine", "sglang"])
    assert err.startswith("error: 20 attention heads do not split over tensor parallel size 8: SGLang's") and \
        "vLLM refuses" not in err

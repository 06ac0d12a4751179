"""Files of the wrong kind or with impossible numbers are one line and exit 2 in every command that reads them."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphsim", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def binary(tmp_path):
    p = tmp_path / "model.bin"  # (a .onnx name is refused as an ONNX file before it is read)
    p.write_bytes(b"\x08\x07\x12\x04onnx\xff\xfe\x00\x01")
    return p


@pytest.fixture
def nan_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": NaN}')
    return p


@pytest.mark.parametrize("command", [["work"], ["kv", "--gpu", "h200"]])
def test_a_binary_file_given_as_a_config(binary, command):
    r = _run(command[0], str(binary), *command[1:])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "not UTF-8 text" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["work"], ["kv", "--gpu", "h200"]])
def test_nan_in_a_config(nan_config, command):
    r = _run(command[0], str(nan_config), *command[1:])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "holds NaN" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_binary_location_map(binary):
    r = _run("analyze", "llama-3.1-8b", "--map", str(binary), "--no-table")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "not UTF-8 text" in r.stderr


def test_an_implausible_size_is_refused_before_any_work(tmp_path):
    # 1e9 layers used to run for minutes while memory climbed; now every bad size is named at once.
    p = tmp_path / "config.json"
    p.write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 1e9, '
                 '"hidden_size": 4096.5, "vocab_size": 0}')
    for command in (["work"], ["import"]):
        r = _run(command[0], str(p))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "num_hidden_layers = 1000000000.0 (must be a whole number in [1, 10,000])" in r.stderr
        assert "hidden_size = 4096.5" in r.stderr and "vocab_size = 0" in r.stderr


def test_an_encoder_is_refused_by_name(tmp_path):
    # BERT's masked LM used to be traced and priced as a decoder (its LayerNorm named fused_add_rms_norm).
    (tmp_path / "config.json").write_text(
        '{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, '
        '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128}')
    for command in ("import", "predict"):
        r = _run(command, str(tmp_path))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "BertForMaskedLM is not a causal (decoder) language model" in r.stderr


def _llama_text_with(tmp_path, old: str, new: str):
    from pathlib import Path

    from graphsim.catalog import resolve_model

    text = Path(resolve_model("llama-3.1-8b").location).read_text()
    assert old in text
    path = tmp_path / "config.json"
    path.write_text(text.replace(old, new, 1))
    return path


def test_infinity_as_a_bound_is_a_real_config_value(tmp_path):
    # Nemotron-H's config.json states "time_step_limit": [0.0, Infinity] (Python's json writes it so).
    path = _llama_text_with(tmp_path, '"vocab_size"', '"time_step_limit": [0.0, Infinity],\n  "vocab_size"')
    r = _run("work", str(path), "--params")
    assert r.returncode == 0, r.stderr


def test_infinity_as_a_size_is_refused(tmp_path):
    path = _llama_text_with(tmp_path, '"hidden_size": 4096', '"hidden_size": Infinity')
    r = _run("work", str(path), "--params")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "hidden_size = inf" in r.stderr and len(r.stderr.strip().splitlines()) == 1

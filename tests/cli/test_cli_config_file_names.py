"""A model config saved under any file name (graphsim's own catalog configs are `<name>.json`) is read as a config
by predict, as kv and simulate read it; a JSON that is neither a config nor a saved graph stays one line."""

import json
from pathlib import Path

import pytest

from graphsim.cli.app import main

pytest.importorskip("torch")

CATALOG = Path(__file__).resolve().parents[2] / "graphsim" / "catalog" / "configs"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))


def _predict(capsys, model: str) -> tuple[int, dict | None, str]:
    code = main(["predict", model, "--gpu", "h200", "-b", "decode:8x512", "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else None, out.err


def test_a_config_named_like_a_graph_file_is_a_config(capsys, tmp_path):
    # the same config under two names: `config.json` in a model directory (read as a config by its name) and
    # `tiny-llama.json` (was "not a graphsim graph file (missing format tag)"); the catalog's Llama-3.1-8B shrunk
    cfg = json.loads((CATALOG / "Llama-3.1-8B.json").read_text())
    cfg.update(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
               num_hidden_layers=2, vocab_size=1024, bos_token_id=1, eos_token_id=2)
    (tmp_path / "tiny-llama").mkdir()  # the same model name both ways: one trace, the second read from the cache
    for path in (tmp_path / "tiny-llama" / "config.json", tmp_path / "tiny-llama.json"):
        path.write_text(json.dumps(cfg))
    code, by_dir, err = _predict(capsys, str(tmp_path / "tiny-llama" / "config.json"))
    assert code == 0, err
    code, by_name, err = _predict(capsys, str(tmp_path / "tiny-llama.json"))
    assert code == 0, err
    assert by_dir is not None and by_name is not None
    assert by_name["batches"][0]["total_us"] == pytest.approx(by_dir["batches"][0]["total_us"])


def test_a_json_that_is_neither_is_one_line(capsys, tmp_path):
    path = tmp_path / "notes.json"
    path.write_text(json.dumps({"name": "x"}))
    code, _, err = _predict(capsys, str(path))
    assert code == 2 and "not a graphsim graph file" in err and "Traceback" not in err

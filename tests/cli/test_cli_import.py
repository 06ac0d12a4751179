"""CLI smoke tests for models / import / show, and each bad input: one line, exit code 2."""

import json

import pytest

from graphsim.cli.app import main

pytest.importorskip("torch")


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_models_lists_catalog(capsys):
    code, out, _ = run(capsys, "models", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {"llama-3.1-8b", "deepseek-v3", "qwen3-next-80b-a3b"} <= {r["name"] for r in rows}


def test_import_by_hf_id_shows_tree_and_writes_graph(capsys, tmp_path):
    out_file = tmp_path / "g.json"
    code, out, err = run(capsys, "import", "meta-llama/Llama-3.1-8B", "-o", str(out_file), "--max-ops", "2")
    assert code == 0, err
    assert "full.dense ×32" in out and "lm_head" in out and "8.03B" in out
    code, out, _ = run(capsys, "show", str(out_file), "--json")
    assert code == 0
    totals = json.loads(out)
    assert totals["layers"] == 32 and totals["param_count"] == 8030261248
    code, out, _ = run(capsys, "show", str(out_file))
    assert code == 0 and "full.dense ×32" in out


def test_import_json_report(capsys):
    code, out, _ = run(capsys, "import", "mixtral-8x7b-v0.1", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["num_layers"] == 32 and rep["opaque_ops"] == {} and rep["traced_layers"] == [0]


def _bad(capsys, *args):
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_unknown_catalog_name_suggests(capsys):
    msg = _bad(capsys, "import", "llama-3.1-8bb")
    assert "did you mean" in msg and "llama-3.1-8b" in msg


def test_malformed_config(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"architectures": ["LlamaForCausalLM"], ')
    assert "malformed config" in _bad(capsys, "import", str(p))


def test_incomplete_config_names_field(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}))
    msg = _bad(capsys, "import", str(p))
    assert "num_hidden_layers" in msg and "vocab_size" in msg


def test_inconsistent_config(capsys, tmp_path):
    from graphsim.catalog import resolve_model

    cfg = dict(resolve_model("llama-3.1-8b").config, num_attention_heads=7)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert "not a multiple" in _bad(capsys, "import", str(p))


def test_unknown_architecture(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["FooForCausalLM"], "model_type": "foo", "hidden_size": 8,
                             "num_hidden_layers": 1, "vocab_size": 10}))
    assert "not known to transformers" in _bad(capsys, "import", str(p))


def test_unreadable_onnx(capsys, tmp_path):
    p = tmp_path / "broken.onnx"
    p.write_bytes(b"not a protobuf at all")
    _bad(capsys, "import", str(p))


def test_unwritable_output_leaves_nothing(capsys, tmp_path):
    _bad(capsys, "import", "llama-3.1-8b", "-o", str(tmp_path / "missing-dir" / "g.json"))
    assert not (tmp_path / "missing-dir").exists()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import os

        if os.access(ro, os.W_OK):  # running as root: permissions do not bind; use a file as parent
            blocker = tmp_path / "file"
            blocker.write_text("x")
            _bad(capsys, "import", "llama-3.1-8b", "-o", str(blocker / "g.json"))
        else:
            _bad(capsys, "import", "llama-3.1-8b", "-o", str(ro / "g.json"))
            assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


def test_show_damaged_file(capsys, tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"format": "graphsim-graph", "version": 99}')
    assert "version" in _bad(capsys, "show", str(p))


def test_debug_shows_traceback(capsys):
    from graphsim.errors import UnknownModelError

    with pytest.raises(UnknownModelError):
        main(["--debug", "import", "no-such-model"])

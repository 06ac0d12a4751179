"""Models whose code is not in transformers (`--trust-remote-code`, importers/hf/remote_code.py): a tiny snapshot
written into tmp_path (config.json with auto_map, its own configuration / modelling files: a Llama-like decoder
named "Wombat" that transformers does not know) is built from its own files, traced, priced, laid out and simulated
with the flag; refused in one line without it; its code's failures are one line naming the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import resolve_model
from graphsim.cli.app import main
from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.importers.hf import import_hf
from graphsim.importers.hf.remote_code import TRUST_ENV, refusal
from graphsim.ir import AttentionAttrs, Op
from graphsim.work.registry import build_model

sys.path.insert(0, str(Path(__file__).parent))
from remote_snapshot import CONFIG, write_snapshot

# Parameters of the tiny Wombat (hidden 64, 4 heads of 16, 2 KV heads, intermediate 128, vocab 256, 3 layers):
# embed 256·64 = 16,384; per layer q 64·64 + k 64·32 + v 64·32 + o 64·64 = 12,288, MLP 3·64·128 = 24,576,
# two norms 128 → 36,992 × 3 = 110,976; final norm 64; lm_head 256·64 = 16,384 → 143,808.
PARAMS = 143_808
# KV per token: 3 layers × (K + V) × 2 KV heads × 16 × 2 B (bf16) = 384 B; a 16-token block 6,144 B (tp 1), and
# one KV head per rank at tp 2 → 3,072 B.
BLOCK_BYTES = {1: 6144, 2: 3072}


@pytest.fixture(autouse=True)
def _untrusted(monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_refused_without_the_flag(tmp_path, capsys):
    d = write_snapshot(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="ships its own model code"):
        import_hf(resolve_model(str(d)), cache=False)
    code, _, err = run(capsys, "import", str(d))
    assert code == 2
    line = one_line_error(err)
    assert "WombatForCausalLM" in line and "configuration_wombat.py, modeling_wombat.py" in line
    assert "pass --trust-remote-code to run it" in line


def test_auto_map_transformers_can_build_is_not_refused():
    # Kimi-K2's shape: a model_type transformers lacks naming a class it has (tests/importers/test_unknown_wrapper.py
    # builds it); its auto_map does not make it remote code without the flag.
    kimi = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
            "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}}
    assert refusal(kimi) is None
    assert refusal({k: v for k, v in CONFIG.items() if k != "auto_map"}) is None  # no auto_map: transformers' error
    assert "no code files" in (refusal(CONFIG, True, None) or "")  # trusted, but no snapshot directory
    no_lm = dict(CONFIG, auto_map={"AutoConfig": "configuration_wombat.WombatConfig"})
    assert "names no AutoModelForCausalLM" in (refusal(no_lm, True, Path("/x")) or "")


def test_builds_and_traces_from_its_own_code(tmp_path):
    d = write_snapshot(tmp_path)
    g, report = import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)
    assert report.architecture == "WombatForCausalLM" and report.remote_code == str(d)
    assert report.param_count == PARAMS and g.meta.num_layers == 3 and report.traced_layers == [0]
    assert report.dynamic_tokens and report.opaque_ops == {}
    attn = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert len(attn) == 1  # one traced layer (all three are alike)
    a = attn[0].attrs_as(AttentionAttrs)
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (4, 2, 16)


def test_cli_import_predict_kv_simulate(tmp_path, capsys):
    d = str(write_snapshot(tmp_path))
    code, out, err = run(capsys, "import", d, "--trust-remote-code", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["architecture"] == "WombatForCausalLM" and rep["param_count"] == PARAMS
    code, out, err = run(capsys, "import", d, "--trust-remote-code")
    assert code == 0, err
    said = f"built from the model's own code in {d} (--trust-remote-code)"
    assert "".join(said.split()) in "".join(out.split())  # (rich may fold the long path)
    code, out, err = run(capsys, "predict", d, "--trust-remote-code", "--gpu", "h200", "--json")
    assert code == 0, err
    assert all(b["total_us"] > 0 for b in json.loads(out)["batches"])
    for tp in (1, 2):
        code, out, err = run(capsys, "kv", d, "--trust-remote-code", "--gpu", "h200", "--tp", str(tp), "--json")
        assert code == 0, err
        kv = json.loads(out)
        assert kv["layout"]["source"] == "traced graph"
        assert kv["architecture"] == "WombatForCausalLM"
        assert kv["layout"]["bytes_per_token_per_rank"] * 16 == kv["layout"]["bytes_per_block"] == BLOCK_BYTES[tp]
    code, out, err = run(capsys, "simulate", d, "--trust-remote-code", "--gpu", "h200", "-n", "20", "--rate", "5",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["summary"]["completed"] == 20


def test_work_says_unavailable_in_one_line(tmp_path, capsys):
    with pytest.raises(UnsupportedArchitectureError, match="is the model's own code"):
        build_model(dict(CONFIG))
    code, _, err = run(capsys, "work", str(write_snapshot(tmp_path)), "--trust-remote-code")
    assert code == 2 and "work / analyze are unavailable" in one_line_error(err)


def test_a_modeling_file_that_raises_is_one_line(tmp_path, capsys):
    d = write_snapshot(tmp_path, extra='raise RuntimeError("wombat needs a GPU")')
    with pytest.raises(ConfigError, match=r"modeling_wombat\.py line 8 .*RuntimeError: wombat needs a GPU"):
        import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)
    code, _, err = run(capsys, "predict", str(d), "--trust-remote-code")
    assert code == 2 and "modeling_wombat.py" in one_line_error(err)
    syntax = write_snapshot(tmp_path, "syntax", extra="def (")
    with pytest.raises(ConfigError, match=r"syntax/modeling_wombat\.py: SyntaxError"):
        import_hf(resolve_model(str(syntax)), cache=False, trust_remote_code=True)
    missing = write_snapshot(tmp_path, "missing", extra="import wombat_kernels")
    with pytest.raises(ConfigError, match="wombat_kernels"):
        import_hf(resolve_model(str(missing)), cache=False, trust_remote_code=True)
    companion = write_snapshot(tmp_path, "companion", extra="from .wombat_cache import WombatCache")
    with pytest.raises(ConfigError, match=r"modeling_wombat\.py imports wombat_cache\.py, which .* does not hold"):
        import_hf(resolve_model(str(companion)), cache=False, trust_remote_code=True)


def test_code_the_snapshot_lacks_is_never_fetched(tmp_path):
    d = write_snapshot(tmp_path)
    (d / "modeling_wombat.py").unlink()
    with pytest.raises(ConfigError, match=r"names modeling_wombat\.py, which .* does not hold; graphsim never downloads"):
        import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)
    other = dict(CONFIG, auto_map=dict(CONFIG["auto_map"], AutoConfig="someone/wombat--configuration_wombat.WombatConfig"))
    e = write_snapshot(tmp_path, "elsewhere", config=other)
    with pytest.raises(ConfigError, match=r"code in another repository \(someone/wombat\)"):
        import_hf(resolve_model(str(e)), cache=False, trust_remote_code=True)


def test_a_forward_that_raises_under_the_trace_is_one_line(tmp_path, capsys):
    d = write_snapshot(tmp_path, tail='def _bad(self, x):\n    raise ValueError("wombat mlp is not ready")\n\n\n'
                                      "WombatMLP.forward = _bad\n")
    code, _, err = run(capsys, "import", str(d), "--trust-remote-code")
    assert code == 2
    line = one_line_error(err)
    assert "modeling_wombat.py line" in line and "ValueError: wombat mlp is not ready" in line


def test_attention_outside_the_interface_is_refused(tmp_path):
    d = write_snapshot(tmp_path)
    p = d / "modeling_wombat.py"
    p.write_text(p.read_text().replace("ALL_ATTENTION_FUNCTIONS.get(self.config._attn_implementation, plain_attention)",
                                       "plain_attention"))
    with pytest.raises(UnsupportedArchitectureError, match="attention was traced as plain tensor ops"):
        import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)


def test_cache_key_holds_the_code(tmp_path, monkeypatch):
    from graphsim.importers import graph_cache

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # a cache of its own, on whatever CI sets
    monkeypatch.delenv(graph_cache.NO_CACHE_ENV, raising=False)
    d = write_snapshot(tmp_path, "wombat-cached")
    _, first = import_hf(resolve_model(str(d)), trust_remote_code=True)
    _, again = import_hf(resolve_model(str(d)), trust_remote_code=True)
    assert first.cache.startswith("stored ") and again.cache.startswith("hit ") and again.remote_code == str(d)
    p = d / "modeling_wombat.py"
    p.write_text(p.read_text() + "\n# edited\n")  # same config, other code: traced again
    _, edited = import_hf(resolve_model(str(d)), trust_remote_code=True)
    assert edited.cache.startswith("stored ") and edited.cache != first.cache


def test_a_snapshot_in_the_local_hf_cache(tmp_path, monkeypatch):
    # huggingface_hub's layout: snapshots/<commit>/<file> are symlinks to blobs/<hash>, refs/main names the commit
    files = write_snapshot(tmp_path / "src", "files")
    repo = tmp_path / "hub" / "models--acme--wombat"
    snap = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(files.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        blob.write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(blob)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr("graphsim.catalog.hf_cache_dirs", lambda: [tmp_path / "hub"])
    resolved = resolve_model("acme/wombat")
    assert resolved.source == "hf-cache"
    with pytest.raises(UnsupportedArchitectureError, match="pass --trust-remote-code"):
        import_hf(resolved, cache=False)
    _, report = import_hf(resolved, cache=False, trust_remote_code=True)
    assert report.architecture == "WombatForCausalLM" and report.param_count == PARAMS
    assert report.remote_code == str(snap)


def test_an_attention_class_table_without_graphsim_is_refused_by_name(tmp_path):
    # pre-4.48 remote code picks its attention class from a table keyed by config._attn_implementation (eager / sdpa /
    # flash_attention_2, as DeciLM's DECILM_ATTENTION_CLASSES): no graphsim entry, so no attention node
    d = write_snapshot(tmp_path)
    p = d / "modeling_wombat.py"
    text = p.read_text().replace("        self.attn = WombatAttention(config, layer_idx)",
                                 "        self.attn = TABLE[config._attn_implementation](config, layer_idx)")
    p.write_text(text.replace("    _supports_attention_backend = True", "    _supports_sdpa = True")
                 + "\nTABLE = {'eager': WombatAttention, 'sdpa': WombatAttention}\n")
    with pytest.raises(UnsupportedArchitectureError,
                       match=r"does not accept graphsim's attention implementation in .*modeling_wombat\.py line"):
        import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)


def test_trusted_config_only_directory_of_a_transformers_model(tmp_path, capsys):
    # `--trust-remote-code` out of habit (as with vllm serve) on a directory holding only config.json of a model
    # transformers has: built by transformers, with a notice; Kimi-K2's shape (test_unknown_wrapper.py)
    from test_unknown_wrapper import KIMI_TEXT

    d = tmp_path / "kimi-config-only"
    d.mkdir()
    auto = {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
            "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}
    (d / "config.json").write_text(json.dumps(dict(KIMI_TEXT, auto_map=auto)))
    _, report = import_hf(resolve_model(str(d)), cache=False, trust_remote_code=True)
    assert report.architecture == "DeepseekV3ForCausalLM" and report.remote_code == ""
    err = capsys.readouterr().err
    assert "holds no configuration_deepseek.py, modeling_deepseek.py (auto_map): built with transformers' own" in err

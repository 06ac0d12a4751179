"""Pricing speculative steps on traced graphs: the verify step's work, the MTP draft tree, the draft model of
EAGLE, the simulator's tables against predict's exact evaluation, and the CLI (predict, kv, simulate)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphsim.catalog import resolve_model
from graphsim.cli.app import main
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelKind, Rows
from graphsim.serving.speculative import parse_speculative_config
from graphsim.workload import SeqGroup, Step

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # traces two tiny models (a few seconds each on a loaded 2-core machine)

HIDDEN = 256


@pytest.fixture(scope="module")
def tiny_ds(tmp_path_factory):
    """DeepSeek-V3's config shrunk (hidden 256, 3 layers: 1 dense + 2 MoE, 8 experts), its MTP layer kept."""
    cfg = dict(resolve_model("deepseek-v3").config)
    cfg.pop("quantization_config", None)
    cfg.pop("rope_scaling", None)
    cfg.update(hidden_size=HIDDEN, intermediate_size=512, moe_intermediate_size=128, n_routed_experts=8,
               num_experts_per_tok=2, n_group=2, topk_group=1, num_hidden_layers=3, first_k_dense_replace=1,
               num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32,
               qk_rope_head_dim=16, v_head_dim=32, vocab_size=1024, n_shared_experts=1, max_position_embeddings=4096)
    d = tmp_path_factory.mktemp("tinyds")
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """Llama-3.1-8B's config shrunk: a target (2 layers) and a one-layer EAGLE-style draft."""
    base = dict(resolve_model("llama-3.1-8b").config)
    base.pop("rope_scaling", None)
    base.update(hidden_size=HIDDEN, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=1024, max_position_embeddings=4096, head_dim=64)
    d = tmp_path_factory.mktemp("tinyllama")
    (d / "target").mkdir()
    (d / "draft").mkdir()
    (d / "target" / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 2}))
    (d / "draft" / "config.json").write_text(json.dumps({**base, "num_hidden_layers": 1}))
    return str(d / "target" / "config.json"), str(d / "draft" / "config.json")


@pytest.fixture(scope="module")
def ds_cm(tiny_ds, tmp_path_factory):
    import os

    os.environ.setdefault("GRAPHSIM_HOME", str(tmp_path_factory.mktemp("home")))
    from graphsim.cost_model import build_cost_model

    return build_cost_model(tiny_ds, "h200", default_profile=False)


def _gemm_flops(cm, steps):
    ev = cm.evaluate(steps)
    flops, _ = ev.leaf_work()
    gemm = np.asarray([lf.attrs.kind in (KernelKind.GEMM, KernelKind.MOE_EXPERTS) for lf in cm.tree.leaves])
    return (flops[gemm] * cm.tree.multiplicity[gemm, None]).sum(axis=0)


def test_verify_step_is_k_plus_one_tokens_of_work(ds_cm):
    from graphsim.serving.spec_cost import verify_step

    # B = 4 sequences at context 256, k = 3: every GEMM (LM head included: logits at every draft position) and
    # the routed experts see 4 × (3 + 1) = 16 rows, exactly 4× a plain decode step's 4
    f = _gemm_flops(ds_cm, [verify_step(4, 256, 3), Step((SeqGroup(1, 256, 4),))])
    assert f[0] == pytest.approx(4 * f[1], rel=1e-12)
    assert verify_step(4, 256, 3).tokens == 16


def test_mtp_draft_is_one_last_layer_plus_its_head(ds_cm):
    from graphsim.serving.spec_cost import mtp_draft_tree

    tree, note = mtp_draft_tree(ds_cm)
    assert "full.moe" in note and (tree.multiplicity == 1).all()
    names = [lf.name for lf in tree.leaves]
    assert {"mtp.eh_proj", "mtp.enorm", "mtp.hnorm"} <= set(names)
    eh = next(lf for lf in tree.leaves if lf.name == "mtp.eh_proj").attrs.geometry_as(GemmGeometry)
    assert (eh.n, eh.k) == (HIDDEN, 2 * HIDDEN)
    # one MoE layer: the target's two MoE layers' routed experts are priced twice per step, the draft's once
    target_moe = [i for i, lf in enumerate(ds_cm.tree.leaves) if lf.attrs.kind is KernelKind.MOE_EXPERTS]
    draft_moe = [lf for lf in tree.leaves if lf.attrs.kind is KernelKind.MOE_EXPERTS]
    assert len(draft_moe) == 1 and ds_cm.tree.multiplicity[target_moe[0]] == 2
    # eh_proj's FLOPs at 16 tokens, by hand: 2 × 16 × (2 × 256) × 256 = 4,194,304
    ev = tree.evaluate([Step((SeqGroup(1, 100, 16),))], ds_cm.pricer, ds_cm.dtypes)
    i = names.index("mtp.eh_proj")
    assert ev.leaf_work()[0][i, 0] == 4_194_304
    # the LM head samples one row a sequence
    assert any(lf.attrs.rows is Rows.SEQUENCES and lf.attrs.kind is KernelKind.GEMM for lf in tree.leaves)


def test_parts_add_up_and_k1_has_one_draft_pass(ds_cm):
    from graphsim.serving.spec_cost import spec_report, speculative_pricer

    cfg = resolve_model("deepseek-v3").config
    for k in (1, 3):
        p = speculative_pricer(ds_cm, parse_speculative_config({"method": "mtp", "num_speculative_tokens": k}, cfg), 1024)
        r = spec_report(p, "decode:8x512", 8, 512, 2.0)
        names = [x.name for x in r.parts]
        assert (any("passes 2.." in n for n in names)) == (k > 1)
        assert r.total_us == pytest.approx(sum(x.time_us for x in r.parts))
        assert all(x.time_us > 0 for x in r.parts)
        # the speculative step costs more than a plain decode step, per step
        assert r.total_us > r.plain_decode_us
    ng = speculative_pricer(ds_cm, parse_speculative_config({"method": "ngram", "num_speculative_tokens": 2}), 1024)
    parts = ng.parts(8, 512, [])
    draft = [x for x in parts if x.name.startswith("draft")]
    assert [(x.time_us, x.source) for x in draft] == [(0.0, "missing")]


def test_simulator_tables_match_exact_pricing(ds_cm):
    from graphsim.serving.pricing import iteration_cost
    from graphsim.serving.spec_cost import SpecIterationCost, speculative_pricer

    spec = parse_speculative_config({"method": "mtp", "num_speculative_tokens": 2}, resolve_model("deepseek-v3").config)
    p = speculative_pricer(ds_cm, spec, 1024)
    assert p.draft is not None and p.draft_pricer is not None and p.draft_dtypes is not None
    rows = 16 * 3
    target = iteration_cost(ds_cm.tree, ds_cm.pricer, ds_cm.dtypes, 256, rows, 4096)
    draft = iteration_cost(p.draft, p.draft_pricer, p.draft_dtypes, 256, rows, 4096)
    sim = SpecIterationCost(target, draft, 2, 1024, p.bandwidth)
    for b, c in ((4, 512), (16, 1000)):
        exact = sum(x.time_us for x in p.parts(b, c, []))
        t, _ = sim.step_us(b * 3, b, b, float(c), [])
        assert t == pytest.approx(exact, rel=0.02)


def test_eagle3_draft_model_adds_fc(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path))
    from graphsim.cost_model import build_cost_model
    from graphsim.serving.spec_cost import speculative_pricer

    target, draft = tiny_llama
    cm = build_cost_model(target, "h200", default_profile=False)
    spec = parse_speculative_config({"method": "eagle3", "model": draft, "num_speculative_tokens": 2})
    p = speculative_pricer(cm, spec, 1024)
    assert p.draft is not None
    fc = next(lf for lf in p.draft.leaves if lf.name == "eagle3.fc").attrs.geometry_as(GemmGeometry)
    assert (fc.n, fc.k) == (HIDDEN, 3 * HIDDEN)
    # the draft has one decoder layer: its attention leaf appears once with multiplicity 1
    attn = [i for i, lf in enumerate(p.draft.leaves) if lf.attrs.kind is KernelKind.ATTENTION]
    assert len(attn) == 1 and p.draft.multiplicity[attn[0]] == 1


# --- the CLI --------------------------------------------------------------------------------------------------------
def _json(capsys, *args):
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_cli_predict_kv_simulate(tiny_ds, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path))
    sc = '{"method": "deepseek_mtp", "num_speculative_tokens": 2}'
    p = _json(capsys, "predict", tiny_ds, "--gpu", "h200", "-b", "decode:8x512",
              "-b", "prefill:1x256", "--speculative-config", sc, "--spec-acceptance", "0.8,0.5")
    s = p["speculative"]
    assert s["config"] == {"method": "mtp", "num_speculative_tokens": 2}
    # 1 + 0.8 + 0.8 × 0.5 = 2.2 tokens a step
    assert s["expected_tokens_per_step"] == pytest.approx(2.2)
    assert [x["batch"] for x in s["steps"]] == ["decode:8x512"] and s["not_speculative"] == ["prefill:1x256"]
    step = s["steps"][0]
    assert step["total_us"] == pytest.approx(sum(x["time_us"] for x in step["parts"]))
    assert step["us_per_token"] == pytest.approx(step["total_us"] / (8 * 2.2))
    # the parts' kernels as predict shows a batch: the verify step is 8 × 3 decode rows; two draft passes priced
    v, dr = s["verify_kernels"]["batches"], s["draft_kernels"]["batches"]
    assert [(b["tokens"], b["sequences"]) for b in v] == [(24, 24)] and len(dr) == 2
    assert v[0]["total_us"] == pytest.approx(step["parts"][0]["time_us"])
    plain = _json(capsys, "kv", tiny_ds, "--gpu", "h200")
    kv = _json(capsys, "kv", tiny_ds, "--gpu", "h200", "--speculative-config", sc)
    # one MTP layer of MLA latent: (32 + 16) × 2 B = 96 B a token more
    assert kv["layout"]["bytes_per_token_per_rank"] - plain["layout"]["bytes_per_token_per_rank"] == 96
    assert any(t["name"] == "draft weights" and t["bytes"] > 0 for t in kv["memory"]["terms"])
    sim = _json(capsys, "simulate", tiny_ds, "--gpu", "h200", "--rate", "50", "-n", "20",
                "--input-len", "128", "--output-len", "40", "--speculative-config", sc, "--spec-acceptance", "1")
    r = sim["speculative"]
    assert r["acceptance"] == [1.0, 1.0] and r["realised_acceptance"] == pytest.approx(1.0)
    assert r["realised_tokens_per_step"] == pytest.approx(3.0, abs=0.2)  # less only where max_tokens cuts a step



def test_cli_search_mtp_off_and_on_and_launch_files(tiny_ds, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    out = tmp_path / "launch"
    d = _json(capsys, "search", tiny_ds, "--gpus", "2", "--gpu", "h200", "--isl", "512", "--osl", "128", "--mode", "agg",
              "--tp", "1", "--max-num-seqs", "8,32", "--max-num-batched-tokens", "2048", "--verify", "1", "--refine", "0",
              "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}', "--spec-acceptance", "0.8",
              "--save-dir", str(out))
    assert set(d["per_setting"]) == {"off", "on"} and d["best"] in ("off", "on")
    assert d["speculative"]["expected_tokens_per_step"] == pytest.approx(1 + 0.8 + 0.64)  # 2.44
    off, on = (d["searches"][n]["rows"] for n in ("off", "on"))
    # the same candidates either way; the better best under the SLOs (none given: all meet them) wins
    assert sorted(r["candidate"]["label"] for r in off) == sorted(r["candidate"]["label"] for r in on)
    figures = {n: d["per_setting"][n]["output_tokens_per_s_per_gpu"] for n in ("off", "on")}
    assert figures[d["best"]] == max(figures.values())
    launch = (out / "launch.sh").read_text()
    assert ("--speculative-config" in launch) == (d["best"] == "on")

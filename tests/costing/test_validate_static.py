"""benchmarks/validate_static.py: its op categories and model groups (fast), and a --quick run end to end (slow:
imports aiconfigurator's H200 tables and compiles its engine). The accuracy figures are benchmark output, not
asserted here."""

import argparse
import math

import pytest


def test_aiconfigurator_op_names_fall_in_graphsim_categories(benchmark_script):
    V = benchmark_script("validate_static")
    # op names as aiconfigurator-core 0.12's run_static_per_op / decode_step_per_op return them
    want = {"context_qkv_gemm": "gemm", "generation_logits_gemm": "gemm", "context_router_gemm": "gemm",
            "context_attention": "attention", "generation_mla_block": "attention", "context_moe": "moe",
            "generation_moe_overlap": "moe", "context_moe_pre_dispatch": "communication",
            "context_tp_allreduce": "communication", "context_ar_1": "communication", "context_p2p": "communication",
            "context_add_norm_1": "norm", "generation_act_gate": "activation", "context_embedding": "embedding"}
    assert {name: V.aic_category(name) for name in want} == want


def test_model_groups_come_from_the_config(benchmark_script):
    from graphsim.catalog import resolve_model

    V = benchmark_script("validate_static")
    groups = {m: V.model_group(resolve_model(m).config) for m in ("llama-3.1-8b", "qwen3-32b", "qwen3-30b-a3b",
                                                                  "deepseek-v3")}
    assert groups == {"llama-3.1-8b": "dense", "qwen3-32b": "dense", "qwen3-30b-a3b": "MoE/MLA",
                      "deepseek-v3": "MoE/MLA"}
    assert V.median([3.0, 1.0, 2.0]) == 2.0 and V.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert math.isnan(V.median([]))


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path, benchmark_script):
    pytest.importorskip("torch")
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    V = benchmark_script("validate_static")
    args = argparse.Namespace(systems="h200_sxm", quick=True, models="llama-3.1-8b", db=None,
                              db_dir=str(tmp_path), detail=0.10, json=True)
    out = V.run(args)
    assert [c["step"] for c in out["cases"]] == V.QUICK_STEPS
    for c in out["cases"]:
        assert c["graphsim_ms"] > 0 and c["aiconfigurator_ms"] > 0 and math.isfinite(c["diff"])
        assert abs(sum(c["shares"].values()) - 1) < 1e-9
    (s,) = out["summary"]
    assert s["group"] == "dense" and s["cases"] == len(V.QUICK_STEPS)

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



def _case(model: str, step: str, diff: float, eager: float | None = None) -> dict:
    c = {"system": "h200_sxm", "group": "MoE/MLA", "model": model, "step": step, "diff": diff}
    if eager is not None:
        c["eager_exception"] = {"graphsim_reading_eager_rows_ms": 1.0, "diff": eager}
    return c


def test_summary_states_the_eager_rows_exceptions_on_both_readings(benchmark_script):
    V = benchmark_script("validate_static")
    cases = [_case("a", "decode:1x1", -0.275, eager=-0.060), _case("a", "prefill:1x8192", -0.160),
             _case("b", "decode:1x1", 0.140), _case("a", "prefill:1x1024", -0.202, eager=-0.121)]
    (s,) = V.summarize(cases, ["h200_sxm"])
    # as graphsim prices: |diffs| 0.275, 0.160, 0.140, 0.202 → median (0.160 + 0.202) / 2 = 0.181, worst 0.275
    assert s["median_abs_diff"] == pytest.approx(0.181) and s["worst_abs_diff"] == pytest.approx(0.275)
    assert s["worst_case"] == "a decode:1x1" and s["eager_exceptions"] == 2
    # the two exceptions on aiconfigurator's reading: 0.060, 0.160, 0.140, 0.121 → median (0.121 + 0.140) / 2 =
    # 0.1305, worst 0.160 (a case that is no exception)
    assert s["median_abs_diff_eager_as_reference"] == pytest.approx(0.1305)
    assert s["worst_abs_diff_eager_as_reference"] == pytest.approx(0.160)
    assert s["worst_case_eager_as_reference"] == "a prefill:1x8192"


def test_the_counterfactual_reads_eager_rows_as_gpu_time(tmp_path, benchmark_script):
    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.eager_rows import eager_floors
    from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    V = benchmark_script("validate_static")
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0",
                       torch_version="", provenance={"source": "aiconfigurator-core"})
    path = tmp_path / "eager.db"
    with ProfileDB.create(path, meta) as db:
        db.put_many([(GemmKey(4096, 4096, KernelDtype.FP8_BLOCK), GemmPoint(m), Measurement(t))
                     for m, t in {1: 60.0, 64: 84.0}.items()])
    assert V.has_eager_rows(path)
    with ProfileDB.open(path) as db:
        assert eager_floors(db) == {"fp8_block": 60.0}
        with V.eager_rows_as_gpu_time():
            assert eager_floors(db) == {}  # every row read as GPU time, as aiconfigurator reads it
        assert eager_floors(db) == {"fp8_block": 60.0}  # and back after it


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


# --- the reference's KV cache and the op-by-op alignment (fast) -------------------------------------------------


def _graph_with(quantization_config: dict | None, dtype: str = "bfloat16"):
    from types import SimpleNamespace

    from graphsim.ir.meta import GraphMeta

    return SimpleNamespace(meta=GraphMeta(source_format="test", dtype=dtype, quantization_config=quantization_config))


def test_the_reference_reads_the_kv_dtype_graphsim_prices(benchmark_script):
    V = benchmark_script("validate_static")
    # DeepSeek-V3's fp8 checkpoint states no KV scheme: vLLM's --kv-cache-dtype auto is the model dtype (bf16),
    # which aiconfigurator's default (fp8, from the weights' quantization) is not
    ds_v3 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
    assert V.reference_kv_mode(_graph_with(ds_v3)) == "bfloat16"
    assert V.reference_kv_mode(_graph_with(None)) == "bfloat16"
    # a checkpoint that ships an fp8 cache (ModelOpt kv_cache_quant_algo): fp8 on both sides
    modelopt = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    assert V.reference_kv_mode(_graph_with(modelopt)) == "fp8"


def test_models_take_any_catalog_name_at_a_tp(benchmark_script):
    V = benchmark_script("validate_static")
    assert V.select_models("qwen3-235b-a22b:8,deepseek-v3", V.MODELS) == [("qwen3-235b-a22b", 8), ("deepseek-v3", 8)]
    assert V.select_models("llama-3.1-8b", V.MODELS) == [("llama-3.1-8b", 1)]
    with pytest.raises(SystemExit, match="positive integer"):
        V.select_models("qwen3-235b-a22b:x", V.MODELS)


def _row(kernel: str, kind: str, total_us: float, region: str = "full.moe ×94", count: int = 94):
    from types import SimpleNamespace

    return SimpleNamespace(kernel=kernel, kind=kind, total_us=total_us, region=region, count=count)


def test_per_op_sets_both_sides_side_by_side(benchmark_script):
    from types import SimpleNamespace

    V = benchmark_script("validate_static")
    rows = [_row("embedding", "embedding", 3.0, "before layers", 1),
            _row("all_reduce", "all_reduce", 12.0, "before layers", 1),
            _row("rms_norm", "rms_norm", 282.0), _row("qkv_proj", "gemm", 846.0),
            _row("rotary_embedding", "rotary", 282.0), _row("flash_attn_varlen", "attention", 5452.0),
            _row("o_proj", "gemm", 564.0), _row("all_reduce", "all_reduce", 1128.0),
            _row("fused_add_rms_norm", "fused_add_rms_norm", 282.0), _row("gate", "gemm", 564.0),
            _row("fused_moe", "moe_experts", 22560.0), _row("all_reduce", "all_reduce", 1128.0),
            _row("lm_head", "gemm", 64.0, "after layers", 1), _row("all_gather", "all_gather", 76.0, "after layers", 1)]
    batch = SimpleNamespace(rows=rows, overlaps=[{"hidden_us": 100.0}])
    ops = [("generation_embedding", 0.003, "empirical"), ("generation_embedding_ar", 0.012, "silicon"),
           ("generation_add_norm_1", 0.350, "empirical"), ("generation_qkv_gemm", 0.850, "silicon"),
           ("generation_attention", 5.450, "silicon"), ("generation_proj_gemm", 0.580, "silicon"),
           ("generation_add_norm_2", 0.350, "empirical"), ("generation_router_gemm", 0.560, "silicon"),
           ("generation_moe_pre_dispatch", 1.128, "silicon"), ("generation_moe", 22.560, "silicon"),
           ("generation_moe_post_dispatch", 1.128, "silicon"), ("generation_logits_gemm", 0.064, "silicon"),
           ("generation_p2p", 0.0, "silicon")]
    table = {r["op"]: (r["graphsim_us"], r["aiconfigurator_us"]) for r in V.per_op(batch, ops)}
    assert list(table) == [op for op in V.OPS if op in table]  # in decoder-layer order
    assert table["embedding all-reduce"] == (12.0, 12.0)
    assert table["norms"] == pytest.approx((282.0 + 282.0, 350.0 + 350.0))  # both layer norms on both sides
    assert table["rotary"] == (282.0, 0.0)  # aiconfigurator has no RoPE op
    assert table["qkv GEMM"] == pytest.approx((846.0, 850.0)) and table["o GEMM"] == pytest.approx((564.0, 580.0))
    assert table["router GEMM"] == pytest.approx((564.0, 560.0))
    # the two TP all-reduces of a layer: graphsim's by place, aiconfigurator's moe pre/post dispatch
    assert table["TP all-reduce"] == pytest.approx((2256.0, 2256.0))
    assert table["MoE"] == pytest.approx((22560.0 - 100.0, 22560.0))  # the overlap's hidden time booked under MoE
    assert table["logits GEMM"] == pytest.approx((64.0, 64.0)) and table["logits all-gather"] == (76.0, 0.0)
    assert table["other"] == (0.0, 0.0)  # aiconfigurator's p2p (0 µs without pipeline stages)


@pytest.mark.slow
def test_tp8_moe_decode_reads_aiconfigurators_rows_op_by_op(tmp_path, benchmark_script):
    """Qwen3-30B-A3B at TP 8 (4 KV heads over 8 ranks: one a rank, replicated), decode 64×4096 on H200: every op both
    sides have is priced from the same row (the MoE experts, attention, the GEMMs, both TP all-reduces); what graphsim
    adds is the launches aiconfigurator has no op for (docs/cost-model.md, MoE decode op by op)."""
    pytest.importorskip("torch")
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    V = benchmark_script("validate_static")
    args = argparse.Namespace(systems="h200_sxm", quick=False, models="qwen3-30b-a3b:8", steps="decode:64x4096",
                              per_op=True, db=None, db_dir=str(tmp_path), detail=0.10, json=True)
    (case,) = V.run(args)["cases"]
    ops = {r["op"]: r for r in case["per_op"]}
    for op in ("embedding all-reduce", "qkv GEMM", "attention", "o GEMM", "TP all-reduce", "router GEMM", "MoE",
               "logits GEMM"):
        g, a = ops[op]["graphsim_us"], ops[op]["aiconfigurator_us"]
        assert a > 0 and abs(g / a - 1) < 0.02, (op, g, a)
    assert ops["rotary"]["aiconfigurator_us"] == 0 < ops["rotary"]["graphsim_us"]
    assert ops["logits all-gather"]["aiconfigurator_us"] == 0 < ops["logits all-gather"]["graphsim_us"]

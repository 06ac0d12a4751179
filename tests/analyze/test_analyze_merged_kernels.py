"""vLLM's compiled mode in the analyzer: a generated kernel (the inductor pass's `triton_fused`) takes the rows of every
custom-op kernel it replaced (`Site.members`), through the derived map's rules and through a shipped map that names
the custom-op kernels (`maps.merged_view`). Plain sites and rows (no torch), then Qwen3's q/k norms end to end."""

from __future__ import annotations

import pytest
from plain_sites import Rows as _Rows
from plain_sites import row as _row
from plain_sites import site as _site

from graphsim.work.analyzer import Site, check_map, draft_map, validate_map_data
from graphsim.work.analyzer.derived import derive_map
from graphsim.work.analyzer.locations import Member

R = "full.dense"
Q_NORM, K_NORM = f"{R}/self_attn.q_norm/rms_norm", f"{R}/self_attn.k_norm/rms_norm"
MERGED = f"{R}/self_attn.q_norm/triton_fused"




LAYER_ROWS = ["attn.norm:input_layernorm", "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
              "attn.qkv:self_attn.v_proj", "attn.norm:self_attn.q_norm", "attn.norm:self_attn.k_norm",
              "attn.out:self_attn.o_proj", "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.gate_proj",
              "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj", "attn.core:compute"]
ROWS = _Rows([_row("outside", "embed"), _row("outside", "final_norm"), _row("outside", "head")]
             + [_row(R, ref) for ref in LAYER_ROWS])


def _sites(compiled: bool) -> list[Site]:
    """A Qwen3 dense layer; compiled, its q and k norms are one generated kernel (located at the first's scope)."""
    norms = ([_site(MERGED, "elementwise", (Member(Q_NORM, "rms_norm", "rms_norm"),
                                            Member(K_NORM, "rms_norm", "rms_norm")))]
             if compiled else [_site(Q_NORM, "rms_norm"), _site(K_NORM, "rms_norm")])
    layer = [_site(f"{R}/input_layernorm/rms_norm", "rms_norm"), _site(f"{R}/self_attn/qkv_proj", "gemm"), *norms,
             _site(f"{R}/self_attn/rotary_embedding", "rotary"), _site(f"{R}/self_attn/attn", "attention"),
             _site(f"{R}/self_attn.o_proj/o_proj", "gemm"), _site(f"{R}/[layer]/fused_add_rms_norm", "fused_add_rms_norm"),
             _site(f"{R}/mlp/gate_up_proj", "gemm"), _site(f"{R}/mlp/silu_and_mul", "act_and_mul"),
             _site(f"{R}/mlp.down_proj/down_proj", "gemm")]
    return [_site("outside/model.embed_tokens/embedding", "embedding"), *layer,
            _site("outside/model/fused_add_rms_norm", "fused_add_rms_norm"), _site("outside/lm_head/lm_head", "gemm")]


def _map(regions: dict) -> dict:
    return {"schema": "graphsim.location-map", "schema_version": 1, "id": "t", "version": 1, "title": "t",
            "fuse_target": "vllm", "regions": regions}


def test_a_generated_kernel_carries_both_norm_rows_by_the_derived_rules():
    sites = _sites(compiled=True)
    m = derive_map(sites, ROWS, "vllm")  # type: ignore[arg-type]  # a RowSet's rows and of_region suffice
    check = check_map(m, sites, ROWS, "vllm")  # type: ignore[arg-type]
    assert check.ok, check.problems
    got = {loc: tuple(r.ref for r in rows) for loc, rows in check.assignment.items()}
    # the one generated kernel holds both per-head norms' rows; the norm rows' one-to-one rule saw two norm kernels
    assert got[MERGED] == ("attn.norm:self_attn.q_norm", "attn.norm:self_attn.k_norm")
    assert got[f"{R}/input_layernorm/rms_norm"] == ("attn.norm:input_layernorm",)
    assert got[f"{R}/[layer]/fused_add_rms_norm"] == ("ffn.norm:post_attention_layernorm",)
    assert Q_NORM not in got and K_NORM not in got
    # the same rules on the custom-op graph (--enforce-eager) give each norm kernel its own row
    eager = _sites(compiled=False)
    e = check_map(derive_map(eager, ROWS, "vllm"), eager, ROWS, "vllm")  # type: ignore[arg-type]
    assert e.ok and tuple(r.ref for r in e.assignment[K_NORM]) == ("attn.norm:self_attn.k_norm",)


def test_a_shipped_map_naming_the_custom_op_kernels_fits_the_compiled_graph():
    layer = [{"at": "input_layernorm/rms_norm", "rows": ["attn.norm:input_layernorm"]},
             {"at": "self_attn/qkv_proj", "rows": ["attn.qkv"]},
             {"at": "self_attn.q_norm/rms_norm", "rows": ["attn.norm:self_attn.q_norm"], "note": "q"},
             {"at": "self_attn.k_norm/rms_norm", "rows": ["attn.norm:self_attn.k_norm"], "note": "k"},
             {"at": "self_attn/rotary_embedding", "rows": []}, {"at": "self_attn/attn", "rows": ["attn.core"]},
             {"at": "self_attn.o_proj/o_proj", "rows": ["attn.out"]},
             {"at": "[layer]/fused_add_rms_norm", "rows": ["ffn.norm"]},
             {"at": "mlp/gate_up_proj", "rows": ["ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj"]},
             {"at": "mlp/silu_and_mul", "rows": []}, {"at": "mlp.down_proj/down_proj", "rows": ["ffn.mlp:mlp.down_proj"]}]
    outside = [{"at": "model.embed_tokens/embedding", "rows": ["embed"]},
               {"at": "model/fused_add_rms_norm", "rows": ["final_norm"]}, {"at": "lm_head/lm_head", "rows": ["head"]}]
    m = validate_map_data(_map({"outside": outside, R: layer}))
    for compiled in (False, True):  # one map serves the custom-op graph and the compiled one
        check = check_map(m, _sites(compiled), ROWS, "vllm")  # type: ignore[arg-type]
        assert check.ok, (compiled, check.problems)
    entry = next(e for e in check.map.entries if e.location == MERGED)
    assert entry.rows == ("attn.norm:self_attn.q_norm", "attn.norm:self_attn.k_norm")
    assert entry.note == "one generated kernel for self_attn.q_norm/rms_norm, self_attn.k_norm/rms_norm (q; k)"
    # a map that lists only one of the kernels a generated kernel replaced does not fit: nothing is half-placed
    partial = validate_map_data(_map({"outside": outside, R: [e for e in layer if "k_norm" not in e["at"]]}))
    bad = check_map(partial, _sites(True), ROWS, "vllm")  # type: ignore[arg-type]
    assert not bad.ok and f"location {MERGED} is not listed" in bad.problems
    assert f"location {Q_NORM} does not exist in this deployment" in bad.problems


def test_a_member_two_generated_kernels_share_gives_its_rows_once():
    # without combo kernels a rotary runs as a q kernel and a k kernel: both stand for the one custom-op rotary
    rot = f"{R}/self_attn/rotary_embedding"
    sites = [_site(f"{R}/self_attn/triton_fused", "elementwise", (Member(rot, "rotary", "rotary_embedding"),)),
             _site(f"{R}/self_attn/triton_fused#2", "elementwise", (Member(rot, "rotary", "rotary_embedding"),))]
    m = validate_map_data(_map({R: [{"at": "self_attn/rotary_embedding", "rows": ["attn.core"]}]}))
    rows = _Rows([_row(R, "attn.core:compute")])
    check = check_map(m, sites, rows, "vllm")  # type: ignore[arg-type]
    assert check.ok, check.problems
    assert [r.ref for r in check.assignment[f"{R}/self_attn/triton_fused"]] == ["attn.core:compute"]
    assert check.assignment[f"{R}/self_attn/triton_fused#2"] == ()


def test_a_draft_map_names_the_custom_op_kernels_and_fits_both_graphs():
    draft = draft_map(_sites(compiled=True), ROWS, "vllm", "qk")  # type: ignore[arg-type]
    layer = draft["regions"][R]
    assert [e["at"] for e in layer[2:4]] == ["self_attn.q_norm/rms_norm", "self_attn.k_norm/rms_norm"]
    assert layer[3]["note"] == f"rms_norm kernel (runs in {MERGED})"
    assert not any(e["at"].endswith("triton_fused") for e in layer)
    # placing the rows the draft asks for gives a map both graphs fit
    refs = {"input_layernorm/rms_norm": ["attn.norm:input_layernorm"], "self_attn/qkv_proj": ["attn.qkv"],
            "self_attn.q_norm/rms_norm": ["attn.norm:self_attn.q_norm"],
            "self_attn.k_norm/rms_norm": ["attn.norm:self_attn.k_norm"], "self_attn/attn": ["attn.core"],
            "self_attn.o_proj/o_proj": ["attn.out"], "[layer]/fused_add_rms_norm": ["ffn.norm"],
            "mlp/gate_up_proj": ["ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj"],
            "mlp.down_proj/down_proj": ["ffn.mlp:mlp.down_proj"], "model.embed_tokens/embedding": ["embed"],
            "model/fused_add_rms_norm": ["final_norm"], "lm_head/lm_head": ["head"]}
    for entries in draft["regions"].values():
        for e in entries:
            e["rows"] = refs.get(e["at"], [])
    del draft["notes"]
    m = validate_map_data(draft)
    for compiled in (False, True):
        check = check_map(m, _sites(compiled), ROWS, "vllm")  # type: ignore[arg-type]
        assert check.ok, (compiled, check.problems)


# --- end to end: the compiled graph of a tiny Qwen3 ---------------------------------------------------------------

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow  # a trace and two pricings: ~14 s on 2 shared cores
def test_qwen3_compiled_q_and_k_norms_hold_both_rows(tmp_path):
    import json

    from graphsim.analysis import analyze_prepared, prepare_model

    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "intermediate_size": 128,
           "vocab_size": 96, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from graphsim.importers.hf import import_hf

    graph, _ = import_hf(str(path))  # traced once, priced compiled and custom-op
    a = analyze_prepared(prepare_model(str(path), gpu="h200", batch="decode:4x16", graph=graph))
    assert a.necessary_work_available, a.reason
    assert a.map_id == "gqa-qknorm-dense v1"  # the shipped map, which names the custom-op q_norm and k_norm kernels
    assert a.reconciliation is not None and a.reconciliation.ok
    locs = {r.location: r for r in a.locations}
    merged = locs["full.dense/self_attn.q_norm/triton_fused"]
    assert merged.kind == "elementwise"
    assert merged.members == ("full.dense/self_attn.q_norm/rms_norm", "full.dense/self_attn.k_norm/rms_norm")
    assert merged.rows == ("attn.norm:self_attn.q_norm", "attn.norm:self_attn.k_norm")
    # each norm's weights are head_dim = 16 bf16 values over 2 layers: 2 x 16 x 2 bytes = 64 necessary bytes each
    assert merged.necessary.param_bytes == 2 * (16 * 2 * 2)
    assert not any(r.location.endswith("k_norm/rms_norm") for r in a.locations)
    # the custom-op graph (--enforce-eager) on the same map: each norm kernel holds its own row and weights
    e = analyze_prepared(prepare_model(str(path), gpu="h200", batch="decode:4x16", graph=graph, compiled=False))
    assert e.map_id == "gqa-qknorm-dense v1" and e.reconciliation is not None and e.reconciliation.ok
    eager = {r.location: r for r in e.locations}
    assert "full.dense/self_attn.q_norm/triton_fused" not in eager
    for name in ("q_norm", "k_norm"):
        r = eager[f"full.dense/self_attn.{name}/rms_norm"]
        assert r.rows == (f"attn.norm:self_attn.{name}",) and r.members == ()
        assert r.necessary.param_bytes == 16 * 2 * 2
    # without combo kernels (vLLM < 0.12) the rotary runs as a q and a k kernel: both stand for the one custom-op
    # rotary location, which the same map names (its rows, none, given once)
    from graphsim.analysis.deployment import prepare_cost_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.hardware import load_hardware

    cm = build_cost_model(graph, load_hardware("h200"), combo=False)
    c0 = analyze_prepared(prepare_cost_model(cm, cfg, "decode:4x16"))
    assert c0.map_id == "gqa-qknorm-dense v1" and c0.reconciliation is not None and c0.reconciliation.ok
    halves = [r for r in c0.locations if r.members == ("full.dense/self_attn/rotary_embedding",)]
    assert [r.location for r in halves] == ["full.dense/self_attn/triton_fused", "full.dense/self_attn/triton_fused#2"]


def test_experts_whose_rows_hold_the_routing_take_the_router_location_too():
    # a profile whose MoE rows were timed from the router logits prices the top-k inside the experts' rows
    # (costing/routing_in_rows.py): the top-k is no site; the experts' site runs it and itself
    topk, experts = f"{R}/mlp.gate/topk_softmax", f"{R}/mlp.experts/fused_moe"
    moe = [_site(f"{R}/input_layernorm/rms_norm", "rms_norm"), _site(f"{R}/self_attn/attn", "attention"),
           _site(f"{R}/mlp.gate/gate", "gemm"),
           _site(experts, "moe_experts", (Member(topk, "moe_router", "topk_softmax"),
                                          Member(experts, "moe_experts", "fused_moe")))]
    rows = _Rows([_row(R, ref) for ref in ("attn.norm:input_layernorm", "attn.core:compute", "ffn.router:mlp.gate",
                                           "ffn.routed:mlp.experts.gate_proj", "ffn.routed:mlp.experts.down_proj")])
    shipped = validate_map_data(_map({R: [
        {"at": "input_layernorm/rms_norm", "rows": ["attn.norm"]}, {"at": "self_attn/attn", "rows": ["attn.core"]},
        {"at": "mlp.gate/gate", "rows": ["ffn.router"]}, {"at": "mlp.gate/topk_softmax", "rows": []},
        {"at": "mlp.experts/fused_moe", "rows": ["ffn.routed"]}]}))
    for m in (shipped, derive_map(moe, rows, "vllm")):  # type: ignore[arg-type]
        check = check_map(m, moe, rows, "vllm")  # type: ignore[arg-type]
        assert check.ok, check.problems
        assert [r.ref for r in check.assignment[experts]] == ["ffn.routed:mlp.experts.gate_proj",
                                                              "ffn.routed:mlp.experts.down_proj"]
        assert [r.ref for r in check.assignment[f"{R}/mlp.gate/gate"]] == ["ffn.router:mlp.gate"]
        assert topk not in check.assignment
    entry = next(e for e in check_map(shipped, moe, rows, "vllm").map.entries  # type: ignore[arg-type]
                 if e.location == experts)
    assert entry.note == "with mlp.gate/topk_softmax"


def test_a_profile_timing_the_routing_inside_the_experts_keeps_the_map(tmp_path):
    """vLLM 0.24.0's collector times FusedMoE from the router logits (label below, from aiconfigurator-core 0.12's
    h200_sxm moe_perf table), so the cost tree prices the top-k inside the experts' row and has no top-k leaf
    (costing/routing_in_rows.py); the analyzer still fits the map naming it, on the experts' site."""
    from graphsim.analysis import analyze_prepared
    from graphsim.analysis.deployment import prepare_cost_model
    from graphsim.catalog import ResolvedModel
    from graphsim.costing.cost_model import CostModel
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.kernel_map import Dtypes, key_for
    from graphsim.costing.kernels import Measurement, TokensPoint
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta
    from graphsim.importers.hf import import_hf
    from graphsim.ir import Op
    from graphsim.ir.kernel import KernelKind
    from graphsim.passes import run_pipeline

    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
           "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128,
           "max_position_embeddings": 256, "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": []}
    graph, _ = import_hf(ResolvedModel("tiny-qwen3-moe", dict(cfg), "path", "test"), cache=False)
    graph = run_pipeline(graph, "fold,fuse{target=vllm},inductor").graph
    experts = next(n for n in graph.nodes if n.op is Op.KERNEL and n.kernel.kind is KernelKind.MOE_EXPERTS)
    path = tmp_path / "moe.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="vllm")) as db:
        db.put_many([(key_for(experts.kernel, Dtypes.for_graph(graph.meta)), TokensPoint(t),
                      Measurement(40.0, kernel="vllm_unquantizedfusedmoe_triton_tritonexperts")) for t in (1, 8, 64)])
    db = ProfileDB.open(path)
    try:
        cm = CostModel.of_kernel_graph(graph, load_hardware("h200"), db)
        assert KernelKind.MOE_ROUTER not in [leaf.attrs.kind for leaf in cm.tree.leaves]
        p = prepare_cost_model(cm, cfg, "decode:8x128")
    finally:
        db.close()
    site = next(s for s in p.sites if s.kind == "moe_experts")
    assert [m.location for m in site.members] == ["full.moe/mlp.gate/topk_softmax", "full.moe/mlp.experts/fused_moe"]
    a = analyze_prepared(p)
    assert a.necessary_work_available and a.map_id == "gqa-qknorm-moe v1", a.reason
    r = next(x for x in a.locations if x.kind == "moe_experts")
    assert r.rows == ("ffn.routed:mlp.experts.gate_proj", "ffn.routed:mlp.experts.up_proj",
                      "ffn.routed:mlp.experts.down_proj")
    assert any("top-k of mlp.gate/topk_softmax" in c for c in r.causes)

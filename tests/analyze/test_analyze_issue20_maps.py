"""Issue 20's families under `graphsim analyze`: the location maps of MiniMax-M2, Qwen3.5 (dense, MoE),
DeepSeek-V3.2 / GLM-5 (DSA), Nemotron-H without MoE, Llama-4 and MiMo-V2-Flash, Qwen3-VL's text model through
the plain Qwen3 maps; the DSA indexer's own row (by hand); the text model's scope outside the layers.

Fast tests use tiny configs of the real layouts; the real configs of aiconfigurator-core's `model_configs/` at
TP1, TP8 and TP8/EP8 are `slow` (each trace ~20-40 s on the meta device)."""

from __future__ import annotations

import json

import pytest

from graphsim.work import accounting
from graphsim.work.analyzer import location_ids, necessary_rows, scope_role
from graphsim.workload import parse_batch_spec

# DeepSeek-V3.2's layout at toy size: one dense and one MoE MLA layer with the lightning indexer
TINY_DSV32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "torch_dtype": "bfloat16",
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
    "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "vocab_size": 96, "max_position_embeddings": 128, "rope_theta": 10000.0,
    "index_n_heads": 2, "index_head_dim": 128, "index_topk": 4,
}
# Qwen3.5-MoE's text layout (Qwen/Qwen3.5-35B-A3B text_config) at toy size: one linear, one full layer
TINY_QWEN35_MOE = {
    "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "torch_dtype": "bfloat16",
    "attn_output_gate": True, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32,
    "layer_types": ["linear_attention", "full_attention"], "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_value_head_dim": 8,
    "max_position_embeddings": 256, "moe_intermediate_size": 16, "num_attention_heads": 4, "num_experts": 8,
    "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "shared_expert_intermediate_size": 16, "vocab_size": 96,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
}


def test_outside_scopes_name_the_text_model_model_whatever_wraps_it():
    # transformers' *ForConditionalGeneration holds the decoder as model.language_model (Qwen3-VL, Qwen3.5, Gemma-4)
    stack = "model.language_model.layers"
    assert scope_role("model.language_model.embed_tokens", stack, False) == "model.embed_tokens"
    assert scope_role("model.language_model", stack, False) == "model"
    assert scope_role("model.language_model.norm", stack, False) == "model.norm"
    assert scope_role("lm_head", stack, False) == "lm_head"  # outside the text model: kept
    assert scope_role("model.visual.merger", stack, False) == "model.visual.merger"  # not under the text model
    assert scope_role("model.embed_tokens", "model.layers", False) == "model.embed_tokens"  # plain causal LM
    assert scope_role("model.language_model.layers.3.mlp.gate", stack, True) == "mlp.gate"


def test_a_kernel_named_with_its_shape_is_located_by_the_kernel_alone():
    # the shape after '/' is geometry (V4-Flash d4096, V4-Pro d7168): one map fits both sizes; repeats get #k
    assert location_ids([("sliding.moe", "attn_hc", "mhc_pre/n4.d4096"), ("sliding.moe", "attn_hc", "mhc_pre/n4.d7168"),
                         ("sliding.moe2", "self_attn", "deepseek_compressor/d512.c2.m4.e584"),
                         ("sliding.moe2", "self_attn", "deepseek_compressor/d128.c2.m4.e132")]
                        ) == ["sliding.moe/attn_hc/mhc_pre", "sliding.moe/attn_hc/mhc_pre#2",
                              "sliding.moe2/self_attn/deepseek_compressor", "sliding.moe2/self_attn/deepseek_compressor#2"]


def test_dsa_indexer_has_its_own_row_and_both_add_up_to_the_core():
    # One sequence, 1 new token after 8 cached, per layer (each region stands for one layer):
    # indexer: causal pairs over the whole context 8 + 1 = 9 × 2 index heads × (2·128 + 2) = 4644 FLOPs;
    #   its key cache 128 fp8 B + 128 // 128 · 4 B scale = 132 B/token: read 8 · 132 = 1056, written 132.
    # sparse MLA: min(8 + 1, top-k 4) = 4 pairs, 4 latents; absorbed 2·4·4 heads·(2·16 + 8) = 1280 FLOPs
    #   (decompressed 2·4·16·4·32 + 2·4·4·40 = 17,664); latent (16 + 8)·2 B = 48 B: read 4·48 = 192, written 48.
    acc = accounting(TINY_DSV32)
    step = parse_batch_spec("decode:1x8")
    rows = necessary_rows(acc, step, ["full.dense", "full.moe"])
    core = {(r.region, r.ref): (r.work.flops, r.work.state_read_bytes, r.work.state_write_bytes)
            for r in rows.rows if r.part == "attn.core"}
    for region in ("full.dense", "full.moe"):
        assert core[(region, "attn.core:indexer")] == (4644, 1056, 132)
        assert core[(region, "attn.core:compute")] == (1280, 192, 48)
    seg = rows.report.segment("layers.attn.core")  # the accountant's core of both layers, indexer included
    assert (seg.flops, seg.state_read_bytes, seg.state_write_bytes) == (2 * 5924, 2 * 1248, 2 * 180)


def test_block_indexer_part_by_hand_and_inside_the_block_sparse_core():
    # MiniMax-M3's block indexer, 2 index heads of 4, blocks of 2, top-2 blocks; 1 new token after 10 cached, bf16:
    # scores over every earlier key 11 pairs × 2 heads × 2·4 = 176 FLOPs; index keys 4 · 2 B = 8 B/token:
    # read 10 · 8 = 80, written 8.  The whole core adds GQA over ≤ 2·2 = 4 keys (pairs counted by the accountant).
    from graphsim.work.dtypes import DType, Precision
    from graphsim.work.linear_work import block_indexer_core, block_sparse_core
    from graphsim.work.specs import BlockSparseIndexer, GqaAttention

    bf16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)
    ix = BlockSparseIndexer(hidden=16, heads=2, head_dim=4, block=2, topk=2)
    assert block_indexer_core(ix, 1, 10, 1, bf16) == (176, 80, 8)
    attn = GqaAttention(hidden=16, heads=2, kv_heads=1, head_dim=8, block_indexer=ix)
    f, r, w = block_sparse_core(attn, ix, 1, 10, 1, bf16)
    # the rest is the sparse GQA: ≤ 4 keys read at (8 + 8) · 2 B = 32 B and 1 written
    assert (r - 80, w - 8) == (4 * 32, 32) and f > 176


def _fits(path: str, map_id: str, cases, batch: str = "mixed:1x512@1024+16x4096") -> dict:
    from graphsim.analysis import analyze_prepared, prepare_model
    from graphsim.importers.hf import import_hf

    graph, _ = import_hf(path, cache=False)
    out = {}
    for tp, ep in cases:
        a = analyze_prepared(prepare_model(path, gpu="h200", tp=tp, ep=ep, batch=batch, graph=graph))
        assert a.necessary_work_available, (tp, ep, a.reason)
        # EP over the TP group (analyze's only EP) exchanges nothing (passes/partition/ep.py): the TP graph's map
        assert a.map_id == f"{map_id} v1", (tp, ep, a.map_id)
        assert a.reconciliation is not None and a.reconciliation.ok, (tp, ep, a.reconciliation)
        assert a.coverage is not None and a.coverage.share is not None and 0 < a.coverage.share <= 1
        out[(tp, ep)] = a
    return out




@pytest.fixture(autouse=True)
def _roofline_only(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # roofline pricing: no profile.db
    monkeypatch.setenv("GRAPHSIM_NO_AUTO_PROFILE", "1")


def _write(tmp_path, name: str, cfg: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.slow  # ~17 s: transformers' DSA indexer traces slowly even at toy size
def test_tiny_dsa_fits_mla_dsa_moe_and_the_indexer_kernel_holds_the_indexer_row(tmp_path):
    got = _fits(_write(tmp_path, "tiny-dsv32", TINY_DSV32), "mla-dsa-moe", ((1, 1), (2, 1), (2, 2)))
    a = got[(1, 1)]
    by = {r.location: r for r in a.locations}
    idx = by["full.moe/self_attn.indexer/sparse_attn_indexer"]
    assert idx.rows == ("attn.core:indexer",) and idx.necessary.flops > 0
    assert by["full.moe/self_attn/flashmla_sparse"].rows == ("attn.core:compute",)


@pytest.mark.slow  # 5-8 s on a shared 2-core machine (the trace dominates)
def test_tiny_qwen35_moe_packs_in_proj_and_fits_gdn_hybrid_moe_packed(tmp_path):
    # vLLM qwen3_5.py load_weights: in_proj_qkv + in_proj_z → in_proj_qkvz, in_proj_b + in_proj_a → in_proj_ba
    got = _fits(_write(tmp_path, "tiny-qwen35-moe", TINY_QWEN35_MOE), "gdn-hybrid-moe-packed", ((1, 1), (2, 2)))
    locs = {r.location for r in got[(1, 1)].locations}
    assert {"linear.moe/linear_attn/in_proj_qkvz", "linear.moe/linear_attn/in_proj_ba"} <= locs
    assert not any("in_proj_z" in x or "in_proj_a" in x for x in locs)


# --- the real configs (aiconfigurator-core's model_configs/) ---------------------------------------------------
TP1, TP8, EP8 = (1, 1), (8, 1), (8, 8)
REAL = [
    ("MiniMaxAI--MiniMax-M2.5", "gqa-qknorm-moe-sigmoid", (TP1, TP8, EP8)),
    ("Qwen--Qwen3.5-27B", "gdn-hybrid-dense-packed", (TP1, TP8)),
    ("Qwen--Qwen3.5-35B-A3B", "gdn-hybrid-moe-packed", (TP1, TP8, EP8)),
    ("deepseek-ai--DeepSeek-V3.2", "mla-dsa-moe", (TP1, TP8, EP8)),
    ("zai-org--GLM-5", "mla-dsa-moe", (TP1, TP8, EP8)),
    ("nvidia--Nemotron-H-56B-Base-8K", "mamba2-hybrid-dense", (TP1, TP8)),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "gqa-chunked-nope-moe", (TP1, TP8, EP8)),
    ("XiaomiMiMo--MiMo-V2-Flash", "gqa-sinks-hybrid-moe-dense-first", (TP1, TP8, EP8)),
    ("Qwen--Qwen3-VL-8B-Instruct", "gqa-qknorm-dense", (TP1, TP8)),
    ("Qwen--Qwen3-VL-30B-A3B-Instruct", "gqa-qknorm-moe", (TP1, TP8, EP8)),
    ("MiniMaxAI--MiniMax-M3", "gqa-qknorm-blocksparse-moe-dense-first", (TP1, TP8, EP8)),
    ("moonshotai--Kimi-K2.5", "mla-moe", (TP1, TP8, EP8)),  # its text model is DeepseekV3ForCausalLM
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "map_id", "cases"), REAL, ids=[r[0] for r in REAL])
def test_real_configs_report_r6_r7_at_tp1_tp8_ep8(aic_config, name, map_id, cases):
    got = _fits(str(aic_config(name)), map_id, cases)
    for a in got.values():
        assert a.redundancy is not None and a.redundancy.performed.flops > 0

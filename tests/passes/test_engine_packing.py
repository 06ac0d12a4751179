"""The sglang and trtllm fuse targets pack projections as their engines' model files do (passes/fuse/sglang.py
SGLANG_PACKED, trtllm.py TRTLLM_PACKED), not by vLLM's table where the engines differ. Each expected GEMM list is
counted by hand from the engine source cited beside it; the tiny configs are the ones tests/importers and
tests/passes already use."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_dsa import TINY_V32
from test_kda import TINY_KIMI_LINEAR

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs
from graphsim.passes import run_pipeline

# ModelOpt FP8 (the form tests/costing/test_quantized_gemm.py uses): a quant_config SGLang's Kimi sees as not None
FP8 = {"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head"]}

# LFM2: one short-conv layer then one attention layer, each with a dense SwiGLU MLP of w1 / w3 / w2 (no auto-adjust)
TINY_LFM2 = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "torch_dtype": "bfloat16", "vocab_size": 96,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 256, "conv_L_cache": 3, "conv_bias": False,
    "block_auto_adjust_ff_dim": False, "layer_types": ["conv", "full_attention"], "norm_eps": 1e-5,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}


def _import(name: str, cfg: dict):
    return import_hf(ResolvedModel(name, copy.deepcopy(cfg), "path", "test"), cache=False)[0]


def _gemms(g, layer: int) -> list[tuple[str, int, int]]:
    return [(k.name, (geo := k.geometry_as(GemmGeometry)).n, geo.k) for n in g.nodes
            if n.op is Op.KERNEL and n.layer == layer and (k := n.attrs_as(KernelAttrs)).kind.value == "gemm"]


def _fused(g, target: str, tp: int = 1):
    out = run_pipeline(copy.deepcopy(g), f"fuse{{target={target}}}").graph
    # the tp pass runs the conservation check (per-rank FLOPs and weight bytes against the totals, replication stated)
    return run_pipeline(out, f"tp{{size={tp}}}").graph if tp > 1 else out


@pytest.fixture(scope="module")
def kimi():
    return _import("tiny-kimi-packing", TINY_KIMI_LINEAR)


def test_sglang_kimi_packs_both_low_rank_gates_whole(kimi):
    # SGLang 0.5.14 models/kimi_linear.py KimiDeltaAttention (quant_config None): fused_qkvbfg_a_proj =
    # MergedColumnParallelRepeatedLinear(hidden, [proj, proj, proj, num_heads], [head_dim, head_dim]) -- q, k, v of
    # 4 heads x 8 = 32, b of 4, f_a and g_a of 8: n = 3 x 32 + 4 + 8 + 8 = 116 over hidden 32; f_b and g_b (graphsim:
    # two GEMMs; SGLang: one batched matmul, not modelled), o_proj, then the dense MLP's gate_up_proj (2 x 64)
    assert _gemms(_fused(kimi, "sglang"), 0) == [
        ("fused_qkvbfg_a_proj", 116, 32), ("f_b_proj", 32, 8), ("g_b_proj", 32, 8), ("o_proj", 32, 32),
        ("gate_up_proj", 128, 32), ("down_proj", 32, 64)]
    # tp 2: q, k, v 16 each and b 2 split, f_a and g_a whole ("Replicated: f_a, g_a"): 48 + 2 + 8 + 8 = 66
    assert _gemms(_fused(kimi, "sglang", 2), 0)[0] == ("fused_qkvbfg_a_proj", 66, 32)
    # vLLM 0.33 packs f_a but keeps g_a a ReplicatedLinear of its own (kimi_gdn_linear_attn.py): 96 + 4 + 8 = 108
    assert [x for x in _gemms(_fused(kimi, "vllm"), 0) if x[0] in ("in_proj_qkvgfab", "g_a_proj")] == [
        ("in_proj_qkvgfab", 108, 32), ("g_a_proj", 8, 32)]


def test_sglang_quantized_kimi_packs_q_k_v_alone():
    g = _import("tiny-kimi-fp8-packing", dict(copy.deepcopy(TINY_KIMI_LINEAR), quantization_config=FP8))
    names = [x[0] for x in _gemms(_fused(g, "sglang"), 0)]
    # kimi_linear.py: `do_fuse_qkvbfg = quant_config is None`; otherwise QKVParallelLinear qkv_proj (q, k, v) with
    # f_a_proj, f_b_proj, b_proj, g_a_proj, g_b_proj, o_proj apart: 7 attention GEMMs, then the MLP's two
    assert sorted(names) == sorted(["qkv_proj", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "o_proj",
                                    "gate_up_proj", "down_proj"])


def test_sglang_lfm2_mlp_keeps_w1_and_w3_apart():
    g = _import("tiny-lfm2-packing", TINY_LFM2)
    # SGLang models/lfm2.py Lfm2MLP: w1 and w3 two ColumnParallelLinear (48 each), w2 a RowParallelLinear; its
    # stacked_params_mapping packs only q/k/v. vLLM lfm2.py Lfm2MLP: one w13 (96).
    mlp = [x for x in _gemms(_fused(g, "sglang"), 0) if x[0] in ("w1", "w3", "w13", "w2")]
    assert mlp == [("w1", 48, 32), ("w3", 48, 32), ("w2", 32, 48)]
    assert [x for x in _gemms(_fused(g, "vllm"), 0) if x[0] in ("w1", "w3", "w13", "w2")] == [
        ("w13", 96, 32), ("w2", 32, 48)]


def test_trtllm_kimi_runs_every_kda_projection_apart(kimi):
    # TensorRT-LLM models/modeling_kimi_linear.py KimiKDARuntime._forward_prefill: q_proj, k_proj, v_proj (32 each),
    # f_a_proj (8) -> f_b_proj (32), b_proj (4) called one by one; its fused decode in-projection needs K3's full-rank
    # gate (finalize_decode_weights), so the low-rank output gate g_a (8) -> g_b (32) and o_proj stay apart too:
    # 9 attention GEMMs, then the dense MLP's fused gate_up_proj (KimiK3MLP, 2 x 64) and down_proj
    assert _gemms(_fused(kimi, "trtllm"), 0) == [
        ("q_proj", 32, 32), ("k_proj", 32, 32), ("v_proj", 32, 32), ("f_a_proj", 8, 32), ("f_b_proj", 32, 8),
        ("b_proj", 4, 32), ("g_a_proj", 8, 32), ("g_b_proj", 32, 8), ("o_proj", 32, 32), ("gate_up_proj", 128, 32),
        ("down_proj", 32, 64)]


def test_sglang_dsa_indexer_keeps_wk_and_weights_proj_apart():
    g = _import("tiny-v32-packing", TINY_V32)

    def indexer(f):
        return [x for x in _gemms(f, 0) if x[0] in ("wq_b", "wk", "weights_proj", "wk_weights_proj")]

    # SGLang layers/attention/dsa/dsa_indexer.py Indexer.__init__ (deepseek_v2.py DeepseekV32ForCausalLM): wq_b
    # (2 heads x 16 = 32 over q_lora_rank 32), wk (index_head_dim 16) and weights_proj (index_n_heads 2) three
    # ReplicatedLinear; vLLM 0.33 deepseek_v2.py Indexer: wk_weights_proj, 16 + 2 = 18 over hidden 64
    assert indexer(_fused(g, "sglang")) == [("wq_b", 32, 32), ("wk", 16, 64), ("weights_proj", 2, 64)]
    assert indexer(_fused(g, "vllm")) == [("wq_b", 32, 32), ("wk_weights_proj", 18, 64)]
    # MLA's q_a and kv_a stay one GEMM, under SGLang's name: q_lora_rank 32 + kv_lora_rank 16 + rope 8 = 56
    assert ("fused_qkv_a_proj_with_mqa", 56, 64) in _gemms(_fused(g, "sglang"), 0)

"""Sibling projections vLLM loads into one GEMM (fuse/vllm.py PACKED, patterns.packed_linears): a KDA layer's q, k, v
and beta projections (vLLM 0.33 bailing_moe_v3.py `qkvb_proj`, MergedColumnParallelLinear split part by part) and a
DSA indexer's key and head-weight projections, whose float32 weights_proj reads the bf16 hidden states through a cast
vLLM does not run (hy_v4 / deepseek_v2.py `wk_weights_proj`, disable_tp: whole on every rank)."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hyv4_helpers import TINY_HYV4
from test_fuse_sigmoid_gates import TINY_BAILING, TINY_LFM3

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import LinearAttrs, Op
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs
from graphsim.passes import run_pipeline


def _graphs(name: str, cfg: dict):
    g, _ = import_hf(ResolvedModel(name, copy.deepcopy(cfg), "path", "test"), cache=False)
    fused = run_pipeline(copy.deepcopy(g), "fuse{target=vllm}").graph
    # tp 2: the tp pass runs the conservation check (per-rank FLOPs and weight bytes x 2 against the totals,
    # replication stated) and raises when it fails
    return g, fused, run_pipeline(copy.deepcopy(fused), "tp{size=2}").graph


def _gemms(g, layer: int, scope: str) -> list[tuple[str, GemmGeometry, str]]:
    return [(k.name, k.geometry_as(GemmGeometry), k.dtype) for n in g.nodes if n.op is Op.KERNEL and n.layer == layer
            and (k := n.attrs_as(KernelAttrs)).kind.value == "gemm" and scope in n.scope]


@pytest.fixture(scope="module")
def bailing():
    return _graphs("tiny-bailing-packed", TINY_BAILING)


@pytest.fixture(scope="module")
def hyv4():
    return _graphs("tiny-hyv4-packed", TINY_HYV4)


def test_bailing_kda_q_k_v_b_are_one_gemm(bailing):
    raw, fused, tp2 = bailing
    parts = sorted(n.scope.rsplit(".", 1)[-1] for n in raw.nodes
                   if n.op is Op.LINEAR and n.layer == 0 and n.attrs_as(LinearAttrs).in_features == 32
                   and n.scope.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj", "b_proj"))
    assert parts == ["b_proj", "k_proj", "q_proj", "v_proj"]  # four linears in transformers' graph
    # linear_num_heads 2 x linear_head_dim 16 = 32 for each of q, k, v, plus b's 2 heads: n = 3*32 + 2 = 98 over
    # hidden 32; f_proj (32) and g_proj (32) stay GEMMs of their own, as in vLLM's BailingMoeV3KDAAttention
    assert _gemms(fused, 0, "self_attn") == [("qkvb_proj", GemmGeometry(n=98, k=32), "bf16"),
                                             ("f_proj", GemmGeometry(n=32, k=32), "bf16"),
                                             ("g_proj", GemmGeometry(n=32, k=32), "bf16"),
                                             ("o_proj", GemmGeometry(n=32, k=32), "bf16")]
    # MergedColumnParallelLinear splits each part: 32/2 * 3 + 2/2 = 49 a rank
    assert _gemms(tp2, 0, "self_attn")[0] == ("qkvb_proj", GemmGeometry(n=49, k=32), "bf16")


def test_bailing_mla_layer_keeps_q_and_kv_a_apart(bailing):
    _, fused, _ = bailing
    # q_lora_rank None: vLLM's MLA has q_proj (column-parallel) and kv_a_proj_with_mqa (replicated) apart
    # (bailing_moe_v3.py BailingMoeV3MLAAttention.__init__): 4 heads x (16 + 8) = 96; kv_lora_rank 16 + rope 8 = 24
    names = [(k, g.n) for k, g, _ in _gemms(fused, 1, "self_attn")]
    assert ("q_proj", 96) in names and ("kv_a_proj_with_mqa", 24) in names


def test_hyv4_indexer_wk_and_weights_proj_are_one_bf16_gemm(hyv4):
    raw, fused, tp2 = hyv4
    weights = [n for n in raw.nodes if n.op is Op.LINEAR and n.scope.endswith("indexer.weights_proj")]
    assert [n.outputs[0].dtype.value for n in weights] == ["f32"]  # transformers' float32 weights_proj
    # index_head_dim 16 (wk) + index_n_heads 2 (weights_proj) = 18 over hidden 64, in the model dtype (vLLM:
    # quant_config=None, bf16); only layer 0 has an indexer (layer 1 shares its picks)
    assert _gemms(fused, 0, "indexer") == [("wq_b", GemmGeometry(n=32, k=48), "bf16"),
                                           ("wk_weights_proj", GemmGeometry(n=18, k=64), "bf16")]
    assert _gemms(fused, 1, "indexer") == []
    # disable_tp=True: every rank computes all 18 outputs
    assert _gemms(tp2, 0, "indexer") == _gemms(fused, 0, "indexer")


# OLMo-Hybrid: a gated-delta-net layer (2 key / 2 value heads of 8 / 16) then a softmax-attention layer (4 heads of 8).
TINY_OLMO_HYBRID = {
    "architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid", "torch_dtype": "bfloat16",
    "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
    "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 256, "pad_token_id": 0, "eos_token_id": 2,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}


def test_olmo_hybrid_packs_q_k_v_with_the_gate_and_softmax_attention_keeps_qkv():
    _, fused, tp2 = _graphs("tiny-olmo-hybrid-packed", TINY_OLMO_HYBRID)
    # vLLM olmo_gdn_linear_attn.py: in_proj_qkvg = MergedColumnParallelLinear of q and k (2 key heads x 8 = 16 each),
    # v and g (2 value heads x 16 = 32 each): n = 16 + 16 + 32 + 32 = 96; b_proj and a_proj (2 heads each) apart
    assert _gemms(fused, 0, "linear_attn")[:3] == [("in_proj_qkvg", GemmGeometry(n=96, k=32), "bf16"),
                                                   ("b_proj", GemmGeometry(n=2, k=32), "bf16"),
                                                   ("a_proj", GemmGeometry(n=2, k=32), "bf16")]
    assert _gemms(tp2, 0, "linear_attn")[0] == ("in_proj_qkvg", GemmGeometry(n=48, k=32), "bf16")  # each part / 2
    # the softmax-attention layer's q/k/v (4 heads x 8 = 32 each) stay the QKVParallelLinear `qkv_proj`, no b or g
    qkv = _gemms(fused, 1, "self_attn")[0]
    assert qkv[0] == "qkv_proj" and (qkv[1].n, qkv[1].k, qkv[1].q_features, qkv[1].num_kv_heads) == (96, 32, 32, 4)


def test_lfm_mlp_w1_and_w3_are_one_w13_gemm():
    _, fused, tp2 = _graphs("tiny-lfm3-packed", TINY_LFM3)
    # vLLM lfm2.py Lfm2MLP: w13 = MergedColumnParallelLinear(hidden, [ff, ff]) then w2; intermediate 48 (the tiny
    # config's, kept: no auto-adjust): n = 48 + 48 = 96 over hidden 32, 48 a rank at tp 2
    assert _gemms(fused, 0, "feed_forward") == [("w13", GemmGeometry(n=96, k=32), "bf16"),
                                                ("w2", GemmGeometry(n=32, k=48), "bf16")]
    assert _gemms(tp2, 0, "feed_forward")[0] == ("w13", GemmGeometry(n=48, k=32), "bf16")

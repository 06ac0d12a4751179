"""Compressed-KV attention and hyper-connections (DeepSeek-V4) as semantic ops: transformers' eager logits on a
tiny random model, a dynamic-token trace with one node per mechanism, vLLM's kernels (tp keeps the shared K=V
head and the compressors whole, splits heads and whole head groups) and pricing by the pairs, keys and bytes each
part really moves (graphsim/costing/compressed.py), every expected number derived by hand here."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import compressed  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import ElementwiseKey  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class  # noqa: E402
from graphsim.ir import AttentionAttrs, IndexerAttrs, Op  # noqa: E402
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry, IndexerGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"
# A tiny DeepSeek-V4: 4 heads of 32 (8 rotary) sharing one K=V head, window 6, CSA every 4 tokens with a 2-head
# indexer keeping 2 entries, HCA every 8 tokens, 3 hyper-connection streams, a hash-routed first layer.
TINY_V4 = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
    "hidden_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 24, "o_groups": 2,
    "o_lora_rank": 16, "sliding_window": 6, "layer_types": [SWA, CSA, HCA, CSA],
    "compress_rates": {CSA: 4, HCA: 8}, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 2,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "num_hash_layers": 1, "hc_mult": 3,
    "hc_sinkhorn_iters": 5, "vocab_size": 96, "max_position_embeddings": 256,
}


def _build(attn: str, **kw):
    torch.manual_seed(0)
    custom_ops.register()
    cls = model_class(TINY_V4["architectures"][0])
    return cls._from_config(make_hf_config(copy.deepcopy(TINY_V4)), dtype=torch.float32, attn_implementation=attn,
                            **kw).eval()


def _randomise(model) -> None:
    """transformers initialises position biases, sinks and mixing biases to zero: give them values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in ("position_bias", "sinks", ".base", "hc_base")):
                p.normal_(0, 0.5)


@pytest.mark.slow  # three tiny models built and run (~6 s)
def test_semantic_ops_match_eager_logits():
    ref = _build("eager")
    _randomise(ref)
    # the experts keep transformers' loop (their clamped SwiGLU has no reference kernel in graphsim::moe_experts)
    ours = _build(custom_ops.IMPL_NAME, experts_implementation="eager")
    ours.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 96, (1, 19))  # 19 tokens: 4 CSA windows, 2 HCA windows, the window of 6 slides
    with torch.no_grad():
        want = ref(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(ours) as swapped:
            got = ours(input_ids=ids, use_cache=False).logits
        # the comparison covers the compressors: changing one's position bias changes transformers' logits
        ref.model.layers[1].self_attn.compressor.position_bias.normal_(0, 2.0)
        moved = ref(input_ids=ids, use_cache=False).logits
    assert {s.rsplit(".", 2)[-2] for s in swapped} == {
        "DeepseekV4Attention", "DeepseekV4HyperConnection", "DeepseekV4DecoderLayer", "DeepseekV4HyperHead"}
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (moved - want).abs().max() > 1e-3


@pytest.fixture(scope="module")
def graph():
    return import_hf(ResolvedModel("tiny-v4", copy.deepcopy(TINY_V4), "path", "test"), cache=False)


def _by_layer(g, op: Op, layer: int):
    return [n for n in g.nodes if n.op is op and n.layer == layer]


def test_trace_is_dynamic_with_one_node_per_mechanism(graph):
    g, report = graph
    assert report.dynamic_tokens and report.opaque_ops == {}
    for layer in (0, 1, 2):  # sliding, CSA, HCA
        hc = [n.target for n in _by_layer(g, Op.HYPER_CONNECTION, layer)]
        assert hc == ["graphsim::hc_pre", "graphsim::hc_post"] * 2  # attention block, then MLP block
    # per layer: (window, compress ratio, top-k, compressors, indexers)
    want = {0: (6, None, None, 0, 0), 1: (6, 4, 2, 2, 1), 2: (6, 8, None, 1, 0)}
    for layer, (window, ratio, topk, comps, idx) in want.items():
        (attn,) = _by_layer(g, Op.ATTENTION, layer)
        a = attn.attrs_as(AttentionAttrs)
        assert (a.num_heads, a.num_kv_heads, a.head_dim, a.qk_rope_head_dim, a.has_sinks) == (4, 1, 32, 8, True)
        assert (a.sliding_window, a.compress_ratio, a.index_topk) == (window, ratio, topk)
        assert len(_by_layer(g, Op.KV_COMPRESS, layer)) == comps
        assert len(_by_layer(g, Op.SPARSE_INDEXER, layer)) == idx
    (ix,) = _by_layer(g, Op.SPARSE_INDEXER, 1)
    assert ix.attrs_as(IndexerAttrs) == IndexerAttrs(num_heads=2, head_dim=16, topk=2, compress_ratio=4)
    assert [n.target for n in g.nodes if n.op is Op.HYPER_CONNECTION and n.layer is None] == ["graphsim::hc_head"]


def _kernels(g, layer: int) -> dict[str, KernelAttrs]:
    return {n.name.split(".", 1)[1]: n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == layer}


def test_vllm_kernels_and_tp2(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fuse{target=vllm}").graph
    assert not [n.name for n in fused.nodes if n.op is Op.KERNEL and n.attrs_as(KernelAttrs).approximate]
    k = _kernels(fused, 1)  # the CSA layer
    attn = k["flashmla_sparse_swa"].geometry_as(AttentionGeometry)
    # fp8_ds_mla row at head_dim 32, rope 8: 24 fp8 nope + 8·2 bf16 rope + 24 // 64 + 1 scale/pad = 41 B
    assert (attn.window, attn.compress_ratio, attn.index_topk, attn.kv_entry_bytes) == (6, 4, 2, 41)
    assert k["sparse_attn_indexer"].geometry_as(IndexerGeometry).compress_ratio == 4
    # the CSA compressor (2 × 32 per token, window 4, 41-B entries) and the indexer's (2 × 16, 16 + 4·0 = 16 B keys)
    assert {"deepseek_compressor/d32.c2.m4.e41", "deepseek_compressor/d16.c2.m4.e16"} <= set(k)
    assert {"mhc_pre/n3.d64", "mhc_post/n3.d64", "fused_inv_rope_fp8_quant", "silu_and_mul_with_clamp"} <= set(k)
    # the grouped output projection: 2 groups of (4·32 / 2 = 64 → 16)
    assert k["fp8_einsum"].geometry_as(GemmGeometry) == GemmGeometry(n=32, k=64, groups=2)
    out = run_pipeline(fused, "tp{size=2}").graph  # the conservation check runs inside
    k2 = _kernels(out, 1)
    assert k2["flashmla_sparse_swa"].geometry_as(AttentionGeometry).num_heads == 2
    assert k2["fp8_einsum"].geometry_as(GemmGeometry) == GemmGeometry(n=16, k=64, groups=1)  # whole groups per rank
    gemm_n = {name: a.geometry_as(GemmGeometry).n for name, a in k2.items() if a.kind is KernelKind.GEMM}
    # the shared K=V head (kv_proj, 32) and both compressors' kv/gate projections (64, 64; 32, 32) stay whole
    assert [gemm_n[n] for n in ("kv_proj", "kv_proj_2", "gate_proj", "kv_proj_3", "gate_proj_2")] == [32, 64, 64, 32, 32]


def test_compressed_attention_rows_by_hand():
    # 3 sequences decoding after 9 cached tokens; one 6-token prefill. Window 4, entries every 2 tokens, top-2.
    arr = StepArrays.of([Step((SeqGroup(1, 9, 3), SeqGroup(6, 0, 1)))])
    geo = AttentionGeometry(num_heads=4, num_kv_heads=1, head_dim=32, v_head_dim=32, window=4, causal=True,
                            sinks=True, index_topk=2, compress_ratio=2, kv_entry_bytes=41)
    a = KernelAttrs(KernelKind.ATTENTION, "flashmla_sparse_swa", geo, "bf16", Rows.NONE)
    got = {}
    for p in kernel_rows(a, arr, Dtypes()).parts:
        assert isinstance(p.key, ElementwiseKey)
        got[p.key.op] = list(p.coords[:, 0])
    # decode query at t = 9: min(10, 4) = 4 window keys + min(10 // 2, 2) = 2 entries → 6 pairs and 6 keys read,
    # × 3 = 18. Prefill t = 0..5: window min(t+1, 4) = 1+2+3+4+4+4 = 18; entries min((t+1)//2, 2) = 0+1+1+2+2+2 = 8
    # → 26 pairs; keys gathered once: 0 cached + 6 new + 6 // 2 = 3 entries = 9. Queries 3 + 6 = 9.
    assert got == {"flashmla_sparse_swa.pairs/h4.d32.e41": [44.0], "flashmla_sparse_swa.keys/h4.d32.e41": [27.0],
                   "flashmla_sparse_swa.tokens/h4.d32.e41": [9.0]}
    idx = KernelAttrs(KernelKind.SPARSE_INDEXER, "sparse_attn_indexer",
                      IndexerGeometry(num_heads=2, head_dim=16, topk=2, compress_ratio=2), "f8e4m3", Rows.NONE)
    rows = {p.key.op.split("/")[0]: list(p.coords[:, 0]) for p in kernel_rows(idx, arr, Dtypes()).parts
            if isinstance(p.key, ElementwiseKey)}
    # indexer over the visible entries: decode 3 × 10 // 2 = 15; prefill (t+1)//2 for t = 0..5: 0+1+1+2+2+3 = 9
    assert rows == {"sparse_attn_indexer.decode": [15.0], "sparse_attn_indexer.prefill": [9.0],
                    "sparse_attn_indexer.tokens": [9.0]}


def test_work_by_hand():
    rows = np.array([10.0])

    def work(op: str) -> tuple[list[float], list[float]]:
        w = compressed.work(op, rows, 2.0)
        assert w is not None
        return list(w[0]), list(w[1])

    # attention: a pair 2·4·2·32 = 512 FLOPs; a key its 41-B row; a query q and output 2·4·32·2 B = 512 B
    assert work("flashmla_sparse_swa.pairs/h4.d32.e41") == ([5120.0], [0.0])
    assert work("flashmla_sparse_swa.keys/h4.d32.e41") == ([0.0], [410.0])
    assert work("flashmla_sparse_swa.tokens/h4.d32.e41") == ([0.0], [5120.0])
    # V4-Flash's CSA compressor: pooling 2·2·512 = 2,048 FLOPs a token; fp32 projections read, state written and
    # read back 3 × 2·2·512·4 = 24,576 B, plus a 584-B entry per 4 tokens = 146 B
    assert work("deepseek_compressor/d512.c2.m4.e584") == ([20480.0], [247220.0])
    # mhc_pre at 4 streams of 4096: fn 2·(2+4)·4·4·4096 = 786,432 FLOPs; 5·4096·2 B + (4 + 16)·4 B = 41,040 B
    assert work("mhc_pre/n4.d4096") == ([7864320.0], [410400.0])
    # mhc_post: 2·16·4096 + 2·4·4096 = 163,840 FLOPs; (2·4 + 1)·4096·2 = 73,728 B
    assert work("mhc_post/n4.d4096") == ([1638400.0], [737280.0])
    assert compressed.work("rms_norm", rows, 2.0) is None


def test_graph_kv_refuses_compressed_attention(graph):
    from graphsim.ir import DType
    from graphsim.serving.graph_kv import graph_kv_layout
    from graphsim.serving.kv_layout import KvLayoutError

    g, _ = graph
    with pytest.raises(KvLayoutError, match=r"compressed-KV attention .* work accountant"):
        graph_kv_layout(g, DType.BFLOAT16, DType.BFLOAT16)

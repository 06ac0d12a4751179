"""DeepSeek Sparse Attention (DeepSeek-V3.2): the indexer and the sparse MLA as semantic ops — the same logits
as transformers' eager path, a dynamic-token trace, vLLM's kernels (indexer replicated under TP) and pricing by
the pairs each part really computes (graphsim/costing/dsa.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import dsa  # noqa: E402
from graphsim.costing.dtypes import KernelDtype  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import ElementwiseKey, MlaDecodeKey  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class  # noqa: E402
from graphsim.ir import AttentionAttrs, IndexerAttrs, Op  # noqa: E402
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry, IndexerGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

# A tiny DeepSeek-V3.2: MLA (4 heads, latent 16, rope 8) with a 2-head indexer of dim 16 keeping 4 keys per query.
TINY_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "torch_dtype": "bfloat16",
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
    "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "index_n_heads": 2,
    "index_head_dim": 16, "index_topk": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "n_group": 1, "topk_group": 1, "vocab_size": 96, "max_position_embeddings": 128, "rope_theta": 10000.0,
}


def _build(attn: str):
    torch.manual_seed(0)
    cfg = copy.deepcopy(TINY_V32)
    custom_ops.register()
    cls = model_class(cfg["architectures"][0])
    return cls._from_config(make_hf_config(cfg), dtype=torch.float32, attn_implementation=attn).eval()


def test_semantic_indexer_and_sparse_attention_match_eager():
    ref = _build("eager")
    ours = _build(custom_ops.IMPL_NAME)
    ours.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 96, (1, 9))  # 9 tokens: later queries keep 4 of up to 9 keys
    with torch.no_grad():
        want = ref(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(ours) as swapped:
            got = ours(input_ids=ids, use_cache=False).logits
    assert any(s.endswith("Indexer.forward") for s in swapped)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def graph():
    g, report = import_hf(ResolvedModel("tiny-v32", copy.deepcopy(TINY_V32), "path", "test"), cache=False)
    return g, report


def test_trace_is_dynamic_with_indexer_and_sparse_attention(graph):
    g, report = graph
    assert report.dynamic_tokens and report.opaque_ops == {}
    idx = [n.attrs_as(IndexerAttrs) for n in g.nodes if n.op is Op.SPARSE_INDEXER]
    assert idx and all((a.num_heads, a.head_dim, a.topk) == (2, 16, 4) for a in idx)
    attn = [n.attrs_as(AttentionAttrs) for n in g.nodes if n.op is Op.ATTENTION]
    assert attn and all(a.index_topk == 4 and a.kv_lora_rank == 16 for a in attn)


def _layer(g, tag):
    rep = g.schedule.representative[tag]
    return {n.name.split(".", 1)[1]: n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == rep}


def test_fused_kernels_and_tp2_keeps_the_indexer_replicated(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    k = _layer(fused, "full.dense")
    assert k["sparse_attn_indexer"].geometry_as(IndexerGeometry) == IndexerGeometry(num_heads=2, head_dim=16, topk=4)
    assert k["flashmla_sparse"].geometry_as(AttentionGeometry).index_topk == 4
    assert not [n for n, a in k.items() if a.approximate]  # indexer RoPE inside it; MLA key assembly absorbed
    out = run_pipeline(fused, "tp{size=2}").graph  # conservation runs inside
    k2 = _layer(out, "full.dense")
    # wq_b (32 → 2·16) and wk_weights_proj (64 → 16 + 2: wk and weights_proj packed) stay whole on each rank
    # (vLLM 0.33.0 deepseek_v2.py Indexer: wq_b ReplicatedLinear, wk_weights_proj MergedColumnParallelLinear with
    # disable_tp=True)
    assert [k2[n].geometry_as(GemmGeometry).n for n in ("wq_b", "wk_weights_proj")] == [32, 18]
    assert "wk" not in k2 and "weights_proj" not in k2
    assert k2["sparse_attn_indexer"].geometry_as(IndexerGeometry).num_heads == 2
    assert k2["flashmla_sparse"].geometry_as(AttentionGeometry).num_heads == 2  # MLA heads split


def test_fp8_checkpoint_leaves_the_indexer_weights_projection_in_the_model_dtype():
    # vLLM 0.33.0 deepseek_v2.py Indexer.__init__: wq_b takes the checkpoint's quant_config; wk and weights_proj are
    # one wk_weights_proj built with quant_config=None ("FP8 wk weights are upcasted to BF16 during loading to
    # maintain fusion"): bf16 whatever the checkpoint quantizes; the fp8-block config of DeepSeek-V3.2
    cfg = {**copy.deepcopy(TINY_V32), "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
    g, _ = import_hf(ResolvedModel("tiny-v32-fp8", cfg, "path", "test"), cache=False)
    k = _layer(run_pipeline(g, "fold,fuse{target=vllm}").graph, "full.dense")
    assert (k["wq_b"].dtype, k["wk_weights_proj"].dtype) == ("fp8_block", "bf16")


def test_indexer_work_hand_derived():
    s = dsa.IndexerShape(heads=2, head_dim=16, topk=4)
    rows = np.array([10.0])
    # per pair: 2·2·16 + 2·2 = 68 FLOPs; 8 bytes of fp32 logits (+ 16 + 4 key bytes per decode pair)
    for kernel, nbytes in ((dsa.PREFILL, 80.0), (dsa.DECODE, 280.0)):
        w = dsa.work(dsa.op_name(kernel, s), rows)
        assert w is not None and list(w[0]) == [680.0] and list(w[1]) == [nbytes]
    # per token: 3·2·16 + 3·16 + 20 + 4·2 + 4·4 = 96 + 48 + 20 + 8 + 16 = 188 bytes
    w = dsa.work(dsa.op_name(dsa.TOKENS, s), rows)
    assert w is not None and list(w[0]) == [0.0] and list(w[1]) == [1880.0]
    # sparse MLA prefill: per pair 2·4·(2·16 + 8) = 320 FLOPs; per token 4·40·2 + 4·4 = 336 bytes; per key 24·2
    op = dsa.attention_op_name(dsa.ATTN_PAIRS, 4, 16, 8, 4)
    assert dsa.attention_work(op, rows, 2.0) is not None
    assert list(dsa.attention_work(op, rows, 2.0)[0]) == [3200.0]  # type: ignore[index]
    tok = dsa.attention_work(dsa.attention_op_name(dsa.ATTN_TOKENS, 4, 16, 8, 4), rows, 2.0)
    keys = dsa.attention_work(dsa.attention_op_name(dsa.ATTN_KEYS, 4, 16, 8, 4), rows, 2.0)
    assert tok is not None and keys is not None and list(tok[1]) == [3360.0] and list(keys[1]) == [480.0]


def test_rows_count_causal_pairs_and_topk_capped_attention():
    steps = [Step((SeqGroup(1, 9, 3), SeqGroup(6, 0, 1)))]  # 3 decode queries after 9 keys; one 6-token prefill
    arr = StepArrays.of(steps)
    idx = KernelAttrs(KernelKind.SPARSE_INDEXER, "sparse_attn_indexer",
                      IndexerGeometry(num_heads=2, head_dim=16, topk=4), "f8e4m3", Rows.NONE)
    got = {}
    for p in kernel_rows(idx, arr, Dtypes()).parts:
        assert isinstance(p.key, ElementwiseKey)
        got[p.key.op.split("/")[0]] = list(p.coords[:, 0])
    # indexer: every earlier key. decode 3 × 10 = 30 pairs; prefill 6·7/2 = 21 pairs; 9 tokens
    assert got == {dsa.DECODE: [30.0], dsa.PREFILL: [21.0], dsa.TOKENS: [9.0]}
    geo = AttentionGeometry(num_heads=4, num_kv_heads=4, head_dim=24, v_head_dim=16, window=0, causal=True,
                            kv_lora_rank=16, qk_rope_head_dim=8, index_topk=4)
    attn = KernelAttrs(KernelKind.ATTENTION, "flashmla_sparse", geo, "bf16", Rows.NONE)
    parts = kernel_rows(attn, arr, Dtypes(kv=KernelDtype.BF16)).parts
    dec = [p for p in parts if isinstance(p.key, MlaDecodeKey)]
    assert [list(c) for c in dec[0].coords] == [[3.0, 4.0]]  # 3 sequences, min(10, 4) keys each
    pre = {p.key.op.split("/")[0]: list(p.coords[:, 0]) for p in parts if isinstance(p.key, ElementwiseKey)}
    # prefill queries at positions 0..5 attend 1, 2, 3, 4, 4, 4 keys = 18 pairs; 6 tokens; 6 keys read
    assert pre == {dsa.ATTN_PAIRS: [18.0], dsa.ATTN_TOKENS: [6.0], dsa.ATTN_KEYS: [6.0]}

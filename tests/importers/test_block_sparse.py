"""MiniMax-M3's block top-k indexer and block-sparse attention (graphsim/importers/hf/block_sparse_ops.py): the
checkpoint's own spelling imports through its transformers class, the semantic indexer picks what transformers'
picks, the tiny model's logits equal eager, the trace is dynamic, the fuse names the kernels, tp 2 conserves work,
and the pricing (graphsim/costing/block_sparse.py) by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import block_sparse  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import AttentionDecodeKey, AttentionPrefillKey, ElementwiseKey  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import AttentionAttrs, IndexerAttrs, Op  # noqa: E402
from graphsim.ir.geometry import AttentionGeometry, IndexerGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

# A tiny MiniMax-M3 in the checkpoint's own spelling (MiniMaxM3ForCausalLM, model_type minimax_m3, the legacy
# sparse_* keys MiniMaxM3VLTextConfig.__post_init__ reads): layer 0 dense attention + dense MLP, layer 1 sparse
# attention (2 index heads of 8, blocks of 4 keys, top 3 blocks, 1 local) + MoE.
TINY_M3 = {
    "architectures": ["MiniMaxM3ForCausalLM"], "model_type": "minimax_m3", "torch_dtype": "bfloat16",
    "vocab_size": 96, "hidden_size": 32, "intermediate_size": 16, "moe_intermediate_size": 16,
    "dense_intermediate_size": 48, "shared_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "rotary_dim": 4, "partial_rotary_factor": 0.5, "num_local_experts": 4,
    "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_layer_freq": [0, 1], "hidden_act": "swigluoai",
    "use_qk_norm": True, "qk_norm_type": "per_head", "scoring_func": "sigmoid", "use_routing_bias": True,
    "sparse_attention_config": {
        "sparse_attention_freq": [0, 1], "sparse_block_size": 4, "sparse_index_dim": 8, "sparse_num_index_heads": 2,
        "sparse_topk_blocks": 3, "sparse_local_block": 1, "use_sparse_attention": True,
        "sparse_disable_index_value": [0, 1], "sparse_init_block": 0, "sparse_score_type": "max"},
}


@pytest.fixture(scope="module")
def graph():
    return import_hf(ResolvedModel("tiny-m3", copy.deepcopy(TINY_M3), "path", "test"), cache=False)


def _eager_model():
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    cls = model_class(TINY_M3["architectures"][0])  # MiniMaxM3VLForCausalLM through registry.TRANSFORMERS_CLASS
    return cls._from_config(make_hf_config(copy.deepcopy(TINY_M3)), dtype=torch.float32,
                            attn_implementation="eager").eval()


def test_the_checkpoint_spelling_builds_as_the_transformers_class():
    model = _eager_model()
    assert type(model).__name__ == "MiniMaxM3VLForCausalLM"
    assert model.config.layer_types == ["full_attention", "minimax_m3_sparse"]


def test_indexer_op_picks_the_blocks_transformers_picks():
    model = _eager_model()
    indexer = model.model.layers[1].self_attn.indexer
    torch.manual_seed(1)
    s = 23  # 6 blocks of 4: more than the 3 kept
    hidden = torch.randn(1, s, 32)
    pos = torch.arange(s)[None]
    cos, sin = model.model.rotary_emb(hidden, pos)
    with torch.no_grad():
        ref = type(indexer).forward(indexer, hidden, (cos, sin), None, pos)  # [1, 2, S, 3]
        with custom_ops.semantic_kernels(model) as swapped:
            ours = indexer(hidden, (cos, sin), None, pos)
    assert any(x.endswith("MiniMaxM3VLIndexer.forward") for x in swapped)
    assert ours.shape == (1, 2, s, 3)
    for h in range(2):
        for t in range(s):
            assert sorted(ours[0, h, t].tolist()) == sorted(ref[0, h, t].tolist()), (h, t)


def test_tiny_model_logits_equal_eager_and_differ_from_dense():
    model = _eager_model()
    ids = torch.randint(0, 96, (1, 23))
    custom_ops.register()
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        for m in model.modules():
            if hasattr(m, "config"):
                m.config._attn_implementation = custom_ops.IMPL_NAME
        with custom_ops.semantic_kernels(model):
            ours = model(input_ids=ids, use_cache=False).logits
            model.model.layers[1].self_attn.indexer = None  # the same layer read densely
            dense = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert (dense - ref).abs().max() > 1e-3  # the block mask matters at 23 tokens


def test_trace_is_dynamic_with_an_indexer_and_a_sparse_attention(graph):
    g, report = graph
    assert report.architecture == "MiniMaxM3ForCausalLM" and report.dynamic_tokens and report.opaque_ops == {}
    ix = [n.attrs_as(IndexerAttrs) for n in g.nodes if n.op is Op.SPARSE_INDEXER]
    assert [(a.num_heads, a.head_dim, a.topk, a.block_size) for a in ix] == [(2, 8, 3, 4)]
    attn = {n.layer: n.attrs_as(AttentionAttrs) for n in g.nodes if n.op is Op.ATTENTION}
    assert attn[0].index_topk is None and attn[1].index_topk == 12  # 3 blocks × 4 keys


def test_fuse_names_the_kernels_and_tp2_conserves(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    attn_layer = [n for n in fused.nodes if n.op is Op.KERNEL and n.layer == 1 and ".self_attn" in n.scope]
    names = [n.attrs_as(KernelAttrs).name for n in attn_layer]
    assert "block_sparse_indexer" in names and "block_sparse_attention" in names
    assert not [n.name for n in attn_layer if n.attrs_as(KernelAttrs).approximate], names
    tp2 = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph  # conservation runs inside
    geo = next(n.attrs_as(KernelAttrs).geometry_as(AttentionGeometry) for n in tp2.nodes
               if n.op is Op.KERNEL and n.attrs_as(KernelAttrs).name == "block_sparse_attention")
    assert (geo.num_heads, geo.num_kv_heads, geo.index_topk) == (2, 1, 12)


# --- pricing (hand-derived; costing/block_sparse.py) -----------------------------------------------------------------
SHAPE = block_sparse.BlockIndexerShape(heads=2, head_dim=8, block=4, topk=3)


def test_indexer_work_per_row_hand_derived():
    rows = np.array([1.0, 10.0])

    def work(kernel):
        w = block_sparse.work(block_sparse.op_name(kernel, SHAPE), rows, 2.0)
        assert w is not None
        return list(w[0]), list(w[1])

    # per pair 2·2·8 = 32 FLOPs; block maxima 8·2/4 = 4 B; a decode pair also reads its cached key 8·2 = 16 B
    assert work(block_sparse.PREFILL) == ([32.0, 320.0], [4.0, 40.0])
    assert work(block_sparse.DECODE) == ([32.0, 320.0], [20.0, 200.0])
    # per token: q 2·8 + the key read, cached and read back 3·8 = 40 elements · 2 B + 3 int32 indices · 2 heads
    assert work(block_sparse.TOKENS) == ([0.0, 0.0], [104.0, 1040.0])
    assert block_sparse.work("sparse_attn_indexer.decode/h2.d8.k3", rows, 2.0) is None


def test_kernel_rows_by_hand():
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2), SeqGroup(1, 5, 1)))]
    arr = StepArrays.of(steps)
    ix = KernelAttrs(KernelKind.SPARSE_INDEXER, "block_sparse_indexer",
                     IndexerGeometry(num_heads=2, head_dim=8, topk=3, block_size=4), "bf16", Rows.NONE)
    got = {p.key.op.split("/")[0]: list(p.coords[:, 0]) for p in kernel_rows(ix, arr, Dtypes()).parts
           if isinstance(p.key, ElementwiseKey)}
    # decode pairs 3·(100 + 1) + (5 + 1) = 309; prefill pairs 2·(10·11/2) = 110; tokens 3 + 20 + 1 = 24
    assert got == {"block_sparse_indexer.prefill": [110.0], "block_sparse_indexer.decode": [309.0],
                   "block_sparse_indexer.tokens": [24.0]}
    attn = KernelAttrs(KernelKind.ATTENTION, "block_sparse_attention",
                       AttentionGeometry(num_heads=4, num_kv_heads=2, head_dim=8, v_head_dim=8, window=0, causal=True,
                                         index_topk=12), "bf16", Rows.NONE)
    parts = kernel_rows(attn, arr, Dtypes()).parts
    dec = next(p for p in parts if isinstance(p.key, AttentionDecodeKey))
    pre = next(p for p in parts if isinstance(p.key, AttentionPrefillKey))
    assert isinstance(dec.key, AttentionDecodeKey) and isinstance(pre.key, AttentionPrefillKey)
    # decode at min(context, 12) keys: (3 sequences, 12) and (1, 6); prefill on the key with 12 as its window
    assert dec.coords.tolist() == [[3.0, 12.0], [1.0, 6.0]] and dec.key.window == 0
    assert pre.coords.tolist() == [[1.0, 10.0, 10.0], [1.0, 10.0, 10.0]] and pre.key.window == 12

"""MiniMax-Text-01's lightning attention as one semantic op (graphsim/importers/hf/lightning_ops.py): the tiny
model's logits, the trace (dynamic tokens), the fuse to vLLM's kernels, TP and the pricing of its decode, prefill
and state rows (graphsim/costing/lightning.py), by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import lightning  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import ElementwiseKey  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import LinearAttentionAttrs, Op  # noqa: E402
from graphsim.ir.geometry import CollectiveGeometry, LinearAttentionGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

# A tiny MiniMax (MiniMax-Text-01's transformers class): a lightning layer then a softmax layer, blocks of 8 tokens.
TINY_MINIMAX = {
    "architectures": ["MiniMaxForCausalLM"], "model_type": "minimax", "torch_dtype": "bfloat16", "vocab_size": 96,
    "hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2, "block_size": 8,
    "layer_types": ["linear_attention", "full_attention"], "max_position_embeddings": 128,
}


@pytest.fixture(scope="module")
def graph():
    return import_hf(ResolvedModel("tiny-minimax", copy.deepcopy(TINY_MINIMAX), "path", "test"), cache=False)


def test_tiny_model_logits_unchanged_by_the_swap():
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    model = model_class("MiniMaxForCausalLM")._from_config(make_hf_config(copy.deepcopy(TINY_MINIMAX)),
                                                           dtype=torch.float32).eval()
    ids = torch.randint(0, 96, (1, 21))  # 21 tokens: two full blocks of 8 and a partial one
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert any(s.endswith("MiniMaxLightningAttention.forward") for s in swapped)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_trace_is_dynamic_with_one_lightning_node(graph):
    g, report = graph
    assert report.dynamic_tokens and report.opaque_ops == {}
    nodes = [n.attrs_as(LinearAttentionAttrs) for n in g.nodes if n.op is Op.LINEAR_ATTENTION]
    assert [(a.kind, a.num_v_heads, a.k_head_dim, a.v_head_dim, a.chunk_size) for a in nodes] == [
        ("lightning", 4, 8, 8, 8)]


def _kernels(g, tag) -> list[KernelAttrs]:
    rep = g.schedule.representative[tag]
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == rep]


def test_fuse_and_tp2(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    ks = _kernels(fused, "linear.moe")
    names = [k.name for k in ks]
    assert not [k.name for k in ks if k.approximate], names
    assert names.count("lightning_attention") == 1 and "sigmoid" in names  # the output gate, eager in vLLM
    tp2 = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph  # conservation runs inside
    ks = _kernels(tp2, "linear.moe")
    geo = next(k for k in ks if k.name == "lightning_attention").geometry_as(LinearAttentionGeometry)
    assert (geo.num_v_heads, geo.v_head_dim) == (2, 8)
    # MiniMaxText01RMSNormTP: the norm over all heads all-reduces its variance (one f32 per token)
    reasons = sorted(k.geometry_as(CollectiveGeometry).reason for k in ks if k.kind is KernelKind.ALL_REDUCE)
    assert reasons == ["moe_experts", "norm_variance", "row_parallel"]  # + out_proj's and the experts' reduces


# --- pricing (hand-derived; costing/lightning.py) --------------------------------------------------------------------
SHAPE = lightning.LightningShape(heads=2, head_dim=4, block=8, state_dtype="bf16")


def test_work_per_row_hand_derived():
    rows = np.array([1.0, 2.0])

    def work(kernel):
        w = lightning.work(lightning.op_name(kernel, SHAPE), rows)
        assert w is not None
        return list(w[0]), list(w[1])

    # state 2·4·4 = 32 elements; io q, k, v, o in fp32: 4·2·4·4 = 128 B per token
    # decode: 5·2·16 = 160 FLOPs; 128 + the bf16 state read and written 2·32·2 = 128 → 256 B
    assert work(lightning.DECODE) == ([160.0, 320.0], [256.0, 512.0])
    # prefill: 2·(4·16 + 2·8·4) = 256 FLOPs; 128 + the fp32 carried state per block 2·32·4/8 = 32 → 160 B
    assert work(lightning.PREFILL) == ([256.0, 512.0], [160.0, 320.0])
    assert work(lightning.PREFILL_STATE) == ([0.0, 0.0], [128.0, 256.0])
    assert lightning.work("chunk_kda/h2.k4.v6.c6.sf32", rows) is None


def test_kernel_rows_split_decode_prefill_and_state():
    geo = LinearAttentionGeometry(num_k_heads=2, num_v_heads=2, k_head_dim=4, v_head_dim=4, kind="lightning",
                                  chunk_size=8, state_dtype="bf16")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "lightning_attention", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    parts = kernel_rows(a, StepArrays.of(steps), Dtypes()).parts
    got = {p.key.op.split("/")[0]: (list(p.coords[:, 0]), list(p.step)) for p in parts
           if isinstance(p.key, ElementwiseKey)}
    # vLLM runs a step's decode tokens on the decode kernel even beside prefills (_prefill_and_mix_infer)
    assert got == {"linear_decode_forward_triton": ([3.0, 5.0], [0, 1]), "lightning_attention": ([20.0], [0]),
                   "lightning_attention.state": ([2.0], [0])}

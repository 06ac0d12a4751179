"""The router top-k of MoE experts whose measured rows were timed from the router logits is priced inside those rows,
not again on its own (costing/routing_in_rows.py), decided by the rows' collector label (aiconfigurator's
`kernel_source`). A tiny gpt-oss (4 experts, top 2), fused for vLLM, in MXFP4 and in bf16.

Expected values are read off the collectors (docs/cost-model.md "Router top-k inside MoE rows"), not off the code:
every label below is one that aiconfigurator-core 0.12 ships in an H200 `moe_perf` table."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.costing.cost_tree import build_tree, compile_tree
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import GemmKey, MoeKey
from graphsim.costing.routing_in_rows import routers_in_expert_rows, routing_in_row, rule_for
from graphsim.importers.hf import import_hf
from graphsim.ir.kernel import KernelKind
from graphsim.passes import run_pipeline

# GPT-OSS: 4 experts of 32 intermediate features with biases, top 2, hidden 64 (tests/passes/test_partition_tail.py's,
# hidden 64 so the MXFP4 blocks of 32 divide it)
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 256,
    "sliding_window": 64, "layer_types": ["full_attention"], "torch_dtype": "bfloat16",
}
# openai/gpt-oss-20b's config.json quantization_config
MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"]}

# labels of aiconfigurator-core 0.12's h200_sxm moe_perf tables, with what their collector timed
V024_BF16 = "vllm_unquantizedfusedmoe_triton_tritonexperts"  # vllm 0.24.0: FusedMoE module on router logits
V024_MXFP4 = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
V019_BF16 = "vllm_fused_moe"  # vllm 0.19.0: fused_experts on top-k ids made before the timed function
V019_MXFP4 = "vllm_mxfp4_moe"  # vllm 0.19.0: FusedMoE.forward(hidden_states, router_logits)


def _fused(cfg):
    graph, _ = import_hf(ResolvedModel("tiny-gpt-oss", dict(cfg), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


@pytest.fixture(scope="module")
def mxfp4():
    return _fused({**GPT_OSS, "quantization_config": MXFP4})


@pytest.fixture(scope="module")
def bf16():
    return _fused(GPT_OSS)


def _layer(graph):
    return [n for n in graph.nodes if n.layer == 0]


def _labels(label):
    """Every MoE key's rows carry `label`; other keys have none."""
    return lambda key: {label} if isinstance(key, MoeKey) else set()


def _leaf_kinds(graph, row_labels):
    tree = build_tree(graph, Dtypes.for_graph(graph.meta), None, None, row_labels)
    return [leaf.attrs.kind for leaf in compile_tree(tree).leaves]


def _experts_key(graph):
    e = next(n for n in graph.nodes if n.op.value == "kernel" and n.kernel.kind is KernelKind.MOE_EXPERTS)
    from graphsim.costing.kernel_map import key_for

    return key_for(e.kernel, Dtypes.for_graph(graph.meta))


def _leaf_count(graph, kind):
    return sum(1 for n in graph.nodes if n.op.value == "kernel" and n.kernel.kind is kind)


@pytest.mark.parametrize(("label", "inside"), [
    # vLLM 0.24.0 collector (collect_moe.py @d5bad971c): every dtype is the FusedMoE module on router logits
    (V024_BF16, True),
    ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", True),
    ("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", True),
    ("vllm_fp8moe_triton_tritonexperts", True),
    ("vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", True),
    ("vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu", True),
    (V024_MXFP4, True),
    # the collectors before it (collect_moe.py @e015c0ed6): only the MXFP4 path routes inside
    (V019_MXFP4, True),
    (V019_BF16, False),
    ("vllm_marlin_moe", False),
    ("vllm_marlin_int4_moe", False),
    ("vllm_flashinfer_trtllm_moe_fp4", False),
    # TRT-LLM (collect_moe*.py: moe.forward(hidden_states, router_logits))
    ("moe_torch_flow_cutlass", True),
    ("moe_torch_flow_nongated", True),
])
def test_each_collector_label_says_whether_its_rows_route(label, inside):
    rule = rule_for(label)
    assert rule is not None and rule.routing_in is inside and not rule.ep1_only
    key = MoeKey(2048, 768, 8, 128, 8, 1, KernelDtype.BF16)
    assert routing_in_row(key, {label}) is inside


def test_sglang_rows_route_inside_only_on_one_ep_rank():
    # collect_moe.py: select_experts in the timed op with one EP rank; a rank-0 workload's precomputed top-k beside
    tp8 = MoeKey(4096, 1536, 8, 128, 8, 1, KernelDtype.BF16)
    assert routing_in_row(tp8, {"sglang_fused_moe_triton"})
    assert not routing_in_row(replace(tp8, tp=1, ep=8), {"sglang_fused_moe_triton"})


def test_unknown_mixed_or_no_labels_keep_the_router():
    key = MoeKey(2048, 768, 8, 128, 8, 1, KernelDtype.BF16)
    assert rule_for("graphsim_profiler_fused_moe") is None
    assert not routing_in_row(key, {"graphsim_profiler_fused_moe"})
    assert not routing_in_row(key, set())  # no rows of its own (interpolated / derived): not assumed
    assert not routing_in_row(key, {V024_BF16, V019_BF16})  # one row set without the routing is enough to keep it
    assert routing_in_row(key, {V024_BF16, "vllm_fp8moe_triton_tritonexperts"})
    assert not routing_in_row(GemmKey(8, 8, KernelDtype.BF16), {V024_BF16})  # only MoE experts' rows


def test_mxfp4_experts_are_keyed_on_the_mxfp4_rows(mxfp4, bf16):
    k = _experts_key(mxfp4)
    assert isinstance(k, MoeKey) and k.dtype is KernelDtype.W4A16_MXFP4
    assert _experts_key(bf16).dtype is KernelDtype.BF16


@pytest.mark.parametrize("label", [V024_MXFP4, V019_MXFP4])
def test_router_topk_is_inside_mxfp4_rows(mxfp4, label):
    routers = [n.name for n in _layer(mxfp4) if n.kernel.kind is KernelKind.MOE_ROUTER]
    assert len(routers) == 1
    assert routers_in_expert_rows(_layer(mxfp4), Dtypes.for_graph(mxfp4.meta), _labels(label)) == frozenset(routers)
    kinds = _leaf_kinds(mxfp4, _labels(label))
    assert KernelKind.MOE_ROUTER not in kinds
    # the router GEMM that makes the logits is not in the rows (the collector feeds logits): still a leaf
    assert KernelKind.MOE_EXPERTS in kinds and kinds.count(KernelKind.GEMM) == _leaf_count(mxfp4, KernelKind.GEMM)


def _router_inside_only_with(graph, inside: str, outside: str) -> None:
    """The graph's one router top-k is inside experts' rows labelled `inside` (no leaf of its own) and stays a leaf
    against rows labelled `outside`."""
    routers = frozenset(n.name for n in _layer(graph) if n.kernel.kind is KernelKind.MOE_ROUTER)
    dt = Dtypes.for_graph(graph.meta)
    assert len(routers) == 1
    assert routers_in_expert_rows(_layer(graph), dt, _labels(inside)) == routers
    assert KernelKind.MOE_ROUTER not in _leaf_kinds(graph, _labels(inside))
    assert routers_in_expert_rows(_layer(graph), dt, _labels(outside)) == frozenset()
    assert KernelKind.MOE_ROUTER in _leaf_kinds(graph, _labels(outside))


def test_router_topk_is_inside_vllm_024_bf16_rows_not_019(bf16):
    _router_inside_only_with(bf16, V024_BF16, V019_BF16)


def test_router_stays_priced_without_rows(mxfp4):
    assert routers_in_expert_rows(_layer(mxfp4), Dtypes.for_graph(mxfp4.meta), lambda _k: set()) == frozenset()
    assert KernelKind.MOE_ROUTER in _leaf_kinds(mxfp4, lambda _k: set())
    assert KernelKind.MOE_ROUTER in _leaf_kinds(mxfp4, None)


def _cost_model(graph, tmp_path, label):
    from graphsim.costing.cost_model import CostModel
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.kernels import Measurement, TokensPoint
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    path = tmp_path / f"{label}.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="vllm")) as db:
        db.put_many([(_experts_key(graph), TokensPoint(t), Measurement(40.0, kernel=label)) for t in (1, 8, 64)])
    db = ProfileDB.open(path)
    return CostModel.of_kernel_graph(graph, load_hardware("h200"), db), db


@pytest.mark.parametrize(("fixture", "label", "inside"), [
    ("mxfp4", V024_MXFP4, True), ("bf16", V024_BF16, True), ("bf16", V019_BF16, False)])
def test_a_cost_model_prices_the_router_by_its_rows_collector(request, tmp_path, fixture, label, inside):
    """End to end on a profile holding one MoE row set for the tiny experts under a real table's label: the top-k is
    a leaf exactly when that collector timed the experts from top-k ids; the experts are priced from the row either
    way, and the data note says where the top-k went."""
    from graphsim.workload import parse_batch_spec

    cm, db = _cost_model(request.getfixturevalue(fixture), tmp_path, label)
    try:
        kinds = [leaf.attrs.kind for leaf in cm.tree.leaves]
        assert (KernelKind.MOE_ROUTER not in kinds) is inside and KernelKind.MOE_EXPERTS in kinds
        assert ("router top-k priced inside the experts' rows" in cm.data_note) is inside
        ev = cm.evaluate([parse_batch_spec("decode:8x128")])
        assert float(ev.leaf_time_us[kinds.index(KernelKind.MOE_EXPERTS), 0]) == pytest.approx(40.0)  # the row, as is
    finally:
        db.close()


# Qwen3-MoE: 4 experts of 32 features, top 2, hidden 64 (softmax top-k, as the engines' own fuse rules name it)
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
    "moe_intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 256,
    "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
}


@pytest.mark.parametrize(("target", "label"), [("trtllm", "moe_torch_flow_cutlass"),
                                               ("sglang", "sglang_fused_moe_triton")])
def test_other_engines_graphs_follow_their_rows_collector(target, label):
    """A graph fused for TRT-LLM / SGLang keeps its router against rows of a collector that took top-k ids, and
    loses it against its own engine's rows (module forward on logits; SGLang: one EP rank)."""
    graph, _ = import_hf(ResolvedModel("tiny-qwen3-moe", dict(QWEN3_MOE), "path", "test"), cache=False)
    fused = run_pipeline(graph, f"fold,fuse{{target={target}}}").graph
    _router_inside_only_with(fused, label, V019_BF16)

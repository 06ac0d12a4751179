"""The router top-k of MoE experts whose measured rows were timed from the router logits (aiconfigurator's MXFP4
MoE rows: `FusedMoE.forward(hidden_states, router_logits)`) is priced inside those rows, not again on its own
(costing/routing_in_rows.py). A tiny gpt-oss (4 experts, top 2), fused for vLLM, in MXFP4 and in bf16."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.costing.cost_tree import build_tree, compile_tree
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import MoeKey
from graphsim.costing.routing_in_rows import routers_in_expert_rows
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


def _leaf_kinds(graph, has_rows):
    return [leaf.attrs.kind for leaf in compile_tree(build_tree(graph, Dtypes.for_graph(graph.meta), has_rows)).leaves]


def _experts_key(graph):
    e = next(n for n in graph.nodes if n.op.value == "kernel" and n.kernel.kind is KernelKind.MOE_EXPERTS)
    from graphsim.costing.kernel_map import key_for

    return key_for(e.kernel, Dtypes.for_graph(graph.meta))


def test_mxfp4_experts_are_keyed_on_the_mxfp4_rows(mxfp4, bf16):
    k = _experts_key(mxfp4)
    assert isinstance(k, MoeKey) and k.dtype is KernelDtype.W4A16_MXFP4
    assert _experts_key(bf16).dtype is KernelDtype.BF16


def test_router_topk_is_inside_mxfp4_rows_when_the_profile_has_them(mxfp4):
    routers = [n.name for n in _layer(mxfp4) if n.kernel.kind is KernelKind.MOE_ROUTER]
    assert len(routers) == 1
    assert routers_in_expert_rows(_layer(mxfp4), Dtypes.for_graph(mxfp4.meta), lambda _k: True) == frozenset(routers)
    kinds = _leaf_kinds(mxfp4, lambda _k: True)
    assert KernelKind.MOE_ROUTER not in kinds
    # the router GEMM that makes the logits is not in the rows (the collector feeds logits): still a leaf
    assert KernelKind.MOE_EXPERTS in kinds and kinds.count(KernelKind.GEMM) == _leaf_count(mxfp4, KernelKind.GEMM)


def _leaf_count(graph, kind):
    return sum(1 for n in graph.nodes if n.op.value == "kernel" and n.kernel.kind is kind)


def test_router_stays_priced_without_rows_or_in_bf16(mxfp4, bf16):
    # no rows for the experts (derived / roofline): the top-k is priced on its own
    assert routers_in_expert_rows(_layer(mxfp4), Dtypes.for_graph(mxfp4.meta), lambda _k: False) == frozenset()
    assert KernelKind.MOE_ROUTER in _leaf_kinds(mxfp4, lambda _k: False)
    assert KernelKind.MOE_ROUTER in _leaf_kinds(mxfp4, None)
    # bf16 rows were timed from precomputed top-k ids in the collector versions read: the router stays
    assert routers_in_expert_rows(_layer(bf16), Dtypes.for_graph(bf16.meta), lambda _k: True) == frozenset()
    assert KernelKind.MOE_ROUTER in _leaf_kinds(bf16, lambda _k: True)


def test_a_cost_model_on_mxfp4_rows_prices_the_router_inside_them(mxfp4, tmp_path):
    """End to end on a profile holding MXFP4 MoE rows for the tiny experts (the label of H200's gpt-oss rows): the
    top-k is no leaf, the experts are priced from the row, and the data note says where the top-k went."""
    from graphsim.costing.cost_model import CostModel
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.kernels import Measurement, TokensPoint
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta
    from graphsim.workload import parse_batch_spec

    key = _experts_key(mxfp4)
    path = tmp_path / "p.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="vllm")) as db:
        db.put_many([(key, TokensPoint(t), Measurement(40.0, kernel="vllm_gptossmxfp4moe_triton_oaitritonmxfp4"
                                                       "expertsmonolithic")) for t in (1, 8, 64)])
    with ProfileDB.open(path) as db:
        cm = CostModel.of_kernel_graph(mxfp4, load_hardware("h200"), db)
        kinds = [leaf.attrs.kind for leaf in cm.tree.leaves]
        assert KernelKind.MOE_ROUTER not in kinds and KernelKind.MOE_EXPERTS in kinds
        assert "router top-k priced inside the experts' rows" in cm.data_note
        ev = cm.evaluate([parse_batch_spec("decode:8x128")])
        experts = kinds.index(KernelKind.MOE_EXPERTS)
        assert float(ev.leaf_time_us[experts, 0]) == pytest.approx(40.0)  # the row at 8 tokens, as measured

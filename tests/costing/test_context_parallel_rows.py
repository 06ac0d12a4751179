"""Context parallelism rebuilds the cost tree (costing/context_parallel.py); it reads the rows' collector labels as
the unsplit tree does, so a router top-k inside its experts' measured rows is no leaf there either
(costing/routing_in_rows.py). A tiny gpt-oss (4 experts, top 2, 4 query / 2 KV heads), fused for vLLM at TP 4 (each
KV head on two ranks, so DCP 2 fits), one MoE row set under a real table's label.

Which labels hold the routing is read off aiconfigurator's collectors (docs/cost-model.md "Router top-k inside MoE
rows"): vLLM 0.24.0's `FusedMoE` module on router logits (in), 0.19.0's `fused_experts` on top-k ids (out)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.costing.context_parallel import (
    ContextParallel, with_context_parallel, with_decode_context_parallel, with_prefill_context_parallel,
)
from graphsim.costing.cost_model import CostModel
from graphsim.costing.hardware import load_hardware
from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import Measurement, TokensPoint
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.importers.hf import import_hf
from graphsim.ir.kernel import KernelKind
from graphsim.passes import run_pipeline

GPT_OSS = {  # tests/costing/test_routing_in_rows.py's tiny gpt-oss
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 256,
    "sliding_window": 64, "layer_types": ["full_attention"], "torch_dtype": "bfloat16",
}
INSIDE = "vllm_unquantizedfusedmoe_triton_tritonexperts"  # vLLM 0.24.0 collector
OUTSIDE = "vllm_fused_moe"  # the collector before it


@pytest.fixture(scope="module")
def graph():
    raw, _ = import_hf(ResolvedModel("tiny-gpt-oss", dict(GPT_OSS), "path", "test"), cache=False)
    return run_pipeline(raw, "fold,fuse{target=vllm},tp{size=4}").graph


def _cost_model(graph, tmp_path, label) -> tuple[CostModel, ProfileDB]:
    experts = next(n for n in graph.nodes if n.op.value == "kernel" and n.kernel.kind is KernelKind.MOE_EXPERTS)
    key = key_for(experts.kernel, Dtypes.for_graph(graph.meta))
    path = tmp_path / f"{label}.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="vllm")) as db:
        db.put_many([(key, TokensPoint(t), Measurement(40.0, kernel=label)) for t in (1, 8, 64)])
    db = ProfileDB.open(path)
    return CostModel.of_kernel_graph(graph, load_hardware("h200"), db), db


@pytest.mark.parametrize(("label", "inside"), [(INSIDE, True), (OUTSIDE, False)])
def test_context_parallel_trees_drop_the_router_as_the_unsplit_tree_does(graph, tmp_path, label, inside):
    cm, db = _cost_model(graph, tmp_path, label)
    try:
        for tree_of in (cm, with_prefill_context_parallel(cm, 2), with_decode_context_parallel(cm, 2),
                        with_context_parallel(cm, ContextParallel(dcp=2))):
            kinds = [leaf.attrs.kind for leaf in tree_of.tree.leaves]
            assert (KernelKind.MOE_ROUTER not in kinds) is inside, tree_of.data_note
            assert KernelKind.MOE_EXPERTS in kinds
    finally:
        db.close()

"""DeepSeek's routed-scaling multiply against aiconfigurator's vLLM 0.24 MoE rows: never priced on its own.

What the rows hold: the 0.24.0 collector (ai-dynamo/aiconfigurator collector/vllm/collect_moe.py @d5bad971c) builds
`FusedMoE(..., routed_scaling_factor=<config's>, apply_routed_scale_to_output=True)` for deepseek_v3 / kimi_k2 /
glm_moe_dsa / nemotron_h and times `moe_module(hidden_states, router_logits)`; vLLM applies the factor inside that
call (0.33.0 layers/fused_moe/runner/moe_runner.py `MoERunner._maybe_apply_routed_scale_to_output`, on the fused
output). What graphsim prices: transformers' DeepseekV3MoE multiplies the top-k weights, a (tokens × top_k) op that
the `moe_router` fuse rule takes into the router kernel with the rest of the routing math. So the multiply is in the
router's leaf, and goes with it where the experts' rows hold the routing (costing/routing_in_rows.py): no second
count, and no element-wise leaf of its own in either case.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.costing.cost_tree import build_tree, compile_tree
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import MoeKey
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.kernel import KernelKind
from graphsim.passes import run_pipeline

pytestmark = pytest.mark.slow  # traces a (tiny) DeepSeek-V3 with MLA and grouped routing

# DeepSeek-V3's routing (sigmoid scores, noaux_tc bias, 4 groups of 2, top 2 of 8, scaling 2.5, one shared expert)
# at toy widths; one MoE layer
TINY_DSV3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 1, "first_k_dense_replace": 0,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "q_lora_rank": 32, "kv_lora_rank": 16,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 128,
    "max_position_embeddings": 256, "torch_dtype": "bfloat16", "rope_theta": 10000,
}
V024_BF16 = "vllm_unquantizedfusedmoe_triton_tritonexperts"  # vLLM 0.24.0 collector: FusedMoE on router logits
V019_BF16 = "vllm_fused_moe"  # the collector before it: fused_experts on top-k ids made outside the timing


@pytest.fixture(scope="module")
def graphs():
    raw, _ = import_hf(ResolvedModel("tiny-dsv3", dict(TINY_DSV3), "path", "test"), cache=False)
    return raw, run_pipeline(raw, "fold,fuse{target=vllm}").graph


def _leaf_kinds(graph, label):
    rows = (lambda key: {label} if isinstance(key, MoeKey) else set()) if label else None
    tree = build_tree(graph, Dtypes.for_graph(graph.meta), None, None, rows)
    return [leaf.attrs.kind for leaf in compile_tree(tree).leaves]


def test_the_scaling_multiply_is_in_the_router_kernel(graphs):
    raw, fused = graphs
    # the traced multiply: an element-wise MUL in the gate's scope over (tokens, top_k = 2) weights
    muls = [n for n in raw.nodes if n.op is Op.MUL and n.scope.endswith("mlp.gate")
            and n.outputs[0].shape[-1] == TINY_DSV3["num_experts_per_tok"]]
    assert len(muls) == 1
    (router,) = [n for n in fused.nodes if n.op is Op.KERNEL and n.kernel.kind is KernelKind.MOE_ROUTER]
    assert router.kernel.name == "grouped_topk" and muls[0].name in router.kernel.covers
    # no element-wise kernel of the MoE block covers it (the ones there: the gate's input cast, the shared add)
    assert not any(muls[0].name in n.kernel.covers for n in fused.nodes
                   if n.op is Op.KERNEL and n.kernel.kind is KernelKind.ELEMENTWISE)


def test_it_goes_with_the_router_where_the_rows_route(graphs):
    _, fused = graphs
    inside, outside, none = _leaf_kinds(fused, V024_BF16), _leaf_kinds(fused, V019_BF16), _leaf_kinds(fused, None)
    assert KernelKind.MOE_ROUTER not in inside and KernelKind.MOE_ROUTER in outside and KernelKind.MOE_ROUTER in none
    # the element-wise leaves are the same three ways: the multiply is never one of them
    assert inside.count(KernelKind.ELEMENTWISE) == outside.count(KernelKind.ELEMENTWISE) \
        == none.count(KernelKind.ELEMENTWISE)
    assert len(outside) == len(inside) + 1  # only the router (with the multiply in it) leaves

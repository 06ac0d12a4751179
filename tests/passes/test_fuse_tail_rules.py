"""vLLM fuse rules for ops around the MoE block and the LM head that were memory-bound placeholders: the router's
float32 input cast, the routed + shared experts sum, relu² on an ungated MLP and the logits tail (softcap,
float32 cast) on the sampled rows only."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, Rows
from graphsim.passes import run_pipeline

# A tiny Nemotron-3-style hybrid: mamba, MoE (relu² experts + a relu² shared expert, fp32 router) and attention.
TINY_NEMOTRON_MOE = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "torch_dtype": "bfloat16",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "hybrid_override_pattern": "ME*",
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 96,
    "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
    "chunk_size": 8, "mlp_hidden_act": "relu2", "max_position_embeddings": 128, "mamba_hidden_act": "silu",
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "moe_shared_expert_intermediate_size": 32, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "norm_topk_prob": True, "routed_scaling_factor": 2.5,
}


@pytest.fixture(scope="module")
def fused():
    g, _ = import_hf(ResolvedModel("tiny-nemotron-moe", copy.deepcopy(TINY_NEMOTRON_MOE), "path", "test"), cache=False)
    return run_pipeline(g, "fold,fuse{target=vllm}").graph


def _kernels(g) -> list[tuple[KernelAttrs, int | None]]:
    return [(n.attrs_as(KernelAttrs), n.layer) for n in g.nodes if n.op is Op.KERNEL]


def test_no_placeholders_left(fused):
    left = [(k.name, k.covers) for k, _ in _kernels(fused) if k.approximate]
    assert left == []


def test_moe_block_kernels(fused):
    moe = {k.rule: k for k, layer in _kernels(fused) if layer == 1}
    assert moe["router_input_cast"].name == "cast" and moe["router_input_cast"].dtype == "f32"
    assert moe["moe_shared_sum"].name == "add"  # the name the tp pass defers the MoE all-reduce to
    assert moe["moe_shared_sum"].geometry_as(ElementwiseGeometry).width == 32
    # the shared expert's relu² is one activation kernel; the routed experts are labelled relu2, not silu
    assert moe["activation"].name == "relu2"
    assert dict(moe["moe_experts"].geometry.items())["activation"] == "relu2"


def test_logits_cast_runs_on_sampled_rows(fused):
    tail = [k for k, layer in _kernels(fused) if layer is None and k.rule == "logits_tail"]
    assert [(k.name, k.rows) for k in tail] == [("cast", Rows.SEQUENCES)]
    assert tail[0].geometry_as(ElementwiseGeometry).width == 96


def test_tp2_keeps_one_all_reduce_after_the_shared_sum(fused):
    out = run_pipeline(fused, "tp{size=2}").graph
    names = [n.name for n in out.nodes if n.layer == 1]
    assert names.index("L1.add.all_reduce") == names.index("L1.add") + 1
    assert sum(1 for n in names if n.endswith("all_reduce")) == 1


def test_final_logit_softcap_on_sampled_rows(hf_import):
    # Gemma-2's final_logit_softcapping (30.0): logits / 30, tanh, × 30 after the LM head; vLLM's LogitsProcessor
    # caps only the gathered rows (one per sequence), so the kernel is priced per sequence, not per token
    g = run_pipeline(hf_import("gemma-2-9b")[0], "fold,fuse{target=vllm}").graph
    tail = [k for k, layer in _kernels(g) if layer is None and k.rule == "logits_tail"]
    assert sorted(k.name for k in tail) == ["div", "mul", "tanh"]
    assert all(k.rows is Rows.SEQUENCES and not k.approximate for k in tail)
    assert all(k.geometry_as(ElementwiseGeometry).width == 256000 for k in tail)

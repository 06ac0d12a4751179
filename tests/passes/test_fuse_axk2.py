"""A.X-K2's query / output gate (issue 16: 14.3 % of its tiny decode step in approximate placeholders) as the kernels
the A.X-K2 vLLM port launches (graphsim/passes/fuse/vllm_axk2.py); a hand-written 2-layer config."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import run_pipeline

# hidden 64, 4 heads of q/k 24 (nope 16 + rope 8) and v 16, q-LoRA 32, KV-LoRA 32, layer 0 dense, layer 1 MoE
AXK2 = {
    "architectures": ["AXK2ForCausalLM"], "model_type": "axk2", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "v_head_dim": 16, "qk_nope_head_dim": 16,
    "qk_head_dim": 24, "head_dim": 8, "mlp_layer_types": ["dense", "sparse"],
    "layer_types": ["indexed_attention", "indexed_attention"], "index_topk": 64, "index_head_dim": 32,
    "index_n_heads": 4, "gated_norm_rank": 8, "max_position_embeddings": 512, "bos_token_id": 0, "eos_token_id": 1,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "torch_dtype": "bfloat16",
}


@pytest.mark.slow
def test_output_gate_is_one_fused_kernel_and_the_latent_cat_one_cat():
    graph, _ = import_hf(ResolvedModel("tiny-axk2", dict(AXK2), "path", "test"), cache=False)
    fused = run_pipeline(graph, "fold,fuse{target=vllm}").graph
    kernels = [n for n in fused.nodes if isinstance(n.attrs, KernelAttrs)]
    assert not [n.name for n in kernels if n.kernel.approximate]
    for layer in (0, 1):
        mine = [n for n in kernels if n.layer == layer]
        gates = [n for n in mine if n.kernel.rule == "fused_gate_act"]
        # transformers' cast, sigmoid, mul, cast -> one kernel over the 4 heads x v 16 = 64 features a token,
        # reading the attention output and the gate (reads 2), written in bf16, just before o_proj
        assert len(gates) == 1 and len(gates[0].kernel.covers) == 4
        g = gates[0].kernel
        assert g.kind is KernelKind.ELEMENTWISE and g.dtype == "bf16"
        assert g.geometry_as(ElementwiseGeometry) == ElementwiseGeometry(width=64, reads=2)
        assert mine[mine.index(gates[0]) + 1].kernel.name == "o_proj"
        # cat([q_c normed, q_c]) into the widened q projection: 2 x q_lora_rank 32 = 64 features a token
        cats = [n for n in mine if n.kernel.rule == "q_latent_cat"]
        assert len(cats) == 1 and cats[0].kernel.geometry_as(ElementwiseGeometry).width == 64

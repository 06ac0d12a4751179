"""A multimodal `…ForConditionalGeneration` config (Llama-4) is traced through its language model, as a text-only
request runs; Llama-4's all-experts MoE becomes one routed `graphsim::moe_experts` node with the same outputs."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class, text_model  # noqa: E402
from graphsim.ir import MoEAttrs, Op  # noqa: E402
from graphsim.ir.kernel import KernelAttrs  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402

TEXT = {
    "model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 96,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 96,
    "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "use_qk_norm": True,
    "attention_chunk_size": 32, "max_position_embeddings": 256, "rope_theta": 500000.0, "hidden_act": "silu",
    "no_rope_layers": [1, 1, 1, 0], "torch_dtype": "bfloat16",
}
WRAPPER = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
    "text_config": TEXT,
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "intermediate_size": 64, "image_size": 56, "patch_size": 14,
                      "vision_output_dim": 64, "projector_input_dim": 64, "projector_output_dim": 64},
}


def test_wrapper_is_traced_through_its_language_model():
    g, report = import_hf(ResolvedModel("tiny-llama4", copy.deepcopy(WRAPPER), "path", "test"), cache=False)
    assert report.architecture == "Llama4ForConditionalGeneration"
    assert g.meta.num_layers == 4  # the text decoder's layers, not the vision encoder's
    experts = [n.attrs_as(MoEAttrs) for n in g.nodes if n.op is Op.MOE_EXPERTS]
    assert experts and all((a.num_experts, a.top_k, a.intermediate_size) == (4, 1, 32) for a in experts)
    assert not [n for n in g.nodes if n.op is Op.BMM]  # no dense bmm of every expert over every token
    fused = run_pipeline(g, "fold,fuse{target=vllm},tp{size=2}").graph  # conservation runs inside
    kinds = {n.attrs_as(KernelAttrs).name for n in fused.nodes if n.op is Op.KERNEL}
    assert {"fused_moe", "rotary_embedding", "flash_attn_varlen"} <= kinds


def test_routed_moe_swap_keeps_the_logits():
    torch.manual_seed(0)
    cfg = make_hf_config(copy.deepcopy(WRAPPER))
    model = model_class("Llama4ForConditionalGeneration")._from_config(cfg, dtype=torch.float32).eval()
    lm = text_model(model)
    assert type(lm).__name__ == "Llama4ForCausalLM"
    ids = torch.randint(0, 96, (1, 7))
    with torch.no_grad():
        want = lm(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            got = lm(input_ids=ids, use_cache=False).logits
    assert any(s.endswith("Llama4TextMoe.forward") for s in swapped)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

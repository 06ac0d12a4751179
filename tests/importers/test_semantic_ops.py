"""The semantic custom ops compute what transformers computes (tiny random models, real CPU run)."""

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from graphsim.catalog import resolve_model  # noqa: E402
from graphsim.importers.hf import custom_ops  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class  # noqa: E402


def tiny(name: str, **overrides):
    cfg = copy.deepcopy(resolve_model(name).config)
    cfg.pop("quantization_config", None)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
               vocab_size=97, max_position_embeddings=256)
    cfg.update(overrides)
    return cfg


def build(cfg, attn, experts=None):
    custom_ops.register()
    torch.manual_seed(0)
    kw = {"attn_implementation": attn}
    if experts:
        kw["experts_implementation"] = experts
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32, **kw)
    return model.eval()


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def assert_ours_match(cfg, tokens: int, ref_attn: str, ref_experts: str | None = None):
    """Our semantic ops (attention, and the experts where `ref_experts` is given) and the named HF
    implementations, with the same weights, give the same logits on `tokens` random ids."""
    ids = torch.randint(0, 97, (1, tokens))
    ref = build(cfg, ref_attn, ref_experts)
    ours = build(cfg, custom_ops.IMPL_NAME, custom_ops.IMPL_NAME if ref_experts else None)
    ours.load_state_dict(ref.state_dict())
    torch.testing.assert_close(logits(ours, ids), logits(ref, ids), rtol=1e-4, atol=1e-4)


def test_attention_op_matches_eager_with_gqa_window_and_softcap():
    # Gemma-2 geometry exercises GQA, sliding window (4 tokens) and logit softcapping.
    cfg = tiny("gemma-2-9b", num_hidden_layers=2, head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
               layer_types=["sliding_attention", "full_attention"])
    assert_ours_match(cfg, 12, "eager")


def test_attention_op_matches_sdpa_llama():
    assert_ours_match(tiny("llama-3.1-8b", num_hidden_layers=2), 9, "sdpa")


def test_moe_experts_op_matches_reference():
    cfg = tiny("qwen3-30b-a3b", num_hidden_layers=1, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
               head_dim=16)
    assert_ours_match(cfg, 7, "eager", "batched_mm")


def test_gated_delta_rule_op_matches_recurrent_reference():
    mod = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    torch.manual_seed(0)
    b, s, hk, hv, dk, dv = 1, 6, 2, 4, 8, 8
    q, k = torch.randn(b, s, hk, dk), torch.randn(b, s, hk, dk)
    v = torch.randn(b, s, hv, dv)
    g = -torch.rand(b, s, hv)
    beta = torch.rand(b, s, hv)
    ref_out, ref_state = mod.torch_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                                use_qk_l2norm_in_kernel=True)
    out, state = torch.ops.graphsim.gated_delta_rule(q, k, v, g, beta, None, True, True)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-4)


def test_semantic_kernels_restores_originals():
    mod = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    cfg = tiny("qwen3-next-80b-a3b", num_hidden_layers=1, layer_types=["linear_attention"], head_dim=16,
               num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8)
    model = build(cfg, custom_ops.IMPL_NAME, custom_ops.IMPL_NAME)
    orig = mod.torch_chunk_gated_delta_rule
    with custom_ops.semantic_kernels(model) as swapped:
        assert mod.torch_chunk_gated_delta_rule is not orig
        assert any("torch_chunk_gated_delta_rule" in s for s in swapped)
        out = logits(model, torch.randint(0, 97, (1, 5)))
    assert mod.torch_chunk_gated_delta_rule is orig
    assert torch.isfinite(out).all()

"""The semantic DSA indexer ropes the half of the head the model's own indexer ropes: HunYuan-V4's HYV4Indexer splits
`[head_dim - qk_rope_head_dim, qk_rope_head_dim]` (rotary dims last), DeepSeek-V3.2's the other way. With all of
graphsim's swaps in place (indexer, sparse attention with sinks, iHC gates) a tiny random HunYuan-V4's logits equal
transformers' eager ones; roping the first half instead moves them (0.007 on logits of ~0.13 before the fix)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hyv4_helpers import TINY_HYV4  # noqa: E402

from graphsim.importers.hf import custom_ops  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class  # noqa: E402

# TINY_HYV4: 2 indexer heads of 16 with 8 rotary dims, top-4 of 9 tokens (so the picks decide what attention sees),
# a full then a shared indexer layer.


def _model(attn: str):
    torch.manual_seed(0)
    m = model_class("HYV4ForCausalLM")._from_config(make_hf_config(copy.deepcopy(TINY_HYV4)), dtype=torch.float32,
                                                    attn_implementation=attn).eval()
    with torch.no_grad():  # transformers initialises the iHC gate biases to constants: give them values
        for name, p in m.named_parameters():
            if name.endswith((".base", "hc_base")):
                p.normal_(0, 0.5)
    return m


def test_indexer_ropes_the_models_half(monkeypatch):
    custom_ops.register()
    eager = _model("eager")
    ours = _model(custom_ops.IMPL_NAME)
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(0, 96, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = eager(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(ours) as swapped:
            got = ours(input_ids=ids, use_cache=False).logits
        assert any(s.endswith("HYV4Indexer.forward") for s in swapped)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        # the check can fail: roping the first half (DeepSeek-V3.2's layout) picks other keys
        monkeypatch.setattr(custom_ops, "_rope_last", lambda _indexer: False)
        with custom_ops.semantic_kernels(ours):
            wrong = ours(input_ids=ids, use_cache=False).logits
    assert (wrong - want).abs().max() > 1e-3


def test_deepseek_v32_indexer_ropes_the_first_half():
    from transformers.models.deepseek_v32 import modeling_deepseek_v32
    from transformers.models.hy_v4 import modeling_hy_v4

    assert custom_ops._rope_last(object.__new__(modeling_hy_v4.HYV4Indexer))
    assert not custom_ops._rope_last(object.__new__(modeling_deepseek_v32.DeepseekV32Indexer))

"""Per-layer MoE fields as real configs state them: Hunyuan-A13B's config.json lists `moe_topk` one value a
layer (HunYuanMoEV1Config: `moe_topk: int | list[int]`), which transformers' HunYuanMoEV1Gate reads as
`config.moe_topk[layer_idx]` and vLLM's hunyuan_v1.py HunYuanSparseMoeBlock as `moe_topk[layer_id]`. The
accountant (kv, simulate) refused such a config ("field 'moe_topk' is [8, 8, …], not an integer") while predict,
which traces the model, ran."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import HunYuanMoEV1Config, HunYuanMoEV1ForCausalLM

from graphsim.errors import ConfigError
from graphsim.work import accounting, build_model
from graphsim.work.specs import MoeFfn

TINY: dict[str, Any] = {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "hidden_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 32, "vocab_size": 100, "num_experts": 4, "tie_word_embeddings": True}


def test_top_k_per_layer():
    cfg = dict(TINY, moe_topk=[1, 2, 4])
    ffns = [la.ffn for la in build_model(cfg).stack.layers]
    assert all(isinstance(f, MoeFfn) for f in ffns)
    assert [f.top_k for f in ffns if isinstance(f, MoeFfn)] == [1, 2, 4]
    # Activated weights per layer: routed experts k × 3 · 64 · 32 = k × 6,144 (gate/up/down, no bias), so the
    # three layers differ by (2 − 1) and (4 − 2) experts: the totals step by 6,144 and 12,288 from the k = 1 case.
    flat = accounting(dict(TINY, moe_topk=1)).params().activated
    per_layer = accounting(cfg).params().activated
    assert per_layer - flat == (0 + 1 + 3) * 6144


def test_a_uniform_list_is_the_integer():
    # Hunyuan-A13B states moe_topk as [8] * 32: the same model as moe_topk 8
    listed = accounting(dict(TINY, moe_topk=[2, 2, 2])).params()
    plain = accounting(dict(TINY, moe_topk=2)).params()
    assert (listed.total, listed.activated) == (plain.total, plain.activated)


def test_the_parameter_count_is_the_meta_models():
    cfg: dict[str, Any] = dict(TINY, moe_topk=[1, 2, 4])
    hf = HunYuanMoEV1Config(**{k: v for k, v in cfg.items() if k != "architectures"})
    with torch.device("meta"):
        model = HunYuanMoEV1ForCausalLM(hf)
    meta = sum(p.numel() for p in model.parameters())
    assert accounting(cfg).params().total == meta


def test_a_list_of_the_wrong_length_is_one_line():
    with pytest.raises(ConfigError, match="'moe_topk' lists 2 values for 3 layers"):
        build_model(dict(TINY, moe_topk=[1, 2]))


def test_an_expert_count_list_is_refused_as_transformers_refuses_it():
    # HunYuanMoEV1Config types num_experts as int (its strict dataclass check rejects a list)
    with pytest.raises(ConfigError, match="'num_experts' is \\[4, 4, 4\\], not an integer"):
        build_model(dict(TINY, num_experts=[4, 4, 4], moe_topk=2))

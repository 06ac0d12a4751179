"""DeciLM (Llama-3.3-Nemotron-Super) and Step-3.x-Flash, by hand (graphsim/work/builders/nas_step.py).

Neither has a transformers class, so test_work_config_defaults.py cannot build a meta model for them:
the cross-checks here are hand-derived goldens (arithmetic on the config's numbers, written out) and the
model cards. Every expectation is computed in this file, never read back from the code under test.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.registry import NO_TRANSFORMERS_CLASS, TRANSFORMERS_CLASS, supported_architectures

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)


def _aic(name: str) -> dict[str, Any]:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("aiconfigurator-core is not installed (its model_configs/ hold the real configs)")
    path = Path(next(iter(spec.submodule_search_locations))) / "model_configs" / f"{name}_config.json"
    return json.loads(path.read_text())


# --- Llama-3.3-Nemotron-Super-49B-v1 (DeciLMForCausalLM) ---------------------------------------------------
# hidden 8192, 64 heads of 8192/64 = 128, vocab 128256, untied, 80 layers. block_configs: 49 attention layers
# with n_heads_in_group 8 (8 KV heads) and 31 no-op attention layers; FFN widths from ffn_mult by
# int(2·mult·8192/3) rounded up to 256: 5.25 → 28672 (49 layers), 2.625 → 14336 (6), 1.3125 → 7168 (10),
# 1.0 → 5461 → 5632 (8), 0.5 → 2730 → 2816 (6), 3.28125 → 17920 (1).
SUPER_ATTN = 8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192  # q, k, v, o: 150,994,944
SUPER_FFN_WIDTHS = 49 * 28672 + 6 * 14336 + 10 * 7168 + 8 * 5632 + 6 * 2816 + 17920  # 1,642,496
SUPER_TOTAL = (
    49 * SUPER_ATTN  # 7,398,752,256
    + 3 * 8192 * SUPER_FFN_WIDTHS  # gate, up, down: 40,365,981,696
    + (49 + 80) * 8192  # input_layernorm on attention layers, post_attention_layernorm on all 80
    + 8192  # final norm
    + 2 * 128256 * 8192  # embedding and lm_head: 2,101,346,304
)  # 49,867,145,216


def test_nemotron_super_parameters_against_the_hand_count_and_the_card():
    cfg = _aic("nvidia--Llama-3_3-Nemotron-Super-49B-v1")
    p = accounting(cfg).params()
    assert p.total == SUPER_TOTAL == 49_867_145_216
    # The model card names it "49B" (huggingface.co/nvidia/Llama-3_3-Nemotron-Super-49B-v1): a figure truncated
    # to two digits, which the exact count must round down to (it is 1.8 % above 49.0 B, inside [49 B, 50 B)).
    assert 49e9 <= p.total < 50e9
    # dense: a token uses every weight but the embedding table (one row looked up)
    assert p.activated == SUPER_TOTAL - 128256 * 8192


def test_nemotron_super_kv_layout_has_only_the_attention_layers():
    spec = build_model(_aic("nvidia--Llama-3_3-Nemotron-Super-49B-v1"))
    kv = layer_kv(spec, 8, BF16)
    # vLLM nemotron_nas.py: a no-op attention layer builds no Attention, so no KV-cache spec (49 of 80 keep KV);
    # each keeps 2 (K, V) × 8 KV heads / tp 8 × 128 × 2 B = 512 B per token per rank: 49 × 512 = 25,088 B
    assert len(kv) == 49
    assert sum(k.bytes_per_token for k in kv) == 25_088
    assert all(k.window is None for k in kv)


def _tiny_decilm(**top: Any) -> dict[str, Any]:
    attn = {"no_op": False, "replace_with_linear": False, "n_heads_in_group": 2}
    blocks = [
        {"attention": attn, "ffn": {"ffn_mult": 1.0}},
        {"attention": {"no_op": True, "n_heads_in_group": None}, "ffn": {"ffn_mult": 2.0}},
        {"attention": {"replace_with_linear": True, "n_heads_in_group": None}, "ffn": {"no_op": True}},
        {"attention": dict(attn, n_heads_in_group=6), "ffn": {"replace_with_linear": True}},
    ]
    return {"architectures": ["DeciLMForCausalLM"], "hidden_size": 384, "num_hidden_layers": 4,
            "num_attention_heads": 6, "vocab_size": 100, "block_configs": blocks, "torch_dtype": "bfloat16", **top}


# hidden 384, 6 heads of 64. Layer 0: GQA, 6/2 = 3 KV heads: q 384², k, v 384·192, o 384²; MLP from ffn_mult 1.0:
# int(2·384/3) = 256 (a multiple of 256): 3·384·256. Layer 1: no attention; MLP 2.0 → 512: 3·384·512. Layer 2:
# the linear attention 384² and no MLP. Layer 3: GQA with 6/6 = 1 KV head: q 384², k, v 384·64, o 384²; the
# linear MLP 384².
TINY_MATRICES = (
    (2 * 384 * 384 + 2 * 384 * 192 + 3 * 384 * 256)  # 638,976
    + 3 * 384 * 512  # 589,824
    + 384 * 384  # 147,456
    + (2 * 384 * 384 + 2 * 384 * 64 + 384 * 384)  # 540,672
)
# norms: input_layernorm on layers 0, 2, 3; post_attention_layernorm on 0, 1, 3; the final norm
TINY_NORMS = (3 + 3 + 1) * 384


def test_tiny_decilm_blocks_parameters_and_a_decode_step():
    acc = accounting(_tiny_decilm())
    assert acc.params().total == TINY_MATRICES + TINY_NORMS + 2 * 100 * 384
    r = acc.step(parse_step([], ["1x7"]))  # one sequence, 7 cached tokens, one new
    # matrices once per new token, the head on one row
    assert r.matmul_flops == 2 * TINY_MATRICES + 2 * 384 * 100
    # layers 0 and 3 attend to 7 + 1 positions: scores and values 2·8·6 heads·64 each
    assert r.attention_flops == 2 * (2 * 2 * 8 * 6 * 64)
    # KV per token: layer 0 2·3·64·2 B = 768 B, layer 3 2·1·64·2 B = 256 B; read 7 cached, write 1
    assert r.total.state_read_bytes == 7 * (768 + 256)
    assert r.total.state_write_bytes == 768 + 256


@pytest.mark.parametrize(("change", "needle"), [
    ({"window_length": 4096}, "window_length"),
    ({"n_heads_in_group": 4}, "n_heads_in_group"),  # 6 heads are not a multiple of groups of 4
    ({"llama4": {"use_rope": True}}, "llama4"),
])
def test_decilm_refuses_blocks_vllm_does_not_build(change, needle):
    cfg = _tiny_decilm()
    cfg["block_configs"][0] = dict(cfg["block_configs"][0], attention=dict(cfg["block_configs"][0]["attention"], **change))
    with pytest.raises(ConfigError, match=needle):
        build_model(cfg)


def test_decilm_needs_one_block_per_layer():
    with pytest.raises(ConfigError, match="one block per layer"):
        build_model(_tiny_decilm(num_hidden_layers=5))


# --- Step-3.7-Flash --------------------------------------------------------------------------------------
# aiconfigurator-core's curated config (Step3p7FlashForCausalLM): hidden 4096, 45 layers (12 full, 33 sliding of
# 512), 64 heads of 128 on every layer, 8 KV heads, per-head q/k norms (128 each), vocab 128896, untied; layers
# 0-2 dense (11264), 3-44 MoE: 288 experts of 1280, top 8, a router (288 × 4096) with a selection bias (288),
# one shared expert of 1280.
STEP_ATTN_64 = 4096 * 8192 + 2 * 4096 * 1024 + 8192 * 4096 + 2 * 128  # 75,497,728
STEP_EXPERT = 3 * 4096 * 1280  # 15,728,640
STEP_ROUTER = 288 * 4096 + 288  # 1,179,936
STEP_DENSE = 3 * 4096 * 11264  # 138,412,032
STEP_TABLE = 128896 * 4096  # 527,958,016
STEP_NORMS = 45 * 2 * 4096 + 4096  # 372,736
STEP_FLASH_TOTAL = (45 * STEP_ATTN_64 + 3 * STEP_DENSE + 42 * (288 * STEP_EXPERT + STEP_EXPERT + STEP_ROUTER)
                    + 2 * STEP_TABLE + STEP_NORMS)  # 195,832,712,256
# one token: 8 routed experts and the shared one on the MoE layers, the head, every other weight
STEP_FLASH_ACTIVATED = (45 * STEP_ATTN_64 + 3 * STEP_DENSE + 42 * (9 * STEP_EXPERT + STEP_ROUTER) + STEP_TABLE
                        + STEP_NORMS)  # 10,335,947,840


@pytest.mark.parametrize("name", ["stepfun-ai--Step-3.7-Flash", "stepfun-ai--Step-3.7-Flash-FP8"])
def test_step37_flash_curated_parameters_against_the_hand_count_and_the_card(name):
    p = accounting(_aic(name)).params()
    assert (p.total, p.activated) == (STEP_FLASH_TOTAL, STEP_FLASH_ACTIVATED)
    # Model card (huggingface.co/stepfun-ai/Step-3.7-Flash, as the vLLM recipe repeats it): a 196B language
    # backbone (198B with the 1.8B vision encoder), ~11B activated. 195.83 B is 0.09 % under 196 B; the activated
    # count with the embedding row table, 10.86 B, is 1.2 % under 11 B.
    assert abs(p.total / 196e9 - 1) < 0.005
    assert abs(p.activated_with_embedding / 11e9 - 1) < 0.025


def _step3p5_real_shape() -> dict[str, Any]:
    """The published text_config's shape in vLLM's key names (vllm step3p5.py): the curated config's numbers plus
    what it leaves out: the sliding layers' 96 query heads (attention_other_setting; aiconfigurator-core
    sdk/utils.py's Step-3.7 branch describes the published config so) and the head-wise attention gate
    (use_head_wise_attn_gate, g_proj: hidden → heads; the published checkpoint holds g_proj tensors, as the
    mlx-omnia port's engine/models/step3p7/__init__.py lists them); layer_types lists the 3 MTP layers too (48
    entries, as that aiconfigurator branch says). These two fields are the ones this test adds by reading, not
    a copy of the published file."""
    cfg = {k: v for k, v in _aic("stepfun-ai--Step-3.7-Flash").items()
           if k not in ("num_key_value_heads", "num_experts", "num_experts_per_tok", "first_k_dense_replace",
                        "n_shared_experts")}
    return dict(
        cfg, architectures=["Step3p5ForCausalLM"], num_attention_groups=8, moe_num_experts=288, moe_top_k=8,
        moe_layers_enum=",".join(str(i) for i in range(3, 45)), use_head_wise_attn_gate=True,
        attention_other_setting={"attention_type": "sliding_attention", "num_attention_heads": 96,
                                 "num_attention_groups": 8, "head_dim": 128},
        layer_types=[*cfg["layer_types"], "sliding_attention", "sliding_attention", "sliding_attention"],
    )


# the sliding layers: q 4096·(96·128) and o back, k, v as before, q/k norms, g_proj 96 × 4096;
# the full layers add g_proj 64 × 4096
STEP_ATTN_96 = 4096 * 12288 + 2 * 4096 * 1024 + 12288 * 4096 + 2 * 128 + 96 * 4096  # 109,445,376
STEP_REAL_ATTN = 12 * (STEP_ATTN_64 + 64 * 4096) + 33 * STEP_ATTN_96  # 4,520,815,872


def test_step3p5_published_shape_against_the_card():
    p = accounting(_step3p5_real_shape()).params()
    total = STEP_REAL_ATTN + 3 * STEP_DENSE + 42 * (289 * STEP_EXPERT + STEP_ROUTER) + 2 * STEP_TABLE + STEP_NORMS
    assert p.total == total == 196_956_130_368
    # 196.96 B is 0.49 % over the card's 196 B backbone; without embedding and head (the MiniMax / Step card
    # convention for "activated") 10.93 B is 0.6 % under ~11 B.
    assert abs(p.total / 196e9 - 1) < 0.005
    active_core = STEP_REAL_ATTN + 3 * STEP_DENSE + 42 * (9 * STEP_EXPERT + STEP_ROUTER) + STEP_NORMS
    assert p.activated == active_core + STEP_TABLE
    assert abs(active_core / 11e9 - 1) < 0.025


def test_step37_kv_layout_and_a_decode_step():
    cfg = _aic("stepfun-ai--Step-3.7-Flash")
    kv = layer_kv(build_model(cfg), 8, BF16)
    # vLLM step3p5.py: every layer has an Attention (per_layer_sliding_window 512 on the 33 sliding ones); each keeps
    # 2 × 8 KV heads / tp 8 × 128 × 2 B = 512 B per token per rank
    assert len(kv) == 45 and {k.bytes_per_token for k in kv} == {512}
    assert sorted(k.window or 0 for k in kv) == [0] * 12 + [512] * 33
    # A decode of 4 sequences after 2047 cached tokens: full layers attend to 2048 positions, sliding ones to 512;
    # scores and values 2·S·64·128 each.
    r = accounting(cfg).step(parse_step([], ["4x2047"]))
    assert r.attention_flops == 4 * 2 * 2 * 64 * 128 * (12 * 2048 + 33 * 512)
    # matrices once per new token (4 rows): the activated weights bar norms and the bias vector, the head on 4 rows
    matrices = (45 * (STEP_ATTN_64 - 256) + 3 * STEP_DENSE + 42 * (9 * STEP_EXPERT + 288 * 4096) + STEP_TABLE)
    assert r.matmul_flops == 2 * 4 * matrices
    # KV bytes per token and layer 2·8·128·2 = 4096: full layers read 2047 cached, sliding ones the last 511
    assert r.total.state_read_bytes == 4 * 4096 * (12 * 2047 + 33 * 511)


def test_step_refuses_what_it_cannot_map():
    with pytest.raises(ConfigError, match="n_shared_experts"):
        build_model(dict(_aic("stepfun-ai--Step-3.7-Flash"), n_shared_experts=2))
    with pytest.raises(ConfigError, match="moe_layers_enum"):
        build_model(dict(_step3p5_real_shape(), moe_layers_enum="3,x"))


def test_registered_without_a_transformers_class():
    # the cross-checks against transformers skip these (no class, no defaults): they are held to the card above
    assert {"DeciLMForCausalLM", "Step3p5ForCausalLM", "Step3p7FlashForCausalLM"} == NO_TRANSFORMERS_CLASS
    assert set(supported_architectures()) >= NO_TRANSFORMERS_CLASS
    assert not NO_TRANSFORMERS_CLASS & set(TRANSFORMERS_CLASS)


def test_published_step37_wrapper_accounts_its_text_model():
    # The published checkpoint nests the decoder under text_config (model_type step3p5; vLLM step3p7.py builds
    # it as a Step3p5ForCausalLM); top-level dtype and quantization carry over, the vision tower is not counted.
    text = {k: v for k, v in _step3p5_real_shape().items() if k not in ("architectures", "torch_dtype")}
    cfg = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7", "torch_dtype": "bfloat16",
           "text_config": dict(text, model_type="step3p5"), "vision_config": {"width": 1536}}
    spec = build_model(cfg)
    assert spec.architecture == "Step3p5ForCausalLM"
    assert any("Step3p7ForConditionalGeneration" in n and "other towers are not counted" in n for n in spec.notes)
    assert accounting(cfg).params().total == 196_956_130_368  # the published shape above

"""Mamba-1 classes from their real public configs (the config.json on each Hugging Face page, copied below) priced at
tp 1 and tp 2 on the H200: the selective scan is one kernel, no placeholder carries more than 1 % of a decode step,
and each decode step is at least its weight-read floor. Traces three real-size models: slow."""

from __future__ import annotations

import json

import pytest

from graphsim.workload import parse_batch_spec

pytestmark = pytest.mark.slow

# huggingface.co/state-spaces/mamba-2.8b-hf/blob/main/config.json (a float32 checkpoint)
MAMBA_2_8B = {
    "architectures": ["MambaForCausalLM"], "bos_token_id": 0, "conv_kernel": 4, "eos_token_id": 0, "expand": 2,
    "fused_add_norm": True, "hidden_act": "silu", "hidden_size": 2560, "initializer_range": 0.1,
    "intermediate_size": 5120, "layer_norm_epsilon": 1e-05, "model_type": "mamba", "n_layer": 64,
    "num_hidden_layers": 64, "pad_token_id": 0, "pad_vocab_size_multiple": 8, "rescale_prenorm_residual": False,
    "residual_in_fp32": True, "rms_norm": True, "state_size": 16, "time_step_floor": 0.0001,
    "time_step_init_scheme": "random", "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 160,
    "time_step_scale": 1.0, "torch_dtype": "float32", "transformers_version": "4.39.0.dev0", "use_bias": False,
    "use_cache": True, "use_conv_bias": True, "vocab_size": 50280,
}
# huggingface.co/tiiuae/falcon-mamba-7b/blob/main/config.json
FALCON_MAMBA_7B = {
    "_name_or_path": "./", "architectures": ["FalconMambaForCausalLM"], "bos_token_id": 0, "conv_kernel": 4,
    "eos_token_id": 11, "expand": 16, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.1,
    "intermediate_size": 8192, "layer_norm_epsilon": 1e-05, "model_type": "falcon_mamba", "num_hidden_layers": 64,
    "pad_token_id": 11, "rescale_prenorm_residual": False, "residual_in_fp32": True, "state_size": 16,
    "tie_word_embeddings": False, "time_step_floor": 0.0001, "time_step_init_scheme": "random", "time_step_max": 0.1,
    "time_step_min": 0.001, "time_step_rank": 256, "time_step_scale": 1.0, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_bias": False, "use_cache": True, "use_conv_bias": True,
    "vocab_size": 65024,
}
# huggingface.co/ai21labs/AI21-Jamba-1.5-Mini/blob/main/config.json
JAMBA_1_5_MINI = {
    "architectures": ["JambaForCausalLM"], "attention_dropout": 0.0, "attn_layer_offset": 4, "attn_layer_period": 8,
    "bos_token_id": 1, "eos_token_id": [2, 518], "expert_layer_offset": 1, "expert_layer_period": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2,
    "mamba_proj_bias": False, "max_position_embeddings": 262144, "model_type": "jamba", "num_attention_heads": 32,
    "num_experts": 16, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_logits_to_keep": 1, "output_router_logits": False, "pad_token_id": 0, "rms_norm_eps": 1e-06,
    "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.2", "use_cache": True, "use_mamba_kernels": False, "vocab_size": 65536,
}
CONFIGS = {"mamba-2.8b-hf": MAMBA_2_8B, "falcon-mamba-7b": FALCON_MAMBA_7B, "AI21-Jamba-1.5-Mini": JAMBA_1_5_MINI}
BATCH = "decode:64x4096"


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_decode_priced_with_the_scan_and_no_placeholders(name, tp, tmp_path):
    pytest.importorskip("transformers")
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict

    cfg = CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    cm = build_cost_model(str(path), "h200", tp=tp)
    pred = predict(cm, [parse_batch_spec(BATCH)], [BATCH])
    rep = pred.batches[0]
    assert rep.total_us is not None, rep.missing
    placeholders = sum(r.total_us or 0.0 for r in rep.rows if r.approximate)
    assert placeholders <= 0.01 * rep.total_us, [(r.kernel, r.total_us) for r in rep.rows if r.approximate]
    scans = [r for r in rep.rows if r.kernel == "selective_scan_fn"]
    mamba_layers = 28 if name == "AI21-Jamba-1.5-Mini" else 64  # Jamba: attention where i % 8 == 4 (4 of 32)
    assert scans and sum(r.count for r in scans) == mamba_layers
    # weight-read floor: every weight on a rank read once, in the checkpoint's dtype, but an untied embedding table
    # (only 64 of its rows are read); all of Jamba's experts are (64 tokens × top-2 of 16 leave an expert untouched
    # with probability (14/16)^128 ≈ 4e-8)
    hw = cm.pricer.hardware
    params = cm.graph.meta.param_count
    assert hw is not None and params is not None
    tied = cfg.get("tie_word_embeddings", True)  # MambaConfig ties by default; the other two state False
    read = params - (0 if tied else cfg["vocab_size"] * cfg["hidden_size"])
    floor_us = read * (4 if cfg["torch_dtype"] == "float32" else 2) / tp / hw.memory_bandwidth_bytes_per_s * 1e6
    assert rep.total_us >= 0.99 * floor_us, (rep.total_us, floor_us)

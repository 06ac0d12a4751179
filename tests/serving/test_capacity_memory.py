"""Capacity in vLLM's terms from a given KV budget, and the memory budget term by term."""

import json
import math

import pytest
from serving_helpers import AffineCost

from graphsim.catalog import resolve_model
from graphsim.serving import (
    DeploymentConfig, EngineArgs, ParallelConfig, kv_capacity, kv_layout, parse_bytes, weight_bytes_per_rank,
)
from graphsim.serving.capacity import CapacityError
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.memory import activation_peak
from graphsim.work import accounting

GiB = 2**30

# Qwen/Qwen3-14B config.json (the fields the accountant reads)
QWEN3_14B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 17408,
    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 40,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "attention_bias": False, "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 40, "hidden_act": "silu",
}


def test_reproduces_a_logged_vllm_capacity(tmp_path):
    # vLLM log for Qwen3-14B, --max-model-len 32768 (github.com/LMCache/LMCache/issues/1739):
    #   Available KV cache memory: 6.51 GiB
    #   GPU KV cache size: 42,656 tokens
    #   Maximum concurrency for 32,768 tokens per request: 1.30x
    # per token: 40 layers × 2 × 8 kv heads × 128 × 2 B = 163,840 B; a block id = 16 × 163,840 = 2,621,440 B
    # 6.51 GiB = 6,989,963,673 B → 6,989,963,673 // 2,621,440 = 2,666 blocks → 2,666 × 16 = 42,656 tokens
    # concurrency = 2,666 / cdiv(32,768, 16) = 2,666 / 2,048 = 1.3018 → "1.30x"
    acc = accounting(QWEN3_14B)
    lay = kv_layout(acc.spec, acc.precision, 1)
    assert lay.bytes_per_token == 163_840 and lay.bytes_per_block == 2_621_440
    cap = kv_capacity(lay, parse_bytes("6.51GiB"), 32_768, 2 * 8192)
    assert cap.num_blocks == 2_666
    assert cap.vllm_log_lines() == ("GPU KV cache size: 42,656 tokens",
                                    "Maximum concurrency for 32,768 tokens per request: 1.30x")
    # the same through the CLI, from a config.json on disk
    from graphsim.cli.app import main

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_14B))
    code = main(["kv", str(tmp_path / "config.json"), "--kv-memory", "6.51GiB", "--max-model-len", "32768", "--json"])
    assert code == 0


def test_sliding_window_capacity_is_concurrency_times_length():
    # gpt-oss-20b, 10 GiB for KV, max_model_len 32,768, 8,192-token budget (16,384 in flight):
    # bytes per block 393,216 → 10 GiB // 393,216 = 27,306 blocks; per request 2,048 + 1,033 = 3,081 blocks
    lay = kv_layout(*_spec_prec("gpt-oss-20b"), 1)
    cap = kv_capacity(lay, 10 * GiB, 32_768, 16_384)
    assert cap.num_blocks == 10 * GiB // 393_216 == 27_306
    assert cap.blocks_per_request == 3_081
    assert cap.max_concurrency == pytest.approx(27_306 / 3_081)
    # vLLM logs int(concurrency × max_model_len), not blocks × block_size
    assert cap.tokens == int(27_306 / 3_081 * 32_768) == 290_413  # 8.8627 × 32,768 = 290,413.6
    assert cap.tokens != cap.num_blocks * 16


def _spec_prec(name):
    acc = accounting(resolve_model(name).config)
    return acc.spec, acc.precision


def test_parse_bytes():
    assert parse_bytes("17.78GiB") == int(17.78 * GiB)
    assert parse_bytes("17.78") == int(17.78 * GiB)
    assert parse_bytes("16GB") == 16 * 10**9
    assert parse_bytes("1048576B") == 2**20
    with pytest.raises(CapacityError, match="cannot read memory size"):
        parse_bytes("lots")


def test_weights_per_rank_llama():
    spec, prec = _spec_prec("llama-3.1-8b")
    # 8,030,261,248 parameters × 2 B
    assert weight_bytes_per_rank(spec, prec, 1) == 8_030_261_248 * 2
    # tp=2: everything splits except the 2 × 32 + 1 norm vectors of 4,096 (532,480 B), which stay whole
    norms = (2 * 32 + 1) * 4096 * 2
    assert weight_bytes_per_rank(spec, prec, 2) == (8_030_261_248 * 2 - norms) // 2 + norms
    # tp=16 > 8 kv heads: k_proj/v_proj keep one head per rank (1/8 of them), not 1/16
    kv = 32 * 2 * (1024 * 4096) * 2  # k and v projections of all layers, bytes
    naive = (8_030_261_248 * 2 - norms) / 16 + norms
    assert weight_bytes_per_rank(spec, prec, 16) == pytest.approx(naive + kv / 8 - kv / 16, abs=2)


def test_weights_per_rank_keeps_mla_down_projections_whole():
    spec, prec = _spec_prec("deepseek-v3")
    total = weight_bytes_per_rank(spec, prec, 1)
    # q_a_proj (1,536 × 7,168) and kv_a_proj_with_mqa (576 × 7,168), fp8 with 128×128 fp32 block scales,
    # 61 layers, replicated on every rank
    q_a = 1536 * 7168 + math.ceil(1536 / 128) * 56 * 4
    kv_a = 576 * 7168 + math.ceil(576 / 128) * 56 * 4
    assert weight_bytes_per_rank(spec, prec, 8) > total / 8 + 61 * (q_a + kv_a) * 7 / 8 * 0.99


def test_activation_estimate_matches_a_vllm_profile():
    # vLLM profile of Llama-3.1-8B over 20,000 tokens (github.com/vllm-project/vllm/issues/10517):
    # peak torch memory 17.06 GiB − 14.99 GiB weights = 2.07 GiB
    spec, prec = _spec_prec("llama-3.1-8b")
    term = activation_peak(spec, prec, 1, 20_000, 256)
    assert term.bytes == 20_000 * 2 * (3 * 4096 + 3 * 14336)
    assert term.bytes / GiB == pytest.approx(2.07, rel=0.02)
    assert term.origin == "estimated"


def test_budget_terms_add_up():
    dep = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100", engine=EngineArgs(max_model_len=8192)))
    b = dep.budget
    # the total CUDA reports on an H100 80GB (profiles/hardware/h100_sxm.json cuda_memory_bytes, 79.18 GiB):
    # round(79.18 × 2^30) = 85,018,877,624 B; × 0.9 = 76,516,989,861.6 → 76,516,989,862
    assert b.requested_bytes == 76_516_989_862
    assert b.available_bytes == b.requested_bytes - sum(t.bytes for t in b.terms)
    names = [t.name for t in b.terms]
    assert names[:2] == ["weights", "rotary cos/sin cache"] and "activation peak" in names
    assert {t.origin for t in b.terms} == {"derived", "estimated", "assumed"} and b.source == "estimated"
    # rotary cache: 131,072 positions × 128 × 2 B
    assert b.term("rotary cos/sin cache").bytes == 131_072 * 128 * 2
    assert dep.capacity.num_blocks == b.available_bytes // (2 * 2**20)
    given = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100",
                                             engine=EngineArgs(kv_cache_memory_bytes=20 * GiB)))
    assert given.budget.available_bytes == 20 * GiB and given.budget.source == "given"
    assert given.capacity.num_blocks == 20 * 512  # 20 GiB / 2 MiB


def test_defaults_follow_vllm_serve_per_gpu():
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving import batch_defaults

    assert batch_defaults(load_hardware("h100")) == (8192, 1024)
    assert batch_defaults(load_hardware("b200")) == (16384, 1024)
    assert batch_defaults(load_hardware("a100")) == (2048, 256)


def test_does_not_fit_is_reported():
    dep = plan_deployment(DeploymentConfig(model="deepseek-v3", hardware="h100",
                                           parallel=ParallelConfig(tensor_parallel_size=8)))  # 671B fp8 weights: ~79 GiB per H100 rank
    assert dep.budget.available_bytes < 0 and dep.capacity.num_blocks == 0
    with pytest.raises(CapacityError, match="lower --max-model-len or raise"):
        dep.simulation_setup(cost=AffineCost())

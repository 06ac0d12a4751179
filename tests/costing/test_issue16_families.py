"""Issue 16's families beyond its list: the real public configs (aiconfigurator-core's model_configs) that bring a
mechanism or a quantization the list (test_issue16_list.py) does not have, held to the same bar at TP8 and, for
MoE, TP8 + EP8 on aiconfigurator's measured H200 vLLM tables (tests/costing/real_config_bar.py): every kernel
priced, no placeholder above 1 % of decode 64×4096, the partition passes conserving work, the step at least its
weight-read floor and at most 3 × its kernels' roofline floors, or over it only as a stated exception: measured
rows vLLM really runs that slow (costing/measured_slow.py; the rest of the step within 3 ×).

`python benchmarks/architectures_e2e.py --all-configs` runs every shipped config of these families (and all the
others) through the CLI; the configs that only resize or requantize a listed one the same way (Qwen3.5-122B /
397B, GLM-5.x, Kimi-K2.6 / K2.7, MiniMax-M2.7, DeepSeek-V3.x-NVFP4, …) are left to it. Traces thirteen large
models: slow."""

from __future__ import annotations

import pytest

from tests.costing.real_config_bar import assert_plausible

pytestmark = pytest.mark.slow

# config → (what it adds to the list, the EP sizes to run)
CONFIGS = {
    # compressed-tensors int4 (group 32, pack-quantized) routed experts: vLLM's W4A16 MoE; under a multimodal wrapper
    # (KimiK25ForConditionalGeneration) whose text model is DeepseekV3ForCausalLM
    "moonshotai--Kimi-K2.5": (1, 8),
    # MiniMax-M3: block-sparse attention with q/k norms and dense first layers
    "MiniMaxAI--MiniMax-M3": (1, 8),
    # Llama-4-Maverick: MoE on every other layer (interleave_moe_layer_step 2), dense MLPs between, 128 experts
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": (1, 8),
    # dense Gemma-4 (no MoE) in ModelOpt NVFP4 with an fp8 KV cache (W4A16 Marlin on H200: no FP4 tensor cores)
    "nvidia--Gemma-4-31B-IT-NVFP4": (1,),
    # Nemotron-3-Super: latent MoE (moe_latent_size: fc1/fc2 latent projections around the experts) on the
    # Mamba2 hybrid, ModelOpt NVFP4, fp8 KV
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4": (1, 8),
    # the same in ModelOpt fp8 per-tensor (static scales) with an fp8 KV cache
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": (1, 8),
    # Nemotron-3-Ultra: the latent MoE at 2048 / 5120, ModelOpt fp8 per-tensor
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8": (1, 8),
    # ModelOpt MIXED_PRECISION (per-layer formats in hf_quant_config.json) on the gated-delta-rule hybrid MoE
    "nvidia--Qwen3.6-35B-A3B-NVFP4": (1, 8),
    # ModelOpt MIXED_PRECISION on DeepSeek-V4's compressed attention
    "nvidia--DeepSeek-V4-Flash-NVFP4": (1, 8),
    # Gemma-4 MoE in ModelOpt NVFP4 with an fp8 KV cache: 256-wide sliding and 512-wide global attention
    "nvidia--Gemma-4-26B-A4B-NVFP4": (1, 8),
    # gpt-oss: MXFP4 experts (vLLM's OpenAI Triton MoE on Hopper), attention sinks, alternating sliding layers
    "openai--gpt-oss-120b": (1, 8),
    "openai--gpt-oss-20b": (1, 8),
    # a multimodal wrapper whose own code (auto_map MiniMaxM3SparseForConditionalGeneration) the accountant has no
    # builder for: its weight-read floor is the traced graph's (plausibility.weight_floor_us)
    "nvidia--MiniMax-M3-NVFP4": (1,),
}
# Over 3 × their roofline sum only through measured rows that vLLM runs that slow: (config, ep) → the rule of
# costing/measured_slow.py whose rows' excess covers the step's (each rule's evidence is in that module):
# ModelOpt fp8 MoE on FlashInfer's CUTLASS kernel (Nemotron-3-Super at EP8 with the old all-to-all: 4.45 ×, its MoE
# 6.1 × its own roofline; Ultra 4.37 / 4.15 ×), FA3 with an fp8 KV cache at 1 KV head a rank (Gemma-4-26B-NVFP4: 3.30 / 3.11 ×,
# its sliding attention 6.8 ×), OpenAI's Triton MXFP4 MoE (gpt-oss-20b, once its router top-k is priced inside the
# MoE rows that were timed from the router logits, costing/routing_in_rows.py: step / roofline sum, µs: TP8 3,095.7 /
# 905.5 with 408.5 of stated excess, the rest 2.97 ×; TP8 + EP8 4,003.6 / 892.6 with 1,355.2, the rest 2.97 ×).
STATED = {
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", 1): "flashinfer_cutlass_fp8_moe",
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", 8): "flashinfer_cutlass_fp8_moe",
    ("nvidia--Gemma-4-26B-A4B-NVFP4", 1): "fa3_fp8_kv_decode",
    ("nvidia--Gemma-4-26B-A4B-NVFP4", 8): "fa3_fp8_kv_decode",
    ("openai--gpt-oss-20b", 1): "oai_triton_mxfp4_moe",
    ("openai--gpt-oss-20b", 8): "oai_triton_mxfp4_moe",
}
# Over the bar even so: the stated MoE rows cover most of the excess, but the rest of the step is itself just over
# 3 × its roofline (dozens of latency-bound kernels a layer — small GEMMs, norms, all-reduces at 3-11 µs against
# sub-µs to few-µs rooflines). Not done: issue 16's bar is not met here. Checked against vLLM 0.19: its
# AllReduce + RMSNorm fusion (config/vllm.py `enable_allreduce_rms_fusion`, on at -O2 for TP 2/4/8 on SM90 up to
# 0.5 MiB a message at TP8, compilation/passes/fusion/allreduce_rms_fusion.py) does take the norm after each
# all-reduce at 64 tokens, but its one-shot kernel is no faster than all-reduce + norm at decode sizes on Hopper
# (vLLM PR #22086, H100 TP2 hidden 8192: 10 vs 10 µs at 32 tokens, 16 vs 12 at 64), so pricing it would not move the
# step; the other small kernels are launched by vLLM (graphsim prices its custom-op path, passes/fuse/vllm.py; in
# compiled mode Inductor may merge some norm / add / mul chains, which no capture here settles).
KNOWN_OVER = {
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 1): "the rest of the step (without its stated MoE rows) is "
                                                          "(25,944.2 - 12,319.0) / 4,519.6 = 3.015x",
    # TP8 + EP8 without DP exchanges nothing (passes/partition/ep.py, 5a9f44b): the NCCL all-to-all rows that had
    # counted in the step and its roofline sum are gone, and the rest of the step is just over 3x again (step /
    # roofline sum, µs: 22,042.0 / 4,498.6 with 8,479.9 of stated excess)
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 8): "the rest of the step (without its stated MoE rows) is "
                                                          "(22,042.0 - 8,479.9) / 4,498.6 = 3.015x",
    # with its router top-k inside the MXFP4 MoE rows (costing/routing_in_rows.py): 7,168.0 / 2,273.7 µs with 335.6
    # of stated excess, the rest 3.005x (before: 7,276.8 / 2,274.2, the rest 3.05x)
    ("openai--gpt-oss-120b", 8): "the rest of the step (without its stated MoE rows) is (7,168.0 - 335.6) / 2,273.7 "
                                 "= 3.005x its roofline",
}


def _cases():
    return [pytest.param(n, ep, id=f"{n}-ep{ep}", marks=[pytest.mark.xfail(strict=True, reason=KNOWN_OVER[(n, ep)])]
                         if (n, ep) in KNOWN_OVER else []) for n, eps in CONFIGS.items() for ep in eps]


@pytest.mark.parametrize(("name", "ep"), _cases())
def test_family_config_priced_complete_and_plausible(h200_db, aic_config, name, ep):
    assert_plausible(aic_config(name), h200_db, ep, STATED.get((name, ep)))


def test_graph_weight_floor_equals_the_accountants(h200_db, aic_config):
    """Where both exist, the weight-read floor from the partitioned graph's parameters (what a config without an
    accountant builder is held to) is the accountant's: MiniMax-M3 (bf16) at TP8, decode 64 × 4096 — 19,250 µs
    from the accountant, 19,318 from the graph (+0.4 %)."""
    from graphsim.catalog import resolve_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.plausibility import _graph_weight_floor_us, weight_floor_us

    path = aic_config("MiniMaxAI--MiniMax-M3")
    cm = build_cost_model(str(path), "h200", tp=8, profile=h200_db)
    assert cm.pricer.hardware is not None
    bw = cm.pricer.hardware.memory_bandwidth_bytes_per_s
    acc = weight_floor_us(path, 8, 64, bw)
    graph = _graph_weight_floor_us(cm.graph, resolve_model(str(path)).config, 64, bw)
    assert acc is not None and graph == pytest.approx(acc, rel=0.01)

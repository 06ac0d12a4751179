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
# 6.1 × its own roofline; Ultra 4.37 / 4.15 ×), OpenAI's Triton MXFP4 MoE (gpt-oss-20b, once its router top-k is
# priced inside the MoE rows that were timed from the router logits, costing/routing_in_rows.py: step / roofline sum,
# µs: TP8 3,095.7 / 905.5 with 408.5 of stated excess, the rest 2.97 ×; TP8 + EP8 4,003.6 / 892.6 with 1,355.2, the
# rest 2.97 ×).
# Gemma-4-26B-A4B-NVFP4 was stated through its FA3 fp8-KV sliding attention (`fa3_fp8_kv_decode`: 3.30 / 3.11 ×);
# in vLLM's compiled mode (the inductor pass, passes/fuse/vllm_inductor.py) Inductor runs its 14 custom-op norms /
# scales / adds a layer as 3 kernels, and the whole step is within the bar (step / roofline sum, µs: TP8 4,558.9 /
# 1,667.1 = 2.73 ×; TP8 + EP8 4,520.2 / 1,635.6 = 2.76 ×; `--enforce-eager`'s custom-op kernels keep 3.30 / 3.11 ×).
STATED = {
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 1): "flashinfer_cutlass_fp8_moe",
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 8): "flashinfer_cutlass_fp8_moe",
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", 1): "flashinfer_cutlass_fp8_moe",
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", 8): "flashinfer_cutlass_fp8_moe",
    ("openai--gpt-oss-20b", 1): "oai_triton_mxfp4_moe",
    ("openai--gpt-oss-20b", 8): "oai_triton_mxfp4_moe",
}
# Over the bar even so: the stated MoE rows cover most of the excess, but the rest of the step is itself just over
# 3 × its roofline (dozens of latency-bound kernels a layer — small GEMMs, norms, all-reduces at 3-11 µs against
# sub-µs to few-µs rooflines). Not done: issue 16's bar is not met here.
# - vLLM's compiled mode does not change gpt-oss: Inductor merges nothing in its layer, whose every region between
#   opaque kernels (GEMMs, attention, MoE, all-reduces) is already one kernel on the custom-op path (add + RMSNorm
#   before the qkv GEMM, the q/k rotary, add + RMSNorm before the router GEMM and the MoE): the inductor pass leaves
#   its graph as it is (benchmarks/inductor_regions.py counts Inductor's kernels for such regions: 1 each).
# - vLLM 0.19's AllReduce + RMSNorm fusion (config/vllm.py `enable_allreduce_rms_fusion`, on at -O2 for TP 2/4/8 on
#   SM90 up to 0.5 MiB a message at TP8, compilation/passes/fusion/allreduce_rms_fusion.py) does take the norm after
#   each all-reduce at 64 tokens, but its one-shot kernel is no faster than all-reduce + norm at decode sizes on
#   Hopper (vLLM PR #22086, H100 TP2 hidden 8192: 10 vs 10 µs at 32 tokens, 16 vs 12 at 64), so pricing it would
#   not move the step.
# Nemotron-3-Super-120B-A12B-FP8 at TP8 and TP8 + EP8 had been here at 3.015 × (the rest of the step), and are now
# stated above (its FlashInfer CUTLASS fp8 MoE rows): at f583e63's parent the rest was already within,
# (25,825.0 - 12,319.0) / 4,518.8 = 2.989 × and (21,922.9 - 8,479.9) / 4,497.8 = 2.989 ×, and the inductor pass (its
# residual add + RMSNorm and the router input's float32 cast, one kernel) gives (25,704.1 - 12,319.0) / 4,514.4 =
# 2.965 × and (21,802.0 - 8,479.9) / 4,493.4 = 2.965 × (whole steps 5.69 × and 4.85 ×).
KNOWN_OVER = {
    # with its router top-k inside the MXFP4 MoE rows (costing/routing_in_rows.py): 7,168.0 / 2,273.7 µs with 335.6
    # of stated excess, the rest 3.005x (before: 7,276.8 / 2,274.2, the rest 3.05x); unchanged by the inductor pass
    ("openai--gpt-oss-120b", 8): "the rest of the step (without its stated MoE rows) is (7,168.0 - 335.6) / 2,273.7 "
                                 "= 3.005x its roofline; vLLM's compiled mode merges none of its kernels",
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

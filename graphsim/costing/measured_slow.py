"""Measured kernels that really are slow: the stated exceptions to issue 16's plausibility bar.

The bar (`costing/plausibility.py`) holds a priced step to at most 3 × the sum of its kernels' roofline floors; a
step above it has a pricing error or a measured kernel that slow. Each rule here names profile rows (the table's
`kernel` column: aiconfigurator's kernel source, the kernel vLLM's own selection picked when the rows were
collected) that were checked to be what vLLM runs for those keys on Hopper AND to be systematically that slow (the
same against neighbouring shapes, other parallel sizes, other dtypes), with the evidence in one line. A step over
the bar whose excess is entirely such rows' time above 3 × their own roofline is stated as the exception, naming
the rows; any other excess still fails.

The rules, with what was checked (H200 rows: aiconfigurator-core 0.12 `systems/data/h200_sxm/*/vllm/0.24.0`,
64 tokens balanced unless said; vLLM source 0.24.0 and 0.33.0):

- `vllm_unquantizedfusedmoe_triton_tritonexperts` at a per-rank intermediate size not a multiple of 16. Triton
  is vLLM's bf16 MoE backend on SM90 (model_executor/layers/fused_moe/oracle/unquantized.py `_get_priority_backends`
  moves both FlashInfer backends behind it "On Hopper"), no padding for it (`unquantized_round_up_hidden_size_and_
  intermediate_size` pads only FlashInfer TRT-LLM / AITER) and no tuned config for such N (configs/E=128,N=…,
  device_name=NVIDIA_H200: N 96, 192, 384, …), so `fused_moe_kernel` runs `get_default_config`. Its strides are
  plain int arguments; Triton specialises an int only when divisible by 16 (triton/backends/compiler.py
  `BaseBackend.get_int_specialization`, "tt.divisibility" 16), so w2's row stride and the intermediate cache's
  (= the per-rank intermediate) get no alignment and w2's loads are not vectorised. Every such geometry of the
  table breaks its neighbours' trend: Gemma-4-26B 2816×704 E128: tp4 (176) 152.0 µs, tp8 (88) 275.8, tp16 (44)
  259.2; Nemotron-3-Nano 2688×1856: tp4 (464) 195.4, tp8 (232) 342.0; 2048×768: tp16 (48) 75.5, tp32 (24) 188.2.
- `vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts`. FlashInfer's CUTLASS fused MoE is vLLM's first
  backend that takes fp8 per-tensor (static) weights and activations on SM90 (oracle/fp8.py `_get_priority_backends`:
  FLASHINFER_CUTLASS ahead of TRITON; experts/flashinfer_cutlass_moe.py `FlashInferExperts._supports_quant_scheme`
  (kFp8StaticTensorSym, kFp8StaticTensorSym) on ≥ 9.0, relu2_no_mul among its activations). Every decode row of it is
  3–6 × its weight-read floor, at every tp / ep: Nemotron-3-Super 1024×2688 E512 top 22: tp1 4297.7 µs, ep8
  665.5, tp8 925.8; on Gemma-4-26B's 2816×704 E128 it is 1283.9 µs at tp1 against vLLM's bf16 Triton MoE's 393.9
  on twice the bytes. FlashInfer issue 2141 reports `cutlass_fused_moe` slow on H200.
- `vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic`. OpenAI's triton_kernels `matmul_ogs` is vLLM's
  MXFP4 backend for gpt-oss on SM90 (oracle/mxfp4.py `_get_priority_backends_for_gpt_oss`: the FlashInfer TRT-LLM
  and AITER backends take SM100 / ROCm only, TRITON is next; experts/gpt_oss_triton_kernels_moe.py
  `OAITritonMxfp4ExpertsMonolithic` runs TP and TP + EP without DP). Its decode rows do not fall below ~40–110 µs
  a layer however few weights a rank holds: 2880×2880 E32 top 4: tp1 190.7 µs, tp8 51.9, tp32 42.0, ep8 90.2 for
  11 µs of weights; E128: ep8 134.6, ep32 92.5, ep128 110.5.
- `vllm_flash_attn_fa3` decode with an fp8 KV cache. vLLM 0.33 runs FA3 for an fp8 cache on SM90, Gemma-4's
  256-wide sliding layers included (model_executor/models/config.py `Gemma4Config`: "On SM90 with FP8 KV cache, use
  FA3 for supported layers"; v1/attention/backends/flash_attn.py `supports_kv_cache_dtype`: fp8 with FA 3 on 9.x).
  FA3's fp8 path is 1.3–1.4 × its bf16 rows at every shape of the table though it reads half the bytes (the query is
  quantised to fp8 too, and FP8 WGMMA needs V transposed in shared memory: FlashAttention-3, Shah et al. 2024,
  arXiv:2407.08608 §3.3), and at 1–2 KV heads a rank decode is far from the bandwidth: 2 heads / 1 KV head ×
  256, window 1024, 64 × 4096: bf16 34.1 µs, fp8 47.9 µs, for 33.5 MB of fp8 cache (7.0 µs at 4.8 TB/s). (vLLM 0.24,
  whose rows these are, forced FA4 on every Gemma-4 layer, so with an fp8 cache it fell to another backend; graphsim
  reads 0.33's choice, docs/engines.md.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from graphsim.costing.kernels import AttentionDecodeKey, KernelDtype, KernelKey, MoeKey


@dataclass(frozen=True)
class SlowRule:
    """Profile rows of kernel `label` whose keys satisfy `applies`: measured, vLLM's choice, and that slow."""

    name: str
    label: str  # the profile rows' `kernel` column
    applies: Callable[[KernelKey], bool]
    reason: str  # one line: why vLLM really runs that slow there (the module docstring has the evidence)


def _moe_rank_inter_unaligned(key: KernelKey) -> bool:
    return isinstance(key, MoeKey) and (key.inter_size // key.tp) % 16 != 0


def _any_moe(key: KernelKey) -> bool:
    return isinstance(key, MoeKey)


def _fp8_kv_decode(key: KernelKey) -> bool:
    return isinstance(key, AttentionDecodeKey) and key.kv_dtype is KernelDtype.FP8


RULES: tuple[SlowRule, ...] = (
    SlowRule("triton_moe_unaligned", "vllm_unquantizedfusedmoe_triton_tritonexperts", _moe_rank_inter_unaligned,
             "vLLM's Triton fused_moe at a per-rank intermediate size not a multiple of 16: Triton gives its "
             "strides no 16-alignment, so w2's loads are not vectorised (every such H200 row breaks its "
             "neighbours' trend: 2816x704 E128 tp4 152.0 us, tp8 275.8 us)"),
    SlowRule("flashinfer_cutlass_fp8_moe", "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", _any_moe,
             "FlashInfer's CUTLASS fused MoE, vLLM's fp8 per-tensor MoE backend on SM90, is 3-6x its weight read "
             "in every H200 decode row (1024x2688 E512 top22 tp1: 4297.7 us; bf16 Triton on 2816x704 E128: 393.9 "
             "us vs its 1283.9)"),
    SlowRule("oai_triton_mxfp4_moe", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", _any_moe,
             "OpenAI's triton_kernels matmul_ogs, vLLM's gpt-oss MXFP4 backend on SM90, does not go below ~40-110 "
             "us a layer at decode sizes however few weights a rank holds (2880x2880 E32 ep8: 90.2 us for 11 us of "
             "weights)"),
    SlowRule("fa3_fp8_kv_decode", "vllm_flash_attn_fa3", _fp8_kv_decode,
             "FA3 with an fp8 KV cache (vLLM's choice on SM90) is 1.3-1.4x its bf16 rows at every shape, and at "
             "1-2 KV heads a rank decode is far from the bandwidth (2/1 heads x 256, window 1024, 64x4096: bf16 "
             "34.1 us, fp8 47.9 us for 7.0 us of cache reads)"),
)


def rule_for(key: KernelKey, labels: set[str]) -> SlowRule | None:
    """The rule that covers `key` whose rows carry `labels` (the profile's `kernel` column for the key), if any."""
    for rule in RULES:
        if rule.label in labels and rule.applies(key):
            return rule
    return None

"""Issue 16's list of real public configs (aiconfigurator-core's model_configs), each priced at TP8 and, for MoE,
TP8 + EP8 on aiconfigurator's measured H200 vLLM tables: every kernel priced, no placeholder above 1 % of the decode
step, the partition passes conserve work (checked inside them), and the decode step plausible — at least its
weight-read floor and at most 3 × the sum of its kernels' roofline floors (one config known over it, below).
`python benchmarks/architectures_e2e.py` runs the same list through the CLI (kv and simulate too). Imports the
real tables and traces eleven large models: slow (a few minutes)."""

from __future__ import annotations

import pytest

from tests.costing.real_config_bar import assert_plausible

pytestmark = pytest.mark.slow

# (DeepSeek-V4-Flash and the two Nemotron configs have tests of their own: test_compressed_real_configs.py,
# test_ssm_real_configs.py)
CONFIGS = [
    "deepseek-ai--DeepSeek-V3.2", "nvidia--GLM-5-NVFP4", "moonshotai--Kimi-K2-Instruct", "Qwen--Qwen3.5-27B",
    "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "MiniMaxAI--MiniMax-M2.5", "XiaomiMiMo--MiMo-V2-Flash",
]
# Gemma-4-26B-A4B at TP8 (not EP8) runs 4.0 × its roofline sum, within the bar only as a stated exception: its
# fused_moe splits 704 intermediate features into 88 a rank, and vLLM's Triton MoE at a per-rank size that is not a
# multiple of 16 is measured that slow (costing/measured_slow.py `triton_moe_unaligned`: 275.8 µs at tp 8 against
# 152.0 at tp 4, 64 tokens balanced), which covers 3.9 of its 4.0 ms over the bar. The rest of the step had been
# 3.05 × its roofline on the custom-op path (13,078.8 µs, 3,891.4 of it stated excess, against 3,010.5: some 20
# latency-bound kernels a layer); in vLLM's compiled mode (the inductor pass, passes/fuse/vllm_inductor.py: 14 of
# them a layer run as 3 Inductor kernels) it is (11,992.2 - 3,891.4) / 2,997.2 = 2.70 ×. What vLLM's AllReduce +
# RMSNorm fusion would change is said in test_issue16_families.py. Not priced: Gemma-4's custom routing function
# (vLLM 0.19 models/gemma4.py `Gemma4MoE.routing_function`) is a dozen PyTorch ops run inside the MoE custom op,
# which Inductor does not compile, where graphsim prices one topk_softmax.
STATED = {("google--gemma-4-26B-A4B", 1): "triton_moe_unaligned"}
KNOWN_OVER: dict[tuple[str, int], str] = {}


def _cases():
    moe = {"nvidia--GLM-5-NVFP4", "deepseek-ai--DeepSeek-V3.2", "moonshotai--Kimi-K2-Instruct",
           "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
           "MiniMaxAI--MiniMax-M2.5", "XiaomiMiMo--MiMo-V2-Flash"}
    return [pytest.param(n, ep, id=f"{n}-ep{ep}", marks=[pytest.mark.xfail(strict=True, reason=KNOWN_OVER[(n, ep)])]
                         if (n, ep) in KNOWN_OVER else []) for n in CONFIGS for ep in ((1, 8) if n in moe else (1,))]


@pytest.mark.parametrize(("name", "ep"), _cases())
def test_priced_complete_and_plausible(h200_db, aic_config, name, ep):
    assert_plausible(aic_config(name), h200_db, ep, STATED.get((name, ep)))


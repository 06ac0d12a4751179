"""`graphsim kv` against public vLLM start-up logs of this year's families ("Available KV cache memory" in,
"GPU KV cache size" / "Maximum concurrency" out, hand-copied with their URL).

Each expected figure is the log's; the arithmetic that reproduces it is derived by hand in the comments.
"""

import json
from pathlib import Path

import pytest

from graphsim.cli.app import main
from graphsim.serving import DeploymentConfig
from graphsim.serving.deployment import plan_deployment

AIC = Path(pytest.importorskip("aiconfigurator_core").__file__).parent / "model_configs"
GiB = 2**30


def _kv(capsys, config: Path, *args: str) -> dict:
    assert main(["kv", str(config), *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# Qwen3.6-35B-A3B (Qwen3_5MoeForConditionalGeneration; the NVFP4 checkpoint's config, whose text model is the
# same as the BF16 one's), TP 1 on an RTX 5090, vLLM 0.24.0, kv_cache_dtype fp8, max_model_len 131072,
# max_num_batched_tokens 8192, prefix caching on (the logs' `non-default args`):
#   github.com/noonghunna/club-3090/issues/612  Available KV cache memory: 5.98 GiB
#       GPU KV cache size: 567,978 tokens / Maximum concurrency for 131,072 tokens per request: 4.33x
#   github.com/noonghunna/club-3090/issues/652  Available KV cache memory: 6.01 GiB
#       GPU KV cache size: 569,878 tokens / Maximum concurrency for 131,072 tokens per request: 4.35x
# By hand: 40 layers, every 4th full attention (10), 30 gated delta nets.
#   attention, 1 token: 2 (K,V) × 2 kv heads × 256 × 1 B (fp8) = 1,024 B
#   state page: recurrent 32 v-heads × 128 × 128 × 4 B (mamba_ssm_dtype float32, vLLM's Qwen3.5 config hook)
#       = 2,097,152 + conv (2·16·128 + 32·128 = 8,192 channels) × 3 × 2 B (bf16) = 49,152 → 2,146,304 B
#   block size 16 × cdiv(2,146,304, 16 × 1,024) = 16 × 131 = 2,096 tokens; attention page 2,096 × 1,024
#       = 2,146,304 B (no padding)
#   groups of 10 layers: 3 state + 1 full; a block id = 10 × 2,146,304 = 21,463,040 B
#   5.98 GiB = 6,420,976,107 B // 21,463,040 = 299 blocks; 6.01 GiB = 6,453,188,853 B // 21,463,040 = 300
#   a request: full cdiv(131,072, 2,096) = 63 + 3 state groups × 2 pages (mamba_cache_mode "align", prefix
#       caching on) = 69 blocks
#   299 / 69 = 4.3333 → int(4.3333 × 131,072) = 567,978; 300 / 69 = 4.3478 → int(569,878.26) = 569,878
# Before the fix: the state in bf16 (1,097,728-B pages, 584 blocks) and one state page a request (126): 4.63x.
@pytest.mark.parametrize("memory,blocks,tokens,concurrency", [
    ("5.98GiB", 299, "567,978", "4.33"),
    ("6.01GiB", 300, "569,878", "4.35"),
])
def test_qwen3_6_35b_a3b_vllm_0_24_log(capsys, memory, blocks, tokens, concurrency):
    d = _kv(capsys, AIC / "nvidia--Qwen3.6-35B-A3B-NVFP4_config.json", "--gpu", "h100", "--kv-memory", memory,
            "--max-model-len", "131072", "--kv-dtype", "fp8", "--max-num-batched-tokens", "8192",
            "--engine", "vllm==0.24.0")
    state = [p for p in d["layout"]["parts"] if p["kind"] == "state"]
    assert len(state) == 1 and state[0]["layers"] == 30 and state[0]["state_bytes"] == 30 * 2_146_304
    assert {g["block_size"] for g in d["layout"]["groups"]} == {2096}
    cap = d["capacity"]
    assert cap["bytes_per_block"] == 21_463_040
    assert (cap["num_blocks"], cap["blocks_per_request"]) == (blocks, 69)
    assert cap["vllm_log"] == [f"GPU KV cache size: {tokens} tokens",
                               f"Maximum concurrency for 131,072 tokens per request: {concurrency}x"]


def test_qwen3_6_without_prefix_caching_holds_one_state_page():
    # prefix caching off: mamba_cache_mode "none" (MambaModelConfig), one page a state group: 63 + 3 = 66 blocks,
    # 299 / 66 = 4.5303
    def cap(caching: bool):
        return plan_deployment(DeploymentConfig.parse({
            "model": str(AIC / "nvidia--Qwen3.6-35B-A3B-NVFP4_config.json"), "hardware": "h100",
            "kv_cache_dtype": "fp8",
            "engine": {"engine": "vllm==0.24.0", "kv_cache_memory_bytes": int(5.98 * GiB), "max_model_len": 131072,
                       "max_num_batched_tokens": 8192, "enable_prefix_caching": caching}})).capacity

    assert (cap(False).num_blocks, cap(False).blocks_per_request) == (299, 66)
    assert cap(True).blocks_per_request == 69

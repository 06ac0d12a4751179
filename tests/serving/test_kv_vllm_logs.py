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


def test_minimax_m2_7_tp2_kv_needed_for_one_request(capsys):
    # github.com/eugr/spark-vllm-docker/issues/396 (MiniMax-M2.7 AWQ, TP 2 on two DGX Sparks, vLLM 0.29.1rc1):
    #   "To serve at least one request with the model's max seq len (196608), 23.25 GiB KV cache is needed"
    # By hand: 62 layers × 2 (K,V) × 8 kv heads / 2 ranks × 128 × 2 B = 126,976 B a token per rank;
    #   cdiv(196,608, 16) = 12,288 blocks × 16 × 126,976 = 24,964,497,408 B = 23.25 GiB.
    # (The "28.74 GiB KV → 240,816 tokens, 1.22x" does not reconstruct: 240,816 = 15,051 blocks × 16,
    # which 28.48 GiB gives; 28.74 GiB would give 15,189 blocks, 243,024 tokens. Not pinned.)
    d = _kv(capsys, AIC / "MiniMaxAI--MiniMax-M2.7_config.json", "--gpu", "h100", "-tp", "2", "--kv-memory", "22.5GiB",
            "--max-model-len", "196608", "--engine", "vllm==0.29.1")
    cap = d["capacity"]
    assert d["layout"]["bytes_per_token_per_rank"] == 126_976
    assert cap["blocks_per_request"] == 12_288
    assert round(cap["blocks_per_request"] * cap["bytes_per_block"] / GiB, 2) == 23.25


def test_qwen3_6_27b_tp2_mtp3_vllm_log(capsys):
    # github.com/noonghunna/club-3090/pull/594 (Qwen3.6-27B FP8, TP 2 on two RTX 3090s, kv_cache_dtype fp8,
    # max_model_len 262144, max_num_batched_tokens 8192, prefix caching on, MTP speculative decoding; the quoted
    # args are cut at 'specula…', num_speculative_tokens 3 is the compose's shipped default (club-3090 issues 44,
    # 104) and the only value the figures admit):
    #   Available KV cache memory: 5.33 GiB
    #   GPU KV cache size: 300,220 tokens / Maximum concurrency for 262,144 tokens per request: 1.15x
    # By hand, per rank: 64 layers, 16 full attention + 1 MTP layer (full) = 17, 48 gated delta nets.
    #   attention, 1 token: 2 × (4 kv heads / 2) × 256 × 1 B = 1,024 B
    #   state page: recurrent 48 / 2 = 24 heads × 128 × 128 × 4 B (fp32) = 1,572,864 + conv (2·16·128 + 48·128)
    #       / 2 = 5,120 channels × (4 − 1 + 3 spec) × 2 B = 61,440 → 1,634,304 B
    #   block size 16 × cdiv(1,634,304, 16,384) = 16 × 100 = 1,600; attention page 1,638,400 B (state padded)
    #   groups: 17 full, 48 state → 3 state groups of 17 (3 padding) + 1 full: a block id 17 × 1,638,400
    #       = 27,852,800 B; 5.33 GiB = 5,723,068,334 B // 27,852,800 = 205 blocks
    #   a request: full cdiv(262,144, 1,600) = 164 + 3 state groups × (2 align + 3 speculative) = 179 blocks
    #   205 / 179 = 1.14525 → "1.15x"; int(1.14525 × 262,144) = int(300,220.78) = 300,220
    # Before: 209 blocks / 171 (no speculative conv columns or state pages; align not applied with speculation):
    # 320,398 tokens / 1.22x.
    d = _kv(capsys, AIC / "nvidia--Qwen3.6-27B-NVFP4_config.json", "--gpu", "h100", "-tp", "2", "--kv-memory",
            "5.33GiB", "--max-model-len", "262144", "--kv-dtype", "fp8", "--max-num-batched-tokens", "8192",
            "--engine", "vllm==0.24.0", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    groups = d["layout"]["groups"]
    assert [(g["kind"], g["layers"], g["block_size"]) for g in groups] == [("state", 17, 1600)] * 3 + [("full", 17, 1600)]
    cap = d["capacity"]
    assert (cap["bytes_per_block"], cap["num_blocks"], cap["blocks_per_request"]) == (27_852_800, 205, 179)
    assert cap["vllm_log"] == ["GPU KV cache size: 300,220 tokens",
                               "Maximum concurrency for 262,144 tokens per request: 1.15x"]


def test_qwen3_6_27b_tp1_mtp2_vllm_log(capsys):
    # A full vLLM start-up log of nvidia/Qwen3.6-27B-NVFP4, TP 1, MTP num_spec_tokens 2, fp8 KV, max_model_len
    # 262144, prefix caching on, engine v0.23.1rc1.dev531 (main after the 0.23.1rc1 tag, heading to 0.24: taken as
    # 0.24.0), arm64 (a GB10, gpu_memory_utilization 0.7): a markdown file "Qwen3.6-27B-NVFP4 — Second Startup Log
    # (MTP, num_speculative_tokens=2)" in a public GitHub repository (stored copy, search-tool file id 61569442000):
    #   "Mamba cache mode is set to 'align' for Qwen3_5ForConditionalGeneration by default when prefix caching is
    #   enabled" / "Setting attention block size to 1600 tokens." / "Add 3 padding layers" /
    #   Available KV cache memory: 48.6 GiB
    #   GPU KV cache size: 1,394,129 tokens / Maximum concurrency for 262,144 tokens per request: 5.32x
    # By hand (TP 1): attention 1 token 2 × 4 × 256 × 1 B = 2,048 B; state page 48 × 128 × 128 × 4 = 3,145,728
    #   + conv 10,240 × (3 + 2) × 2 = 102,400 → 3,248,128 B; block 16 × cdiv(3,248,128, 16 × 2,048) = 1,600;
    #   page 1,600 × 2,048 = 3,276,800 B; 17 full (16 + MTP) and 48 state → 4 groups of 17 (3 padding layers);
    #   a block id 17 × 3,276,800 = 55,705,600 B; 48.6 GiB = 52,183,852,646 B // 55,705,600 = 936 blocks;
    #   a request cdiv(262,144, 1,600) = 164 + 3 × (2 + 2) = 176; 936 / 176 = 5.318 → int(1,394,129.45) = 1,394,129
    d = _kv(capsys, AIC / "nvidia--Qwen3.6-27B-NVFP4_config.json", "--gpu", "h100", "--kv-memory", "48.6GiB",
            "--max-model-len", "262144", "--kv-dtype", "fp8", "--engine", "vllm==0.24.0",
            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')
    assert {g["block_size"] for g in d["layout"]["groups"]} == {1600}
    cap = d["capacity"]
    assert (cap["bytes_per_block"], cap["num_blocks"], cap["blocks_per_request"]) == (55_705_600, 936, 176)
    assert cap["vllm_log"] == ["GPU KV cache size: 1,394,129 tokens",
                               "Maximum concurrency for 262,144 tokens per request: 5.32x"]


# DeepSeek-V4-Flash (its 0731 re-export in bf16, quantized online to fp8; KV-relevant config fields as the preview's:
# 43 layers, compress_ratios 0, 0, (4, 128) × 20, 4, window 128, head_dim 512, index_head_dim 128) on 8 × H200,
# a PrimeIntellect-ai/prime-rl run (SWE_RUN_NIGHT_LOG.md, 2026-09-19; configs/advanced/deepseek-v4-flash/swe.toml:
# tensor_parallel_size 8, enable_expert_parallel, kv_cache_dtype fp8, block_size 256, max_model_len 131072,
# max_num_batched_tokens the vllm serve default 8192, async scheduling):
#   gpu_memory_utilization 0.85: Available KV cache memory: 77.53 GiB
#       GPU KV cache size: 1,513,358 tokens, Maximum concurrency for 131,072 tokens per request: 11.55x
#   gpu_memory_utilization 0.75 (0.1 × 139.80 GiB = 13.98 GiB less): 1,240,483 tokens / 9.46x
# By hand (vLLM's packed groups, graphsim/serving/kv_packed.py; pages rounded up to 576 B):
#   pages: window 64 × 584 = 37,376 → 37,440; CSA entries 64 × 584 → 37,440; HCA entries 2 × 584 = 1,168 → 1,728;
#     indexer keys 64 × 132 = 8,448 → 8,640; compressor state 4 × 8,192 = 32,768 → 32,832, indexer's 4 × 2,048 =
#     8,192 → 8,640, HCA's 8 × 4,096 = 32,768 → 32,832
#   groups: full 256 (21 CSA + 20 HCA + 21 indexer: 1,002,240 B a block, the widest), window (22 + 21 layers),
#     state-4 (42), state-8 (20); a block id = 1,002,240 B
#   a request, 16,384 tokens in flight: 512 + 2 × 259 + 4,099 + 2,065 = 7,194 blocks
#   83,062 blocks (83,248,058,880 B = 77.531 GiB) / 7,194 = 11.54601 → int(× 131,072) = 1,513,358
#   68,085 blocks (68,237,510,400 B = 63.551 GiB) / 7,194 = 9.46414 → 1,240,483
# Before (graphsim's 13 uniform 37,376-B groups of 20 layer slots, 93 padding): 21,302 blocks of 747,520 B a
# request, 5.23x.
@pytest.mark.parametrize("memory,blocks,tokens,concurrency", [
    ("83248058880B", 83_062, "1,513,358", "11.55"),
    ("68237510400B", 68_085, "1,240,483", "9.46"),
])
def test_deepseek_v4_flash_tp8_prime_rl_log(capsys, memory, blocks, tokens, concurrency):
    d = _kv(capsys, AIC / "deepseek-ai--DeepSeek-V4-Flash_config.json", "--gpu", "h200", "--tp", "8",
            "--enable-expert-parallel", "--kv-memory", memory, "--max-model-len", "131072", "--kv-dtype", "fp8",
            "--block-size", "256", "--max-num-batched-tokens", "8192")
    cap = d["capacity"]
    assert (cap["bytes_per_block"], cap["num_blocks"], cap["blocks_per_request"]) == (1_002_240, blocks, 7_194)
    assert cap["vllm_log"] == [f"GPU KV cache size: {tokens} tokens",
                               f"Maximum concurrency for 131,072 tokens per request: {concurrency}x"]


def test_deepseek_v4_flash_at_the_logged_rounded_memory():
    # 77.53 GiB as logged (rounded) = 83,247,203,614 B // 1,002,240 = 83,061 blocks: 11.5459x, 1,513,340 tokens,
    # 0.001 % under the log's 1,513,358
    cap = plan_deployment(DeploymentConfig.parse({
        "model": str(AIC / "deepseek-ai--DeepSeek-V4-Flash_config.json"), "hardware": "h200",
        "parallel": {"tensor_parallel_size": 8, "enable_expert_parallel": True},
        "kv_cache_dtype": "fp8",
        "engine": {"kv_cache_memory_bytes": int(77.53 * GiB), "max_model_len": 131072, "block_size": 256,
                   "max_num_batched_tokens": 8192}})).capacity
    assert (cap.num_blocks, cap.blocks_per_request) == (83_061, 7_194)
    assert abs(cap.tokens - 1_513_358) / 1_513_358 < 0.005

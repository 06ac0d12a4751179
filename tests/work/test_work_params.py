"""Parameter counts: hand-derived goldens, and agreement with officially published counts.

Convention: `activated` counts what one token's forward pass uses — all parameters except the routed
experts it is not sent to and the input embedding table (a lookup of one row); with tied
embeddings the table serves the head and counts. `activated_with_embedding` adds the input table
(the convention of the Mixtral and Qwen model cards).
"""

from __future__ import annotations

import pytest
from work_helpers import catalog_stems, load_config

from graphsim.work import accounting


def params(stem: str, **kw):
    return accounting(load_config(stem), **kw).params()


# ---------------------------------------------------------------------------------------------
# Hand-derived totals and activated counts (arithmetic on config values)

# Llama-3.1-8B: per layer q 4096² + k,v 2·4096·1024 + o 4096² = 41,943,040; MLP 3·4096·14336 =
# 176,160,768; 2 norms 8,192 → 218,112,000 × 32 = 6,979,584,000; embedding and head 128256·4096 =
# 525,336,576 each; final norm 4096.
LLAMA_TOTAL = 32 * (41_943_040 + 176_160_768 + 8_192) + 2 * 525_336_576 + 4_096  # 8,030,261,248
LLAMA_ACTIVATED = LLAMA_TOTAL - 525_336_576

# Gemma-2-9b: per layer q 3584·4096 = 14,680,064, k,v 3584·2048 = 7,340,032 each, o 14,680,064 →
# 44,040,192; GeGLU 3·3584·14336 = 154,140,672; 4 norms 14,336 → 198,195,200 × 42 = 8,324,198,400;
# tied table 256000·3584 = 917,504,000; final norm 3584.
GEMMA_TOTAL = 42 * (44_040_192 + 154_140_672 + 14_336) + 917_504_000 + 3_584  # 9,241,705,984

# Mixtral-8x7B: per layer attention 41,943,040; 8 experts × 3·4096·14336 = 1,409,286,144; router
# 8·4096 = 32,768; norms 8,192 → 1,451,270,144 × 32; tables 2·32000·4096 = 262,144,000; final 4096.
MIXTRAL_TOTAL = 32 * (41_943_040 + 8 * 176_160_768 + 32_768 + 8_192) + 262_144_000 + 4_096  # 46,702,792,704
MIXTRAL_ACTIVATED_WITH_EMB = 32 * (41_943_040 + 2 * 176_160_768 + 32_768 + 8_192) + 262_144_000 + 4_096

# Qwen3-30B-A3B: per layer attention 2048·4096 + 2·2048·512 + 4096·2048 = 18,874,368, q/k norms 256,
# 128 experts × 3·2048·768 (4,718,592) = 603,979,776, router 128·2048 = 262,144, norms 4,096 →
# 623,120,640 × 48 = 29,909,790,720; tables 2·151936·2048 = 622,329,856; final 2048.
QWEN3_MOE_TOTAL = 48 * (18_874_368 + 256 + 128 * 4_718_592 + 262_144 + 4_096) + 622_329_856 + 2_048
QWEN3_MOE_ACTIVATED_WITH_EMB = 48 * (18_874_368 + 256 + 8 * 4_718_592 + 262_144 + 4_096) + 622_329_856 + 2_048

# DeepSeek-V3: MLA per layer q_a 7168·1536 = 11,010,048, q_a norm 1536, q_b 1536·24576 = 37,748,736,
# kv_a 7168·576 = 4,128,768, kv_a norm 512, kv_b 512·32768 = 16,777,216, o 16384·7168 = 117,440,512
# → 187,107,328; 2 layer norms 14,336. Dense MLP 3·7168·18432 = 396,361,728 (3 layers). MoE layer:
# 256 experts × 3·7168·2048 (44,040,192), 1 shared expert 44,040,192, router 256·7168 = 1,835,008,
# score-correction bias 256 (58 layers). Tables 2·129280·7168 = 1,853,358,080; final 7168.
# The MTP module (num_nextn_predict_layers = 1, the 685B − 671B difference) is not counted.
DS_ATTN = 187_107_328 + 14_336
DS_TOTAL = (
    3 * (DS_ATTN + 396_361_728)
    + 58 * (DS_ATTN + 256 * 44_040_192 + 44_040_192 + 1_835_008 + 256)
    + 1_853_358_080
    + 7_168
)  # 671,026,419,200
DS_ACTIVATED = (
    3 * (DS_ATTN + 396_361_728) + 58 * (DS_ATTN + 9 * 44_040_192 + 1_835_008 + 256) + 926_679_040 + 7_168
)  # 36,625,618,432 (input embedding excluded)

# gpt-oss-20b: attention per layer q 2880·4096 + 4096, k,v 2880·512 + 512 each, o 4096·2880 + 2880,
# sinks 64 → 26,550,144; router 2880·32 + 32 = 92,192; 32 experts × (2880·5760 + 5760 + 2880·2880 +
# 2880 = 24,891,840) = 796,538,880; norms 5,760; × 24. Tables 2·201088·2880 = 1,158,266,880; final 2880.
OSS_TOTAL = 24 * (26_550_144 + 92_192 + 32 * 24_891_840 + 5_760) + 1_158_266_880 + 2_880  # 20,914,757,184
OSS_ACTIVATED = 24 * (26_550_144 + 92_192 + 4 * 24_891_840 + 5_760) + 579_133_440 + 2_880  # 3,608,307,264

# Qwen3-Next-80B-A3B: full attention q 2048·8192 + k,v 2·2048·512 + o 4096·2048 + q/k norms 512 =
# 27,263,488 (12 layers); gated delta net in_proj_qkvz 2048·12288 + in_proj_ba 2048·64 + conv 8192·4
# + dt_bias 32 + A_log 32 + gated norm 128 + out 4096·2048 = 33,718,464 (36 layers); MoE 512 experts ×
# 3·2048·512 (3,145,728) + router 2048·512 + shared 3,145,728 + shared gate 2048 = 1,614,809,088;
# norms 4,096; tables 2·151936·2048 = 622,329,856; final 2048.
QN_MOE = 512 * 3_145_728 + 1_048_576 + 3_145_728 + 2_048
QN_TOTAL = 12 * (27_263_488 + QN_MOE + 4_096) + 36 * (33_718_464 + QN_MOE + 4_096) + 622_329_856 + 2_048
QN_MOE_ACTIVE = 10 * 3_145_728 + 1_048_576 + 3_145_728 + 2_048
QN_ACTIVATED = 12 * (27_263_488 + QN_MOE_ACTIVE + 4_096) + 36 * (33_718_464 + QN_MOE_ACTIVE + 4_096) + 311_164_928 + 2_048

HAND = {
    "Llama-3.1-8B": (LLAMA_TOTAL, LLAMA_ACTIVATED, LLAMA_TOTAL),
    "Gemma-2-9b": (GEMMA_TOTAL, GEMMA_TOTAL, GEMMA_TOTAL),  # tied: the head uses the whole table
    "Mixtral-8x7B-v0.1": (MIXTRAL_TOTAL, MIXTRAL_ACTIVATED_WITH_EMB - 131_072_000, MIXTRAL_ACTIVATED_WITH_EMB),
    "Qwen3-30B-A3B": (QWEN3_MOE_TOTAL, QWEN3_MOE_ACTIVATED_WITH_EMB - 311_164_928, QWEN3_MOE_ACTIVATED_WITH_EMB),
    "DeepSeek-V3": (DS_TOTAL, DS_ACTIVATED, DS_ACTIVATED + 926_679_040),
    "gpt-oss-20b": (OSS_TOTAL, OSS_ACTIVATED, OSS_ACTIVATED + 579_133_440),
    "Qwen3-Next-80B-A3B": (QN_TOTAL, QN_ACTIVATED, QN_ACTIVATED + 311_164_928),
}


@pytest.mark.parametrize("stem", sorted(HAND))
def test_hand_derived_counts(stem):
    total, activated, with_embedding = HAND[stem]
    p = params(stem)
    assert (p.total, p.activated, p.activated_with_embedding) == (total, activated, with_embedding)


def test_hand_values_spelled_out():
    assert LLAMA_TOTAL == 8_030_261_248
    assert GEMMA_TOTAL == 9_241_705_984
    assert MIXTRAL_TOTAL == 46_702_792_704 and MIXTRAL_ACTIVATED_WITH_EMB == 12_879_925_248
    assert QWEN3_MOE_TOTAL == 30_532_122_624 and QWEN3_MOE_ACTIVATED_WITH_EMB == 3_353_032_704
    assert DS_TOTAL == 671_026_419_200 and DS_ACTIVATED == 36_625_618_432
    assert OSS_TOTAL == 20_914_757_184 and OSS_ACTIVATED == 3_608_307_264
    assert QN_TOTAL == 79_674_391_296


# ---------------------------------------------------------------------------------------------
# Officially published counts (sources in docs/work.md). Totals must agree within 0.5%.

PUBLISHED_TOTAL = {
    "Llama-3.1-8B": 8.03e9,  # Hugging Face model page (safetensors), meta-llama/Llama-3.1-8B
    "Llama-3.1-8B-Instruct": 8.03e9,
    "Llama-3.1-70B": 70.6e9,  # Hugging Face model page, meta-llama/Llama-3.1-70B
    "Llama-3.1-70B-Instruct": 70.6e9,
    "Mistral-7B-v0.3": 7.25e9,  # Hugging Face model page, mistralai/Mistral-7B-v0.3
    "Mixtral-8x7B-v0.1": 46.7e9,  # Mistral AI, "Mixtral of experts" (2023-12-11)
    "Phi-3-mini-4k-instruct": 3.82e9,  # Hugging Face model page (model card text: "3.8B")
    "Qwen2.5-7B-Instruct": 7.61e9,  # Qwen2.5-7B-Instruct model card
    "Qwen3-8B": 8.2e9,  # Qwen3-8B model card
    "Qwen3-32B": 32.8e9,  # Qwen3-32B model card
    "Qwen3-30B-A3B": 30.5e9,  # Qwen3-30B-A3B model card
    "Qwen3-235B-A22B": 235e9,  # Qwen3-235B-A22B model card
    "Qwen3-Next-80B-A3B": 80e9,  # Qwen3-Next-80B-A3B model card
    "DeepSeek-V3": 671e9,  # DeepSeek-V3 technical report (arXiv:2412.19437), main model without MTP
    "DeepSeek-R1": 671e9,  # DeepSeek-R1 model card
    "DeepSeek-V2-Lite": 15.7e9,  # DeepSeek-V2-Lite model card
    "Gemma-2-9b": 9.24e9,  # Hugging Face model page, google/gemma-2-9b
    "gpt-oss-20b": 20.91e9,  # gpt-oss model card (OpenAI, 2025-08), table 1
    "gpt-oss-120b": 116.83e9,  # gpt-oss model card, table 1
}

# Activated per token as published, with the convention that reproduces it; these are rounded (or
# truncated: 2.45 → "2.4B", 3.35 → "3.3B") to two or three significant digits, hence 2.5%.
PUBLISHED_ACTIVATED = {
    "Mixtral-8x7B-v0.1": (12.9e9, "with_embedding"),
    "Qwen3-30B-A3B": (3.3e9, "with_embedding"),
    "Qwen3-235B-A22B": (22e9, "with_embedding"),
    "DeepSeek-V3": (37e9, "activated"),
    "DeepSeek-V2-Lite": (2.4e9, "activated"),
    "gpt-oss-20b": (3.61e9, "activated"),
    "gpt-oss-120b": (5.13e9, "activated"),
}


def test_every_catalog_model_has_a_published_total():
    assert set(catalog_stems()) == set(PUBLISHED_TOTAL)


@pytest.mark.parametrize("stem", sorted(PUBLISHED_TOTAL))
def test_total_matches_published_within_half_a_percent(stem):
    assert params(stem).total == pytest.approx(PUBLISHED_TOTAL[stem], rel=0.005)


@pytest.mark.parametrize("stem", sorted(PUBLISHED_ACTIVATED))
def test_activated_matches_published(stem):
    value, convention = PUBLISHED_ACTIVATED[stem]
    p = params(stem)
    got = p.activated_with_embedding if convention == "with_embedding" else p.activated
    assert got == pytest.approx(value, rel=0.025)


def test_gemma2_non_embedding_count_matches_the_report_exactly():
    # Gemma 2 technical report, table of parameter counts: 9B non-embedding 8,324,201,984
    p = params("Gemma-2-9b")
    assert p.total - p.embedding == 8_324_201_984


def test_qwen3_next_non_embedding_count():
    # model card: 79B non-embedding parameters
    p = params("Qwen3-Next-80B-A3B")
    assert p.total - 2 * p.embedding == pytest.approx(79e9, rel=0.005)


# ---------------------------------------------------------------------------------------------
# Stored bytes under the checkpoint's quantization


def test_gpt_oss_checkpoint_sizes_match_the_model_card():
    # gpt-oss model card, table 1: checkpoint sizes 12.8 GiB (20b) and 60.8 GiB (120b)
    assert params("gpt-oss-20b").stored_bytes / 2**30 == pytest.approx(12.8, rel=0.005)
    assert params("gpt-oss-120b").stored_bytes / 2**30 == pytest.approx(60.8, rel=0.005)


def test_gpt_oss_mxfp4_is_4_25_bits_per_expert_weight():
    p = params("gpt-oss-20b")
    routed = p.segment("layers.ffn.routed")
    # 24 layers × 32 experts × 3·2880·2880 matrix elements at 4.25 bits, biases 3·2880 at 16 bits
    assert routed.stored_bytes == 24 * 32 * (3 * 2880 * 2880 * 4.25 / 8 + 3 * 2880 * 2)


def test_deepseek_v3_fp8_stored_bytes():
    # FP8 1 B/element + fp32 scale per 128×128 block for every linear layer; bf16 router, norms,
    # embedding and head. Per layer: attention matrices 187,151,072 B (see the MoE goldens), norms
    # 2·(7168+1536+512+7168) = 32,768 B.
    attn = 187_151_072 + 32_768
    dense = 3 * (132_120_576 + 4 * 144 * 56)  # 396,458,496
    expert = 3 * (14_680_064 + 4 * 16 * 56)  # 44,050,944
    router = 2 * (256 * 7168 + 256)
    want = 3 * (attn + dense) + 58 * (attn + 257 * expert + router) + 2 * 2 * 129280 * 7168 + 2 * 7168
    assert params("DeepSeek-V3").stored_bytes == want


def test_modules_to_not_convert_is_honoured():
    cfg = load_config("gpt-oss-20b")
    cfg["quantization_config"] = dict(cfg["quantization_config"], modules_to_not_convert=["lm_head"])
    from graphsim.work import accounting as acc

    everything = acc(cfg).params()
    # attention matrices now quantized too: fewer bytes than the shipped config
    assert everything.stored_bytes < params("gpt-oss-20b").stored_bytes
    assert everything.segment("layers[full].attn.qkv").stored_bytes == 12 * (
        (2880 * 4096 + 2 * 2880 * 512) * 4.25 / 8 + (4096 + 2 * 512) * 2
    )


def test_dtype_override_and_ignore_quant():
    assert params("Llama-3.1-8B", dtype="fp32").stored_bytes == 4 * LLAMA_TOTAL
    assert params("DeepSeek-V3", ignore_quant=True).stored_bytes == 2 * DS_TOTAL

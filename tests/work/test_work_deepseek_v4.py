"""DeepSeek-V4 in the accountant and kv: compressed-KV attention, hyper-connections, hash-routed MoE, by hand.

Every expected number is arithmetic on the config's values written out here, never read back from the
code under test. The configs are deepseek-ai/DeepSeek-V4-Flash's and -Pro's config.json as
aiconfigurator-core ships them (model_configs/deepseek-ai--DeepSeek-V4-{Flash,Pro}_config.json), less
the fields no count reads. The model cards (huggingface.co/deepseek-ai/DeepSeek-V4-Flash, -Pro): Flash
284B total / 13B activated, Pro 1.6T total / 49B activated.
"""

from __future__ import annotations

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import KvKind, kv_layout
from graphsim.work import accounting, build_model
from graphsim.work.attention_work import attention_core
from graphsim.work.specs import AttentionKind, CompressedAttention, MoeFfn
from graphsim.workload import SeqGroup

# 0 = sliding only, 4 = CSA, 128 = HCA; 44 entries for 43 layers (the last is the MTP layer's: truncated)
FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
PRO_RATIOS = [128, 128] + [4, 128] * 29 + [4, 0]
COMMON = {
    "architectures": ["DeepseekV4ForCausalLM"], "head_dim": 512, "index_head_dim": 128, "index_n_heads": 64,
    "num_key_value_heads": 1, "num_experts_per_tok": 6, "n_shared_experts": 1, "num_hash_layers": 3,
    "num_nextn_predict_layers": 1, "qk_rope_head_dim": 64, "sliding_window": 128, "hc_mult": 4,
    "o_lora_rank": 1024, "vocab_size": 129280, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "attention_bias": False, "mlp_bias": False, "expert_dtype": "fp4",
}
FLASH = COMMON | {
    "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "q_lora_rank": 1024, "o_groups": 8,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "index_topk": 512, "compress_ratios": FLASH_RATIOS,
}
PRO = COMMON | {
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "q_lora_rank": 1536, "o_groups": 16,
    "moe_intermediate_size": 3072, "n_routed_experts": 384, "index_topk": 1024, "compress_ratios": PRO_RATIOS,
}

# --- V4-Flash by hand (H = 4096, 64 heads × 512, q_lora 1024, o_groups 8 × o_lora 1024, vocab 129280) -------
# Attention, every layer: q_a 1024·4096 = 4,194,304; q_a_norm 1,024; q_b 32768·1024 = 33,554,432;
# kv_proj 512·4096 = 2,097,152; kv_norm 512; o_a 8 groups × 1024 × (32768/8 = 4096) = 33,554,432;
# o_b 4096·8192 = 33,554,432; sinks 64; input + post-attention norms 2·4096 = 8,192  → 106,964,544
F_ATTN = 4_194_304 + 1_024 + 33_554_432 + 2_097_152 + 512 + 33_554_432 + 33_554_432 + 64 + 8_192
# mHC, every layer: attn_hc and ffn_hc, each fn (2+4)·4 = 24 × 4·4096 = 393,216, base 24, scale 3 → 786,486
F_HC = 2 * (24 * 16_384 + 24 + 3)
# CSA compressor: kv_proj and gate_proj 2·512 × 4096 = 4,194,304 each, position_bias 4 × 1024, kv_norm 512;
# its indexer: kv/gate 2·128 × 4096 = 1,048,576 each, position_bias 4 × 256, kv_norm 128,
# q_b 64·128 × 1024 = 8,388,608, weights_proj 64 × 4096 = 262,144  → 8,393,216 + 10,749,056 = 19,142,272
F_CSA = (2 * 4_194_304 + 4_096 + 512) + (2 * 1_048_576 + 1_024 + 128 + 8_388_608 + 262_144)
# HCA compressor: kv/gate 512 × 4096 = 2,097,152 each, position_bias 128 × 512 = 65,536, kv_norm 512 → 4,260,352
F_HCA = 2 * 2_097_152 + 65_536 + 512
# MoE: router 256 × 4096 = 1,048,576; experts 256 × (gate+up 2·2048 + down 2048) × 4096 = 6,442,450,944;
# one shared expert 3·2048·4096 = 25,165,824; score-correction vector 256 (top-k layers) or the hash table
# tid2eid 129280 × 6 = 775,680 (hash layers)
F_EXPERT = 3 * 2048 * 4096  # 25,165,824 per expert
F_MOE = 1_048_576 + 256 * F_EXPERT + F_EXPERT + 256  # 6,468,665,600
F_HASH = 1_048_576 + 256 * F_EXPERT + F_EXPERT + 129_280 * 6  # 6,469,441,024
F_EMBED = 129_280 * 4096  # 529,530,880, and the same for the untied head
# 43 layers: 2 sliding, 21 CSA, 20 HCA; 3 hash + 40 top-k MoE; embed + head + final norm 4096 + hc_head
# (hc_fn 4 × 16384, hc_base 4, hc_scale 1 = 65,541)
F_TOTAL = 43 * (F_ATTN + F_HC) + 21 * F_CSA + 20 * F_HCA + 40 * F_MOE + 3 * F_HASH + 2 * F_EMBED + 4_096 + 65_541
# activated: all but the embedding, the hash tables and 250 of 256 experts in each of the 43 layers
F_ACTIVE = F_TOTAL - F_EMBED - 3 * 129_280 * 6 - 43 * 250 * F_EXPERT


def test_flash_parameters_by_hand_and_against_the_card():
    assert F_TOTAL == 284_334_567_511
    assert F_ACTIVE == 13_270_101_591
    params = accounting(FLASH).params()
    assert params.total == F_TOTAL
    assert params.activated == F_ACTIVE
    assert abs(F_TOTAL / 284e9 - 1) < 0.005  # card: 284B (0.12 % off)
    assert abs(F_ACTIVE / 13e9 - 1) < 0.025  # card: 13B (2.1 % off: the card rounds)


def test_pro_parameters_by_hand_and_against_the_card():
    # H = 7168, 128 heads × 512, q_lora 1536, 16 groups × 1024, 384 experts of 3072, index top-1024.
    # attention: q_a 1536·7168 + 1536 + q_b 65536·1536 + kv 512·7168 + 512 + o_a 16·1024·4096 + o_b 7168·16384
    # + sinks 128 + norms 2·7168 = 299,909,248
    attn = 1536 * 7168 + 1536 + 65536 * 1536 + 512 * 7168 + 512 + 16 * 1024 * 4096 + 7168 * 16384 + 128 + 2 * 7168
    hc = 2 * (24 * 4 * 7168 + 27)  # 1,376,310
    csa = (2 * 1024 * 7168 + 4 * 1024 + 512) + (2 * 256 * 7168 + 4 * 256 + 128 + 64 * 128 * 1536 + 64 * 7168)
    hca = 2 * 512 * 7168 + 128 * 512 + 512  # 7,406,080
    expert = 3 * 3072 * 7168  # 66,060,288
    moe = 384 * 7168 + 384 * expert + expert + 384  # 25,435,963,776
    hashed = moe - 384 + 129_280 * 6
    # 61 layers: 0 sliding, 30 CSA, 31 HCA (2 HCA, then 29 × (CSA, HCA), then CSA); 3 hash + 58 top-k
    total = 61 * (attn + hc) + 30 * csa + 31 * hca + 58 * moe + 3 * hashed + 2 * 129_280 * 7168 + 7168 + (16 * 7168 + 5)
    active = total - 129_280 * 7168 - 3 * 129_280 * 6 - 61 * 378 * expert
    assert (attn, csa, total, active) == (299_909_248, 31_397_504, 1_572_999_528_803, 48_852_402_019)
    params = accounting(PRO).params()
    assert (params.total, params.activated) == (total, active)
    # The card's "1.6T" has two significant figures (±0.05T); 1.573T is within them, 1.7 % below 1.6T
    # (with the one MTP layer the checkpoint also holds, ~25.8B more, it would read 1.599T).
    assert abs(total - 1.6e12) < 0.05e12
    assert abs(active / 49e9 - 1) < 0.025  # card: 49B (0.3 % off)


def test_flash_schedule_follows_the_config_class():
    spec = build_model(FLASH)
    kinds = [layer.attn.kind for layer in spec.stack.layers]
    assert kinds[:4] == [AttentionKind.SLIDING, AttentionKind.SLIDING, AttentionKind.CSA, AttentionKind.HCA]
    assert (kinds.count(AttentionKind.SLIDING), kinds.count(AttentionKind.CSA), kinds.count(AttentionKind.HCA)) == (2, 21, 20)
    csa = spec.stack.layers[2].attn
    assert isinstance(csa, CompressedAttention) and csa.compressor and csa.index_compressor
    assert (csa.ratio, csa.compressor.overlap, csa.index_compressor.head_dim, csa.index_topk, csa.rope_dim) == (4, True, 128, 512, 64)
    ffn = [layer.ffn for layer in spec.stack.layers]
    moe = [f for f in ffn if isinstance(f, MoeFfn)]
    assert len(moe) == 43
    assert [f.router_score_bias for f in moe[:4]] == [False, False, False, True]  # hash routers carry no bias


def test_class_default_schedule_and_legacy_rates():
    # no layer_types / compress_ratios: 2 HCA, then CSA at odd i of the rest (DeepseekV4Config.__post_init__)
    cfg = {k: v for k, v in FLASH.items() if k != "compress_ratios"} | {"num_hidden_layers": 6,
                                                                      "compress_rate_hca": 64}
    attns = [layer.attn for layer in build_model(cfg).stack.layers]
    kinds = [(a.kind, a.ratio) for a in attns if isinstance(a, CompressedAttention)]
    hca, csa = (AttentionKind.HCA, 64), (AttentionKind.CSA, 4)
    assert kinds == [hca, hca, hca, csa, hca, csa]


def test_decode_core_work_by_hand():
    # One sequence decoding its 4097th token (p = 4096, n = 1) on a Flash CSA layer.
    attn = build_model(FLASH).stack.layers[2].attn
    core = attention_core(attn, SeqGroup(1, 4096), accounting(FLASH).precision)
    # pairs: sliding min(4097, 128) = 128; compressed: (4096 + 1) // 4 = 1024 visible, top-512 → 512.
    # FLOPs 2·(128 + 512)·64 heads·(512 + 512) = 83,886,080; no window closes (4097 // 4 = 4096 // 4), so no
    # pooling; the indexer scores 1024 entries × 64 heads × (2·128 + 2) = 16,908,288.
    assert core.flops == 83_886_080 + 16_908_288
    # read: 127 sliding entries × 584 B = 74,168; min(1024, 1·512) compressed × 584 = 299,008; 1024 index keys
    # × (128 + 4) = 135,168; no compressor state (no window closes: 4097 // 4 = 4096 // 4)
    assert core.state_read_bytes == 74_168 + 299_008 + 135_168
    # written: the new token's sliding entry 584; its compressor state, kv + score of both series,
    # 2·2·512 fp32 = 8,192 B, and the indexer's 2·2·128 fp32 = 2,048 B (needed until its window closes)
    assert core.state_write_bytes == 584 + 8_192 + 2_048
    # the step that closes the window (p = 4099): reads back the 3 cached tokens' state (3 × 2,048 elements)
    # and the window before's first series (4 × (512 + 512)), × 4 B = 24,576 + 16,384; the indexer's
    # 3 × 512 + 4 × 256 = 2,560 elements → 10,240 B; nothing of the closed window stays but its first series
    # for the next entry: the new token's 2 × 512 → 4,096 B (+ 2 × 128 → 1,024 B for the indexer)
    assert isinstance(attn, CompressedAttention)
    comp, ix = attn.compressor, attn.index_compressor
    assert comp is not None and ix is not None
    assert (comp.state_read(4099, 1), ix.state_read(4099, 1)) == (3 * 2048 + 4 * 1024, 3 * 512 + 4 * 256)
    assert (comp.state_written(4099, 1), ix.state_written(4099, 1)) == (1024, 256)


def test_prefill_pooling_and_hca_pairs_by_hand():
    # 256 new tokens, nothing cached, on a Flash HCA layer (m = 128, every entry attended).
    attn = build_model(FLASH).stack.layers[3].attn
    core = attention_core(attn, SeqGroup(256, 0), accounting(FLASH).precision)
    # sliding pairs: 1 + 2 + … + 128 = 8,256, then 128 × 128 = 16,384 → 24,640;
    # compressed: positions t = 127 .. 254 see ⌊(t + 1)/128⌋ = 1 (128 of them), t = 255 sees 2 → 130
    pairs = 8_256 + 16_384 + 130
    # two windows close: 2 × pooling 2·128 slots·512 = 262,144
    assert core.flops == 2 * pairs * 64 * 1024 + 2 * 131_072
    # written: 127 sliding entries and 2 compressed entries × 584; the carried state at 256 is empty (HCA
    # has no overlap, no open window)
    assert core.state_write_bytes == (127 + 2) * 584
    assert core.state_read_bytes == 0


def test_kv_layout_of_flash_by_hand():
    acc = accounting(FLASH)
    layout = kv_layout(acc.spec, acc.precision, tp=8)
    parts = {(p.layer.kind, p.layer.ratio, p.layer.window, p.layer.bytes_per_token): p.layers for p in layout.parts()}
    assert parts == {
        (KvKind.SLIDING, 1, 128, 584): 43,  # every layer's sliding-window K=V, 584 B a token
        (KvKind.MLA, 4, None, 584): 21,  # CSA compressed entries, one per 4 tokens
        (KvKind.SLIDING, 1, 8, 8192): 21,  # CSA compressor state: kv + score 2 × 1024 fp32, window 2·4
        (KvKind.MLA, 4, None, 132): 21,  # indexer keys 128 fp8 + 4 B scale, one per 4 tokens
        (KvKind.SLIDING, 1, 8, 2048): 21,  # indexer compressor state 2 × 256 fp32, window 8
        (KvKind.MLA, 128, None, 584): 20,  # HCA compressed entries, one per 128 tokens
        (KvKind.SLIDING, 1, 128, 4096): 20,  # HCA compressor state 2 × 512 fp32, window 128
    }
    # one 4096-token request: 43·128·584 + 21·1024·584 + 21·8·8192 + 21·1024·132 + 21·8·2048 + 20·32·584
    # + 20·128·4096 = 3,214,336 + 12,558,336 + 1,376,256 + 2,838,528 + 344,064 + 373,760 + 10,485,760
    assert layout.bytes_for_request(4096) == 31_191_040
    assert layout.block_size == 256
    # vLLM's block sizes and pages, each rounded up to 576 B (fp8_ds_mla): the window 64 tokens, 64 × 584 = 37,376
    # → 37,440; CSA entries 256/4 = 64 × 584 → 37,440; HCA entries 256/128 = 2 × 584 = 1,168 → 1,728; indexer keys
    # 64 × 132 = 8,448 → 8,640; compressor state 4 tokens × 8192 = 32,768 → 32,832 (ratio 4), 4 × 2048 = 8,192
    # → 8,640 (the indexer's), 8 × 4096 = 32,768 → 32,832 (ratio 128).
    # Packed (vLLM _get_packed_kv_cache_groups): buckets full-256 (21 CSA + 20 HCA + 21 indexer = 62 layers, page
    # counts 21/20/21: unbalanced, one group), window-128 (43 layers), state-4 (21 + 21: balanced, the floor 21),
    # state-8 (20); repeats per group = the d in [21, 43] padding 43, 21, 20 least: 22 (1 + 1 + 2); so the window
    # splits into cdiv(43, 22) = 2 groups of 22 and 21. One block id: the widest group, 21·37,440 + 20·1,728 +
    # 21·8,640 = 1,002,240 B.
    got = sorted((g.kind.value, g.layers, g.block_size, g.window, g.block_bytes) for g in layout.groups)
    assert got == sorted([("mla", 62, 256, None, 1_002_240), ("sliding", 22, 64, 128, 22 * 37_440),
                          ("sliding", 21, 64, 128, 21 * 37_440), ("sliding", 42, 4, 8, 21 * 32_832 + 21 * 8_640),
                          ("sliding", 20, 8, 128, 20 * 32_832)])
    assert layout.bytes_per_block == 1_002_240
    # a 131,072-token request with 16,384 tokens in flight (8192 batched × 2 async batches): 131072/256 = 512
    # blocks + 2 × (cdiv(127 + 16384, 64) + 1 = 259) + (cdiv(7 + 16384, 4) + 1 = 4099) + (cdiv(127 + 16384, 8) + 1
    # = 2065) = 7194
    assert layout.admission_blocks(131_072, 16_384) == 7194


def test_bad_compress_ratio_is_one_line():
    with pytest.raises(ConfigError, match="compress_ratios holds 16"):
        build_model(FLASH | {"compress_ratios": [0, 16, *FLASH_RATIOS[2:]]})


def test_fp4_experts_are_stored_as_mxfp4():
    # config.json says quant_method fp8 (128 x 128 blocks) and expert_dtype fp4: vLLM's DeepseekV4FP8Config loads
    # the routed experts as MXFP4 (4 bits + one e8m0 byte per 32 inputs). Per expert: gate and up 2048 x 4096
    # = 2048·4096/2 + 2048·(4096/32) = 4,194,304 + 262,144 = 4,456,448 B each; down 4096 x 2048 = 4,194,304
    # + 4096·(2048/32) = 4,456,448 B; 3 × 4,456,448 = 13,369,344 B × 256 experts × 43 layers
    cfg = FLASH | {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                           "weight_block_size": [128, 128]}}
    routed = next(s for s in accounting(cfg).params().segments if s.name == "layers.ffn.routed")
    assert routed.stored_bytes == 13_369_344 * 256 * 43
    # the same checkpoint with expert_dtype fp8: one byte per weight plus an fp32 scale per 128 x 128 block
    # (16 x 32 blocks for 2048 x 4096): 3 × (8,388,608 + 512·4) = 25,171,968 B per expert
    routed = next(s for s in accounting(cfg | {"expert_dtype": "fp8"}).params().segments
                  if s.name == "layers.ffn.routed")
    assert routed.stored_bytes == 25_171_968 * 256 * 43


def test_nvfp4_checkpoint_names_are_renamed_to_the_model_modules():
    # NVIDIA's NVFP4 DeepSeek-V4 (modelopt MIXED_PRECISION) names modules as the checkpoint does
    # ("layers.0.ffn.experts"; ignore "*.attn.*", "*.ffn.shared_experts.*"); transformers loads them renamed
    # (conversion_mapping.py deepseek_v4: .attn. → .self_attn., .ffn. → .mlp.), and so are the patterns
    from graphsim.quantization import WeightFormat, parse_quantization

    quant = {"quant_method": "fp8", "quant_algo": "MIXED_PRECISION", "group_size": 16,
             "ignore": ["*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"],
             "quantized_layers": {"layers.0.ffn.experts": {"quant_algo": "NVFP4", "group_size": 16}}}
    q = parse_quantization({"model_type": "deepseek_v4", "quantization_config": quant})
    assert q is not None
    scheme = q.scheme_for("model.layers.0.mlp.experts.gate_proj")
    assert scheme is not None and scheme.format is WeightFormat.NVFP4
    assert q.scheme_for("model.layers.0.self_attn.q_b_proj") is None  # "*.attn.*" kept unquantized
    assert q.scheme_for("model.layers.0.mlp.shared_experts.up_proj") is None
    assert q.scheme_for("model.layers.1.mlp.experts.gate_proj") is None  # only layer 0 listed here
    # without the model_type the names stay as written and match nothing of the model
    q = parse_quantization({"quantization_config": quant})
    assert q is not None and q.scheme_for("model.layers.0.mlp.experts.gate_proj") is None

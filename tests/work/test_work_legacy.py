"""Hand-derived goldens for the GPT-era decoders (graphsim/work/builders/legacy.py).

Every expectation is arithmetic on the config's numbers, written out in the comments; none is read
back from the code under test. Conventions (docs/work.md): matmul 2·m·n·k, attention 2·S·H·d for
scores plus 2·S·H·d for values (S causal pairs per head), elementwise work (biases, ALiBi's score
bias, norms) not counted, parameters read once per step, KV read = cached positions attended.
The configs below carry the published checkpoints' dimensions (openai-community/gpt2,
bigscience/bloom-560m, facebook/opt-350m, tiiuae/falcon-7b model pages); the meta-model sweep in
test_work_config_defaults.py checks every class at its defaults and flipped layout flags.
"""

from __future__ import annotations

from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.engine_config import default_max_model_len
from graphsim.work import accounting, parse_step
from graphsim.work.registry import build_model
from graphsim.work.specs import GqaAttention
from graphsim.workload import WorkloadError

GPT2_SMALL = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257, "n_embd": 768,
              "n_layer": 12, "n_head": 12, "n_positions": 1024, "n_ctx": 1024}
# BLOOM's hub configs name the width n_embed (BloomConfig.__post_init__ takes it as hidden_size)
BLOOM_560M = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "vocab_size": 250880, "n_embed": 1024,
              "n_layer": 24, "num_attention_heads": 16}
OPT_350M = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 50272, "hidden_size": 1024,
            "ffn_dim": 4096, "num_hidden_layers": 24, "num_attention_heads": 16, "max_position_embeddings": 2048,
            "word_embed_proj_dim": 512, "do_layer_norm_before": False}
FALCON_7B = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": 65024,
             "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71, "multi_query": True,
             "parallel_attn": True, "bias": False, "alibi": False, "new_decoder_architecture": False}


def _step(cfg: dict[str, Any], prefill: tuple[str, ...] = (), decode: tuple[str, ...] = ()):
    return accounting(cfg).step(parse_step(list(prefill), list(decode)))


def test_gpt2_small_parameters():
    # vocab 50257, d 768, 12 layers, 1024 positions, MLP 4·768 = 3072, every linear and LayerNorm biased:
    # wte 50257·768 = 38,597,376; wpe 1024·768 = 786,432
    # per layer: ln_1 2·768 = 1,536; c_attn 768·2304 + 2304 = 1,771,776; c_proj 768·768 + 768 = 590,592;
    #   ln_2 1,536; c_fc 768·3072 + 3072 = 2,362,368; c_proj 3072·768 + 768 = 2,360,064 → 7,087,872
    # 12 layers 85,054,464; ln_f 1,536; lm_head tied (no parameters of its own)
    # 38,597,376 + 786,432 + 85,054,464 + 1,536 = 124,439,808 (the published GPT-2 small count)
    params = accounting(GPT2_SMALL).params()
    assert params.total == 124_439_808
    assert params.segment("embed").params == 38_597_376 + 786_432
    # activated: the position table is a lookup (one row a token), the tied token table is used whole by the head
    assert params.activated == 124_439_808 - 786_432 == 123_653_376


def test_gpt2_context_length_is_n_positions():
    # vLLM reads GPT-2's n_positions as the context length (vllm/config.py _get_and_verify_max_len possible_keys)
    assert default_max_model_len(GPT2_SMALL) == 1024


def test_gpt2_prefill_reads_one_position_row_per_token():
    # 8 new tokens from an empty cache: 8 rows of wte and 8 rows of wpe, 768 wide, 2 B (bf16: the config names
    # no dtype) = 2 · 8 · 768 · 2 = 24,576 B in `embed`, no FLOPs (lookups)
    embed = _step(GPT2_SMALL, prefill=("8@0",)).segment("embed")
    assert embed.param_read_bytes == 2 * 8 * 768 * 2 == 24_576
    assert embed.flops == 0


def test_gpt2_refuses_a_sequence_beyond_its_position_table():
    # wpe has 1024 rows: positions 0..1023. 1024 tokens fit; 1025 (prefill 1025@0 or decode 1x1024) cannot run.
    assert _step(GPT2_SMALL, prefill=("1024@0",)).total.flops > 0
    for prefill, decode in ((("1025@0",), ()), ((), ("1x1024",))):
        with pytest.raises(WorkloadError) as err:
            _step(GPT2_SMALL, prefill=prefill, decode=decode)
        assert "1025 tokens exceeds the 1024 positions" in str(err.value) and "\n" not in str(err.value)
    # OPT's table has max_position_embeddings + 2 rows, but indexes max_position_embeddings positions
    with pytest.raises(WorkloadError):
        _step(OPT_350M, prefill=("2049@0",))
    # CTRL's sinusoidal table is a buffer of n_positions rows (no parameters) indexed by position id: same bound
    ctrl = {"architectures": ["CTRLLMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 96,
            "n_positions": 256, "dff": 128}
    assert accounting(ctrl).params().segment("embed").params == 96 * 64  # the token table only
    with pytest.raises(WorkloadError):
        _step(ctrl, prefill=("257@0",))


def test_bloom_560m_parameters():
    # wte 250880·1024 = 256,901,120; word_embeddings_layernorm 2·1024 = 2,048
    # per layer: 2 LayerNorms 4,096; query_key_value 1024·3072 + 3072 = 3,148,800; dense 1024·1024 + 1024 =
    #   1,049,600; dense_h_to_4h 1024·4096 + 4096 = 4,198,400; dense_4h_to_h 4096·1024 + 1024 = 4,195,328
    #   → 12,596,224; 24 layers 302,309,376; ln_f 2,048; tied head
    # 256,901,120 + 2,048 + 302,309,376 + 2,048 = 559,214,592 (bigscience/bloom-560m model card)
    assert accounting(BLOOM_560M).params().total == 559_214_592


def test_bloom_560m_decode_flops_alibi():
    # One sequence, 1023 cached tokens: the new token attends to S = 1024 positions per head.
    # Per layer, weight matmuls on T = 1 row: qkv 2·3072·1024 + dense 2·1024·1024 + MLP 2·(4096·1024 + 1024·4096)
    #   = 6,291,456 + 2,097,152 + 16,777,216 = 25,165,824
    # attention core: scores 2·S·H·d = 2·1024·16·64 = 2,097,152, values the same → 4,194,304. ALiBi adds one
    #   bias per scored pair (S·H = 16,384 additions): elementwise, not counted, like the softmax.
    # 24 layers: 24 · (25,165,824 + 4,194,304) = 704,643,072; tied head 2·250880·1024 = 513,802,240
    # total 1,218,445,312
    report = _step(BLOOM_560M, decode=("1x1023",))
    assert report.attention_flops == 24 * 4_194_304 == 100_663_296
    assert report.segment("head").flops == 513_802_240
    assert report.total.flops == 704_643_072 + 513_802_240 == 1_218_445_312
    # KV: 16 heads · (64 K + 64 V) · 2 B = 4,096 B per token and layer; read 1023 cached, write 1 new
    assert report.total.state_read_bytes == 1023 * 4096 * 24 == 100_564_992
    assert report.total.state_write_bytes == 1 * 4096 * 24 == 98_304


def test_opt_350m_project_in_out_and_offset_positions():
    # word_embed_proj_dim 512 under hidden 1024: embed_tokens 50272·512 = 25,739,264; embed_positions
    # (2048 + 2 offset)·1024 = 2,099,200; project_in 512·1024 = 524,288; project_out 1024·512 = 524,288
    # per layer: q/k/v/out 4·(1024·1024 + 1024) = 4,198,400; fc1 1024·4096 + 4096 = 4,198,400; fc2 4096·1024 +
    #   1024 = 4,195,328; 2 LayerNorms 4,096 → 12,596,224; 24 layers 302,309,376
    # do_layer_norm_before false: no final LayerNorm. Tied head over the 512-wide table.
    # 25,739,264 + 2,099,200 + 524,288 + 524,288 + 302,309,376 = 331,196,416 (facebook/opt-350m: 331M)
    assert accounting(OPT_350M).params().total == 331_196_416
    # decode 4 sequences: project_out on the 4 sampled rows 2·4·1024·512 = 4,194,304 plus the tied head
    # 2·4·50272·512 = 205,914,112 → 210,108,416 in `head`; project_in on the 4 new tokens 2·4·512·1024 = 4,194,304
    report = _step(OPT_350M, decode=("4x100",))
    assert report.segment("head").flops == 4_194_304 + 205_914_112 == 210_108_416
    assert report.segment("embed").flops == 4_194_304


def test_falcon_7b_multi_query_kv_and_parameters():
    # head_dim 4544/71 = 64; multi_query: 1 KV head → K and V 2·64 values of 2 B = 256 B per token and layer,
    # 32 layers 8,192 B per token
    spec = build_model(FALCON_7B)
    attn = spec.stack.layers[0].attn
    assert isinstance(attn, GqaAttention) and (attn.kv_heads, attn.head_dim) == (1, 64)
    assert _step(FALCON_7B, decode=("1x0",)).total.state_write_bytes == 256 * 32 == 8_192
    # wte 65024·4544 = 295,469,056; per layer: one shared input_layernorm 2·4544 = 9,088; query_key_value
    # (4544 + 2·64)·4544 = 21,229,568; dense 4544² = 20,647,936; MLP 2·4544·18176 = 165,183,488 (no biases)
    #   → 207,070,080; 32 layers 6,626,242,560; ln_f 9,088; tied head
    # 295,469,056 + 6,626,242,560 + 9,088 = 6,921,720,704 (tiiuae/falcon-7b: 7B)
    assert accounting(FALCON_7B).params().total == 6_921_720_704


def test_falcon_7b_query_heads_take_no_tensor_parallelism():
    # 71 query heads: vLLM refuses any tp > 1 (ModelConfig.verify_with_parallel_config; FalconAttention also
    # asserts total_num_heads % tp_size == 0), though the single KV head would replicate
    from graphsim.serving.kv_layout import KvLayoutError, kv_layout

    acc = accounting(FALCON_7B)
    assert kv_layout(acc.spec, acc.precision, tp=1).bytes_per_token == 8_192
    with pytest.raises(KvLayoutError, match=r"attention heads \(71\) must be divisible by tensor parallel size \(2\)"):
        kv_layout(acc.spec, acc.precision, tp=2)


def test_falcon_new_decoder_architecture_groups_kv_heads():
    # Falcon-40B's shape: hidden 8192, 128 heads of 64, num_kv_heads 8, 60 layers, two norms (ln_attn, ln_mlp)
    # per layer under new_decoder_architecture. KV: 8·(64 + 64)·2 B = 2,048 B per token and layer, 60 layers
    # = 122,880 B per token.
    cfg = {"architectures": ["FalconForCausalLM"], "vocab_size": 65024, "hidden_size": 8192, "num_hidden_layers": 60,
           "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": True, "parallel_attn": True,
           "bias": False, "alibi": False}
    assert _step(cfg, decode=("1x0",)).total.state_write_bytes == 2_048 * 60 == 122_880
    # per layer: query_key_value (128 + 2·8)·64·8192 = 75,497,472; dense 8192² = 67,108,864; MLP 2·8192·32768 =
    # 536,870,912; ln_attn + ln_mlp 2·2·8192 = 32,768 → 679,510,016; 60 layers 40,770,600,960
    # wte 65024·8192 = 532,676,608; ln_f 16,384; tied head → 41,303,293,952
    assert accounting(cfg).params().total == 41_303_293_952


def test_gpt_bigcode_multi_query_kv_bytes():
    # GPTBigCodeConfig defaults: 12 layers, d 768, 12 heads of 64, multi_query → 1 KV head:
    # 2·64·2 B = 256 B per token and layer, 12 layers = 3,072 B per token
    cfg = {"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 49152}
    assert _step(cfg, decode=("1x0",)).total.state_write_bytes == 3_072


def test_gpt_neo_local_layers_read_their_window():
    # 2 layers, global then local (window 8), 4 heads of 16 (d 64); decode one token after 100 cached:
    # global: S = 101 pairs, reads 100 cached positions; local: S = min(101, 8) = 8, reads min(100, 8 − 1) = 7
    # KV per token and layer 4·(16 + 16)·2 B = 256 B → read (100 + 7)·256 = 27,392 B
    # core FLOPs 2·S·H·d = 2·S·4·16 = 128·S for the scores, the same for the values → 256·S:
    # 256·101 + 256·8 = 25,856 + 2,048 = 27,904
    cfg = {"architectures": ["GPTNeoForCausalLM"], "hidden_size": 64, "num_layers": 2, "num_heads": 4,
           "vocab_size": 96, "max_position_embeddings": 256, "window_size": 8,
           "attention_types": [[["global", "local"], 1]]}
    report = _step(cfg, decode=("1x100",))
    assert report.total.state_read_bytes == 107 * 256 == 27_392
    assert report.attention_flops == 256 * 101 + 256 * 8 == 27_904


def test_gpt_neox_japanese_dense_bias_only_in_the_last_layer():
    # GPTNeoXJapaneseAttention(use_bias=layer_number == num_hidden_layers - 1): one hidden-wide dense_bias
    cfg = {"architectures": ["GPTNeoXJapaneseForCausalLM"], "hidden_size": 64, "num_hidden_layers": 3,
           "num_attention_heads": 4, "vocab_size": 96}
    layers = build_model(cfg).stack.layers
    assert [isinstance(x.attn, GqaAttention) and x.attn.o_bias for x in layers] == [False, False, True]


@pytest.mark.parametrize(("cfg", "words"), [
    (dict(GPT2_SMALL, add_cross_attention=True), "add_cross_attention"),
    ({"architectures": ["MptForCausalLM"], "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 96,
      "expansion_ratio": 8}, "expansion_ratio"),
    ({"architectures": ["MptForCausalLM"], "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 96,
      "attn_config": {"attn_type": "multiquery_attention"}}, "attn_type"),
    (dict(GPT2_SMALL, n_head=7), "not divisible"),
    ({"architectures": ["GPTNeoForCausalLM"], "hidden_size": 64, "num_layers": 3, "num_heads": 4, "vocab_size": 96,
      "attention_types": [[["global", "local"], 1]]}, "attention_types expands to 2"),
])
def test_configs_transformers_would_not_build_are_refused_in_one_line(cfg, words):
    with pytest.raises(ConfigError) as err:
        build_model(cfg)
    assert words in str(err.value) and "\n" not in str(err.value)


# Layout variants the class defaults and single flag flips do not reach (tiny shapes); each must equal the
# transformers model built on the meta device from the same config.
VARIANTS = [
 ("FalconForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_kv_heads=2, new_decoder_architecture=True, num_ln_in_parallel_attn=1)),
 ("FalconForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=8, parallel_attn=False, multi_query=False, bias=True)),
 ("FalconForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=8, alibi=True, num_ln_in_parallel_attn=2)),
 ("FalconForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=8, ffn_hidden_size=100)),
 ("GPTNeoForCausalLM", dict(vocab_size=96, hidden_size=64, num_layers=3, num_heads=4, attention_types=[[["local"],2],[["global"],1]], window_size=5, intermediate_size=96, max_position_embeddings=64)),
 ("MptForCausalLM", dict(vocab_size=96, d_model=64, n_layers=2, n_heads=4, attn_config={"alibi": True, "clip_qkv": 8.0}, max_seq_len=64)),
 ("GPTBigCodeForCausalLM", dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, multi_query=False, n_inner=100)),
 ("GPTNeoXJapaneseForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_multiple_size=2)),
 ("GPT2LMHeadModel", dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_inner=100, tie_word_embeddings=False)),
 ("OPTForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=100, word_embed_proj_dim=32, do_layer_norm_before=True, _remove_final_layer_norm=True, enable_bias=False)),
 ("BioGptForCausalLM", dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=100, max_position_embeddings=64, tie_word_embeddings=False)),
 ("CodeGenForCausalLM", dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_inner=100, tie_word_embeddings=True, rotary_dim=8)),
 ("XGLMForCausalLM", dict(vocab_size=96, d_model=64, num_layers=2, attention_heads=4, ffn_dim=100, tie_word_embeddings=False)),
 ("CTRLLMHeadModel", dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, dff=100, tie_word_embeddings=False)),
 ("OpenAIGPTLMHeadModel", dict(vocab_size=96, n_embd=64, n_layer=2, n_head=4, tie_word_embeddings=False)),
 ("BloomForCausalLM", dict(vocab_size=96, n_embed=64, n_layer=2, n_head=4, tie_word_embeddings=False)),
]


@pytest.mark.parametrize(("arch", "cfg"), VARIANTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VARIANTS)])
def test_layout_variants_match_the_meta_model(arch: str, cfg: dict[str, Any]):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cls = getattr(transformers, arch)
    with torch.device("meta"):
        model = cls(cls.config_class(**cfg))
    persistent = set(model.state_dict(keep_vars=True))
    buffers = sum(b.numel() for name, b in model.named_buffers() if name in persistent)
    assert accounting(dict(cfg, architectures=[arch])).params().total == sum(p.numel() for p in model.parameters()) + buffers

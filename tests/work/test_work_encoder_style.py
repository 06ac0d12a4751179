"""Hand-derived goldens for the encoder-style LMs and encoder–decoder decoders (builders/encoder_style.py).

Every expectation is arithmetic on the config's numbers, written out in the comments; none is read back
from the code under test. Conventions (docs/work.md): matmul 2·m·n·k, the head and the LM-head transform
on one row per sequence, attention 2·S·H·d for scores plus 2·S·H·d for values, elementwise work not
counted. The meta-model sweep in test_work_config_defaults.py checks every class at its defaults; the
trait cases below flip the config fields that change which weights these classes build.
"""

from __future__ import annotations

from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.work import accounting, parse_step
from graphsim.workload import WorkloadError

# bert-base-uncased's dimensions (google-bert/bert-base-uncased config.json)
BERT_BASE = {"architectures": ["BertLMHeadModel"], "model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
             "max_position_embeddings": 512, "type_vocab_size": 2, "is_decoder": True}
# BartForCausalLM at BartConfig's class defaults: d_model 1024, 12 decoder layers, 16 heads, decoder_ffn_dim
# 4096, vocab 50265, max_position_embeddings 1024, tied head (the frame fields stated, the rest defaulted)
BART = {"architectures": ["BartForCausalLM"], "model_type": "bart", "d_model": 1024, "encoder_layers": 12,
        "encoder_attention_heads": 16, "vocab_size": 50265}
# MusicgenForCausalLM at MusicgenDecoderConfig's defaults: hidden 1024, 24 layers, 16 heads, ffn 4096,
# vocab 2048, 4 codebooks
MUSICGEN = {"architectures": ["MusicgenForCausalLM"], "model_type": "musicgen_decoder", "hidden_size": 1024,
            "num_hidden_layers": 24, "num_attention_heads": 16, "vocab_size": 2048}


def _step(cfg: dict[str, Any], prefill: tuple[str, ...] = (), decode: tuple[str, ...] = ()):
    return accounting(cfg).step(parse_step(list(prefill), list(decode)))


def test_bert_base_parameters():
    # word 30522·768 = 23,440,896; positions 512·768 = 393,216; token types 2·768 = 1,536; embedding LayerNorm
    #   2·768 = 1,536
    # per layer: query/key/value/output.dense 4·(768·768 + 768) = 2,362,368; attention LayerNorm 1,536;
    #   intermediate 768·3072 + 3072 = 2,362,368; output 3072·768 + 768 = 2,360,064; output LayerNorm 1,536
    #   → 7,087,872; 12 layers 85,054,464
    # head: transform dense 768·768 + 768 = 590,592, transform LayerNorm 1,536, bias 30,522; decoder tied
    # 23,440,896 + 393,216 + 1,536 + 1,536 + 85,054,464 + 590,592 + 1,536 + 30,522 = 109,514,298
    # (bert-base's 110M)
    params = accounting(BERT_BASE).params()
    assert params.total == 109_514_298
    assert params.segment("head").params == 590_592 + 1_536 + 30_522
    # activated: the position and token-type tables are lookups; the tied word table is used whole by the head
    assert params.activated == 109_514_298 - 393_216 - 1_536 == 109_119_546


def test_bert_base_transform_runs_on_sampled_rows_only():
    # 8 new tokens of one sequence: the transform (2·768·768 = 1,179,648) and the tied head (2·30522·768 =
    # 46,881,792) see one row → 48,061,440, whatever the token count
    assert _step(BERT_BASE, prefill=("8@0",)).segment("head").flops == 1_179_648 + 46_881_792 == 48_061_440
    # the embeddings, each distinct row read once (min(T, rows)), 768 wide, 2 B (bf16: no dtype in the config):
    # word 8 rows 12,288 B, positions 8 rows 12,288 B, token types min(8, 2) = 2 rows 3,072 B, and the
    # LayerNorm's weight and bias 2·768·2 = 3,072 B → 30,720 B
    assert _step(BERT_BASE, prefill=("8@0",)).segment("embed").param_read_bytes == 12_288 * 2 + 3_072 * 2 == 30_720


def test_bart_class_defaults_parameters():
    # embed_tokens 50265·1024 = 51,471,360; embed_positions (1024 + 2)·1024 = 1,050,624 (the offset of 2);
    #   layernorm_embedding 2·1024 = 2,048
    # per layer: self_attn q/k/v/out 4·(1024·1024 + 1024) = 4,198,400; self_attn_layer_norm 2,048;
    #   encoder_attn 4,198,400; encoder_attn_layer_norm 2,048; fc1 1024·4096 + 4096 = 4,198,400;
    #   fc2 4096·1024 + 1024 = 4,195,328; final_layer_norm 2,048 → 16,796,672; 12 layers 201,560,064
    # lm_head tied, no bias
    # 51,471,360 + 1,050,624 + 2,048 + 201,560,064 = 254,084,096
    params = accounting(BART).params()
    assert params.total == 254_084_096
    # the idle cross-attention: 12 · (4,198,400 + 2,048) = 50,405,376, none of it activated
    assert params.segment("layers.attn.cross").params == 50_405_376
    assert params.segment("layers.attn.cross").params_activated == 0
    # activated: total − the position lookup table − the idle cross-attention = 202,628,096
    assert params.activated == 254_084_096 - 1_050_624 - 50_405_376 == 202_628_096


def test_bart_decode_counts_self_attention_only():
    # one sequence with 99 cached tokens: the new token attends to S = 100 positions, 16 heads of 64
    # weight matmuls per layer (T = 1): q/k/v/out 4·2·1024·1024 = 8,388,608; fc1 + fc2 2·2·1024·4096 =
    #   16,777,216 → 25,165,824; the cross-attention does nothing; 12 layers 301,989,888
    # tied head 2·50265·1024 = 102,942,720 → matmul 404,932,608
    # attention core: 2·S·H·d + 2·S·H·d = 4·100·1024 = 409,600 per layer; 12 layers 4,915,200
    report = _step(BART, decode=("1x99",))
    assert report.matmul_flops == 301_989_888 + 102_942_720 == 404_932_608
    assert report.attention_flops == 12 * 409_600 == 4_915_200
    cross = report.segment("layers.attn.cross")
    assert (cross.flops, cross.param_read_bytes, cross.state_read_bytes) == (0, 0, 0)
    # KV written for the new token: K and V of the self-attention, 12 · 2 · 1024 · 2 B = 49,152 B
    assert report.total.state_write_bytes == 49_152
    assert any("cross-attention parameters are counted but do no work" in n for n in report.notes)


def test_musicgen_codebooks():
    # 4 tables of (2048 + 1)·1024 = 8,392,704; per layer: self_attn 4·1024·1024 = 4,194,304 (no biases),
    #   encoder_attn 4,194,304 (idle), fc1 + fc2 2·1024·4096 = 8,388,608 (no biases), three LayerNorms
    #   3·2·1024 = 6,144 → 16,783,360; 24 layers 402,800,640; final layer_norm 2,048
    # heads: 4 · 2048·1024 = 8,388,608, untied, no bias
    # 8,392,704 + 402,800,640 + 2,048 + 8,388,608 = 419,584,000
    assert accounting(MUSICGEN).params().total == 419_584_000
    report = _step(MUSICGEN, decode=("1x10",))
    # one row from each of the 4 tables: 4·1024·2 B = 8,192 B; 4 heads on the sampled row: 4·2·2048·1024
    assert report.segment("embed").param_read_bytes == 8_192
    assert report.segment("head").flops == 16_777_216


def test_factorised_tables_size_the_head():
    # ELECTRA (ElectraConfig defaults): hidden 256, embedding_size 128, vocab 30522, tied. One sampled row:
    # generator_predictions.dense 2·256·128 = 65,536, then the tied table 2·30522·128 = 7,813,632 → 7,879,168
    electra = {"architectures": ["ElectraForCausalLM"], "model_type": "electra", "hidden_size": 256,
               "num_hidden_layers": 12, "num_attention_heads": 4, "vocab_size": 30522}
    assert _step(electra, decode=("1x10",)).segment("head").flops == 7_879_168
    # and the new token's embeddings_project (128 → 256) runs in `embed`: 2·256·128 = 65,536
    assert _step(electra, decode=("1x10",)).segment("embed").flops == 65_536
    # RemBERT (RemBertConfig defaults): hidden 1152, output_embedding_size 1664, vocab 250300, untied. One row:
    # dense 2·1152·1664 = 3,833,856, decoder 2·250300·1664 = 832,998,400 → 836,832,256
    rembert = {"architectures": ["RemBertForCausalLM"], "model_type": "rembert", "hidden_size": 1152,
               "num_hidden_layers": 32, "num_attention_heads": 18, "vocab_size": 250300}
    assert _step(rembert, decode=("1x10",)).segment("head").flops == 836_832_256


def test_whisper_v_bias_without_k_bias():
    # whisper-tiny's decoder: d_model 384, 4 layers, 6 heads; k_proj has no bias, q/v/out do
    cfg = {"architectures": ["WhisperForCausalLM"], "model_type": "whisper", "d_model": 384, "encoder_layers": 4,
           "encoder_attention_heads": 6, "decoder_layers": 4, "decoder_attention_heads": 6, "vocab_size": 51865}
    qkv = accounting(cfg).params().segment("layers.attn.qkv").params
    # per layer q, k, v 3·384·384 = 442,368, q and v biases 2·384 = 768 → 443,136; 4 layers 1,772,544
    assert qkv == 1_772_544


@pytest.mark.parametrize(("arch", "field", "value", "fix"), [
    ("XLMWithLMHeadModel", "asm", True, "adaptive-softmax"),
    ("XLMWithLMHeadModel", "is_encoder", False, "set it to true"),
    ("MvpForCausalLM", "use_prompt", True, "set it to false"),
])
def test_unexpressed_options_are_refused_by_name(arch, field, value, fix):
    cfg = {"architectures": [arch], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, field: value}
    with pytest.raises(ConfigError, match=fix) as err:
        accounting(cfg)
    assert "\n" not in str(err.value) and field in str(err.value)


def test_git_image_encoder_is_counted_but_idle():
    # GitConfig defaults: text hidden 768, 6 layers, vocab 30522, 1024 positions; one decoded token reads one row of
    # the word and position tables (2 · 768 · 2 B = 3,072 B) and the embedding LayerNorm (2 · 768 · 2 B = 3,072 B);
    # the image encoder (GitVisionConfig: 768 wide, 12 layers, 224 px / 16 px patches) reads nothing
    cfg = {"architectures": ["GitForCausalLM"], "model_type": "git", "hidden_size": 768, "num_hidden_layers": 6,
           "num_attention_heads": 12, "vocab_size": 30522}
    report = _step(cfg, decode=("1x10",))
    assert report.segment("embed").param_read_bytes == 3_072 + 3_072
    # the image side: class embedding 768; patch conv 768·3·16·16 = 589,824; positions (14² + 1)·768 = 151,296;
    #   pre/post LayerNorms 2·2·768 = 3,072; per layer 4·(768·768 + 768) + 2·2·768 + (768·3072 + 3072)
    #   + (3072·768 + 768) = 2,362,368 + 3,072 + 2,362,368 + 2,360,064 = 7,087,872, 12 layers 85,054,464;
    #   visual_projection 768·768 + 768 + 2·768 = 592,128 → 86,391,552 idle
    # activated: total − idle − the text position table 1024·768 = 786,432 − the untied word table 30522·768 =
    #   23,440,896 (lookups)
    params = accounting(cfg).params()
    assert params.activated == params.total - 86_391_552 - 786_432 - 23_440_896


def test_mllama_text_skips_its_cross_attention_layers():
    # MllamaTextConfig defaults (Llama-3.2-11B-Vision's text model): hidden 4096, 40 layers of which 8 are
    # cross-attention layers (3, 8, …, 38), 32 heads, 8 KV heads of 128, intermediate 14336, vocab 128256
    cfg = {"architectures": ["MllamaForCausalLM"], "model_type": "mllama_text_model", "hidden_size": 4096,
           "num_hidden_layers": 40, "num_attention_heads": 32, "vocab_size": 128256}
    # parameters: embed (128256 + 8)·4096 = 525,369,344; lm_head 128256·4096 = 525,336,576; final norm 4,096
    #   self layer: q/o 2·4096·4096 = 33,554,432, k/v 2·1024·4096 = 8,388,608, MLP 3·4096·14336 = 176,160,768,
    #   norms 8,192 → 218,112,000; 32 of them 6,979,584,000
    #   cross layer: the same matrices and norms, q_norm/k_norm 2·128 = 256, two gates 2 → 218,112,258; 8 of them
    #   1,744,898,064
    # 525,369,344 + 525,336,576 + 4,096 + 6,979,584,000 + 1,744,898,064 = 9,775,192,080
    assert accounting(cfg).params().total == 9_775_192_080
    # one decoded token writes K and V in the 32 self-attention layers only: 32 · 2 · 8 · 128 · 2 B = 131,072 B
    report = _step(cfg, decode=("1x100",))
    assert report.total.state_write_bytes == 131_072
    assert report.sum(lambda name: ".cross" in name).flops == 0


def test_stored_position_tables_bound_the_sequence():
    # BART: max_position_embeddings 1024 (the table's 1026 rows include the offset of 2): 1024 tokens run, 1025 do not
    _step(BART, prefill=("1024@0",))
    with pytest.raises(WorkloadError, match="1024 positions"):
        _step(BART, decode=("1x1024",))
    # RoBERTa: ids start at pad_token_id + 1 = 2 (create_position_ids_from_input_ids), so a 514-row table indexes
    # 514 − 2 = 512 tokens (roberta-base: max_position_embeddings 514, pad_token_id 1)
    roberta = dict(BERT_BASE, architectures=["RobertaForCausalLM"], max_position_embeddings=514, pad_token_id=1,
                   type_vocab_size=1, vocab_size=50265)
    _step(roberta, prefill=("512@0",))
    with pytest.raises(WorkloadError, match="512 positions"):
        _step(roberta, prefill=("513@0",))
    # MusicGen's sinusoid is computed, not stored: no bound
    _step(MUSICGEN, prefill=("4096@0",))


def test_is_decoder_false_is_stated():
    notes = accounting(dict(BERT_BASE, is_decoder=False)).params().notes
    assert any("bidirectionally" in n for n in notes)
    assert not any("bidirectionally" in n for n in accounting(BERT_BASE).params().notes)


# --- meta-model cross-check of the traits these classes read (transformers builds the same config) -------

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TRAIT_CASES = [
    ("BertLMHeadModel", {"add_cross_attention": True, "is_decoder": True}),
    ("BertLMHeadModel", {"tie_word_embeddings": False}),  # cls.predictions.bias no longer tied: held, idle
    ("BigBirdForCausalLM", {"use_bias": False, "add_cross_attention": True, "is_decoder": True}),
    ("ElectraForCausalLM", {"tie_word_embeddings": False}),
    ("ElectraForCausalLM", {"embedding_size": 256}),  # = hidden: no embeddings_project
    ("RoFormerForCausalLM", {"embedding_size": 384}),
    ("RemBertForCausalLM", {"input_embedding_size": 1152, "output_embedding_size": 1152}),
    ("RoCBertForCausalLM", {"enable_shape": False}),
    ("RoCBertForCausalLM", {"concat_input": False}),
    ("XmodForCausalLM", {"languages": ["en_XX", "de_DE", "fr_XX"], "adapter_layer_norm": True}),
    ("XmodForCausalLM", {"pre_norm": True}),
    ("XLMWithLMHeadModel", {"n_langs": 3}),
    ("ErnieForCausalLM", {"use_task_id": True}),
    ("ModernBertDecoderForCausalLM", {"attention_bias": True, "mlp_bias": True, "norm_bias": True,
                                      "classifier_bias": True, "decoder_bias": False}),
    ("TrOCRForCausalLM", {"use_learned_position_embeddings": False, "layernorm_embedding": False,
                          "cross_attention_hidden_size": 768}),
    ("BigBirdPegasusForCausalLM", {"use_bias": True}),
    ("MarianForCausalLM", {"decoder_vocab_size": 1000, "tie_word_embeddings": False, "pad_token_id": 0,
                           "decoder_start_token_id": 0}),
    ("BlenderbotForCausalLM", {"encoder_layers": 2, "decoder_layers": 3}),
    ("MusicgenForCausalLM", {"num_codebooks": 8}),
    ("GitForCausalLM", {"num_image_with_embedding": 6, "vision_config": {
        "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
        "image_size": 384, "patch_size": 14}}),
]


@pytest.mark.parametrize(("arch", "over"), TRAIT_CASES, ids=[f"{a}-{'-'.join(o)}" for a, o in TRAIT_CASES])
def test_trait_parameter_count_equals_the_meta_model(arch: str, over: dict[str, Any]):
    cls = getattr(transformers, arch)
    cfg = dict(cls.config_class().to_dict(), **over)
    hf = cls.config_class(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type",
                                                                         "transformers_version")})
    with torch.device("meta"):
        model = cls(hf)
    persistent = set(model.state_dict(keep_vars=True))
    meta = sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for name, b in model.named_buffers() if name in persistent)
    assert accounting(dict(cfg, architectures=[arch])).params().total == meta

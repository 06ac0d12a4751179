"""State-space and short-conv families (graphsim/work/builders/ssm.py), by hand.

Every expected number is arithmetic on the config's values written out here, never read back from
the code under test. Parameter counts of every registered class against transformers' own model are
in test_work_config_defaults.py (built on the meta device); here: hand goldens for a Mamba-2.8B-like
Mamba-1 stack and for LFM2-1.2B, the per-request state as vLLM allocates it, and the schedules.
"""

from __future__ import annotations

import json

import pytest
from work_helpers import check

from graphsim.cli.app import main
from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import KvKind, kv_layout, layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import DenseFfn, GqaAttention, Mamba1Mixer, Mamba2Mixer, MoeFfn, NoFfn, ShortConv

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)


def _buckets(cfg: dict, prefill=(), decode=()) -> dict:
    r = accounting(cfg).step(parse_step(list(prefill), list(decode)))
    t = r.total
    return {"matmul_flops": r.matmul_flops, "attention_flops": r.attention_flops,
            "param_read_bytes": t.param_read_bytes, "state_read_bytes": t.state_read_bytes,
            "state_write_bytes": t.state_write_bytes}


# --- Mamba-1: MambaForCausalLM class defaults at state-spaces/mamba-2.8b-hf's size -----------------
# MambaConfig defaults (transformers models/mamba): state_size 16, conv_kernel 4, expand 2, time_step_rank
# "auto", use_bias false, use_conv_bias true, tie_word_embeddings true, vocab 50280. Hidden 2560 and 64
# layers as Mamba-2.8B.
MAMBA = {"architectures": ["MambaForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50280}
MH, ML, MV = 2560, 64, 50280
D_IN = 2 * 2560  # intermediate = expand · hidden = 5120
DT_RANK = 160  # ⌈2560 / 16⌉
M_IN = 2 * D_IN * MH  # in_proj (x, z): 26,214,400
M_X = (DT_RANK + 2 * 16) * D_IN  # x_proj (dt, B, C): 983,040
M_DT = D_IN * DT_RANK  # dt_proj: 819,200
M_OUT = MH * D_IN  # out_proj: 13,107,200
M_MATRICES = M_IN + M_X + M_DT + M_OUT  # 41,123,840
M_CONV = D_IN * 4  # depthwise conv weight: 20,480
# conv bias 5120, dt_proj bias 5120, A_log 5120·16 = 81,920, D 5120, the layer's RMSNorm 2560
M_OTHER = D_IN + D_IN + D_IN * 16 + D_IN + MH
M_TABLE = MV * MH  # 128,716,800 (tied: also the head)
M_TOTAL = ML * (M_MATRICES + M_CONV + M_OTHER) + M_TABLE + MH  # + norm_f
# Per request and layer (vLLM mamba1_state_shape, bf16): conv (4 − 1) × 5120, ssm 5120 × 16
M_STATE = (3 * D_IN + D_IN * 16) * 2  # 30,720 + 163,840 = 194,560 B


def test_mamba_parameters_by_hand():
    p = accounting(MAMBA).params()
    assert M_TOTAL == 2_768_345_600  # 64 · 41,244,160 + 128,716,800 + 2,560, evaluated once by hand
    assert p.total == M_TOTAL
    # every layer is a Mamba mixer; the tied table counts as activated (the head multiplies by it)
    assert p.activated == M_TOTAL
    assert p.total == pytest.approx(2.8e9, rel=0.015)  # "mamba-2.8b"


def test_mamba_spec_and_state_per_request():
    spec = build_model(MAMBA)
    mixer = spec.stack.layers[0].attn
    assert isinstance(mixer, Mamba1Mixer) and isinstance(spec.stack.layers[0].ffn, NoFfn)
    assert (mixer.intermediate, mixer.dt_rank, mixer.state_size, mixer.conv_kernel) == (D_IN, DT_RANK, 16, 4)
    one = layer_kv(spec, 1, BF16)
    assert {(k.kind, k.state_bytes) for k in one} == {(KvKind.STATE, M_STATE)} and len(one) == ML
    assert kv_layout(spec, BF16, tp=1).state_bytes_per_request == ML * M_STATE == 12_451_840
    # tp 2: both states split over the intermediate channels (2560 each)
    assert {k.state_bytes for k in layer_kv(spec, 2, BF16)} == {(3 * 2560 + 2560 * 16) * 2}
    # --state-dtype float32: conv and ssm (mamba_ssm_cache_dtype "auto" follows the conv state's dtype)
    fp32 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.FLOAT32)
    assert {k.state_bytes for k in layer_kv(spec, 1, fp32)} == {2 * M_STATE}


def test_mamba_decode_one_sequence_after_1000():
    # per token and layer: the scan 4 · 5120 · 16 (update and read-out) and the conv 2 · 5120 · 4
    core = 4 * D_IN * 16 + 2 * D_IN * 4
    check(_buckets(MAMBA, decode=["1x1000"]), {
        "matmul_flops": 2 * ML * M_MATRICES + 2 * MV * MH,  # the tied head on the one sampled row
        "attention_flops": ML * core,
        "param_read_bytes": 2 * (MH + M_TOTAL),  # one embedding row + every weight (the head reads the table)
        "state_read_bytes": ML * M_STATE,
        "state_write_bytes": ML * M_STATE,
    })


def test_mamba_prefill_reads_no_state():
    got = _buckets(MAMBA, prefill=["512@0"])
    assert got["state_read_bytes"] == 0 and got["state_write_bytes"] == ML * M_STATE
    assert got["attention_flops"] == ML * 512 * (4 * D_IN * 16 + 2 * D_IN * 4)


# --- LFM2-1.2B ----------------------------------------------------------------------------------
# LiquidAI/LFM2-1.2B config.json (huggingface.co/LiquidAI/LFM2-1.2B), as public repositories copy it
# verbatim, less the fields no count reads. Its legacy keys: block_ff_dim (→ intermediate_size),
# full_attn_idxs (→ layer_types) and tie_embedding (→ tie_word_embeddings), as Lfm2Config reads them.
LFM2 = {
    "architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": True, "block_dim": 2048, "block_ff_dim": 12288,
    "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "conv_L_cache": 3, "conv_bias": False,
    "conv_dim": 2048, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048, "max_position_embeddings": 128000,
    "model_type": "lfm2", "norm_eps": 1e-05, "num_attention_heads": 32, "num_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "rope_theta": 1000000.0, "torch_dtype": "bfloat16", "vocab_size": 65536,
    "tie_embedding": True,
}
H, V = 2048, 65536
N_CONV, N_ATTN = 10, 6
FF = 8192  # int(2 · 12288 / 3) = 8192, × 1.0, rounded up to a multiple of 256: 8192
C_MATRICES = 3 * H * H + H * H  # in_proj (B, C, x) 12,582,912 + out_proj 4,194,304
C_CONV = H * 3  # depthwise conv, conv_L_cache taps, no bias
A_MATRICES = H * H + 2 * H * (8 * 64) + H * H  # q, k, v (8 kv heads · 64), out_proj: 10,485,760
A_NORMS = 2 * 64  # q_layernorm, k_layernorm over one head
F_MATRICES = 3 * H * FF  # w1, w3, w2: 50,331,648
TABLE = V * H  # 134,217,728, tied
L_TOTAL = (N_CONV * (C_MATRICES + C_CONV) + N_ATTN * (A_MATRICES + A_NORMS) + 16 * (F_MATRICES + 2 * H)
           + TABLE + H)  # + operator_norm and ffn_norm per layer, + embedding_norm (the final norm)
C_STATE = H * (3 - 1) * 2  # per conv layer and request: 2048 channels × (L_cache − 1) × 2 B = 8,192 B
A_KV = 2 * 8 * 64 * 2  # K and V, 8 kv heads × 64 × 2 B = 2,048 B per token and layer


def test_lfm2_parameters_by_hand_and_against_the_model_card():
    p = accounting(LFM2).params()
    assert L_TOTAL == 1_170_340_608  # the sum above, evaluated once by hand
    assert p.total == L_TOTAL
    assert p.total == pytest.approx(1.17e9, rel=0.005)  # model card: 1.17 B parameters


def test_lfm2_schedule():
    spec = build_model(LFM2)
    kinds = [type(layer.attn) for layer in spec.stack.layers]
    assert [i for i, k in enumerate(kinds) if k is GqaAttention] == [2, 5, 8, 10, 12, 14]
    assert kinds.count(ShortConv) == N_CONV
    ffn = spec.stack.layers[0].ffn
    assert isinstance(ffn, DenseFfn) and ffn.intermediate == FF
    assert spec.tie_embeddings


def test_lfm2_short_conv_state_and_kv():
    spec = build_model(LFM2)
    one = layer_kv(spec, 1, BF16)
    assert sorted((k.kind.value, k.bytes_per_token, k.state_bytes) for k in one) == sorted(
        [("state", 0, C_STATE)] * N_CONV + [("full", A_KV, 0)] * N_ATTN)
    lay = kv_layout(spec, BF16, tp=1)
    assert lay.state_bytes_per_request == N_CONV * C_STATE == 81_920
    assert lay.bytes_per_token == N_ATTN * A_KV == 12_288
    # tp 2: 1024 conv channels per rank; 4 of the 8 kv heads
    assert {(k.kind, k.bytes_per_token, k.state_bytes) for k in layer_kv(spec, 2, BF16)} == {
        (KvKind.STATE, 0, C_STATE // 2), (KvKind.FULL, A_KV // 2, 0)}
    with pytest.raises(Exception, match="not divisible by tp = 3"):
        layer_kv(spec, 3, BF16)


def test_lfm2_decode_one_sequence_after_1000():
    token_matrices = N_CONV * C_MATRICES + N_ATTN * A_MATRICES + 16 * F_MATRICES  # 1,035,993,088
    check(_buckets(LFM2, decode=["1x1000"]), {
        "matmul_flops": 2 * token_matrices + 2 * V * H,  # the tied head on the one sampled row
        # conv layers: the depthwise conv 2 · 2048 · 3; attention: 1001 positions × 32 heads × (64 + 64) × 2
        "attention_flops": N_CONV * 2 * H * 3 + N_ATTN * 2 * 1001 * 32 * 128,
        "param_read_bytes": 2 * (H + L_TOTAL),
        "state_read_bytes": N_CONV * C_STATE + N_ATTN * 1000 * A_KV,
        "state_write_bytes": N_CONV * C_STATE + N_ATTN * A_KV,
    })


def test_kv_cli_gives_a_state_layout(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    (tmp_path / "lfm2").mkdir()
    (tmp_path / "lfm2" / "config.json").write_text(json.dumps(LFM2))
    assert main(["kv", str(tmp_path / "lfm2" / "config.json"), "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"]["state_bytes_per_request_per_rank"] == 81_920
    assert d["layout"]["bytes_per_token_per_rank"] == 12_288
    # Mamba's config states no context length: --max-model-len replaces vLLM's fallback of 2048
    (tmp_path / "mamba").mkdir()
    (tmp_path / "mamba" / "config.json").write_text(json.dumps(MAMBA))
    args = ["kv", str(tmp_path / "mamba" / "config.json"), "--gpu", "h100", "--max-model-len", "8192", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"]["state_bytes_per_request_per_rank"] == 12_451_840
    assert d["capacity"]["blocks_per_request"] == 1  # one state page per request


# --- schedules and refusals ---------------------------------------------------------------------
def test_jamba_schedule_attention_every_period_moe_every_other():
    # JambaConfig defaults: attention where i % 8 == 4, experts where i % 2 == 1 (16 experts, top 2)
    cfg = {"architectures": ["JambaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 16,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 96}
    spec = build_model(cfg)
    attn = [i for i, la in enumerate(spec.stack.layers) if isinstance(la.attn, GqaAttention)]
    moe = [i for i, la in enumerate(spec.stack.layers) if isinstance(la.ffn, MoeFfn)]
    assert attn == [4, 12] and moe == list(range(1, 16, 2))
    mixer = spec.stack.layers[0].attn
    assert isinstance(mixer, Mamba1Mixer) and mixer.dt_norms and mixer.intermediate == 128 and mixer.dt_rank == 4


def test_granite_hybrid_legacy_layer_names_and_dense_variant():
    cfg = {"architectures": ["GraniteMoeHybridForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4,
           "num_attention_heads": 4, "vocab_size": 100, "mamba_n_heads": 8, "mamba_d_state": 16,
           "layer_types": ["mamba", "attention", "mamba", "mamba"], "num_local_experts": 0,
           "shared_intermediate_size": 96}
    spec = build_model(cfg)
    kinds = [type(la.attn) for la in spec.stack.layers]
    assert kinds == [Mamba2Mixer, GqaAttention, Mamba2Mixer, Mamba2Mixer]
    ffn = spec.stack.layers[0].ffn
    assert isinstance(ffn, DenseFfn) and ffn.intermediate == 96  # no experts: the shared MLP alone
    mixer = spec.stack.layers[0].attn
    assert isinstance(mixer, Mamba2Mixer) and mixer.ssm_dtype is None  # vLLM: mamba_ssm_cache_dtype "auto"
    assert (mixer.heads, mixer.head_dim) == (8, 16)  # mamba_d_head "auto" = 2 · 64 / 8


def test_refusals_are_one_line_config_errors():
    bad_mamba2 = {"architectures": ["Mamba2ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
                  "vocab_size": 100, "num_heads": 3, "head_dim": 16, "n_groups": 1}
    with pytest.raises(ConfigError, match=r"num_heads 3 × head dim 16 != expand × hidden_size 128"):
        build_model(bad_mamba2)
    no_types = {"architectures": ["Lfm2MoeForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 100}
    with pytest.raises(ConfigError, match="missing 'layer_types'"):
        build_model(no_types)
    bad_types = dict(LFM2, layer_types=["conv"] * 15 + ["mamba"])
    with pytest.raises(ConfigError, match=r"layer_types\[15\] is 'mamba'"):
        build_model(bad_types)


# --- Falcon-H1: attention and Mamba2 side by side, FalconH1Config's class defaults -------------------
# hidden 4096, 32 layers, 32 heads / 8 kv heads (head_dim 4096 / 32 = 128), MLP 14336, vocab 128000, untied;
# Mamba2: mamba_d_ssm 1024 wide, 128 heads of 1024 / 128 = 8, d_state 256, 1 group, conv 4; no gated norm
# (mamba_rms_norm false), no projection biases.
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "vocab_size": 128000}
FH, FV = 4096, 128000
F_ATTN = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096  # q, k, v (8 · 128), o: 41,943,040
F_CONV_DIM = 1024 + 2 * 1 * 256  # 1536
F_MAMBA_M = (1024 + F_CONV_DIM + 128) * FH + FH * 1024  # in_proj (z, xBC, dt) 11,010,048 + out_proj 4,194,304
F_MAMBA_OTHER = F_CONV_DIM * 4 + F_CONV_DIM + 3 * 128  # conv weight and bias, dt_bias / A_log / D
F_MLP = 3 * FH * 14336  # 176,160,768
F_LAYER = F_ATTN + F_MAMBA_M + F_MAMBA_OTHER + F_MLP + 2 * FH  # + input_layernorm, pre_ff_layernorm
F_TABLE = FV * FH
F_TOTAL = 32 * F_LAYER + 2 * F_TABLE + FH
F_STATE = F_CONV_DIM * 3 * 2 + 128 * 8 * 256 * 2  # conv 9,216 + ssm 524,288 (bf16: vLLM's "auto") per layer
F_KV = 2 * 8 * 128 * 2  # 4,096 B per token and layer


def test_falcon_h1_parameters_state_and_decode_by_hand():
    assert F_TOTAL == 8_514_961_408  # 32 · 233,324,416 + 2 · 524,288,000 + 4,096, evaluated once by hand
    assert accounting(FALCON_H1).params().total == F_TOTAL
    spec = build_model(FALCON_H1)
    lay = kv_layout(spec, BF16, tp=1)
    # every layer keeps both: an attention KV cache and a Mamba2 state (vLLM: two cache specs per layer)
    assert (lay.bytes_per_token, lay.state_bytes_per_request) == (32 * F_KV, 32 * F_STATE) == (131_072, 17_072_128)
    check(_buckets(FALCON_H1, decode=["1x1000"]), {
        "matmul_flops": 2 * 32 * (F_ATTN + F_MAMBA_M + F_MLP) + 2 * FV * FH,
        # attention over 1001 positions × 32 heads × (128 + 128) × 2; the SSD update and read-out 4 · 128 · 8 · 256;
        # the conv 2 · 1536 · 4
        "attention_flops": 32 * (2 * 1001 * 32 * 256 + 4 * 128 * 8 * 256 + 2 * F_CONV_DIM * 4),
        "param_read_bytes": 2 * (FH + F_TOTAL - F_TABLE),
        "state_read_bytes": 32 * (F_STATE + 1000 * F_KV),
        "state_write_bytes": 32 * (F_STATE + F_KV),
    })


# `graphsim kv` at each family's class defaults (the config states only the frame fields), tp 2: state per request
# and KV per token per rank, by hand (vLLM's state shapes; groups not divisible by tp extended to tp).
KV_AT_CLASS_DEFAULTS = {
    # 32 layers × (conv 1536/2 × 3 + ssm 1536/2 × 16) × 2 B; hidden 768, d_inner 1536
    "MambaForCausalLM": (32 * (768 * 3 + 768 * 16) * 2, 0),
    "FalconMambaForCausalLM": (32 * (768 * 3 + 768 * 16) * 2, 0),
    # 64 layers × (conv (8192 + 2·8·128)/2 × 3 + 64 heads × 64 × 128) × 2 B
    "Mamba2ForCausalLM": (64 * (5120 * 3 + 64 * 64 * 128) * 2, 0),
    # 28 Mamba layers × (4096 × 3 + 4096 × 16) × 2 B; 4 attention layers × 2 × 4 kv heads × 128 × 2 B
    "JambaForCausalLM": (28 * (4096 * 3 + 4096 * 16) * 2, 4 * 2 * 4 * 128 * 2),
    # 32 Mamba2 layers: 1 group extended to 2 → conv (8192 + 2·2·256)/2 × 3, ssm 64 heads × 64 × 256; × 2 B
    "BambaForCausalLM": (32 * (4608 * 3 + 64 * 64 * 256) * 2, 0),
    "GraniteMoeHybridForCausalLM": (32 * (4608 * 3 + 64 * 64 * 256) * 2, 0),
    # every layer attention (full_attn_idxs absent): 32 × 2 × 4 kv heads × 80 × 2 B
    "Lfm2ForCausalLM": (0, 32 * 2 * 4 * 80 * 2),
    # layer_types below: 24 conv layers × 1024 channels × 2 × 2 B; 8 attention × 2 × 4 × 64 × 2 B
    "Lfm2MoeForCausalLM": (24 * 1024 * 2 * 2, 8 * 2 * 4 * 64 * 2),
    # 13 conv layers × 1024 × (7 − 1) × 2 B; 6 full + 5 sliding layers × 2 × 2 kv heads × 128 × 2 B
    "Lfm3ForCausalLM": (13 * 1024 * 6 * 2, 11 * 2 * 2 * 128 * 2),
    # 32 layers: Mamba2 (1 group → 2) conv (1024 + 2·2·256)/2 × 3 + 64 heads × 8 × 256, × 2 B; KV 2 × 4 × 128 × 2 B
    "FalconH1ForCausalLM": (32 * (1024 * 3 + 64 * 8 * 256) * 2, 32 * 2 * 4 * 128 * 2),
    # 54 Mamba2 mixers: 1 group → 2, conv (5120 + 2·2·64)/2 × 3 + 4 heads × 640 × 64, × 2 B; 9 hybrid layers' KV:
    # 2 × 16 heads × 160 × 2 B
    "Zamba2ForCausalLM": (54 * (2688 * 3 + 4 * 640 * 64) * 2, 9 * 2 * 16 * 160 * 2),
}


@pytest.mark.parametrize("arch", sorted(KV_AT_CLASS_DEFAULTS))
def test_kv_cli_at_class_defaults(arch, tmp_path, capsys, monkeypatch):
    from graphsim.work.config_defaults import class_defaults

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    d = class_defaults(arch)
    cfg = {"architectures": [arch], **{k: d[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                          "vocab_size") if k in d}}
    if arch == "Lfm2MoeForCausalLM":  # the class has no default list
        cfg["layer_types"] = ["full_attention" if i % 4 == 2 else "conv" for i in range(32)]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    args = ["kv", str(tmp_path / "config.json"), "--gpu", "h100", "--tp", "2", "--max-model-len", "4096", "--json"]
    assert main(args) == 0
    lay = json.loads(capsys.readouterr().out)["layout"]
    assert (lay["state_bytes_per_request_per_rank"], lay["bytes_per_token_per_rank"]) == KV_AT_CLASS_DEFAULTS[arch]


# --- Zamba2: Mamba2 layers and hybrid layers around one shared transformer block, class defaults -----
# Zamba2Config(): hidden 2560, 54 layers of which 9 hybrid (6, 12, …, 42, 47, 51), 32 heads = 32 kv heads of
# 2·2560 / 32 = 160, MLP 4·2560 = 10240, vocab 32000 tied; Mamba2 inner 2·2560 = 5120 in 8 heads of 640, d_state
# 64, 1 group, conv 4; adapter rank 128; one shared block (num_mem_blocks 1).
ZAMBA2 = {"architectures": ["Zamba2ForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 54,
          "num_attention_heads": 32, "vocab_size": 32000}
Z_CONV_DIM = 5120 + 2 * 64  # 5248
Z_MAMBA_M = (5120 + Z_CONV_DIM + 8) * 2560 + 2560 * 5120  # in_proj 26,562,560 + out_proj 13,107,200
Z_MAMBA = Z_MAMBA_M + Z_CONV_DIM * 4 + Z_CONV_DIM + 3 * 8 + 5120 + 2560  # + conv, vectors, gated norm, layer norm
Z_SHARED_M = 3 * 5120 * 5120 + 2560 * 5120 + 2 * 10240 * 2560 + 2560 * 10240  # q, k, v, o, gate_up, down
Z_SHARED = Z_SHARED_M + 5120 + 2560  # + its two norms: 170,401,280
Z_OWN = 2560 * 2560 + 128 * 2560 + 2 * 10240 * 128  # per hybrid layer: linear + gate_up adapter = 9,502,720
Z_TABLE = 32000 * 2560
Z_TOTAL = 54 * Z_MAMBA + Z_SHARED + 9 * Z_OWN + Z_TABLE + 2560
Z_STATE = Z_CONV_DIM * 3 * 2 + 8 * 640 * 64 * 2  # 31,488 + 655,360 per Mamba2 mixer and request
Z_KV = 2 * 32 * 160 * 2  # 20,480 B per token and hybrid layer (vLLM: one KV cache per hybrid layer)


def test_zamba2_shared_block_counted_once_used_nine_times():
    assert Z_TOTAL == 2_481_848_336  # 54 · 39,703,704 + 170,401,280 + 9 · 9,502,720 + 81,920,000 + 2,560, by hand
    assert accounting(ZAMBA2).params().total == Z_TOTAL
    lay = kv_layout(build_model(ZAMBA2), BF16, tp=1)
    assert (lay.bytes_per_token, lay.state_bytes_per_request) == (9 * Z_KV, 54 * Z_STATE) == (184_320, 37_089_792)
    check(_buckets(ZAMBA2, decode=["1x1000"]), {
        # every Mamba2 mixer once; the shared block's matrices at each of the 9 hybrid layers; each hybrid layer's
        # own linear and adapter; the tied head on the sampled row
        "matmul_flops": 2 * (54 * Z_MAMBA_M + 9 * Z_SHARED_M + 9 * Z_OWN) + 2 * Z_TABLE,
        "attention_flops": 54 * (4 * 8 * 640 * 64 + 2 * Z_CONV_DIM * 4) + 9 * 2 * 1001 * 32 * 320,
        "param_read_bytes": 2 * (2560 + Z_TOTAL),  # the shared block read once per step
        "state_read_bytes": 54 * Z_STATE + 9 * 1000 * Z_KV,
        "state_write_bytes": 54 * Z_STATE + 9 * Z_KV,
    })
    with pytest.raises(ConfigError, match="tie_word_embeddings false makes transformers untie"):
        build_model(dict(ZAMBA2, tie_word_embeddings=False))


def test_zamba2_two_memory_blocks_against_the_meta_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    # 5 hybrid layers; hybrid layer k uses block k mod 2: block 0 serves 3, block 1 serves 2; each block holds the
    # adapters of the layers it serves (Zamba2MLP / Zamba2Attention: i % num_mem_blocks == block_id)
    cfg = transformers.Zamba2Config(num_mem_blocks=2, use_shared_attention_adapter=True, hidden_size=256,
                                    num_attention_heads=8, vocab_size=500, adapter_rank=16, n_mamba_heads=4,
                                    num_hidden_layers=10, layers_block_type=["linear_attention", "hybrid"] * 5)
    with torch.device("meta"):
        model = transformers.Zamba2ForCausalLM(cfg)
    spec = build_model(dict(cfg.to_dict(), architectures=["Zamba2ForCausalLM"]))
    assert accounting(dict(cfg.to_dict(), architectures=["Zamba2ForCausalLM"])).params().total == sum(
        p.numel() for p in model.parameters())
    uses = sorted({w.uses for layer in spec.stack.layers for w in layer.attn_extras if w.uses > 1})
    assert uses == [2, 3]


# --- Jamba-v0.1: JambaConfig's class defaults are its shape ---------------------------------------
# hidden 4096, 32 layers (attention where i % 8 == 4: 4 layers; Mamba-1 elsewhere: 28), 32 heads / 8 kv heads of
# 128, experts where i % 2 == 1 (16 layers of 16 experts, top 2; dense MLP on the other 16), MLP 14336, vocab
# 65536 untied; Mamba-1: d_inner 2·4096 = 8192, d_state 16, conv 4, dt_rank ⌈4096/16⌉ = 256.
JAMBA = {"architectures": ["JambaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "vocab_size": 65536}
J_MAMBA = (2 * 8192 * 4096 + 8192 * 4 + 8192 + (256 + 32) * 8192 + 8192 * 256 + 8192 + 8192 * 16 + 8192
           + 8192 * 4096 + 256 + 16 + 16)  # in, conv (+bias), x_proj, dt_proj (+bias), A_log, D, out, dt/B/C norms
J_ATTN = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096
J_EXPERT = 3 * 4096 * 14336  # 176,160,768
J_TABLE = 65536 * 4096
J_TOTAL = (28 * J_MAMBA + 4 * J_ATTN + 32 * 2 * 4096 + 16 * J_EXPERT + 16 * (16 * 4096 + 16 * J_EXPERT)
           + 2 * J_TABLE + 4096)


def test_jamba_v01_parameters_kv_and_state_by_hand():
    assert J_MAMBA == 105_308_448 and J_TOTAL == 51_570_323_328  # evaluated once by hand
    p = accounting(JAMBA).params()
    assert p.total == J_TOTAL
    assert p.activated == J_TOTAL - J_TABLE - 16 * 14 * J_EXPERT == 11_841_875_840  # 2 of 16 experts
    # model card (huggingface.co/ai21labs/Jamba-v0.1): 52 B total, 12 B active
    assert p.total == pytest.approx(52e9, rel=0.01)
    assert p.activated == pytest.approx(12e9, rel=0.025)
    lay = kv_layout(build_model(JAMBA), BF16, tp=1)
    # KV: 4 attention layers × 2 × 8 kv heads × 128 × 2 B; state: 28 × (8192 × 3 + 8192 × 16) × 2 B
    assert (lay.bytes_per_token, lay.state_bytes_per_request) == (16_384, 28 * (8192 * 3 + 8192 * 16) * 2)

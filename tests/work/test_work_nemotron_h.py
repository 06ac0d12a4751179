"""Nemotron-H / NVIDIA-Nemotron-3: single-block hybrid layers (Mamba2, attention, MLP, MoE), by hand.

Every expected number is arithmetic on the config's values written out here, never read back from
the code under test. The config below is nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16's config.json
(as aiconfigurator-core ships it, model_configs/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json),
less the fields no count reads.
"""

from __future__ import annotations

import pytest
from work_helpers import check

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import KvKind, KvLayoutError, layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import DenseFfn, GqaAttention, Mamba2Mixer, MoeFfn, NoAttention, NoFfn

NANO = {
    "architectures": ["NemotronHForCausalLM"], "hidden_size": 2688, "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 131072,
    "intermediate_size": 1856, "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128,
    "n_groups": 8, "conv_kernel": 4, "use_conv_bias": True, "use_bias": False, "mamba_ssm_cache_dtype": "float32",
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712, "mlp_bias": False, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
H, V = 2688, 131072
# Pattern: 23 × M (Mamba2), 23 × E (MoE), 6 × * (attention), no - (MLP); 52 layers.
N_M, N_E, N_A = 23, 23, 6
# Mamba2: inner 64 heads × 64 = 4096; conv_dim 4096 + 2·8 groups·128 = 6144; in_proj 4096 + 6144 + 64 = 10304.
M_MATRICES = 10304 * H + H * 4096  # in_proj 27,697,152 + out_proj 11,010,048
M_CONV = 6144 * 4  # depthwise conv weight (channels × kernel)
M_OTHER = 6144 + 3 * 64 + 4096 + H  # conv bias, dt_bias/A_log/D, gated norm, layer norm
# Attention: q 2688 → 32·128, k/v 2688 → 2·128 each, o 4096 → 2688; no biases; one norm.
A_MATRICES = H * 4096 + 2 * H * 256 + 4096 * H  # 23,396,352
# MoE: router 128 × 2688 + the score-correction buffer 128; ungated experts up + down 2·1856·2688;
# ungated shared expert 2·3712·2688; one norm.
E_ROUTER = 128 * H
E_EXPERT = 2 * 1856 * H  # 9,977,856
E_SHARED = 2 * 3712 * H  # 19,955,712
E_OTHER = 128 + H
TABLE = V * H  # 352,321,536

TOTAL = (N_M * (M_MATRICES + M_CONV + M_OTHER) + N_A * (A_MATRICES + H)
         + N_E * (E_ROUTER + 128 * E_EXPERT + E_SHARED + E_OTHER) + 2 * TABLE + H)
ACTIVATED = TOTAL - TABLE - N_E * (128 - 6) * E_EXPERT  # 6 of 128 experts; the input table is a lookup
# Per layer and request: SSM state 64·64·128 fp32 (mamba_ssm_cache_dtype) + conv state 6144·3 bf16.
M_STATE = 64 * 64 * 128 * 4 + 6144 * 3 * 2  # 2,097,152 + 36,864 = 2,134,016 B
A_KV = 2 * 2 * 128 * 2  # K and V, 2 kv heads × 128 × 2 B = 1024 B per token


def test_nano_layer_schedule():
    spec = build_model(NANO)
    kinds = [(type(la.attn), type(la.ffn)) for la in spec.stack.layers]
    assert kinds.count((Mamba2Mixer, NoFfn)) == N_M
    assert kinds.count((NoAttention, MoeFfn)) == N_E
    assert kinds.count((GqaAttention, NoFfn)) == N_A
    assert kinds[:6] == [(Mamba2Mixer, NoFfn), (NoAttention, MoeFfn)] * 2 + [(Mamba2Mixer, NoFfn), (GqaAttention, NoFfn)]


def test_nano_parameters_by_hand_and_against_the_model_card():
    p = accounting(NANO).params()
    assert (p.total, p.activated) == (TOTAL, ACTIVATED)
    assert TOTAL == 31_577_940_288 and ACTIVATED == 3_227_754_816  # the sums above, evaluated once by hand
    # Model card (huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): 31.6 B total, 3.2 B active
    # (3.6 B counting the embeddings).
    assert p.total == pytest.approx(31.6e9, rel=0.005)
    assert p.activated == pytest.approx(3.2e9, rel=0.025)
    assert p.activated + TABLE == pytest.approx(3.6e9, rel=0.025)


def _buckets(prefill=(), decode=()) -> dict:
    r = accounting(NANO).step(parse_step(list(prefill), list(decode)))
    t = r.total
    return {"matmul_flops": r.matmul_flops, "attention_flops": r.attention_flops,
            "param_read_bytes": t.param_read_bytes, "state_read_bytes": t.state_read_bytes,
            "state_write_bytes": t.state_write_bytes}


# Matrices one token passes through: Mamba in/out, attention q/k/v/o, router, 6 experts, shared expert.
TOKEN_MATRICES = N_M * M_MATRICES + N_A * A_MATRICES + N_E * (E_ROUTER + 6 * E_EXPERT + E_SHARED)
# Per token: the SSD recurrence 4·heads·head_dim·state (update and read-out) and the conv 2·6144·4.
M_CORE_PER_TOKEN = 4 * 64 * 64 * 128 + 2 * 6144 * 4


def test_nano_prefill_512_at_0():
    n = 512
    # expected distinct experts 128·(1 − (122/128)^512) = 128 − 2.7e-9: all but a sliver of one expert
    touched = 128 * (1 - (122 / 128) ** n)
    weights = TOTAL - TABLE - N_E * (128 - touched) * E_EXPERT
    check(_buckets(prefill=["512@0"]), {
        "matmul_flops": 2 * n * TOKEN_MATRICES + 2 * H * V,  # head on the one sampled row
        "attention_flops": N_M * n * M_CORE_PER_TOKEN + N_A * 2 * (n * (n + 1) // 2) * 32 * (128 + 128),
        "param_read_bytes": 2 * (n * H + weights),  # n embedding rows + every other weight
        "state_read_bytes": 0,  # nothing cached: no KV read, no state read
        "state_write_bytes": N_M * M_STATE + N_A * n * A_KV,
    })


def test_nano_decode_one_sequence_after_1000():
    c = 1000
    # one token: exactly 6 experts per MoE layer (128·(1 − 122/128) = 6)
    weights = TOTAL - TABLE - N_E * (128 - 6) * E_EXPERT
    check(_buckets(decode=["1x1000"]), {
        "matmul_flops": 2 * TOKEN_MATRICES + 2 * H * V,
        "attention_flops": N_M * M_CORE_PER_TOKEN + N_A * 2 * (c + 1) * 32 * 256,
        "param_read_bytes": 2 * (H + weights),
        "state_read_bytes": N_M * M_STATE + N_A * c * A_KV,
        "state_write_bytes": N_M * M_STATE + N_A * A_KV,
    })


def test_nano_kv_state_per_rank():
    spec = build_model(NANO)
    bf16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)
    one = layer_kv(spec, 1, bf16)
    assert len(one) == N_M + N_A  # MoE-only layers keep nothing
    assert {(k.kind, k.bytes_per_token, k.state_bytes) for k in one} == {(KvKind.STATE, 0, M_STATE),
                                                                        (KvKind.FULL, A_KV, 0)}
    # tp 4: 16 heads · 64 · 128 · 4 B = 524,288 + conv 6144/4 = 1536 channels · 3 · 2 B = 9,216
    four = {k.state_bytes for k in layer_kv(spec, 4, bf16) if k.kind is KvKind.STATE}
    assert four == {524_288 + 9_216}
    # tp 8: 8 groups, one per rank: 8 heads · 64 · 128 · 4 B = 262,144 + conv 6144/8 = 768 channels · 3 · 2 B = 4,608
    eight = {k.state_bytes for k in layer_kv(spec, 8, bf16) if k.kind is KvKind.STATE}
    assert eight == {262_144 + 4_608}
    # tp 16: 16 does not divide the 8 groups, and vLLM's MambaMixer2 pads only a single group
    # (mamba_mixer2.py: assert n_groups % tp == 0 or n_groups == 1): refused in one line, as vLLM does
    with pytest.raises(KvLayoutError, match="n_groups = 8 is neither 1 nor divisible by tp = 16"):
        layer_kv(spec, 16, bf16)


TINY = {
    "architectures": ["NemotronHForCausalLM"], "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 4, "vocab_size": 10, "intermediate_size": 6, "mamba_num_heads": 2, "mamba_head_dim": 4,
    "ssm_state_size": 3, "n_groups": 1, "conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 5, "moe_shared_expert_intermediate_size": 7,
}


def test_pattern_legacy_names_and_the_default_list():
    via_list = build_model(dict(TINY, layers_block_type=["mamba", "attention", "mlp", "moe"]))
    via_pattern = build_model(dict(TINY, hybrid_override_pattern="M*-E"))
    default = build_model(TINY)  # NemotronHConfig's default list: linear_attention, moe, full_attention, mlp
    assert via_list.stack == via_pattern.stack
    assert [la.attn.kind.value for la in default.stack.layers] == ["mamba", "none", "full", "none"]
    assert [la.ffn.kind.value for la in default.stack.layers] == ["none", "moe", "none", "dense"]
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        build_model(dict(TINY, hybrid_override_pattern="M*X"))
    with pytest.raises(ConfigError, match="layers_block_type"):
        build_model(dict(TINY, layers_block_type=["mamba", "sliding_attention"]))


def test_tiny_parameters_by_hand():
    spec = build_model(dict(TINY, hybrid_override_pattern="M*-E", moe_latent_size=3, mlp_bias=True))
    mlp = spec.stack.layers[2].ffn
    assert isinstance(mlp, DenseFfn) and not mlp.gated and mlp.bias
    # Mamba: inner 2·4 = 8, conv_dim 8 + 2·1·3 = 14, in_proj (8 + 14 + 2) × 8 = 192, conv 14·4 + 14 = 70,
    #   dt_bias/A_log/D 3·2 = 6, gated norm 8, out_proj 8·8 = 64, layer norm 8 → 348.
    # Attention: q 8·8 + k 4·8 + v 4·8 + o 8·8 = 192, norm 8 → 200.
    # MLP (ungated, biased): up 6·8 + 6, down 8·6 + 8 → 110, norm 8 → 118.
    # MoE (latent 3, biased latent projections and shared expert): router 4·8 + score bias 4 = 36,
    #   fc1 3·8 + 3 = 27, experts 4·(5·3 + 3·5) = 120, fc2 8·3 + 8 = 32, shared up 7·8 + 7 + down 8·7 + 8 = 127,
    #   norm 8 → 350. Embedding 80, final norm 8, head 80.
    p = accounting(dict(TINY, hybrid_override_pattern="M*-E", moe_latent_size=3, mlp_bias=True)).params()
    assert p.total == 348 + 200 + 118 + 350 + 80 + 8 + 80
    # activated: 2 of 4 experts (−60) and no input table (−80)
    assert p.activated == p.total - 2 * 30 - 80


@pytest.mark.slow
def test_analyze_reports_r6_r7_for_nano_at_tp1_tp8_and_ep8(tmp_path, monkeypatch):
    """`graphsim analyze` finds the shipped mamba2-hybrid-moe maps for Nemotron-3 Nano and its rows
    reconcile with the accountant (TP1, TP8 and TP8 + EP8, the shared expert on the aux stream in each)."""
    pytest.importorskip("torch")
    import json

    from graphsim.analysis import analyze_prepared, prepare_model
    from graphsim.importers.hf import import_hf

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # roofline pricing, no profile.db
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(NANO, model_type="nemotron_h")))
    graph, _ = import_hf(str(path))
    # EP over the TP group (8, 8) exchanges nothing (passes/partition/ep.py): the TP graph, its map
    for tp, ep, map_id in ((1, 1, "mamba2-hybrid-moe v1"), (8, 1, "mamba2-hybrid-moe v1"),
                           (8, 8, "mamba2-hybrid-moe v1")):
        a = analyze_prepared(prepare_model(str(path), gpu="h200", tp=tp, ep=ep, batch="mixed:1x512@1024+16x4096",
                                           graph=graph))
        assert a.necessary_work_available, (tp, ep, a.reason)
        assert a.map_id == map_id
        assert a.reconciliation is not None and a.reconciliation.ok, a.reconciliation

"""Asymmetric q/k and v head widths (MiMo-V2-Flash), by hand."""

from __future__ import annotations

from graphsim.serving.kv_layout import layer_kv
from graphsim.work import build_model
from graphsim.work.attention_work import attention_core
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import DenseFfn, GqaAttention, LayerSpec
from graphsim.work.weights import attention_weights
from graphsim.workload import SeqGroup

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)
ATTN = GqaAttention(hidden=8, heads=2, kv_heads=1, head_dim=4, value_dim=2)


def test_weights_flops_and_kv_of_asymmetric_heads():
    # q 2·4 × 8 = 64, k 1·4 × 8 = 32, v 1·2 × 8 = 16, o 8 × 2·2 = 32, input norm 8 → 152.
    assert sum(w.elements for w in attention_weights(ATTN)) == 152
    # Decode after 3 cached: 4 pairs; 2·4·2 heads·(4 + 2) = 96 FLOPs. KV per token 1·(4 + 2)·2 B = 12 B:
    # read 3·12 = 36, written 12.
    work = attention_core(ATTN, SeqGroup(new_tokens=1, cached_tokens=3), BF16)
    assert (work.flops, work.state_read_bytes, work.state_write_bytes) == (96, 36, 12)


def test_mimo_v2_flash_layers():
    cfg = {
        "architectures": ["MiMoV2FlashForCausalLM"], "hidden_size": 16, "num_hidden_layers": 7,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6, "v_head_dim": 4, "vocab_size": 10,
        "intermediate_size": 32, "moe_intermediate_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "sliding_window_size": 128,
    }
    spec = build_model(cfg)
    attn = [la.attn for la in spec.stack.layers]
    assert all(isinstance(a, GqaAttention) for a in attn)
    # layer 0 and layer 5 ((5 + 1) % 6 == 0) full; the rest slide over 128 + 1 positions with 2 × 2 kv heads.
    windows = [a.window for a in attn if isinstance(a, GqaAttention)]
    assert windows == [None, 129, 129, 129, 129, None, 129]
    assert [a.kv_heads for a in attn if isinstance(a, GqaAttention)] == [2, 4, 4, 4, 4, 2, 4]
    assert isinstance(spec.stack.layers[0].ffn, DenseFfn) and not isinstance(spec.stack.layers[1].ffn, DenseFfn)
    # KV per token: full 2·(6 + 4)·2 B = 40 B; sliding 4·(6 + 4)·2 B = 80 B.
    kv = layer_kv(spec, 1, BF16)
    assert [k.bytes_per_token for k in kv] == [40, 80, 80, 80, 80, 40, 80]
    assert isinstance(spec.stack.layers[0], LayerSpec)

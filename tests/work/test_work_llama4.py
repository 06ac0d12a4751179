"""Llama-4 text: chunked local attention, NoPE full layers, interleaved MoE with a shared expert (by hand)."""

from __future__ import annotations

import numpy as np

from graphsim.serving.kv_layout import KvKind, kv_layout
from graphsim.work import accounting, build_model
from graphsim.work.attention_math import chunked_cached_read, chunked_new_kept, chunked_pairs
from graphsim.work.specs import GqaAttention, MoeFfn

TINY = {
    "architectures": ["Llama4ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 10, "intermediate_size": 6, "intermediate_size_mlp": 12,
    "num_local_experts": 2, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 8,
    "max_position_embeddings": 64,
}


def test_chunked_attention_counts():
    # C = 3, 4 new tokens from position 0: positions 0,1,2 | 3 → 1 + 2 + 3 + 1 = 7 pairs.
    assert chunked_pairs(4, 0, 3) == 7
    # C = 4, decode at position 10 (chunk 8..11): 10 mod 4 + 1 = 3 pairs; cached 8, 9 read = 2.
    assert chunked_pairs(1, 10, 4) == 3 and chunked_cached_read(10, 4) == 2
    # The next position 11 is in the same chunk: the new token is kept (1); after 3 new tokens
    # (positions 10, 11, 12) the next position 13 is in chunk 12..15: only position 12 is kept.
    assert chunked_new_kept(1, 10, 4) == 1 and chunked_new_kept(3, 10, 4) == 1


def test_layers_and_parameters():
    spec = build_model(TINY)
    attn = [layer.attn for layer in spec.stack.layers]
    assert all(isinstance(a, GqaAttention) for a in attn)
    # no_rope_layer_interval 4 (default): layer 3 is NoPE → full; 0-2 RoPE → chunked (8)
    assert [a.chunk for a in attn if isinstance(a, GqaAttention)] == [8, 8, 8, None]
    # interleave_moe_layer_step 2: MoE layers 1, 3
    assert [isinstance(layer.ffn, MoeFfn) for layer in spec.stack.layers] == [False, True, False, True]
    # Per layer: q 8·8 + k 4·8 + v 4·8 + o 8·8 = 192, two norms 16 → 208; × 4 = 832.
    # Dense FFN 3·8·12 = 288; MoE: router 2·8 = 16 + experts 2·3·8·6 = 288 + shared 3·8·6 = 144 → 448.
    # FFNs 288 + 448 + 288 + 448 = 1472. Embedding 80, final norm 8, untied head 80. Total 2472.
    assert accounting(TINY).params().total == 2472


def test_chunked_kv_group_admission_and_held_blocks():
    acc = accounting(TINY)
    layout = kv_layout(acc.spec, acc.precision, tp=1, block_size=4)
    kinds = {g.kind for g in layout.groups}
    assert kinds == {KvKind.CHUNKED, KvKind.FULL}
    chunked = next(g for g in layout.groups if g.kind is KvKind.CHUNKED)
    # One chunk (8) + 4 in-flight tokens, capped at 64: cdiv(12, 4) = 3 blocks (ChunkedLocalAttentionSpec)
    assert chunked.admission_blocks(64, 4) == 3
    # computed 10, new 1: end 11 → 3 blocks; the chunk starts at 8 → blocks 0, 1 freed: 1 held per chunked
    # group, plus cdiv(11, 4) = 3 for each full group.
    groups = layout.groups
    expected = sum(1 if g.kind is KvKind.CHUNKED else 3 for g in groups)
    assert int(layout.held_blocks(np.asarray([10]), 1)[0]) == expected

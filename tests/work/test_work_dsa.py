"""DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): indexer weights, core work and KV bytes, by hand."""

from __future__ import annotations

import json

import pytest
from work_helpers import load_config

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import layer_kv
from graphsim.work import accounting, build_model
from graphsim.work.attention_work import attention_core
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import DsaIndexer, MlaAttention
from graphsim.workload import SeqGroup

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)


def _mla(shared: bool = False) -> MlaAttention:
    ix = DsaIndexer(hidden=16, q_lora_rank=8, heads=2, head_dim=4, topk=3, shared=shared)
    return MlaAttention(
        hidden=16, heads=2, q_lora_rank=8, kv_lora_rank=4, qk_nope_head_dim=3, qk_rope_head_dim=2, v_head_dim=3,
        indexer=ix,
    )


def test_decode_core_work_with_an_indexer():
    # One sequence, 1 new token after p = 10 cached; top-k 3.
    # Sparse pairs: min(10 + 1, 3) = 3; cached latents read: min(10, 1·3) = 3.
    # Absorbed core: 2·3·2·(2·4 + 2) = 120 (decompressed: 2·3·4·2·6 + 2·3·2·8 = 384, so absorbed).
    # Indexer: causal pairs over the whole context 11 × 2 heads × (2·4 + 2) = 220.  Total 340.
    # Bytes: latent (4 + 2)·2 B = 12 B/token, read 3·12 = 36, written 12; index keys 4 + 4//128·4 = 4 B/token,
    # read 10·4 = 40, written 4.  Read 76, written 16.
    work = attention_core(_mla(), SeqGroup(count=1, new_tokens=1, cached_tokens=10), BF16)
    assert (work.flops, work.state_read_bytes, work.state_write_bytes, work.form) == (340, 76, 16, "absorbed")


def test_shared_indexer_layer_reuses_the_selection():
    # A "shared" layer runs no indexer: the core alone (120 FLOPs), latents only (36 read, 12 written).
    work = attention_core(_mla(shared=True), SeqGroup(count=1, new_tokens=1, cached_tokens=10), BF16)
    assert (work.flops, work.state_read_bytes, work.state_write_bytes) == (120, 36, 12)


def test_prefill_pairs_are_capped_at_top_k():
    # 4 new tokens, nothing cached, top-k 3: pairs 1 + 2 + 3 + 3 = 9; indexer pairs 1+2+3+4 = 10.
    # Absorbed 2·9·2·10 = 360; decompressed has no cached latents: 2·9·2·8 = 288 < 360, so decompressed.
    # Indexer 10 × 2 × 10 = 200.  Total 488.  Written: 4·12 + 4·4 = 64.
    work = attention_core(_mla(), SeqGroup(count=1, new_tokens=4, cached_tokens=0), BF16)
    assert (work.flops, work.state_read_bytes, work.state_write_bytes, work.form) == (488, 0, 64, "decompressed")


def _v32() -> dict:
    cfg = json.loads(json.dumps(load_config("DeepSeek-V3")))
    # DeepSeek-V3.2's config.json is DeepSeek-V3's plus the indexer (deepseek-ai/DeepSeek-V3.2 on HF).
    cfg.update(architectures=["DeepseekV32ForCausalLM"], index_n_heads=64, index_head_dim=128, index_topk=2048)
    return cfg


def test_v32_indexer_parameters_and_kv_bytes():
    spec = build_model(_v32())
    attn = spec.stack.layers[0].attn
    assert isinstance(attn, MlaAttention) and attn.indexer is not None
    # Per layer: wq_b 1536 → 64·128 = 12,582,912; wk 7168 → 128 = 917,504; k_norm 128 + 128;
    # weights_proj 7168 → 64 = 458,752.  Sum 13,959,424; × 61 layers = 851,524,864 more than V3.
    v3 = accounting(load_config("DeepSeek-V3")).params().total
    assert accounting(_v32()).params().total - v3 == 851_524_864
    # KV per token and layer: (512 + 64)·2 B = 1152 B latent + 128 + 128//128·4 = 132 B index key = 1284 B.
    assert layer_kv(spec, 8, BF16)[0].bytes_per_token == 1284


def test_glm5_indexer_types_drop_shared_layers():
    cfg = _v32()
    cfg["indexer_types"] = ["full", "shared"] * (cfg["num_hidden_layers"] // 2) + ["full"]
    spec = build_model(cfg)
    shared = [la.attn.indexer.shared for la in spec.stack.layers if isinstance(la.attn, MlaAttention) and la.attn.indexer]
    assert shared.count(True) == 30 and shared.count(False) == 31
    # 30 shared layers hold no indexer: 30 × 13,959,424 fewer parameters than all-full.
    assert accounting(_v32()).params().total - accounting(cfg).params().total == 30 * 13_959_424


@pytest.mark.parametrize("bad", [["shared"] * 61, ["full"] * 60, ["full", "half"] + ["full"] * 59])
def test_bad_indexer_types_are_refused(bad):
    cfg = _v32()
    cfg["indexer_types"] = bad
    with pytest.raises(ConfigError, match="indexer_types"):
        build_model(cfg)

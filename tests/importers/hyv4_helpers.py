"""A tiny HunYuan-V4 config shared by the importer and passes tests (iHC ops, the DSA indexer's rope half,
attention gates, packed GEMMs; tests/passes/conftest.py puts this folder on the path)."""

# A tiny HY-V4: hidden 64 in 3 iHC streams (post magnitude 1.5), a dense then a sparse layer, MLA attention with a
# 2-head indexer whose picks the second layer shares.
TINY_HYV4 = {
    "architectures": ["HYV4ForCausalLM"], "model_type": "hy_v4", "torch_dtype": "bfloat16", "vocab_size": 96,
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32, "q_lora_rank": 48, "kv_lora_rank": 32,
    "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "mlp_layer_types": ["dense", "sparse"], "layer_types": ["indexed_attention"] * 2,
    "indexer_types": ["full", "shared"], "index_topk": 4, "index_head_dim": 16, "index_n_heads": 2, "hc_mult": 3,
    "hc_magnitude": 1.5, "hc_eps": 1e-6, "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2,
}

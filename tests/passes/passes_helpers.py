"""Helpers for the pass tests: tiny configs derived from catalog configs, kernel summaries."""

import copy

from graphsim.catalog import resolve_model
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind


def tiny_config(name: str, **overrides) -> dict:
    cfg = copy.deepcopy(resolve_model(name).config)
    cfg.pop("quantization_config", None)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
               max_position_embeddings=256)
    cfg.update(overrides)
    return cfg


def kernels_of_layer(graph, layer):
    return [n for n in graph.nodes if n.layer == layer and isinstance(n.attrs, KernelAttrs)]


def gemm_flops_per_token(node) -> int:
    g = node.kernel.geometry_as(GemmGeometry)
    return 2 * g.n * g.k


def attention_width(node) -> int:
    g = node.kernel.geometry_as(AttentionGeometry)
    return g.num_heads * g.head_dim


def is_kind(node, kind: KernelKind) -> bool:
    return isinstance(node.attrs, KernelAttrs) and node.attrs.kind is kind


# A tiny Zamba2 (test_zamba2_tp.py, test_fuse_zamba2_ops.py): layer 0 a Mamba2 layer, layer 1 a hybrid layer (the
# shared transformer + its projection `linear`, then Mamba2).
# Mamba2: 4 heads × 32 = intermediate 128 (= expand 2 × hidden 64), one group, state 16. Shared attention reads
# concat(hidden, original) = 128 wide; MLP intermediate 96 (gate_up 192), LoRA rank 8 on gate_up.
ZAMBA2 = {
    "architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"], "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_mamba_heads": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
    "mamba_ngroups": 1, "num_mem_blocks": 1, "use_shared_attention_adapter": False, "adapter_rank": 8,
    "vocab_size": 96, "max_position_embeddings": 256, "chunk_size": 8, "use_mem_rope": False, "hidden_act": "gelu",
    "torch_dtype": "bfloat16",
}

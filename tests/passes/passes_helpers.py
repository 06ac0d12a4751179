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

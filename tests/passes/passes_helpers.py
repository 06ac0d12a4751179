"""Helpers for the pass tests: tiny configs derived from catalog configs, kernel summaries."""

import copy

from graphsim.catalog import resolve_model
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
    a = node.attrs
    return 2 * int(a.geo("n")) * int(a.geo("k"))


def attention_width(node) -> int:
    a = node.attrs
    return int(a.geo("num_heads")) * int(a.geo("head_dim"))


def is_kind(node, kind: KernelKind) -> bool:
    return isinstance(node.attrs, KernelAttrs) and node.attrs.kind is kind

"""graphsim's tensor-graph IR: ops, tensor specs, typed attributes, nodes, graphs."""

from graphsim.ir.attrs import (
    AttentionAttrs, CastAttrs, CollectiveAttrs, ConvAttrs, EmbeddingAttrs, IndexerAttrs, LinearAttentionAttrs,
    LinearAttrs, MoEAttrs, NoAttrs, NormAttrs, OpaqueAttrs, ReduceAttrs,
)
from graphsim.ir.graph import Graph, LayerSchedule, Node, split_value, unique_name, value_name
from graphsim.ir.meta import GraphMeta
from graphsim.ir.ops import OP_GROUPS, Op, OpGroup
from graphsim.ir.serialize import graph_from_json, graph_to_json, graph_to_text, load_graph, save_graph
from graphsim.ir.tensor import Dim, DType, T, TensorSpec, dim_symbol, parse_dim, parse_dtype

__all__ = [
    "OP_GROUPS",
    "AttentionAttrs",
    "CastAttrs",
    "CollectiveAttrs",
    "ConvAttrs",
    "DType",
    "Dim",
    "EmbeddingAttrs",
    "Graph",
    "GraphMeta",
    "IndexerAttrs",
    "LayerSchedule",
    "LinearAttentionAttrs",
    "LinearAttrs",
    "MoEAttrs",
    "NoAttrs",
    "Node",
    "NormAttrs",
    "Op",
    "OpGroup",
    "OpaqueAttrs",
    "ReduceAttrs",
    "T",
    "TensorSpec",
    "dim_symbol",
    "graph_from_json",
    "graph_to_json",
    "graph_to_text",
    "load_graph",
    "parse_dim",
    "parse_dtype",
    "save_graph",
    "split_value",
    "unique_name",
    "value_name",
]

"""Column-parallel GEMMs whose output tp gathers back to every rank.

tp propagates sharding forward: a GEMM on replicated activations is column-parallel and its output is the rank's
slice. Where that slice meets a replicated activation of the same width in one per-token kernel (an add, a cat, a
where), the slice cannot be used as it is: vLLM builds such a projection as
`ColumnParallelLinear(..., gather_output=True)` (an all-gather after the split GEMM), e.g. Gemma-3n's
`altup_projections`, `altup_unembed_projections` and `per_layer_model_projection` (vllm-project/vllm
models/gemma3n.py Gemma3nTextModel.__init__), whose outputs are stacked or added with the replicated embedding.
tp finds these GEMMs by running its propagation once, collecting the column-parallel GEMMs behind every such
mixed elementwise kernel (`mixed_origins`), and running again with them gathered, until no kernel mixes. A fused
add + norm of the residual stream fed by a column-parallel GEMM is not gathered: that is the signature of a
projection that should have been row-parallel (a mixer left whole), which the conservation check refuses.
"""

from __future__ import annotations

from graphsim.ir import Graph, Node, split_value


def whole_width(graph: Graph, value: str) -> int | None:
    """The per-token width (last dimension) of an unpartitioned value, None when it is not a fixed int."""
    shape = graph.spec_of(value).shape
    return shape[-1] if shape and isinstance(shape[-1], int) else None


def mixed_origins(original: Node, graph: Graph, producers: set[str], sharded: set[str],
                  origins: dict[str, frozenset[str]], rename: dict[str, str]) -> frozenset[str]:
    """The column-parallel GEMMs behind the sharded inputs of a per-token kernel that also reads a replicated
    activation of the same whole width (more than one element a token); empty when it mixes nothing.
    `original` is the kernel as the unpartitioned graph has it (its inputs' specs are whole); `rename` maps a
    value to the collective that now carries it."""
    acts = [v for v in original.inputs if v not in graph.params and split_value(v)[0] in producers]
    shard_in = [v for v in acts if rename.get(v, v) in sharded]
    widths = {whole_width(graph, v) for v in acts if rename.get(v, v) not in sharded} - {None, 1}
    return frozenset(g for v in shard_in if whole_width(graph, v) in widths for g in origins.get(rename.get(v, v), ()))

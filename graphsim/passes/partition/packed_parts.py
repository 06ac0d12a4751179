"""A packed GEMM whose parts shard differently: some column-parallel, some whole on every rank.

vLLM's Kimi Delta Attention loads q, k, v, beta and the forget gate's low-rank f_a projection into one
`in_proj_qkvgfab` (layers/mamba/gdn/kimi_gdn_linear_attn.py, vLLM 0.33.0). It is a
`_KimiGDNMergedColumnParallelLinear(..., replicated_shard_id=4)`: the class multiplies that part's output size by
tp_size and loads it from rank 0's slice, so every rank holds the whole f_a rows beside its slice of the others
("Merged projection with one output replicated across TP ranks"). One GEMM runs per rank; its n is
n_q/t + n_k/t + n_v/t + n_b/t + n_fa.

graphsim finds the whole parts from the data flow, not from names: a part (one output value of a packed GEMM) is
kept whole when, as a GEMM of its own, the tp pass would keep it whole (the same predicates: tp.py
`_stays_replicated`, `_kda_low_rank_down`). A GEMM with every part whole, or none, is left to the usual rules.
The per-rank GEMM grows by (n_split/t + n_whole)·t / n over an even split. The tp pass states that factor to the
conservation check (Declared.grown), which holds the FLOPs and weight bytes to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from graphsim.ir import Graph, Node, TensorSpec
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs, Rows
from graphsim.passes.base import PassError
from graphsim.passes.partition.sharding import split

REASON = ("a packed GEMM's part kept whole on every rank (vLLM _KimiGDNMergedColumnParallelLinear "
          "replicated_shard_id, layers/mamba/gdn/kimi_gdn_linear_attn.py)")


def _part(n: Node, i: int, value: str) -> Node:
    """Output `i` of a packed GEMM seen as a GEMM of its own: the value's name, its one output, n = its width."""
    a = n.attrs
    assert isinstance(a, KernelAttrs)
    spec = n.outputs[i]
    width = int(spec.shape[-1])
    return n.with_(name=value, outputs=(spec,),
                   attrs=a.with_geometry(replace(a.geometry_as(GemmGeometry), n=width)))


def whole_parts(n: Node, values: list[str], alone_whole: Callable[[Node], bool]) -> list[tuple[str, int]]:
    """The (value, width) of each part of a packed GEMM that stays whole while another part splits; [] when
    the GEMM is not such a mix (one output, a fused QKV's head split, a vocabulary or grouped GEMM)."""
    a = n.attrs
    if not isinstance(a, KernelAttrs) or len(n.outputs) < 2:
        return []
    g = a.geometry_as(GemmGeometry)
    if a.rows is Rows.SEQUENCES or a.name == "lm_head" or g.groups > 1 or g.q_features is not None:
        return []
    whole = [(v, int(n.outputs[i].shape[-1])) for i, v in enumerate(values) if alone_whole(_part(n, i, v))]
    if not whole or sum(w for _, w in whole) >= g.n:
        return []
    return whole


def split_parts(n: Node, parts: list[tuple[str, int]], graph: Graph, params: dict[str, TensorSpec], t: int,
                where: str) -> tuple[Node, float]:
    """The rank's GEMM: the whole parts' rows kept, the others split; returns it and the factor its per-rank
    FLOPs and weight bytes exceed an even split by. Each part's weight (and bias) is the member's own tensor, found
    by its row count: two members of one width are the same bytes whichever of them is kept whole."""
    a = n.attrs
    assert isinstance(a, KernelAttrs)
    g = a.geometry_as(GemmGeometry)
    kept = sum(w for _, w in parts)
    n_rank = split(g.n - kept, t, "n (the column-parallel parts of a packed GEMM)", where) + kept
    left = Counter(w for _, w in parts)
    for v in n.inputs:
        spec = graph.params.get(v)
        if spec is None or len(spec.shape) not in (1, 2):
            continue
        rows = spec.shape[0]
        if not isinstance(rows, int):
            continue
        if left[rows] > 0:
            left[rows] -= 1  # a whole part: every rank loads it all
            continue
        params[v] = TensorSpec((split(rows, t, "out_features (a packed GEMM's split part)", where),
                                *spec.shape[1:]), spec.dtype)
    if +left:
        raise PassError(f"{where}: a packed GEMM's whole part of {sorted(left.elements())} rows has no weight of that "
                        "many rows; report it with the model's config")
    return n.with_(attrs=a.with_geometry(replace(g, n=n_rank))), n_rank * t / g.n

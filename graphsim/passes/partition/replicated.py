"""Projections tp keeps whole on every rank because vLLM builds them as `ReplicatedLinear`, found by structure.

- **A projection of a reduced block output straight into the residual stream**: a GEMM whose input is another
  GEMM's output (whole on every rank after that GEMM's row-parallel all-reduce), square (hidden → hidden), and whose
  every user adds it to the residual stream (a fused add + RMSNorm). Split by columns, its slice would meet the whole residual in
  that add. vLLM's Zamba2 builds its hybrid layers' transformer-output projection so
  (vllm 0.33.0 model_executor/models/zamba2.py `Zamba2HybridLayer.__init__`: `self.linear = ReplicatedLinear(
  hidden_size, hidden_size)`, added to the Mamba input in `Zamba2MambaDecoderLayer.forward`).

- **A low-rank adapter's down projection** (`out = W·x + B·(A·x)`): a GEMM of at most a quarter of its input
  width whose only users are GEMMs that expand its output again, each added to a GEMM of the same input. vLLM's
  Zamba2LoRA builds A as `ColumnParallelLinear(input_dim, rank, gather_output=True)` and B as a (Merged)
  ColumnParallelLinear (vllm 0.33.0 model_executor/models/zamba2.py `Zamba2LoRA.__init__`), so tp gathers A's
  split output (`lora_downs`: tp starts with them in its gathered set, gather.py) and B's slice adds to W's slice.
"""

from __future__ import annotations

from graphsim.ir import Graph, Node, split_value, value_name
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind


def residual_projections(graph: Graph, users: dict[str, list[Node]]) -> set[str]:
    """The GEMMs of another GEMM's output whose only users add them to the residual stream (see the module
    docstring; tp keeps them whole when their input is replicated)."""
    kinds = {m.name: m.attrs.kind for m in graph.nodes if isinstance(m.attrs, KernelAttrs)}
    out: set[str] = set()
    for n in graph.nodes:
        if kinds.get(n.name) is not KernelKind.GEMM:
            continue
        acts = [v for v in n.inputs if v not in graph.params]
        if len(acts) != 1 or kinds.get(split_value(acts[0])[0]) is not KernelKind.GEMM:
            continue
        g = _gemm(n)
        us = [u for k in range(len(n.outputs)) for u in users.get(value_name(n.name, k), [])]
        if g is not None and g.n == g.k and us and all(
                isinstance(u.attrs, KernelAttrs) and u.attrs.kind is KernelKind.FUSED_ADD_RMS_NORM for u in us):
            out.add(n.name)
    return out


def lora_downs(graph: Graph, users: dict[str, list[Node]]) -> frozenset[str]:
    """The down projections A of low-rank adapters `W·x + B·(A·x)` (see the module docstring)."""
    by_name = {m.name: m for m in graph.nodes}
    out: set[str] = set()
    for n in graph.nodes:
        g = n.attrs.geometry if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.GEMM else None
        acts = [v for v in n.inputs if v not in graph.params]
        if not isinstance(g, GemmGeometry) or len(acts) != 1 or 4 * g.n > g.k:
            continue
        ups = users.get(n.name, [])
        if ups and all(getattr(_gemm(u), "k", None) == g.n and _added_to_sibling(u, acts[0], users, by_name)
                       for u in ups):
            out.add(n.name)
    return frozenset(out)


def _gemm(n: Node) -> GemmGeometry | None:
    a = n.attrs
    if isinstance(a, KernelAttrs) and a.kind is KernelKind.GEMM and isinstance(a.geometry, GemmGeometry):
        return a.geometry
    return None


def _added_to_sibling(up: Node, x: str, users: dict[str, list[Node]], by_name: dict[str, Node]) -> bool:
    """`up`'s output is added to the output of another GEMM that reads `x`."""
    for add in users.get(up.name, []):
        if not (isinstance(add.attrs, KernelAttrs) and add.attrs.kind is KernelKind.ELEMENTWISE
                and add.attrs.name == "add"):
            return False
        others = [by_name.get(split_value(v)[0]) for v in add.inputs if split_value(v)[0] != up.name]
        if not any(o is not None and o is not up and _gemm(o) is not None and x in o.inputs for o in others):
            return False
    return True

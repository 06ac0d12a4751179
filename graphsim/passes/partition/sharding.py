"""Shared pieces of the partition passes: divisibility checks and collective kernels."""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.ir import Graph, Node, Op, TensorSpec
from graphsim.ir.geometry import CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.base import Pass, PassError


def split(value: int, parts: int, what: str, where: str) -> int:
    """value / parts, or a PassError naming the dimension that does not divide."""
    if value % parts != 0:
        raise PassError(f"{where}: {what} = {value} is not divisible by {parts}; choose a size that divides it")
    return value // parts


def collective(name: str, kind: KernelKind, value: str, spec: TensorSpec, at: Node, group_size: int, width: int,
               rows: Rows, reason: str, group: str) -> Node:
    """A collective kernel reading `value` (placed with `at`'s scope and layer). It carries its
    group size, its per-row width (elements of the full tensor) and bytes per row."""
    bytes_per_row = int(width * spec.dtype.bytes)
    attrs = KernelAttrs(
        kind, kind.value,
        CollectiveGeometry(num_gpus=group_size, group=group, width=width, bytes_per_row=bytes_per_row, reason=reason),
        spec.dtype.value, rows, (), f"partition.{group}",
    )
    return Node(name=name, op=Op.KERNEL, inputs=(value,), outputs=(spec,), attrs=attrs, scope=at.scope,
                module_type=at.module_type, layer=at.layer, target=kind.value,
                provenance=f"partition.{group}:{reason}")


@dataclass(frozen=True)
class PartitionPass(Pass):
    """A pass that splits a fused kernel graph over `size` ranks."""

    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("size must be >= 1")

    def require_fused(self, graph: Graph) -> None:
        if not any(n.op is Op.KERNEL for n in graph.nodes):
            raise PassError(f"{self.name} needs a fused graph; run fuse first "
                            f"(e.g. 'fold,fuse{{target=vllm}},{self.name}{{size={self.size}}}')")

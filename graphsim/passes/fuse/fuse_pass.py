"""The `fuse{target=...}` pass: pick a target's rules and leftover policy, rewrite the graph."""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.ir import Graph, Op
from graphsim.passes.base import Pass, PassError, PassResult, register_pass
from graphsim.passes.fuse import eager, sglang, trtllm, vllm
from graphsim.passes.fuse.core import apply_rules

TARGETS = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm, "eager": eager}


@register_pass("fuse")
@dataclass(frozen=True)
class Fuse(Pass):
    target: str = "vllm"

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown target '{self.target}'; targets: {', '.join(TARGETS)}")

    def run(self, graph: Graph) -> PassResult:
        if any(n.op is Op.KERNEL for n in graph.nodes):
            raise PassError(f"fuse{{target={self.target}}}: the graph is already fused; run fuse once")
        mod = TARGETS[self.target]
        outcome = apply_rules(graph, mod.RULES, mod.leftover, self.target)
        outcome.graph.meta.fuse_target = self.target
        return PassResult(outcome.graph, True, outcome.stats, outcome.notes)

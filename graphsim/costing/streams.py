"""Concurrent CUDA streams vLLM runs inside one layer, found on the kernel graph by data flow (no layer names).

**Shared experts on an auxiliary stream.** vLLM's FusedMoE runs a MoE block's shared experts on a second CUDA
stream while the main stream runs the router and the routed experts, when the step has at most
`VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD` tokens (default 256, `vllm/envs.py`), on CUDA only, unless
`VLLM_DISABLE_SHARED_EXPERTS_STREAM=1`. Sources: vllm-project/vllm PR #26440 (dual-stream shared experts,
merged 2025-10), PR #28406 (one global aux stream; the ≤ 256-token limit, "for large batch sizes, the separate
stream execution is not beneficial (most likely because of the input clone)", merged 2025-11-11), PR #30085
(CUDA only, 2025-12-04); `vllm/model_executor/layers/fused_moe/layer.py` `FusedMoE.forward_impl` /
`_maybe_setup_shared_experts_stream`: the input is cloned on the main stream (`hidden_states.clone()`), the aux
stream waits for it and runs the shared MLP "in parallel with the router/gate (next op below)" and the routed
experts; the main stream waits for the aux stream before the two outputs are added. Above the limit both run
one after the other on the main stream, without the clone.

In the cost tree (`cost_tree.build_tree`) that is `Parallel(routed, shared, max_tokens=threshold)` preceded by
the clone as a leaf launched only at ≤ threshold tokens (`Leaf.max_tokens`). `shared_expert_overlaps` finds the
two branches: the `add` that sums a routed-experts output with a shared MLP's (directly or through a per-token
gate `mul`, the pattern `passes/partition/tp.py` defers the all-reduce on; in vLLM's compiled mode the one kernel
Inductor generates for the gate's mul and the add), then the kernels on the paths from the MoE block's input to
each side.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphsim.ir import Node
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows

# vllm/envs.py: VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD (default 256, PR #28406)
SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD = 256


@dataclass(frozen=True)
class StreamSettings:
    """vLLM's settings for the shared-expert stream: `VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD` and
    `VLLM_DISABLE_SHARED_EXPERTS_STREAM` (environment variables to vLLM; `build_cost_model(streams=…)` here).
    `cuda`: the device is a CUDA GPU (vLLM uses the stream only there, PR #30085)."""

    shared_experts_token_threshold: int = SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD
    disable_shared_experts_stream: bool = False
    cuda: bool = True

    @property
    def shared_experts_overlap(self) -> bool:
        return self.cuda and not self.disable_shared_experts_stream and self.shared_experts_token_threshold > 0

    def describe(self) -> str:
        if not self.cuda:
            return "shared experts run on the main stream (vLLM uses the aux stream on CUDA GPUs only)"
        if not self.shared_experts_overlap:
            return "shared experts run on the main stream (the aux stream is disabled)"
        return (f"shared experts overlap the routed experts on vLLM's aux stream at ≤ "
                f"{self.shared_experts_token_threshold} tokens per step (VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD)")


@dataclass(frozen=True)
class SharedExpertOverlap:
    """One MoE block's two streams: node names in graph order, and the input both read (cloned)."""

    routed: tuple[str, ...]  # router gate, top-k, routed experts: the main stream
    shared: tuple[str, ...]  # the shared MLP (and its gate): the aux stream
    clone: KernelAttrs  # vLLM's copy of the block input on the main stream before the fork


def _sums(n: Node) -> bool:
    """Whether `n` adds two branches: an `add` kernel of two inputs, or, in vLLM's compiled mode, the kernel Inductor
    generates for that add with the shared side's gate `mul` (passes/fuse/vllm_inductor.py: its `merged` members hold
    the add; its inputs are then the routed output and the shared side's)."""
    k = n.kernel
    if k.kind is not KernelKind.ELEMENTWISE:
        return False
    if k.merged:
        return any(m.kind is KernelKind.ELEMENTWISE and m.name == "add" for m in k.merged)
    return k.name == "add" and len(n.inputs) == 2


def _values(n: Node) -> list[str]:
    return [n.name if i == 0 else f"{n.name}#{i}" for i in range(len(n.outputs))]


def shared_expert_overlaps(nodes: list[Node]) -> list[SharedExpertOverlap]:
    """The shared/routed expert pairs of one layer's kernels (in graph order). A pair is kept only when its
    kernels are contiguous in the layer (nothing else runs between them) and are all per-token kernels, so the
    overlap moves no other kernel."""
    producer = {v: n for n in nodes for v in _values(n)}
    users: dict[str, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    index = {n.name: i for i, n in enumerate(nodes)}

    def sole_user(n: Node) -> Node | None:
        us = [u for v in _values(n) for u in users.get(v, [])]
        return us[0] if len(us) == 1 else None

    def ancestors(n: Node) -> set[str]:
        seen: set[str] = set()
        stack = [n]
        while stack:
            m = stack.pop()
            for v in m.inputs:
                p = producer.get(v)
                if p is not None and p.name not in seen:
                    seen.add(p.name)
                    stack.append(p)
        return seen

    out: list[SharedExpertOverlap] = []
    for add in nodes:
        if not _sums(add):
            continue
        srcs = [producer.get(v) for v in add.inputs]
        if any(s is None for s in srcs):
            continue
        experts = [s for s in srcs if s is not None and s.kernel.kind is KernelKind.MOE_EXPERTS]
        others = list(dict.fromkeys(s for s in srcs if s is not None and s not in experts))
        if len(experts) != 1 or not others or any(sole_user(x) is not add for x in [*experts, *others]):
            continue
        # a generated sum reads the shared side's gate for each `mul` it holds (Qwen3-Next: down_proj and the
        # sigmoid); a mul without one scales the routed output (MiniMax's routed_scaling_factor), which the add
        # rule does not take either: the experts do not feed the add directly there
        muls = sum(m.name == "mul" for m in add.kernel.merged)
        if add.kernel.merged and len(others) != 1 + muls:
            continue
        e = experts[0]
        anc_e = ancestors(e) | {e.name}
        anc_s = {x.name for x in others}.union(*(ancestors(x) for x in others))
        common = anc_e & anc_s
        routed = sorted(anc_e - common, key=index.__getitem__)
        shared = sorted(anc_s - common, key=index.__getitem__)
        if not shared or not any(nodes[index[m]].kernel.kind is KernelKind.GEMM for m in shared):
            continue
        both = sorted(routed + shared, key=index.__getitem__)
        lo, hi = index[both[0]], index[both[-1]]
        if hi - lo + 1 != len(both):  # another kernel runs between them: leave the block as it is
            continue
        if any(nodes[index[m]].kernel.rows is not Rows.TOKENS or nodes[index[m]].kernel.kind.is_collective
               for m in both):
            continue
        # the block input both branches read: a value of a common ancestor read by both sides
        fork = [v for m in shared for v in nodes[index[m]].inputs
                if v in producer and producer[v].name in common and any(v in nodes[index[r]].inputs for r in routed)]
        if not fork:
            continue
        spec = producer[fork[0]].outputs[_values(producer[fork[0]]).index(fork[0])]
        width = spec.shape[-1] if spec.shape else None
        if not isinstance(width, int):
            continue
        from graphsim.ir.geometry import ElementwiseGeometry

        clone = KernelAttrs(KernelKind.ELEMENTWISE, "copy", ElementwiseGeometry(width=width), spec.dtype.value,
                            Rows.TOKENS, rule="vllm/model_executor/layers/fused_moe/layer.py "
                            "FusedMoE._maybe_setup_shared_experts_stream: hidden_states.clone() before the aux stream")
        out.append(SharedExpertOverlap(tuple(routed), tuple(shared), clone))
    return out

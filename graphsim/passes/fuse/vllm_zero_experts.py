"""vLLM fuse rule for zero-computation (identity) experts beside the routed experts (LongCat-Flash).

A MoE whose router also picks identity experts (ids ≥ the real experts' count) adds, per token, Σ_{k: id ≥ E} w_k · x
to the routed experts' output. The importer traces it beside the `graphsim::moe_experts` node, in the experts'
own scope (importers/hf/looped_experts.py): a compare of the top-k ids, a where / sum of the top-k weights, a mul
by the experts' input, a cast, and the add into the experts' output. vLLM runs the same as two kernels
(layers/fused_moe/zero_expert_fused_moe.py `ZeroExpertFusedMoE.forward`): `zero_experts_compute_triton`
(layers/fused_moe/fused_moe.py: one Triton kernel reading the top-k ids / weights and the hidden states, writing the
identity experts' share) and the `fused_out + zero_expert_result` add. Each is priced by its bytes at the hidden
width, like any memory-bound kernel. SGLang runs the same two (python/sglang/srt/models/longcat_flash.py
`LongcatFlashMoE.forward`: `zero_experts_compute_triton`, then `final_hidden_states += zero_expert_result`):
`SGLANG_ZERO_EXPERTS`, the same match with SGLang's source.
"""

from __future__ import annotations

from graphsim.ir import Node, Op, value_name
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _downstream(ctx: FuseContext, start: set[str], scope: str) -> dict[str, Node]:
    """Free nodes of `scope` fed (transitively, within the scope) by the values named in `start`."""
    out: dict[str, Node] = {}
    todo = list(start)
    while todo:
        for u in ctx.users.get(todo.pop(), []):
            if u.scope == scope and ctx.is_free(u) and u.op is not Op.MOE_EXPERTS and u.name not in out:
                out[u.name] = u
                todo += [value_name(u.name, i) for i in range(len(u.outputs))]
    return out


def match_zero_experts(ctx: FuseContext) -> list[Candidate]:
    """In an experts module's scope: the nodes the top-k ids feed (besides the experts node) up to the add whose other
    input is the experts' output (through views): the compute kernel, then the add."""
    out = []
    for e in [n for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS]:
        ids = ctx.producer(e.inputs[1])
        if ids is None:
            continue
        mine = P.views_of(ctx, e)  # the experts output and its views
        fed = _downstream(ctx, {e.inputs[1]}, e.scope)
        adds = [n for n in fed.values() if n.op is Op.ADD and len(n.inputs) == 2
                and any(ctx.producer(v) is not None and ctx.producer(v).name in mine for v in n.inputs)]  # type: ignore[union-attr]
        if len(adds) != 1:
            continue
        add = adds[0]
        compute = [n for n in fed.values() if n is not add and n.op not in P.ABSORBED_OPS
                   and ctx.pos[n.name] < ctx.pos[add.name]]
        if not compute or not any(n.op is Op.MUL for n in compute):
            continue
        compute.sort(key=lambda n: ctx.pos[n.name])
        out += [Candidate(compute, {"width": int(add.outputs[0].shape[-1]), "dtype": add.outputs[0].dtype.value}),
                Candidate([add], {"width": int(add.outputs[0].shape[-1]), "dtype": add.outputs[0].dtype.value,
                                  "add": True})]
    return out


def build_zero_experts(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    add = bool(c.info.get("add"))
    return KernelAttrs(KernelKind.ELEMENTWISE, "add" if add else "zero_experts_compute",
                       ElementwiseGeometry(width=c.info["width"]), c.info["dtype"], Rows.TOKENS,
                       tuple(n.name for n in c.nodes), "zero_experts_sum" if add else "zero_experts_compute")


ZERO_EXPERTS = Rule(
    "zero_experts", "model_executor/layers/fused_moe/zero_expert_fused_moe.py:ZeroExpertFusedMoE.forward "
    "(zero_experts_compute_triton from fused_moe.py: one kernel; then fused_out + zero_expert_result)",
    match_zero_experts, build_zero_experts,
)

SGLANG_ZERO_EXPERTS = Rule(
    "zero_experts", "python/sglang/srt/models/longcat_flash.py:LongcatFlashMoE.forward (zero_experts_compute_triton: "
    "one kernel; then final_hidden_states += zero_expert_result)",
    match_zero_experts, build_zero_experts,
)

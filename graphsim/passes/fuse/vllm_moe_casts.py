"""vLLM fuse rule for float32 casts around a MoE block's routed + shared sum (HunYuan-V3: transformers casts the
routed experts' output and the shared expert's output to float32, adds them, and casts the sum back), which were
priced as approximate placeholders.

vLLM hands the shared expert to the fused-MoE layer, which adds it to the routed output in the model dtype: no cast
kernels (model_executor/models/hy_v3.py `HYV3MoEFused.__init__`: `FusedMoEFactory(..., shared_experts=self.shared_mlp)`;
its forward is `self.experts(hidden_states=hidden_states, router_logits=router_logits)`). The casts are absorbed; the
add stays the `moe_shared_sum` kernel it already was.

Matched by structure: an add whose two inputs are casts of a MoE experts output and of a GEMM output (through views),
and the cast of that add's output when it is the add's only user.
"""

from __future__ import annotations

from graphsim.ir import Op
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _match_moe_sum_casts(ctx: FuseContext) -> list[Candidate]:
    out = []
    for add in (n for n in ctx.graph.nodes if n.op is Op.ADD and len(n.inputs) == 2):
        casts = [P.through_views(ctx, v) for v in add.inputs]
        if not all(c is not None and c.op is Op.CAST and ctx.is_free(c) and c.inputs for c in casts):
            continue
        kinds = {(s.op if (s := P.through_views(ctx, c.inputs[0])) is not None else None)
                 for c in casts if c is not None}
        if kinds != {Op.MOE_EXPERTS, Op.LINEAR}:
            continue
        out += [Candidate([c]) for c in casts if c is not None]
        users = ctx.users.get(add.name, [])
        if len(users) == 1 and users[0].op is Op.CAST and ctx.is_free(users[0]):
            out.append(Candidate([users[0]]))
    return out


MOE_SUM_CASTS = Rule(
    "moe_sum_in_model_dtype", "model_executor/models/hy_v3.py:HYV3MoEFused (the shared expert handed to "
    "FusedMoEFactory(shared_experts=...), added to the routed output in the model dtype: no fp32 casts)",
    _match_moe_sum_casts, lambda _ctx, _c: None,
)

RULES: list[Rule] = [MOE_SUM_CASTS]

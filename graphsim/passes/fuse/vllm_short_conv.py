"""vLLM fuse rule for the gates around a short convolution (LFM2's ShortConv: LFM2, LFM2-MoE, LFM3), which were
priced as approximate placeholders.

vLLM runs the block inside its `torch.ops.vllm.short_conv` custom op, eagerly (model_executor/layers/mamba/
short_conv.py `ShortConv.forward_cuda`): `B, C, x = BCx.chunk(3, dim=-1)`, then `Bx = (B * x)` (one mul kernel),
`causal_conv1d_fn` / `causal_conv1d_update` on it, then `y = C * Bx` (one mul kernel), then `out_proj`. The two
products are those `mul` kernels, priced by their bytes like any memory-bound kernel and no longer approximate.
(vLLM also stacks the decode and prefill parts with `torch.vstack` before out_proj, a copy the traced model does
not have: not counted.)

Matched by structure: a mul next to a conv1d in the conv's own module or its parent, either feeding the conv (its
output, through views, is the conv's input) or reading the conv's output (through views and the conv's own
slice), with a second operand that is a token tensor.
"""

from __future__ import annotations

from graphsim.ir import Node, Op
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_elementwise import _one_kernel

_THROUGH = P.ABSORBED_OPS | {Op.SLICE}


def _upstream(ctx: FuseContext, value: str) -> Node | None:
    """The first producer of `value` that is not a view or a slice."""
    p = ctx.producer(value)
    while p is not None and p.op in _THROUGH and p.inputs:
        p = ctx.producer(p.inputs[0])
    return p


def _near(conv: Node, n: Node) -> bool:
    return n.scope == conv.scope or conv.scope.startswith(n.scope + ".")


def _match_short_conv_gates(ctx: FuseContext) -> list[Candidate]:
    out = []
    convs = [n for n in ctx.graph.nodes if n.op is Op.CONV1D]
    for conv in convs:
        before = _upstream(ctx, conv.inputs[0]) if conv.inputs else None
        gates = [before] if before is not None else []
        gates += [m for m in ctx.graph.nodes if m.op is Op.MUL and any(_upstream(ctx, v) is conv for v in m.inputs)]
        for m in gates:
            if m.op is not Op.MUL or not ctx.is_free(m) or not _near(conv, m) or len(m.inputs) != 2:
                continue
            if all((p := _upstream(ctx, v)) is not None and p.op not in P.ABSORBED_OPS for v in m.inputs):
                out.append(Candidate([m]))
    return out


SHORT_CONV_GATE = Rule(
    "short_conv_gate", "model_executor/layers/mamba/short_conv.py:ShortConv.forward_cuda (Bx = (B * x) before "
    "causal_conv1d, y = C * Bx after it: one mul kernel each, eager inside torch.ops.vllm.short_conv)",
    _match_short_conv_gates, _one_kernel("short_conv_gate"),
)

RULES: list[Rule] = [SHORT_CONV_GATE]

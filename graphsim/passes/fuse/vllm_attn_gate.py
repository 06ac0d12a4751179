"""vLLM fuse rule for a softplus attention output gate from its own projection (Laguna: `g_proj`, one gate per head
or per channel), whose ops were priced as approximate placeholders.

vLLM's Laguna port computes it as written (model_executor/models/laguna.py `LagunaAttention.forward`:
`gate = F.softplus(gate.float()).type_as(attn_output)`, then `attn_output * gate` before o_proj): a cast, a softplus, a
cast and a mul, one kernel each; each becomes that named elementwise kernel, priced by its bytes, no longer
approximate. (Sigmoid gates are vllm_elementwise.py's `attn_output_gate`.)

Matched by structure: a mul of an attention output (through views) by a softplus (with casts around it, through
views) of a GEMM output, in the attention's module.
"""

from __future__ import annotations

from graphsim.ir import Node, Op
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_elementwise import _one_kernel, gate_candidates


def _gate_chain(ctx: FuseContext, n: Node | None) -> list[Node] | None:
    """The casts and the softplus from a GEMM output to `n` (the gate value), or None."""
    chain: list[Node] = []
    while n is not None and n.op is Op.CAST and ctx.is_free(n) and n.inputs:
        chain.append(n)
        n = P.through_views(ctx, n.inputs[0])
    if n is None or n.op is not Op.SOFTPLUS or not ctx.is_free(n) or not n.inputs:
        return None
    chain.append(n)
    n = P.through_views(ctx, n.inputs[0])
    while n is not None and n.op is Op.CAST and ctx.is_free(n) and n.inputs:
        chain.append(n)
        n = P.through_views(ctx, n.inputs[0])
    return chain if n is not None and n.op is Op.LINEAR else None


def _match_softplus_gate(ctx: FuseContext) -> list[Candidate]:
    return gate_candidates(ctx, _gate_chain)


SOFTPLUS_ATTN_GATE = Rule(
    "softplus_attn_gate", "model_executor/models/laguna.py:LagunaAttention.forward (gate = F.softplus(gate.float())"
    ".type_as(attn_output); attn_output * gate: a cast, a softplus, a cast and a mul kernel before o_proj)",
    _match_softplus_gate, _one_kernel("softplus_attn_gate"),
)

RULES: list[Rule] = [SOFTPLUS_ATTN_GATE]

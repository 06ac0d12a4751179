"""vLLM fuse rule around MiniMax-Text-01's lightning attention (`graphsim::lightning_attention`,
graphsim/importers/hf/lightning_ops.py), read from vllm/model_executor/layers/mamba/linear_attn.py
MiniMaxText01LinearAttention._forward: inside its `vllm.linear_attention` custom op (opaque to torch.compile,
so its PyTorch ops run eagerly, one kernel each) the output gate is `F.sigmoid(gate) * hidden` after the norm:
a `sigmoid` and a `mul` kernel, named after the op and priced by their bytes (not placeholders). The recurrence
is vllm.py's LINEAR_ATTENTION rule (`lightning_attention`, kind "lightning"), priced in costing/lightning.py.
"""

from __future__ import annotations

from graphsim.ir import LinearAttentionAttrs, Node, Op
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_elementwise import _one_kernel


def _in_module(n: Node, scope: str) -> bool:
    return n.scope == scope or n.scope.startswith(scope + ".")


def _match_output_gate(ctx: FuseContext) -> list[Candidate]:
    """In a lightning-attention module: the sigmoid of a projection and the mul that gates the normed output."""
    scopes = {n.scope for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION
              and n.attrs_as(LinearAttentionAttrs).kind == "lightning"}
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.SIGMOID or not ctx.is_free(n) or not any(_in_module(n, s) for s in scopes):
            continue
        src = ctx.producer(n.inputs[0]) if n.inputs else None
        if src is None or src.op is not Op.LINEAR:
            continue
        muls = [u for u in ctx.users.get(n.name, []) if u.op is Op.MUL and ctx.is_free(u)]
        if len(muls) == 1:
            out += [Candidate([n]), Candidate([muls[0]])]
    return out


LIGHTNING_OUTPUT_GATE = Rule(
    "lightning_output_gate", "model_executor/layers/mamba/linear_attn.py:MiniMaxText01LinearAttention._forward "
    "(hidden = F.sigmoid(gate) * hidden, eager inside the vllm.linear_attention custom op)",
    _match_output_gate, _one_kernel("lightning_output_gate"),
)

RULES: list[Rule] = [LIGHTNING_OUTPUT_GATE]

"""vLLM fuse rule for the clamped SwiGLU ("swigluoai": gate * sigmoid(alpha * gate) * (up + beta), gate and up
clamped to a limit) of a dense MLP written out as elementwise ops (MiniMax-M3's dense layers and shared experts),
which was priced as approximate placeholders (clamp x2, mul, sigmoid, mul, add, mul).

vLLM runs it as one kernel between the packed gate_up GEMM and down_proj: MiniMax-M3's `MiniMaxM3MLP.forward`
(vLLM models/minimax_m3: `x = swiglu_oai_split(gate_up, alpha=..., beta=..., limit=...)`, "our fp32 Triton kernel");
the same activation in the routed experts is inside fused_moe (`activation="swigluoai_uninterleave"`), and GPT-OSS's
`SwigluOAIAndMul` (layers/activation.py, `swigluoai_and_mul`) is the interleaved variant. One `act_and_mul` kernel,
named `swigluoai_and_mul`, priced like the other gated activations by its width.

Matched by structure: the input of a GEMM is a mul whose producers, followed back through muls, adds, sigmoids and
clamps in the same module (and the split / views of one projection), reach one GEMM; at least one clamp and one
sigmoid among them.
"""

from __future__ import annotations

from graphsim.ir import Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

_BODY = {Op.MUL, Op.ADD, Op.SIGMOID, Op.CLAMP}


def _group(ctx: FuseContext, last: Node) -> list[Node] | None:
    """The activation's nodes ending at `last`, or None when its inputs do not all come from one GEMM."""
    body: dict[str, Node] = {}
    sources: set[str] = set()
    todo = [last]
    while todo:
        n = todo.pop()
        if n.name in body:
            continue
        body[n.name] = n
        for v in n.inputs:
            p = ctx.producer(v)
            while p is not None and p.op in P.ABSORBED_OPS and p.inputs:
                p = ctx.producer(p.inputs[0])
            if p is None:
                continue  # a constant (alpha, beta, the limit)
            if p.op is Op.LINEAR:
                sources.add(p.name)
            elif p.op in _BODY and p.scope == last.scope and ctx.is_free(p) and len(body) < 16:
                todo.append(p)
            else:
                return None
    ops = {n.op for n in body.values()}
    if len(sources) != 1 or Op.CLAMP not in ops or Op.SIGMOID not in ops:
        return None
    return sorted(body.values(), key=lambda n: ctx.pos[n.name])


def _match_swiglu_oai(ctx: FuseContext) -> list[Candidate]:
    out = []
    for down in (n for n in ctx.graph.nodes if n.op is Op.LINEAR and n.inputs):
        last = ctx.producer(down.inputs[0])
        if last is None or last.op is not Op.MUL or not ctx.is_free(last) or not down.scope.startswith(last.scope + "."):
            continue
        nodes = _group(ctx, last)
        if nodes:
            out.append(Candidate(nodes, {"width": int(last.outputs[0].shape[-1])}))
    return out


def _build(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return KernelAttrs(KernelKind.ACT_AND_MUL, "swigluoai_and_mul", ElementwiseGeometry(width=c.info["width"]),
                       c.nodes[-1].outputs[0].dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "swiglu_oai")


SWIGLU_OAI = Rule(
    "swiglu_oai", "vLLM models/minimax_m3 MiniMaxM3MLP.forward (swiglu_oai_split(gate_up, alpha, beta, limit): one "
    "fp32 Triton kernel between gate_up_proj and down_proj; layers/activation.py SwigluOAIAndMul for GPT-OSS's "
    "interleaved variant)", _match_swiglu_oai, _build,
)

RULES: list[Rule] = [SWIGLU_OAI]

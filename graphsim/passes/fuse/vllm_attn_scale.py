"""vLLM fuse rule for a query scaled by a per-position factor just before the attention kernel (Llama-4's attention
temperature tuning on its NoPE layers, Mistral's `llama_4_scaling`), which was priced as approximate placeholders.

vLLM computes it as written: `q = (q * attn_scale).to(q.dtype)` (model_executor/models/llama4.py
`Llama4Attention.forward`, `if self.attn_temperature_tuning and self.nope`; models/mistral.py `MistralAttention.forward`,
`if self.do_llama_4_scaling`): one mul kernel (in float32: the scale is float32) and one cast kernel back to the
query's dtype. The scale itself (`_get_attn_scale(positions)`: floor, log1p on the positions) is position
arithmetic, absorbed as everywhere else (a few per-token scalars).

Matched by structure: the query input of an attention op comes (through views) from a cast of a mul whose only
token-data operand is the query and whose other operand is computed from positions alone.
"""

from __future__ import annotations

from graphsim.ir import Op
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_elementwise import _one_kernel


def _match_query_position_scale(ctx: FuseContext) -> list[Candidate]:
    out = []
    for a in (n for n in ctx.graph.nodes if n.op is Op.ATTENTION and n.inputs):
        cast = P.through_views(ctx, a.inputs[0])
        if cast is None or cast.op is not Op.CAST or not ctx.is_free(cast) or not cast.inputs:
            continue
        mul = P.through_views(ctx, cast.inputs[0])
        if mul is None or mul.op is not Op.MUL or not ctx.is_free(mul) or len(mul.inputs) != 2:
            continue
        sources = [ctx.producer(v) for v in mul.inputs]
        data = [p for p in sources if p is not None and not ctx.index_only(p)]
        positional = [p for p in sources if p is not None and ctx.index_only(p)]
        if len(data) == 1 and len(positional) == 1:
            out += [Candidate([mul]), Candidate([cast])]
    return out


QUERY_POSITION_SCALE = Rule(
    "query_position_scale", "model_executor/models/llama4.py:Llama4Attention.forward (attn_temperature_tuning on NoPE "
    "layers: q = (q * attn_scale).to(q.dtype), a mul and a cast kernel; models/mistral.py MistralAttention.forward, "
    "do_llama_4_scaling, the same two)", _match_query_position_scale, _one_kernel("query_position_scale"),
)

RULES: list[Rule] = [QUERY_POSITION_SCALE]

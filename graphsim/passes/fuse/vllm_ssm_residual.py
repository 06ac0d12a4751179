"""vLLM fuse rule for transformers' `residual_in_fp32` casts in Mamba2 models (Mamba2 / Mamba-Codestral), which were
priced as approximate placeholders.

transformers' `Mamba2Block.forward` (models/mamba2/modeling_mamba2.py) keeps the residual in float32 when the config
says `residual_in_fp32` (`residual = residual.to(torch.float32)`), and the model casts the final norm's output back
before lm_head. vLLM keeps the residual in the model dtype: `Mamba2DecoderLayer.forward` (model_executor/models/
mamba2.py) is `hidden_states, residual = self.norm(hidden_states, residual)`, the fused add + RMSNorm, so those casts
are no kernel. (Mamba-1 has the same rule for its blocks: vllm_mamba1.py MAMBA1_RESIDUAL_FP32.)

Matched by structure: in a model with a Mamba2 scan (`mamba2_ssd`), a cast to float32 of a token's whole hidden
vector in a block's own scope (the block holding the mixer), and a cast outside the layers feeding a GEMM (lm_head).
"""

from __future__ import annotations

from graphsim.ir import LinearAttentionAttrs, Node, Op
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _static(n: Node) -> bool:
    return all(isinstance(d, int) for o in n.outputs for d in o.shape)


def residual_fp32_casts(ctx: FuseContext, scans: list[Node]) -> list[Candidate]:
    """In a model with these recurrent scans: a cast to float32 of a token's whole hidden vector in a block's own
    scope (the residual, `residual.to(torch.float32)`), and the cast outside the layers feeding a GEMM (the final
    norm's output back to lm_head's dtype). Shared by the Mamba2 rule here and Mamba-1's (vllm_mamba1.py)."""
    if not scans:
        return []
    hidden = {int(n.outputs[0].shape[-1]) for n in ctx.graph.nodes if n.op is Op.EMBEDDING}
    blocks = {P.parent(s.scope) for s in scans}
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.CAST or not ctx.is_free(n) or _static(n) or int(n.outputs[0].shape[-1]) not in hidden:
            continue
        to_fp32 = n.scope in blocks and n.layer is not None and n.outputs[0].dtype.value == "f32"
        before_head = n.layer is None and any(u.op is Op.LINEAR for u in ctx.users.get(n.name, []))
        if to_fp32 or before_head:
            out.append(Candidate([n]))
    return out


def _match_mamba2_residual_fp32(ctx: FuseContext) -> list[Candidate]:
    return residual_fp32_casts(ctx, [n for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION
                                     and n.attrs_as(LinearAttentionAttrs).kind == "mamba2_ssd"])


MAMBA2_RESIDUAL_FP32 = Rule(
    "mamba2_residual_in_model_dtype", "model_executor/models/mamba2.py:Mamba2DecoderLayer.forward (hidden_states, "
    "residual = self.norm(hidden_states, residual): the residual stays in the model dtype; transformers' "
    "residual_in_fp32 casts are no vLLM kernel)", _match_mamba2_residual_fp32, lambda _ctx, _c: None,
)

RULES: list[Rule] = [MAMBA2_RESIDUAL_FP32]

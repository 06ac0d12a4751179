"""vLLM fuse rule for the re-ordering of a gated-delta-net projection whose q, k, v (and z) are interleaved per
key-head group (Qwen3-Next's `in_proj_qkvz`): transformers splits the projection per group and concatenates q, k
and v (`torch.cat`), which was priced as an approximate placeholder.

vLLM does the split and the concatenation in one compiled function, `QwenGatedDeltaNetAttention.
prepare_gdn_attention_core_inputs` (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py,
`@torch.compile(fullgraph=True)`: "Doing this in one cat+slice keeps torch.compile in a single Triton graph instead
of emitting separate copy kernels per tensor"), one Triton kernel that writes the contiguous q|k|v, z, b and a; on
older versions the Triton kernel `fused_qkvzba_split_reshape_cat`. The cat becomes that kernel (named `cat`, as the
traced op, so location maps keep their locations), priced by the bytes of its q|k|v width (z, b and a, which it also
writes, are not counted: a lower bound), no longer approximate.

Matched by structure: a cat, in a module that holds a linear-attention (gated delta rule) op, whose inputs all come
(through views and splits) from one projection.

Where q, k and v are separate projections of one input straight into the conv (OLMo-Hybrid), vLLM packs them into one
GEMM and reads q|k|v as a slice of its output (olmo_gdn_linear_attn.py): transformers' cat is no kernel there
(`packed_qkv_slice`).
"""

from __future__ import annotations

from graphsim.ir import Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _match_gdn_qkv_cat(ctx: FuseContext) -> list[Candidate]:
    scopes = {n.scope for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION}
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.CAT or not ctx.is_free(n) or n.scope not in scopes or len(n.inputs) < 2:
            continue
        sources = {p.name if p is not None and p.op is Op.LINEAR else None for p in (P.through_views(ctx, v) for v in n.inputs)}
        if len(sources) == 1 and None not in sources:
            out.append(Candidate([n]))
    return out


def _build(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    width, rows = P.per_token(n.outputs[0])
    return KernelAttrs(KernelKind.ELEMENTWISE, "cat", ElementwiseGeometry(width=width),
                       n.outputs[0].dtype.value, rows, (n.name,), "gdn_qkvzba_split_cat")


GDN_QKV_CAT = Rule(
    "gdn_qkvzba_split_cat", "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:QwenGatedDeltaNetAttention."
    "prepare_gdn_attention_core_inputs (@torch.compile(fullgraph=True): split + cat of q, k, v, z, b, a in one Triton "
    "kernel; earlier versions: fused_qkvzba_split_reshape_cat)", _match_gdn_qkv_cat, _build,
)

def _match_packed_qkv_cat(ctx: FuseContext) -> list[Candidate]:
    """A cat, in a linear-attention module, of the outputs of separate projections that read the same input (which
    vLLM packs into one GEMM), straight into the conv (through views only)."""
    scopes = {n.scope for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION}
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.CAT or not ctx.is_free(n) or n.scope not in scopes or len(n.inputs) < 2:
            continue
        sources = [p for p in (P.through_views(ctx, v) for v in n.inputs) if p is not None and p.op is Op.LINEAR]
        if len(sources) != len(n.inputs) or len({p.name for p in sources}) != len(sources):
            continue
        reads = {(q.name if (q := P.through_views(ctx, p.inputs[0])) is not None else None) for p in sources if p.inputs}
        if len(reads) != 1 or None in reads:
            continue
        users = [u for v in ctx.outputs_of([n]) for u in ctx.users.get(v, [])]
        while len(users) == 1 and users[0].op in P.ABSORBED_OPS:
            users = [u for v in ctx.outputs_of(users) for u in ctx.users.get(v, [])]
        if len(users) == 1 and users[0].op is Op.CONV1D:
            out.append(Candidate([n]))
    return out


PACKED_QKV_CAT = Rule(
    "packed_qkv_slice", "model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py:OlmoHybridGatedDeltaNetAttention."
    "_full_forward (q, k, v and the gate are one MergedColumnParallelLinear, in_proj_qkvg; mixed_qkv = "
    "projected_qkvg[..., :conv_dim] is a slice of its output fed to causal_conv1d: no kernel for transformers' cat)",
    _match_packed_qkv_cat, lambda _ctx, _c: None,
)

RULES: list[Rule] = [GDN_QKV_CAT, PACKED_QKV_CAT]

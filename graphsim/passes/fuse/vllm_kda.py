"""vLLM fuse rules around Kimi Delta Attention (`graphsim::kda`, graphsim/importers/hf/kda_ops.py), read from
vllm/model_executor/layers/kda.py (KimiDeltaAttention.forward / _forward) and the fla ops it calls
(vllm/model_executor/layers/fla/ops/kda.py):

- the forget gate: transformers' KimiLinearForgetGate computes -exp(A_log)·softplus(f_b + dt_bias) in ~10
  aten ops; vLLM runs it as ONE `fused_kda_gate` Triton kernel (kda_gate_fwd_kernel: bias, softplus with its
  threshold, -exp(A_log) per head, fp32 out) after the f_a/f_b projections;
- beta: `self.b_proj(hidden_states)[0].float().sigmoid()`, one elementwise kernel of H per token (fp32 out);
- the q/k/v concatenation transformers makes before its one depthwise conv: vLLM keeps q, k and v apart
  (three `causal_conv1d_fn` / `causal_conv1d_update` calls on q_proj, k_proj, v_proj outputs), so the
  concatenation is no kernel (absorbed); the conv itself is vllm.py's CONV1D rule over the 3·H·d channels (with
  the casts to float32 conv weights and back, Bailing-hybrid's, inside it: vLLM's bailing_moe_v3.py builds
  q/k/v_conv1d with params_dtype=torch.float32 and calls causal_conv1d_fn on the bf16 projections);
- the projections: q, k, v and beta are one packed GEMM (vllm.py PACKED `qkvb_proj`: vLLM 0.33.0's
  bailing_moe_v3.py qkvb_proj; Kimi's adds the forget gate's f_a, kept whole by tp: `in_proj_qkvgfab`,
  kimi_gdn_linear_attn.py; the 0.19-era kda.py above built them apart);
- the recurrence: vllm.py's LINEAR_ATTENTION rule names it `chunk_kda` (kind "kda"), priced per decode
  token, prefill token and sequence in costing/kda.py.

The output gate's gated RMSNorm (FusedRMSNormGated, activation "sigmoid") is the generic gated-norm rule.
"""

from __future__ import annotations

from graphsim.ir import LinearAttentionAttrs, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

_SOURCE = "model_executor/layers/kda.py:KimiDeltaAttention.forward"


def _kda_nodes(ctx: FuseContext) -> list[Node]:
    return [n for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION and n.attrs_as(LinearAttentionAttrs).kind == "kda"]


def _elementwise_ancestors(ctx: FuseContext, la: Node, value: str) -> list[Node]:
    """The free elementwise nodes (and the views between them) inside the KDA module that compute `value` (one
    input of the kda node), walking up until a node of another kind (a projection)."""
    found: dict[str, Node] = {}
    todo = [value]
    while todo:
        p = ctx.producer(todo.pop())
        if p is None or p.name in found or not ctx.is_free(p) or not (p.scope == la.scope or p.scope.startswith(la.scope + ".")):
            continue
        if p.op.group is not OpGroup.ELEMENTWISE and p.op not in P.ABSORBED_OPS:
            continue
        found[p.name] = p
        todo.extend(p.inputs)
    if not any(n.op.group is OpGroup.ELEMENTWISE for n in found.values()):
        return []
    return sorted(found.values(), key=lambda n: ctx.pos[n.name])


def _match_gate(ctx: FuseContext) -> list[Candidate]:
    out = []
    for la in _kda_nodes(ctx):
        if len(la.inputs) > 3:
            nodes = _elementwise_ancestors(ctx, la, la.inputs[3])
            if nodes:
                out.append(Candidate(nodes, {"la": la}))
    return out


def _build_gate(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["la"].attrs_as(LinearAttentionAttrs)
    width = a.num_k_heads * a.k_head_dim  # reads f_b's [T, H·d], writes the fp32 decay [T, H, d]
    return KernelAttrs(KernelKind.ELEMENTWISE, "fused_kda_gate", ElementwiseGeometry(num_v_heads=a.num_k_heads, width=width),
                       "f32", Rows.TOKENS, tuple(n.name for n in c.nodes), "kda_gate")


KDA_GATE = Rule(
    "kda_gate", f"{_SOURCE} (fused_kda_gate(g1, A_log, head_dim, g_bias=dt_bias): fla/ops/kda.py kda_gate_fwd_kernel)",
    _match_gate, _build_gate,
)


def _match_beta(ctx: FuseContext) -> list[Candidate]:
    out = []
    for la in _kda_nodes(ctx):
        if len(la.inputs) > 4:
            nodes = _elementwise_ancestors(ctx, la, la.inputs[4])
            if nodes:
                out.append(Candidate(nodes, {"la": la}))
    return out


def _build_beta(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    heads = c.info["la"].attrs_as(LinearAttentionAttrs).num_v_heads
    return KernelAttrs(KernelKind.ELEMENTWISE, "sigmoid", ElementwiseGeometry(width=heads), "f32", Rows.TOKENS,
                       tuple(n.name for n in c.nodes), "kda_beta")


KDA_BETA = Rule("kda_beta", f"{_SOURCE} (beta = b_proj(hidden_states)[0].float().sigmoid())", _match_beta, _build_beta)


def _match_qkv_cat(ctx: FuseContext) -> list[Candidate]:
    """A concatenation, inside a KDA module, of projection outputs only, that feeds its depthwise conv."""
    out = []
    scopes = {la.scope for la in _kda_nodes(ctx)}
    for n in ctx.graph.nodes:
        if n.op is not Op.CAT or not ctx.is_free(n) or n.scope not in scopes:
            continue
        producers = [ctx.producer(v) for v in n.inputs]
        if not producers or any(p is None or p.op is not Op.LINEAR for p in producers):
            continue
        reached, todo = set(), [n.name]
        while todo:  # through views (and the cast to the conv weights' dtype) to the conv
            for u in ctx.users.get(todo.pop(), []):
                if u.name not in reached and (u.op in P.ABSORBED_OPS or u.op in (Op.CAST, Op.CONV1D)):
                    reached.add(u.name)
                    todo.append(u.name)
        if any(u.op is Op.CONV1D for u in ctx.graph.nodes if u.name in reached):
            out.append(Candidate([n]))
    return out


KDA_QKV_CAT = Rule(
    "kda_qkv_cat", f"{_SOURCE} / _forward (q, k, v projections convolved apart: causal_conv1d_fn / "
    "causal_conv1d_update on each, no concatenation)", _match_qkv_cat, lambda _ctx, _c: None,
)

# before LINEAR_ATTENTION and the elementwise catch-alls
RULES: list[Rule] = [KDA_GATE, KDA_BETA, KDA_QKV_CAT]

"""vLLM fuse rules for A.X-K2's query / output gate (AXK2ForCausalLM), whose ops were priced as approximate
placeholders (14.3 % of its tiny decode step).

Source read: the A.X-K2 port in the SeungminHeo/vllm fork (vllm/models/axk2/attention.py AXK2Attention.forward at
6c9dde22, vllm/models/axk2/common/fused_gated_rmsnorm_quant.py at 2cde4afb); vllm-project/vllm's stored snapshot
has no A.X-K2 model, so this is the only vLLM code for it graphsim has seen.

- `q_b_input = torch.cat([q_c, q_c_prenorm], dim=-1)` (a step of more than one token; a one-token step copies the two
  halves into a preallocated buffer instead, two launches of the same bytes): the concatenation of the q-LoRA latent
  after and before its RMSNorm that feeds the widened `q_b_proj` is that one `cat` kernel, reading and writing
  2 x q_lora_rank a token.
- the sigmoid output gate: transformers casts the gate to float32, takes its sigmoid, multiplies the attention
  output and casts back (4 kernels); the port calls `fused_gate_act_quant(y=output, gate=gate,
  activation="sigmoid", quant_type="none")`, ONE Triton kernel (`_fused_gate_act_quant_kernel`: loads y and the gate
  row, sigmoid and multiply in fp32 registers, stores y's dtype): `fused_gate_act`, reading two tensors of the
  attention output's width and writing one (`ElementwiseGeometry.reads`). Not modelled: the port's
  `q_gate[:, :, qk_head_dim:].reshape(...)` copies the strided gate slice first (graphsim absorbs reshapes).

Matched by structure (not by model): a mul of an attention output (through views) by the sigmoid of a float32 cast,
cast back after it, in the attention's module; a cat of an RMSNorm's output and that norm's input feeding a GEMM.
"""

from __future__ import annotations

from graphsim.ir import DType, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

_PORT = "SeungminHeo/vllm fork vllm/models/axk2/attention.py:AXK2Attention.forward"


def _match_fused_gate(ctx: FuseContext) -> list[Candidate]:
    out = []
    for m, s in P.attention_gate_muls(ctx):
        if s is None or s.op is not Op.SIGMOID or not ctx.is_free(s) or not s.inputs:
            continue
        c1 = ctx.producer(s.inputs[0])
        users = ctx.users.get(m.name, [])
        if (c1 is None or c1.op is not Op.CAST or not ctx.is_free(c1) or c1.outputs[0].dtype is not DType.FLOAT32
                or len(users) != 1 or users[0].op is not Op.CAST or not ctx.is_free(users[0])):
            continue
        out.append(Candidate([c1, s, m, users[0]]))
    return out


def _build_fused_gate(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    m, back = c.nodes[2], c.nodes[3]
    width, rows = P.per_token(m.outputs[0], m)
    return KernelAttrs(KernelKind.ELEMENTWISE, "fused_gate_act", ElementwiseGeometry(width=width, reads=2),
                       back.outputs[0].dtype.value, rows, tuple(n.name for n in c.nodes), "fused_gate_act")


FUSED_GATE_ACT = Rule(
    "fused_gate_act", f"{_PORT} (output, _ = fused_gate_act_quant(y=output, gate=gate, activation='sigmoid', "
    "quant_type='none') before o_proj: common/fused_gated_rmsnorm_quant.py _fused_gate_act_quant_kernel, one "
    "Triton kernel)", _match_fused_gate, _build_fused_gate,
)


def _norm_input(ctx: FuseContext, n: Node | None) -> str | None:
    """The value an RMSNorm module's nodes normalise, when `n` is that module's output (its scope holds the norm)."""
    if n is None or not n.scope:
        return None
    first = next((m for m in ctx.nodes_in_scope(n.scope, exact=True) if m.inputs), None)
    return first.inputs[0] if first is not None and "RMSNorm" in (n.module_type or "") else None


def _match_latent_cat(ctx: FuseContext) -> list[Candidate]:
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.CAT or not ctx.is_free(n) or len(n.inputs) != 2:
            continue
        users = ctx.users.get(n.name, [])
        if not users or any(u.op is not Op.LINEAR for u in users):
            continue
        normed = ctx.producer(n.inputs[0])
        if _norm_input(ctx, normed) == n.inputs[1]:
            out.append(Candidate([n]))
    return out


def _build_cat(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    width, rows = P.per_token(n.outputs[0], n)
    return KernelAttrs(KernelKind.ELEMENTWISE, "cat", ElementwiseGeometry(width=width), n.outputs[0].dtype.value,
                       rows, (n.name,), "q_latent_cat")


Q_LATENT_CAT = Rule(
    "q_latent_cat", f"{_PORT} (q_b_input = torch.cat([q_c, q_c_prenorm], dim=-1) into the widened q_b_proj: one "
    "cat kernel)", _match_latent_cat, _build_cat,
)

# before the elementwise catch-alls (vllm.py RULES)
RULES: list[Rule] = [FUSED_GATE_ACT, Q_LATENT_CAT]

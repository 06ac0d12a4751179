"""vLLM fuse rules for the small elementwise ops a model's vLLM port runs as written (one PyTorch elementwise
kernel each on the custom-op path), which were priced as approximate placeholders:

- the sigmoid output gate of gated attention (Qwen3-Next / Qwen3.5 full-attention layers), per channel or per head,
  after a GQA or an MLA kernel, with the float32 casts around the sigmoid where the model writes them (HunYuan-V4,
  Bailing-hybrid / Ling 3, LFM3);
- the sigmoid gate of a shared expert and its sum with the routed experts (Qwen3-Next / Qwen3.5-MoE);
- a token tensor scaled by a learned parameter / buffer or a constant (Gemma-4's router input scaling, its
  per-layer `layer_scalar`, the embedding normalizer);
- the mul of a gated MLP whose activation has no act-and-mul kernel (BitNet's relu²: `act(gate(x)) * up(x)`);
- a residual add the fused add + RMSNorm cannot take because its sum feeds no norm (Gemma-4's
  `hidden_states + residual` before `* layer_scalar`).

Each becomes a named elementwise kernel (`sigmoid`, `mul`, `add`: the op vLLM launches, same name as the
traced op so location maps keep their locations) priced by its bytes like any memory-bound kernel, and no
longer marked approximate. Rules run after every specific rule, so they only take what nothing else fused.
"""

from __future__ import annotations

from graphsim.ir import EmbeddingAttrs, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _one_kernel(rule: str):
    """One elementwise kernel per candidate node, named after its op, at the node's per-token width (the
    candidate's info may name another rule for the kernel)."""
    def build(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
        n = c.nodes[0]
        width, rows = P.per_token(n.outputs[0])
        return KernelAttrs(KernelKind.ELEMENTWISE, n.op.value, ElementwiseGeometry(width=width),
                           n.outputs[0].dtype.value, rows, (n.name,), c.info.get("rule", rule))

    return build


def _gate_chain(ctx: FuseContext, n: Node | None) -> list[Node] | None:
    """From the gate operand of an attention-output mul (through views) up to its sigmoid: [cast back?,
    sigmoid, cast to float?] (each free, one user each), or None when `n` is no such chain."""
    chain: list[Node] = []
    if n is not None and n.op is Op.CAST and ctx.is_free(n) and n.inputs:
        chain.append(n)
        n = P.through_views(ctx, n.inputs[0])
    if n is None or n.op is not Op.SIGMOID or not ctx.is_free(n) or not n.inputs:
        return None
    chain.append(n)
    before = ctx.producer(n.inputs[0])
    if before is not None and before.op is Op.CAST and ctx.is_free(before):
        chain.append(before)
    if any(len(P.users_through_views(ctx, c)) != 1 for c in chain):
        return None  # a gate value something else also reads is not this gate's own kernel
    return chain


def gate_candidates(ctx: FuseContext, chain_of) -> list[Candidate]:
    """One candidate per op of each attention output gate whose gate value `chain_of(ctx, node)` walks back to its
    activation (the chain, gate value first, or None): the chain's ops from the activation's input on, then the mul."""
    out = []
    for m, gate in P.attention_gate_muls(ctx):
        chain = chain_of(ctx, gate)
        if chain:
            out += [Candidate([n]) for n in (*reversed(chain), m)]
    return out


def _match_attn_output_gate(ctx: FuseContext) -> list[Candidate]:
    """In a module holding an attention node (MHA/GQA or MLA): a mul of the attention's output (through views) by
    a sigmoid (through views: a per-head gate is unsqueezed to the head dim), with the float32 cast before the
    sigmoid and the cast back after it when the model writes them — the gate vLLM applies between the attention
    kernel and o_proj, one kernel per op."""
    return gate_candidates(ctx, _gate_chain)


ATTN_OUTPUT_GATE = Rule(
    "attn_output_gate", "model_executor/models/qwen3_next.py:Qwen3NextAttention.forward (if attn_output_gate: "
    "gate = torch.sigmoid(gate); attn_output = attn_output * gate, before o_proj: one sigmoid and one mul kernel; "
    "models/qwen3_5.py Qwen3_5DecoderLayer builds the same Qwen3NextAttention); per head: models/hy_v4/nvidia/"
    "attention.py HYV4MLAAttention.forward (attn_out * torch.sigmoid(gate_score) after the MLA kernel, without "
    "VLLM_ENABLE_HPC_OPS), model_executor/models/bailing_moe_v3.py BailingMoeV3MLAAttention.forward (gate = "
    "torch.sigmoid(gate.float()).to(hidden_states.dtype); attn_out * gate.unsqueeze(-1): a cast, a sigmoid, a cast "
    "and a mul kernel)",
    _match_attn_output_gate, _one_kernel("attn_output_gate"),
)


def _match_shared_expert_gate(ctx: FuseContext) -> list[Candidate]:
    """A MoE block whose shared expert's output is scaled by a sigmoid gate before it is added to the routed
    experts' output: add(experts, mul(sigmoid(·), shared)) with the shared output from a GEMM inside the block."""
    out = []
    for e in [n for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS]:
        block = P.parent(e.scope)
        mine = P.views_of(ctx, e)
        for u in {u.name: u for v in mine for u in ctx.users.get(v, [])}.values():
            if u.op is not Op.ADD or not ctx.is_free(u) or len(u.inputs) != 2:
                continue
            others = [p for v in u.inputs if (p := ctx.producer(v)) is not None and p.name not in mine]
            if len(others) != 1 or others[0].op is not Op.MUL or not ctx.is_free(others[0]):
                continue
            m = others[0]
            ins = [ctx.producer(v) for v in m.inputs]
            sig = [p for p in ins if p is not None and p.op is Op.SIGMOID and ctx.is_free(p)]
            rest = [p for p in ins if p is not None and p not in sig]
            if len(sig) == 1 and len(rest) == 1 and rest[0].op is Op.LINEAR and rest[0].scope.startswith(block + "."):
                out += [Candidate([sig[0]]), Candidate([m]), Candidate([u], {"rule": "moe_shared_sum"})]
    return out


SHARED_EXPERT_GATE = Rule(
    "shared_expert_gate", "model_executor/models/qwen2_moe.py:Qwen2MoeMLP.forward (out = F.sigmoid("
    "self.expert_gate(x)[0]) * out: a sigmoid and a mul kernel; Qwen3-Next / Qwen3.5-MoE's shared expert is this "
    "class, qwen3_next.py Qwen3NextSparseMoeBlock), then the routed + shared add before the one all-reduce",
    _match_shared_expert_gate, _one_kernel("shared_expert_gate"),
)


def _has_tokens(n: Node) -> bool:
    return any(not isinstance(d, int) for d in n.outputs[0].shape)


def _match_param_scale(ctx: FuseContext) -> list[Candidate]:
    """A mul of one token tensor by parameters / buffers or a constant (a one-input mul): no other
    activation enters it."""
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.MUL or not ctx.is_free(n) or not _has_tokens(n) or ctx.index_only(n):
            continue  # position arithmetic (index_only) stays absorbed
        acts = [v for v in n.inputs if v not in ctx.graph.params and v not in ctx.graph.meta.buffers]
        producers = [ctx.producer(v) for v in acts]
        if len(acts) == 1 and producers[0] is not None and _has_tokens(producers[0]):
            out.append(Candidate([n]))
    return out


PARAM_SCALE = Rule(
    "param_scale", "model_executor/models/gemma4.py: Gemma4Router.forward (x * root_size, then x * scale: two "
    "mul kernels before the router GEMM), Gemma4DecoderLayer.forward (hidden_states * layer_scalar), "
    "Gemma4SelfDecoderLayers.embed_input_ids (embed_tokens(input_ids) * normalizer)",
    _match_param_scale, _one_kernel("param_scale"),
)


def _match_residual_add(ctx: FuseContext) -> list[Candidate]:
    """An add of two token tensors of the model's hidden width in a decoder layer's own scope (the residual
    stream) that no fused add + RMSNorm claimed."""
    hidden = {n.attrs_as(EmbeddingAttrs).embedding_dim for n in ctx.graph.nodes if n.op is Op.EMBEDDING}
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.ADD or not ctx.is_free(n) or n.layer is None or len(n.inputs) != 2 or not _has_tokens(n):
            continue
        if not all((p := ctx.producer(v)) is not None and _has_tokens(p) for v in n.inputs):
            continue
        width, _ = P.per_token(n.outputs[0])
        if n.scope.rsplit(".", 1)[-1].isdigit() and (not hidden or width in hidden):
            out.append(Candidate([n]))
    return out


RESIDUAL_ADD = Rule(
    "residual_add", "model_executor/models/gemma4.py:Gemma4DecoderLayer.forward (hidden_states = hidden_states + "
    "residual after post_feedforward_layernorm; the sum is then scaled by layer_scalar, so no fused_add_rms_norm "
    "takes it: one add kernel)",
    _match_residual_add, _one_kernel("residual_add"),
)

def _gate_projection(ctx: FuseContext, n: Node | None) -> Node | None:
    """The GEMM an activation's chain of free one-input elementwise ops (relu, then its square) starts from."""
    while n is not None and n.op is not Op.LINEAR and len(n.inputs) == 1 and n.op.group is OpGroup.ELEMENTWISE:
        n = P.through_views(ctx, n.inputs[0])
    return n if n is not None and n.op is Op.LINEAR else None


def _match_glu_mul(ctx: FuseContext) -> list[Candidate]:
    """`act(gate(x)) * up(x)` whose activation no act-and-mul kernel took (relu², two ops): the mul of an
    activation of one GEMM by a sibling GEMM reading the same input."""
    out = []
    for m in ctx.graph.nodes:
        if m.op is not Op.MUL or not ctx.is_free(m) or len(m.inputs) != 2:
            continue
        a, b = (P.through_views(ctx, v) for v in m.inputs)
        for act, up in ((a, b), (b, a)):
            if act is None or up is None or up.op is not Op.LINEAR or act.op is Op.LINEAR:
                continue
            gate = _gate_projection(ctx, act)
            if gate is not None and gate is not up and gate.inputs[:1] == up.inputs[:1]:
                out.append(Candidate([m]))
                break
    return out


GLU_MUL = Rule(
    "glu_mul", "model_executor/models/transformers/fusers/glu.py:GLUFuser (vLLM's Transformers backend, the only "
    "vLLM path for BitNet: `act(gate(x)) * up(x)` becomes one act-and-mul kernel only for the activations in "
    "layers/activation.py _ACTIVATION_AND_MUL_REGISTRY; relu2 is not, so validate() refuses and the mul runs as "
    "written: one mul kernel)", _match_glu_mul, _one_kernel("glu_mul"),
)

RULES: list[Rule] = [ATTN_OUTPUT_GATE, SHARED_EXPERT_GATE, GLU_MUL, PARAM_SCALE, RESIDUAL_ADD]

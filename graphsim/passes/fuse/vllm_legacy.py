"""vLLM fuse rules for GPT-era decoders (GPT-2, GPT-J, GPT-Neo(X), GPT-BigCode, OPT, BLOOM, Falcon, MPT, ...): what
their vLLM ports launch where the Llama-era rules would misname or leave placeholders.

- A norm module that is one native `layer_norm` op (torch's `nn.LayerNorm`, weight and bias) is torch's layer-norm
  kernel, `layer_norm`, and takes no residual add: vLLM's ports build these norms as plain `nn.LayerNorm`
  (model_executor/models/gpt2.py `GPT2Block.__init__`: `self.ln_1 = nn.LayerNorm(...)`; bloom.py `BloomBlock`,
  opt.py `OPTDecoderLayer`, gpt_j.py `GPTJBlock`, gpt_bigcode.py `GPTBigCodeBlock`, falcon.py `FalconDecoderLayer`,
  mpt.py `MPTBlock`), whose forward is `F.layer_norm` (one ATen kernel), and add the residual with a plain `+`
  (gpt2.py `GPT2Block.forward`: `hidden_states = attn_output + residual`). So the add stays its own `add` kernel.
- The residual adds of such a layer, wherever in the layer the model's code puts them (BLOOM adds inside its
  attention and MLP modules, GPT-J adds attention, MLP and residual in its block), are one `add` kernel each.
- The sum of the token and learned position embeddings is one `add` kernel (gpt2.py `GPT2Model.forward`:
  `hidden_states = inputs_embeds + position_embeds`; opt.py `OPTDecoder.forward`: `inputs_embeds + pos_embeds`).
- An ungated activation module written as elementwise math (transformers' `NewGELUActivation`, `FastGELUActivation`,
  `QuickGELUActivation`, `BloomGelu`, ...) is the one activation kernel vLLM's `get_act_fn` returns for it
  (model_executor/layers/activation.py `_ACTIVATION_REGISTRY`: "gelu_new" → `NewGELU` → `ops.gelu_new`, "gelu_fast"
  → `FastGELU` → `ops.gelu_fast`, "quick_gelu" → `QuickGELU` → `ops.gelu_quick`, "gelu" → `nn.GELU()`; bloom.py
  `BloomMLP.__init__`: `self.gelu_impl = get_act_fn("gelu")`).
- A query scaled by a constant before the attention (OPT's `query_states * self.scaling`) is absorbed: vLLM hands the
  scale to the attention kernel (opt.py `OPTAttention.__init__`: `Attention(..., scale=self.scaling)`; its forward
  does not multiply).
"""

from __future__ import annotations

import re
from dataclasses import replace

from graphsim.ir import AttentionAttrs, EmbeddingAttrs, LinearAttrs, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry, GemmGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

# transformers' activation module classes (activations.py, models/bloom/modeling_bloom.py) → the kernel vLLM's
# get_act_fn launches for the config's activation of that name (model_executor/layers/activation.py
# _ACTIVATION_REGISTRY). GELUActivation / GELUTanh trace as one aten gelu and are the generic `activation` rule's.
ACTIVATION_MODULES = {
    "NewGELUActivation": "gelu_new", "FastGELUActivation": "gelu_fast", "QuickGELUActivation": "gelu_quick",
    "BloomGelu": "gelu",
}


def _absorb(_ctx, _cand):
    return None


def _hidden_widths(ctx: FuseContext) -> set[int]:
    return {n.attrs_as(EmbeddingAttrs).embedding_dim for n in ctx.graph.nodes if n.op is Op.EMBEDDING}


def _has_tokens(n: Node) -> bool:
    return any(not isinstance(d, int) for d in n.outputs[0].shape)


# --- torch layer norm ------------------------------------------------------------------------------------------
def _match_torch_layer_norm(ctx: FuseContext) -> list[Candidate]:
    """Norm modules whose only compute is one native layer_norm op (views and casts around it allowed)."""
    out = []
    for c in P.norm_units(ctx):
        ops = [n for n in c.nodes if n.op not in P.ABSORBED_OPS and n.op is not Op.CAST]
        if len(ops) == 1 and ops[0].op is Op.LAYER_NORM and all(ctx.is_free(n) for n in c.nodes):
            out.append(c)
    return out


def _build_layer_norm(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    out = c.nodes[-1].outputs[0]
    elems, _ = P.per_token(out)
    return KernelAttrs(KernelKind.LAYER_NORM, "layer_norm", NormGeometry(width=elems, dim=c.info["width"]),
                       out.dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "torch_layer_norm")


TORCH_LAYER_NORM = Rule(
    "torch_layer_norm", "model_executor/models/gpt2.py:GPT2Block.__init__ (self.ln_1 = nn.LayerNorm(hidden_size, "
    "eps=...): torch's F.layer_norm, one ATen layer-norm kernel reading x, weight and bias; the residual is added "
    "by a separate `+` in GPT2Block.forward); likewise bloom.py BloomBlock, opt.py OPTDecoderLayer, gpt_j.py "
    "GPTJBlock, gpt_bigcode.py GPTBigCodeBlock, falcon.py FalconDecoderLayer, mpt.py MPTBlock",
    _match_torch_layer_norm, _build_layer_norm,
)


# --- adds ------------------------------------------------------------------------------------------------------
def _one_add(rule: str):
    def build(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
        n = c.nodes[0]
        width, rows = P.per_token(n.outputs[0])
        return KernelAttrs(KernelKind.ELEMENTWISE, "add", ElementwiseGeometry(width=width), n.outputs[0].dtype.value,
                           rows, (n.name,), rule)

    return build


def _from_embedding(ctx: FuseContext, v: str) -> bool:
    p = ctx.producer(v)
    while p is not None and p.op in P.ABSORBED_OPS and p.inputs:
        p = ctx.producer(p.inputs[0])
    return p is not None and p.op is Op.EMBEDDING


def _match_embedding_sum(ctx: FuseContext) -> list[Candidate]:
    """Before the layers: an add of two token tensors of one shape, one of them an embedding's gather (the other the
    token embedding, or its projection: OPT-350m's project_in)."""
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.ADD or not ctx.is_free(n) or n.layer is not None or len(n.inputs) != 2 or not _has_tokens(n):
            continue
        producers = [ctx.producer(v) for v in n.inputs]
        if all(p is not None and p.outputs[0].shape == n.outputs[0].shape for p in producers) \
                and any(_from_embedding(ctx, v) for v in n.inputs):
            out.append(Candidate([n]))
    return out


EMBEDDING_SUM = Rule(
    "position_embedding_add", "model_executor/models/gpt2.py:GPT2Model.forward (hidden_states = inputs_embeds + "
    "position_embeds: one add kernel); opt.py OPTDecoder.forward (inputs_embeds, after project_in when "
    "word_embed_proj_dim differs, + pos_embeds)",
    _match_embedding_sum, _one_add("position_embedding_add"),
)


def _match_layer_residual_add(ctx: FuseContext) -> list[Candidate]:
    """An add of two token tensors of the model's hidden width anywhere inside a decoder layer, that no fused
    add + norm took."""
    hidden = _hidden_widths(ctx)
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.ADD or not ctx.is_free(n) or n.layer is None or len(n.inputs) != 2 or not _has_tokens(n):
            continue
        producers = [ctx.producer(v) for v in n.inputs]
        if not all(p is not None and _has_tokens(p) and p.outputs[0].shape == n.outputs[0].shape for p in producers):
            continue
        width, _ = P.per_token(n.outputs[0])
        if width in hidden:
            out.append(Candidate([n]))
    return out


LAYER_RESIDUAL_ADD = Rule(
    "layer_residual_add", "model_executor/models/gpt2.py:GPT2Block.forward (hidden_states = attn_output + residual; "
    "residual + feed_forward_hidden_states: plain adds, no fused add + norm with nn.LayerNorm); bloom.py "
    "BloomBlock.forward (attention_output + residual, self.mlp(...) + residual); gpt_j.py GPTJBlock.forward "
    "(attn_output + mlp_output + residual)",
    _match_layer_residual_add, _one_add("layer_residual_add"),
)


# --- activations -----------------------------------------------------------------------------------------------
def _match_activation_module(ctx: FuseContext) -> list[Candidate]:
    out = []
    for scope, nodes in P.scopes_with_class(ctx, _ACT_CLASS).items():
        cls = nodes[0].module_type or ""
        if cls not in ACTIVATION_MODULES or not all(ctx.is_free(n) for n in nodes):
            continue
        if all(n.op.group is OpGroup.ELEMENTWISE or n.op in P.ABSORBED_OPS for n in nodes):
            out.append(Candidate(nodes, {"act": ACTIVATION_MODULES[cls], "scope": scope}))
    return out


def _build_activation_module(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    out = c.nodes[-1].outputs[0]
    width, rows = P.per_token(out)
    return KernelAttrs(KernelKind.ACTIVATION, c.info["act"], ElementwiseGeometry(width=width), out.dtype.value, rows,
                       tuple(n.name for n in c.nodes), "activation_module")


_ACT_CLASS = re.compile("^(" + "|".join(map(re.escape, ACTIVATION_MODULES)) + ")$")

ACTIVATION_MODULE = Rule(
    "activation_module", "model_executor/layers/activation.py:get_act_fn (_ACTIVATION_REGISTRY: gelu_new → "
    "NewGELU.forward_cuda → ops.gelu_new; gelu_fast → FastGELU → ops.gelu_fast; quick_gelu → QuickGELU → "
    "ops.gelu_quick; gelu → nn.GELU()); bloom.py BloomMLP.__init__ (get_act_fn(\"gelu\")); gpt2.py GPT2MLP.__init__ "
    "(get_act_fn(config.activation_function))",
    _match_activation_module, _build_activation_module,
)


# --- the attention's query scale --------------------------------------------------------------------------------
def _match_query_scale(ctx: FuseContext) -> list[Candidate]:
    """In an attention module: a one-input mul (by a constant) of a projection's output whose value reaches only the
    attention node, as its query (through views)."""
    out = []
    for a in P.attention_nodes(ctx):
        for n in ctx.nodes_in_scope(a.scope, exact=True):
            if n.op is not Op.MUL or not ctx.is_free(n) or len(n.inputs) != 1:
                continue
            p = ctx.producer(n.inputs[0])
            if p is None or p.op is not Op.LINEAR:
                continue
            values, todo, users = set(ctx.outputs_of([n])), [n.name], []
            while todo:
                for u in ctx.users.get(todo.pop(), []):
                    if u.op in P.ABSORBED_OPS and ctx.is_free(u):
                        values |= set(ctx.outputs_of([u]))
                        todo.append(u.name)
                    else:
                        users.append(u)
            if users and all(u is a for u in users) and a.inputs[0] in values and not set(a.inputs[1:]) & values:
                out.append(Candidate([n]))
    return out


QUERY_SCALE = Rule(
    "query_scale", "model_executor/models/opt.py:OPTAttention (self.attn = Attention(..., scale=self.scaling); "
    "forward passes q unscaled: the scale is the attention kernel's softmax_scale, no mul kernel)",
    _match_query_scale, _absorb,
)


# --- a fused QKV projection that is one linear ------------------------------------------------------------------
def qkv_split(ctx: FuseContext, linear: Node, attrs: KernelAttrs) -> KernelAttrs:
    """A single projection whose output is split into an attention's q, k and v (GPT-2 / GPT-BigCode `c_attn`,
    BLOOM / Falcon `query_key_value`, MPT `Wqkv`) is vLLM's `QKVParallelLinear` (gpt2.py GPT2Attention, gpt_bigcode.py
    GPTBigCodeAttention, bloom.py BloomAttention, falcon.py FalconAttention, mpt.py MPTAttention): record the q/kv
    split so tp keeps whole KV heads per rank (replicated beyond num_kv_heads), as for a packed qkv_proj."""
    attn = next((a for a in P.attention_nodes(ctx) if a.scope == P.parent(linear.scope)), None)
    if attn is None or len(attn.inputs) < 3:
        return attrs
    aa = attn.attrs_as(AttentionAttrs)
    if aa.kv_lora_rank:
        return attrs
    for v in attn.inputs[:3]:  # q, k and v each come from this linear (through views, splits and RoPE)
        if not _reaches(ctx, v, linear, attn.scope):
            return attrs
    g = attrs.geometry_as(GemmGeometry)
    q = aa.num_heads * aa.head_dim
    if g.n != q + aa.num_kv_heads * (aa.head_dim + aa.v_head_dim) or linear.attrs_as(LinearAttrs).out_features != g.n:
        return attrs
    return attrs.with_geometry(replace(g, q_features=q, num_kv_heads=aa.num_kv_heads))


def _reaches(ctx: FuseContext, value: str, target: Node, scope: str) -> bool:
    """True if `value` is computed from `target`'s output by nodes of `scope` (and below) alone."""
    todo, seen = [value], set()
    while todo:
        p = ctx.producer(todo.pop())
        if p is None or p.name in seen:
            continue
        if p is target:
            return True
        seen.add(p.name)
        if p.op is not Op.LINEAR and (p.scope == scope or p.scope.startswith(scope + ".")):
            todo.extend(p.inputs)
    return False


EARLY_RULES: list[Rule] = [TORCH_LAYER_NORM]  # before the fused add + RMSNorm rule takes the add
RULES: list[Rule] = [EMBEDDING_SUM, ACTIVATION_MODULE, QUERY_SCALE]  # before the elementwise rules
LATE_RULES: list[Rule] = [LAYER_RESIDUAL_ADD]  # after the elementwise rules' own residual add

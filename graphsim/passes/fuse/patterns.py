"""Structural matchers shared by the fuse targets (no engine knowledge here).

They find things by what the graph says — op kinds, module classes, module scopes and data
flow — never by model name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sympy

from graphsim.errors import UnsupportedArchitectureError
from graphsim.ir import AttentionAttrs, LinearAttrs, Node, Op, T, TensorSpec
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import VIEW_LIKE, OpGroup
from graphsim.passes.fuse.core import Candidate, FuseContext

# L2Norm: Llama-4's weightless qk_norm (vLLM RMSNorm). The name ends in the norm (or a norm's suffix of the pinned
# transformers' classes: …RMSNormGated, …LayerNorm2d, …LayerNorm1P, …RMSNormZero, …PerHead): a model named after
# one (RobertaPreLayerNorm…Embeddings / …Attention / …Layer) is no norm.
NORM_CLASS = re.compile(r"(RMSNorm|LayerNorm|L2Norm)(Gated|2d|1P|Zero\w*|PerHead)?$", re.I)
ROTARY_CLASS = re.compile(r"Rotary", re.I)
ABSORBED_OPS = VIEW_LIKE | {Op.ARANGE, Op.FULL}
ACTIVATIONS = {Op.SILU: "silu", Op.GELU: "gelu", Op.RELU: "relu"}


def through_views(ctx: FuseContext, value: str) -> Node | None:
    """The node producing `value`, looking through the ops the fuser absorbs (views, arange, full)."""
    p = ctx.producer(value)
    while p is not None and p.op in ABSORBED_OPS and p.inputs:
        p = ctx.producer(p.inputs[0])
    return p


def views_of(ctx: FuseContext, n: Node) -> set[str]:
    """`n` and the absorbed nodes (views, arange, full) that carry its output unchanged (names)."""
    mine, todo = {n.name}, [n.name]
    while todo:
        for u in ctx.users.get(todo.pop(), []):
            if u.op in ABSORBED_OPS and u.name not in mine:
                mine.add(u.name)
                todo.append(u.name)
    return mine


def users_through_views(ctx: FuseContext, n: Node) -> list[Node]:
    """The nodes that read `n`'s output, looking through the absorbed nodes carrying it (each once)."""
    out, todo, seen = [], [n.name], {n.name}
    while todo:
        for u in ctx.users.get(todo.pop(), []):
            if u.name in seen:
                continue
            seen.add(u.name)
            if u.op in ABSORBED_OPS:
                todo.append(u.name)
            else:
                out.append(u)
    return out


def attention_gate_muls(ctx: FuseContext) -> list[tuple[Node, Node | None]]:
    """(mul, the producer of its other operand) for every free two-input mul in an attention node's scope that
    takes that attention's output (through views): the output gates model ports fuse before o_proj."""
    out = []
    for a in (n for n in ctx.graph.nodes if n.op is Op.ATTENTION):
        for m in ctx.nodes_in_scope(a.scope, exact=True):
            if m.op is not Op.MUL or not ctx.is_free(m) or len(m.inputs) != 2:
                continue
            sources = [through_views(ctx, v) for v in m.inputs]
            if a in sources:
                out.append((m, sources[1 - sources.index(a)]))
    return out


def per_token(spec: TensorSpec, node: Node | None = None) -> tuple[int, Rows]:
    """Elements per token of a value and whether it scales with tokens. A size that depends on the data (a symbol
    other than T: torch.export's unbacked sizes, e.g. the tokens a loop over experts gives each expert) has no
    per-token width: an error naming the op (`node`, when given) and what it needs."""
    n = spec.numel
    if isinstance(n, int):
        return n, Rows.ONCE
    expr = sympy.expand(n)
    data = sorted(str(s) for s in expr.free_symbols - {T})
    if data:
        where = f"{node.op.value} in {node.module_type or 'the model'} ({node.scope})" if node else "a value"
        raise UnsupportedArchitectureError(
            f"graphsim cannot price {where}: its shape {tuple(str(d) for d in spec.shape)} depends on the data "
            f"({', '.join(data[:4])}{', ...' if len(data) > 4 else ''}: e.g. the tokens a loop over experts routes "
            "to each), not on the token count alone; this mechanism needs a semantic op or fuse rule in graphsim "
            "(docs/adding-an-architecture.md); graphsim work / kv may still account it from the config")
    coeff = expr.coeff(T, 1)
    if coeff.free_symbols or coeff == 0:
        return int(expr.subs(T, 1)), Rows.TOKENS
    return int(coeff), Rows.TOKENS


def parent(scope: str) -> str:
    return scope.rsplit(".", 1)[0] if "." in scope else ""


def leaf(scope: str) -> str:
    return scope.rsplit(".", 1)[-1]


def scopes_with_class(ctx: FuseContext, pattern: re.Pattern) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for n in ctx.graph.nodes:
        if n.scope and pattern.search(n.module_type or ""):
            out.setdefault(n.scope, []).append(n)
    return out


# --- norms ---------------------------------------------------------------------------------
def norm_units(ctx: FuseContext) -> list[Candidate]:
    """Every node of one call of a norm module (cast, pow, mean, rsqrt, mul, …) as one unit. A module called twice
    (NanoChat's weightless `self.norm` before and after the layers) is two units: its nodes split by data flow."""
    out = []
    for scoped in scopes_with_class(ctx, NORM_CLASS).values():
        for nodes in _calls(ctx, scoped):
            width = int(nodes[-1].outputs[0].shape[-1])
            out.append(Candidate(nodes, {"width": width, "class": nodes[0].module_type}))
    return out


def _calls(ctx: FuseContext, nodes: list[Node]) -> list[list[Node]]:
    """`nodes` (one module's, in graph order) grouped into the connected pieces of their data flow among
    themselves: one piece per call of the module."""
    root = {n.name: n.name for n in nodes}

    def find(x: str) -> str:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for n in nodes:
        for v in n.inputs:
            p = ctx.producer(v)
            if p is not None and p.name in root:
                root[find(n.name)] = find(p.name)
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(find(n.name), []).append(n)
    return list(groups.values())


def residual_add_for(ctx: FuseContext, cand: Candidate) -> Node | None:
    """The residual ADD whose sum a norm unit normalises (and which the stream carries on)."""
    acts = [v for v in ctx.external_inputs(cand.nodes) if v not in ctx.graph.params]
    for v in acts:
        p = ctx.producer(v)
        if p is None or p.op is not Op.ADD or not ctx.is_free(p) or len(p.inputs) != 2:
            continue
        if p.outputs[0].shape[-1] != cand.info["width"]:
            continue
        # the residual stream holds one row of the norm's width per token; a per-head sum of width head_dim
        # (RoPE's q·cos + rot(q)·sin before a qk-norm: NanoChat, HunYuan) holds heads × head_dim
        try:
            if per_token(p.outputs[0])[0] != cand.info["width"]:
                continue
        except UnsupportedArchitectureError:
            continue
        if all(ctx.spec(i).shape == p.outputs[0].shape for i in p.inputs):
            return p
    return None


# --- linears -------------------------------------------------------------------------------
def linear_nodes(ctx: FuseContext) -> list[Node]:
    return [n for n in ctx.graph.nodes if n.op is Op.LINEAR]


def packed_linears(ctx: FuseContext, groups: dict[str, tuple[str, ...]],
                   input_of: Callable[[Node], str] | None = None,
                   applies: Callable[[str, Node], bool] | None = None) -> list[Candidate]:
    """Linears of one module that read the same input (`input_of`: the value a linear reads, by default its
    first input) and are named in a packed group → one candidate per group. A member is named by its path under
    the packing module: a leaf name for a direct child (`q_proj`), a dotted path for a linear transformers keeps in
    a submodule (`forget_gate.f_a_proj`). `applies(group, linear)`: whether the group packs in that linear's
    module (default: everywhere). Where groups overlap (q/k/v in both a `qkv_proj` and a `qkvb_proj`), the group
    with the most members present claims them first, and of two with as many, the one whose every member is
    present (q/k/v alone are a `qkv_proj`); a group needs two."""
    siblings: dict[tuple[str, str], dict[str, Node]] = {}
    members = sorted({m for ms in groups.values() for m in ms}, key=len, reverse=True)  # the longest path names it
    for n in linear_nodes(ctx):
        m = next((m for m in members if n.scope == m or n.scope.endswith("." + m)), None)
        if m is not None:
            owner = n.scope[:-len(m)].rstrip(".")
            siblings.setdefault((owner, input_of(n) if input_of else n.inputs[0]), {})[m] = n
    out = []
    for named in siblings.values():
        left = dict(named)
        first = min(named.values(), key=lambda n: ctx.pos[n.name])
        here = {packed: ms for packed, ms in groups.items() if applies is None or applies(packed, first)}
        while here:
            present = [(sum(m in left for m in ms), all(m in left for m in ms), -i, packed)
                       for i, (packed, ms) in enumerate(here.items())]
            count, _, _, packed = max(present)
            if count < 2:
                break
            picked = sorted((left.pop(m) for m in here[packed] if m in left), key=lambda n: ctx.pos[n.name])
            out.append(Candidate(picked, {"packed": packed}))
    return out


def feeds_graph_output(ctx: FuseContext, node: Node) -> bool:
    """True if the node's value reaches a graph output through view-like ops / casts / softcaps only."""
    frontier = [node]
    seen = set()
    outs = set(ctx.graph.outputs)
    while frontier:
        n = frontier.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        if any(v in outs for v in ctx.outputs_of([n])):
            return True
        for v in ctx.outputs_of([n]):
            for u in ctx.users.get(v, []):
                if u.op in ABSORBED_OPS or u.op.group is OpGroup.ELEMENTWISE:
                    frontier.append(u)
    return False


def gemm_attrs(ctx: FuseContext, nodes: list[Node], name: str, rule: str, dtype: str | None = None,
               rows: Rows = Rows.TOKENS) -> KernelAttrs:
    linears = [n.attrs_as(LinearAttrs) for n in nodes]
    geo = GemmGeometry(n=sum(a.out_features for a in linears), k=linears[0].in_features,
                       bias=any(a.has_bias for a in linears))
    return KernelAttrs(KernelKind.GEMM, name, geo, dtype or nodes[0].outputs[0].dtype.value, rows,
                       tuple(n.name for n in nodes), rule)


# --- attention -----------------------------------------------------------------------------
def attention_nodes(ctx: FuseContext) -> list[Node]:
    return [n for n in ctx.graph.nodes if n.op is Op.ATTENTION]


def rotary_unit(ctx: FuseContext, attn: Node) -> Candidate | None:
    """Elementwise / data-movement nodes of the attention module that lead into the attention
    node (and into no projection or norm), when some of them read the rotary tables (cos/sin)."""
    scope = attn.scope
    in_scope = [n for n in ctx.nodes_in_scope(scope) if ctx.pos[n.name] < ctx.pos[attn.name]]
    feeders = {n.name for n in ancestors_within(ctx, attn, {scope})}
    linears = [n for n in in_scope if n.op is Op.LINEAR]
    norms = [n for n in in_scope if NORM_CLASS.search(n.module_type or "")]
    feeds_linear = {a.name for h in linears for a in ancestors_within(ctx, h, {scope})}
    feeds_norm = {a.name for h in norms for a in ancestors_within(ctx, h, {scope})}
    cand = [n for n in in_scope
            if n.scope == scope and n.name in feeders and n.name not in feeds_linear and ctx.is_free(n)
            and n.op.group in (OpGroup.ELEMENTWISE, OpGroup.DATA_MOVEMENT)]
    # RoPE after a q/k norm (Qwen3) or before it (Llama-4): one side of the norm, never both (that would be a
    # cycle rotary → norm → rotary); the side that reads the rotary tables
    for side in ([n for n in cand if n.name not in feeds_norm], [n for n in cand if n.name in feeds_norm]):
        tables = [p for n in side for v in n.inputs
                  if (p := ctx.producer(v)) is not None and ROTARY_CLASS.search(p.module_type or "")]
        if tables:
            return Candidate(side, {"attention": attn, "rot_dim": rotary_dim(ctx, tables[0].scope)})
    return None


def rotary_dim(ctx: FuseContext, scope: str | None = None) -> int | None:
    """Elements of each head that RoPE rotates: twice the length of the rotary module's inverse
    frequencies (one frequency per rotated pair), whatever layout the model's code uses. `scope`: the rotary
    module the attention reads (a multimodal model also has its vision tower's, e.g. Qwen3.5's 18 frequencies
    against the text model's 32)."""
    tables = [(name, spec) for name, spec in list(ctx.graph.inputs.items()) + list(ctx.graph.params.items())
              if name.endswith("inv_freq") and spec.rank == 1 and isinstance(spec.shape[0], int)]
    own = [t for t in tables if scope and t[0] == f"{scope}.inv_freq"]
    for _, spec in own or tables:
        return 2 * int(spec.shape[0])
    return None


def attention_geometry(a: AttentionAttrs) -> AttentionGeometry:
    mla = bool(a.kv_lora_rank)
    return AttentionGeometry(
        num_heads=a.num_heads, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim, v_head_dim=a.v_head_dim,
        window=a.sliding_window or 0, causal=a.causal, sinks=a.has_sinks, softcap=a.softcap or 0.0,
        kv_lora_rank=a.kv_lora_rank or 0, qk_rope_head_dim=(a.qk_rope_head_dim or 0) if mla else 0,
        index_topk=a.index_topk or 0, compress_ratio=a.compress_ratio or 0, alibi=a.alibi,
    )


# --- activations, MoE, linear attention ------------------------------------------------------
def act_and_mul_units(ctx: FuseContext) -> list[Candidate]:
    """mul(act(x), y) where act's only user is that mul: a gated activation. Its width is the product's static last
    dimension; a product whose last dimension is symbolic (the tokens: Mamba's channels-first `x * act(z)` in
    (batch, channels, tokens)) or that is a scalar is no act-and-mul kernel over a feature row: left to other rules."""
    out = []
    for n in ctx.graph.nodes:
        shape = n.outputs[0].shape
        if n.op is not Op.MUL or len(n.inputs) != 2 or not shape or not isinstance(shape[-1], int):
            continue
        for v in n.inputs:
            p = ctx.producer(v)
            if p is not None and p.op in ACTIVATIONS and len(ctx.users.get(v, [])) == 1:
                out.append(Candidate([p, n], {"act": ACTIVATIONS[p.op], "width": int(n.outputs[0].shape[-1])}))
                break
    return out


def ancestors_within(ctx: FuseContext, node: Node, allowed: set[str]) -> list[Node]:
    """Free ancestors of `node` whose scope is in `allowed`, stopping at other scopes."""
    seen: set[str] = set()
    stack = list(node.inputs)
    out = []
    while stack:
        v = stack.pop()
        p = ctx.producer(v)
        if p is None or p.name in seen:
            continue
        seen.add(p.name)
        if not any(p.scope == s or p.scope.startswith(s + ".") for s in allowed):
            continue
        if ctx.is_free(p):
            out.append(p)
        stack.extend(p.inputs)
    return sorted(out, key=lambda n: ctx.pos[n.name])

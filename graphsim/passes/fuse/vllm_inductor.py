"""The `inductor` pass: vLLM's default compiled mode, where Inductor generates the kernels between the opaque ones.

The `vllm` fuse target gives vLLM's custom-op path (`--enforce-eager`): one `_C` kernel per norm, rotary and gated
activation, and one PyTorch kernel per other elementwise op of the port. vLLM's default is compiled (`-O2`,
VLLM_COMPILE, backend inductor): `custom_ops` gets "none" (vLLM 0.19 config/vllm.py VllmConfig.__post_init__), every
CustomOp runs its `forward_native` (model_executor/custom_op.py CustomOp.dispatch_forward), and Inductor generates
Triton kernels for everything between the opaque ops — GEMMs (extern kernels), attention / Mamba / linear-attention
(config/compilation.py CompilationConfig._attention_ops, the piecewise splitting ops), the MoE and collectives
(custom ops, Inductor fallback kernels). vLLM turns on Inductor's combo kernels on GPUs with torch >= 2.9
(config/compilation.py CompilationConfig.__post_init__: `combo_kernels` and `benchmark_combo_kernel`, "useful for
fusing qk-norm and qk-rope when query and key have different shapes").

Inductor's rules (torch 2.13, torch/_inductor):
- scheduler.py Scheduler._can_fuse: an extern / fallback kernel fuses with nothing ("node1 is extern but not a triton
  kernel", "node2 is extern or nop"); codegen/simd.py SIMDScheduling.can_fuse: two reductions fuse when their numel
  and rnumel are equal (a norm over the hidden size after another, as softmax's max and sum), pointwise nodes when
  their sizes match, a pointwise consumer into a reduction of its size;
- scheduler.py ForeachKernelSchedulerNode._default_group_nodes_for_combo_kernels: nodes at one topological level,
  independent of each other, become one combo kernel (at most `combo_kernel_max_num_nodes`, 8).

What that gives, counted with the installed torch (benchmarks/inductor_regions.py, the scheduler's Triton fusion
decisions with combo kernels as vLLM sets them; CPU device, codegen stopped since triton is not installed here):
- Llama-style layer: 4 generated kernels (add + RMSNorm, rotary of q and k, add + RMSNorm, SiLU·mul), as many as the
  custom-op path;
- Gemma-4 after the qkv GEMM: q/k/v norms in one combo kernel, then the q and k rotary (it reads the normalized
  head at the rotated index, which no reduction epilogue can) in one: 2 for the custom-op path's 4;
- Gemma-4 between the o_proj all-reduce and the next GEMMs (post-attention norm, residual add, pre-FFN norm, the
  router's norm and scales, the experts' input norm), and after the MoE's and the MLP's all-reduces (two post-FFN
  norms, their sum, the post-FFN norm, residual add, layer scalar): 1 kernel each for 6 + 5;
- Nemotron-H's residual add + RMSNorm + the router input's float32 cast: 1 for 2.

The pass applies those rules to a fused kernel graph: the kernels Inductor generates (norms, rotary, activations and
the port's plain elementwise ops, per token) connected to each other form a region, regions fed by the same opaque
kernels are one (combo kernels), and a region runs as many kernels as its longest chain of edges that cannot fuse
(a reduction into a rotary, or a change of per-token size). Each of those kernels is an elementwise kernel priced by
the region's external bytes (inputs read once, outputs read outside it, each at its rank's width: the kernels'
geometries, which the tp pass shards, not the value specs, which it leaves whole), `derived` from the profile's
launch floor and achieved bandwidth like any row-less memory-bound kernel. A region Inductor runs as the custom-op path's kernels
(as many) is left as it is, so a dense Llama / Qwen2 layer keeps its kernels and their rows. Kernels that stay custom
ops or Triton / CUDA kernels in compiled mode (gated RMSNorm, fused gating kernels, scans, MoE, attention) are not
touched.

Combo kernels are vLLM >= 0.12's (torch >= 2.9; vLLM 0.11.0's config/compilation.py has no `combo_kernels`):
`inductor{combo=0}` leaves independent kernels of a region apart, as there (Gemma-4's q, k and v norms three
kernels), and runs a rotary as one kernel for q and one for k (`split_rotary`: the custom op does both in one; a
Llama layer runs 5 generated kernels, not 4, Qwen3's q/k norms and rotary 4, Gemma-4's input norm to attention 6,
as benchmarks/inductor_regions.py --backend triton counts), each half priced by its own bytes (its heads read and
written, cos / sin read). MLA's rotary (q_pe / k_pe slices of its inputs) stays one kernel. The engine's version
picks the mode
(serving/engine_versions.py EngineProfile.compiled / .combo_kernels: V0 eager, V1 before 0.12 without combo
kernels) for the simulator's deployments, search's candidates and `predict --engine`; `pipeline_for`'s default is
the newest vLLM's.

A region across a layer boundary: vLLM splits its piecewise graph only at the attention ops, so a layer that ends
in generated kernels (Gemma-4's post-FFN norms, residual add and layer scalar) and the next layer's input norm are
one Inductor kernel (benchmarks/inductor_regions.py gemma_tail). The folded graph prices one layer per type, so
`across_layers` counts the merge a layer: the input norm leaves each representative (its readers read the layer's
input, same shape) and the layer's tail kernel also writes the norm's output; N layers give N merged kernels and the
final norm, vLLM's N + 1 (the first layer's lone input norm after the embedding's all-reduce, N - 1 merged
boundaries, the last tail with the final norm, all in Gemma4Model's compiled forward). Only when every
representative ends in one generated kernel and starts with a generated norm of its input alone (not Llama / Qwen,
whose layers end in the down GEMM: their fused add + norm is already the one boundary kernel, nor a fused add + norm
head reading the tail and a residual). Not modelled: the embedding's gather fusing with the first layer's scale and
norm at TP 1; vLLM's own fusion passes on top (AllReduce + RMSNorm at TP > 1 on Hopper, quant fusions)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.ir import Graph, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry, NormGeometry, RotaryGeometry
from graphsim.ir.graph import split_value, value_name
from graphsim.ir.kernel import KernelAttrs, KernelKind, MergedKernel, Rows, merged_of
from graphsim.passes.base import Pass, PassError, PassResult, register_pass

RULE = ("inductor_region: vLLM compiled mode (config/vllm.py custom_ops 'none', config/compilation.py combo_kernels) "
        "+ torch/_inductor scheduler.py Scheduler._can_fuse, codegen/simd.py SIMDScheduling.can_fuse")
NAME = "triton_fused"

# the custom-op kernels that run `forward_native` under Inductor (model_executor/layers/layernorm.py RMSNorm,
# rotary_embedding/base.py RotaryEmbedding, activation.py SiluAndMul / GeluAndMul / ReLUSquaredActivation …)
_NATIVE = {KernelKind.RMS_NORM: {"rms_norm"}, KernelKind.FUSED_ADD_RMS_NORM: {"fused_add_rms_norm"},
           KernelKind.LAYER_NORM: {"layer_norm"}, KernelKind.ROTARY: {"rotary_embedding"},
           KernelKind.ACT_AND_MUL: {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"}}
# the port's plain PyTorch elementwise ops (each its own kernel on the custom-op path)
_POINTWISE = {"add", "sub", "mul", "div", "neg", "cast", "sigmoid", "tanh", "exp", "pow", "rsqrt", "sqrt", "relu",
              "silu", "gelu", "softplus", "clamp", "abs", "where", "maximum", "minimum"}
_ACTIVATIONS = {"relu2", "relu", "silu", "gelu", "gelu_tanh", "gelu_new", "gelu_pytorch_tanh", "quick_gelu"}


def generated(a: KernelAttrs) -> bool:
    """Whether Inductor generates this kernel in compiled mode (else it stays an opaque kernel)."""
    if a.rows is not Rows.TOKENS:
        return False
    if a.kind in _NATIVE:
        return a.name in _NATIVE[a.kind]
    if a.kind is KernelKind.ACTIVATION:
        return a.name in _ACTIVATIONS
    return a.kind is KernelKind.ELEMENTWISE and a.name in _POINTWISE


def _space(a: KernelAttrs) -> tuple[int, int | None]:
    """(elements a token, reduced vector length or None for pointwise): Inductor's numel / rnumel per token."""
    g = a.geometry
    if isinstance(g, NormGeometry):
        return g.width, g.dim
    if isinstance(g, RotaryGeometry):
        return (g.num_heads + g.num_kv_heads) * g.rot_dim, None
    if isinstance(g, ElementwiseGeometry):
        return (g.in_width or g.width) if a.kind is KernelKind.ACT_AND_MUL else g.width, None
    return 0, None


def fuses(producer: KernelAttrs, consumer: KernelAttrs) -> bool:
    """Whether Inductor puts `consumer` in `producer`'s kernel (codegen/simd.py SIMDScheduling.can_fuse): a rotary
    reads the normalized head at the rotated index, so it never joins a reduction; otherwise the per-token size
    must be the same (reductions also over the same vector), a gated activation's output being half its input."""
    (pw, pd), (cw, cd) = _space(producer), _space(consumer)
    if consumer.kind is KernelKind.ROTARY and pd is not None:
        return False
    if producer.kind is KernelKind.ACT_AND_MUL:
        pw //= 2
    if pd is not None and cd is not None:
        return pw == cw and pd == cd
    return pw == cw


@dataclass
class _Region:
    nodes: list[Node]
    level: dict[str, int]


def _regions(graph: Graph, users: dict[str, list[str]], combo: bool) -> list[_Region]:
    """The generated kernels grouped as Inductor's scheduler would: in graph order each joins the group of a
    generated producer of its layer unless that makes a cycle through an opaque kernel
    (scheduler.py Scheduler.will_fusion_create_cycle); then groups fed by the same opaque kernels are one (combo
    kernels), again without a cycle; within a group, each kernel's level counts the edges on its way that cannot
    fuse (`fuses`): the group runs one kernel per level."""
    by_name = {n.name: n for n in graph.nodes}
    gen = {n.name for n in graph.nodes if n.op is Op.KERNEL and generated(n.kernel)}

    def producers(n: Node) -> list[Node]:
        out = []
        for v in n.inputs:
            src = by_name.get(split_value(v)[0]) if v not in graph.inputs and v not in graph.params else None
            if src is not None:
                out.append(src)
        return out

    group_of: dict[str, int] = {}
    groups: dict[int, set[str]] = {}

    def cyclic(names: set[str]) -> bool:
        return _reaches(by_name, names, users)

    def join(a: int, b: int) -> int:
        for x in groups.pop(b):
            group_of[x] = a
            groups[a].add(x)
        return a

    for n in graph.nodes:
        if n.name not in gen:
            continue
        mine: int | None = None
        for p in producers(n):
            g = group_of.get(p.name)
            if g is None or p.layer != n.layer or g == mine:
                continue
            if mine is None and not cyclic(groups[g] | {n.name}):
                groups[g].add(n.name)
                group_of[n.name] = mine = g
            elif mine is not None and not cyclic(groups[g] | groups[mine]):
                mine = join(mine, g)
        if mine is None:
            mine = len(group_of) + len(groups) + 1
            while mine in groups:
                mine += 1
            groups[mine] = {n.name}
            group_of[n.name] = mine
    # combo kernels: groups fed by the same opaque kernels (or graph inputs) are one
    first: dict[tuple[int | None, frozenset[str]], int] = {}
    for g in sorted(groups) if combo else ():
        if g not in groups:
            continue
        names = groups[g]
        src = frozenset(v for x in names for v in by_name[x].inputs
                        if split_value(v)[0] not in gen and v not in graph.params)
        key = (by_name[next(iter(names))].layer, src)
        if key in first and first[key] in groups and not cyclic(groups[first[key]] | names):
            join(first[key], g)
        elif key not in first:
            first[key] = g
    out = []
    for names in groups.values():
        nodes = [n for n in graph.nodes if n.name in names]
        level: dict[str, int] = {}
        for n in nodes:  # topological order
            level[n.name] = max((level[p.name] + (0 if fuses(p.kernel, n.kernel) else 1)
                                 for p in producers(n) if p.name in names), default=0)
        out.append(_Region(nodes, level))
    return out


def _external_elements(graph: Graph, members: set[str], users: dict[str, list[str]]) -> tuple[int, list[str]]:
    """Per token: elements the kernel reads from outside `members` (each value once) and writes for readers outside
    them; and the values it must still produce (read outside, or graph outputs)."""
    from graphsim.passes.fuse.patterns import per_token

    cap: dict[str, int] = {}  # a value's elements a token on this rank, from the kernels' geometries
    outs: list[str] = []
    for n in graph.nodes:
        if n.name not in members:
            continue
        for v in n.inputs:
            if split_value(v)[0] not in members and v not in graph.params:
                cap[v] = max(cap.get(v, 0), _rank_width(n.kernel))
        for i in range(len(n.outputs)):
            v = value_name(n.name, i)
            if v in graph.outputs or any(u not in members for u in users.get(v, [])):
                outs.append(v)
                cap[v] = _rank_width(n.kernel)
    elems = 0
    for v in [*sorted(v for v in cap if v not in outs), *outs]:
        w, rows = per_token(graph.spec_of(v))
        if rows is Rows.TOKENS:
            elems += min(w, cap[v] or w)
    return elems, outs


def _rank_width(a: KernelAttrs) -> int:
    """Elements a token of each tensor a kernel reads or writes on its rank (0: unknown). The tp pass shards the
    kernels' geometries, not the value specs: a per-head q / k / v norm's value spec holds every head, its
    geometry the rank's heads."""
    g = a.geometry
    if isinstance(g, NormGeometry):
        return g.width
    if isinstance(g, ElementwiseGeometry):
        return max(g.width, g.in_width or 0)
    if isinstance(g, RotaryGeometry):
        return (g.num_heads + g.num_kv_heads) * g.head_dim
    return 0


def _reaches(by_name: dict[str, Node], names: set[str], users: dict[str, list[str]]) -> bool:
    """Whether a path leaves `names` through a node outside them and comes back (a merge would then make a cycle:
    Inductor's Scheduler.will_fusion_create_cycle refuses such a fusion). Paths stay in the members' layer."""
    layer = by_name[next(iter(names))].layer

    def after(x: str) -> list[str]:
        return [u for i in range(len(by_name[x].outputs)) for u in users.get(value_name(x, i), [])
                if by_name[u].layer == layer]

    frontier = [u for s in names for u in after(s) if u not in names]
    seen: set[str] = set()
    while frontier:
        x = frontier.pop()
        if x in names:
            return True
        if x in seen:
            continue
        seen.add(x)
        frontier.extend(after(x))
    return False


def _connected(graph: Graph, part: list[Node]) -> list[list[Node]]:
    """`part` split where its kernels read nothing of each other (without combo kernels, independent kernels of
    one level stay apart)."""
    names = {n.name for n in part}
    root = {n: n for n in names}

    def find(x: str) -> str:
        while root[x] != x:
            x = root[x]
        return x

    for n in part:
        for v in n.inputs:
            src = split_value(v)[0]
            if src in names and v not in graph.inputs and v not in graph.params:
                root[find(src)] = find(n.name)
    out: dict[str, list[Node]] = {}
    for n in part:
        out.setdefault(find(n.name), []).append(n)
    return list(out.values())


KEY_SUFFIX = "_k"  # the key half of a rotary split without combo kernels (`split_rotary`)


def split_rotary(graph: Graph) -> tuple[Graph, set[str]]:
    """Without combo kernels Inductor runs the rotary of q and the rotary of k as two kernels: vLLM's
    `RotaryEmbedding.forward_native` (model_executor/layers/rotary_embedding/base.py, vLLM 0.10.1) rotates `query`
    and `key` in two independent computations of different sizes, which `SIMDScheduling.can_fuse` does not put in
    one kernel and only combo kernels group (benchmarks/inductor_regions.py --backend triton: a Llama layer 5
    kernels, 4 with --combo). Each generated rotary whose outputs are its inputs rotated one for one (q, k, then
    pass-through values such as v) becomes a q node and a k node (`<name>_k`), the pass-through outputs read their
    inputs; other rotaries (MLA's, whose q_pe / k_pe are slices of its inputs) stay one. Returns the graph and the
    split nodes' names."""
    rename: dict[str, str] = {}
    nodes: list[Node] = []
    split: set[str] = set()
    for n in graph.nodes:
        g = n.kernel.geometry if n.op is Op.KERNEL else None
        if (not isinstance(g, RotaryGeometry) or not generated(n.kernel) or len(n.inputs) != len(n.outputs)
                or len(n.inputs) < 2 or not g.num_heads or not g.num_kv_heads):
            nodes.append(n.with_(inputs=tuple(rename.get(v, v) for v in n.inputs)))
            continue
        k_name = f"{n.name}{KEY_SUFFIX}"
        if any(m.name == k_name for m in graph.nodes):
            raise PassError(f"inductor: node name {k_name} is taken; cannot split the rotary {n.name}")
        whole = (MergedKernel(n.kernel.kind, n.kernel.name, n.scope, node=n.name),)  # both halves stand for it
        q_attrs = replace(n.kernel, geometry=replace(g, num_kv_heads=0), merged=whole,
                          rule=f"{n.kernel.rule}; q half (no combo kernels: forward_native's q and k apart)")
        k_attrs = replace(n.kernel, geometry=replace(g, num_heads=0), covers=(), merged=whole,
                          rule=f"{n.kernel.rule}; k half (no combo kernels: forward_native's q and k apart)")
        nodes.append(n.with_(inputs=(rename.get(n.inputs[0], n.inputs[0]),), outputs=n.outputs[:1], attrs=q_attrs))
        nodes.append(n.with_(name=k_name, inputs=(rename.get(n.inputs[1], n.inputs[1]),), outputs=n.outputs[1:2],
                             attrs=k_attrs))
        rename[value_name(n.name, 1)] = value_name(k_name, 0)
        for i in range(2, len(n.outputs)):
            rename[value_name(n.name, i)] = rename.get(n.inputs[i], n.inputs[i])
        split.update((n.name, k_name))
    if not split:
        return graph, split
    out = Graph(graph.name, dict(graph.inputs), dict(graph.params), nodes,
                [rename.get(v, v) for v in graph.outputs], graph.schedule, graph.meta.copy())
    return out, split


def compile_regions(graph: Graph, combo: bool = True) -> tuple[Graph, dict[str, int]]:
    """The graph with each region that Inductor runs as fewer kernels than the custom-op path replaced by those
    kernels (module docstring); stats: regions merged, kernels before and after. `combo`: Inductor's combo
    kernels, as vLLM >= 0.12 sets them (False: vLLM 0.10 / 0.11 on torch < 2.9, where independent kernels of a
    region stay apart and a rotary is a q kernel and a k kernel, `split_rotary`). A region with a split rotary is
    always rewritten: each of its kernels is priced by its own external bytes, the rotary halves also reading
    their cos / sin (`rot_dim` elements a token: forward_native's `cos_sin_cache.index_select(0, positions)`)."""
    split: set[str] = set()
    if not combo:
        graph, split = split_rotary(graph)
    users = graph.users()
    rename: dict[str, str] = {}
    replaced: dict[str, Node] = {}  # first member's name → the merged node
    dropped: set[str] = set()
    stats = {"regions": 0, "kernels_before": 0, "kernels_after": 0}
    for region in _regions(graph, users, combo):
        levels = sorted(set(region.level.values()))
        parts = [[n for n in region.nodes if region.level[n.name] == lv] for lv in levels]
        if not combo:
            parts = [c for part in parts for c in _connected(graph, part)]
        halves = sum(n.name in split for n in region.nodes)
        before = len(region.nodes) - sum(n.name.endswith(KEY_SUFFIX) and n.name in split for n in region.nodes)
        if not halves and len(parts) >= before:  # the custom-op path's kernels (a split rotary counts once)
            continue
        stats["regions"] += 1
        stats["kernels_before"] += before
        stats["kernels_after"] += len(parts)
        for part in parts:
            if len(part) == 1 and part[0].name not in split:
                continue
            members = {n.name for n in part}
            elems, outs = _external_elements(graph, members, users)
            elems += sum(n.kernel.geometry.rot_dim for n in part if n.name in split
                         and isinstance(n.kernel.geometry, RotaryGeometry))
            head = part[0]
            reads = sorted({v for n in part for v in n.inputs if split_value(v)[0] not in members})
            dtype = head.kernel.dtype
            attrs = KernelAttrs(KernelKind.ELEMENTWISE, NAME, ElementwiseGeometry(width=max(elems, 1), reads=0), dtype,
                                Rows.TOKENS, tuple(c for n in part for c in n.kernel.covers),
                                f"{RULE}; {_what(part, split)} in one generated kernel, priced by the region's "
                                "external bytes", merged=tuple(m for n in part for m in merged_of(n.kernel, n.scope)))
            specs = tuple(graph.spec_of(v) for v in outs)
            merged = Node(head.name, Op.KERNEL, tuple(reads), specs, attrs, head.scope, head.module_type, head.layer,
                          head.target, "inductor")
            for i, v in enumerate(outs):
                rename[v] = value_name(head.name, i)
            replaced[head.name] = merged
            dropped.update(members - {head.name})
    if not replaced:
        return graph, stats
    nodes = []
    for n in graph.nodes:
        if n.name in dropped:
            continue
        n = replaced.get(n.name, n)
        nodes.append(n.with_(inputs=tuple(rename.get(v, v) for v in n.inputs)))
    out = Graph(graph.name, dict(graph.inputs), dict(graph.params), _topological(nodes, graph),
                [rename.get(v, v) for v in graph.outputs], graph.schedule, graph.meta.copy())
    return out, stats


BOUNDARY = ("vLLM splits its piecewise graph only at the attention ops (config/compilation.py "
            "CompilationConfig.splitting_ops / _attention_ops), so a layer's tail and the next layer's input norm are "
            "one Inductor region (benchmarks/inductor_regions.py gemma_tail: 1 kernel)")


def across_layers(graph: Graph) -> tuple[Graph, int]:
    """A layer's trailing generated kernel and the next layer's input norm as one kernel (`BOUNDARY`). The folded
    graph prices one layer per type and multiplies, and a layer's tail feeds the *next* layer's norm, so the merge
    is counted a layer: each representative's input norm (a generated kernel reading only the layer's input, which
    it keeps in shape) leaves the graph, its readers read that input, and the layer's tail (the one generated
    kernel producing everything the layer hands on) also writes the norm's output. Over N layers that is N merged
    kernels and the final norm, as vLLM's N + 1: the first layer's lone input norm, N - 1 merged boundaries and the
    last tail with the final norm. Done only when every representative has such a head and tail and the final norm
    after the layers is generated; else the graph is returned as it is. Returns the graph and the heads merged."""
    sched = graph.schedule
    if sched is None:
        return graph, 0
    by_name = {n.name: n for n in graph.nodes}
    users = graph.users()

    def gen(n: Node) -> bool:
        return n.op is Op.KERNEL and (n.kernel.name == NAME or generated(n.kernel))

    def outside(v: str, layer: int) -> bool:
        return v in graph.outputs or any(by_name[u].layer != layer for u in users.get(v, []))

    plan: dict[str, tuple[Node, str]] = {}  # tail name → (the head it takes in, the head's token input)
    for r in sorted(set(sched.representative.values())):
        nodes = [n for n in graph.nodes if n.layer == r]
        names = {n.name for n in nodes}
        handed = [value_name(n.name, i) for n in nodes for i in range(len(n.outputs)) if outside(value_name(n.name, i), r)]
        tails = {split_value(v)[0] for v in handed}
        if len(tails) != 1 or not gen(tail := by_name[next(iter(tails))]):
            return graph, 0
        if any(not gen(by_name[u]) for v in handed for u in users.get(v, []) if by_name[u].layer is None):
            return graph, 0  # the final norm (or whatever reads the last layer) is not generated
        heads = []
        for n in nodes:
            tok = [v for v in n.inputs if v not in graph.params]
            if n is not tail and gen(n) and len(tok) == 1 and split_value(tok[0])[0] not in names:
                heads.append((n, tok[0]))
        if len(heads) != 1:
            return graph, 0
        head, x = heads[0]
        if len(head.outputs) != 1 or head.outputs[0].numel != graph.spec_of(x).numel:
            return graph, 0
        plan[tail.name] = (head, x)
    rename = {value_name(head.name, 0): x for head, x in plan.values()}
    dropped = {head.name for head, _ in plan.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in dropped:
            continue
        if n.name in plan:
            head, _ = plan[n.name]
            elems = (n.kernel.geometry.width if n.kernel.name == NAME and isinstance(n.kernel.geometry, ElementwiseGeometry)
                     else _external_elements(graph, {n.name}, users)[0])
            w, _rows = _per_token(graph.spec_of(value_name(head.name, 0)))
            elems += min(w, _rank_width(head.kernel) or w)  # the norm's output, written for the next layer's GEMMs
            what = n.kernel.rule.split("; ", 1)[1] if n.kernel.name == NAME else f"1 custom-op kernel ({n.kernel.name})"
            n = n.with_(attrs=KernelAttrs(KernelKind.ELEMENTWISE, NAME, ElementwiseGeometry(width=elems, reads=0),
                                          n.kernel.dtype, Rows.TOKENS, n.kernel.covers + head.kernel.covers,
                                          f"{RULE}; {what}; with the next layer's input norm ({head.kernel.name}): "
                                          f"{BOUNDARY}", merged=merged_of(n.kernel, n.scope)
                                          + merged_of(head.kernel, head.scope, leads=True)))
        nodes.append(n.with_(inputs=tuple(rename.get(v, v) for v in n.inputs)))
    out = Graph(graph.name, dict(graph.inputs), dict(graph.params), nodes, [rename.get(v, v) for v in graph.outputs],
                graph.schedule, graph.meta.copy())
    return out, len(plan)


def _per_token(spec) -> tuple[int, Rows]:
    from graphsim.passes.fuse.patterns import per_token

    return per_token(spec)


def _what(part: list[Node], split: set[str]) -> str:
    """What a generated kernel replaces: the custom-op kernels, a split rotary's half named as such."""
    if not any(n.name in split for n in part):
        return f"{len(part)} custom-op kernels ({', '.join(n.kernel.name for n in part)})"
    names = [f"{n.kernel.name} {'k' if n.name.endswith(KEY_SUFFIX) else 'q'} half" if n.name in split
             else n.kernel.name for n in part]
    return f"no combo kernels: {', '.join(names)}"


def _topological(nodes: list[Node], graph: Graph) -> list[Node]:
    """`nodes` in an order where each is after its producers, as close to the given order as possible."""
    pos = {n.name: i for i, n in enumerate(nodes)}
    deps = {n.name: {split_value(v)[0] for v in n.inputs if split_value(v)[0] in pos and v not in graph.inputs
                     and v not in graph.params} for n in nodes}
    done: set[str] = set()
    out: list[Node] = []
    pending = list(nodes)
    while pending:
        rest = []
        for n in pending:
            if deps[n.name] <= done:
                out.append(n)
                done.add(n.name)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"inductor pass: cycle through {rest[0].name}")
        pending = rest
    return out


@register_pass("inductor")
@dataclass(frozen=True)
class Inductor(Pass):
    """vLLM's compiled mode on a graph fused for `vllm` (and partitioned): see the module docstring. `combo`:
    Inductor's combo kernels (vLLM >= 0.12 on torch >= 2.9, config/compilation.py; vLLM 0.11.0's has none)."""

    combo: bool = True

    def run(self, graph: Graph) -> PassResult:
        if graph.meta.fuse_target != "vllm":
            raise PassError(f"inductor: vLLM's compiled mode needs a graph fused for vllm, not "
                            f"'{graph.meta.fuse_target or 'unfused'}'; run fuse{{target=vllm}} first")
        if graph.meta.compiled:
            return PassResult(graph, False, {})
        out, stats = compile_regions(graph, self.combo)
        out, stats["layer_boundaries"] = across_layers(out)
        if out is graph:
            out = Graph(graph.name, graph.inputs, graph.params, graph.nodes, graph.outputs, graph.schedule, graph.meta)
        out.meta = graph.meta.copy()
        out.meta.compiled = True
        return PassResult(out, True, stats)

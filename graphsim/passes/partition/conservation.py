"""The conservation check run after every partition pass (tp, ep).

Each kernel of the unpartitioned graph is compared with its per-rank version (same node name):
its FLOPs for a reference step and its weight bytes (the parameter tensors it reads) must be either
split (per-rank × size = whole) or replicated (per-rank = whole), within `TOLERANCE`. Anything
else is a partition error, not a number: a projection whose weights were split but not its
geometry (or the reverse), a split by the wrong factor. Replication is allowed only where the pass
said it replicates (a router/gate/latent GEMM left whole, KV heads copied beyond num_kv_heads) or
for non-GEMM kernels on replicated activations; and the residual stream (the fused add+norm
kernels) must stay whole on every rank: a split residual means a column-parallel projection wrote
into it with no row-parallel reduce (the Mamba-mixer bug this check was written for).

The FLOPs are counted per row (token or sequence) from each kernel's geometry, attention at a
reference context of `REF_CONTEXT` keys; only ratios and shares are used, so the reference cancels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from graphsim.ir import Graph, Node
from graphsim.ir.geometry import (
    AttentionGeometry, Conv1dGeometry, ElementwiseGeometry, GemmGeometry, LinearAttentionGeometry, MoeExpertsGeometry,
    MoeRouterGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes.base import PassError

# 0.5 %: the tolerance (graphsim issue 16: "within a tight tolerance (e.g. 0.5 %)"); the
# splits are integer divisions, so a correct partition conserves exactly and any real error is
# at least a factor (t-1)/t off.
TOLERANCE = 0.005
# Attention FLOPs grow with the keys read; any positive context gives the same ratios. 4096 is the
# context of the reference decode step (decode:64x4096).
REF_CONTEXT = 4096

COLLECTIVES = {KernelKind.ALL_REDUCE, KernelKind.ALL_GATHER, KernelKind.ALL_TO_ALL}


class ConservationError(PassError):
    """A partition pass did not conserve work or weights (names the node(s) and the mechanism)."""


@dataclass
class Declared:
    """What the partition pass says it replicated on purpose (node names)."""

    replicated: set[str] = field(default_factory=set)  # GEMMs left whole (router, gate, latent, indexer)
    partial: set[str] = field(default_factory=set)  # kernels whose KV heads are copied beyond num_kv_heads
    row_bias: set[str] = field(default_factory=set)  # row-parallel GEMMs that keep their whole bias on every rank
    # kernels a split grows by a stated factor (per-rank × size / whole, the reason listed in the notes): a Mamba2
    # in_proj / conv1d holding the B/C group every rank replicates (graphsim/passes/partition/mamba_groups.py)
    grown: dict[str, tuple[float, str]] = field(default_factory=dict)


def kernel_flops(a: KernelAttrs) -> float:
    """FLOPs per row of a kernel for the reference step (counting convention: 2 per multiply-add,
    1 per element of memory-bound work; only ratios between partitions are used)."""
    g = a.geometry
    if isinstance(g, GemmGeometry):
        return 2.0 * g.n * g.k
    if isinstance(g, MoeExpertsGeometry):
        mats = 3 if g.gated else 2
        return 2.0 * g.top_k * g.hidden_size * g.inter_size * mats / (g.tp * g.ep)
    if isinstance(g, AttentionGeometry):
        return 2.0 * g.num_heads * (g.head_dim + g.v_head_dim) * REF_CONTEXT
    if isinstance(g, LinearAttentionGeometry):
        return 4.0 * g.num_v_heads * g.k_head_dim * g.v_head_dim
    if isinstance(g, RotaryGeometry):
        return 2.0 * (g.num_heads + g.num_kv_heads) * g.rot_dim
    if isinstance(g, Conv1dGeometry):
        return 2.0 * g.channels * g.kernel_size
    if isinstance(g, NormGeometry):
        return 4.0 * g.width
    if isinstance(g, ElementwiseGeometry):
        return float(max(g.width, g.in_width or 0, g.num_v_heads or 0))
    if isinstance(g, MoeRouterGeometry):
        return float(g.num_experts)
    return 0.0  # embedding (a gather: its weights are checked), collectives


def weight_bytes(n: Node, graph: Graph, skip: frozenset[str] = frozenset()) -> float:
    total = 0.0
    for v in n.inputs:
        spec = graph.params.get(v)
        if spec is not None and v not in skip:
            elems = 1
            for d in spec.shape:
                elems *= int(d) if isinstance(d, int) else 1
            total += elems * spec.dtype.bytes
    return total


def _ratio_kind(whole: float, rank: float, size: int) -> str:
    if whole == 0.0:
        return "none"
    if rank <= 0.0:
        return "bad"
    r = whole / rank
    if abs(r - size) <= TOLERANCE * size:
        return "split"
    if abs(r - 1.0) <= TOLERANCE:
        return "replicated"
    return "partial" if 1.0 < r < size else "bad"


def check_conservation(before: Graph, after: Graph, size: int, group: str, declared: Declared) -> list[str]:
    """Raise ConservationError for a kernel that is neither split nor (allowed to be) replicated;
    return notes stating the totals and what is replicated, with its share of the whole."""
    if size == 1:
        return []
    ranked = {n.name: n for n in after.nodes}
    bad: list[str] = []
    f_whole = w_whole = f_rank = w_rank = 0.0
    replicated: dict[str, list[float]] = {}  # reason -> [flops share numerator, weight bytes]
    # a weight a GEMM or an embedding reads is theirs: an elementwise op reading it too takes one row of it
    # (Gemma-4's pad embedding, embed_tokens.weight[pad_token_id] in a where: modeling_gemma4.py Gemma4Model.forward),
    # not the table, which the owner's split already counts
    owned = frozenset(v for n in before.nodes if isinstance(n.attrs, KernelAttrs)
                      and n.attrs.kind in (KernelKind.GEMM, KernelKind.EMBEDDING) for v in n.inputs if v in before.params)
    for n in before.nodes:
        a = n.attrs
        if not isinstance(a, KernelAttrs) or a.kind in COLLECTIVES:
            continue
        m = ranked.get(n.name)
        if m is None or not isinstance(m.attrs, KernelAttrs):
            bad.append(f"{n.name} ({a.kind.value}) is missing after the pass")
            continue
        f0, f1 = kernel_flops(a), kernel_flops(m.attrs)
        skip = owned if a.kind is KernelKind.ELEMENTWISE else frozenset()
        w0, w1 = weight_bytes(n, before, skip), weight_bytes(m, after, skip)
        if group == "ep" and isinstance(a.geometry, MoeExpertsGeometry):
            # ep makes the experts whole again (tp's intermediate split undone) and spreads them:
            # the reference is the unpartitioned experts, FLOPs only (the weights' tp split is
            # undone per tensor by ep itself, so a bytes ratio would check ep against itself)
            f0 = kernel_flops(a.with_geometry(replace(a.geometry, tp=1, ep=1)))
            w0 = w1 = 0.0
        f_whole += f0
        w_whole += w0
        f_rank += f1
        w_rank += w1
        kinds = {_ratio_kind(f0, f1, size), _ratio_kind(w0, w1, size)} - {"none"}
        what = f"{n.name} ({a.kind.value}{', ' + n.module_type if n.module_type else ''})"
        if n.name in declared.grown:  # held to the exact factor the pass stated, its excess listed as replication
            factor, reason = declared.grown[n.name]
            off = [f"{k} × {size} = {x1 * size / x0:.4g} × the whole" for k, x0, x1 in
                   (("FLOPs", f0, f1), ("weight bytes", w0, w1)) if x0 and abs(x1 * size / x0 - factor) > TOLERANCE * factor]
            if off:
                bad.append(f"{what}: per-rank {', '.join(off)}, not the {factor:.4g} stated ({reason})")
                continue
            acc = replicated.setdefault(reason, [0.0, 0.0])
            acc[0] += f1 - f0 / size
            acc[1] += w1 - w0 / size
            continue
        if "bad" in kinds:
            bad.append(f"{what}: FLOPs {f0:.4g} -> {f1:.4g}, weight bytes {w0:.4g} -> {w1:.4g} per rank "
                       f"(neither split by {size} nor whole)")
            continue
        if a.kind is KernelKind.FUSED_ADD_RMS_NORM and kinds - {"replicated"}:
            feeders = [v.split("#")[0] for v in m.inputs if v.split("#")[0] in ranked
                       and ranked[v.split("#")[0]].kernel.kind is KernelKind.GEMM]
            by = f" by {', '.join(feeders)}" if feeders else ""
            bad.append(f"{what} splits the residual stream (written{by} column-parallel, with no "
                       "row-parallel reduce)")
            continue
        if kinds == {"split"} or not kinds:
            continue
        if kinds == {"split", "replicated"} and _per_head_norm(a) and _ratio_kind(f0, f1, size) == "split":
            acc = replicated.setdefault("per-head norm weights", [0.0, 0.0])
            acc[1] += w1 - w0 / size  # one weight vector shared by every head
            continue
        if kinds == {"split", "replicated"}:
            bad.append(f"{what}: FLOPs and weights are split differently ({f0:.4g} -> {f1:.4g} FLOPs, "
                       f"{w0:.4g} -> {w1:.4g} weight bytes)")
            continue
        if "partial" in kinds and n.name in declared.row_bias and _ratio_kind(f0, f1, size) == "split":
            acc = replicated.setdefault("row-parallel biases", [0.0, 0.0])
            acc[1] += w1 - w0 / size
            continue
        if "partial" in kinds:
            if n.name not in declared.partial:
                bad.append(f"{what}: split by {f0 / max(f1, 1e-30):.3g} (FLOPs) / {w0 / max(w1, 1e-30):.3g} "
                           f"(weights), not {size}, and the pass declared no replication for it")
                continue
            reason = "kv heads"
        elif a.kind is KernelKind.GEMM and group == "tp":
            if n.name not in declared.replicated:
                bad.append(f"{what} is whole on every rank but the pass did not replicate it")
                continue
            reason = "router/gate/latent gemms"
        elif a.kind is KernelKind.MOE_EXPERTS:
            bad.append(f"{what}: routed experts whole on every rank")
            continue
        elif group != "tp":
            reason = "outside the routed experts (as tp left them)"
        else:
            reason = _reason(a.kind)
        # extra work of the replicated part over an even split: whole - whole/size per rank
        acc = replicated.setdefault(reason, [0.0, 0.0])
        acc[0] += f1 - f0 / size
        acc[1] += w1 - w0 / size
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise ConservationError(f"{group}{{size={size}}} does not conserve work: " + "; ".join(bad[:3]) + more
                                + "; this is a partition bug, not a number: report it with the model's config")
    notes = [f"{group}{{size={size}}} conservation: per-rank × {size} = {_pct(f_rank * size, f_whole)} of the "
             f"unpartitioned FLOPs, {_pct(w_rank * size, w_whole)} of the weight bytes"]
    if replicated:
        parts = ", ".join(f"{k} {_share(v[0], f_rank)} FLOPs / {_share(v[1], w_rank)} weights"
                          for k, v in sorted(replicated.items(), key=lambda kv: -kv[1][1] - kv[1][0]))
        notes.append(f"replicated (extra per rank): {parts}")
    return notes


def _per_head_norm(a: KernelAttrs) -> bool:
    g = a.geometry
    return isinstance(g, NormGeometry) and g.dim < g.width


def _reason(kind: KernelKind) -> str:
    if kind in (KernelKind.RMS_NORM, KernelKind.LAYER_NORM, KernelKind.FUSED_ADD_RMS_NORM):
        return "norms"
    if kind is KernelKind.MOE_ROUTER:
        return "router"
    if kind is KernelKind.ELEMENTWISE:
        return "elementwise"
    return kind.value


def _pct(x: float, whole: float) -> str:
    return "n/a" if whole == 0.0 else f"{100.0 * x / whole:.1f} %"


def _share(x: float, whole: float) -> str:
    return "n/a" if whole == 0.0 else f"{100.0 * x / whole:.2g} %"

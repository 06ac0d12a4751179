"""Which measured launches can stand for which graph kernel, and how well (alignment scores).

A graph kernel *matches* a launch of an accepted class (`MAIN`); the score rises when the names
agree (the launch's canonical op equals the kernel's name or op) or, where the capture recorded
input shapes, the GEMM's (n, k) agrees, and falls when they disagree. Elementwise kernels whose ops
are both known and differ do not match at all. A matched kernel may also absorb neighbouring
*parts* (`PARTS`): a split-K reduction after a GEMM, the split-KV combine and the KV-cache write
around attention, the sorting/alignment kernels and the activation inside a fused MoE.
"""

from __future__ import annotations

from graphsim.capture import Launch
from graphsim.capture import LaunchClass as C
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs
from graphsim.ir.kernel import KernelKind as K

FULL = 3.0  # a launch of the kernel's own class
_NORMS = (K.RMS_NORM, K.FUSED_ADD_RMS_NORM, K.LAYER_NORM)
_COLLECTIVES = (K.ALL_REDUCE, K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_TO_ALL)

# The class of a kernel's own launches: the launch class of the same name, else the family's class.
_OWN_CLASS: dict[K, C] = {
    **{k: C[k.name] for k in K if k.name in C.__members__},
    **dict.fromkeys(_NORMS, C.NORM),
    K.MOE_EXPERTS: C.MOE,
    **dict.fromkeys(_COLLECTIVES, C.COLLECTIVE),
}

MAIN: dict[K, dict[C, float]] = {k: {c: FULL} for k, c in _OWN_CLASS.items()} | {
    K.ACTIVATION: {C.ELEMENTWISE: 2.0, C.ACT_AND_MUL: 1.0},
    K.EMBEDDING: {C.EMBEDDING: FULL, C.ELEMENTWISE: 1.0},
    K.ELEMENTWISE: {C.ELEMENTWISE: 2.0},
}

PARTS: dict[K, frozenset[C]] = {
    K.GEMM: frozenset({C.GEMM_AUX}),
    K.ATTENTION: frozenset({C.ATTENTION_AUX, C.KV_CACHE_WRITE}),
    K.LINEAR_ATTENTION: frozenset({C.LINEAR_ATTENTION}),
    K.MOE_EXPERTS: frozenset({C.MOE, C.MOE_AUX, C.ACT_AND_MUL, C.GEMM}),
    K.MOE_ROUTER: frozenset({C.MOE_AUX}),
    **dict.fromkeys(_COLLECTIVES, frozenset({C.COLLECTIVE})),
}

# Elementwise launches that are part of a kernel when they sit next to it: the token dispatch around
# grouped expert GEMMs in an eager MoE (histc / sort / index / scatter), the expert activation and
# the weighted combine.
PART_OPS: dict[K, frozenset[str]] = {
    K.MOE_EXPERTS: frozenset({"histc", "sort", "cumsum", "index", "gather", "scatter", "silu", "gelu", "mul",
                              "sum", "add", "copy", "cast", "where", "compare", "max"}),
}
# GEMM launches that can be the main launch of a routed-expert kernel (grouped / batched GEMMs).
_EXPERT_GEMM_OPS = frozenset({"grouped_mm", "bmm"})

PART_SCORE = 0.8
GAP_GRAPH = 1.0  # a graph kernel with no counterpart
GAP_GRAPH_APPROX = 0.3  # a memory-bound placeholder with no counterpart (engines fuse these away)
GAP_MEASURED = 1.0  # a measured launch with no graph kernel

# Graph kernel names that mean the same op as a launch's canonical op.
_SAME = {"linear": "gemm", "qkv_proj": "gemm", "o_proj": "gemm", "gate_up_proj": "gemm", "down_proj": "gemm",
         "lm_head": "gemm"}


def _gemm_nk(x: Launch) -> tuple[int, int] | None:
    """(n, k) of a GEMM launch from its recorded input shapes (aten linear / mm / addmm / matmul)."""
    if not x.shapes:
        return None
    op = (x.scope or x.name).split("::")[-1]
    s = [t for t in x.shapes]
    try:
        if op.startswith("linear") and len(s) >= 2 and len(s[1]) == 2:
            return s[1][0], s[1][1]
        if op.startswith("addmm") and len(s) >= 3 and len(s[2]) == 2:
            return s[2][1], s[2][0]
        if op.startswith(("mm", "matmul", "bmm")) and len(s) >= 2 and len(s[1]) >= 2:
            return s[1][-1], s[1][-2]
    except (IndexError, TypeError):
        return None
    return None


def match_score(a: KernelAttrs, x: Launch) -> float | None:
    """Score of `x` standing for graph kernel `a` (None: it cannot)."""
    base = MAIN.get(a.kind, {}).get(x.klass)
    if a.kind is K.MOE_EXPERTS and x.klass is C.GEMM and (x.op in _EXPERT_GEMM_OPS or "group" in x.name.lower()):
        return 2.5
    if base is None:
        return None
    if a.kind in (K.ELEMENTWISE, K.ACTIVATION):
        if x.op and x.op not in ("fused",) and a.name:
            if x.op != a.name:
                return None
            base += 1.0
        return base
    if a.kind is K.EMBEDDING and x.klass is C.ELEMENTWISE and x.op not in ("index", "gather", ""):
        return None
    if a.kind is K.GEMM:
        nk = _gemm_nk(x)
        g = a.geometry_as(GemmGeometry)
        if nk is not None:
            base += 1.0 if nk == (g.n, g.k) else -1.5
        return base
    if x.op and a.name:
        name = _SAME.get(a.name, a.name)
        if x.op == name:
            base += 1.0
        elif a.kind in (K.RMS_NORM, K.FUSED_ADD_RMS_NORM) and x.op in ("rms_norm", "fused_add_rms_norm"):
            base -= 1.0  # a norm, but with / without the residual add
        elif a.kind is K.ACT_AND_MUL and x.op.endswith("_and_mul"):
            base -= 1.0
    return base


def part_score(a: KernelAttrs, x: Launch) -> float | None:
    if x.klass in PARTS.get(a.kind, frozenset()):
        return PART_SCORE
    if x.klass is C.ELEMENTWISE and x.op in PART_OPS.get(a.kind, frozenset()):
        return PART_SCORE
    return None


def gap_graph(a: KernelAttrs) -> float:
    return GAP_GRAPH_APPROX if a.approximate else GAP_GRAPH


def accepted_classes(a: KernelAttrs) -> list[str]:
    return [c.value for c in MAIN.get(a.kind, {})]

"""Hold a fused kernel graph against a capture: sequence alignment and the decision table (issue 6 §3–4).

The folded graph is unrolled into the kernel sequence of one iteration (kernels before the layers,
each layer's kernels in schedule order, kernels after), and aligned with the launches of one
captured iteration (engine plumbing set aside) by dynamic programming: a graph kernel matches one
launch of an accepted class and may absorb neighbouring parts of itself (`align_rules.py`); a
graph kernel may have no counterpart, a launch may have no graph kernel. The alignment maximises
the total score (global alignment with per-item gap costs), computed row by row with vectorised
max-plus scans.

The decision table has one row per kernel of the folded graph (all its instances in the
iteration), one per group of unmatched measured launches and one per group of plumbing: every
measured launch lands in a row, every graph kernel has a counterpart or a stated reason. With a
profile.db the same rows carry predicted vs measured time, and `deviations()` ranks them by
absolute difference — what to profile or model next.

No torch: the capture types are plain data (`graphsim.capture`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsim.capture import Launch
from graphsim.costing.align_rules import GAP_MEASURED, gap_graph, match_score, part_score
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Op
from graphsim.ir.kernel import KernelAttrs

NEG = -np.inf


@dataclass(frozen=True)
class GraphKernel:
    """One kernel instance of the unrolled iteration."""

    node: str  # the folded graph's node name (shared by every layer of its type)
    layer: int | None  # real layer index (None outside the layers)
    region: str  # "before layers", "<tag> ×n", "after layers"
    attrs: KernelAttrs


def iteration_kernels(graph: Graph) -> list[GraphKernel]:
    """The kernels one iteration launches, in order, with every layer unrolled."""
    if not graph.nodes or not all(n.op is Op.KERNEL for n in graph.nodes):
        raise GraphsimError("alignment needs a fused graph; run the fuse pass first "
                            "(e.g. graphsim passes MODEL -p 'fold,fuse{target=vllm}')")
    first = next((i for i, n in enumerate(graph.nodes) if n.layer is not None), len(graph.nodes))
    before = [GraphKernel(n.name, None, "before layers", n.kernel) for n in graph.nodes[:first] if n.layer is None]
    after = [GraphKernel(n.name, None, "after layers", n.kernel) for n in graph.nodes[first:] if n.layer is None]
    body: list[GraphKernel] = []
    sched = graph.schedule
    if sched is not None:
        by_layer: dict[int, list] = {}
        for n in graph.nodes:
            if n.layer is not None:
                by_layer.setdefault(n.layer, []).append(n)
        for layer, tag in enumerate(sched.tags):
            rep = sched.representative[tag]
            region = f"{tag} ×{sched.count(tag)}"
            body += [GraphKernel(n.name, layer, region, n.attrs) for n in by_layer.get(rep, [])]
    elif any(n.layer is not None for n in graph.nodes):
        raise GraphsimError("the graph has layers but no layer schedule; run the fold pass first")
    return before + body + after


# ---- dynamic programming ---------------------------------------------------------------------

def _scan(y: np.ndarray, c: np.ndarray) -> np.ndarray:
    """x[j] = max(y[j], x[j-1] + c[j]) for j >= 1, x[0] = y[0]; c may hold -inf (breaks the chain)."""
    n = len(y)
    if n == 0:
        return y.copy()
    c = c.copy()
    c[0] = NEG
    fin = np.isfinite(c)
    cum = np.cumsum(np.where(fin, c, 0.0))
    seg = np.cumsum(~fin)  # a new segment starts wherever c is -inf
    z = y - cum
    finite_z = z[np.isfinite(z)]
    span = float(finite_z.max() - finite_z.min()) if finite_z.size else 0.0
    big = 4.0 * (span + 1.0)
    zz = np.where(np.isfinite(z), z + seg * big, NEG)
    best = np.maximum.accumulate(zz)
    x = best - seg * big + cum
    # a segment whose values so far are all -inf must stay -inf (not inherit an earlier segment)
    has = np.cumsum(np.isfinite(y))
    starts = ~fin
    base = np.maximum.accumulate(np.where(starts, np.concatenate([[0], has[:-1]]), 0))
    x[(has - base) <= 0] = NEG
    return x


@dataclass
class Alignment:
    graph_of_launch: list[int | None]  # per launch: the graph instance it belongs to
    main: list[bool]  # per launch: the matched (main) launch of its graph kernel, not an absorbed part
    launches_of: list[list[int]]  # per graph instance: its launches
    score: float


def align_sequences(graph: list[GraphKernel], launches: list[Launch]) -> Alignment:
    """Global alignment of graph kernel instances with launches (see module docstring)."""
    n, m = len(graph), len(launches)
    # scores per (distinct attrs, distinct launch signature), broadcast to instances
    a_ids: dict[KernelAttrs, int] = {}
    g_idx = np.asarray([a_ids.setdefault(g.attrs, len(a_ids)) for g in graph], dtype=np.int64)
    sig = lambda x: (x.klass, x.op, x.name, x.shapes, x.scope)  # noqa: E731
    l_ids: dict[Any, int] = {}
    l_first: list[Launch] = []
    l_idx = []
    for x in launches:
        k = sig(x)
        if k not in l_ids:
            l_ids[k] = len(l_ids)
            l_first.append(x)
        l_idx.append(l_ids[k])
    l_idx_a = np.asarray(l_idx, dtype=np.int64)
    attrs_list = list(a_ids)
    ms = np.full((len(attrs_list), len(l_first)), NEG)
    ps = np.full((len(attrs_list), len(l_first)), NEG)
    for i, a in enumerate(attrs_list):
        for j, x in enumerate(l_first):
            s = match_score(a, x)
            if s is not None:
                ms[i, j] = s
            p = part_score(a, x)
            if p is not None:
                ps[i, j] = p
    gap_g = np.asarray([gap_graph(g.attrs) for g in graph])
    gap_m = np.full(m, GAP_MEASURED)
    if n and m:
        S, P = ms[g_idx][:, l_idx_a], ps[g_idx][:, l_idx_a]
    else:
        S = P = np.full((n, m), NEG)
    return align_scores(S, P, gap_g, gap_m)


def align_scores(S: np.ndarray, P: np.ndarray, gap_g: np.ndarray, gap_m: np.ndarray) -> Alignment:
    """The DP on explicit scores: S[i, j] (graph i matches launch j; -inf: cannot), P[i, j] (launch j is
    a part of graph i), gap_g[i] / gap_m[j] (costs of leaving one out)."""
    n, m = S.shape
    B = np.full((n + 1, m + 1), NEG)
    B[0] = -np.concatenate([[0.0], np.cumsum(gap_m)])
    code_b = np.zeros((n + 1, m + 1), dtype=np.int8)  # 0: A (g_i owns launch j-1), 1: up (g_i absent), 2: left
    code_b[0, 1:] = 2
    a_main = np.zeros((n + 1, m + 1), dtype=bool)  # A[i][j]: launch j-1 is g_i's main match (else a part)
    r_start = np.zeros((n + 1, m + 1), dtype=bool)  # R[i][j]: g_i opens here (else launch j-1 is a part)
    left_pen = np.concatenate([[NEG], -gap_m])
    for i in range(1, n + 1):
        prev = B[i - 1]
        s = np.concatenate([[NEG], S[i - 1]])
        p = np.concatenate([[NEG], P[i - 1]])
        # R[j] = max(prev[j], R[j-1] + p[j])   (g_i open, main match not yet seen)
        R = _scan(prev, p)
        r_start[i] = prev >= np.concatenate([[NEG], R[:-1]]) + p
        # A[j] = max(R[j-1] + s[j], A[j-1] + p[j])
        main = np.concatenate([[NEG], R[:-1]]) + s
        A = _scan(main, p)
        a_main[i] = main >= np.concatenate([[NEG], A[:-1]]) + p
        # B[j] = max(A[j], prev[j] - gap_g, B[j-1] - gap_m[j])
        up = prev - gap_g[i - 1]
        X = np.maximum(A, up)
        Bi = _scan(X, left_pen)
        B[i] = Bi
        left = np.concatenate([[NEG], Bi[:-1]]) + left_pen
        code = np.where(np.maximum(up, left) <= A, 0, np.where(up >= left, 1, 2)).astype(np.int8)
        code[0] = 1
        code_b[i] = code

    graph_of: list[int | None] = [None] * m
    is_main = [False] * m
    launches_of: list[list[int]] = [[] for _ in range(n)]
    i, j, state = n, m, "B"
    while i > 0 or j > 0:
        if state == "B":
            c = code_b[i, j] if i > 0 else 2
            if c == 0:
                state = "A"
            elif c == 1:
                i -= 1
            else:
                j -= 1
        elif state == "A":
            graph_of[j - 1] = i - 1
            launches_of[i - 1].append(j - 1)
            if a_main[i, j]:
                is_main[j - 1] = True
                state = "R"
            j -= 1
        else:  # R
            if j == 0 or r_start[i, j]:
                state, i = "B", i - 1
            else:
                graph_of[j - 1] = i - 1
                launches_of[i - 1].append(j - 1)
                j -= 1
    for lst in launches_of:
        lst.reverse()
    return Alignment(graph_of, is_main, launches_of, float(B[n, m]))

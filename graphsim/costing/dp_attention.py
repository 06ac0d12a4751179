"""Data-parallel attention + expert parallel: one step of a MoE model served by vLLM with
`--data-parallel-size N` (and `--enable-expert-parallel`), priced from the same kernel graph.

vLLM's semantics, followed here:

- Each of the N DP ranks is an engine core with its own scheduler, batch and KV cache; attention (and every
  dense layer, the shared experts, the router, norms, embeddings, the LM head) runs on the rank's own tokens,
  tensor-parallel over its `tensor_parallel_size` GPUs. The shared experts run on vLLM's aux CUDA stream beside
  the routed path (router, dispatch, experts, combine) up to `VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD` tokens
  a rank and after it above (the cost tree's token-limited `Parallel(routed, shared)`, costing/streams.py).
- The routed experts are spread over all N × TP GPUs (vllm/model_executor/layers/fused_moe/config.py
  `FusedMoEParallelConfig.make`): with `enable_expert_parallel` each GPU holds num_experts / (N × TP) whole
  experts (`use_ep`, ep_size = dp × tp, moe tp 1); without it every expert is tensor-sharded over the N × TP
  GPUs (`flatten_tp_across_dp`: moe tp = dp × tp, ep 1). Either way a GPU's expert kernel works on the tokens
  of all DP ranks that reach it: priced at the global token count Σ_r T_r with that (moe tp, ep) geometry, the
  convention of the measured MoE rows (aiconfigurator's MoE op scales tokens by attention_dp_size,
  sdk/operations/moe_comm.py `MoEExpertCompute`).
- Tokens reach the experts through the all2all backend's dispatch and come back through its combine
  (`costing.all2all`), once per MoE layer.
- The ranks run MoE layers in lockstep: a rank with no requests runs a dummy batch so the collectives match
  (vllm/v1/engine/core.py `DPEngineCoreProc`, `execute_dummy_batch`; the waves are kept in step by
  vllm/v1/engine/coordinator.py `DPCoordinator`). A dummy batch is priced as one 1-token prefill.

So one step costs, per region of the rank's cost tree (before the layers, each layer kind ×n, after them), the
`Max` over ranks of that region of the rank's own part (the cost tree with the routed and shared experts taken
out, at the rank's batch), summed, + Σ over MoE layers (routed path = experts at the global tokens + dispatch +
combine, beside or after the slowest rank's shared experts). The ranks meet at every MoE layer's dispatch, and a
region's layers are alike, so its slowest rank is the slowest at each of its layers: per region the Max is the
lockstep time (a rank slow in full-attention layers and another in sliding-window ones both count). Between
regions without MoE layers (a model's first dense layers) the ranks need not meet, so there it is an upper
bound by at most those layers' spread. Load imbalance across EP ranks
is the MoE routing model's (`costing.moe_routing`: power-law rows time the busiest rank's experts); across DP
ranks it is the ranks' own batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from graphsim.costing.all2all import DEFAULT_ALL2ALL_BACKEND, All2AllError, MoeExchange, check_backend
from graphsim.costing.collectives import CollectiveContext
from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import CompiledTree, Leaf, NodeKind, leaf_rows, price_leaves
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.interpolate import SOURCES
from graphsim.costing.roofline import kernel_work
from graphsim.ir.geometry import MoeExpertsGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.workload import SeqGroup, Step

DUMMY_STEP = Step((SeqGroup(1, 0, 1),))  # vLLM's execute_dummy_batch → _dummy_run(1): one token, no cache
_ORDER = [s.value for s in SOURCES]


@dataclass(frozen=True)
class DataParallelMoe:
    """vLLM's `--data-parallel-size`, `--tensor-parallel-size`, `--enable-expert-parallel` and
    `--all2all-backend` for a MoE model."""

    dp: int
    tp: int = 1
    enable_expert_parallel: bool = False
    all2all_backend: str = DEFAULT_ALL2ALL_BACKEND

    def __post_init__(self) -> None:
        if self.dp < 2 or self.tp < 1:
            raise All2AllError(f"data-parallel attention needs --data-parallel-size >= 2 and --tensor-parallel-size "
                               f">= 1 (got {self.dp} and {self.tp})")
        check_backend(self.all2all_backend)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp

    @property
    def moe_tp(self) -> int:
        """FusedMoEParallelConfig.make: tp flattened across dp, 1 under expert parallelism."""
        return 1 if self.enable_expert_parallel else self.dp * self.tp

    @property
    def moe_ep(self) -> int:
        return self.dp * self.tp if self.enable_expert_parallel else 1

    def describe(self) -> str:
        moe = f"experts EP {self.moe_ep}" if self.enable_expert_parallel else f"experts TP-sharded over {self.moe_tp}"
        return f"DP {self.dp} × TP {self.tp} attention, {moe}, all2all {self.all2all_backend}"


@dataclass
class DpStepPrice:
    """One lockstep step of all DP ranks; times in µs (NaN: missing), each part with its worst source."""

    spec: str
    rank_tokens: list[int]
    rank_us: list[float]  # each rank's own part (attention, dense layers, shared experts, ...)
    rank_flops: list[float]
    slowest_rank: int
    attention_us: float  # the Max over ranks
    experts_us: float  # routed experts of every MoE layer at the global token count (one GPU's share)
    experts_flops: float  # one GPU's share
    dispatch_us: float  # all MoE layers
    combine_us: float
    moe_layers: int
    global_tokens: int
    sources: dict[str, str] = field(default_factory=dict)  # part → worst source
    notes: list[str] = field(default_factory=list)
    shared_us: float = 0.0  # shared experts on the aux stream (slowest rank's, all layers), outside attention_us
    hidden_us: float = 0.0  # what the shared-expert overlap hides of shared + routed path

    @property
    def total_us(self) -> float:
        return (self.attention_us + self.experts_us + self.dispatch_us + self.combine_us + self.shared_us
                - self.hidden_us)

    @property
    def source(self) -> str:
        return max(self.sources.values(), key=_ORDER.index) if self.sources else "missing"

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return {"batch": self.spec, "rank_tokens": self.rank_tokens, "rank_us": [num(x) for x in self.rank_us],
                "slowest_rank": self.slowest_rank, "attention_max_us": num(self.attention_us),
                "experts_us": num(self.experts_us), "dispatch_us": num(self.dispatch_us),
                "combine_us": num(self.combine_us), "shared_experts_us": num(self.shared_us),
                "overlap_hidden_us": num(self.hidden_us), "total_us": num(self.total_us), "moe_layers": self.moe_layers,
                "global_tokens": self.global_tokens, "source": self.source, "sources": self.sources,
                "notes": self.notes}


def parse_rank_batches(spec: str, dp: int) -> list[Step | None]:
    """One batch spec per DP rank: `decode:64x2048` (every rank the same), or `|`-separated per-rank specs
    (`decode:64x2048|decode:32x2048|idle|…`, exactly `dp` of them; `idle`: a rank without requests)."""
    from graphsim.workload import parse_batch_spec

    parts = [p.strip() for p in spec.split("|")]
    if len(parts) == 1:
        return [parse_batch_spec(parts[0])] * dp
    if len(parts) != dp:
        raise All2AllError(f"batch '{spec}' lists {len(parts)} ranks' batches but --data-parallel-size is {dp}; give one "
                           "spec for every rank, or one spec for all")
    if all(p == "idle" for p in parts):
        raise All2AllError(f"batch '{spec}': every DP rank is idle; give at least one rank a batch")
    return [None if p == "idle" else parse_batch_spec(p) for p in parts]


def moe_leaf_indices(tree: CompiledTree) -> list[int]:
    return [i for i, leaf in enumerate(tree.leaves) if leaf.block is None and leaf.attrs.kind is KernelKind.MOE_EXPERTS]


def check_graph(cm: CostModel, plan: DataParallelMoe) -> None:
    """The cost model must be the per-rank graph (tp = plan.tp, no ep pass) of a model with routed experts."""
    if cm.ep != 1:
        raise All2AllError(f"price data-parallel attention on the graph partitioned for tp only (this one has ep={cm.ep}); "
                           "the experts' spread comes from --data-parallel-size and --enable-expert-parallel")
    if cm.tp != plan.tp:
        raise All2AllError(f"the cost model is partitioned for tp={cm.tp}, the plan asks for tp={plan.tp}")
    if not moe_leaf_indices(cm.tree):
        raise All2AllError(f"{cm.graph.name} has no routed experts: --data-parallel-size on a dense model is "
                           "independent replicas (graphsim simulate --replicas), not data-parallel attention")
    for i in moe_leaf_indices(cm.tree):
        g = cm.tree.leaves[i].attrs.geometry
        assert isinstance(g, MoeExpertsGeometry)
        if plan.enable_expert_parallel and g.num_experts % plan.moe_ep:
            raise All2AllError(f"{g.num_experts} routed experts do not divide over EP {plan.moe_ep} "
                               f"(--data-parallel-size {plan.dp} × --tensor-parallel-size {plan.tp}); vLLM refuses it too")
        if not plan.enable_expert_parallel and g.inter_size % plan.moe_tp:
            raise All2AllError(f"the experts' intermediate size {g.inter_size} does not divide over MoE TP {plan.moe_tp} "
                               f"(--data-parallel-size {plan.dp} × --tensor-parallel-size {plan.tp}); add "
                               "--enable-expert-parallel")


def _compose(tree: CompiledTree, leaf_t: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Every node's time per column (nodes × columns) from leaf times, composed as `CompiledTree.evaluate` composes
    them: a leaf
    launched only up to some tokens (the shared-expert input clone) is off above them, a token-limited `Parallel`
    overlaps its streams up to its limit and sums them above. (The overlap's joint-roofline floor is left out: with
    the routed experts taken out of a rank's own part, the floor would count work that is not there.)"""
    leaf_t = np.where(tokens[None, :] > tree.leaf_limit()[:, None], 0.0, leaf_t)
    node_t = np.zeros((len(tree.kinds), leaf_t.shape[1]))
    for i, kind in enumerate(tree.kinds):
        if kind is NodeKind.LEAF:
            node_t[i] = leaf_t[tree.leaf_of[i]]
            continue
        ct = node_t[tree.children[i]]
        if kind is NodeKind.SUM:
            node_t[i] = ct.sum(axis=0)
        elif kind is NodeKind.MAX:
            node_t[i] = ct.max(axis=0)
        elif kind is NodeKind.PARALLEL:
            node_t[i] = np.where(tokens > tree.max_tokens[i], ct.sum(axis=0), ct.max(axis=0))
        elif kind is NodeKind.SCALE:
            node_t[i] = tree.scale[i] * ct[0]
        else:
            node_t[i] = ct[0]
    return node_t


def regions(tree: CompiledTree) -> list[int]:
    """The nodes of one rank's regions (before layers, each layer kind ×n, after layers): the children of the first
    `Sum` below the root's chain of single-child nodes (`cost_tree.build_tree`); [root] when there is none."""
    i = tree.root
    while tree.kinds[i] is not NodeKind.SUM and len(tree.children[i]) == 1:
        i = tree.children[i][0]
    return list(tree.children[i]) if tree.kinds[i] is NodeKind.SUM else [tree.root]


def _leaves_under(tree: CompiledTree, node: int) -> list[int]:
    out, stack = [], [node]
    while stack:
        i = stack.pop()
        if tree.leaf_of[i] >= 0:
            out.append(tree.leaf_of[i])
        stack.extend(tree.children[i])
    return out


def shared_overlaps(tree: CompiledTree, moe: Sequence[int]) -> list[tuple[int, list[int], list[int]]]:
    """The token-limited `Parallel(routed, shared)` nodes the cost tree has for vLLM's shared-expert stream
    (costing/streams.py): (node, the routed-experts leaves in it, the leaves of its other streams)."""
    moe_set, out = set(moe), []
    for p in tree.overlaps:
        routed = [li for li in tree.under[p] if li in moe_set]
        if not routed:
            continue
        shared = [li for ch in tree.children[p] if not set(ls := _leaves_under(tree, ch)) & moe_set for li in ls]
        out.append((p, routed, shared))
    return out


def merged(steps: Sequence[Step]) -> Step:
    """All ranks' sequence groups as one step (the global batch the experts see)."""
    return Step(tuple(g for s in steps for g in s.groups))


def price_dp_step(cm: CostModel, plan: DataParallelMoe, rank_steps: Sequence[Step | None], spec: str = "") -> DpStepPrice:
    """One lockstep step: rank r runs rank_steps[r] (None: idle, a dummy batch)."""
    return price_dp_steps(cm, plan, [rank_steps], [spec])[0]


def price_dp_steps(cm: CostModel, plan: DataParallelMoe, batches: Sequence[Sequence[Step | None]],
                   specs: Sequence[str] | None = None) -> list[DpStepPrice]:
    """`price_dp_step` for many steps, one pricer call per kernel key."""
    check_graph(cm, plan)
    tree = cm.tree
    moe = moe_leaf_indices(tree)
    mult = tree.multiplicity
    for ranks in batches:
        if len(ranks) != plan.dp:
            raise All2AllError(f"a data-parallel step needs one batch per DP rank ({plan.dp}), got {len(ranks)}")
    rank_steps = [s if s is not None else DUMMY_STEP for ranks in batches for s in ranks]
    # each rank's own part: the whole tree at its batch, routed experts taken out
    leaf_t, leaf_s = price_leaves(tree.leaves, rank_steps, cm.pricer, cm.dtypes)
    work = _leaf_flops(tree.leaves, rank_steps, cm)
    overlaps = shared_overlaps(tree, moe)
    shared = [li for _, _, sh in overlaps for li in sh]
    shared_t = leaf_t.copy()  # shared-expert leaves, priced at each rank's batch, composed per overlap below
    leaf_t[moe] = 0.0
    leaf_t[shared] = 0.0
    work[moe] = 0.0
    own_s = leaf_s.copy()
    own_s[moe] = 0
    node_t = _compose(tree, leaf_t, np.asarray([s.tokens for s in rank_steps], dtype=np.float64))
    rank_us, region_us = node_t[tree.root], node_t[regions(tree)]  # region_us: regions × columns
    rank_flops = (work * mult[:, None]).sum(axis=0)
    # the routed experts at the global batch, with the (moe tp, ep) geometry of FusedMoEParallelConfig.make
    moe_leaves = [spread_experts(tree.leaves[i], plan) for i in moe]
    globals_ = [merged([s if s is not None else DUMMY_STEP for s in ranks]) for ranks in batches]
    moe_t, moe_s = price_leaves(moe_leaves, globals_, cm.pricer, cm.dtypes)
    moe_work = _leaf_flops(moe_leaves, globals_, cm)
    out = []
    for b, ranks in enumerate(batches):
        cols = slice(b * plan.dp, (b + 1) * plan.dp)
        r_us = rank_us[cols]
        slowest = int(np.nanargmax(r_us)) if not np.all(np.isnan(r_us)) else 0
        # the ranks meet at every MoE layer: each region (its layers alike) lasts as long as its slowest rank's
        attention = float(np.nan if np.isnan(r_us).any() else region_us[:, cols].max(axis=1).sum())
        tokens = [s.tokens if s is not None else 0 for s in ranks]
        experts = float(np.sum(moe_t[:, b] * mult[moe]))
        dispatch = combine = 0.0
        d_src: list[str] = []
        notes: list[str] = []
        path_us: dict[int, float] = {}  # MoE leaf → one instance of its routed path (experts + dispatch + combine)
        for j, i in enumerate(moe):
            g = tree.leaves[i].attrs.geometry
            assert isinstance(g, MoeExpertsGeometry)
            ex = MoeExchange(plan.all2all_backend, plan.dp, plan.world_size, g.hidden_size, g.top_k, g.num_experts,
                             activation_dtype(cm))
            d, c = ex.price([max(1, t) for t in tokens], cm.pricer)
            dispatch += d.time_us * mult[i]
            combine += c.time_us * mult[i]
            path_us[i] = float(moe_t[j, b]) + d.time_us + c.time_us
            d_src += [d.source, c.source]
            if j == 0:
                notes += [f"dispatch: {d.note}", f"combine: {c.note}"]
        shared_us = hidden = 0.0
        for p, routed, sh in overlaps:
            if not sh:
                continue
            per_rank = shared_t[sh][:, cols].sum(axis=0)  # one instance of the shared stream on each rank
            routed_us, side = sum(path_us[i] for i in routed), float(per_rank.max())
            m = tree.node_multiplicity[p]
            shared_us += side * m
            if max(tokens) <= tree.max_tokens[p]:  # every rank runs its shared experts on the aux stream
                hidden += (routed_us + side - max(routed_us, side)) * m
        if overlaps and any(sh for _, _, sh in overlaps):
            limit = int(min(tree.max_tokens[p] for p, _, _ in overlaps))
            notes.append(f"shared experts on vLLM's aux stream beside the routed path (dispatch, experts, combine) up "
                         f"to {limit} tokens a rank (VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD): "
                         + (f"{hidden:,.3g} µs hidden" if max(tokens) <= limit else
                            f"a rank has {max(tokens)}, so the streams run one after the other"))
        worst_own = int(own_s[:, cols].max())
        sources = {"attention": SOURCES[worst_own].value,
                   "experts": SOURCES[int(moe_s[:, b].max())].value if len(moe) else "measured",
                   "exchange": max(d_src, key=_ORDER.index)}
        notes.append("per region of layers, the Max over DP ranks of each rank's own part, then the MoE layers "
                     "(the ranks meet at every MoE layer's dispatch)")
        if any(s is None for s in ranks):
            notes.append(f"{sum(s is None for s in ranks)} idle rank(s) priced as vLLM's dummy batch (1 token)")
        out.append(DpStepPrice(
            (specs[b] if specs else "") or " | ".join(s.label() if s is not None else "idle" for s in ranks),
            tokens, [float(x) for x in r_us], [float(x) for x in rank_flops[cols]], slowest, attention, experts,
            float(np.sum(moe_work[:, b] * mult[moe])), float(dispatch), float(combine), int(mult[moe].sum()),
            globals_[b].tokens, sources, notes, float(shared_us), float(hidden)))
    return out


def spread_experts(leaf: Leaf, plan: DataParallelMoe) -> Leaf:
    g = leaf.attrs.geometry
    assert isinstance(g, MoeExpertsGeometry)
    return replace(leaf, attrs=leaf.attrs.with_geometry(replace(g, tp=plan.moe_tp, ep=plan.moe_ep)))


def _leaf_flops(leaves: Sequence[Leaf], steps: Sequence[Step], cm: CostModel) -> np.ndarray:
    """FLOPs of one instance of each leaf per step (roofline's work model; zero for collectives)."""
    rows = leaf_rows(list(leaves), list(steps), cm.dtypes, CollectiveContext.of(cm.pricer))
    out = np.zeros((len(rows), len(steps)))
    for i, kr in enumerate(rows):
        parts = []
        for part in kr.parts:
            w = kernel_work(part.key, part.coords)
            parts.append(np.zeros(len(part.coords)) if w is None else w.flops)
        out[i] = kr.sum_by_step(parts, len(steps))
    return out


def activation_dtype(cm: CostModel) -> KernelDtype:
    """The dtype of the hidden states the exchange moves: the model dtype (bf16 where it is not fp16/fp32)."""
    name = (cm.dtype or cm.graph.meta.dtype or "bfloat16").lower()
    return {"float16": KernelDtype.FP16, "fp16": KernelDtype.FP16, "half": KernelDtype.FP16,
            "float32": KernelDtype.FP32, "fp32": KernelDtype.FP32}.get(name, KernelDtype.BF16)

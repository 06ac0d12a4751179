"""Context parallel: a sequence's tokens and KV cache spread over ranks (vLLM's `--prefill-context-parallel-size`
and `--decode-context-parallel-size`, vllm/config/parallel.py ParallelConfig; RFC vllm-project/vllm#25749).

A deployment parameter on the same per-rank cost model (`CostModel`), no per-model code:

- **Prefill context parallel (PCP, P ranks, P× the GPUs: vLLM's world size is pp × tp × pcp).** Every prefill
  group's new tokens are split into P chunks, one per rank (`cost_tree.ChunkView`): a rank's per-token kernels
  see 1/P of them (decode tokens are not split). Attention runs as a ring (ring attention, Liu et al. 2023,
  arXiv:2310.01889): in round r a rank attends its query chunk to the KV chunk it holds while it sends that
  chunk on to the next rank, so each round is `Parallel(attention, send)` and the rounds add (`Sum`). With the
  plain (not load-balanced) split the last rank attends to all P chunks — its causal diagonal, then P − 1 full
  blocks — and sets the time: the tree prices that rank (Max over ranks). A full c × c block is the attention
  kernel's marginal time for c more cached tokens (SeqGroup(c, p + r·c) − SeqGroup(c, p + (r−1)·c): exactly c²
  more (query, key) pairs; the round's Parallel keeps it above its own roofline). A send moves the chunk's KV
  rows (c × the layer's KV bytes per token) between two GPUs (`send_recv`, priced like the pipeline's hops).
  P − 1 sends; the last round sends nothing. Decode tokens under PCP attend the KV shard of their rank and
  the partial outputs are combined across the P ranks (all-gather of outputs and LSEs). The KV cache is
  sharded over the P ranks (P× the tokens per rank). Simplifications, stated: a cached prefix is attended in
  round 0 and not passed around the ring (the last rank's total is right, its split over rounds is not), and
  the shared-expert stream's token limit is read on the whole step's tokens.
- **Decode context parallel (DCP, D ranks inside the TP group, no extra GPUs: tp % dcp == 0).** The KV cache is
  sharded along tokens over the D ranks that would otherwise hold copies of it (at most the ranks holding one KV
  head: all of TP for MLA); every attention leaf of the tree becomes (`dcp_attention`) an all-gather of the D
  ranks' queries, attention of H/tp × D heads over 1/D of every sequence's cached tokens, and the combine of
  the partial outputs with their log-sum-exp correction (all-gather of the LSEs, reduce-scatter of the
  outputs). The collectives are priced like every other collective of the tree (measured rows where the
  profile has them, the interconnect roofline otherwise). This is a tree transformation, so predict, the
  simulator's tables and search price it alike; KV capacity per rank grows D× (each rank holds 1/D of each
  sequence).

Both are tree transformations (`with_prefill_context_parallel`, `with_decode_context_parallel`) of the cost
model's tree, so predict, the simulator (exact tables for DCP; a tree with ring overlaps is priced step by step,
`serving.pricing.MemoCost`) and search price them alike, and the tree shows where each transfer and overlap sits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import ChunkView, Labeled, Leaf, Parallel, Scale, Sum, Tree
from graphsim.errors import GraphsimError
from graphsim.ir import Op
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows


class ContextParallelError(GraphsimError):
    """A context-parallel size the deployment cannot have."""


@dataclass(frozen=True)
class ContextParallel:
    """vLLM's `prefill_context_parallel_size` (extra ranks) and `decode_context_parallel_size` (inside TP)."""

    pcp: int = 1
    dcp: int = 1

    def check(self, tp: int) -> None:
        if self.pcp < 1 or self.dcp < 1:
            raise ContextParallelError(f"context-parallel sizes must be >= 1 (got pcp={self.pcp}, dcp={self.dcp})")
        if tp % self.dcp:
            raise ContextParallelError(f"--decode-context-parallel-size {self.dcp} must divide the tensor-parallel size "
                                       f"{tp} (vLLM shards the KV over ranks of the TP group); use a divisor of {tp}")

    @property
    def kv_capacity_factor(self) -> int:
        """Tokens a rank's KV cache holds, relative to one without context parallelism: 1/(pcp·dcp) of every
        sequence is on each rank."""
        return self.pcp * self.dcp


def ring_time_us(compute_us: np.ndarray, send_us: np.ndarray) -> float:
    """Σ over rounds of Parallel(compute, send): each round lasts as long as the longer of its attention and its
    KV transfer (what the ring's tree composes, by hand)."""
    return float(np.maximum(np.asarray(compute_us, dtype=np.float64), np.asarray(send_us, dtype=np.float64)).sum())


def kv_bytes_per_token(g: AttentionGeometry, kv_elem_bytes: float) -> float:
    """KV-cache bytes one token adds to one layer on one rank: the MLA latent and rope key, or K and V heads."""
    if g.is_mla:
        return (g.kv_lora_rank + g.qk_rope_head_dim) * kv_elem_bytes
    return g.num_kv_heads * (g.head_dim + g.v_head_dim) * kv_elem_bytes


_PCP_RULE = ("prefill context parallel (vllm/config/parallel.py prefill_context_parallel_size): ring attention, "
             "each round's attention overlapping the send of its KV chunk to the next rank")


def pcp_attention(leaf: Leaf, pcp: int, kv_elem_bytes: float) -> Tree:
    """One attention leaf under prefill context parallelism, on the last rank of the ring (module docstring):
    Sum(ring: Sum over rounds of Parallel(attention on one KV chunk, send of that chunk); decode groups: attention
    on the rank's KV shard, all-gather of the partial outputs and LSEs)."""
    g = leaf.attrs.geometry_as(AttentionGeometry)
    kvb = int(math.ceil(kv_bytes_per_token(g, kv_elem_bytes)))
    send = KernelAttrs(KernelKind.SEND_RECV, "send_recv", CollectiveGeometry(
        num_gpus=2, group="pcp", width=kvb // 2, bytes_per_row=kvb, reason="ring KV chunk"), "bf16", Rows.TOKENS,
        rule=_PCP_RULE)
    rounds: list[Tree] = []
    for r in range(pcp):
        att = replace(leaf, name=f"{leaf.name}.ring{r}", view=ChunkView(pcp, r, marginal=r > 0, groups="prefill"))
        if r == pcp - 1:  # nothing left to send; the Parallel keeps the block above its roofline
            rounds.append(Parallel((att,), label=f"ring round {r}: attention"))
            continue
        hop = Leaf(f"{leaf.name}.ring{r}.send", send, leaf.layer, view=ChunkView(pcp, r, groups="prefill"))
        rounds.append(Parallel((att, hop), label=f"ring round {r}: attention ‖ KV send"))
    heads = g.num_heads
    o_dim = g.kv_lora_rank if g.is_mla else g.v_head_dim
    width = heads * (o_dim + 2)  # partial outputs (bf16) and their LSEs (fp32: two bf16 widths)
    combine = Leaf(f"{leaf.name}.pcp_combine", KernelAttrs(KernelKind.ALL_GATHER, "all_gather", CollectiveGeometry(
        num_gpus=pcp, group="pcp", width=width * pcp, bytes_per_row=width * pcp * 2, reason="decode partial outputs"),
        "bf16", Rows.TOKENS, rule=_PCP_RULE), leaf.layer, view=ChunkView(pcp, groups="decode"))
    decode = replace(leaf, name=f"{leaf.name}.decode", view=ChunkView(pcp, groups="decode"), kv_shards=pcp)
    return Sum((Sum(tuple(rounds)), decode, combine))


def with_prefill_context_parallel(cm: CostModel, pcp: int) -> CostModel:
    """`cm` on the last rank of a `pcp`-rank ring: per-token kernels at 1/pcp of each prefill's tokens, attention as
    `pcp_attention` (MLA blocks priced by their kernels). `pcp` 1: `cm` itself."""
    ContextParallel(pcp=pcp).check(cm.tp)
    if pcp == 1:
        return cm
    if any(n.kernel.kind is KernelKind.LINEAR_ATTENTION for n in cm.graph.nodes if n.op is Op.KERNEL):
        raise ContextParallelError(f"{cm.graph.name} has linear-attention or Mamba layers, whose state would pass "
                                   "from rank to rank; prefill context parallel is not modelled for them")
    from graphsim.costing.cost_tree import build_tree, compile_tree

    kv = cm.dtypes.kv.element_bytes

    def each(lf: Leaf) -> Tree:
        if lf.attrs.kind is KernelKind.ATTENTION:
            return pcp_attention(lf, pcp, kv)
        return replace(lf, view=ChunkView(pcp))

    tree = _map_leaves(build_tree(cm.graph, cm.dtypes, None, _streams(cm), _row_labels(cm)), each)
    note = f"prefill context parallel {pcp}: ring attention over {pcp} ranks (the last rank priced)"
    return replace(cm, tree=compile_tree(tree), data_note=f"{cm.data_note}; {note}" if cm.data_note else note)


def dcp_attention(leaf: Leaf, dcp: int, tp: int, name: str = "") -> Tree:
    """One attention leaf under decode context parallelism, per rank: Sum(all-gather of the D ranks' queries,
    attention of H/tp × D heads over 1/D of every sequence's cached tokens (`Leaf.kv_shards`), all-gather of the
    partial outputs' LSEs + reduce-scatter of the partial outputs (vLLM's LSE-corrected combine)). MLA attends in
    its latent space (absorbed): queries of kv_lora_rank + rope dims, outputs of kv_lora_rank dims per head."""
    g = leaf.attrs.geometry_as(AttentionGeometry)
    copies = tp if g.is_mla else g.kv_replicas  # ranks of the TP group holding the same KV (MLA: all of them)
    if dcp > copies:
        raise ContextParallelError(
            f"--decode-context-parallel-size {dcp}: at tp={tp} each KV head of {name or 'the model'} is held by "
            f"{copies} rank(s); DCP shards those copies along tokens, so it can be at most {copies} "
            "(vLLM's DCP removes the KV duplication within the TP group)")
    heads = g.num_heads * dcp
    q_dim = g.kv_lora_rank + g.qk_rope_head_dim if g.is_mla else g.head_dim
    o_dim = g.kv_lora_rank if g.is_mla else g.v_head_dim
    act = 2  # bf16 queries and outputs; LSEs fp32

    def coll(kind: KernelKind, what: str, width: int, bytes_per_row: int) -> Leaf:
        geo = CollectiveGeometry(num_gpus=dcp, group="dcp", width=width, bytes_per_row=bytes_per_row, reason=what)
        return Leaf(f"{leaf.name}.dcp_{what}", KernelAttrs(kind, kind.value, geo, "bf16", Rows.TOKENS,
                                                           rule=_DCP_RULE), leaf.layer)

    attn = replace(leaf, attrs=replace(leaf.attrs, geometry=replace(g, num_heads=heads)), kv_shards=dcp)
    return Sum((coll(KernelKind.ALL_GATHER, "q", heads * q_dim, heads * q_dim * act), attn,
                coll(KernelKind.ALL_GATHER, "lse", heads, heads * 4),
                coll(KernelKind.REDUCE_SCATTER, "out", heads * o_dim, heads * o_dim * act)))


_DCP_RULE = ("decode context parallel (vllm/config/parallel.py decode_context_parallel_size): queries all-gathered "
             "over the DCP group, partial outputs combined with their LSE (all-gather of the LSEs, reduce-scatter "
             "of the outputs)")


def _map_leaves(tree: Tree, f) -> Tree:
    if isinstance(tree, Leaf):
        return f(tree)
    if isinstance(tree, (Scale, Labeled)):
        return replace(tree, child=_map_leaves(tree.child, f))
    return replace(tree, children=tuple(_map_leaves(c, f) for c in tree.children))


def with_decode_context_parallel(cm: CostModel, dcp: int) -> CostModel:
    """`cm` with its KV sharded over `dcp` ranks of the TP group: every attention leaf becomes `dcp_attention`
    (MLA blocks priced by their kernels: whole-module rows cannot be sharded). `dcp` 1: `cm` itself."""
    ContextParallel(dcp=dcp).check(cm.tp)
    if dcp == 1:
        return cm
    from graphsim.costing.cost_tree import build_tree, compile_tree

    tree = build_tree(cm.graph, cm.dtypes, None, _streams(cm), _row_labels(cm))
    tree = _map_leaves(tree, lambda lf: dcp_attention(lf, dcp, cm.tp, cm.graph.name)
                       if lf.attrs.kind is KernelKind.ATTENTION else lf)
    note = f"decode context parallel {dcp}: KV sharded over {dcp} ranks of the TP group"
    return replace(cm, tree=compile_tree(tree), data_note=f"{cm.data_note}; {note}" if cm.data_note else note)


def _row_labels(cm: CostModel):
    """The collector labels of a key's own rows, as the unsplit tree reads them: a router top-k inside its experts'
    measured rows is no leaf here either (costing/routing_in_rows.py)."""
    from graphsim.costing.routing_in_rows import pricer_row_labels

    return pricer_row_labels(cm.pricer)


def _streams(cm: CostModel):
    from graphsim.costing.streams import StreamSettings

    if cm.graph.meta.fuse_target != "vllm":
        return None
    return cm.stream_settings or StreamSettings(cuda=bool(cm.streams))


def with_context_parallel(cm: CostModel, cp: ContextParallel) -> CostModel:
    """`cm` under both: PCP's ring over the ranks, DCP's sharded decode attention inside each TP group (a prefill
    rank's attention leaves become rings; DCP reshapes the attention leaves of decode groups and of the rings)."""
    cp.check(cm.tp)
    if cp.pcp == 1:
        return with_decode_context_parallel(cm, cp.dcp)
    pcm = with_prefill_context_parallel(cm, cp.pcp)
    if cp.dcp == 1:
        return pcm
    raise ContextParallelError("--prefill-context-parallel-size and --decode-context-parallel-size together are not "
                               "modelled yet; give one of them")

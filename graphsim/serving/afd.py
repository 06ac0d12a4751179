"""Attention–FFN disaggregation (AFD): the third deployment kind beside unified serving and prefill/decode
disaggregation (disagg.py). Every layer runs its attention half on an *attention pool* of ATTN_GPUS GPUs (which
also holds the embedding, the LM head and the whole KV cache) and its FFN half (dense MLP or MoE) on an
*FFN pool* of FFN_GPUS GPUs; between the halves the hidden states cross the link between the pools, once
attention → FFN ("dispatch") and once FFN → attention ("combine"), in every layer.

vLLM has no option for this (no `--afd` or equivalent in vllm/engine/arg_utils.py), so graphsim's spelling is its
own: `--afd ATTN_GPUS:FFN_GPUS` with `--afd-micro-batches m`.

The schedule: ping-pong micro-batches. The running batch is split into m micro-batches that chase each other
around the ring attention → dispatch → FFN → combine → attention (next layer), so while the FFN pool works on
micro-batch i the attention pool works on micro-batch i+1 (Step-3, arXiv 2507.19427, section "AFD", the
multi-stage pipeline of its Figure on the AFD timeline; MegaScale-Infer, arXiv 2504.02263, section 4 "ping-pong
pipeline parallelism", whose iteration latency is (T_a + T_e + 2·T_c) + T_f·(m·L − 1) with T_f = max(T_a, T_e)
once m micro-batches fill the ring). graphsim prices the same ring with the transfers as stages of their own:
per layer and micro-batch, a = attention-pool time, d = dispatch, e = FFN-pool time, c = combine; one
micro-batch's trip around the ring is S = a + d + e + c and its slowest stage T = max(a, d, e, c). One round of
all m micro-batches through a layer takes R = max(m·T, S) (the bottleneck stage busy m times, or one trip if the
ring is not full), and the pipeline fills once: X = min(S − T, (m − 1)·T). For L identical layers

    layers = L·R + X = S + (m − 1)·T + (L − 1)·max(m·T, S)

which is MegaScale-Infer's formula when m·T ≥ S (and m = 1 gives L·S: no overlap). Layers of different kinds
(a schedule tag each, e.g. dense and MoE layers) each add count × their own R; the fill is the first layer's.
The embedding before the layers and the LM head after them run on the attention pool, once per micro-batch,
not overlapped (an upper bound). Every composed time is at least each pool's own busy time (m·Σ a, m·Σ e) and
one micro-batch's trip through every layer (Σ S): the physical floors.

Within a pool a layer's kernels add up: an overlap the unified tree draws inside a layer (e.g. shared experts on
an auxiliary stream) is not applied on the pools (an upper bound).

Micro-batches: decode sequences are dealt evenly (⌈B/m⌉ in the busiest one); a prefill chunk of n tokens is cut
into m pieces of ⌈n/m⌉ tokens, the busiest being the last (its prefix is longest). Every micro-batch is priced
as the busiest one (an upper bound when they are unequal).

The split is by the graph's node kinds, not by names: in every layer the FFN half is found from its core kernel
(the routed experts, else the MLP's activation) by walking back through GEMMs and collectives to the value the
FFN reads (the post-attention norm's output); every node of the layer whose activation inputs all come from that
value or from FFN nodes is FFN, everything else (norms, attention, the residual adds) stays on the attention pool.

Pools: the attention pool is d = ATTN_GPUS / a attention instances of a TP ranks each (`--afd-attention-tp a`,
default a = ATTN_GPUS: one instance; its graph `tp{size=a}`), each with its own scheduler, batch and KV cache, as
Step-3's attention instances and MegaScale-Infer's M attention nodes; the FFN pool takes micro-batch i of every
instance at once (its kernels priced on d × the tokens; the instances are taken as balanced and in lockstep) and
splits the FFN over FFN_GPUS ranks (`tp{size=F}`, and with `--afd-ffn-parallel ep` `ep{size=F}`, as vLLM spreads
experts over the TP group); each pool's own collectives come from its graph. Transfer bytes per token per layer:
the FFN input width × its dtype bytes (its TensorSpec in the graph); every FFN rank needs every token of every
instance (its graph is a TP graph of replicated activations) and every attention rank needs its instance's
outputs, so the busier GPU moves max(d, F/a) × those bytes per instance token in dispatch and max(1, A/F) × in
combine. That is an upper bound for an
M2N library that sends each token only to its top-k experts' GPUs (MegaScale-Infer's M2N; not modelled). The
link is `disagg.KvLink.from_hardware` for A + F GPUs (the node's NVLink while both pools fit in one node, the
network between nodes otherwise), priced latency + bytes / bandwidth: a roofline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsim.catalog import ResolvedModel
from graphsim.costing.collectives import CollectiveSettings
from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import Leaf, price_leaves
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import MISSING, ROOFLINE, SOURCES
from graphsim.costing.moe_routing import RoutingModel
from graphsim.costing.profile_db import ProfileDB
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Node, Op, split_value
from graphsim.ir.kernel import KernelKind
from graphsim.serving.disagg import KvLink, KvLinkError
from graphsim.serving.simulator import SimulationSetup
from graphsim.workload import SeqGroup, Step

MAX_MICRO_BATCHES = 64


class AfdError(GraphsimError):
    pass


@dataclass(frozen=True)
class AfdConfig:
    """`--afd ATTN_GPUS:FFN_GPUS` with `--afd-micro-batches m` (graphsim's names: vLLM has none)."""

    attention_gpus: int
    ffn_gpus: int
    micro_batches: int = 2
    expert_parallel: bool = False  # FFN pool: experts spread over its GPUs (ep), else split like TP
    attention_tp: int = 0  # TP of one attention instance (0: all ATTN_GPUS, one instance); ATTN_GPUS / it instances

    def __post_init__(self) -> None:
        if self.attention_gpus < 1 or self.ffn_gpus < 1:
            raise AfdError(f"--afd {self.attention_gpus}:{self.ffn_gpus}: both pools need at least one GPU; give "
                           "--afd ATTN_GPUS:FFN_GPUS, e.g. --afd 2:4")
        if self.attention_tp < 0 or (self.attention_tp and self.attention_gpus % self.attention_tp):
            raise AfdError(f"--afd-attention-tp {self.attention_tp}: give a divisor of the {self.attention_gpus} "
                           "attention GPUs (each attention instance is that many TP ranks)")
        if not 1 <= self.micro_batches <= MAX_MICRO_BATCHES:
            raise AfdError(f"--afd-micro-batches {self.micro_batches}: give 1 to {MAX_MICRO_BATCHES} (2 or 3 is "
                           "what Step-3 and MegaScale-Infer run)")

    @classmethod
    def parse(cls, text: str, micro_batches: int = 2, expert_parallel: bool = False,
              attention_tp: int = 0) -> AfdConfig:
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text or "")
        if m is None:
            raise AfdError(f"--afd {text!r}: give ATTN_GPUS:FFN_GPUS, two positive integers, e.g. --afd 2:4")
        return cls(int(m.group(1)), int(m.group(2)), micro_batches, expert_parallel, attention_tp)

    @property
    def gpus(self) -> int:
        return self.attention_gpus + self.ffn_gpus

    @property
    def tp(self) -> int:
        """TP of one attention instance."""
        return self.attention_tp or self.attention_gpus

    @property
    def instances(self) -> int:
        """Attention instances (data parallel, each its own scheduler, batch and KV cache) feeding the FFN pool."""
        return self.attention_gpus // self.tp

    def to_json(self) -> dict[str, Any]:
        return {"attention_gpus": self.attention_gpus, "attention_tp": self.tp, "attention_instances": self.instances,
                "ffn_gpus": self.ffn_gpus, "micro_batches": self.micro_batches,
                "ffn_parallel": "ep" if self.expert_parallel else "tp", "label": self.label(), "vllm_option": None}

    def label(self) -> str:
        ffn = f"ep{self.ffn_gpus}" if self.expert_parallel else f"tp{self.ffn_gpus}"
        att = f"tp{self.tp}" if self.instances == 1 else f"{self.instances}×tp{self.tp}"
        return f"AFD {self.attention_gpus}A({att}):{self.ffn_gpus}F({ffn}), m={self.micro_batches}"


# --- the split, from the graph's node kinds ----------------------------------------------------------------
_FFN_CORE = (KernelKind.MOE_EXPERTS, KernelKind.MOE_ROUTER)
_MLP_ACT = (KernelKind.ACT_AND_MUL, KernelKind.ACTIVATION)
_MIXERS = (KernelKind.ATTENTION, KernelKind.LINEAR_ATTENTION)
_PASS_BACK = (KernelKind.GEMM, KernelKind.ALL_REDUCE, KernelKind.ALL_GATHER, KernelKind.REDUCE_SCATTER,
              KernelKind.ALL_TO_ALL)


@dataclass(frozen=True)
class LayerSplit:
    """One layer's FFN half: the value it reads and the nodes that are FFN (names)."""

    layer: int
    ffn_input: str  # the value the FFN reads (the post-attention norm's output)
    ffn_nodes: frozenset[str]


def _activation_inputs(n: Node, produced: set[str]) -> list[str]:
    """The inputs some node computes (not parameters, buffers or the graph's inputs)."""
    return [v for v in n.inputs if split_value(v)[0] in produced]


def layer_split(graph: Graph, layer: int) -> LayerSplit | None:
    """The FFN half of one layer of a fused kernel graph (None: the layer has no FFN, e.g. a mixer-only layer)."""
    nodes = [n for n in graph.nodes if n.layer == layer and n.op is Op.KERNEL]
    produced = {n.name for n in graph.nodes}
    producer = {n.name: n for n in nodes}
    core = next((n for n in nodes if n.kernel.kind in _FFN_CORE), None)
    if core is None:
        last_mixer = max((i for i, n in enumerate(nodes) if n.kernel.kind in _MIXERS), default=-1)
        core = next((n for n in reversed(nodes[last_mixer + 1:]) if n.kernel.kind in _MLP_ACT), None)
    if core is None:
        return None
    if core.kernel.kind is KernelKind.MOE_ROUTER:  # start from the experts when the router comes first
        core = next((n for n in nodes if n.kernel.kind is KernelKind.MOE_EXPERTS), core)
    value = _activation_inputs(core, produced)[0]
    while True:  # back through GEMMs and collectives (and one-input casts) to the value the FFN reads
        p = producer.get(split_value(value)[0])
        if p is None:
            break
        acts = _activation_inputs(p, produced)
        cast = p.kernel.kind is KernelKind.ELEMENTWISE and len(acts) == 1
        if not (p.kernel.kind in _PASS_BACK or cast) or not acts:
            break
        value = acts[0]
    ffn: set[str] = set()
    start = next((i for i, n in enumerate(nodes) if n.name == split_value(value)[0]), -1)
    for n in nodes[start + 1:]:
        acts = _activation_inputs(n, produced)
        if acts and all(v == value or split_value(v)[0] in ffn for v in acts):
            ffn.add(n.name)
    if core.name not in ffn:
        raise AfdError(f"layer {layer}: the FFN kernel {core.name} reads values from outside its FFN half; graphsim "
                       "cannot split this layer into attention and FFN pools")
    return LayerSplit(layer, value, frozenset(ffn))


def ffn_node_names(graph: Graph) -> set[str]:
    """Every FFN node of the graph (its layers' FFN halves); everything else belongs to the attention pool."""
    out: set[str] = set()
    for layer in sorted({n.layer for n in graph.nodes if n.layer is not None}):
        s = layer_split(graph, layer)
        if s is not None:
            out |= s.ffn_nodes
    return out


def ffn_row_bytes(graph: Graph) -> float:
    """Bytes one token carries across the link in one direction: the FFN input's width × its dtype's bytes (the
    widest layer's, from its TensorSpec)."""
    widest = 0.0
    for layer in sorted({n.layer for n in graph.nodes if n.layer is not None}):
        s = layer_split(graph, layer)
        if s is None:
            continue
        spec = graph.spec_of(s.ffn_input)
        width = spec.shape[-1]
        if not isinstance(width, int):
            raise AfdError(f"layer {layer}: the FFN input {s.ffn_input} has no fixed width ({spec.shape})")
        widest = max(widest, width * spec.dtype.bytes)
    return widest


# --- the pools' leaves ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerGroup:
    """Layers of one schedule tag: `count` of them, one layer's leaves on each pool."""

    tag: str
    count: int
    attention: tuple[Leaf, ...]
    ffn: tuple[Leaf, ...]


@dataclass(frozen=True)
class PoolSplit:
    before: tuple[Leaf, ...]  # attention pool, before the layers (embedding)
    after: tuple[Leaf, ...]  # attention pool, after them (final norm, LM head)
    groups: tuple[LayerGroup, ...]

    def attention_leaves(self) -> list[tuple[Leaf, float]]:
        """(leaf, instances per iteration of one micro-batch) on the attention pool."""
        out = [(lf, 1.0) for lf in (*self.before, *self.after)]
        for g in self.groups:
            out += [(lf, float(g.count)) for lf in g.attention]
        return out

    def ffn_leaves(self) -> list[tuple[Leaf, float]]:
        return [(lf, float(g.count)) for g in self.groups for lf in g.ffn]


def _tag_leaves(cm: CostModel) -> tuple[list[Leaf], list[Leaf], dict[int, tuple[str, int]], list[tuple[int, Leaf]]]:
    """A cost model's compiled leaves: before the layers, after them, each representative layer's (tag, count), and
    (layer, leaf) in order."""
    sched = cm.graph.schedule
    reps: dict[int, tuple[str, int]] = {}
    if sched is not None:
        for tag in dict.fromkeys(sched.tags):
            reps[sched.representative[tag]] = (tag, sched.count(tag))
    before: list[Leaf] = []
    after: list[Leaf] = []
    layered: list[tuple[int, Leaf]] = []
    kernels = {n.name for n in cm.graph.nodes}
    for lf in cm.tree.leaves:
        if lf.name not in kernels:  # a leaf the tree adds for an overlap (a stream's input copy): the pools sum
            continue
        if lf.layer is None:
            (after if layered else before).append(lf)
        else:
            layered.append((lf.layer, lf))
    return before, after, reps, layered


def split_pools(attention: CostModel, ffn: CostModel) -> PoolSplit:
    """The attention pool's leaves from `attention`'s tree (everything but the FFN halves) and the FFN pool's from
    `ffn`'s tree (the FFN halves only); both trees are of the same model, partitioned per pool."""
    a_ffn, f_ffn = ffn_node_names(attention.graph), ffn_node_names(ffn.graph)
    if not f_ffn:
        raise AfdError("the model has no FFN (MLP or MoE) kernels to put on an FFN pool; AFD needs them")
    before, after, reps, layered = _tag_leaves(attention)
    _, _, f_reps, f_layered = _tag_leaves(ffn)
    if [t for t, _ in reps.values()] != [t for t, _ in f_reps.values()]:
        raise AfdError("the two pools' graphs have different layer schedules; build both from one model")
    groups = []
    for rep, (tag, count) in reps.items():
        att = tuple(lf for layer, lf in layered if layer == rep and lf.name not in a_ffn)
        frep = next(r for r, (t, _) in f_reps.items() if t == tag)
        ff = tuple(lf for layer, lf in f_layered if layer == frep and lf.name in f_ffn)
        groups.append(LayerGroup(tag, count, att, ff))
    return PoolSplit(tuple(before), tuple(after), tuple(groups))


# --- micro-batches -------------------------------------------------------------------------------------------
def micro_step(step: Step, m: int) -> Step:
    """The busiest of the m micro-batches a step is cut into (see the module docstring)."""
    if m == 1:
        return step
    groups = []
    for g in step.groups:
        if g.new_tokens == 1 or g.count >= m:
            groups.append(SeqGroup(g.new_tokens, g.cached_tokens, -(-g.count // m)))
        else:  # a prefill chunk: m pieces of ⌈n/m⌉ tokens; the last has the longest prefix
            piece = -(-g.new_tokens // m)
            groups.append(SeqGroup(piece, g.cached_tokens + g.new_tokens - piece, g.count))
    return Step(tuple(groups))


# --- the model -----------------------------------------------------------------------------------------------
@dataclass
class AfdTimes:
    """Per step (columns): the busiest micro-batch's stage times per layer group and the composed iteration."""

    steps: list[Step]
    micro: list[Step]
    tags: list[str]
    counts: list[int]
    attention_us: np.ndarray  # (groups, steps): one layer's attention half, one micro-batch
    ffn_us: np.ndarray  # (groups, steps)
    dispatch_us: np.ndarray  # (groups, steps)
    combine_us: np.ndarray  # (groups, steps)
    before_us: np.ndarray  # (steps,): embedding, one micro-batch
    after_us: np.ndarray  # (steps,): final norm and LM head, one micro-batch
    total_us: np.ndarray  # (steps,)
    attention_source: np.ndarray  # (steps,) worst source code of the attention pool's leaves
    ffn_source: np.ndarray
    source: np.ndarray  # (steps,) worst of all (the transfer is a roofline)
    m: int = 2

    def source_name(self, b: int) -> str:
        return SOURCES[int(self.source[b])].value

    def chain_us(self) -> np.ndarray:
        """S per group: one micro-batch's trip around the ring in one layer."""
        return self.attention_us + self.dispatch_us + self.ffn_us + self.combine_us

    def stage_us(self) -> np.ndarray:
        """T per group: the slowest stage."""
        return np.maximum.reduce([self.attention_us, self.dispatch_us, self.ffn_us, self.combine_us])

    def attention_busy_us(self) -> np.ndarray:
        """The attention pool's busy time per iteration (all micro-batches): a floor of the iteration time."""
        c = np.asarray(self.counts, dtype=float)[:, None]
        return self.m * ((c * self.attention_us).sum(axis=0) + self.before_us + self.after_us)

    def ffn_busy_us(self) -> np.ndarray:
        c = np.asarray(self.counts, dtype=float)[:, None]
        return self.m * (c * self.ffn_us).sum(axis=0)


def compose_us(a: np.ndarray, d: np.ndarray, e: np.ndarray, c: np.ndarray, counts: Sequence[int], m: int,
               before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The ping-pong iteration time from per-layer, per-micro-batch stage times (groups × steps arrays):
    m·(before + after) + Σ_g count_g·max(m·T_g, S_g) + min(S_0 − T_0, (m − 1)·T_0)."""
    s = a + d + e + c
    t = np.maximum.reduce([a, d, e, c])
    n = np.asarray(counts, dtype=float)[:, None]
    rounds = (n * np.maximum(m * t, s)).sum(axis=0)
    fill = np.minimum(s[0] - t[0], (m - 1) * t[0]) if len(s) else 0.0
    return m * (before + after) + rounds + fill


@dataclass
class AfdModel:
    """Both pools' cost models, the split, the link and the schedule: prices steps as AFD iterations."""

    config: AfdConfig
    attention: CostModel
    ffn: CostModel
    link: KvLink
    split: PoolSplit = field(init=False)
    row_bytes: float = field(init=False)  # one token, one direction, one layer

    def __post_init__(self) -> None:
        self.split = split_pools(self.attention, self.ffn)
        self.row_bytes = ffn_row_bytes(self.attention.graph)

    @property
    def m(self) -> int:
        return self.config.micro_batches

    def transfer_bytes(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes through the busier GPU's link per layer for a micro-batch of `tokens` per attention instance:
        (dispatch, combine). Dispatch: each FFN GPU takes every instance's tokens (d·t), each attention GPU sends
        its instance's tokens to F/a of them; combine: each attention GPU takes its instance's outputs (t), each FFN
        GPU sends d·t·a/F."""
        c = self.config
        t = np.asarray(tokens, dtype=float) * self.row_bytes
        return t * max(float(c.instances), c.ffn_gpus / c.tp), t * max(1.0, c.attention_gpus / c.ffn_gpus)

    def times(self, steps: list[Step]) -> AfdTimes:
        micro = [micro_step(s, self.m) for s in steps]
        sp = self.split
        n_b = len(steps)
        groups = sp.groups
        a_leaves = [*sp.before, *sp.after, *(lf for g in groups for lf in g.attention)]
        f_leaves = [lf for g in groups for lf in g.ffn]
        a_t, a_s = price_leaves(a_leaves, micro, self.attention.pricer, self.attention.dtypes) if a_leaves else (
            np.zeros((0, n_b)), np.zeros((0, n_b), dtype=np.int8))
        d = self.config.instances  # the FFN pool takes micro-batch i of every attention instance at once
        ffn_steps = micro if d == 1 else [Step(tuple(SeqGroup(g.new_tokens, g.cached_tokens, g.count * d)
                                                     for g in s.groups)) for s in micro]
        f_t, f_s = price_leaves(f_leaves, ffn_steps, self.ffn.pricer, self.ffn.dtypes) if f_leaves else (
            np.zeros((0, n_b)), np.zeros((0, n_b), dtype=np.int8))
        nb, na = len(sp.before), len(sp.after)
        before = a_t[:nb].sum(axis=0)
        after = a_t[nb:nb + na].sum(axis=0)
        att = np.zeros((len(groups), n_b))
        ffn = np.zeros((len(groups), n_b))
        pos_a, pos_f = nb + na, 0
        for i, g in enumerate(groups):
            att[i] = a_t[pos_a:pos_a + len(g.attention)].sum(axis=0)
            ffn[i] = f_t[pos_f:pos_f + len(g.ffn)].sum(axis=0)
            pos_a += len(g.attention)
            pos_f += len(g.ffn)
        tokens = np.asarray([s.tokens for s in micro], dtype=float)
        d_bytes, c_bytes = self.transfer_bytes(tokens)
        has_ffn = np.asarray([len(g.ffn) > 0 for g in groups], dtype=float)[:, None]
        disp = has_ffn * np.asarray([self.link.transfer_s(b) * 1e6 for b in d_bytes])[None, :]
        comb = has_ffn * np.asarray([self.link.transfer_s(b) * 1e6 for b in c_bytes])[None, :]
        counts = [g.count for g in groups]
        total = compose_us(att, disp, ffn, comb, counts, self.m, before, after)
        a_src = a_s.max(axis=0) if len(a_s) else np.zeros(n_b, dtype=np.int8)
        f_src = f_s.max(axis=0) if len(f_s) else np.zeros(n_b, dtype=np.int8)
        src = np.maximum(np.maximum(a_src, f_src), ROOFLINE).astype(np.int8)
        total = np.where((a_src == MISSING) | (f_src == MISSING), np.nan, total)
        return AfdTimes(steps, micro, [g.tag for g in groups], counts, att, ffn, disp, comb, before, after, total,
                        a_src, f_src, src, self.m)

    # --- rendering ---------------------------------------------------------------------------------------------
    def tree_lines(self, t: AfdTimes, b: int = 0) -> list[str]:
        """The composition as a cost tree (Sum / Max / Parallel / Scale nodes) with step b's times."""
        m = self.m
        lines = [f"iteration ({self.config.label()}): {t.total_us[b]:,.1f} µs [{SOURCES[int(t.source[b])].value}]",
                 f"├─ Scale{{{m}}} attention pool, before the layers (embedding): {m * t.before_us[b]:,.1f} µs"]
        s, st = t.chain_us()[:, b], t.stage_us()[:, b]
        for i, tag in enumerate(t.tags):
            a, d, e, c = (x[i, b] for x in (t.attention_us, t.dispatch_us, t.ffn_us, t.combine_us))
            r = max(m * st[i], s[i])
            lines += [f"├─ Scale{{{t.counts[i]}}} layers {tag}: {t.counts[i] * r:,.1f} µs",
                      f"│  └─ Max (one round of {m} micro-batches): {r:,.1f} µs",
                      f"│     ├─ Scale{{{m}}} Parallel (pools and link overlap; slowest stage): {m * st[i]:,.1f} µs",
                      f"│     │  ├─ attention pool (tp{self.config.tp} per instance, one micro-batch): {a:,.2f} µs "
                      f"[{SOURCES[int(t.attention_source[b])].value}]",
                      f"│     │  ├─ dispatch A→F ({self.link.describe}): {d:,.2f} µs [roofline]",
                      f"│     │  ├─ FFN pool ({'ep' if self.config.expert_parallel else 'tp'}{self.config.ffn_gpus}, "
                      f"micro-batch of {self.config.instances} instance(s)): {e:,.2f} µs "
                      f"[{SOURCES[int(t.ffn_source[b])].value}]",
                      f"│     │  └─ combine F→A: {c:,.2f} µs [roofline]",
                      f"│     └─ Sum (one micro-batch's trip a + d + e + c): {s[i]:,.1f} µs"]
        if len(t.tags):
            fill = min(s[0] - st[0], (m - 1) * st[0])
            lines.append(f"├─ fill/drain: min(S − T, (m − 1)·T) of the first layer: {fill:,.1f} µs")
        lines.append(f"└─ Scale{{{m}}} attention pool, after the layers (norm, LM head): {m * t.after_us[b]:,.1f} µs")
        return lines

    def to_json(self, t: AfdTimes, labels: Sequence[str]) -> dict[str, Any]:
        rows = []
        for b, label in enumerate(labels):
            rows.append({
                "batch": label, "micro_batch": t.micro[b].label(), "total_us": float(t.total_us[b]),
                "source": SOURCES[int(t.source[b])].value,
                "attention_pool_busy_us": float(t.attention_busy_us()[b]), "ffn_pool_busy_us": float(t.ffn_busy_us()[b]),
                "before_layers_us": float(t.before_us[b]), "after_layers_us": float(t.after_us[b]),
                "layers": [{"tag": tag, "count": t.counts[i], "attention_us": float(t.attention_us[i, b]),
                            "dispatch_us": float(t.dispatch_us[i, b]), "ffn_us": float(t.ffn_us[i, b]),
                            "combine_us": float(t.combine_us[i, b])} for i, tag in enumerate(t.tags)],
                "attention_source": SOURCES[int(t.attention_source[b])].value,
                "ffn_source": SOURCES[int(t.ffn_source[b])].value})
        return {"afd": {"attention_gpus": self.config.attention_gpus, "attention_tp": self.config.tp,
                        "attention_instances": self.config.instances, "ffn_gpus": self.config.ffn_gpus,
                        "micro_batches": self.m, "expert_parallel": self.config.expert_parallel,
                        "link": self.link.describe, "link_source": self.link.source,
                        "bytes_per_token_per_layer_each_way": self.row_bytes,
                        "schedule": "ping-pong (Step-3 arXiv 2507.19427; MegaScale-Infer arXiv 2504.02263)",
                        "vllm_option": None},
                "data": {"attention_pool": self.attention.data_note, "ffn_pool": self.ffn.data_note},
                "predictions": rows}


# --- the simulator's iteration cost --------------------------------------------------------------------------
class AfdCost:
    """`pricing.IterationCost` of an AFD deployment: each distinct step priced by `AfdModel.times`, memoised
    (decode contexts rounded to `quantum` tokens, as `pricing.MemoCost`)."""

    def __init__(self, model: AfdModel, quantum: int = 16) -> None:
        self.model, self.quantum = model, quantum
        self._memo: dict[tuple, tuple[float, int]] = {}
        self.evaluations = 0

    def _step(self, dec_count: int, ctx: float, chunks: list[tuple[int, int]]) -> Step:
        groups = [SeqGroup(n, p, 1) for n, p in chunks]
        if dec_count:
            groups.append(SeqGroup(1, int(round(ctx / self.quantum) * self.quantum), dec_count))
        return Step(tuple(groups))

    def _eval(self, steps: list[Step]) -> tuple[np.ndarray, np.ndarray]:
        t = self.model.times(steps)
        self.evaluations += len(steps)
        if np.isnan(t.total_us).any():
            from graphsim.serving.pricing import MissingTimingError

            raise MissingTimingError("iteration time missing on an AFD pool: a kernel has no measured row and no "
                                     "roofline; import measured rows (--profile)")
        return t.total_us, t.source

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        key = (dec_count, round(dec_ctx_mean / self.quantum), tuple(chunks))
        hit = self._memo.get(key)
        if hit is None:
            t, s = self._eval([self._step(dec_count, dec_ctx_mean, chunks)])
            hit = self._memo[key] = (float(t[0]), int(s[0]))
        return hit

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        t, s = self._eval([self._step(batch, ctx_mean0 + j, []) for j in range(k)])
        return t, s.astype(np.int8)


def build_afd_model(model: str | ResolvedModel | Graph | Callable[[], Graph], hardware: str | HardwareSpec,
                    config: AfdConfig, *, dtype: str | None = None, kv_dtype: str | None = None,
                    profile: str | ProfileDB | None = None, default_profile: bool = True, target: str = "vllm",
                    moe_routing: RoutingModel | None = None,
                    collectives: CollectiveSettings | None = None, link_gbps: float | None = None,
                    link_latency_us: float | None = None) -> AfdModel:
    """Trace `model` once (when not a graph) and build both pools' cost models from it: the attention pool at
    tp=ATTN_GPUS, the FFN pool at tp=FFN_GPUS (and ep=FFN_GPUS with expert parallelism); the link between them
    from the hardware spec's topology for ATTN_GPUS + FFN_GPUS GPUs (or the given bandwidth / latency)."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.hardware import load_hardware

    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    try:
        link = KvLink.from_hardware(hw, link_gbps, link_latency_us, gpus=config.gpus)
    except KvLinkError as e:
        raise AfdError(f"the link between the AFD pools: {e}".replace("--kv-link-gbps", "--afd-link-gbps")) from None
    if isinstance(model, Graph):
        graph = model
    elif callable(model):
        graph = model()
    else:
        from graphsim.importers.hf import import_hf

        graph, _ = import_hf(model, dtype=dtype)
    # Both pools are priced on vLLM's custom-op kernels (`compiled=False`, as --enforce-eager): in compiled mode a
    # layer's residual add, FFN norm and router cast are one Inductor kernel (passes/fuse/vllm_inductor.py) that
    # straddles the point where the pools split, and `layer_split` cannot cut a kernel in two; each pool compiles
    # its own half in an AFD deployment, which is not modelled (docs/deployment-modes.md).
    att = build_cost_model(graph, hw, tp=config.tp, dtype=dtype, kv_dtype=kv_dtype, profile=profile,
                           default_profile=default_profile, target=target, moe_routing=moe_routing, collectives=collectives,
                           compiled=False)
    ffn = build_cost_model(graph, hw, tp=config.ffn_gpus, ep=config.ffn_gpus if config.expert_parallel else 1,
                           dtype=dtype, kv_dtype=kv_dtype, profile=profile, default_profile=default_profile, target=target,
                           moe_routing=moe_routing, collectives=collectives, compiled=False)
    return AfdModel(config, att, ffn, link)


def floor_check(t: AfdTimes) -> None:
    """The composed time is never below its physical floors (assertion used by tests and the CLI)."""
    floor = np.maximum.reduce([t.attention_busy_us(), t.ffn_busy_us(),
                               (np.asarray(t.counts, dtype=float)[:, None] * t.chain_us()).sum(axis=0)])
    bad = t.total_us < floor * (1 - 1e-9)
    if np.any(bad & ~np.isnan(t.total_us)):
        raise AssertionError(f"AFD iteration below its floor: {t.total_us} < {floor}")




# --- memory: KV only on the attention pool -------------------------------------------------------------------
def _is_ffn_weight(segment: str) -> bool:
    """An FFN weight in the accountant's segments (`layers.ffn.routed`, `layers[moe].ffn.shared`, …); the FFN's
    pre-norm (`.ffn.norm`, the post-attention norm) stays with attention, as in the graph split."""
    return ".ffn." in segment and not segment.endswith(".ffn.norm")


def ffn_weight_bytes(spec: Any, precision: Any, ranks: int) -> int:
    """Stored FFN weight bytes on one of `ranks` GPUs sharing the FFN: matrices split, routers and vectors whole
    (the shares `serving.memory.weight_bytes_per_rank` gives them)."""
    from graphsim.work.specs import WeightKind
    from graphsim.work.weights import model_weights, stored_bytes_per_copy

    total = 0.0
    for placed in model_weights(spec):
        if not _is_ffn_weight(placed.segment):
            continue
        w = placed.weight
        full = stored_bytes_per_copy(placed, precision) * w.copies * placed.layers
        whole = (w.kind in (WeightKind.NORM, WeightKind.BIAS, WeightKind.VECTOR) or w.part == "router"
                 or (not w.quantizable and w.kind is WeightKind.MATRIX))
        total += full if whole else full / ranks
    return int(round(total))


def afd_deployment(dep: Any, config: AfdConfig) -> Any:
    """`dep` (planned at tp = ATTN_GPUS) with its memory budget and KV capacity for the attention pool: the FFN
    weights leave the attention GPUs for the FFN pool, so their bytes go to the KV cache. Raises AfdError when the
    FFN weights do not fit on the FFN pool's GPUs."""
    from dataclasses import replace

    from graphsim.serving.capacity import kv_capacity
    from graphsim.serving.memory import BudgetTerm, GiB, MemoryBudget

    if dep.tp != config.tp:
        raise AfdError(f"--tp {dep.tp} with --afd {config.attention_gpus}:{config.ffn_gpus}: an attention instance is "
                       f"tp{config.tp}; drop --tp (--afd-attention-tp sets it)")
    acc, b = dep.accountant, dep.budget
    off = ffn_weight_bytes(acc.spec, acc.precision, config.tp)
    on_ffn = ffn_weight_bytes(acc.spec, acc.precision, config.ffn_gpus)
    usable = int(dep.hardware.memory_bytes * dep.engine.gpu_memory_utilization)
    if on_ffn > usable:
        raise AfdError(f"the FFN weights need {on_ffn / GiB:,.1f} GiB on each of {config.ffn_gpus} FFN GPU(s), more "
                       f"than {dep.engine.gpu_memory_utilization:g} × {dep.hardware.memory_bytes / GiB:,.0f} GiB; give "
                       "the FFN pool more GPUs (--afd ATTN:FFN)")
    terms = []
    for t in b.terms:
        if t.name == "weights":
            t = BudgetTerm(t.name, t.bytes - off, t.origin, f"{t.how}; attention pool only: the FFN's "
                           f"{off / GiB:,.2f} GiB per rank are on the FFN pool ({on_ffn / GiB:,.2f} GiB on each of its "
                           f"{config.ffn_gpus} GPU(s))")
        terms.append(t)
    budget = MemoryBudget(b.total_bytes, b.utilization, tuple(terms), b.given_available)
    e = dep.engine
    cap = kv_capacity(dep.layout, budget.available_bytes, e.max_model_len, e.max_in_flight_tokens, e.profile)
    return replace(dep, budget=budget, capacity=cap)


@dataclass(frozen=True)
class AfdSimulationSetup(SimulationSetup):
    """A `SimulationSetup` whose engines are the attention instances of AFD units (tensor_parallel_size = an
    instance's TP, data_parallel_size = units × instances); each unit also holds `ffn_gpus` FFN GPUs. The
    instances of a unit are simulated as independent engines whose iteration times assume the others carry the
    same batch (the FFN pool's lockstep with balanced instances)."""

    ffn_gpus: int = 0
    instances: int = 1  # attention instances per unit

    @property
    def gpus(self) -> int:
        p = self.parallel
        return p.data_parallel_size * p.tensor_parallel_size + p.data_parallel_size // self.instances * self.ffn_gpus


def afd_setup(dep: Any, cost: Any, config: AfdConfig, replicas: int | None = None, router: str = "round-robin",
              host_time: bool = True) -> AfdSimulationSetup:
    """The simulator's setup of `replicas` AFD units (default: the deployment's data_parallel_size), each of
    `config.instances` attention engines (`dep` from `afd_deployment`)."""
    from dataclasses import fields

    units = dep.config.parallel.data_parallel_size if replicas is None else replicas
    base = dep.simulation_setup(cost, replicas=units * config.instances, router=router, host_time=host_time)
    return AfdSimulationSetup(**{f.name: getattr(base, f.name) for f in fields(base)}, ffn_gpus=config.ffn_gpus,
                              instances=config.instances)


__all__ = ["AfdConfig", "AfdCost", "AfdError", "AfdModel", "AfdSimulationSetup", "AfdTimes", "LayerSplit",
           "afd_deployment", "afd_setup", "build_afd_model", "compose_us", "ffn_node_names", "ffn_weight_bytes",
           "floor_check", "layer_split", "micro_step", "split_pools"]

"""Pipeline parallelism as vLLM runs it (`--pipeline-parallel-size/-pp`): the decoder layers split into `pp`
stages, each stage `tp` ranks, world = tp × pp; hidden states (and the residual) sent from one stage to the next.

Split. vLLM gives each stage a contiguous run of layers (vllm/distributed/utils.py `get_pp_indices`): `L // pp`
layers each; when `L % pp = r > 0`, one more layer each to the r stages before the last (`partitions[-i] += 1`
for i = 2 … r + 1: the last stage keeps the final norm and the LM head, the first the embedding), or the
counts `VLLM_PP_LAYER_PARTITION` gives ("4,6,6,4": their number must be pp and their sum L, else vLLM raises).
`stage_layers` replays that; a model's layers are its folded graph's `LayerSchedule` (every layer, each with
its type tag), so a hybrid stack splits by layer index like vLLM's `make_layers` does.

What each stage runs. The embedding (and every kernel before the first layer) on the first stage; the final
norm, the LM head and what follows on the last (vLLM models build `embed_tokens` only `if
get_pp_group().is_first_rank` and `norm` / `lm_head` only on the last rank, PPMissingLayer elsewhere).

Transfers. A stage that is not the last returns `IntermediateTensors` (vllm/sequence.py): the hidden states,
and the residual where the model carries one between layers (vLLM's decoder layers that run
`fused_add_rms_norm` return `(hidden_states, residual)`; graphsim reads it off the graph: a layer with a
fused add-norm kernel). vllm/v1/worker/gpu_worker.py `Worker.execute_model` sends them with
`get_pp_group().send_tensor_dict(output.tensors, all_gather_group=get_tp_group())` and the next stage receives
them with `recv_tensor_dict(all_gather_group=get_tp_group())`: vllm/distributed/parallel_state.py
`GroupCoordinator.send_tensor_dict` sends each tensor separately, each TP rank only its 1/tp slice when the
tensor divides ("send-allgather"), and the receiver all-gathers the slices over its TP group. So a hop is,
per tensor, an NCCL send/recv of T × width × bytes / tp per rank pair, then (tp > 1) an all-gather of the
whole tensor on the receiving stage; both sit at the start of the receiving stage's subtree. A send/recv is
priced on the topology (`roofline.collective_roofline_us`, factor 1): on the node's link, or on the network
when the pair sits on two nodes. vLLM's global rank is `pp_rank × tp + tp_rank` (parallel_state.py
`initialize_model_parallel`: ranks reshaped (…, dp, pp, tp), TP innermost) and nodes fill rank by rank, so
the hop from stage s crosses nodes when GPU s·tp + r and (s+1)·tp + r do for some TP rank r.

Tree. iteration → Sum over stages; a stage → [its incoming transfer, Max over its identical TP ranks → rank 0
→ [before layers (first stage), its layer regions ×n, after layers (last stage)]]. The sum is one batch's
latency through the pipeline; the simulator runs up to pp batches at once, the slowest stage setting the
interval (serving/pipeline_engine.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from graphsim.costing.composite import HasRows
from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import CompiledTree, Labeled, Leaf, Max, Scale, Sum, Tree
from graphsim.costing.cost_tree import _layer_leaves as layer_leaves
from graphsim.costing.cost_tree import _overlapped as overlapped
from graphsim.costing.cost_tree import compile_tree
from graphsim.costing.hardware import DeviceKind
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import PP_GROUP, PP_NETWORK_GROUP, KernelKey
from graphsim.costing.routing_in_rows import RowLabels, pricer_row_labels
from graphsim.costing.streams import StreamSettings
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Node, Op
from graphsim.ir.geometry import CollectiveGeometry, EmbeddingGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.tensor import DType
from graphsim.workload import Step

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"  # vllm/envs.py: per-stage layer counts, comma separated
MAX_PP = 1024
RECV = "recv from stage"  # the label of a stage's incoming transfer: "stage 1: recv from stage 0 (…)"


class PipelineError(GraphsimError):
    """A pipeline-parallel setting that cannot be run (names the fix)."""


def parse_partition(text: str) -> tuple[int, ...]:
    """VLLM_PP_LAYER_PARTITION's format: layer counts separated by commas ("4,6,6,4")."""
    try:
        counts = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise PipelineError(f"invalid layer partition {text!r}: give layer counts per stage separated by commas, "
                            "e.g. 4,6,6,4 (vLLM's VLLM_PP_LAYER_PARTITION)") from None
    if any(c < 1 for c in counts):
        raise PipelineError(f"invalid layer partition {text!r}: every stage needs at least one layer")
    return counts


def stage_layers(num_layers: int, pp: int, partition: Sequence[int] | str | None = None) -> tuple[int, ...]:
    """Layers per stage as vLLM's `get_pp_indices` gives them (see the module docstring). `partition`: explicit
    counts (VLLM_PP_LAYER_PARTITION's), as a sequence or its text."""
    if not 1 <= pp <= MAX_PP:
        raise PipelineError(f"pipeline-parallel size {pp} is out of range; give --pipeline-parallel-size 1 to {MAX_PP}")
    if partition is not None:
        counts = parse_partition(partition) if isinstance(partition, str) else tuple(int(c) for c in partition)
        if len(counts) != pp:
            raise PipelineError(f"layer partition {','.join(map(str, counts))} has {len(counts)} stages, not "
                                f"--pipeline-parallel-size {pp}; give one count per stage")
        if sum(counts) != num_layers:
            raise PipelineError(f"layer partition {','.join(map(str, counts))} sums to {sum(counts)} layers, but the "
                                f"model has {num_layers}; give counts that sum to {num_layers}")
        return counts
    if pp > num_layers:
        raise PipelineError(f"--pipeline-parallel-size {pp} exceeds the model's {num_layers} layers; give at most "
                            f"{num_layers} stages")
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):  # the remainder goes to the stages before the last, last first
        counts[-i] += 1
    return tuple(counts)


def pp_indices(num_layers: int, rank: int, pp: int, partition: Sequence[int] | str | None = None) -> tuple[int, int]:
    """(first layer, one past the last) of stage `rank`: vLLM's `get_pp_indices(num_layers, rank, pp)`."""
    counts = stage_layers(num_layers, pp, partition)
    if not 0 <= rank < pp:
        raise PipelineError(f"stage {rank} does not exist in a pipeline of {pp}")
    start = sum(counts[:rank])
    return start, start + counts[rank]


def partition_from_env() -> str | None:
    """VLLM_PP_LAYER_PARTITION as set in the environment (None: unset or empty)."""
    return os.environ.get(PARTITION_ENV) or None


def hop_crosses_nodes(stage: int, tp: int, gpus_per_node: int) -> bool:
    """The transfer from `stage` to `stage + 1` runs between two nodes (global rank pp_rank × tp + tp_rank, nodes
    filled rank by rank)."""
    g = max(gpus_per_node, 1)
    return any((stage * tp + r) // g != ((stage + 1) * tp + r) // g for r in range(tp))


@dataclass(frozen=True)
class PipelineSplit:
    """A deployment's stages: layer counts per stage, the TP size of each stage, and which hops cross nodes."""

    layers: tuple[int, ...]  # per stage
    tp: int = 1
    gpus_per_node: int = 0  # 0: unknown (every hop inside a node)

    @classmethod
    def of(cls, num_layers: int, pp: int, tp: int = 1, gpus_per_node: int = 0,
           partition: Sequence[int] | str | None = None) -> PipelineSplit:
        return cls(stage_layers(num_layers, pp, partition), tp, gpus_per_node)

    @property
    def pp(self) -> int:
        return len(self.layers)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        out, start = [], 0
        for n in self.layers:
            out.append((start, start + n))
            start += n
        return tuple(out)

    def crosses_nodes(self, stage: int) -> bool:
        """The hop into stage `stage + 1` crosses nodes."""
        return self.gpus_per_node > 0 and hop_crosses_nodes(stage, self.tp, self.gpus_per_node)

    def describe(self) -> str:
        return ", ".join(f"stage {i}: layers {a}–{b - 1}" for i, (a, b) in enumerate(self.ranges))


@dataclass(frozen=True)
class IntermediateTensors:
    """What one stage sends the next per token: `names` (hidden_states, and residual where the layers carry
    one), each `width` elements of `dtype`."""

    names: tuple[str, ...]
    width: int
    dtype: str  # DType value

    @property
    def bytes_per_token(self) -> int:
        return len(self.names) * int(self.width * DType(self.dtype).bytes)


def intermediate_tensors(graph: Graph) -> IntermediateTensors:
    """The tensors a stage of `graph` hands the next: hidden states of the embedding's width (else the final
    norm's) in the activation dtype, and the residual when the layers run fused add-norm kernels."""
    kernels = [n.kernel for n in graph.nodes if n.op is Op.KERNEL]
    emb = next((k for k in kernels if isinstance(k.geometry, EmbeddingGeometry)), None)
    if emb is not None and isinstance(emb.geometry, EmbeddingGeometry):
        width, dtype = emb.geometry.width, emb.dtype
    else:
        norms = [n.kernel for n in graph.nodes if n.op is Op.KERNEL and n.layer is None
                 and isinstance(n.kernel.geometry, NormGeometry)]
        if not norms or not isinstance(norms[-1].geometry, NormGeometry):
            raise PipelineError(f"{graph.name}: no embedding or final norm gives the hidden width a pipeline stage "
                                "sends; pipeline parallelism needs a decoder graph")
        width, dtype = norms[-1].geometry.width, norms[-1].dtype
    # a fused add + norm in the layers, on its own or among the kernels a generated kernel replaced (vLLM's compiled
    # mode, passes/fuse/vllm_inductor.py: the model's forward still hands the residual on)
    residual = any(n.layer is not None and n.op is Op.KERNEL and KernelKind.FUSED_ADD_RMS_NORM in
                   {n.kernel.kind, *(m.kind for m in n.kernel.merged)} for n in graph.nodes)
    return IntermediateTensors(("hidden_states", "residual") if residual else ("hidden_states",), width, dtype)


def hop_leaves(graph: Graph, split: PipelineSplit, stage: int) -> tuple[Leaf, ...]:
    """The kernels of the transfer into `stage` (> 0) from the stage before: per intermediate tensor, a send/recv
    of each TP rank's slice and, with tp > 1, the receiving stage's all-gather (see the module docstring)."""
    it = intermediate_tensors(graph)
    tp = split.tp
    group = PP_NETWORK_GROUP if split.crosses_nodes(stage - 1) else PP_GROUP
    elem = DType(it.dtype).bytes
    sliced = tp > 1 and it.width % tp == 0  # T × width divides by tp for every T: each rank sends its slice
    out: list[Leaf] = []
    for name in it.names:
        width = it.width // tp if sliced else it.width
        send = KernelAttrs(KernelKind.SEND_RECV, "send_recv", CollectiveGeometry(
            num_gpus=2, group=group, width=width, bytes_per_row=int(width * elem),
            reason=f"pp stage {stage - 1} -> {stage} {name}"), it.dtype, Rows.TOKENS, (), "pipeline.send_tensor_dict")
        out.append(Leaf(f"pp{stage - 1}to{stage}.{name}.send_recv", send))
        if sliced:
            gather = KernelAttrs(KernelKind.ALL_GATHER, "all_gather", CollectiveGeometry(
                num_gpus=tp, group="tp", width=it.width, bytes_per_row=int(it.width * elem),
                reason=f"pp recv {name} (send-allgather)"), it.dtype, Rows.TOKENS, (), "pipeline.recv_tensor_dict")
            out.append(Leaf(f"pp{stage - 1}to{stage}.{name}.all_gather", gather))
    return tuple(out)


def stage_trees(graph: Graph, split: PipelineSplit, dtypes: Dtypes | None = None,
                has_rows: HasRows | None = None, streams: StreamSettings | None = None,
                row_labels: RowLabels | None = None) -> list[Tree]:
    """One subtree per stage: its incoming transfer, then its rank's kernels (module docstring); a layer's leaves
    as `cost_tree.build_tree` makes them (MLA module rows with `has_rows`, shared-expert overlap with `streams`,
    a router inside its experts' rows with `row_labels`)."""
    if not graph.nodes or not all(n.op is Op.KERNEL for n in graph.nodes):
        raise GraphsimError("cost trees are built from fused graphs; run the fuse pass first "
                            "(e.g. graphsim passes MODEL -p 'fold,fuse{target=vllm}')")
    sched = graph.schedule
    if sched is None:
        raise PipelineError(f"{graph.name} has no layer schedule; pipeline parallelism splits the folded graph's "
                            "layers (run the fold pass first)")
    if sum(split.layers) != sched.num_layers:
        raise PipelineError(f"the split covers {sum(split.layers)} layers but {graph.name} has {sched.num_layers}")

    def leaf(n: Node) -> Leaf:
        return Leaf(n.name, n.kernel, n.layer)

    first_layer = next((i for i, m in enumerate(graph.nodes) if m.layer is not None), len(graph.nodes))
    before = tuple(leaf(n) for n in graph.nodes[:first_layer] if n.layer is None)
    after = tuple(leaf(n) for n in graph.nodes[first_layer:] if n.layer is None)
    rep_leaves = {}
    for tag, rep in sched.representative.items():
        nodes = [n for n in graph.nodes if n.layer == rep]
        rep_leaves[tag] = overlapped(nodes, layer_leaves(nodes, leaf, dtypes, has_rows, row_labels), streams)
    tp = split.tp
    trees: list[Tree] = []
    for s, (a, b) in enumerate(split.ranges):
        parts: list[Tree] = []
        if s == 0 and before:
            parts.append(Labeled("stage 0: before layers", Sum(before)))
        tags = sched.tags[a:b]
        for tag in dict.fromkeys(tags):
            n = tags.count(tag)
            parts.append(Labeled(f"stage {s}: {tag} ×{n}", Scale(n, Sum(rep_leaves[tag]))))
        if s == split.pp - 1 and after:
            parts.append(Labeled(f"stage {s}: after layers", Sum(after)))
        rank = Labeled(f"rank 0 of {tp} (TP ranks are identical)" if tp > 1 else "rank 0", Sum(tuple(parts)))
        body: list[Tree] = []
        if s > 0:
            where = "across nodes" if split.crosses_nodes(s - 1) else "inside a node"
            body.append(Labeled(f"stage {s}: {RECV} {s - 1} ({where})", Sum(hop_leaves(graph, split, s))))
        body.append(Max((rank,)))
        trees.append(Labeled(f"stage {s} of {split.pp} (layers {a}–{b - 1})", Sum(tuple(body))))
    return trees


def build_pipeline_tree(graph: Graph, split: PipelineSplit, dtypes: Dtypes | None = None,
                        has_rows: HasRows | None = None) -> Tree:
    """The iteration of one batch through every stage: the sum of the stage subtrees (`stage_trees`)."""
    stages = stage_trees(graph, split, dtypes, has_rows)
    return Labeled(f"iteration {graph.name} (pp {split.pp} × tp {split.tp})", Sum(tuple(stages)))


@dataclass(frozen=True, eq=False)
class PipelinedCostModel(CostModel):
    """A `CostModel` whose tree runs one batch through `split`'s stages; `stages` compiles each stage's subtree
    alone (what the simulator prices each stage with)."""

    split: PipelineSplit | None = None
    stages: tuple[CompiledTree, ...] = ()


def pp_of(cm: CostModel) -> int:
    """The pipeline-parallel size a cost model prices (1 for an unsplit one)."""
    return cm.split.pp if isinstance(cm, PipelinedCostModel) and cm.split is not None else 1


def with_pipeline(cm: CostModel, pp: int, partition: Sequence[int] | str | None = None) -> CostModel:
    """`cm` split into `pp` pipeline stages (itself when pp is 1 and no partition is given). The stages' TP size is
    the graph's; the nodes hops cross follow the cost model's hardware topology (GPUs per node)."""
    if pp == 1 and partition is None:
        return cm
    graph = cm.graph
    if graph.schedule is None:
        raise PipelineError(f"{graph.name} has no layer schedule to split into pipeline stages; run the fold pass")
    hw = cm.hardware
    split = PipelineSplit.of(graph.schedule.num_layers, pp, graph.meta.tp,
                             hw.topology().gpus_per_node if hw is not None else 0, partition)
    pricer = cm.pricer

    def has_rows(key: KernelKey) -> bool:
        return pricer.curve(key) is not None

    vllm = graph.meta.fuse_target == "vllm"
    # the shared-expert stream overlap the unsplit tree has (costing/cost_model.py: vLLM's defaults on a CUDA GPU)
    streams = StreamSettings(cuda=hw is not None and hw.kind is DeviceKind.GPU and bool(hw.compute_capability)) \
        if vllm and cm.streams else None
    subtrees = stage_trees(graph, split, cm.dtypes, has_rows if vllm else None, streams, pricer_row_labels(pricer))
    tree = compile_tree(Labeled(f"iteration {graph.name} (pp {split.pp} × tp {split.tp}: one batch through every "
                                "stage)", Sum(tuple(subtrees))))
    base = {f.name: getattr(cm, f.name) for f in fields(CostModel)}
    base["tree"] = tree
    return PipelinedCostModel(**base, split=split, stages=tuple(compile_tree(t) for t in subtrees))


@dataclass(frozen=True)
class StageTime:
    """One stage's time for one batch: its incoming transfer and the whole stage (transfer included), µs."""

    stage: int
    layers: tuple[int, int]  # [first, one past the last)
    recv_us: float | None  # 0 for the first stage; None where a leaf is missing
    time_us: float | None
    source: str


@dataclass(frozen=True)
class PipelineTimes:
    """A batch through the pipeline: its latency (the sum of the stages) and the interval at which full batches can
    follow each other when pp are in flight (the slowest stage, its transfer in: the stage's GPU waits in
    `recv_tensor_dict`)."""

    spec: str
    stages: tuple[StageTime, ...]

    @property
    def latency_us(self) -> float | None:
        t = [s.time_us for s in self.stages]
        return None if any(x is None for x in t) else sum(x for x in t if x is not None)

    @property
    def interval_us(self) -> float | None:
        t = [s.time_us for s in self.stages]
        return None if any(x is None for x in t) else max(x for x in t if x is not None)

    def to_json(self) -> dict[str, object]:
        return {"batch": self.spec, "latency_us": self.latency_us, "interval_us": self.interval_us,
                "stages": [{"stage": s.stage, "layers": list(s.layers), "recv_us": s.recv_us, "time_us": s.time_us,
                            "source": s.source} for s in self.stages]}


def stage_times(cm: CostModel, steps: list[Step], specs: list[str]) -> list[PipelineTimes]:
    """Each stage of a pipelined cost model priced alone for `steps` (one entry per step); [] for an unsplit one."""
    if not isinstance(cm, PipelinedCostModel) or cm.split is None:
        return []
    from graphsim.costing.interpolate import SOURCES

    per_stage = []
    for s, tree in enumerate(cm.stages):
        ev = tree.evaluate(steps, cm.pricer, cm.dtypes)
        recv = [i for i, lab in enumerate(tree.labels) if lab.startswith(f"stage {s}: {RECV}")]
        per_stage.append((ev.total_us(), ev.node_time_us[recv[0]] if recv else np.zeros(len(steps)),
                          [SOURCES[int(ev.node_source[tree.root, b])].value for b in range(len(steps))]))

    def num(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    return [PipelineTimes(spec, tuple(StageTime(s, r, num(rc[b]), num(t[b]), src[b]) for s, (r, (t, rc, src))
                                      in enumerate(zip(cm.split.ranges, per_stage, strict=True))))
            for b, spec in enumerate(specs)]

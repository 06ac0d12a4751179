"""`CostModel`: one deployment's pricing — the kernel graph after passes, its compiled cost tree, the pricer
(profile.db rows, the hardware spec for the roofline) and the dtypes it prices with.

Build one with `graphsim.cost_model.build_cost_model` (model → import → passes → this); every command, the
simulator, search, alignment, the analyzer and the profiler use that one recipe. This module holds only the
costing half — `CostModel.of_kernel_graph` compiles an already fused graph — so it imports without torch and
without the importers or passes (DESIGN §3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from graphsim.costing import moe_routing
from graphsim.costing.collectives import CollectiveSettings
from graphsim.costing.composite import composite_note, graph_mla_blocks
from graphsim.costing.cost_tree import CompiledTree, Evaluation, build_tree, compile_tree
from graphsim.costing.hardware import DeviceKind, HardwareSpec
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import KernelKey, MoeRouting
from graphsim.costing.moe_routing import MoeRoutingError, RoutingModel
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.routing_in_rows import pricer_row_labels, routers_in_expert_rows
from graphsim.costing.streams import StreamSettings
from graphsim.ir import Graph, Op
from graphsim.ir.geometry import MoeExpertsGeometry
from graphsim.workload import Step


@dataclass(frozen=True, eq=False)
class CostModel:
    """A fused (and partitioned) kernel graph, compiled and ready to price steps."""

    graph: Graph  # the kernel graph after passes
    tree: CompiledTree  # compiled once from `graph`
    pricer: KernelPricer  # profile.db lookup → interpolation → derived (row-less memory-bound) → roofline fallback
    dtypes: Dtypes  # activation / KV dtypes the kernels are priced with
    hardware: HardwareSpec | None  # the spec the roofline uses (given, or named by the profile's meta); None: none
    profile: str | None  # path of the profile.db priced from (None: no measured rows)
    data_note: str  # a plain statement of what the numbers rest on
    tp: int  # tensor-parallel size of the graph (its meta)
    ep: int  # expert-parallel size of the graph (its meta)
    target: str  # fuse target the graph was fused for ('' when unknown)
    pipeline: str  # the passes this model's builder ran ('' when it was handed a finished kernel graph)
    dtype: str | None  # model dtype override asked for (None: the checkpoint's)
    kv_dtype: str | None  # KV-cache dtype asked for (None: the model dtype)
    moe_routing: str = ""  # the MoE routing model priced with, stated ('' when the graph has no routed experts)
    streams: str = ""  # the concurrent streams the tree overlaps, stated ('' when it overlaps none)
    stream_settings: StreamSettings | None = None  # the settings the tree was built with (None: not a vLLM graph)

    @classmethod
    def of_kernel_graph(cls, graph: Graph, hardware: HardwareSpec | None = None, db: ProfileDB | None = None, *,
                        kv_dtype: str | None = None, dtype: str | None = None, data_note: str = "",
                        pipeline: str = "", routing: RoutingModel | None = None,
                        collectives: CollectiveSettings | None = None,
                        streams: StreamSettings | None = None) -> CostModel:
        """Compile a fused kernel graph's cost tree and pair it with a pricer for `db` and `hardware` (with no
        `hardware`, the spec the db's meta names, if any). `routing`: the MoE routing model (None: the default,
        `moe_routing.DEFAULT`). `collectives`: the engine settings that pick a collective's implementation
        (`costing.collectives`; None: vLLM's defaults). `streams`: vLLM's shared-expert stream settings
        (`costing.streams`; None: vLLM's defaults, on CUDA GPUs only); only a graph fused for vLLM overlaps."""
        pricer = KernelPricer(db, hardware, collectives or CollectiveSettings())
        routing, routing_note = _routing_with_rows(graph, routing or moe_routing.DEFAULT, pricer,
                                                   Dtypes.for_graph(graph.meta, kv_dtype, hardware=pricer.hardware))
        dtypes = Dtypes.for_graph(graph.meta, kv_dtype, routing, pricer.hardware)
        # an MLA block the profile has whole-module rows for is priced by them (costing/composite.py); the rows
        # time vLLM's module, so only a graph fused for vLLM's kernels is priced with them
        vllm = graph.meta.fuse_target == "vllm"

        def has_rows(key: KernelKey) -> bool:
            return pricer.curve(key) is not None

        hw = pricer.hardware
        if streams is None:
            streams = StreamSettings(cuda=hw is not None and hw.kind is DeviceKind.GPU and bool(hw.compute_capability))
        # a router whose experts' rows were timed from the router logits is in them (costing/routing_in_rows.py):
        # decided by the rows' collector label, for any engine's graph
        row_labels = pricer_row_labels(pricer)
        tree = compile_tree(build_tree(graph, dtypes, has_rows if vllm else None, streams if vllm else None,
                                       row_labels))
        note = composite_note(graph_mla_blocks(graph, dtypes, has_rows), dtypes) if vllm else ""
        if row_labels is not None and routers_in_expert_rows(list(graph.nodes), dtypes, row_labels):  # the tree drops
            more = ("MoE router top-k priced inside the experts' rows (their collector timed the MoE from router "
                    "logits: costing/routing_in_rows.py)")
            note = f"{note}; {more}" if note else more
        data_note = f"{data_note}; {note}" if data_note and note else data_note or note
        return cls(graph, tree, pricer, dtypes, pricer.hardware,
                   str(db.path) if db is not None else None, data_note, graph.meta.tp,
                   graph.meta.ep, graph.meta.fuse_target, pipeline, dtype, kv_dtype, routing_note,
                   streams.describe() if vllm and tree.overlaps else "", streams if vllm else None)

    @property
    def db(self) -> ProfileDB | None:
        return self.pricer.db

    @property
    def kernels(self) -> int:
        """Leaves of the cost tree (distinct kernel launches of one rank's iteration, before layer scaling)."""
        return len(self.tree.leaves)

    def evaluate(self, steps: list[Step]) -> Evaluation:
        """Price `steps` (one column per step) on the compiled tree."""
        return self.tree.evaluate(steps, self.pricer, self.dtypes)

    def roofline_sum_us(self, steps: list[Step]) -> np.ndarray:
        """Per step, the sum of every kernel's roofline floor (`roofline_us` at its own dtype, collectives on
        their link, × the layers each stands for): the plausibility yardstick a priced step is held to (issue 16:
        at most 3 × this). Kernels the spec cannot price at a roofline add nothing."""
        from graphsim.costing.roofline import roofline_us

        hw = self.pricer.hardware
        out = np.zeros(len(steps))
        if hw is None:
            return out
        for i, rows in enumerate(self.evaluate(steps).rows):
            for part in rows.parts:
                t = roofline_us(hw, part.key, part.coords)
                if t is not None:
                    out += np.bincount(part.step, weights=t, minlength=len(steps)) * float(self.tree.multiplicity[i])
        return out


def _routing_with_rows(graph: Graph, routing: RoutingModel, pricer: KernelPricer, dt: Dtypes) -> tuple[RoutingModel, str]:
    """The routing model to price with and its statement ('' for a graph without routed experts). A power-law
    model whose rows the profile lacks for a MoE geometry that has balanced rows falls back to balanced, and
    the statement says so."""
    moe = [n.kernel for n in graph.nodes if n.op is Op.KERNEL and isinstance(n.kernel.geometry, MoeExpertsGeometry)]
    if not moe:
        return routing, ""
    experts = {a.geometry.num_experts for a in moe if isinstance(a.geometry, MoeExpertsGeometry)}
    if routing.corpus and experts != {routing.experts}:
        raise MoeRoutingError(f"MoE routing corpus {routing.corpus} counts tokens for {routing.experts} experts per layer "
                              f"but the model routes over {', '.join(map(str, sorted(experts)))}; use a corpus captured "
                              "from this model")
    if routing.table is not MoeRouting.BALANCED and pricer.db is not None:
        lacking = [a for a in moe if pricer.curve(key_for(a, replace(dt, routing=routing))) is None
                   and pricer.curve(key_for(a, replace(dt, routing=moe_routing.BALANCED))) is not None]
        if lacking:
            return moe_routing.BALANCED, (f"{moe_routing.BALANCED.describe()} — {routing.spec} asked for, but the profile has "
                                      f"no {routing.table.value} rows for {lacking[0].name} "
                                      f"{lacking[0].geometry.as_dict()}")
    if pricer.db is None:
        return routing, f"{routing.describe()}; without a profile the MoE roofline spreads tokens evenly"
    return routing, routing.describe()

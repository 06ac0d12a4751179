"""Glue for `graphsim analyze`: the importer, passes and costing on one side, the torch-free
analyzer (`graphsim.work.analyzer`) on the other, joined by plain `Site` records.

`prepare_model` (model → `graphsim.cost_model.build_cost_model`), `prepare_graph` (a fused kernel graph) and
`prepare_cost_model` (a built `CostModel`) price one batch on a deployment and compute the accountant's rows;
`analyze_prepared` picks the location map and analyses; `analyze_model` does both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Op
from graphsim.work.analyzer import (
    Analysis, Deployment, RowSet, Site, UnsupportedDeployment, analyze, draft_map, load_map, necessary_rows, select_map,
    shipped_maps, unsupported,
)
from graphsim.work.analyzer.derived import derived_choice
from graphsim.workload import parse_batch_spec

if TYPE_CHECKING:
    from graphsim.costing.cost_model import CostModel


def pipeline_for(target: str, tp: int, ep: int) -> str:
    """`graphsim.cost_model.pipeline_for`: the passes `prepare_model` runs."""
    from graphsim.cost_model import pipeline_for as pipeline

    return pipeline(target, tp, ep)


def gpus_for(tp: int, ep: int) -> int:
    """Ranks of the deployment. vLLM runs expert parallelism over the tensor-parallel group, so
    `ep` is 1 or equal to `tp`."""
    if tp < 1 or ep < 1:
        raise GraphsimError(f"--tp and --ep must be >= 1 (got tp={tp}, ep={ep})")
    if ep not in (1, tp):
        raise GraphsimError(f"analyze supports --ep 1 or --ep equal to --tp (experts spread over the tensor-parallel "
                            f"ranks, as vLLM does); got tp={tp}, ep={ep}")
    return tp


@dataclass
class Prepared:
    """A priced deployment and the accountant's rows for the same batch (None, with `reason`, when
    the accountant cannot account the model or the fold disagrees with it)."""

    deployment: Deployment
    sites: list[Site]
    rows: RowSet | None
    fuse_target: str
    reason: str = ""


def prepare_graph(graph: Graph, config: dict[str, Any], hardware, batch: str, *, db=None, data_note: str = "",
                  model: str = "", kv_dtype: str | None = None, dtype: str | None = None) -> Prepared:
    """Price `batch` on a fused (and partitioned) kernel graph and account the same step from `config`."""
    from graphsim.costing.cost_model import CostModel

    if not any(n.op is Op.KERNEL for n in graph.nodes):
        raise GraphsimError("analyze needs a fused kernel graph; run the fold and fuse passes first")
    cm = CostModel.of_kernel_graph(graph, hardware, db, kv_dtype=kv_dtype, dtype=dtype, data_note=data_note)
    return prepare_cost_model(cm, config, batch, model=model)


def prepare_cost_model(cm: CostModel, config: dict[str, Any], batch: str, *, model: str = "") -> Prepared:
    """Price `batch` on a cost model (`graphsim.cost_model.build_cost_model`) and account the same step from
    `config` with the cost model's dtype and KV dtype."""
    from graphsim.analysis.sites import read_sites
    from graphsim.work import accounting

    step = parse_batch_spec(batch)
    graph, tp, ep, hardware = cm.graph, cm.tp, cm.ep, cm.hardware
    gpus = gpus_for(tp, ep)
    if hardware is None:
        raise GraphsimError("analyze needs a hardware spec (--gpu)")
    ev = cm.evaluate([step])
    total = float(ev.total_us()[0])
    sites = read_sites(graph, cm.tree, ev, step, cm.dtypes, hardware)
    dep = Deployment(
        model=model or graph.name, architecture=graph.meta.architecture,
        hardware=f"{hardware.id} ({hardware.name})", data_note=cm.data_note, tp=tp, ep=ep, gpus=gpus, batch=batch,
        step=step, memory_bandwidth_bytes_per_s=hardware.memory_bandwidth_bytes_per_s,
        iteration_us=None if math.isnan(total) else total, iteration_source=ev.total_source(0).value,
        dtype=cm.dtype, kv_dtype=cm.kv_dtype)
    target = cm.target
    try:
        acc = accounting(config, dtype=cm.dtype, kv_dtype=cm.kv_dtype)
        if graph.schedule is None:
            raise UnsupportedDeployment("the graph has no layer schedule; run the fold pass")
        rows = necessary_rows(acc, step, graph.schedule.tags)
    except GraphsimError as e:  # the accountant does not know the model, or the fold disagrees with it
        return Prepared(dep, sites, None, target, str(e))
    return Prepared(dep, sites, rows, target)


def prepare_model(model: str, *, gpu: str = "h200", tp: int = 1, ep: int = 1, batch: str = "decode:64x2048",
                  profile: str | None = None, kv_dtype: str | None = None, dtype: str | None = None,
                  target: str = "vllm", graph: Graph | None = None, compiled: bool = True) -> Prepared:
    """Trace `model` (catalog name, HF id, config.json or model dir), fuse and partition it, price `batch`.
    `graph` reuses an already imported (unfused) graph of the same model. `compiled`: vLLM's default compiled mode
    (the inductor pass, as `graphsim predict` prices it); False: the custom-op kernels (`--enforce-eager`)."""
    from graphsim.catalog import resolve_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.hardware import load_hardware

    gpus_for(tp, ep)
    parse_batch_spec(batch)
    hw = load_hardware(gpu)
    resolved = resolve_model(model)
    cm = build_cost_model(graph if graph is not None else resolved, hw, tp=tp, ep=ep, dtype=dtype, kv_dtype=kv_dtype,
                          profile=profile, target=target, compiled=compiled)
    return prepare_cost_model(cm, resolved.config, batch, model=model)


def analyze_prepared(p: Prepared, map_paths: list[str | Path] | None = None) -> Analysis:
    """Choose the location map (the shipped ones, or `map_paths`) and analyse; unsupported when none fits."""
    if p.rows is None:
        return unsupported(p.deployment, f"necessary work unavailable: {p.reason}")
    maps = [load_map(m) for m in map_paths] if map_paths else shipped_maps()
    choice = select_map(maps, p.sites, p.rows, p.fuse_target)
    if not choice.ok and not map_paths:  # no shipped map fits: the one derived from kernel order and kind
        choice = derived_choice(choice, p.sites, p.rows, p.fuse_target)
    return analyze(p.deployment, p.sites, p.rows, choice)


def analyze_model(model: str, *, map_paths: list[str | Path] | None = None, **kw: Any) -> Analysis:
    """`prepare_model` + `analyze_prepared`: the library form of `graphsim analyze`."""
    return analyze_prepared(prepare_model(model, **kw), map_paths)


def write_draft_map(p: Prepared, path: str | Path, map_id: str = "new-family") -> None:
    """Write a skeleton location map of this deployment (see `work.analyzer.maps.draft_map`)."""
    if p.rows is None:
        raise GraphsimError(f"cannot draft a location map: {p.reason}")
    from graphsim.atomic import atomic_writer

    with atomic_writer(path) as f:  # whole or not at all; a failed write is one line naming the path
        f.write(json.dumps(draft_map(p.sites, p.rows, p.fuse_target, map_id), indent=1) + "\n")

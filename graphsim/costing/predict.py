"""Prediction reports: price explicit batches on a cost tree and say where every number comes from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import CompiledTree, Evaluation, NodeKind
from graphsim.costing.derived import rowless_note
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import SOURCES
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.row_checks import check_rows
from graphsim.errors import GraphsimError
from graphsim.workload import Step


def profile_home() -> Path:
    """Where graphsim keeps profile databases by default ($GRAPHSIM_HOME/profiles)."""
    base = os.environ.get("GRAPHSIM_HOME")
    return (Path(base) if base else Path.home() / ".cache" / "graphsim") / "profiles"


def default_profile_path(hardware_id: str, engine: str = "vllm") -> Path:
    return profile_home() / f"{hardware_id}_{engine}.db"


@dataclass
class KernelRow:
    node: str
    region: str
    kind: str
    kernel: str
    count: int  # instances per iteration (layers in its region)
    time_us: float | None  # per instance; None when missing
    total_us: float | None
    share: float | None
    source: str
    flops: float  # per iteration (all instances)
    bytes: float
    approximate: bool
    note: str = ""  # how the kernel's rows were chosen (a collective: the implementation vLLM runs and its rows)

    @property
    def tflops_per_s(self) -> float | None:
        return self.flops / self.total_us / 1e6 if self.total_us else None

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / self.total_us / 1e3 if self.total_us else None


@dataclass
class BatchReport:
    spec: str
    tokens: int
    sequences: int
    total_us: float | None  # None when any leaf is missing
    known_us: float  # sum of the leaves that have times (more than total_us where streams overlap: `overlaps`)
    source: str
    rows: list[KernelRow]
    regions: list[dict[str, Any]]
    tally: dict[str, int] = field(default_factory=dict)  # source → kernel count
    missing: list[str] = field(default_factory=list)
    overlaps: list[dict[str, Any]] = field(default_factory=list)  # per overlap of concurrent streams: what it hides


@dataclass
class Prediction:
    model: str
    hardware: str
    profile: str | None
    data_note: str
    tp: int
    ep: int
    batches: list[BatchReport]
    moe_routing: str = ""  # the MoE routing model the routed experts were priced with ('' without routed experts)
    interconnect: str = ""  # the topology collectives were priced on ('' without a hardware spec)
    streams: str = ""  # the concurrent streams overlapped ('' when none: every kernel adds)

    def to_json(self) -> dict[str, Any]:
        def row(r: KernelRow) -> dict[str, Any]:
            d = dict(vars(r))
            d["tflops_per_s"] = r.tflops_per_s
            d["gb_per_s"] = r.gb_per_s
            return d

        return {
            "model": self.model, "hardware": self.hardware, "profile": self.profile, "data": self.data_note,
            "tp": self.tp, "ep": self.ep, "moe_routing": self.moe_routing or None,
            "interconnect": self.interconnect or None, "streams": self.streams or None,
            "batches": [dict({k: v for k, v in vars(b).items() if k != "rows"}, kernels=[row(r) for r in b.rows])
                        for b in self.batches],
        }

    def to_pandas(self) -> Any:
        """One row per kernel per batch (the batch spec, then `KernelRow`'s fields with TFLOP/s and GB/s) as a
        pandas DataFrame; needs pandas."""
        try:
            import pandas as pd
        except ModuleNotFoundError:
            raise GraphsimError("to_pandas() needs pandas (pip install pandas)") from None
        return pd.DataFrame([{"batch": b.spec, **vars(r), "tflops_per_s": r.tflops_per_s, "gb_per_s": r.gb_per_s}
                             for b in self.batches for r in b.rows])

    def __repr__(self) -> str:  # one line per batch, not every kernel
        note = self.data_note.splitlines()[0] if self.data_note else "no data note"
        lines = [f"Prediction({self.model} on {self.hardware}, tp {self.tp}, ep {self.ep}; {note})"]
        for b in self.batches:
            t = f"{b.total_us:,.1f} µs" if b.total_us is not None else f"missing ({len(b.missing)} kernel(s) without a time)"
            lines.append(f"  {b.spec}: {t}, worst source {b.source}, {len(b.rows)} kernels")
        return "\n".join(lines)


def _regions(c: CompiledTree) -> dict[int, str]:
    """leaf index → label of the innermost Labeled ancestor."""
    out: dict[int, str] = {}

    def walk(i: int, label: str) -> None:
        if c.kinds[i] is NodeKind.LABELED:
            label = c.labels[i]
        if c.leaf_of[i] >= 0:
            out[c.leaf_of[i]] = label
        for ch in c.children[i]:
            walk(ch, label)

    walk(c.root, "")
    return out


def predict(cm: CostModel, steps: list[Step], specs: list[str]) -> Prediction:
    """Price `steps` (labelled `specs`) on a cost model (`graphsim.cost_model.build_cost_model`)."""
    tree, dtypes = cm.tree, cm.dtypes
    ev = cm.evaluate(steps)
    regions = _regions(tree)
    batches = [_batch_report(tree, ev, b, spec, regions, dtypes) for b, spec in enumerate(specs)]
    return Prediction(cm.graph.name, cm.hardware.id if cm.hardware else "none", cm.profile, _checked_note(cm), cm.tp,
                      cm.ep, batches, cm.moe_routing, cm.hardware.topology().describe() if cm.hardware else "",
                      cm.streams)


def _checked_note(cm: CostModel) -> str:
    """The cost model's data note, plus what `row_checks` finds when it finds anything: the profile's noisy
    rows, and the rows this prediction read that are far slower than their roofline."""
    db, spec = cm.pricer.db, cm.pricer.hardware
    if db is None:
        return cm.data_note
    rates = cm.pricer.rates
    floor, keys = rates.floor_us if rates is not None else 0.0, list(db.keys_read())
    # kept on disk until the profile file or the checking code changes (costing/disk_memo.py)
    from graphsim.costing import profile_db, roofline, row_checks
    from graphsim.costing.disk_memo import memo

    spec_key = None if spec is None else (spec.id, spec.memory_bandwidth_bytes_per_s,
                                          sorted((str(k), v) for k, v in spec.peak_flops_per_s.items()))
    checks = memo("row_checks", db.path, (spec_key, floor, sorted(str(k) for k in keys)),
                  lambda: check_rows(db, spec, floor, keys=keys), row_checks.RowChecks,
                  code=[row_checks.__file__, roofline.__file__, profile_db.__file__])
    assert checks is not None  # check_rows always returns a RowChecks
    return cm.data_note if checks.clean else f"{cm.data_note}; profile rows: {checks.describe()}"


def _batch_report(tree: CompiledTree, ev: Evaluation, b: int, spec: str, regions: dict[int, str],
                  dtypes: Dtypes) -> BatchReport:
    step = ev.steps[b]
    t_leaf = ev.leaf_time_us[:, b] * tree.multiplicity
    known = float(np.nansum(t_leaf))
    total = float(ev.total_us()[b])
    total_v = None if np.isnan(total) else total
    rows: list[KernelRow] = []
    tally: dict[str, int] = {}
    missing: list[str] = []
    leaf_flops, leaf_bytes = ev.leaf_work()
    for i, leaf in enumerate(tree.leaves):
        src = SOURCES[int(ev.leaf_source[i, b])].value
        count = int(tree.multiplicity[i])
        tally[src] = tally.get(src, 0) + 1
        flops, bytes_ = float(leaf_flops[i, b]), float(leaf_bytes[i, b])
        per = ev.leaf_time_us[i, b]
        tot = None if np.isnan(per) else float(per) * count
        if tot is None:
            missing.append(f"{leaf.name} ({leaf.attrs.kind.value} {leaf.attrs.name} {leaf.attrs.geometry.as_dict()})")
        rows.append(KernelRow(leaf.name, regions.get(i, ""), leaf.attrs.kind.value, leaf.attrs.name, count,
                              None if np.isnan(per) else float(per), tot,
                              tot / known if (tot is not None and known > 0) else None, src, flops * count,
                              bytes_ * count, leaf.attrs.approximate, ev.rows[i].note(b) if ev.rows else ""))
    reg: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = reg.setdefault(r.region, {"region": r.region, "total_us": 0.0, "kernels": 0, "sources": set()})
        d["total_us"] += r.total_us or 0.0
        d["kernels"] += 1
        d["sources"].add(r.source)
    region_list = [dict(v, sources=sorted(v["sources"])) for v in reg.values()]
    hidden = ev.hidden_us()[:, b]
    overlaps = [{"overlap": tree.labels[node], "region": _node_region(tree, node),
                 "hidden_us": None if np.isnan(h) else float(h)}
                for node, h in zip(tree.overlaps, hidden, strict=True)]
    return BatchReport(spec, step.tokens, step.sequences, total_v, known, ev.total_source(b).value, rows,
                       region_list, tally, missing, overlaps)


def _node_region(c: CompiledTree, node: int) -> str:
    """The label of the innermost Labeled ancestor of `node`."""
    parent = {ch: i for i, kids in enumerate(c.children) for ch in kids}
    while node in parent:
        node = parent[node]
        if c.kinds[node] is NodeKind.LABELED:
            return c.labels[node]
    return ""


def default_data(hardware: HardwareSpec) -> tuple[ProfileDB | None, str]:
    """The default profile.db of `hardware` when it exists, and a plain statement of what the numbers rest on
    (an explicit profile is opened by `graphsim.cost_model.profile_data`)."""
    default = default_profile_path(hardware.id)
    if not default.exists():  # measured by default: built once from aiconfigurator-core when it has the GPU
        from graphsim.costing.auto_profile import auto_build

        auto_build(hardware.id, default)
    if default.is_file():
        from graphsim.costing.auto_profile import warn_if_stale

        db = ProfileDB.open(default)
        warn_if_stale(str(default), db.meta.provenance)
        return db, f"measured rows from {default}; {rowless_note(db, hardware)}"
    return None, (f"no measured data for {hardware.id}: every time is a roofline estimate from the {hardware.name} "
                  f"spec. Import measurements with `graphsim profiles import-aiconfigurator --system {hardware.id} "
                  f"--backend vllm -o {default}`")

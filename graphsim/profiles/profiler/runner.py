"""Run the profiler: model → fused kernel graph → distinct keys → timed grid points → profile.db.

    report = profile_model("llama-3.1-8b", "l8.db", device="cpu", quick=True)

Rows are written in transactions of `flush_every` points, so an interrupted run keeps what it
measured; a rerun on the same file skips every point that already has a row (`ProfileDB.missing`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphsim.catalog import ResolvedModel
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import KernelKey, Measurement, Point, point_coords
from graphsim.costing.profile_db import ProfileDB, ProfileMeta, TimeStatistic
from graphsim.errors import GraphsimError
from graphsim.ir import Graph
from graphsim.profiles.profiler.benches import make_bench
from graphsim.profiles.profiler.device import DeviceInfo, Unmeasurable, open_device
from graphsim.profiles.profiler.grid import Grid, points_for_key
from graphsim.profiles.profiler.targets import KernelTarget, attention_phases, collect_targets, parse_kinds
from graphsim.profiles.profiler.timer import SPREAD_LIMIT, TimingOptions, make_timer, summarise, time_steady

ENGINE = "torch"  # every row is a torch op timed on the device; the fuse target only picks which ones
Progress = Callable[[str, int, int], None]  # (what is being measured, points done, points to do)


@dataclass
class KeyReport:
    table: str
    key: str
    kernel: str  # the implementation timed ('' when unmeasurable)
    nodes: int  # kernel nodes of the graph behind this key
    points: int  # grid points for this key
    existing: int  # already in the db (skipped)
    written: int
    failed: int  # points that could not run here (e.g. over the memory budget)
    unmeasurable: str = ""  # why no point of this key can be timed here


@dataclass
class ProfileReport:
    db_path: str
    model: str
    device: str
    threads: int
    target: str
    pipeline: str
    torch_version: str
    rows_written: int = 0
    rows_skipped_existing: int = 0
    points_failed: int = 0
    keys: list[KeyReport] = field(default_factory=list)
    unmeasurable: list[dict[str, Any]] = field(default_factory=list)  # kernel, reason, nodes
    failures: list[dict[str, Any]] = field(default_factory=list)  # key, reason, points, first point
    retimed: int = 0  # points timed again because their spread was above timer.SPREAD_LIMIT
    noisy: list[dict[str, Any]] = field(default_factory=list)  # key, point, spread: still above it, stored anyway
    notes: list[str] = field(default_factory=list)
    stopped_early: bool = False
    elapsed_s: float = 0.0

    @property
    def keys_measured(self) -> int:
        return sum(1 for k in self.keys if not k.unmeasurable)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["keys_measured"] = self.keys_measured
        return d


def pipeline_for(target: str, tp: int) -> str:
    """The profiler's pipeline, recorded in the db's provenance: it names the TP size even when it is 1
    (`tp{size=1}` changes nothing but the graph's meta)."""
    return f"fold,fuse{{target={target}}},tp{{size={tp}}}"


def default_target(device: str) -> str:
    return "vllm" if device.strip().lower().startswith("cuda") else "eager"


def profile_model(model: str | ResolvedModel, out: str | os.PathLike[str], *, device: str = "cpu", tp: int = 1,
                  target: str | None = None, kinds: str | None = None, dtype: str | None = None,
                  kv_dtype: str | None = None, grid: Grid | None = None, quick: bool = False,
                  max_m: int | None = None, max_kv: int | None = None, timing: TimingOptions | None = None,
                  threads: int | None = None, max_points: int | None = None, overwrite: bool = False,
                  flush_every: int = 16, progress: Progress | None = None,
                  on_graph: Callable[[str], None] | None = None) -> ProfileReport:
    """Import `model`, fuse it for `target` (default: eager on cpu, vllm on cuda), shard for `tp`,
    and measure every distinct kernel key over the grid into the profile.db at `out`.

    `kinds`: comma-separated kernel kinds to measure (KernelKind values, or moe, norm, collective,
    attention_prefill, attention_decode). `grid`: explicit grid (default `Grid.full()`, or
    `Grid.quick()` with `quick`); `max_m` / `max_kv` trim it. `max_points` stops after that many
    new rows (the rest is measured by a rerun). `on_graph(stage)` reports import / pass stages."""
    wanted = parse_kinds(kinds)  # bad options fail before any work
    prefill, decode = attention_phases(kinds)
    if tp < 1:
        raise GraphsimError(f"--tp must be >= 1, got {tp}")
    target = target or default_target(device)
    if target not in ("eager", "vllm"):
        raise GraphsimError(f"unknown fuse target '{target}'; use eager or vllm")
    info = open_device(device, threads)
    grid = grid or (Grid.quick() if quick else Grid.full())
    if max_m is not None or max_kv is not None:
        grid = grid.trimmed(max_m=max_m, max_tokens=max_m, max_moe_tokens=max_m, max_kv=max_kv)
    timing = timing or (TimingOptions.quick() if quick else TimingOptions())

    from graphsim.cost_model import build_cost_model

    pipeline = pipeline_for(target, tp)
    try:  # no hardware spec and no profile.db: only the kernel graph and its dtypes are used
        cm = build_cost_model(model, None, tp=tp, dtype=dtype, kv_dtype=kv_dtype, default_profile=False,
                              target=target, pipeline=pipeline, on_stage=on_graph)
    except GraphsimError as e:
        if target == "eager" and tp > 1:
            raise GraphsimError(f"{e} (the eager target is not built for tensor parallelism; "
                                "profile --tp with --target vllm)") from None
        raise
    return profile_graph(cm.graph, out, info, grid=grid, timing=timing, kinds=wanted, prefill=prefill, decode=decode,
                         kv_dtype=kv_dtype, target=target, pipeline=pipeline, max_points=max_points,
                         overwrite=overwrite, flush_every=flush_every, progress=progress)


def _hardware_id(device_name: str) -> str:
    """The shipped hardware spec a CUDA device name matches (e.g. 'NVIDIA H200' → h200_sxm), else ''."""
    from graphsim.costing.errors import HardwareSpecError
    from graphsim.costing.hardware import load_hardware

    for token in device_name.lower().replace("-", " ").split():
        if token in ("nvidia", "cpu:"):
            continue
        try:
            return load_hardware(token).id
        except HardwareSpecError:
            continue
    return ""


def _meta(info: DeviceInfo, target: str, pipeline: str, graph: Graph, grid: Grid, timing: TimingOptions) -> ProfileMeta:
    prov = {
        "profiler": "graphsim.profiles.profiler",
        "threads": str(info.threads),
        "device_type": info.device.type,
        "fuse_target": target,
        "pipeline": pipeline,
        "model": graph.meta.model or graph.name,
        "timing": f"median of >= {timing.min_samples} samples and >= {timing.min_time_s * 1e3:g} ms "
                  f"(>= {timing.floor_samples} samples for calls over {timing.max_time_s:g} s in total), "
                  f"{'CUDA events, L2 flushed' if info.is_cuda else 'time.perf_counter'}",
        "grid_max": f"m<={max(grid.gemm_m, default=0)} tokens<={max(grid.tokens, default=0)} "
                    f"prefill q<={max(grid.prefill_q, default=0)} kv<={grid.prefill_max_kv} "
                    f"decode batch<={max(grid.decode_batch, default=0)} kv<={max(grid.decode_kv, default=0)}",
    }
    if info.is_cuda:
        prov["cuda_version"] = str(torch.version.cuda)
    return ProfileMeta(device=info.name, hardware=_hardware_id(info.name) if info.is_cuda else "", engine=ENGINE,
                       engine_version=torch.__version__, torch_version=torch.__version__,
                       time_statistic=TimeStatistic.MEDIAN, provenance=prov)


def _check_resume(path: Path, info: DeviceInfo, overwrite: bool) -> None:
    if overwrite or not path.is_file() or path.stat().st_size == 0:
        return
    with ProfileDB.open(path) as old:
        threads = old.meta.provenance.get("threads")
        if old.meta.device == info.name and threads and threads != str(info.threads) and not info.is_cuda:
            raise GraphsimError(f"'{path}' was measured with {threads} threads, not {info.threads}; pass "
                                f"--threads {threads} to resume it, or write to another file")


def profile_graph(graph: Graph, out: str | os.PathLike[str], info: DeviceInfo, *, grid: Grid,
                  timing: TimingOptions | None = None, kinds: set[str] | None = None, prefill: bool = True,
                  decode: bool = True, kv_dtype: str | None = None, target: str = "", pipeline: str = "",
                  max_points: int | None = None, overwrite: bool = False, flush_every: int = 16,
                  progress: Progress | None = None) -> ProfileReport:
    """Measure the distinct keys of a fused (and partitioned) kernel graph into `out`."""
    t_start = time.perf_counter()
    timing = timing or TimingOptions()
    dtypes = Dtypes.for_graph(graph.meta, kv_dtype)
    targets, skipped = collect_targets(graph, dtypes, kinds=kinds, prefill=prefill, decode=decode, devices=info.count)
    report = ProfileReport(str(out), graph.meta.model or graph.name, info.name, info.threads, target,
                           pipeline, torch.__version__)
    for s in skipped:
        report.unmeasurable.append({"kernel": s.kernel, "reason": s.reason, "nodes": s.nodes})
    if any(s.reason.startswith("collectives need") for s in skipped):
        report.notes.append(f"collectives skipped: {info.count} {info.device.type} device(s) here")
    for t in targets:
        for conflict in t.geometry_conflicts():
            report.notes.append(f"{t.describe()} is shared by kernels that differ in {conflict}; measured with "
                                f"the first ({t.attrs.geometry.as_dict()})")
    path = Path(out)
    _check_resume(path, info, overwrite)
    db = ProfileDB.create(path, _meta(info, target, pipeline, graph, grid, timing), overwrite=overwrite)
    try:
        plan: list[tuple[KernelTarget, KeyReport, list[Point]]] = []
        for t in targets:
            points = points_for_key(t.key, grid, t.once_only)
            todo = db.missing(t.key, points)
            kr = KeyReport(t.table, t.describe(), "", len(t.nodes), len(points), len(points) - len(todo), 0, 0)
            report.keys.append(kr)
            report.rows_skipped_existing += kr.existing
            plan.append((t, kr, todo))
        total = sum(len(todo) for _, _, todo in plan)
        with torch.inference_mode():
            _measure(db, plan, info, timing, report, total, max_points, flush_every, progress)
        db.update_provenance({"fuse_targets": ",".join(sorted(set(
            filter(None, [*db.meta.provenance.get("fuse_targets", "").split(","), target]))))})
    finally:
        db.close()
    report.elapsed_s = time.perf_counter() - t_start
    return report


def _measure(db: ProfileDB, plan: list[tuple[KernelTarget, KeyReport, list[Point]]], info: DeviceInfo,
             timing: TimingOptions, report: ProfileReport, total: int, max_points: int | None, flush_every: int,
             progress: Progress | None) -> None:
    timer = make_timer(info.device, timing)
    buffer: list[tuple[KernelKey, Point, Measurement]] = []
    done = 0

    def flush() -> None:
        if buffer:
            report.rows_written += db.put_many(buffer)
            buffer.clear()

    try:
        for t, kr, todo in plan:
            if not todo:
                continue
            if max_points is not None and report.rows_written + len(buffer) >= max_points:
                report.stopped_early = True
                break
            if progress:
                progress(t.describe(), done, total)
            try:
                bench = make_bench(t, info)
            except Unmeasurable as e:
                kr.unmeasurable = str(e)
                report.unmeasurable.append({"kernel": t.describe(), "reason": str(e), "nodes": len(t.nodes)})
                done += len(todo)
                if progress:
                    progress(t.describe(), done, total)
                continue
            kr.kernel = bench.label
            for note in bench.notes:
                if note not in report.notes:
                    report.notes.append(note)
            failures: dict[str, list[Point]] = {}
            for point in todo:
                if max_points is not None and report.rows_written + len(buffer) >= max_points:
                    report.stopped_early = True
                    break
                try:
                    fn = bench.prepare(point)
                    samples, spread, tries = time_steady(timer, fn)
                    del fn
                except Unmeasurable as e:
                    failures.setdefault(str(e), []).append(point)
                except (RuntimeError, ValueError) as e:  # e.g. CUDA OOM, an op the backend lacks
                    if info.is_cuda:
                        torch.cuda.empty_cache()
                    failures.setdefault(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", []).append(point)
                else:
                    buffer.append((t.key, point, summarise(samples, bench.label)))
                    kr.written += 1
                    report.retimed += tries > 1
                    if spread > SPREAD_LIMIT:  # its p10/p90 in the row show it on read too (row_checks)
                        report.noisy.append({"key": t.describe(), "point": dict(zip(_coord_names(point),
                                             point_coords(point), strict=True)), "iqr_over_median": spread})
                    if len(buffer) >= flush_every:
                        flush()
                done += 1
                if progress:
                    progress(t.describe(), done, total)
            flush()
            for reason, points in failures.items():
                kr.failed += len(points)
                report.points_failed += len(points)
                report.failures.append({"key": t.describe(), "reason": reason, "points": len(points),
                                        "first": dict(zip(_coord_names(points[0]), point_coords(points[0]), strict=True))})
            del bench
            if info.is_cuda:
                torch.cuda.empty_cache()
            if report.stopped_early:
                break
    finally:
        flush()


def _coord_names(point: Point) -> tuple[str, ...]:
    from graphsim.costing.kernels import coord_names

    return coord_names(type(point))

"""The one recipe model → passes → `CostModel` (DESIGN §4), used by `predict`, `align`, `analyze`, the serving
deployment (`simulate`), search, the profiler and the benchmarks.

    from graphsim.cost_model import build_cost_model
    cm = build_cost_model("llama-3.1-8b", "h200", tp=2)
    cm.evaluate([parse_batch_spec("decode:64x2048")]).total_us()

It sits above `importers/`, `passes/` and `costing/` (glue, like `graphsim.analysis`); the importers (torch)
and the passes are imported only when a model has to be traced or a graph rewritten. The `CostModel` type
itself lives in `graphsim.costing.cost_model` and imports without torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from graphsim.catalog import ResolvedModel
from graphsim.costing.collectives import CollectiveSettings
from graphsim.costing.cost_model import CostModel
from graphsim.costing.derived import rowless_note
from graphsim.costing.errors import ProfileDBMismatchError
from graphsim.costing.hardware import DeviceKind, HardwareSpec, load_hardware
from graphsim.costing.moe_routing import RoutingModel
from graphsim.costing.predict import default_data
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.streams import StreamSettings
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Op

__all__ = ["CostModel", "build_cost_model", "partition_pipeline", "pipeline_for", "profile_data"]


def pipeline_for(target: str = "vllm", tp: int = 1, ep: int = 1, compiled: bool = True, combo: bool = True) -> str:
    """The pipeline from a traced graph: `fold,fuse{target=…}`, then `tp{size=…}` / `ep{size=…}` where > 1, then for
    vLLM's default compiled mode (`compiled`; False: `--enforce-eager`, the custom-op kernels) `inductor`: the
    kernels Inductor generates between the opaque ones (passes/fuse/vllm_inductor.py; `combo` False: without
    Inductor's combo kernels, as vLLM before 0.12)."""
    return f"fold,fuse{{target={target}}}" + _partition_suffix(tp, ep) + _inductor(target, compiled, combo)


def _inductor(target: str, compiled: bool, combo: bool) -> str:
    return ("," + ("inductor" if combo else "inductor{combo=0}")) if compiled and target == "vllm" else ""


def _partition_suffix(tp: int, ep: int) -> str:
    return (f",tp{{size={tp}}}" if tp > 1 else "") + (f",ep{{size={ep}}}" if ep > 1 else "")


def partition_pipeline(graph: Graph, tp: int = 1, ep: int = 1, compiled: bool = False, combo: bool = True) -> str:
    """The partition passes a fused kernel graph still needs for `tp` / `ep` ('' when none), then `inductor` for
    vLLM's compiled mode (`compiled`) on a vllm graph that has not had it. A graph that is already partitioned keeps
    its sizes when 1 is asked for; asking for another size is an error, as is partitioning a compiled graph (its
    merged kernels have no per-rank split: partition the custom-op graph, `compiled=False`)."""
    passes = []
    for name, want in (("tp", tp), ("ep", ep)):
        have = graph.meta.tp if name == "tp" else graph.meta.ep
        if want > 1 and have == 1:
            passes.append(f"{name}{{size={want}}}")
        elif want > 1 and want != have:
            raise GraphsimError(f"the kernel graph is already partitioned with {name}={have}; cannot price it at "
                                f"{name}={want} (use the unpartitioned graph, or --{name} 1)")
    if passes and graph.meta.compiled:
        raise GraphsimError("the kernel graph already has vLLM's compiled-mode kernels (the inductor pass); partition "
                            "the custom-op graph (build it with compiled=False) and compile after")
    if compiled and graph.meta.fuse_target == "vllm" and not graph.meta.compiled:
        passes.append(_inductor("vllm", compiled, combo).lstrip(","))
    return ",".join(passes)


def check_same_device(db: ProfileDB, hardware: HardwareSpec, where: str) -> None:
    """A profile's rows and the spec that prices what they do not cover must describe one device:
    CPU rows with a GPU's roofline (or an H100's rows with an H200's) would mix two machines' times."""
    on_cpu = db.meta.device.lower().startswith("cpu")
    if db.meta.hardware and db.meta.hardware != hardware.id:
        raise ProfileDBMismatchError(
            f"{where} holds measurements of {db.meta.device} ({db.meta.hardware}), not of {hardware.id}; "
            f"pass --gpu {db.meta.hardware}, or a profile measured on {hardware.id}")
    if on_cpu != (hardware.kind is DeviceKind.CPU):
        fix = ("pass this CPU's spec (`graphsim profiles measure-cpu -o cpu.json`, then --gpu cpu.json)" if on_cpu
               else "pass that GPU's spec with --gpu")
        raise ProfileDBMismatchError(
            f"{where} holds measurements of {db.meta.device}, but --gpu is {hardware.id} ({hardware.kind.value}); {fix}")


def profile_data(hardware: HardwareSpec | None, profile: str | os.PathLike[str] | ProfileDB | None,
                 default_profile: bool = True) -> tuple[ProfileDB | None, str]:
    """The profile.db to price from and a plain statement of what the numbers rest on.

    `profile`: a path or an open db. With none and `default_profile`, the default db of `hardware`
    ($GRAPHSIM_HOME/profiles/<id>_vllm.db) when it exists (`costing.predict.default_data`)."""
    if isinstance(profile, ProfileDB):
        db, where = profile, str(profile.path)
    elif profile:
        from graphsim.costing.auto_profile import warn_if_stale

        db, where = ProfileDB.open(profile), os.fspath(profile)
        warn_if_stale(where, db.meta.provenance)
    elif hardware is not None and default_profile:
        return default_data(hardware)
    elif hardware is not None:
        return None, f"no profile.db: every time is a roofline estimate from the {hardware.name} spec"
    else:
        return None, "no profile.db and no hardware spec: every time is missing"
    if hardware is not None:
        check_same_device(db, hardware, where)
        return db, f"measured rows from {where} ({db.meta.device}); {rowless_note(db, hardware)}"
    fallback = f"the {db.meta.hardware} roofline" if db.meta.hardware else "missing (no hardware spec for a roofline)"
    return db, f"measured rows from {where} ({db.meta.device}); where the rows do not reach: {fallback}"


def build_cost_model(model: str | ResolvedModel | Graph | Callable[[], Graph],
                     hardware: str | HardwareSpec | None = None, *, tp: int = 1, ep: int = 1, dtype: str | None = None, kv_dtype: str | None = None,
                     profile: str | os.PathLike[str] | ProfileDB | None = None, default_profile: bool = True,
                     target: str = "vllm", pipeline: str | None = None,
                     on_stage: Callable[[str], None] | None = None, moe_routing: RoutingModel | None = None,
                     collectives: CollectiveSettings | None = None, streams: StreamSettings | None = None,
                     compiled: bool = True, combo: bool = True) -> CostModel:
    """Import (when not handed a graph), run the passes, compile the cost tree and pair it with its pricer.

    model: a catalog name, HF id, config.json or model dir (traced on the meta device, with `dtype`), a
        `ResolvedModel`, an already imported `Graph`, or a function that loads one (called once the hardware
        and profile are resolved, so a bad spec or profile fails before a trace). A graph without kernels gets
        the whole pipeline; a fused kernel graph only the partition passes it still lacks (`partition_pipeline`).
    hardware: a spec, or an id / alias / JSON path for `load_hardware`; None: the spec the profile's meta
        names, if any (no roofline otherwise).
    profile / default_profile: see `profile_data`.
    target, tp, ep: the default pipeline `pipeline_for(target, tp, ep)`; `pipeline` replaces it verbatim
        (the profiler records the string it ran).
    on_stage: called with a short line before tracing and before the passes (progress displays).
    moe_routing: the MoE routing model (`costing.moe_routing`; None: its DEFAULT).
    collectives: vLLM's settings that pick a collective's implementation (`costing.collectives`; None: defaults).
    streams: vLLM's shared-expert stream settings (`costing.streams`; None: vLLM's defaults).
    compiled, combo: vLLM's default compiled mode in the default pipeline (False: `--enforce-eager`), with Inductor's
        combo kernels (False: vLLM before 0.12; `pipeline_for`)."""
    if tp < 1 or ep < 1:
        raise GraphsimError(f"tensor- and expert-parallel sizes must be >= 1 (got tp={tp}, ep={ep})")
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    db, note = profile_data(hw, profile, default_profile)
    if isinstance(model, Graph):
        graph = model
    elif callable(model):
        graph = model()
    else:
        from graphsim.importers.hf import import_hf

        if on_stage:
            on_stage("tracing the model on the meta device")
        graph, _ = import_hf(model, dtype=dtype)
    if pipeline is None:
        fused = any(n.op is Op.KERNEL for n in graph.nodes)
        pipeline = (partition_pipeline(graph, tp, ep, compiled, combo) if fused
                    else pipeline_for(target, tp, ep, compiled, combo))
    if pipeline:
        from graphsim.passes import run_pipeline

        if on_stage:
            on_stage(f"running {pipeline}")
        graph = run_pipeline(graph, pipeline).graph
    return CostModel.of_kernel_graph(graph, hw, db, kv_dtype=kv_dtype, dtype=dtype, data_note=note,
                                     pipeline=pipeline, routing=moe_routing, collectives=collectives, streams=streams)

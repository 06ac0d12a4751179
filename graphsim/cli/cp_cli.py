"""The CLI's context-parallel glue: vLLM's `--prefill-context-parallel-size/-pcp` and
`--decode-context-parallel-size/-dcp` options and their report in `predict` (`costing.context_parallel`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from graphsim.costing.context_parallel import ContextParallel
from graphsim.costing.cost_model import CostModel
from graphsim.serving.config import DeploymentConfig
from graphsim.workload import Step

PrefillContextParallel = Annotated[int, typer.Option(
    "--prefill-context-parallel-size", "-pcp", min=1,
    help="vLLM's prefill context parallel size: each prefill's tokens split over this many more ranks, attention "
         "as a ring (Parallel(compute, KV send) per round); the KV is sharded over them.")]
DecodeContextParallel = Annotated[int, typer.Option(
    "--decode-context-parallel-size", "-dcp", min=1,
    help="vLLM's decode context parallel size: the KV cache sharded along tokens over this many ranks of the TP "
         "group (must divide --tp); decode gathers queries and combines partial outputs with their LSE.")]


def with_cp(config: DeploymentConfig, pcp: int, dcp: int) -> DeploymentConfig:
    """A deployment document with --prefill-/--decode-context-parallel-size (simulate)."""
    from graphsim.serving.context_parallel import with_context_parallel

    return with_context_parallel(config, pcp, dcp)


def context_parallel(pcp: int, dcp: int) -> ContextParallel | None:
    return None if pcp == 1 and dcp == 1 else ContextParallel(pcp, dcp)


def cp_json(cm: CostModel, cp: ContextParallel | None, steps: list[Step], specs: list[str]) -> dict[str, Any]:
    """{"context_parallel": …} for --json ({} without context parallelism); its kernels are in the batches'."""
    if cp is None:
        return {}
    return {"context_parallel": {"prefill_context_parallel_size": cp.pcp, "decode_context_parallel_size": cp.dcp,
                                 "world_size": cm.tp * cp.pcp, "kv_capacity_factor": cp.kv_capacity_factor,
                                 "priced": "the last rank of the ring" if cp.pcp > 1 else "one rank"}}


def print_context_parallel(console: Any, cm: CostModel, cp: ContextParallel | None, steps: list[Step],
                           specs: list[str]) -> None:
    if cp is None:
        return
    what = []
    if cp.pcp > 1:
        what.append(f"prefill context parallel {cp.pcp}: {cm.tp * cp.pcp} GPUs, each prefill split over {cp.pcp} "
                    "ranks, attention as a ring (rounds of attention ‖ KV send in the tree; the last rank priced)")
    if cp.dcp > 1:
        what.append(f"decode context parallel {cp.dcp}: the KV sharded over {cp.dcp} ranks of the TP group "
                    "(q all-gather, sharded attention, LSE combine in the tree)")
    console.print(f"{'; '.join(what)}; KV per rank holds {cp.kv_capacity_factor}× the tokens", markup=False)

"""The CLI's context-parallel glue: vLLM's `--prefill-context-parallel-size/-pcp` and
`--decode-context-parallel-size/-dcp` options and their report in `predict` (`costing.context_parallel`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from graphsim.costing.context_parallel import ContextParallel, context_parallel_steps
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


def with_dcp(config: DeploymentConfig, dcp: int) -> DeploymentConfig:
    """A deployment document with --decode-context-parallel-size (simulate, search)."""
    from graphsim.serving.context_parallel import with_decode_context_parallel

    return with_decode_context_parallel(config, dcp)


def context_parallel(pcp: int, dcp: int) -> ContextParallel | None:
    return None if pcp == 1 and dcp == 1 else ContextParallel(pcp, dcp)


def cp_json(cm: CostModel, cp: ContextParallel | None, steps: list[Step], specs: list[str]) -> dict[str, Any]:
    """{"context_parallel": …} for --json ({} without context parallelism)."""
    if cp is None:
        return {}
    rows = context_parallel_steps(cm, steps, specs, cp)
    return {"context_parallel": {"prefill_context_parallel_size": cp.pcp, "decode_context_parallel_size": cp.dcp,
                                 "world_size": cm.tp * cp.pcp, "kv_capacity_factor": cp.kv_capacity_factor,
                                 "batches": [r.to_json() for r in rows]}}


def print_context_parallel(console: Any, cm: CostModel, cp: ContextParallel | None, steps: list[Step],
                           specs: list[str]) -> None:
    if cp is None or cp.pcp == 1:
        if cp is not None:
            console.print(f"decode context parallel {cp.dcp}: the KV is sharded over {cp.dcp} ranks of the TP group "
                          f"(each holds {cp.dcp}× the tokens); its kernels are in the tables above")
        return
    from rich.table import Table

    from graphsim.render.cost_view import fmt_us

    rows = context_parallel_steps(cm, steps, specs, cp)
    t = Table(title=f"context parallel: pcp={cp.pcp} dcp={cp.dcp} (GPUs: tp {cm.tp} × pcp {cp.pcp} = "
                    f"{cm.tp * cp.pcp}; KV per rank holds {cp.kv_capacity_factor}× the tokens)", title_justify="left")
    for col in ("batch", "without PCP", "with PCP", "other kernels", "attention ring", "rounds (compute ‖ send)",
                "sources"):
        t.add_column(col, justify="left" if col in ("batch", "sources", "rounds (compute ‖ send)") else "right")
    for r in rows:
        ring = ", ".join(f"{fmt_us(x.compute_us)} ‖ {fmt_us(x.send_us)}" for x in r.rounds) or "–"
        t.add_row(r.spec, fmt_us(r.baseline_us), fmt_us(r.total_us), fmt_us(r.other_us), fmt_us(r.attention_us),
                  ring, r.sources)
    if cp.dcp > 1:
        t.caption = (f"dcp {cp.dcp} is in the kernel tables above (sharded attention, q all-gather, LSE combine); "
                     "pcp applies to prefill batches without a cached prefix")
    console.print(t)

"""The CLI's context-parallel glue: vLLM's `--prefill-context-parallel-size/-pcp` and
`--decode-context-parallel-size/-dcp` options and their report in `predict` (`costing.context_parallel`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from graphsim.costing.context_parallel import ContextParallel, context_parallel_steps
from graphsim.costing.cost_model import CostModel
from graphsim.workload import Step

PrefillContextParallel = Annotated[int, typer.Option(
    "--prefill-context-parallel-size", "-pcp", min=1,
    help="vLLM's prefill context parallel size: each prefill's tokens split over this many more ranks, attention "
         "as a ring (Parallel(compute, KV send) per round); the KV is sharded over them.")]
DecodeContextParallel = Annotated[int, typer.Option(
    "--decode-context-parallel-size", "-dcp", min=1,
    help="vLLM's decode context parallel size: the KV cache sharded along tokens over this many ranks of the TP "
         "group (must divide --tp); decode gathers queries and combines partial outputs with their LSE.")]


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
    if cp is None:
        return
    from rich.table import Table

    from graphsim.render.cost_view import fmt_us

    rows = context_parallel_steps(cm, steps, specs, cp)
    t = Table(title=f"context parallel: pcp={cp.pcp} dcp={cp.dcp} (GPUs: tp {cm.tp} × pcp {cp.pcp} = "
                    f"{cm.tp * cp.pcp}; KV per rank holds {cp.kv_capacity_factor}× the tokens)", title_justify="left")
    for col in ("batch", "without CP", "with CP", "other kernels", "attention", "CP collectives", "rounds (compute ‖ send)",
                "sources"):
        t.add_column(col, justify="left" if col in ("batch", "sources", "rounds (compute ‖ send)") else "right")
    for r in rows:
        ring = ", ".join(f"{fmt_us(x.compute_us)} ‖ {fmt_us(x.send_us)}" for x in r.rounds) or "–"
        t.add_row(r.spec, fmt_us(r.baseline_us), fmt_us(r.total_us), fmt_us(r.other_us), fmt_us(r.attention_us),
                  fmt_us(r.collectives_us), ring, r.sources)
    if not rows:
        t.caption = "no batch uses it: pcp applies to prefill batches, dcp to decode batches"
    console.print(t)

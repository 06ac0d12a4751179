"""Rich rendering of a pipelined prediction: per batch, each stage's time (its incoming transfer apart), the
latency of one batch through every stage and the interval the slowest stage sets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from graphsim.costing.pipeline import PipelineTimes
from graphsim.render.cost_view import _src, fmt_us

if TYPE_CHECKING:
    from graphsim.serving.pipeline_plan import PipelinedDeployment


def pipeline_table(times: list[PipelineTimes], split: str) -> Table:
    t = Table(title=f"pipeline stages ({split})", title_justify="left")
    for col in ("batch", "stage", "layers", "recv in", "stage time", "source"):
        t.add_column(col, justify="left" if col in ("batch", "layers", "source") else "right")
    for pt in times:
        for s in pt.stages:
            t.add_row(pt.spec if s.stage == 0 else "", str(s.stage), f"{s.layers[0]}–{s.layers[1] - 1}",
                      fmt_us(s.recv_us) if s.stage else "–", fmt_us(s.time_us), _src(s.source))
        t.add_row("", "[bold]Σ[/]", "latency, one batch", "", f"[bold]{fmt_us(pt.latency_us)}[/]", "")
        t.add_row("", "[bold]max[/]", "interval, pp batches in flight", "", fmt_us(pt.interval_us), "",
                  end_section=True)
    t.caption = ("stage time includes its incoming transfer (send/recv of each TP rank's slice + the TP all-gather, "
                 "vLLM's send_tensor_dict); the simulator runs pp batches at once (vLLM's batch queue)")
    return t


def kv_stage_table(dep: PipelinedDeployment) -> Table:
    gib = 1 << 30
    t = Table(title=f"pipeline stages: each sizes its own KV cache; the engine uses the smallest block count "
                    f"(stage {dep.binding})", title_justify="left")
    for col in ("stage", "layers", "weights GiB", "KV B/token/rank", "available GiB", "blocks", "tokens"):
        t.add_column(col, justify="left" if col == "layers" else "right")
    for s in dep.stages:
        mark = " ◀" if s.stage == dep.binding else ""
        t.add_row(str(s.stage), f"{s.layers[0]}–{s.layers[1] - 1}", f"{s.weight_bytes / gib:.2f}",
                  f"{s.layout.bytes_per_token:,}", f"{s.budget.available_bytes / gib:.2f}",
                  f"{s.capacity.num_blocks:,}{mark}", f"{s.capacity.tokens:,}")
    t.caption = "vllm/v1/core/kv_cache_utils.py get_kv_cache_configs: num_blocks = the minimum over the workers"
    return t

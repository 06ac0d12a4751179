"""`graphsim analyze` as a library: trace, fuse, partition and price a deployment, then hold every
CostTree location against the accountant's necessary work (`graphsim.work.analyzer`).

    from graphsim.analysis import analyze_model
    a = analyze_model("qwen3-30b-a3b", gpu="h200", tp=8, batch="decode:64x2048")
    a.necessary_work_available, a.map_id, a.coverage.share, a.redundancy.excess.state_bytes
"""

from graphsim.analysis.deployment import (
    Prepared, analyze_model, analyze_prepared, pipeline_for, prepare_cost_model, prepare_graph, prepare_model,
    write_draft_map,
)

__all__ = ["Prepared", "analyze_model", "analyze_prepared", "pipeline_for", "prepare_cost_model", "prepare_graph",
           "prepare_model", "write_draft_map"]

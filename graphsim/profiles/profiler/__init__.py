"""The kernel profiler: measure the kernels a model's fused graph needs into a profile.db.

    from graphsim.profiles.profiler import profile_model, Grid
    report = profile_model("llama-3.1-8b", "l8.db", device="cpu", quick=True)

Needs torch (the `trace` extra); `graphsim.costing` stays torch-free and only reads the rows.
See `runner.py` for the flow, `targets.py` for which keys are measured, `grid.py` for the points,
`gemm.py` / `attention.py` / `moe.py` / `pointwise.py` for what runs, `timer.py` for how it is timed.
"""

from graphsim.profiles.profiler.device import DeviceInfo, Unmeasurable, open_device
from graphsim.profiles.profiler.grid import Grid, points_for_key, pow2_and_midpoints
from graphsim.profiles.profiler.runner import (
    KeyReport, ProfileReport, default_target, pipeline_for, profile_graph, profile_model,
)
from graphsim.profiles.profiler.targets import KernelTarget, Skipped, collect_targets, parse_kinds
from graphsim.profiles.profiler.timer import TimingOptions

__all__ = [
    "DeviceInfo", "Grid", "KernelTarget", "KeyReport", "ProfileReport", "Skipped", "TimingOptions", "Unmeasurable",
    "collect_targets", "default_target", "open_device", "parse_kinds", "pipeline_for", "points_for_key",
    "pow2_and_midpoints", "profile_graph", "profile_model",
]

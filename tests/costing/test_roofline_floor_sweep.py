"""Sweep: on aiconfigurator's measured H200 vLLM tables, no kernel time of any catalog deployment in
the grid of issue 12 (prefill 1×{1024, 4096, 8192}; decode {1, 16, 64, 256}×{1024, 4096}) lies below
that kernel's own roofline. Imports the real tables (about 30 s) and traces five models: slow."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.kernels import CollectiveKey
from graphsim.costing.roofline import roofline_us
from graphsim.workload import parse_batch_spec

pytestmark = pytest.mark.slow

DEPLOYMENTS = [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("qwen3-32b", 2), ("qwen3-30b-a3b", 1), ("deepseek-v3", 8)]
GRID = ["prefill:1x1024", "prefill:1x4096", "prefill:1x8192"] + [
    f"decode:{b}x{c}" for b in (1, 16, 64, 256) for c in (1024, 4096)]


@pytest.mark.parametrize("model, tp", DEPLOYMENTS)
def test_no_time_below_its_roofline(h200_db, model, tp):
    from graphsim.cost_model import build_cost_model

    cm = build_cost_model(model, "h200", tp=tp, profile=h200_db)
    ev = cm.evaluate([parse_batch_spec(s) for s in GRID])
    hw = cm.pricer.hardware
    assert hw is not None
    checked = 0
    for rows in ev.rows:
        for part in rows.parts:
            if isinstance(part.key, CollectiveKey):
                continue
            floor = roofline_us(hw, part.key, part.coords)
            if floor is None:
                continue
            times, _ = cm.pricer.times(part.key, part.coords)
            ok = np.isnan(times) | (times >= floor * (1 - 1e-9))
            assert ok.all(), f"{model}: {part.key} at {part.coords[~ok][:3]}: {times[~ok][:3]} < {floor[~ok][:3]}"
            checked += int(np.count_nonzero(~np.isnan(times)))
    assert checked > 0

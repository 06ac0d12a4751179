"""A small search space (fast) and a way to compare results across backends."""

from __future__ import annotations

import json
from typing import Any

from graphsim.serving import SLO, Lengths
from graphsim.serving.search_space import SearchSpec


def small_spec(**changes) -> SearchSpec:
    base: dict[str, Any] = dict(base={"model": "llama-3.1-8b", "hardware": "h100"}, gpus=4, isl=Lengths(1024, 1024), osl=Lengths(128, 128),
                slo=SLO(ttft_ms=1000, tpot_ms=20), max_num_seqs=(4, 16, 64, 1024), max_num_batched_tokens=(2048, 8192),
                prefill_batched_tokens=(4096,), verify=2, seed=0)
    base.update(changes)
    return SearchSpec.parse(base)


def comparable(res) -> str:
    """The result as JSON, without wall-clock times (measurements of this run, not results)."""
    d = res.to_json()
    d.pop("timings_s")
    d.pop("backend")
    d.pop("workers")
    for row in d["rows"]:
        for ev in (row["steady_state"], row["simulated"]):
            if ev:
                ev.pop("sim_wall_s")
    return json.dumps(d, sort_keys=True, default=float)

"""Regression pin of the serving simulator: fixed-seed runs must give exactly these results.

Captured from the code at commit 5d3d476 (before the simulator refactor of issue 15, item 7: vLLM names,
typed plans, one event loop for aggregated and disaggregated runs), on the affine stand-in cost (no
tracing, seconds to run). Regenerated once since, with every request, ITL sample and timing column
unchanged: the `derived` time source took code 3 (roofline is now 4), and the iteration log gained
`host_s` (0 here: the stand-in cost has no host time) and the summary `host_share`, `source_shares` and
`source_basis`. Every scenario compares, exactly (floats to the last bit), the per-iteration
records, the per-request outcomes, the inter-token latency samples, the source counts, the per-replica
counters and the summary; the disaggregated ones also the prefill/transfer times per request.

Scenarios: aggregated open loop under KV pressure (chunked prefill, prefix caching, preemption), three
replicas without chunked prefill, a closed loop over two replicas, a hybrid (sliding-window) layout, a
disaggregated open loop and a disaggregated closed loop with decode-side preemption.

This is a pin, not a specification: if a change to the simulator's behaviour is intended, regenerate the
golden with `GRAPHSIM_UPDATE_GOLDENS=1 python -m pytest tests/serving/test_simulator_pin.py` and say why
in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serving_helpers import small_setup

from graphsim.catalog import resolve_model
from graphsim.serving import ClosedLoop, kv_layout, parse_lengths, simulate, summarize, synthetic
from graphsim.serving.disagg import DisaggSetup, KvLink, simulate_disagg
from graphsim.work import accounting

GOLDEN = Path(__file__).parent / "goldens" / "simulator_pin.json"
REQUEST_FIELDS = ("id", "arrival", "replica", "admitted_t", "first_token_t", "finish_t", "preemptions",
                  "hit_tokens", "rejected")
DISAGG_ARRAYS = ("prefill_done_s", "transfer_start_s", "transfer_end_s", "transfer_bytes")


def _plain(v) -> Any:
    """JSON-exact: numpy scalars to Python, NaN to None (floats keep every bit through repr)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    return v


def _digest(a: np.ndarray) -> dict:
    """An array by length, dtype, sum, max and the SHA-256 of its bytes (exact, and small on disk)."""
    a = np.ascontiguousarray(a)
    return {"n": len(a), "dtype": a.dtype.str, "sum": float(a.sum()) if len(a) else 0.0,
            "max": float(a.max()) if len(a) else 0.0, "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def _record(res) -> dict:
    summary = summarize(res).to_json()
    summary.pop("wall_s")
    out = {
        "iterations": {k: _digest(res.iterations[k]) for k in sorted(res.iterations)},
        "requests": [[getattr(r, f) for f in REQUEST_FIELDS] for r in res.requests],
        "itl_values": _digest(res.itl_values), "itl_weights": _digest(res.itl_weights),
        "source_counts": dict(sorted(res.source_counts.items())), "preemptions": res.preemptions,
        "per_replica": res.per_replica, "summary": summary,
    }
    for k in DISAGG_ARRAYS:
        if hasattr(res, k):
            out[k] = getattr(res, k)
    for k in ("prefill_tokens", "decode_tokens"):
        if hasattr(res, k):
            out[k] = getattr(res, k)
    return _plain(out)


def _open(n, rate, seed, ins="100:2000", outs="20:400", prefix=0, groups=3):
    return synthetic(n, rate, parse_lengths(ins, "in"), parse_lengths(outs, "out"), seed=seed, prefix_tokens=prefix,
                     prefix_groups=groups)


def _disagg(x, y, p_blocks, d_blocks, d_seqs=64):
    p = small_setup(num_blocks=p_blocks, mnbt=4096, replicas=x)
    d = small_setup(num_blocks=d_blocks, max_num_seqs=d_seqs, replicas=y, router="least-outstanding")
    return DisaggSetup(p, d, KvLink(450e9, 5e-6, "given"))


def _hybrid_layout():
    acc = accounting(resolve_model("gpt-oss-20b").config)
    return kv_layout(acc.spec, acc.precision, 1)


def scenarios() -> dict:
    return {
        "agg_open_kv_pressure": lambda: simulate(small_setup(num_blocks=500, max_num_seqs=48, mnbt=1024),
                                                 _open(250, 12.0, 1, prefix=1500)),
        "agg_open_three_replicas_unchunked": lambda: simulate(
            small_setup(num_blocks=1200, mnbt=4096, mml=4096, replicas=3, router="least-outstanding", chunked=False),
            _open(250, 20.0, 2, ins="100:3000", prefix=800, groups=2)),
        "agg_closed_two_replicas": lambda: simulate(
            small_setup(num_blocks=700, max_num_seqs=32, mnbt=1024, replicas=2, router="least-outstanding"),
            ClosedLoop(24, 200, parse_lengths("100:1500", "in"), parse_lengths("10:300", "out"), seed=4, think_s=0.05,
                       prefix_tokens=600, prefix_groups=2)),
        "agg_closed_one_replica_no_fast_forward": lambda: simulate(
            small_setup(num_blocks=600, mnbt=512, fast_forward=False),
            ClosedLoop(16, 120, parse_lengths("50:1200", "in"), parse_lengths("10:200", "out"), seed=6)),
        "agg_open_hybrid_layout": lambda: simulate(small_setup(num_blocks=400, mnbt=1024, layout=_hybrid_layout()),
                                                   _open(150, 8.0, 3, prefix=1000)),
        "disagg_open": lambda: simulate_disagg(_disagg(2, 2, 4000, 1500), _open(250, 12.0, 3, ins="100:2000",
                                                                                outs="20:300")),
        "disagg_closed_kv_pressure": lambda: simulate_disagg(
            _disagg(1, 2, 3000, 700, d_seqs=48),
            ClosedLoop(40, 200, parse_lengths("300:1500", "in"), parse_lengths("50:400", "out"), seed=2,
                       prefix_tokens=256, prefix_groups=2)),
    }


def _capture() -> dict:
    return {name: _record(run()) for name, run in scenarios().items()}


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("GRAPHSIM_UPDATE_GOLDENS"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(_capture(), indent=0) + "\n")
    assert GOLDEN.is_file(), f"missing golden {GOLDEN}; set GRAPHSIM_UPDATE_GOLDENS=1 to create it"
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", list(scenarios()))
def test_fixed_seed_run_matches_the_pin(golden, name):
    got, want = _record(scenarios()[name]()), golden[name]
    assert got.keys() == want.keys()
    for key in want:
        if key == "iterations":
            for col in want[key]:
                assert got[key][col] == want[key][col], f"{name}: iteration column {col} differs"
        elif key == "requests":
            for g, w in zip(got[key], want[key], strict=True):
                assert g == w, (f"{name}: request {w[0]} differs: {dict(zip(REQUEST_FIELDS, g, strict=True))} != "
                                f"{dict(zip(REQUEST_FIELDS, w, strict=True))}")
        else:
            assert got[key] == want[key], f"{name}: {key} differs"


def test_the_pin_exercises_what_it_claims(golden):
    assert golden["agg_open_kv_pressure"]["preemptions"] > 0
    assert golden["disagg_closed_kv_pressure"]["preemptions"] > 0
    assert golden["agg_open_kv_pressure"]["iterations"]["tokens"]["max"] == 1024  # chunked prefill
    assert golden["agg_open_three_replicas_unchunked"]["iterations"]["prefill_tokens"]["max"] > 1024
    assert golden["agg_open_kv_pressure"]["summary"]["prefix_hit_rate"] > 0
    assert {row["replica"] for row in golden["agg_closed_two_replicas"]["per_replica"]} == {0, 1}

"""DeepSeek-V4-Flash from its real public config (aiconfigurator-core's model_configs) priced on aiconfigurator's
measured H200 vLLM tables at TP8 and TP8 + EP8: the trace is dynamic, no placeholder carries more than 1 % of a
decode or prefill step, the partition passes conserve work (checked inside them), and the decode step is plausible
— at least its weight-read floor and at most 3 × the sum of its kernels' roofline floors. Imports the real tables
(about 30 s) and traces the model: slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphsim.workload import parse_batch_spec

pytestmark = pytest.mark.slow

BATCHES = ["decode:64x4096", "prefill:1x8192"]


@pytest.fixture(scope="module")
def flash(aic_config) -> Path:
    return aic_config("deepseek-ai--DeepSeek-V4-Flash")


@pytest.mark.parametrize("ep", [1, 8])
def test_flash_tp8_plausible_without_placeholders(h200_db, flash, ep):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict

    cfg = json.loads(flash.read_text())
    cm = build_cost_model(str(flash), "h200", tp=8, ep=ep, profile=h200_db)
    assert cm.graph.meta.dynamic_tokens and not cm.graph.meta.opaque_ops
    steps = [parse_batch_spec(s) for s in BATCHES]
    pred = predict(cm, steps, BATCHES)
    hw = cm.pricer.hardware
    assert hw is not None
    roofline_sums = cm.roofline_sum_us(steps)
    for b, rep in enumerate(pred.batches):
        assert rep.total_us is not None, rep.missing
        assert not [r.kernel for r in rep.rows if r.approximate]  # every op is a named vLLM kernel
        if not rep.spec.startswith("decode"):
            continue
        floors = float(roofline_sums[b])
        assert rep.total_us <= 3 * floors, (rep.total_us, floors)
        # weight-read floor over 8 ranks: one byte a weight (the checkpoint's fp8 blocks, scales left out) and
        # half a byte a routed-expert weight (its expert_dtype fp4: MXFP4, scales left out), less the experts no
        # token picks: 64 tokens × 6 picks leave one of 256 experts untouched with probability (1 − 1/256)^384
        e, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        untouched = (1 - 1 / e) ** (64 * k)
        experts = cfg["num_hidden_layers"] * e * 3 * cfg["hidden_size"] * cfg["moe_intermediate_size"]
        params = cm.graph.meta.param_count
        assert params is not None
        weight_bytes = (params - experts) + experts * (1 - untouched) * 0.5
        floor_us = weight_bytes / 8 / hw.memory_bandwidth_bytes_per_s * 1e6
        assert rep.total_us >= floor_us, (rep.total_us, floor_us)

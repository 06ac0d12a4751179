"""Issue 16's list of real public configs (aiconfigurator-core's model_configs), each priced at TP8 and, for MoE,
TP8 + EP8 on aiconfigurator's measured H200 vLLM tables: every kernel priced, no placeholder above 1 % of the decode
step, the partition passes conserve work (checked inside them), and the decode step plausible — at least its
weight-read floor and at most 3 × the sum of its kernels' roofline floors (one measured exception, below).
`python benchmarks/architectures_e2e.py` runs the same list through the CLI (kv and simulate too). Imports the
real tables and traces eleven large models: slow (a few minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphsim.workload import parse_batch_spec

pytestmark = pytest.mark.slow

SPEC = "decode:64x4096"
# (DeepSeek-V4-Flash and the two Nemotron configs have tests of their own: test_compressed_real_configs.py,
# test_ssm_real_configs.py)
CONFIGS = [
    "deepseek-ai--DeepSeek-V3.2", "nvidia--GLM-5-NVFP4", "moonshotai--Kimi-K2-Instruct", "Qwen--Qwen3.5-27B",
    "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "MiniMaxAI--MiniMax-M2.5", "XiaomiMiMo--MiMo-V2-Flash",
]
# Gemma-4-26B-A4B at TP8 (not EP8) runs 4.3 × its roofline sum: its fused_moe splits 704 intermediate features
# into 88 per rank, and aiconfigurator's measured H200 rows put that kernel at 276 µs for 64 tokens (balanced),
# slower than at TP4 (152 µs): 5 × its own roofline, a real kernel's inefficiency, not a pricing error.
MEASURED_SLOW = {("google--gemma-4-26B-A4B", 1): 5.0}


def _weight_floor_us(path: Path, bandwidth: float) -> float:
    """Every stored weight of a TP8 rank read once (the accountant's bytes, quantization included), less the share
    a routed expert no token picks leaves unread: 64 tokens × top-k picks miss one of E experts with probability
    (1 − 1/E)^(64·k); that share is taken off ALL the weights, so the floor is a lower bound."""
    from graphsim.catalog import resolve_model
    from graphsim.serving.memory import weight_bytes_per_rank
    from graphsim.work import accounting
    from graphsim.work.specs import MoeFfn

    acc = accounting(resolve_model(str(path)).config)
    moe = [layer.ffn for layer in acc.spec.stack.layers if isinstance(layer.ffn, MoeFfn)]
    untouched = max(((1 - 1 / f.experts) ** (64 * f.top_k) for f in moe), default=0.0)
    return weight_bytes_per_rank(acc.spec, acc.precision, 8) * (1 - untouched) / bandwidth * 1e6


def _cases():
    moe = {"nvidia--GLM-5-NVFP4", "deepseek-ai--DeepSeek-V3.2", "moonshotai--Kimi-K2-Instruct",
           "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
           "MiniMaxAI--MiniMax-M2.5", "XiaomiMiMo--MiMo-V2-Flash"}
    return [pytest.param(n, ep, id=f"{n}-ep{ep}") for n in CONFIGS for ep in ((1, 8) if n in moe else (1,))]


@pytest.mark.parametrize(("name", "ep"), _cases())
def test_priced_complete_and_plausible(h200_db, aic_config, name, ep):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict

    path = aic_config(name)
    cm = build_cost_model(str(path), "h200", tp=8, ep=ep, profile=h200_db)
    step = parse_batch_spec(SPEC)
    rep = predict(cm, [step], [SPEC]).batches[0]
    assert rep.total_us is not None, rep.missing
    placeholders = sum(r.total_us or 0.0 for r in rep.rows if r.approximate)
    assert placeholders <= 0.01 * rep.total_us, [(r.kernel, r.total_us) for r in rep.rows if r.approximate]
    hw = cm.pricer.hardware
    assert hw is not None
    floors = float(cm.roofline_sum_us([step])[0])
    assert rep.total_us <= MEASURED_SLOW.get((name, ep), 3.0) * floors, (rep.total_us, floors)
    assert rep.total_us >= _weight_floor_us(path, hw.memory_bandwidth_bytes_per_s), rep.total_us

"""Issue 16's plausibility bar for one priced step of a real config: every kernel priced, the share of time in
approximate (placeholder) kernels, and the step's time against two yardsticks: the weight-read floor (every weight
a rank stores read once from HBM, less what no routed token touches: the step can't be faster) and the sum of its
kernels' roofline floors (`CostModel.roofline_sum_us`: a step far above it has a pricing error or a measured
kernel that slow). Shared by `benchmarks/architectures_e2e.py` and the slow real-config tests, so the benchmark's
table and the tests' assertions are the same numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepCheck:
    """One priced step's figures. `total_us` None: some kernel has no price (`missing` names them)."""

    total_us: float | None
    source: str
    missing: list[str]
    placeholders: list[tuple[str, float]]  # (kernel, µs) of each approximate kernel
    roofline_sum_us: float
    weight_floor_us: float | None  # None: the accountant has no builder for the architecture

    @property
    def placeholder_us(self) -> float:
        return sum(us for _, us in self.placeholders)

    @property
    def placeholder_share(self) -> float:
        return self.placeholder_us / self.total_us if self.total_us else 0.0

    @property
    def over_roofline_sum(self) -> float | None:
        return self.total_us / self.roofline_sum_us if self.total_us and self.roofline_sum_us else None

    @property
    def over_weight_floor(self) -> float | None:
        return self.total_us / self.weight_floor_us if self.total_us and self.weight_floor_us else None


def weight_floor_us(config_path: str | Path, tp: int, tokens: int, bandwidth_bytes_per_s: float) -> float | None:
    """Every stored weight of a rank read once (the accountant's bytes at `tp`, quantization included), less the
    share a routed expert no token picks leaves unread: `tokens` × top-k picks miss one of E experts with
    probability (1 − 1/E)^(tokens·k); that share is taken off ALL the weights, so the floor is a lower bound.
    None when the accountant has no builder for the architecture (no floor is claimed then)."""
    from graphsim.catalog import resolve_model
    from graphsim.errors import GraphsimError
    from graphsim.serving.memory import weight_bytes_per_rank
    from graphsim.work import accounting
    from graphsim.work.specs import MoeFfn

    try:
        acc = accounting(resolve_model(str(config_path)).config)
    except GraphsimError:
        return None
    moe = [layer.ffn for layer in acc.spec.stack.layers if isinstance(layer.ffn, MoeFfn)]
    untouched = max(((1 - 1 / f.experts) ** (tokens * f.top_k) for f in moe), default=0.0)
    return weight_bytes_per_rank(acc.spec, acc.precision, tp) * (1 - untouched) / bandwidth_bytes_per_s * 1e6


def check_step(cm: Any, spec: str, config_path: str | Path) -> StepCheck:
    """Price `spec` (a batch spec, e.g. "decode:64x4096") on the cost model `cm` (`build_cost_model`) of the config
    at `config_path` and measure it against the two floors."""
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    step = parse_batch_spec(spec)
    rep = predict(cm, [step], [spec]).batches[0]
    hw = cm.pricer.hardware
    floor = weight_floor_us(config_path, cm.tp, step.tokens, hw.memory_bandwidth_bytes_per_s) if hw else None
    return StepCheck(rep.total_us, str(rep.source), [str(m) for m in rep.missing or []],
                     [(r.kernel, r.total_us or 0.0) for r in rep.rows if r.approximate],
                     float(cm.roofline_sum_us([step])[0]), floor)

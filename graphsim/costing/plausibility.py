"""Issue 16's plausibility bar for one priced step of a real config: every kernel priced, the share of time in
approximate (placeholder) kernels, and the step's time against two yardsticks: the weight-read floor (every weight
a rank stores read once from HBM, less what no routed token touches: the step can't be faster) and the sum of its
kernels' roofline floors (`CostModel.roofline_sum_us`: a step far above it has a pricing error or a measured
kernel that slow). Shared by `benchmarks/architectures_e2e.py` and the slow real-config tests, so the benchmark's
table and the tests' assertions are the same numbers.

A step over 3 × its roofline sum passes only as a stated exception (`StepCheck.exception`, one line): when its
excess is entirely the time above 3 × their own roofline of kernels priced from profile rows that a rule of
`costing/measured_slow.py` names (rows checked to be the kernel vLLM runs there and systematically that slow), the
line names those rows and the rule's reason; any other excess still fails the bar."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BAR = 3.0  # issue 16: a step at most 3 × the sum of its kernels' roofline floors


@dataclass(frozen=True)
class SlowKernel:
    """A kernel (all the instances of one leaf in a step) priced from rows a `measured_slow` rule names."""

    kernel: str  # the graph's kernel name
    rows: str  # the profile rows: their `kernel` label and key
    rule: str
    reason: str
    time_us: float
    roofline_us: float

    @property
    def excess_us(self) -> float:
        """Its time above the bar on its own roofline."""
        return max(0.0, self.time_us - BAR * self.roofline_us)


@dataclass(frozen=True)
class StepCheck:
    """One priced step's figures. `total_us` None: some kernel has no price (`missing` names them)."""

    total_us: float | None
    source: str
    missing: list[str]
    placeholders: list[tuple[str, float]]  # (kernel, µs) of each approximate kernel
    roofline_sum_us: float
    weight_floor_us: float | None  # None: the accountant has no builder for the architecture
    slow: list[SlowKernel] = field(default_factory=list)  # kernels a measured_slow rule covers, slowest first

    @property
    def over_bar(self) -> bool:
        """Above 3 × the roofline sum."""
        return bool(self.total_us and self.roofline_sum_us and self.total_us > BAR * self.roofline_sum_us)

    @property
    def exception(self) -> str | None:
        """Over the bar only through measured rows a rule names: one line naming them and why (None when the step
        is within the bar, or when the rules do not cover its excess — then it fails)."""
        if not self.over_bar or self.total_us is None:
            return None
        slow = [s for s in self.slow if s.excess_us > 0]
        if not slow or self.total_us - sum(s.excess_us for s in slow) > BAR * self.roofline_sum_us:
            return None
        worst = max(slow, key=lambda s: s.excess_us)
        more = f" (+{len(slow) - 1} more)" if len(slow) > 1 else ""
        return (f"{self.total_us / self.roofline_sum_us:.2f}x its roofline sum through measured rows: {worst.kernel} "
                f"[{worst.rows}] {worst.time_us / worst.roofline_us:.1f}x its roofline{more}: {worst.reason}")

    @property
    def plausible_time(self) -> bool:
        """Within the bar, or over it as a stated exception."""
        return not self.over_bar or self.exception is not None

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


def weight_floor_us(config_path: str | Path, tp: int, tokens: int, bandwidth_bytes_per_s: float,
                    graph: Any = None) -> float | None:
    """Every stored weight of a rank read once (the accountant's bytes at `tp`, quantization included), less the
    share a routed expert no token picks leaves unread: `tokens` × top-k picks miss one of E experts with
    probability (1 − 1/E)^(tokens·k); that share is taken off ALL the weights, so the floor is a lower bound.
    When the accountant has no builder for the architecture (a model's own code, e.g. MiniMax-M3-NVFP4's
    `MiniMaxM3SparseForConditionalGeneration`), the bytes are the partitioned kernel `graph`'s parameters
    (`serving.graph_deployment.graph_weight_bytes`, the checkpoint's quantization applied, as `kv` budgets them)
    and the experts its routed-experts kernels route over; None without either (no floor is claimed then)."""
    from graphsim.catalog import resolve_model
    from graphsim.errors import GraphsimError
    from graphsim.serving.memory import weight_bytes_per_rank
    from graphsim.work import accounting
    from graphsim.work.specs import MoeFfn

    resolved = resolve_model(str(config_path))
    try:
        acc = accounting(resolved.config)
    except GraphsimError:
        return _graph_weight_floor_us(graph, resolved.config, tokens, bandwidth_bytes_per_s) if graph else None
    moe = [(layer.ffn.experts, layer.ffn.top_k) for layer in acc.spec.stack.layers if isinstance(layer.ffn, MoeFfn)]
    untouched = _untouched_share(moe, tokens)
    return weight_bytes_per_rank(acc.spec, acc.precision, tp) * (1 - untouched) / bandwidth_bytes_per_s * 1e6


def _untouched_share(moe: list[tuple[int, int]], tokens: int) -> float:
    """The largest share of a layer's routed experts no pick touches: `tokens` × top-k picks miss one of E experts
    with probability (1 − 1/E)^(tokens·k), per (E, top-k) of the MoE layers; 0 without any."""
    return max(((1 - 1 / e) ** (tokens * k) for e, k in moe), default=0.0)


def _graph_weight_floor_us(graph: Any, config: Any, tokens: int, bandwidth_bytes_per_s: float) -> float:
    """`weight_floor_us` from a partitioned kernel graph (see there)."""
    from graphsim.ir import Op
    from graphsim.ir.geometry import MoeExpertsGeometry
    from graphsim.quantization import parse_quantization
    from graphsim.serving.graph_deployment import graph_weight_bytes

    weights, _ = graph_weight_bytes(graph, parse_quantization(config))
    moe = [(g.num_experts, g.top_k) for n in graph.nodes if n.op is Op.KERNEL
           for g in [n.kernel.geometry] if isinstance(g, MoeExpertsGeometry)]
    return weights * (1 - _untouched_share(moe, tokens)) / bandwidth_bytes_per_s * 1e6


def check_step(cm: Any, spec: str, config_path: str | Path) -> StepCheck:
    """Price `spec` (a batch spec, e.g. "decode:64x4096") on the cost model `cm` (`build_cost_model`) of the config
    at `config_path` and measure it against the two floors."""
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    step = parse_batch_spec(spec)
    rep = predict(cm, [step], [spec]).batches[0]
    hw = cm.pricer.hardware
    floor = weight_floor_us(config_path, cm.tp, step.tokens, hw.memory_bandwidth_bytes_per_s, cm.graph) if hw else None
    return StepCheck(rep.total_us, str(rep.source), [str(m) for m in rep.missing or []],
                     [(r.kernel, r.total_us or 0.0) for r in rep.rows if r.approximate],
                     float(cm.roofline_sum_us([step])[0]), floor, slow_kernels(cm, step))


def slow_kernels(cm: Any, step: Any) -> list[SlowKernel]:
    """The kernels of `step` priced from profile rows a `measured_slow` rule names, each with its time and its own
    roofline (both × the layers it stands for), slowest against its roofline first. Empty without a profile."""
    from graphsim.costing.measured_slow import rule_for
    from graphsim.costing.roofline import roofline_us

    hw, db = cm.pricer.hardware, cm.pricer.db
    if hw is None or db is None:
        return []
    ev = cm.evaluate([step])
    out = []
    for i, rows in enumerate(ev.rows):
        t = float(ev.leaf_time_us[i, 0])
        if not np.isfinite(t) or t <= 0:
            continue
        # every row the kernel was priced at must come from the same rule's rows (else it is not stated)
        rules = {rule_for(part.key, db.kernel_labels(part.key)) for part in rows.parts}
        rule = rules.pop() if len(rules) == 1 else None
        roofs = [roofline_us(hw, part.key, part.coords) for part in rows.parts] if rule else []
        if rule is None or any(r is None for r in roofs):
            continue
        roof = sum(float(np.sum(r)) for r in roofs if r is not None)
        if roof > 0:
            m = float(cm.tree.multiplicity[i])
            out.append(SlowKernel(cm.tree.leaves[i].name, f"{rule.label} {_key_text(rows.parts[0].key)}", rule.name,
                                  rule.reason, t * m, roof * m))
    return sorted(out, key=lambda s: -s.time_us / s.roofline_us)


def _key_text(key: Any) -> str:
    """A key's fields, compact: `hidden_size=2816 inter_size=704 … dtype=bf16`."""
    from dataclasses import fields

    return " ".join(f"{f.name}={getattr(key, f.name).value if hasattr(getattr(key, f.name), 'value') else getattr(key, f.name)}"
                    for f in fields(key))

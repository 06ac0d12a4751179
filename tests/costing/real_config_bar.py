"""Issue 16's bar for a real config, shared by the slow real-config tests (test_issue16_list.py, the list;
test_issue16_families.py, the families' other configs): the numbers are `graphsim.costing.plausibility`'s, the
same `benchmarks/architectures_e2e.py` prints."""

from __future__ import annotations

from pathlib import Path

SPEC = "decode:64x4096"


def assert_plausible(path: Path, profile, ep: int, stated: str | None = None) -> None:
    """Issue 16's bar for a real config's decode 64×4096 at TP8 (EP `ep`): every kernel priced, placeholders at
    most 1 % of the step, the step at least its weight-read floor and at most 3 × the sum of its kernels' roofline
    floors (`graphsim.costing.plausibility`). `stated`: the config is over 3 × only as the stated exception of the
    `costing/measured_slow.py` rule of that name (its measured rows' excess covers the step's; the rest of the step
    within 3 ×) — asserted, so a config that starts passing on its own, or through another rule, is noticed. The
    partition passes' conservation check runs inside `build_cost_model` (a failure raises). The time bar is
    asserted last."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.plausibility import BAR, check_step

    c = check_step(build_cost_model(str(path), "h200", tp=8, ep=ep, profile=profile), SPEC, path)
    assert c.total_us is not None, c.missing
    assert c.placeholder_us <= 0.01 * c.total_us, c.placeholders
    assert c.weight_floor_us is not None, "the accountant has no builder: no weight-read floor to hold it to"
    assert c.total_us >= c.weight_floor_us, (c.total_us, c.weight_floor_us)
    if stated is None:
        assert c.total_us <= BAR * c.roofline_sum_us, (c.total_us, c.roofline_sum_us, c.exception)
        return
    assert c.over_bar and c.exception is not None, (c.total_us, c.roofline_sum_us, [(s.rows, s.excess_us) for s in c.slow])
    assert any(s.rule == stated and s.excess_us > 0 for s in c.slow), [(s.rule, s.excess_us) for s in c.slow]

"""Non-gated routed experts priced from the gated experts' rows of the same geometry.

vLLM's fused MoE runs two grouped GEMMs per token-expert pair: w13 then w2 (model_executor/layers/fused_moe,
`fused_experts`). Gated experts (SiLU-and-mul) have w13 [E, 2·I, H] and w2 [E, H, I]: 3·I·H weights and
2·3·I·H FLOPs a pair. Non-gated experts (Nemotron-H's relu², FusedMoE activation="relu2_no_mul",
models/nemotron_h.py NemotronHMoE; vLLM's test_fused_marlin_moe_non_gated: "w1 has shape (e, n, k) instead of
(e, 2*n, k)") have w1 [E, I, H]: 2·I·H weights and FLOPs in proportion, the same w2, the same kernel.

The MoE tables hold gated experts only (aiconfigurator collector/vllm/collect_moe.py run_moe_torch builds w1 as
[E, 2·inter, hidden] for every model it times; graphsim's own profiler/moe.py likewise), so a non-gated key has
no rows of its own. `NonGatedCurve` takes the gated key's curve and scales each time by the ratio of the two
keys' roofline work at that point, the larger of the FLOPs ratio (2/3 exactly) and the bytes ratio (a little over
2/3: the token's in/out bytes do not shrink) — the kernel at the efficiency its gated rows show, on 2/3 of the
GEMM work. Such times are labelled `derived`; an extrapolated gated time stays `extrapolated`, so the pricer
holds it at the best share of the roofline the gated rows achieve, as for any extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from graphsim.costing.kernels import MoeKey, Point
from graphsim.costing.roofline import kernel_work
from graphsim.costing.timing import Timing

if TYPE_CHECKING:
    from graphsim.costing.hardware import HardwareSpec
    from graphsim.costing.interpolate import Evaluator


def gated_twin(key: MoeKey) -> MoeKey:
    """The gated key of the same geometry (whose rows a non-gated key is priced from)."""
    return replace(key, gated=True)


def work_ratio(key: MoeKey, coords: np.ndarray) -> np.ndarray:
    """Per point: max(FLOPs ratio, bytes ratio) of `key`'s roofline work to its gated twin's."""
    mine, gated = kernel_work(key, coords), kernel_work(gated_twin(key), coords)
    assert mine is not None and gated is not None  # a MoeKey always has a roofline work
    return np.maximum(mine.flops / gated.flops, mine.bytes / gated.bytes)


@dataclass
class NonGatedCurve:
    """Evaluates like `interpolate.Curve`: the gated twin's curve × `work_ratio` (see the module docstring)."""

    key: MoeKey
    gated: Evaluator

    @property
    def num_rows(self) -> int:
        return self.gated.num_rows

    def evaluate(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from graphsim.costing.interpolate import DERIVED, INTERPOLATED, MEASURED

        q = np.asarray(coords, dtype=np.float64).reshape(-1, len(self.key.POINT.__dataclass_fields__))
        t, s = self.gated.evaluate(q)
        t = t * work_ratio(self.key, q)  # NaN (missing) stays NaN
        s = s.copy()
        s[(s == MEASURED) | (s == INTERPOLATED)] = DERIVED
        return t, s

    def at(self, point: Point) -> Timing:
        from graphsim.costing.interpolate import timing_at

        got = timing_at(self, point)
        if got.time_us is None:
            return got
        return Timing(got.time_us, got.source,
                      f"non-gated experts: {self.num_rows} rows of the gated experts × their work ratio")

    def best_fraction(self, hardware: HardwareSpec) -> float | None:
        """The gated rows' best share of their roofline (the same kernel on the same geometry)."""
        return self.gated.best_fraction(hardware)

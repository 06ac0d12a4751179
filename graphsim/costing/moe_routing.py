"""The MoE routing model: how a step's tokens spread over the routed experts when their kernel is priced.

A MoE kernel's time depends on how many tokens each expert receives, which the model's router decides at
run time. graphsim states that assumption instead of leaving it implicit (`--moe-routing`):

- `balanced` — every expert gets the same share: the MoE rows measured with aiconfigurator's balanced
  router logits (collector helper `balanced_logits`: token i's k-th expert is (i + k·⌈E/k⌉) mod E).
- `power-law:ALPHA` — per-expert loads drawn from a power law of exponent ALPHA: the rows measured with
  aiconfigurator's `power_law_logits_v3` (collector/helper.py: loads sampled from x^-ALPHA on [1, 0.8·T]
  when T·topk > E, scaled to T·topk token-expert pairs, the busiest EP rank's experts timed), "simulating
  real-world load imbalance scenarios" (its docstring). The tables hold ALPHA = 1.01 and 1.2 only
  (`MoeRouting`); another exponent is refused rather than invented.
- `corpus:FILE.json` — a measured corpus of per-layer expert token counts, one list per expert per MoE
  layer, for one step (`{"layers": [[...], ...]}`) or several (`[{"layers": ...}, ...]`), the shape a
  routing capture yields (aiconfigurator collector/layerwise/fpm_ground_truth/routing_capture records
  counts[step, layer, expert]). Each layer-step gives the ratio r = max / mean expert load, and a layer
  of a step of T tokens is priced on the balanced rows at ⌈r·T⌉ tokens: the balanced batch whose every
  expert receives the busiest expert's load (the time of a grouped GEMM whose largest group sets its
  length). The MoE kernel's time is the mean of those times over the corpus's layer-steps (the cost tree
  prices one representative layer × the layer count), in at most `LOAD_BINS` equal-count bins of the sorted
  ratios (each bin at its mean ratio; exact when the corpus has no more layer-steps than bins). This leans
  high where the kernel is compute-bound (it prices r·T tokens of work, the layer has T) and is exact in
  the model's terms where the largest group dominates.

Default: `power-law:1.2`, aiconfigurator's own default for its static estimate (aiconfigurator_core
sdk/config.py `workload_distribution = "power_law"`; sdk/models/moe.py `_power_law_alpha = 1.2` for its
generic MoE model). Its DeepSeek-family models use 1.01 (sdk/models/deepseek.py), a choice made by model
name, which graphsim does not follow; on the H200 vLLM tables the two exponents differ by a few percent.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field, RootModel

from graphsim.costing.kernels import MoeRouting
from graphsim.errors import GraphsimError
from graphsim.validation import Strict, read_json, validate

CORPUS_FIX = ('write {"layers": [[tokens per expert, ...] per MoE layer]} for one step, or a list of such '
              "objects, as a routing capture yields")
LOAD_BINS = 16  # equal-count bins of a corpus's load ratios, each priced once per step (see the docstring)
POWER_LAW_ALPHAS = {float(r.value.removeprefix("power_law_")): r for r in MoeRouting if r.value.startswith("power_law_")}


class MoeRoutingError(GraphsimError):
    """A routing model that cannot be used (bad spelling, an exponent no table holds, a bad corpus)."""


@dataclass(frozen=True)
class RoutingModel:
    """Which MoE rows a step is priced on, and at how many tokens: with `loads`, the mean over its bins of the
    time at ratio × the step's tokens, each bin weighted by its share."""

    table: MoeRouting = MoeRouting.BALANCED  # the rows' routing column
    loads: tuple[tuple[float, float], ...] = ()  # corpus: (max/mean expert load ratio, share) per bin; () otherwise
    corpus: str = ""  # the corpus file, if any
    samples: int = 0  # corpus: layer-steps it averages
    experts: int = 0  # corpus: routed experts per layer (must be the model's)

    @property
    def mean_ratio(self) -> float:
        return sum(r * w for r, w in self.loads) if self.loads else 1.0

    @property
    def spec(self) -> str:
        """The option value that names this model."""
        if self.corpus:
            return f"corpus:{self.corpus}"
        if self.table is MoeRouting.BALANCED:
            return "balanced"
        return f"power-law:{self.table.value.removeprefix('power_law_')}"

    def describe(self) -> str:
        if self.corpus:
            lo, hi = self.loads[0][0], self.loads[-1][0]
            return (f"corpus {self.corpus} ({self.samples} layer-steps, max/mean expert load {self.mean_ratio:.3f} on "
                    f"average, {lo:.3f}–{hi:.3f} over {len(self.loads)} bins): each priced on the balanced rows at its "
                    "ratio × the step's tokens, averaged")
        if self.table is MoeRouting.BALANCED:
            return "balanced (every expert the same share; balanced rows)"
        return f"power-law α={self.table.value.removeprefix('power_law_')} ({self.table.value} rows)"



BALANCED = RoutingModel()
DEFAULT = RoutingModel(MoeRouting.POWER_LAW_1_2)  # see the module docstring for the evidence
DEFAULT_SPEC = DEFAULT.spec


class _Step(Strict):
    layers: Annotated[list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]], Field(min_length=1)]


class _Corpus(RootModel[_Step | Annotated[list[_Step], Field(min_length=1)]]):
    pass


def load_corpus(path: str) -> RoutingModel:
    """A corpus routing model from a JSON file of per-layer expert token counts (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise MoeRoutingError(f"no MoE routing corpus file '{path}'; {CORPUS_FIX}")
    try:
        doc = validate(_Corpus, read_json(p, "MoE routing corpus"), f"MoE routing corpus {path}", CORPUS_FIX).root
    except ValueError as e:
        raise MoeRoutingError(str(e)) from None
    steps = doc if isinstance(doc, list) else [doc]
    ratios = []
    experts = {len(layer) for s in steps for layer in s.layers}
    if len(experts) != 1:
        raise MoeRoutingError(f"MoE routing corpus {path}: layers list {sorted(experts)} experts; every layer must "
                              "list the token count of every routed expert")
    for s in steps:
        for layer in s.layers:
            total = sum(layer)
            if total > 0:
                ratios.append(max(layer) * len(layer) / total)
    if not ratios:
        raise MoeRoutingError(f"MoE routing corpus {path}: every layer has zero tokens; {CORPUS_FIX}")
    ratios.sort()
    k = min(LOAD_BINS, len(ratios))
    bounds = [round(i * len(ratios) / k) for i in range(k + 1)]
    loads = tuple((sum(ratios[a:b]) / (b - a), (b - a) / len(ratios)) for a, b in itertools.pairwise(bounds) if b > a)
    return RoutingModel(MoeRouting.BALANCED, loads, str(path), len(ratios), experts.pop())


def parse_routing(spec: str | None) -> RoutingModel:
    """`balanced`, `power-law[:ALPHA]` or `corpus:FILE.json` (None: the default)."""
    if spec is None:
        return DEFAULT
    s = spec.strip()
    low = s.lower().replace("_", "-")
    if low == "balanced":
        return BALANCED
    if low.startswith("corpus:"):
        return load_corpus(s.split(":", 1)[1])
    if low == "power-law" or low.startswith("power-law:"):
        text = low.split(":", 1)[1] if ":" in low else DEFAULT.table.value.removeprefix("power_law_")
        try:
            alpha = float(text)
        except ValueError:
            alpha = math.nan
        table = POWER_LAW_ALPHAS.get(alpha)
        if table is None:
            have = ", ".join(f"{a:g}" for a in sorted(POWER_LAW_ALPHAS))
            raise MoeRoutingError(f"--moe-routing {spec}: the MoE tables hold power-law rows at α = {have} only; "
                                  f"use one of them, balanced, or corpus:FILE.json")
        return RoutingModel(table)
    raise MoeRoutingError(f"--moe-routing {spec}: use balanced, power-law[:ALPHA] (α = "
                          f"{', '.join(f'{a:g}' for a in sorted(POWER_LAW_ALPHAS))}) or corpus:FILE.json")

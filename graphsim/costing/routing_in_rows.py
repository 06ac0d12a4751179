"""MoE routing inside the experts' measured rows: the router's top-k kernel priced by its neighbour's row.

graphsim launches a MoE layer as router GEMM → top-k (`topk_softmax` / `grouped_topk`, the `moe_router` rule) →
experts (`fused_moe`), each priced on its own. Where the profile's rows for the experts were timed from the router
logits, the top-k is already in them, and pricing it again counts it twice. So a router kernel whose experts are
priced from such rows is no leaf of the cost tree: its time is in the experts' row.

Which rows: decided by what the table's collector timed, which the rows' `kernel` label (aiconfigurator's
`kernel_source` column, kept by the importer) names. ai-dynamo/aiconfigurator, per collector (docs/cost-model.md
"Router top-k inside MoE rows" has the table with the line of each):

- vLLM, `collector/vllm/collect_moe.py` from d5bad971c (`__compat__ = "vllm==0.24.0"`, the commit that also added
  the 0.24.0 `moe_perf` tables): every dtype is a `FusedMoE(...)` module timed as `moe_module(hidden_states,
  router_logits)`, label `vllm_<quant method>_<backend>_<experts class>`. In vLLM 0.24.0 that call routes inside
  (`runner/moe_runner.py` `MoERunner._apply_quant_method`: a monolithic kernel takes the logits, else
  `self.router.select_experts` — `FusedTopKRouter` → `ops.topk_softmax`, `GroupedTopKRouter` → `ops.grouped_topk`,
  the model's own scoring and bias). The gate GEMM is not in it (the collector builds the module without `gate`),
  nor shared experts (none given), nor an all-reduce (one rank, world size 1).
- vLLM, the collectors before it (`vllm>=0.14.0` / `vllm>=0.17.0`, the 0.14.0 and 0.19.0 tables): `vllm_mxfp4_moe`
  rows time `FusedMoE.forward(hidden_states, router_logits)` (routing in); `vllm_fused_moe`, `vllm_marlin_moe`,
  `vllm_marlin_int4_moe` and `vllm_flashinfer_trtllm_moe_fp4` rows time `fused_experts(...)` /
  `trtllm_fp4_block_scale_routed_moe` on top-k ids computed (`torch.topk` + softmax) before the timed function
  (routing out).
- TensorRT-LLM, `collector/trtllm/collect_moe*.py` (every version, labels `moe_torch_flow*`): `create_moe(...)`'s
  module timed as `moe.forward(hidden_states, router_logits)` with a `RenormalizeMoeRoutingMethod` /
  `DeepseekV3Gate` routing method: routing in.
- SGLang, `collector/sglang/collect_moe.py` (0.5.10 and 0.5.14 tables, labels `sglang_*`): with one EP rank the timed
  op runs `select_experts` (or the framework `TopK` layer) on the logits: routing in; with EP > 1 the plain Triton
  and Marlin paths take a rank-0 workload's precomputed top-k (routing out) while the framework path routes, and the
  label does not say which ran: not assumed.

A label no rule names (graphsim's own profiler, another importer) is not assumed to hold the routing, nor are rows
for a different key (a geometry-interpolated or derived pricing): their router stays priced.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import KernelKey, MoeKey
from graphsim.ir import Node
from graphsim.ir.kernel import KernelKind

if TYPE_CHECKING:
    from graphsim.costing.interpolate import KernelPricer

RowLabels = Callable[[KernelKey], set[str]]  # the `kernel` labels of the profile's rows for a key (empty: no rows)


def pricer_row_labels(pricer: KernelPricer) -> RowLabels | None:
    """The collector labels of a key's own rows in the pricer's profile (none for a key the pricer prices from
    another key's rows, or without rows); None without a profile. The cost model and the pipeline's stage trees
    both build with it."""
    db = pricer.db
    if db is None:
        return None
    return lambda key: db.kernel_labels(key) if pricer.curve(key) is not None else set()


@dataclass(frozen=True)
class LabelRule:
    """Rows whose label matches `pattern` were timed with (True) / without (False) the routing; None: the label does
    not decide it (`ep1_only`: in only when the key has one EP rank)."""

    pattern: str
    routing_in: bool
    source: str
    ep1_only: bool = False

    def applies(self, label: str) -> bool:
        return re.fullmatch(self.pattern, label) is not None


_AIC = "ai-dynamo/aiconfigurator "
RULES: tuple[LabelRule, ...] = (
    # the collectors before vLLM 0.24 (explicit labels: collect_moe.py @ e015c0ed6 lines 715-721)
    LabelRule("vllm_mxfp4_moe", True, _AIC + "collector/vllm/collect_moe.py @e015c0ed6 run_moe_torch: "
              "moe_module.forward(hs, router_logits), 'does routing internally' (l. 646)"),
    LabelRule("vllm_(fused_moe|marlin_moe|marlin_int4_moe|flashinfer_trtllm_moe_fp4)", False,
              _AIC + "collector/vllm/collect_moe.py @e015c0ed6 run_moe_torch: fused_experts(hs, w1, w2, topk_weights, "
              "topk_ids) on torch.topk + softmax computed before the timed function (l. 528-558, 663-685)"),
    # the vLLM 0.24.0 collector: vllm_<quant method>_<backend>_<experts class>[_situ_as_silu]
    LabelRule(r"vllm_[a-z0-9]*moe_[a-z0-9_]+_([a-z0-9]*experts[a-z0-9]*|direct)(_situ_as_silu)?", True,
              _AIC + "collector/vllm/collect_moe.py @d5bad971c run_moe_torch: FusedMoE(...) timed as "
              "moe_module(hidden_states, router_logits) (l. 442, 569); vLLM 0.24.0 runner/moe_runner.py "
              "_apply_quant_method: router.select_experts or the monolithic kernel on the logits"),
    LabelRule(r"moe_torch_flow.*", True, _AIC + "collector/trtllm/collect_moe.py (and _v1/_v2/_v3) run_moe_torch: "
              "moe.forward(hidden_states, router_logits) with the routing method in the module"),
    LabelRule(r"sglang_.*", True, _AIC + "collector/sglang/collect_moe.py @c54c0927e / @e23be5a79: one EP rank: "
              "select_experts(x, gating) (or the TopK layer) inside the timed op; EP > 1: rank-0 precomputed top-k "
              "on the plain paths", ep1_only=True),
)


def rule_for(label: str) -> LabelRule | None:
    return next((r for r in RULES if r.applies(label)), None)


def routing_in_row(key: KernelKey, labels: set[str]) -> bool:
    """Whether the rows of MoE experts `key` carrying `labels` were timed with the routing inside: every label is
    named by a rule that says so (an EP-1-only rule only for a key of one EP rank); no labels: no."""
    if not isinstance(key, MoeKey) or not labels:
        return False
    for label in labels:
        rule = rule_for(label)
        if rule is None or not rule.routing_in or (rule.ep1_only and key.ep != 1):
            return False
    return True


def _values(n: Node) -> list[str]:
    return [n.name if i == 0 else f"{n.name}#{i}" for i in range(len(n.outputs))]


def routers_in_expert_rows(nodes: list[Node], dtypes: Dtypes, row_labels: RowLabels) -> frozenset[str]:
    """The names of the router (top-k) kernels among `nodes` (one layer's kernels) whose experts' measured rows
    include the routing (module docstring): each feeds only routed-experts kernels whose own key's rows are
    labelled by a collector that timed from the router logits."""
    users: dict[str, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    out: set[str] = set()
    for r in nodes:
        if r.kernel.kind is not KernelKind.MOE_ROUTER:
            continue
        experts = {u.name: u for v in _values(r) for u in users.get(v, []) if u.kernel.kind is KernelKind.MOE_EXPERTS}
        if not experts:
            continue
        keys = [key_for(e.kernel, dtypes) for e in experts.values()]
        if all(routing_in_row(k, row_labels(k)) for k in keys):
            out.add(r.name)
    return frozenset(out)

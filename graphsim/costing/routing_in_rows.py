"""MoE routing inside the experts' measured rows: the router's top-k kernel priced by its neighbour's row.

graphsim's vLLM target launches a MoE layer as router GEMM → top-k (`topk_softmax` / `grouped_topk`, the
`moe_router` rule) → experts (`fused_moe`), each priced on its own. Where the profile's rows for the experts were
timed from the router logits, the top-k is already in them, and pricing it again counts it twice. So a router
kernel whose experts are priced from such rows is no leaf of the cost tree: its time is in the experts' row.

Which rows. aiconfigurator's vLLM MoE collector times the MXFP4 experts (`moe_dtype` `w4a16_mxfp4` /
`w4a8_mxfp4_mxfp8`) through vLLM's `FusedMoE` module, `FusedMoE.forward(hidden_states, router_logits)` with
synthetic router logits — "mxfp4 path uses FusedMoE.forward(hidden_states, router_logits) which does routing
internally; other paths need pre-computed topk_weights/topk_ids" (ai-dynamo/aiconfigurator
collector/vllm/collect_moe.py, `run_moe_torch`, every version with the MXFP4 path, `__compat__ = "vllm>=0.17.0"`).
That matches what vLLM runs for gpt-oss on Hopper: the MXFP4 backend is OpenAI's Triton kernels
(model_executor/layers/fused_moe/oracle/mxfp4.py, `OAITritonMxfp4ExpertsMonolithic` first), a monolithic expert
that takes the gating output and routes itself (fused_moe/gpt_oss_triton_kernels_moe.py
`triton_kernel_moe_forward`: `legacy_routing(gating_output, topk, ...)` — triton_kernels' top-k and routing
metadata — then `matmul_ogs` twice; vLLM 0.19.0; vLLM PR #39714 counts that routing chain at 14 kernel launches at
decode sizes on H100, vLLM 0.20.1). The router GEMM that makes the logits stays a kernel of its own
(the collector feeds logits, it does not time the gate).

Not covered: the other dtypes' rows. The collector versions read time bf16 / fp8 experts either through
`fused_experts(..., topk_weights, topk_ids)` with the top-k done outside the timing, or (the newest, bf16 only)
through the module; which one produced a given table is not recorded in it, so their router kernels stay priced.
Without rows for the experts (derived / roofline pricing) the router stays priced too.
"""

from __future__ import annotations

from collections.abc import Callable

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import KernelKey, MoeKey
from graphsim.ir import Node
from graphsim.ir.kernel import KernelKind

# moe_dtype values whose rows the collector times from router logits (collect_moe.py `_MXFP4_MOE_TYPES`)
ROUTING_IN_ROWS: frozenset[KernelDtype] = frozenset({KernelDtype.W4A16_MXFP4, KernelDtype.W4A8_MXFP4_MXFP8})

RULE = ("aiconfigurator collector/vllm/collect_moe.py run_moe_torch: MXFP4 rows time FusedMoE.forward(hidden_states, "
        "router_logits), routing included (vLLM: gpt_oss_triton_kernels_moe.py triton_kernel_moe_forward routes "
        "from the gating output)")


def _values(n: Node) -> list[str]:
    return [n.name if i == 0 else f"{n.name}#{i}" for i in range(len(n.outputs))]


def routers_in_expert_rows(nodes: list[Node], dtypes: Dtypes, has_rows: Callable[[KernelKey], bool]) -> frozenset[str]:
    """The names of the router (top-k) kernels among `nodes` (one layer's kernels) whose experts' measured rows
    include the routing (module docstring): each feeds a routed-experts kernel keyed on a dtype in
    `ROUTING_IN_ROWS` that the profile has rows for."""
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
        if all(isinstance(k, MoeKey) and k.dtype in ROUTING_IN_ROWS and has_rows(k) for k in keys):
            out.add(r.name)
    return frozenset(out)

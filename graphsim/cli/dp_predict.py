"""`graphsim predict --data-parallel-size N [--enable-expert-parallel] [--all2all-backend B]`: vLLM's
data-parallel attention on a MoE model (costing/dp_attention.py), and how those options meet `--ep`."""

from __future__ import annotations

import json

import typer

from graphsim.cli.app import console, err_console
from graphsim.costing.cost_model import CostModel
from graphsim.versions import versions
from graphsim.workload import Step


def expert_parallel_size(tp: int, ep: int, dp: int, enable_expert_parallel: bool, all2all_backend: str | None) -> int:
    """The `--ep` the TP-only path prices with, after reconciling graphsim's `--ep N` with vLLM's options.

    dp 1: `--enable-expert-parallel` is vLLM's TP+EP (EP = tp), the same as `--ep <tp>`. dp > 1: the experts'
    spread is vLLM's (dp × tp), so `--ep` may only restate it (`--ep <dp × tp>` = `--enable-expert-parallel`);
    the graph is then partitioned for tp only and `ep` returned is 1."""
    if dp == 1:
        if all2all_backend is not None:
            raise typer.BadParameter("prices the MoE exchange of data-parallel attention; give --data-parallel-size "
                                     ">= 2 (EP within a TP group exchanges nothing: vLLM all-reduces the experts' output)",
                                     param_hint="--all2all-backend")
        if enable_expert_parallel:
            if ep not in (1, tp):
                raise typer.BadParameter(f"--enable-expert-parallel spreads the experts over the {tp} TP rank(s) "
                                         f"(EP = tp = {tp}); --ep {ep} says otherwise", param_hint="--ep")
            return tp
        return ep
    if ep not in (1, dp * tp):
        raise typer.BadParameter(f"with --data-parallel-size {dp} the experts spread over dp × tp = {dp * tp} GPUs: "
                                 f"give --enable-expert-parallel (or --ep {dp * tp}), not --ep {ep}", param_hint="--ep")
    return 1


def predict_data_parallel(cm: CostModel, specs: list[str], tp: int, dp: int, enable_expert_parallel: bool,
                          all2all_backend: str | None, as_json: bool, profile: str | None, gpu: str) -> list[Step]:
    """Print the data-parallel prediction of a MoE model and return []; for a dense model (independent
    replicas, every replica's step the one `predict` prices) say so and return the steps to price as usual."""
    from graphsim.costing.all2all import DEFAULT_ALL2ALL_BACKEND
    from graphsim.costing.dp_attention import DataParallelMoe, moe_leaf_indices, parse_rank_batches, price_dp_steps
    from graphsim.workload import parse_batch_spec

    if not moe_leaf_indices(cm.tree):
        if enable_expert_parallel or all2all_backend:
            raise typer.BadParameter(f"{cm.graph.name} has no routed experts, nothing to spread or exchange",
                                     param_hint="--enable-expert-parallel/--all2all-backend")
        err_console.print(f"{cm.graph.name} is dense: --data-parallel-size {dp} is {dp} independent replicas, each "
                          "running the step priced below", highlight=False)
        return [parse_batch_spec(s) for s in specs]
    plan = DataParallelMoe(dp, tp, enable_expert_parallel or cm.ep > 1, all2all_backend or DEFAULT_ALL2ALL_BACKEND)
    prices = price_dp_steps(cm, plan, [parse_rank_batches(s, dp) for s in specs], specs)
    hardware = cm.hardware.id if cm.hardware else "none"
    if as_json:
        out = {"model": cm.graph.name, "hardware": hardware, "profile": cm.profile, "data": cm.data_note,
               "moe_routing": cm.moe_routing or None,
               "data_parallel": {"data_parallel_size": dp, "tensor_parallel_size": tp,
                                 "enable_expert_parallel": plan.enable_expert_parallel, "moe_tp": plan.moe_tp,
                                 "moe_ep": plan.moe_ep, "all2all_backend": plan.all2all_backend,
                                 "describe": plan.describe()},
               "batches": [p.to_json() for p in prices], "versions": versions(profile, gpu)}
        print(json.dumps(out, indent=1, default=str))
        return []
    from graphsim.render.dp_view import render_dp

    console.print(render_dp(cm.graph.name, hardware, cm.data_note, plan, prices))
    return []

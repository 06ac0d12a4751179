"""Rich rendering of data-parallel attention steps (`costing.dp_attention`): the lockstep composition as a tree —
Max over DP ranks of each rank's own part, then the MoE layers once — every time with its source."""

from __future__ import annotations

import math

from rich.console import Group
from rich.markup import escape
from rich.tree import Tree

from graphsim.costing.dp_attention import DataParallelMoe, DpStepPrice
from graphsim.render.cost_view import SOURCE_STYLE, fmt_us


def _t(v: float) -> str:
    return fmt_us(None if math.isnan(v) else v)


def _src(s: str) -> str:
    return f"[{SOURCE_STYLE.get(s, '')}]{s}[/]"


def step_tree(p: DpStepPrice, plan: DataParallelMoe) -> Tree:
    root = Tree(f"[bold]{escape(p.spec)}[/]: {_t(p.total_us)} [{_src(p.source)}]  ({p.global_tokens} tokens over "
                f"{plan.dp} DP ranks)")
    ranks = root.add(f"max over {plan.dp} DP ranks (attention, dense layers, router, norms …): "
                     f"{_t(p.attention_us)} [{_src(p.sources.get('attention', 'missing'))}] — slowest rank "
                     f"{p.slowest_rank}")
    for r, (tok, us) in enumerate(zip(p.rank_tokens, p.rank_us, strict=True)):
        ranks.add(f"rank {r}: {tok} token(s){' (idle: dummy batch)' if tok == 0 else ''}, {_t(us)}")
    moe = root.add(f"MoE layers ×{p.moe_layers}, lockstep over all ranks ({escape(plan.describe())})")
    moe.add(f"routed experts at {p.global_tokens} global tokens: {_t(p.experts_us)} "
            f"[{_src(p.sources.get('experts', 'missing'))}]")
    moe.add(f"dispatch: {_t(p.dispatch_us)} [{_src(p.sources.get('exchange', 'missing'))}]")
    moe.add(f"combine: {_t(p.combine_us)} [{_src(p.sources.get('exchange', 'missing'))}]")
    if p.shared_us:
        moe.add(f"shared experts on the aux stream (slowest rank): {_t(p.shared_us)}; hidden by the overlap: "
                f"−{_t(p.hidden_us)}")
    notes = root.add("[dim]notes[/]")
    for n in p.notes:
        notes.add(f"[dim]{escape(n)}[/]")
    return root


def render_dp(model: str, hardware: str, data_note: str, plan: DataParallelMoe, steps: list[DpStepPrice]) -> Group:
    head = (f"[bold]{escape(model)}[/] on [bold]{escape(hardware)}[/]: {escape(plan.describe())}\n"
            f"[dim]{escape(data_note)}[/]")
    return Group(head, *(step_tree(p, plan) for p in steps))

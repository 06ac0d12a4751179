"""The search with speculative decoding on: a candidate's cost tables, its steady state and its simulation when the
search's base deployment carries vLLM's `speculative_config` (search_eval.py calls these; `graphsim search
--speculative-config` runs the search with it off and on, cli/search_spec.py).

- Cost: `SpecIterationCost` over the partition's target tables and the draft's (spec_cost.py), sized for
  max_num_seqs × (k + 1) rows.
- Steady state (steady.py): a decoding request emits E = 1 + Σ Π a_j tokens a step, so its osl − 1 decode tokens
  take (osl − 1)/E steps. The steady point is computed for osl' = 1 + round((osl − 1)/E) with each decode step
  priced as a speculative step (k drafts a decoding sequence: `DraftTokens`), then its output tokens/s are
  scaled by osl/osl' and its TPOT is the decode time spread over osl − 1 tokens. A mixed step's prompt chunk
  keeps its max_num_batched_tokens − decodes size (vLLM's budget, counting the drafts, would shorten it). The steady point's mean decode context is
  then isl + (osl' − 2)/2, shorter than the true isl + (osl − 2)/2 (an attention underestimate the simulated
  verification, at true contexts, does not have).
- Simulation: the candidate's setup with `SpecSimulation` (acceptance sampled per step, seeded by the search's seed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from graphsim.serving.speculative import Acceptance, SpecSimulation, SpeculativeConfig, parse_speculative_config


def context_speculation(ctx: Any) -> tuple[SpeculativeConfig, Acceptance] | None:
    """The search context's speculative config and acceptance (None when off)."""
    raw = ctx.base.speculative_config
    if not raw:
        return None
    from graphsim.serving.speculative import DEFAULT_RATE

    spec = parse_speculative_config(raw, ctx.model.config)
    rates = tuple(ctx.spec_acceptance) or (DEFAULT_RATE,) * spec.k
    return spec, Acceptance(rates)


def spec_partition_cost(ctx: Any, tp: int, ep: int, spec: SpeculativeConfig) -> Any:
    """The speculative iteration cost of one (TP, EP) partition of the search's graph."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.serving.pricing import iteration_cost
    from graphsim.serving.spec_cost import SpecIterationCost, speculative_pricer

    db = ProfileDB.open(ctx.profile) if ctx.profile else None
    cm = build_cost_model(ctx.graph, ctx.hardware, tp=tp, ep=ep, dtype=ctx.base.dtype, kv_dtype=ctx.base.kv_cache_dtype,
                          profile=db, default_profile=False, moe_routing=ctx.routing)
    rows = ctx.max_seqs * (spec.k + 1)
    # the steady state (steady.py) packs a mixed step's prompt chunk to max_num_batched_tokens counting a decode as
    # one token, so its speculative steps may reach k more a sequence (vLLM's budget would shorten the chunk)
    tokens = ctx.max_tokens + spec.k * ctx.max_seqs
    vocab = int(ctx.model.config.get("vocab_size") or 0) or int((ctx.model.config.get("text_config") or {}).get(
        "vocab_size") or 0)
    pricer = speculative_pricer(cm, spec, vocab)
    target = iteration_cost(cm.tree, cm.pricer, cm.dtypes, tokens, rows, ctx.max_context)
    draft = None
    if pricer.draft is not None:
        assert pricer.draft_pricer is not None and pricer.draft_dtypes is not None
        draft = iteration_cost(pricer.draft, pricer.draft_pricer, pricer.draft_dtypes, tokens, rows, ctx.max_context)
    return SpecIterationCost(target, draft, spec.k, vocab, pricer.bandwidth)


class DraftTokens:
    """A speculative cost seen by callers that count one token a decoding sequence (steady.py): each decoding
    sequence's k drafts are added to the step's tokens."""

    def __init__(self, cost: Any, k: int) -> None:
        self.cost, self.k = cost, k

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        return self.cost.step_us(tokens + self.k * dec_count, seqs, dec_count, dec_ctx_mean, chunks)

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int):
        return self.cost.decode_run_us(batch, ctx_mean0, k)


def steady_osl(osl: int, acceptance: Acceptance) -> int:
    """Decode steps + 1 of a request of `osl` output tokens at E tokens a step."""
    return 1 + max(round((osl - 1) / acceptance.expected_tokens()), 1) if osl > 1 else osl


def spec_steady(ctx: Any, c: Any, spec: SpeculativeConfig, acceptance: Acceptance, steady_of) -> Any:
    """The steady-state evaluation of candidate `c` with speculative decoding (module docstring): `steady_of(ctx, c,
    isl, osl, cost_of)` (search_eval's) at osl' decode steps with speculative step costs, rescaled to osl tokens."""
    from graphsim.serving.search_eval import partition_cost

    isl, osl = round(ctx.isl.mean), round(ctx.osl.mean)
    steps = steady_osl(osl, acceptance)
    ev = steady_of(ctx, c, isl, steps, lambda cx, tp, ep: DraftTokens(partition_cost(cx, tp, ep), spec.k))
    if osl <= 1 or steps <= 1:
        return ev
    tpot_ms = ev.tpot_ms * (steps - 1) / (osl - 1)
    return replace(ev, output_tokens_per_s_per_gpu=ev.output_tokens_per_s_per_gpu * osl / steps, tpot_ms=tpot_ms,
                   tokens_per_s_per_user=1e3 / tpot_ms if tpot_ms > 0 else ev.tokens_per_s_per_user)


def with_speculation(ctx: Any, setup: Any) -> Any:
    """A candidate's simulation setup with speculative steps, when the search has them on."""
    sp = context_speculation(ctx)
    if sp is None:
        return setup
    return replace(setup, speculative=SpecSimulation(sp[0], sp[1], ctx.seed))

"""A deployment with speculative decoding: the draft's KV layers and weights in the memory budget and the KV layout,
and the simulator's iteration cost (target verification + draft passes + samplers, spec_cost.py).

vLLM puts the draft's attention layers in the same KV-cache config as the target's
(vllm/v1/worker/gpu_model_runner.py `get_kv_cache_spec` walks every attention layer of the loaded model, the
drafter's included), so an MTP layer of the target's kind joins the target's KV-cache group and every block holds
one more layer; an EAGLE head's layers (their own kv heads) form their own bucket. The draft's weights are loaded
beside the target's before the KV cache is sized (`load_model` loads the drafter, `determine_available_memory`
runs after), so they come off the KV budget:

- mtp: one decoder layer of the target's last layer's kind per MTP layer (`weight_bytes_per_rank` of the stack
  with those layers added, less the stack without), plus `eh_proj` (2·hidden × hidden, replicated: `nn.Linear`)
  and `enorm`/`hnorm`; the embedding and LM head are shared with the target (vLLM's EAGLE/MTP loader shares them
  when the shapes match, vllm/v1/spec_decode/eagle.py `load_model`);
- eagle / eagle3 / draft_model: the draft config's own weights per rank (the accountant's stored bytes), its LM
  head and embedding included (an upper bound where vLLM shares them);
- ngram: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from graphsim.serving.capacity import kv_capacity
from graphsim.serving.kv_layout import LayerKv, kv_layout, layer_kv, with_mamba_cache_mode
from graphsim.serving.memory import BudgetTerm, MemoryBudget, weight_bytes_per_rank
from graphsim.serving.speculative import SpeculativeConfig, SpeculativeError, mtp_layers, parse_speculative_config

if TYPE_CHECKING:
    from graphsim.costing.moe_routing import RoutingModel
    from graphsim.serving.deployment import Deployment


@dataclass(frozen=True)
class DraftFootprint:
    """The draft's per-rank memory: its KV layers and its weights."""

    layers: tuple[LayerKv, ...]
    weight_bytes: int
    how: str


def draft_footprint(dep: Deployment, spec: SpeculativeConfig) -> DraftFootprint:
    acc, tp = dep.accountant, dep.tp
    if spec.method == "ngram":
        return DraftFootprint((), 0, "n-gram: no draft model")
    if spec.method == "mtp":
        n = mtp_layers(dep.model.config)
        if n == 0:
            raise SpeculativeError(f"{dep.model.architecture} has no multi-token-prediction layers; method mtp cannot run "
                                   "on it")
        s = acc.spec
        last = s.stack.layers[-1]
        more = replace(s, stack=replace(s.stack, layers=s.stack.layers + (last,) * n))
        layer_bytes = weight_bytes_per_rank(more, acc.precision, tp) - weight_bytes_per_rank(s, acc.precision, tp)
        w = acc.precision.weight.bytes_per_element
        extra = n * (2 * s.hidden * s.hidden + 2 * s.hidden) * w  # eh_proj (replicated) + enorm, hnorm
        kv = layer_kv(replace(s, stack=replace(s.stack, layers=(last,) * n)), tp, acc.precision)
        return DraftFootprint(kv, int(layer_bytes + extra),
                              f"{n} MTP layer(s) of the last layer's kind + eh_proj {2 * s.hidden}×{s.hidden} "
                              "(replicated) + enorm/hnorm; embedding and LM head shared with the target")
    from graphsim.serving.speculative import draft_model
    from graphsim.work import accounting

    draft = draft_model(spec)
    dacc = accounting(draft.config, dtype=dep.dtype, kv_dtype=dep.kv_dtype)
    kv = layer_kv(dacc.spec, tp, dacc.precision)
    return DraftFootprint(kv, weight_bytes_per_rank(dacc.spec, dacc.precision, tp),
                          f"draft {draft.name}: {len(kv)} layer(s), its weights whole (embedding and head included)")


def with_speculation(dep: Deployment, spec: SpeculativeConfig) -> Deployment:
    """`dep` with the draft's KV layers in its layout, its weights in the budget, and the capacity recomputed."""
    spec.check_tp(dep.tp)
    fp = draft_footprint(dep, spec)
    layout = dep.layout
    notes = list(layout.notes)
    acc, e = dep.accountant, dep.engine
    # a gated delta net's conv state keeps num_speculative_tokens more columns (gated_delta_net_state_shape's
    # num_spec): the layout is rebuilt from the spec with the draft's layers, the scheduler's block size as given
    rebuilt = kv_layout(acc.spec, acc.precision, dep.tp, dep.config.engine.block_size, num_spec=spec.k,
                        extra_layers=fp.layers)
    if fp.layers or rebuilt.layers != layout.layers:
        notes = list(rebuilt.notes)  # the target's layout notes, for the rebuilt pool
        if fp.layers:
            notes.append(f"speculative decoding ({spec.describe()}): {len(fp.layers)} draft layer(s) keep KV in the "
                         f"same block pool ({sum(x.bytes_per_token for x in fp.layers)} B a token a rank)")
        layout = replace(layout, layers=rebuilt.layers, groups=rebuilt.groups, block_size=rebuilt.block_size)
    if layout.attention_and_state:
        # a state group holds num_speculative_tokens more pages a request (MambaSpec num_speculative_blocks), on
        # top of mamba_cache_mode's 1 ("none") or 2 ("align" with prefix caching, as deployment.py decides)
        align = e.enable_prefix_caching and e.profile.mamba_align_with_prefix_caching
        layout = with_mamba_cache_mode(replace(layout, notes=()), "align" if align else "none",
                                       speculative_blocks=spec.k)
        notes = [n for n in notes if not n.startswith("mamba_cache_mode")] + list(layout.notes)
    if spec.num_lookahead_tokens:
        notes.append(f"speculative decoding: {spec.num_lookahead_tokens} lookahead slot(s) a decoding request "
                     "(vLLM Scheduler num_lookahead_tokens)")
    layout = replace(layout, notes=tuple(notes))
    budget = dep.budget
    if fp.weight_bytes:
        term = BudgetTerm("draft weights", fp.weight_bytes, "derived", fp.how)
        budget = MemoryBudget(budget.total_bytes, budget.utilization, (*budget.terms, term), budget.given_available)
    e = dep.engine
    cap = kv_capacity(layout, budget.available_bytes, e.max_model_len, e.max_in_flight_tokens, e.profile)
    return replace(dep, layout=layout, budget=budget, capacity=cap)


def deployment_speculation(dep: Deployment) -> SpeculativeConfig | None:
    """The deployment's parsed `speculative_config` (None when off)."""
    raw = dep.config.speculative_config
    if not raw:
        return None
    return parse_speculative_config(raw, dep.model.config)


def speculative_cost(dep: Deployment, spec: SpeculativeConfig, profile: str | None = None, target: str = "vllm",
                     moe_routing: RoutingModel | None = None) -> tuple[Any, str, int]:
    """The simulator's iteration cost with speculation (spec_cost.SpecIterationCost): the target's and the draft's
    tables over max_num_seqs × (k + 1) rows. Returns (cost, what the numbers rest on, kernels of the target)."""
    from graphsim.serving.pricing import iteration_cost
    from graphsim.serving.spec_cost import SpecIterationCost, speculative_pricer

    cm = dep.cost_model(profile, target, moe_routing)
    e = dep.engine
    rows = e.max_num_seqs * (spec.k + 1)
    tokens = max(e.max_num_batched_tokens, rows)
    vocab = dep.vocab
    pricer = speculative_pricer(cm, spec, vocab)
    target_cost = iteration_cost(cm.tree, cm.pricer, cm.dtypes, tokens, rows, e.max_model_len)
    draft_cost = None
    if pricer.draft is not None:
        assert pricer.draft_pricer is not None and pricer.draft_dtypes is not None
        draft_cost = iteration_cost(pricer.draft, pricer.draft_pricer, pricer.draft_dtypes, tokens, rows,
                                    e.max_model_len)
    cost = SpecIterationCost(target_cost, draft_cost, spec.k, vocab, pricer.bandwidth)
    note = f"{cm.data_note}; MoE routing: {cm.moe_routing}" if cm.moe_routing else cm.data_note
    return cost, f"{note}; speculative decoding {spec.describe()}: {pricer.draft_note}", cm.kernels

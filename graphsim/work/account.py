"""The accountant: necessary FLOPs, bytes and parameters of a `ModelSpec` for a `Step`.

Conventions (stated once here, used everywhere; see also `attention_work`):

- FLOPs count multiply-adds as 2: a matmul of (m × k) by (k × n) is 2·m·n·k. Weight matmuls see
  T = all new tokens of the step, routed experts see T·k token-expert pairs, the LM head sees one
  row per sequence (the position whose next token is sampled). Elementwise work (norms,
  activations, rotary, softmax, residual adds, biases) is not counted.
- Parameter bytes: each parameter the step needs is read once, in its stored form (quantized
  matrices with their scales). Routed experts: expected distinct experts touched under uniform
  routing, E·(1 − (1 − k/E)^T), worst case min(E, T·k). Embedding: min(T, vocab) rows. A tied head
  reads the whole table.
- Activations between kernels are not counted (a fused implementation need not spill them).
"""

from __future__ import annotations

from collections import Counter

from graphsim.work.attention_work import attention_core
from graphsim.work.dtypes import Precision
from graphsim.work.report import ParamReport, SegmentParams, SegmentWork, WorkReport
from graphsim.work.routing import expected_experts_touched, max_experts_touched
from graphsim.work.specs import AttentionKind, ModelSpec, WeightKind
from graphsim.work.weights import PlacedWeight, embedding_weight, model_weights, stored_bytes_per_copy
from graphsim.workload import Step, WorkloadError


def _weight_work(placed: PlacedWeight, step: Step, precision: Precision, vocab: int) -> SegmentWork:
    w, layers = placed.weight, placed.layers
    copy_bytes = stored_bytes_per_copy(placed, precision)
    tokens = step.tokens
    flops = 0
    if w.idle:  # held, never used by the causal forward (idle cross-attention): parameters only
        return SegmentWork(placed.segment, params=w.elements * layers)
    if w.kind is WeightKind.EMBEDDING:
        rows = w.shape[0]  # the table's own vocabulary (Gemma-4's per-layer-input table has its own)
        read = worst = copy_bytes * min(tokens, rows) / rows * w.copies  # each copy: one row per token
    elif w.routed:
        assert w.top_k is not None
        read = copy_bytes * expected_experts_touched(w.copies, w.top_k, tokens)
        worst = copy_bytes * max_experts_touched(w.copies, w.top_k, tokens)
        if w.kind is WeightKind.MATRIX:
            flops = 2 * tokens * w.top_k * w.elements_per_copy
    else:
        read = worst = copy_bytes * w.copies
        if w.kind is WeightKind.MATRIX:
            rows = step.sequences if placed.segment == "head" else tokens
            flops = 2 * rows * w.elements_per_copy * w.copies
        elif w.kind is WeightKind.CONV:
            flops = 2 * tokens * w.elements_per_copy * w.copies
    return SegmentWork(
        placed.segment,
        flops=flops * layers * w.uses,
        param_read_bytes=read * layers,
        param_read_bytes_worst=worst * layers,
        params=w.elements * layers,
        params_activated=(0 if w.kind is WeightKind.EMBEDDING else w.active_elements * layers),
    )


def account_step(model: ModelSpec, step: Step, precision: Precision) -> WorkReport:
    """Necessary work of one step, per segment, in first-appearance order."""
    longest = max(g.cached_tokens + g.new_tokens for g in step.groups)
    if model.max_positions is not None and longest > model.max_positions:
        raise WorkloadError(
            f"a sequence of {longest} tokens exceeds the {model.max_positions} positions {model.architecture}'s "
            "position table holds; shorten the workload"
        )
    segments: dict[str, SegmentWork] = {}

    def add(work: SegmentWork) -> None:
        segments[work.name] = segments[work.name] + work if work.name in segments else work

    for placed in model_weights(model):
        add(_weight_work(placed, step, precision, model.vocab))
    if model.tie_embeddings:
        embed = embedding_weight(model)
        table_bytes = stored_bytes_per_copy(embed, precision)
        # the table's width (OPT-350m: word_embed_proj_dim; ELECTRA: embedding_size)
        width = model.table_width or model.embed_width or model.hidden
        add(SegmentWork("head", flops=2 * step.sequences * model.vocab * width * model.codebooks,
                        param_read_bytes=table_bytes, param_read_bytes_worst=table_bytes))
        # the head uses the whole (tied) table: it counts as activated
        add(SegmentWork("embed", params_activated=embed.elements))

    forms: dict[int, tuple[str, int]] = {}  # step group index → (MLA form, sequences)
    for group in model.stack.groups():
        if group.spec.attn.kind is AttentionKind.NONE:
            continue  # a single-FFN layer has no attention core
        name = group.segment("attn", "core")
        for index, seqs in enumerate(step.groups):
            core = attention_core(group.spec.attn, seqs, precision)
            add(SegmentWork(name, flops=core.flops * group.count,
                            state_read_bytes=core.state_read_bytes * group.count,
                            state_write_bytes=core.state_write_bytes * group.count))
            if core.form:
                forms[index] = (core.form, seqs.count)
    notes = list(model.notes)
    if forms:
        counts: Counter[str] = Counter()
        for form, count in forms.values():
            counts[form] += count
        notes.append("MLA core: " + ", ".join(f"{form} form for {n} sequence(s)" for form, n in sorted(counts.items()))
                     + " (the cheaper exact form per sequence group)")
    ordered = tuple(segments[n] for n in order_segments(list(segments)))
    return WorkReport(model.architecture, step, precision, ordered, tuple(notes))


def order_segments(all_names: list[str]) -> list[str]:
    """embed, attention segments (each core after its input projections), FFN segments, final norm, head."""
    names = [n for n in all_names if n not in ("embed", "final_norm", "head")]
    attn = [n for n in names if ".attn." in n and not n.endswith(".attn.core")]
    for core in (n for n in names if n.endswith(".attn.core")):
        prefix = core.removesuffix("core")
        anchors = [i for i, n in enumerate(attn) if n.startswith(prefix) and not n.endswith(".out")]
        attn.insert(max(anchors) + 1 if anchors else len(attn), core)
    ffn = [n for n in names if ".attn." not in n]
    outer = [n for n in ("embed",) if n in all_names], [n for n in ("final_norm", "head") if n in all_names]
    return outer[0] + attn + ffn + outer[1]


def count_params(model: ModelSpec, precision: Precision) -> ParamReport:
    """Parameter counts (total, activated per token) and stored bytes per segment."""
    totals: dict[str, list[float]] = {}
    for placed in model_weights(model):
        w = placed.weight
        row = totals.setdefault(placed.segment, [0, 0, 0.0])
        row[0] += w.elements * placed.layers
        activated = w.active_elements * placed.layers
        if w.kind is WeightKind.EMBEDDING and (not model.tie_embeddings or placed.path != "model.embed_tokens"):
            activated = 0  # a lookup; only a tied table is activated (the head multiplies by all of it)
        if w.idle:
            activated = 0
        row[1] += activated
        row[2] += stored_bytes_per_copy(placed, precision) * w.copies * placed.layers
    segments = tuple(
        SegmentParams(name, int(totals[name][0]), int(totals[name][1]), totals[name][2])
        for name in order_segments(list(totals))
    )
    embed = embedding_weight(model).weight.elements
    return ParamReport(model.architecture, precision, segments, embed, model.tie_embeddings, model.notes)

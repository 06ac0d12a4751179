"""Speculative decoding on the command line: vLLM's `--speculative-config` and graphsim's `--spec-acceptance`,
and predict's per-step breakdown (serving/speculative.py, serving/spec_cost.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from graphsim.serving.speculative import Acceptance, SpeculativeConfig

SpeculativeConfigOpt = Annotated[str | None, typer.Option(
    "--speculative-config", help='vLLM\'s speculative decoding, as JSON: {"method": "mtp"|"eagle"|"eagle3"|'
    '"draft_model"|"ngram", "num_speculative_tokens": k, "model": DRAFT, "prompt_lookup_max": N}.')]
SpecAcceptanceOpt = Annotated[str | None, typer.Option(
    "--spec-acceptance", help="Draft acceptance: a rate per position (0.8) or one conditional rate per position "
    "(0.9,0.7,0.5). Default for mtp only: 0.85 a position, a stated assumption; other methods must give it.")]


def model_config(model: str, revision: str | None = None) -> dict[str, Any]:
    """The target's config.json; {} when the model is not one (an ONNX file, a saved graph)."""
    from graphsim.catalog import resolve_model
    from graphsim.errors import GraphsimError

    try:
        return resolve_model(model, revision=revision).config
    except GraphsimError:
        return {}


def vocab_size(config: dict[str, Any]) -> int:
    from graphsim.work.registry import language_model_config

    return int(language_model_config(config).get("vocab_size") or config.get("vocab_size") or 0) if config else 0


def speculative(text: str | None, acceptance: str | None, config: dict[str, Any],
                need_acceptance: bool = True) -> tuple[SpeculativeConfig, Acceptance, str] | None:
    """The parsed options (None without --speculative-config), and a note on the acceptance used.
    `need_acceptance` False: a command that does not use it (kv) takes the default for every method."""
    from graphsim.serving.speculative import (
        DEFAULT_ACCEPTANCE_NOTE, SpeculativeError, parse_acceptance, parse_speculative_config,
    )

    if text is None:
        if acceptance is not None:
            raise SpeculativeError("--spec-acceptance needs --speculative-config (the method and k it applies to)")
        return None
    spec = parse_speculative_config(text, config or None)
    acc = parse_acceptance(acceptance, spec.k, spec.method if need_acceptance else "mtp")
    note = acc.describe() if acceptance is not None else f"{acc.describe()}; {DEFAULT_ACCEPTANCE_NOTE}"
    return spec, acc, note


@dataclass
class SpecPrediction:
    spec: SpeculativeConfig
    acceptance: Acceptance
    note: str
    draft_note: str
    reports: list[Any]  # SpecStepReport per decode batch
    skipped: list[str]
    verify: Any = None  # costing.predict.Prediction of the verify steps (kernels, regions)
    draft: Any = None  # of the draft passes (None for ngram)

    def to_json(self) -> dict[str, Any]:
        return {"speculative": {"config": self.spec.to_vllm(), "acceptance": list(self.acceptance.rates),
                                "expected_tokens_per_step": self.acceptance.expected_tokens(), "note": self.note,
                                "draft": self.draft_note, "steps": [r.to_json() for r in self.reports],
                                "not_speculative": self.skipped,
                                "verify_kernels": self.verify.to_json() if self.verify is not None else None,
                                "draft_kernels": self.draft.to_json() if self.draft is not None else None}}


@dataclass(frozen=True)
class SpecOptions:
    spec: SpeculativeConfig
    acceptance: Acceptance
    note: str  # the acceptance used, and its basis
    vocab: int  # the target's vocabulary (0: read from the graph's LM head)


def options(model: str, text: str | None, acceptance: str | None, revision: str | None = None,
            need_acceptance: bool = True) -> SpecOptions | None:
    """The checked options (before any trace: a model without MTP layers asked for mtp is refused here)."""
    config = model_config(model, revision)
    parsed = speculative(text, acceptance, config, need_acceptance)
    if parsed is None:
        return None
    return SpecOptions(*parsed, vocab_size(config))


def predict_speculative(cm, opts: SpecOptions | None, specs: list[str], steps: list) -> SpecPrediction | None:
    """Each pure decode batch of `steps` run speculatively: the verify / draft / sampler breakdown."""
    if opts is None:
        return None
    from graphsim.serving.spec_cost import spec_report, speculative_pricer

    pricer = speculative_pricer(cm, opts.spec, opts.vocab or _vocab_from_graph(cm))
    reports, skipped = [], []
    for label, step in zip(specs, steps, strict=True):
        if not all(g.new_tokens == 1 for g in step.groups):
            skipped.append(label)  # prefill or mixed: not a speculative decode step
            continue
        seqs = step.sequences
        ctx = round(sum(g.cached_tokens * g.count for g in step.groups) / seqs)
        reports.append(spec_report(pricer, label, seqs, ctx, opts.acceptance.expected_tokens()))
    verify = draft = None
    if reports:  # the kernels of each part, as predict prices a batch (the cost tree, regions, sources)
        from graphsim.costing.predict import predict
        from graphsim.serving.spec_cost import verify_step

        k = opts.spec.k
        verify = predict(cm, [verify_step(r.sequences, r.context, k) for r in reports],
                         [f"verify {r.spec} (k={k}: {r.sequences * (k + 1)} decode rows)" for r in reports])
        draft_cm = pricer.draft_cost_model()
        if draft_cm is not None:
            steps, labels = [], []
            for r in reports:
                first, later = pricer.draft_steps(r.sequences, r.context)
                steps += [first] + ([later] if k > 1 else [])
                labels += [f"draft pass 1 of {r.spec} (its LM head here at every token; the step samples one a sequence)"] + ([f"one of the draft passes 2..{k} of {r.spec}"] if k > 1 else [])
            draft = predict(draft_cm, steps, labels)
    return SpecPrediction(opts.spec, opts.acceptance, opts.note, pricer.draft_note, reports, skipped, verify, draft)


def _vocab_from_graph(cm) -> int:
    from graphsim.ir.geometry import GemmGeometry
    from graphsim.ir.kernel import KernelKind, Rows

    heads = [lf for lf in cm.tree.leaves if lf.attrs.kind is KernelKind.GEMM and lf.attrs.rows is Rows.SEQUENCES]
    return heads[-1].attrs.geometry_as(GemmGeometry).n * cm.tp if heads else 0


def print_speculative(console, sp: SpecPrediction, tree: bool = True, limit: int = 25) -> None:
    from rich.table import Table

    from graphsim.render.cost_view import render_prediction

    if sp.verify is not None:  # each part's kernels, as predict shows a batch
        console.print(render_prediction(sp.verify, tree, limit))
    if sp.draft is not None:
        console.print(render_prediction(sp.draft, tree, limit))

    console.print(f"speculative decoding: {sp.spec.describe()}; {sp.note}", highlight=False, markup=False)
    console.print(f"draft: {sp.draft_note}", highlight=False, markup=False)
    for r in sp.reports:
        t = Table(title=f"{r.spec}: one speculative step (k = {r.k})", title_justify="left")
        for col in ("part", "µs", "source", "how"):
            t.add_column(col, justify="right" if col == "µs" else "left")
        for p in r.parts:
            t.add_row(p.name, f"{p.time_us:,.1f}", p.source, p.note)
        t.add_row("total", f"{r.total_us:,.1f}", r.source, "")
        console.print(t)
        console.print(f"  {r.expected_tokens_per_sequence:.3f} tokens a sequence a step expected: "
                      f"{r.us_per_token:,.1f} µs a token against {r.plain_decode_us / r.sequences:,.1f} µs plain "
                      f"decoding ({r.plain_source}): ×{r.speedup:.2f}", highlight=False, markup=False)
    if sp.skipped:
        console.print(f"not speculative (prefill or mixed batches): {', '.join(sp.skipped)}", highlight=False,
                      markup=False)


def deployment_field(opts: SpecOptions | None) -> dict[str, Any]:
    """The `speculative_config` entry of a deployment document ({} when off)."""
    return {"speculative_config": opts.spec.to_vllm()} if opts is not None else {}


def with_acceptance(setup, opts: SpecOptions | None, seed: int):
    """The simulator's setup with speculative steps sampled from the acceptance model (seeded with `seed`)."""
    if opts is None:
        return setup
    from dataclasses import replace

    from graphsim.serving.speculative import SpecSimulation

    return replace(setup, speculative=SpecSimulation(opts.spec, opts.acceptance, seed))

"""`graphsim search --engine auto`: the throughput search once per engine (vllm, sglang, trtllm), each fused,
priced from its own tables and scheduled its own way; the best under the SLOs wins, and every engine's best is
reported beside it (as aiconfigurator's `--backend auto` compares backends)."""

from __future__ import annotations

from typing import Any

from graphsim.cli.app import console, err_console
from graphsim.cli.json_out import print_json
from graphsim.serving.engines import ENGINES


def _best_figure(res) -> tuple[bool, float]:
    """(meets the SLOs, output tokens/s per GPU) of a search's best; (False, 0) when it has none."""
    if res.best is None:
        return False, 0.0
    row = res.row(res.best)
    return row.verdict == "best" or row.verdict == "meets SLOs", row.final.output_tokens_per_s_per_gpu


def compare_searches(specs: dict[str, Any], backend, as_json: bool, what: str
                     ) -> tuple[dict[str, Any], list[str], str | None, dict[str, dict[str, Any]]]:
    """Run the search once per named spec (a spinner naming `what` and the name unless `as_json`): (results,
    names best first, the winner (None when no search has a candidate), each one's best summarised)."""
    from graphsim.serving.search import run_search

    results: dict[str, Any] = {}
    for name, s in specs.items():
        if as_json:
            results[name] = run_search(s, backend)
        else:
            with err_console.status(f"searching {what}{name}…") as status:
                results[name] = run_search(s, backend, progress=lambda msg, n=name: status.update(f"{n}: {msg}"))
    ranked = sorted(results, key=lambda n: _best_figure(results[n]), reverse=True)
    winner = ranked[0] if results[ranked[0]].best is not None else None
    summary = {}
    for name, res in results.items():
        meets, figure = _best_figure(res)
        row = res.row(res.best) if res.best is not None else None
        summary[name] = {"best": row.candidate.id if row else None, "meets_slos": meets,
                         "output_tokens_per_s_per_gpu": figure, "data": res.data_note,
                         "label": row.candidate.label() if row else None,
                         "deployment": row.candidate.to_json() if row else None}
    return results, ranked, winner, summary


def auto_search(spec, backend, as_json: bool, top: int) -> None:
    from graphsim.render.search_view import render_search
    from graphsim.versions import versions

    specs = {engine: spec.model_copy(update={"base": spec.base.model_copy(
        update={"engine": spec.base.engine.model_copy(update={"engine": engine})})}) for engine in ENGINES}
    results, ranked, winner, per_engine = compare_searches(specs, backend, as_json, "")
    if as_json:
        out = {"engine": "auto", "best_engine": winner, "per_engine": per_engine,
               "engines": {e: results[e].to_json() for e in ENGINES},
               "versions": versions(spec.profile, spec.base.hardware, winner or "vllm")}
        print_json(out)
        return
    for e in ranked:
        p = per_engine[e]
        verdict = "meets the SLOs" if p["meets_slos"] else "misses the SLOs" if p["best"] is not None else "no candidate"
        console.print(f"{e:7s} best: {p['label'] or '-'}: {p['output_tokens_per_s_per_gpu']:.1f} output tok/s/GPU "
                      f"({verdict}); priced from: {p['data']}", highlight=False, soft_wrap=True)
    if winner is None:
        console.print("no engine has a candidate under the SLOs", highlight=False)
        return
    console.print(f"[bold]best engine: {winner}[/]")
    console.print(render_search(results[winner], top))


def _load_key(res, target) -> tuple:
    """Rank of a load search's answer: confirmed first, fewest GPUs, most headroom (none: last)."""
    a = res.answer
    if a is None:
        return (1, 0, 0.0)
    return (0, a.gpus, -a.headroom(target), 0 if res.confirmed else 1)


def auto_load_search(spec, target, backend, as_json: bool, top: int) -> None:
    """--engine auto with --target-request-rate / --target-concurrency: the fewest GPUs per engine, and the engine
    that needs the fewest (ties: the most headroom over the load)."""
    from graphsim.render.search_load_view import render_load
    from graphsim.serving.search_load import run_load_search
    from graphsim.versions import versions

    results: dict[str, Any] = {}
    for engine in ENGINES:
        s = spec.model_copy(update={"base": spec.base.model_copy(
            update={"engine": spec.base.engine.model_copy(update={"engine": engine})})})
        if as_json:
            results[engine] = run_load_search(s, target, backend)
        else:
            with err_console.status(f"searching {engine}…") as status:
                results[engine] = run_load_search(s, target, backend,
                                                  progress=lambda msg, e=engine: status.update(f"{e}: {msg}"))
    ranked = sorted(ENGINES, key=lambda e: _load_key(results[e][0], target))
    winner = ranked[0] if results[ranked[0]][0].answer is not None else None
    per_engine = {}
    for e in ENGINES:
        res, units = results[e]
        a = res.answer
        per_engine[e] = {"gpus": a.gpus if a else None, "label": a.candidate.label() if a else None,
                         "replicas": a.replicas if a else None, "headroom": a.headroom(target) if a else None,
                         "confirmed_by_simulation": res.confirmed, "data": units.data_note}
    if as_json:
        print_json({"engine": "auto", "best_engine": winner, "target": target.to_json(),
                    "per_engine": per_engine, "engines": {e: results[e][0].to_json(top) for e in ENGINES},
                    "versions": versions(spec.profile, spec.base.hardware, winner or "vllm")})
        return
    for e in ranked:
        p = per_engine[e]
        what = (f"{p['gpus']} GPUs: {p['label']} × {p['replicas']}, {p['headroom']:.2f}× the load"
                + ("" if p["confirmed_by_simulation"] else ", not confirmed by simulation")) if p["gpus"] else \
            "no deployment within --max-gpus"
        console.print(f"{e:7s} {what}; priced from: {p['data']}", highlight=False, soft_wrap=True)
    if winner is None:
        console.print("no engine serves the load within the SLOs and --max-gpus", highlight=False)
        return
    console.print(f"[bold]best engine: {winner}[/]")
    console.print(render_load(results[winner][0], results[winner][1], top))

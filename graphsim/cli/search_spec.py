"""`graphsim search --speculative-config …`: the throughput search with speculative decoding off and on (MTP on/off
for a model with MTP layers), each candidate priced and simulated its way (serving/spec_search.py); the better
best under the SLOs wins and both are reported, as `--engine auto` reports each engine."""

from __future__ import annotations

import json
from typing import Any

from graphsim.cli.app import console


def speculative_search(spec, opts, backend, as_json: bool, top: int, save_dir: str | None, versions: dict[str, Any]) -> None:
    """Run `spec` as given (speculation off) and with `opts` (cli/spec_cli.SpecOptions) on."""
    from graphsim.cli.search_auto import compare_searches
    from graphsim.render.search_view import render_search

    on = spec.model_copy(update={"base": spec.base.model_copy(update={"speculative_config": opts.spec.to_args()}),
                                 "spec_acceptance": opts.acceptance.rates}).check()
    results, ranked, winner, summary = compare_searches({"off": spec, "on": on}, backend, as_json,
                                                        "with speculative decoding ")
    if save_dir is not None and winner is not None:
        from graphsim.cli.search_cmd import _save

        res = results[winner]
        best = res.row(res.best)
        _save(save_dir, on if winner == "on" else spec, best.candidate, best.candidate.replicas,
              {"prediction": best.to_json(), "search": "most output tokens/s per GPU",
               "speculative": opts.spec.to_vllm() if winner == "on" else None})
    if as_json:
        print(json.dumps({"speculative": {"config": opts.spec.to_vllm(), "acceptance": list(opts.acceptance.rates),
                                          "expected_tokens_per_step": opts.acceptance.expected_tokens(),
                                          "note": opts.note},
                          "best": winner, "per_setting": summary,
                          "searches": {n: r.to_json() for n, r in results.items()}, "versions": versions},
                         indent=1, default=float))
        return
    console.print(f"speculative decoding {opts.spec.describe()}; {opts.note}", highlight=False, soft_wrap=True)
    for n in ranked:
        p = summary[n]
        verdict = "meets the SLOs" if p["meets_slos"] else "misses the SLOs" if p["best"] is not None else "no candidate"
        console.print(f"speculative decoding {n:3s}: best {p['output_tokens_per_s_per_gpu']:9.1f} output tok/s/GPU "
                      f"({verdict})", highlight=False)
    if winner is None:
        console.print("no candidate under the SLOs, with speculative decoding on or off", highlight=False)
        return
    console.print(f"[bold]best: speculative decoding {winner}[/]")
    console.print(render_search(results[winner], top))

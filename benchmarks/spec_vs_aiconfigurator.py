"""A speculative (MTP) decode step: graphsim's parts against aiconfigurator's own estimate on the same tables.

For a model with MTP layers (default DeepSeek-V3, TP 8 on h200_sxm), decode batches B×C and draft depths k (0: plain
decoding), both sides price one step from aiconfigurator-core's vLLM tables (graphsim: `graphsim profiles
import-aiconfigurator` of the same system; balanced MoE routing on both sides, as benchmarks/validate_static.py):

- graphsim: `serving/spec_cost.py` — the target verifying B·(k+1) tokens, one MTP draft pass over them and k − 1
  one-token passes, the samplers (`graphsim predict --speculative-config`);
- aiconfigurator: `EngineHandle.compile(…, nextn=k).predict_decode_latency(B, C, 2)`: its MTP model scales the
  decode batch by (k + 1) and every op's compute by (L + k)/L (aiconfigurator_core/sdk/engine.py `compile_engine`:
  "Apply MTP BEFORE get_model so the walked op lists carry the (L+nextn)/L compute scale").

Prints one row per case (both times, graphsim / aiconfigurator − 1, graphsim's parts) and `--json` writes them.

    python benchmarks/spec_vs_aiconfigurator.py [--model deepseek-v3] [--system h200_sxm] [--tp 8] [--k 0,1,3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HARDWARE = {"h200_sxm": "h200_sxm", "h100_sxm": "h100_sxm"}


def aic_ms(config: dict[str, Any], system: str, tp: int, k: int, cases: list[tuple[int, int]], work: Path) -> list[float]:
    from validate_static import compile_balanced  # a sibling script, not a package

    model_dir = work / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config))
    h = compile_balanced(model_dir, system, tp_size=tp, moe_tp_size=tp, moe_ep_size=1, nextn=k)
    return [float(h.predict_decode_latency(b, c, 2)) for b, c in cases]


def graphsim_rows(model: str, system: str, tp: int, k: int, cases: list[tuple[int, int]]) -> list[dict[str, Any]]:
    from graphsim.catalog import resolve_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.costing.predict import default_profile_path
    from graphsim.serving.spec_cost import spec_report, speculative_pricer
    from graphsim.serving.speculative import parse_acceptance, parse_speculative_config
    from graphsim.workload import SeqGroup, Step

    resolved = resolve_model(model)
    cm = build_cost_model(resolved, HARDWARE[system], tp=tp, profile=default_profile_path(HARDWARE[system]),
                          moe_routing=parse_routing("balanced"))
    out = []
    if k == 0:
        ev = cm.evaluate([Step((SeqGroup(1, c, b),)) for b, c in cases])
        return [{"graphsim_ms": float(t) / 1e3, "parts": {}} for t in ev.total_us()]
    spec = parse_speculative_config({"method": "mtp", "num_speculative_tokens": k}, resolved.config)
    pricer = speculative_pricer(cm, spec, int(resolved.config.get("vocab_size") or 0))
    acc = parse_acceptance(None, k)
    for b, c in cases:
        r = spec_report(pricer, f"decode:{b}x{c}", b, c, acc.expected_tokens())
        out.append({"graphsim_ms": r.total_us / 1e3, "parts": {p.name: p.time_us / 1e3 for p in r.parts}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--system", default="h200_sxm", choices=sorted(HARDWARE))
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--k", default="0,1,3")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    from graphsim.catalog import resolve_model

    config = dict(resolve_model(args.model).config)
    cases = [(int(b), int(c)) for b in args.batches.split(",") for c in args.contexts.split(",")]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="spec_aic_"))
    try:
        for k in (int(x) for x in args.k.split(",")):
            ref = aic_ms(config, args.system, args.tp, k, cases, work)
            ours = graphsim_rows(args.model, args.system, args.tp, k, cases)
            for (b, c), a, g in zip(cases, ref, ours, strict=True):
                row = {"k": k, "batch": b, "context": c, "aiconfigurator_ms": a, **g,
                       "diff": g["graphsim_ms"] / a - 1 if a > 0 else None}
                rows.append(row)
                parts = ", ".join(f"{n.split(':')[0]} {v:.2f}" for n, v in g["parts"].items())
                print(f"k={k} decode {b}x{c}: graphsim {g['graphsim_ms']:.2f} ms, aiconfigurator {a:.2f} ms, "
                      f"{row['diff']:+.1%}" + (f" ({parts})" if parts else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

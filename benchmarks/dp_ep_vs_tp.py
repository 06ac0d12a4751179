"""DeepSeek-V3 on 8×H200: data-parallel attention + expert parallel (DP8 + EP8) against TP8, graphsim against
aiconfigurator's own estimate on the same measured vLLM rows (issue 18).

    python benchmarks/dp_ep_vs_tp.py            # the grid below, a table per kernel category
    python benchmarks/dp_ep_vs_tp.py --json

Both sides read graphsim's bundled DeepSeek-V3 config.json and aiconfigurator-core's h200_sxm vLLM tables (graphsim
through the profile.db `graphsim profiles import-aiconfigurator --system h200_sxm --backend vllm` builds, which now
holds the DeepEP dispatch/combine rows of comm/vllm/0.24.0/moe_a2a_perf.parquet too). Routing: balanced on both
sides (as benchmarks/validate_static.py). A step's batch is per DP rank: `decode:64x2048` under DP8 is 64
sequences on each of the 8 ranks (512 in all), as aiconfigurator's `bs` is per attention-DP rank (its MoE op scales
tokens by attention_dp_size).

- TP8: vLLM `-tp 8` (experts TP-sharded over 8, the TP all-reduce); graphsim `predict --tp 8`, aiconfigurator
  `tp_size=8, moe_tp_size=8, moe_ep_size=1`.
- DP8+EP8: vLLM `-dp 8 --enable-expert-parallel`; graphsim `costing.dp_attention` (`predict -dp 8
  --enable-expert-parallel`), aiconfigurator `tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8`.
  The all2all backend is aiconfigurator's choice for vLLM (sdk/operations/moe_comm.py MOE_A2A_BACKENDS):
  DeepEP high-throughput for prefill, low-latency for decode; graphsim's time with vLLM's default
  `allgather_reducescatter` is printed beside it.

Per case: both totals and their ratio, then kernel categories side by side (graphsim: the slowest rank's own
kernels by kind, the routed experts, the exchange; aiconfigurator: its ops by name, benchmarks/validate_static.py
`aic_category`), so every difference is placed on a kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_static import GRAPHSIM_CATEGORY, aic_category, compile_balanced  # a sibling script, not a package

MODEL, SYSTEM, GPU = "deepseek-v3", "h200_sxm", "h200_sxm"
STEPS = ["prefill:1x1024", "prefill:1x4096", "decode:1x2048", "decode:16x2048", "decode:64x2048", "decode:128x2048"]
MODES = {"TP8": dict(tp_size=8, moe_tp_size=8, moe_ep_size=1),
         "DP8+EP8": dict(tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8)}
BACKEND = {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency"}  # aiconfigurator's for vLLM


def ensure_db(db_dir: Path) -> Path:
    import subprocess

    path = db_dir / f"{SYSTEM}_vllm_a2a.db"
    if not path.is_file():
        db_dir.mkdir(parents=True, exist_ok=True)
        print(f"importing aiconfigurator's {SYSTEM} vLLM tables into {path} …", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "graphsim", "profiles", "import-aiconfigurator", "--system", SYSTEM,
                        "--backend", "vllm", "-o", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


class Reference:
    """aiconfigurator's engine for one parallel layout, balanced routing."""

    def __init__(self, config: dict[str, Any], work: Path, **parallel: int) -> None:
        model_dir = work / MODEL
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(config))
        self.handle = compile_balanced(model_dir, SYSTEM, **parallel)

    def step(self, spec: str) -> tuple[float, dict[str, float], list[tuple[str, float]]]:
        kind, rest = spec.split(":")
        b, n = (int(x) for x in rest.split("x"))
        h = self.handle
        if kind == "prefill":
            ms = h.predict_prefill_latency(b, n)
            ops, _ = h.run_static_per_op(batch_size=b, isl=n, osl=1, mode="static_ctx")
        else:
            ms = h.predict_decode_latency(b, n, 2)
            ops = h.decode_step_per_op(b, n, 2)
        cats: dict[str, float] = {}
        for name, lat, *_ in ops:
            cats[aic_category(name)] = cats.get(aic_category(name), 0.0) + float(lat)
        return float(ms), cats, [(str(name), float(lat)) for name, lat, *_ in ops if float(lat) > 0]


def _categories(rows: Any, skip_moe: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        if skip_moe and r.kind == "moe_experts":
            continue
        cat = GRAPHSIM_CATEGORY.get(r.kind, "other")
        out[cat] = out.get(cat, 0.0) + (r.total_us or 0.0) / 1e3
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from graphsim.catalog import resolve_model
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.dp_attention import DataParallelMoe, price_dp_step
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.costing.predict import predict
    from graphsim.importers.hf import import_hf
    from graphsim.workload import parse_batch_spec

    work = Path(args.db_dir)
    db = Path(args.db) if args.db else ensure_db(work)
    config = resolve_model(MODEL).config
    graph, _ = import_hf(MODEL)
    routing = parse_routing("balanced")
    cms = {tp: build_cost_model(graph, GPU, tp=tp, profile=db, default_profile=False, moe_routing=routing)
           for tp in (1, 8)}
    cases = []
    for mode, parallel in MODES.items():
        ref = Reference(config, work / mode, **parallel)
        for spec in STEPS:
            a_ms, a_cat, a_ops = ref.step(spec)
            step = parse_batch_spec(spec)
            case: dict[str, Any] = {"mode": mode, "step": spec, "aiconfigurator_ms": a_ms, "aiconfigurator": a_cat,
                                    "aiconfigurator_ops": a_ops}
            if mode == "TP8":
                b = predict(cms[8], [step], [spec]).batches[0]
                g_ms = (b.total_us or math.nan) / 1e3
                case.update(graphsim_ms=g_ms, graphsim=_categories(b.rows, False), graphsim_source=b.source)
            else:
                backend = BACKEND[spec.split(":")[0]]
                p = price_dp_step(cms[1], DataParallelMoe(8, 1, True, backend), [step] * 8, spec)
                default = price_dp_step(cms[1], DataParallelMoe(8, 1, True), [step] * 8, spec)
                own = predict(cms[1], [step], [spec]).batches[0]  # every rank runs `step`: rank 0's own kernels
                cat = _categories(own.rows, True)
                cat["moe"] = cat.get("moe", 0.0) + p.experts_us / 1e3
                cat["communication"] = cat.get("communication", 0.0) + (p.dispatch_us + p.combine_us) / 1e3
                cat["overlap hidden"] = -p.hidden_us / 1e3  # shared experts beside the routed path (aux stream)
                case.update(graphsim_ms=p.total_us / 1e3, graphsim=cat, graphsim_source=p.source,
                            graphsim_sources=p.sources, backend=backend,
                            graphsim_allgather_reducescatter_ms=default.total_us / 1e3,
                            exchange_note=p.notes[:2])
            case["ratio"] = case["graphsim_ms"] / a_ms if a_ms > 0 else math.nan
            cases.append(case)
    return {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "profile": str(db),
            "routing": "balanced on both sides", "cases": cases}


def print_report(out: dict[str, Any]) -> None:
    print(f"DeepSeek-V3 on 8×H200, graphsim vs aiconfigurator (same vLLM tables; {out['routing']}); batch per DP rank")
    print(f"{'mode':<8} {'step':<16} {'graphsim':>10} {'aiconfig':>10} {'g/a':>6}  {'agrs':>9}  graphsim sources")
    for c in out["cases"]:
        agrs = f"{c['graphsim_allgather_reducescatter_ms']:>7.2f}ms" if "backend" in c else " " * 9
        src = c.get("graphsim_sources") or c["graphsim_source"]
        print(f"{c['mode']:<8} {c['step']:<16} {c['graphsim_ms']:>8.2f}ms {c['aiconfigurator_ms']:>8.2f}ms "
              f"{c['ratio']:>6.2f}  {agrs}  {src}")
    print("\nper kernel category, ms (graphsim / aiconfigurator):")
    for c in out["cases"]:
        cats = sorted(set(c["graphsim"]) | set(c["aiconfigurator"]),
                      key=lambda k: -abs(c["graphsim"].get(k, 0.0) - c["aiconfigurator"].get(k, 0.0)))
        parts = ", ".join(f"{k} {c['graphsim'].get(k, 0.0):.2f}/{c['aiconfigurator'].get(k, 0.0):.2f}"
                          for k in cats if max(abs(c["graphsim"].get(k, 0.0)), c["aiconfigurator"].get(k, 0.0)) >= 0.05)
        print(f"  {c['mode']:<8} {c['step']:<16} {parts}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--db", default=None, help="an h200_sxm profile.db already imported (with moe_a2a rows)")
    ap.add_argument("--db-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "graphsim-dp-ep"),
                    help="where the profile.db is imported and the config staged")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print_report(out)


if __name__ == "__main__":
    main()

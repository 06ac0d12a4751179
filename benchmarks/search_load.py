"""The search for a load and the refined search, on the issue's jobs.

    python benchmarks/search_load.py --profile /tmp/h200.db          # both parts
    python benchmarks/search_load.py --profile /tmp/h200.db --json

1. Fewest GPUs: Qwen3-32B on H200, input 4,000 / output 1,000 tokens, TTFT ≤ 2 s, TPOT ≤ 30 ms (means), for
   R = 5, 20 and 50 req/s (Poisson arrivals), units of up to 8 GPUs (one node), at most 64 GPUs; the answer
   simulated at its load (`--verify 4`: up to 8 simulations).
2. Coarse against refined: Llama-3.1-8B on 2 × H200, the same workload and SLOs, `graphsim search` with the
   power-of-two grid of max_num_seqs (`refine=0`) and with the best 4 bisected to the SLO boundary
   (`refine=4`); the best of each, simulated (`verify=4`).

Every figure is graphsim's prediction (steady state or simulation on the given profile.db), not a measurement
on GPUs.
"""

from __future__ import annotations

import argparse
import json
import time


def _ctx(spec):
    from graphsim.catalog import resolve_model
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.search_eval import make_context
    from graphsim.serving.search_space import enumerate_candidates

    model, hw = resolve_model(spec.base.model), load_hardware(spec.base.hardware)
    cands, _ = enumerate_candidates(spec, model, hw)
    return make_context(spec, model, hw, cands)


def fewest_gpus(profile: str | None, rates: list[float]) -> list[dict]:
    from graphsim.serving import SLO, DeploymentConfig, parse_lengths
    from graphsim.serving.backends import LocalBackend
    from graphsim.serving.search_load import LoadTarget, run_load_search
    from graphsim.serving.search_space import SearchSpec

    spec = SearchSpec(base=DeploymentConfig(model="qwen3-32b", hardware="h200"), gpus=8,
                      isl=parse_lengths("4000", "isl"), osl=parse_lengths("1000", "osl"), slo=SLO(2000, 30),
                      profile=profile, verify=4, refine=4)
    ctx = _ctx(spec)
    out = []
    for rate in rates:
        t = time.perf_counter()
        target = LoadTarget(request_rate=rate, max_gpus=64)
        res, _units = run_load_search(spec, target, LocalBackend(1), context=ctx)
        a = res.answer
        row: dict = {"model": "Qwen3-32B", "rate": rate, "wall_s": time.perf_counter() - t, "answer": None}
        if a is not None:
            nxt = next((o for o in res.options[1:] if o.gpus > a.gpus), None)
            row["answer"] = {"deployment": a.candidate.label(), "replicas": a.replicas, "gpus": a.gpus,
                             "load_per_replica": a.per_replica(target), "capacity_per_replica": a.capacity,
                             "headroom": a.headroom(target), "steady_ttft_ms": a.fast.ttft_ms,
                             "steady_tpot_ms": a.fast.tpot_ms, "source": a.fast.ttft_source,
                             "sim_ttft_ms": a.sim.ttft_ms if a.sim else None,
                             "sim_tpot_ms": a.sim.tpot_ms if a.sim else None, "failed_simulations": a.failed_sims,
                             "next_more_gpus": f"{nxt.candidate.label()} × {nxt.replicas} = {nxt.gpus} GPUs" if nxt else None}
        row["confirmed"] = res.confirmed
        row["options"] = len(res.options)
        out.append(row)
    return out


def coarse_vs_refined(profile: str | None) -> dict:
    from graphsim.serving import SLO, DeploymentConfig, parse_lengths
    from graphsim.serving.backends import LocalBackend
    from graphsim.serving.search import run_search
    from graphsim.serving.search_space import SearchSpec

    spec = SearchSpec(base=DeploymentConfig(model="llama-3.1-8b", hardware="h200"), gpus=2,
                      isl=parse_lengths("4000", "isl"), osl=parse_lengths("1000", "osl"), slo=SLO(2000, 30),
                      profile=profile, verify=4)
    ctx = _ctx(spec)
    out = {}
    for name, refine in (("coarse", 0), ("refined", 4)):
        t = time.perf_counter()
        res = run_search(spec.model_copy(update={"refine": refine}), LocalBackend(1), context=ctx)
        b = res.row(res.best) if res.best is not None else None
        out[name] = {"wall_s": time.perf_counter() - t, "candidates": len(res.rows),
                     "best": b.candidate.label() if b else None,
                     "method": b.final.method if b else None,
                     "tokens_per_s_per_gpu": b.final.output_tokens_per_s_per_gpu if b else None,
                     "tpot_ms": b.final.tpot_ms if b else None, "ttft_ms": b.final.ttft_ms if b else None,
                     "source": b.final.source if b else None,
                     "refinements": [x.to_json() for x in res.refinements]}
    c, r = out["coarse"]["tokens_per_s_per_gpu"], out["refined"]["tokens_per_s_per_gpu"]
    out["gain"] = r / c - 1 if c and r else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--profile", default=None, help="profile.db (default: the GPU's default path when present)")
    ap.add_argument("--rates", default="5,20,50")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load = fewest_gpus(args.profile, [float(x) for x in args.rates.split(",")])
    cmp = coarse_vs_refined(args.profile)
    if args.json:
        print(json.dumps({"fewest_gpus": load, "coarse_vs_refined": cmp}, indent=1, default=float))
        return
    print("Fewest GPUs: Qwen3-32B on H200, ISL 4000 / OSL 1000, TTFT ≤ 2 s, TPOT ≤ 30 ms (means), Poisson arrivals")
    print(f"{'req/s':>6} {'GPUs':>5} {'replicas':>8}  {'deployment (one replica)':<46} {'cap/rep':>8} "
          f"{'steady TTFT/TPOT ms':>20} {'simulated TTFT/TPOT ms':>23}  wall s")
    for row in load:
        a = row["answer"]
        if a is None:
            print(f"{row['rate']:>6g}  no answer within 64 GPUs")
            continue
        sim = (f"{a['sim_ttft_ms']:,.0f} / {a['sim_tpot_ms']:.1f}" if a["sim_ttft_ms"] is not None else "not confirmed")
        print(f"{row['rate']:>6g} {a['gpus']:>5} {a['replicas']:>8}  {a['deployment']:<46} {a['capacity_per_replica']:>8.2f} "
              f"{a['steady_ttft_ms']:>12,.0f} / {a['steady_tpot_ms']:<5.1f} {sim:>23}  {row['wall_s']:.1f}")
        if a["failed_simulations"]:
            print(f"{'':>6}   missed in simulation first: {'; '.join(a['failed_simulations'])}")
    print()
    print("Coarse vs refined: Llama-3.1-8B on 2 × H200, same workload and SLOs")
    for name in ("coarse", "refined"):
        x = cmp[name]
        print(f"  {name:<8} best {x['best']}: {x['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU ({x['method']}), "
              f"TTFT {x['ttft_ms']:,.0f} ms, TPOT {x['tpot_ms']:.1f} ms, {x['wall_s']:.1f} s")
    for x in cmp["refined"]["refinements"]:
        print(f"    refined #{x['refined_from']}: {x['axis']} {x['values'][0]} → {x['values'][1]} (grid {x['values'][2]} misses), "
              f"{x['evaluations']} evaluations, {x['gain']:+.1%} steady state")
    if cmp["gain"] is not None:
        print(f"  gain of the refined search: {cmp['gain']:+.1%} output tokens/s per GPU")


if __name__ == "__main__":
    main()

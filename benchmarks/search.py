"""Deployment-search speed: Qwen3-32B on 8 H200s, input 4,000 / output 1,000 tokens, TTFT ≤ 2 s, TPOT ≤ 30 ms —
the `graphsim search` defaults — with the local backend.

    python benchmarks/search.py                       # in-process (1 worker)
    python benchmarks/search.py --workers 2           # a local pool of worker processes
    python benchmarks/search.py --backend ray         # a local Ray instance
    python benchmarks/search.py --json

The target is ≥ 1,000 candidate deployments evaluated in ≤ 10 s wall on this machine. Reported: the
candidates enumerated and pruned, the wall time of each phase — enumeration and the memory check, tracing
and fusing the model once (torch and transformers imported here, in-process), the steady-state evaluation
of every candidate (cost tables built once per TP/EP partition, inside this phase), the simulation of the
best candidates — and the whole `run_search()` call, plus CPU time and the best deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--model", default="qwen3-32b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--isl", default="4000")
    ap.add_argument("--osl", default="1000")
    ap.add_argument("--ttft", type=float, default=2000)
    ap.add_argument("--tpot", type=float, default=30)
    ap.add_argument("--verify", type=int, default=4)
    ap.add_argument("--backend", default="local")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--profile", default=None, help="profile.db (default: the GPU's default path when present)")
    ap.add_argument("--engine", default="vllm", help="vllm, sglang or trtllm (docs/engines.md); `graphsim search "
                                                    "--engine auto` runs all three")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    w0, c0 = time.perf_counter(), time.process_time()
    from graphsim.serving import SLO, DeploymentConfig, parse_lengths
    from graphsim.serving.backends import make_backend
    from graphsim.serving.search import run_search
    from graphsim.serving.search_space import SearchSpec

    base = DeploymentConfig.parse({"model": args.model, "hardware": args.gpu, "engine": {"engine": args.engine}})
    spec = SearchSpec(base=base, gpus=args.gpus,
                      isl=parse_lengths(args.isl, "isl"), osl=parse_lengths(args.osl, "osl"), slo=SLO(args.ttft, args.tpot),
                      profile=args.profile, verify=args.verify)
    backend = make_backend(args.backend, args.workers)
    s0 = time.perf_counter()
    try:
        res = run_search(spec, backend)
    finally:
        backend.close()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    t = res.timings
    best = res.row(res.best) if res.best is not None else None
    out = {
        "model": res.model, "gpu": res.hardware, "engine": args.engine, "gpus": args.gpus, "isl": args.isl, "osl": args.osl,
        "slo": {"ttft_ms": args.ttft, "tpot_ms": args.tpot}, "backend": res.backend, "workers": res.workers,
        "candidates": len(res.rows), "pruned_pool_configurations": len(res.pruned),
        "agg": sum(r.candidate.mode == "agg" for r in res.rows),
        "disagg": sum(r.candidate.mode == "disagg" for r in res.rows),
        "simulated": len(res.verified), "phases_s": t, "run_search_s": time.perf_counter() - s0,
        "process_wall_s": wall, "process_cpu_s": cpu,
        "steady_state_us_per_candidate": t["steady_state"] / max(len(res.rows), 1) * 1e6,
        "best": best.candidate.label() if best else None,
        "best_output_tokens_per_s_per_gpu": best.final.output_tokens_per_s_per_gpu if best else None,
        "frontier_points": len(res.frontier), "fast_vs_sim": res.fast_vs_sim(), "data": res.data_note,
        "source": res.worst_source(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                                                f"load {os.getloadavg()[0]:.1f}",
    }
    if args.json:
        print(json.dumps(out, indent=1, default=float))
        return
    print(f"{res.model} on {args.gpus} × {res.hardware} ({args.engine}), ISL {args.isl}, OSL {args.osl}, SLOs TTFT ≤ {args.ttft:g} ms, "
          f"TPOT ≤ {args.tpot:g} ms; {res.backend} backend, {res.workers} worker(s); {out['machine']}")
    print(f"  candidates evaluated:     {len(res.rows):,} ({out['agg']:,} aggregated, {out['disagg']:,} disaggregated); "
          f"{len(res.pruned):,} pool configurations pruned")
    print(f"  enumerate + memory check: {t['enumerate']:.2f} s")
    print(f"  trace + fuse (once):      {t['trace']:.2f} s")
    print(f"  steady-state evaluation:  {t['steady_state']:.2f} s ({out['steady_state_us_per_candidate']:,.0f} µs per "
          "candidate, cost tables included)")
    print(f"  simulate the best {len(res.verified)}:      {t['simulate']:.2f} s")
    print(f"  run_search() total:       {out['run_search_s']:.2f} s wall; process {wall:.2f} s wall, {cpu:.2f} s CPU "
          "(imports included)")
    if best:
        e = best.final
        print(f"  best: {best.candidate.label()}: {e.output_tokens_per_s_per_gpu:,.1f} tok/s/GPU, "
              f"{e.tokens_per_s_per_user:,.1f} tok/s/user, TTFT {e.ttft_ms:,.0f} ms, TPOT {e.tpot_ms:.1f} ms "
              f"({e.method}, {e.source})")
    print(f"  data: {res.data_note}")


if __name__ == "__main__":
    main()

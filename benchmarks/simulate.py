"""Serving-simulator speed: 10,000 Poisson requests (input 1–4k, output 100–500 tokens) on
Llama-3.1-8B, TP=1, one GPU, iteration times from the compiled cost tree.

    python benchmarks/simulate.py                     # rate 10 req/s on h100, roofline unless a profile exists
    python benchmarks/simulate.py --rates 5,10,20     # several loads
    python benchmarks/simulate.py --json
    python benchmarks/simulate.py --compare-shares    # each rate also without the per-source meter (its cost)

Reports, per rate, the wall time of `simulate()` (the figure the target of ≤ 10 s on one core is
about), the iterations simulated, the probe steps the cost tables priced, and the headline metrics.
The one-off set-up (tracing the model, compiling the tree, pricing the token/sequence tables) is
reported separately. Pin to one core with `taskset -c 0 python benchmarks/simulate.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--rates", default="10", help="comma-separated request rates (req/s)")
    ap.add_argument("--num-requests", type=int, default=10_000)
    ap.add_argument("--input-len", default="1024:4096")
    ap.add_argument("--output-len", default="100:500")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=None, help="profile.db (default: the GPU's default path when present)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare-shares", action="store_true",
                    help="per rate: a warm-up run, then the timed run and one with source_shares off (SimulationSetup)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    from graphsim.serving import DeploymentConfig, ParallelConfig, parse_lengths, simulate, summarize, synthetic
    from graphsim.serving.deployment import build_cost, plan_deployment

    config = DeploymentConfig(model=args.model, hardware=args.gpu, parallel=ParallelConfig(tensor_parallel_size=args.tp))
    dep = plan_deployment(config)
    t1 = time.perf_counter()
    cost, note, kernels = build_cost(dep, args.profile)
    t2 = time.perf_counter()
    setup = dep.simulation_setup(cost)
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        specs = synthetic(args.num_requests, rate, parse_lengths(args.input_len, "input"),
                          parse_lengths(args.output_len, "output"), seed=args.seed)
        unmetered = None
        if args.compare_shares:  # warm the cost tables first, so that both timed runs find them priced
            simulate(setup, specs)
        probes0 = getattr(cost, "evaluations", 0)
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(setup, specs)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        s = summarize(res)
        if args.compare_shares:  # the same run without the per-source meter
            w0, c0 = time.perf_counter(), time.process_time()
            simulate(dataclasses.replace(setup, source_shares=False), specs)
            unmetered = (time.perf_counter() - w0, time.process_time() - c0)
        rows.append({"rate": rate, "simulate_wall_s": wall, "simulate_cpu_s": cpu, "iterations": s.iterations,
                     "probe_steps_priced": getattr(cost, "evaluations", 0) - probes0,
                     "completed": s.completed, "preemptions": s.preemptions,
                     "requests_per_s": s.requests_per_s, "output_tokens_per_s": s.output_tokens_per_s,
                     "ttft_ms_mean": s.ttft_ms.mean, "tpot_ms_mean": s.tpot_ms.mean, "source": s.source,
                     "source_shares": s.source_shares, "simulate_wall_s_without_shares": unmetered[0] if unmetered else None,
                     "simulate_cpu_s_without_shares": unmetered[1] if unmetered else None})
    out = {"model": args.model, "gpu": dep.hardware.id, "tp": args.tp, "requests": args.num_requests,
           "input_len": args.input_len, "output_len": args.output_len, "data": note, "kernels": kernels,
           "setup_s": {"imports_and_plan": t1 - t0, "trace_and_cost_tables": t2 - t1},
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
                      f"affinity {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}",
           "runs": rows}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.model} on {dep.hardware.id} tp={args.tp}: {args.num_requests} Poisson requests, input "
          f"{args.input_len}, output {args.output_len}")
    print(f"data: {note}")
    print(f"set-up: plan {t1 - t0:.2f} s, trace + cost tables {t2 - t1:.2f} s ({kernels} kernels); {out['machine']}")
    for r in rows:
        print(f"rate {r['rate']:g} req/s: simulate {r['simulate_wall_s']:.2f} s wall "
              f"({r['simulate_cpu_s']:.2f} s CPU), {r['iterations']:,} iterations, "
              f"{r['probe_steps_priced']:,} probe steps priced; {r['completed']} done, {r['preemptions']} preemptions, "
              f"{r['requests_per_s']:.2f} req/s, {r['output_tokens_per_s']:,.0f} output tok/s, TTFT mean "
              f"{r['ttft_ms_mean']:.1f} ms, TPOT mean {r['tpot_ms_mean']:.2f} ms [shares of predicted time: "
              + ", ".join(f"{k} {v:.1%}" for k, v in r["source_shares"].items()) + "]")
        if r["simulate_wall_s_without_shares"] is not None:
            print(f"  without the source meter: {r['simulate_wall_s_without_shares']:.2f} s wall "
                  f"({r['simulate_cpu_s_without_shares']:.2f} s CPU)")


if __name__ == "__main__":
    main()

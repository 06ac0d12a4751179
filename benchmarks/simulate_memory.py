"""Serving-simulator memory and speed at scale: 1,000,000 Poisson requests through `simulate` with the
iteration rows streamed (`IterationLog(keep=False)`, what `graphsim simulate` does), then `summarize`.

    python benchmarks/simulate_memory.py                       # 1,000,000 requests, llama-3.1-8b on h100
    python benchmarks/simulate_memory.py -n 100000 --json
    python benchmarks/simulate_memory.py --requests-out /tmp/r.parquet   # include writing one row per request

Reports the peak resident set (`resource.getrusage(RUSAGE_SELF).ru_maxrss`: the whole process, the
workload list and the traced model included) before the run and after it, the simulator's wall time and
its cost per request-iteration, wall and CPU (one request in one iteration's batch: Σ batch sizes over all iterations,
the unit of work an iteration-level simulator cannot avoid), and the bytes the result keeps per request.
The issue's targets: ≤ 1 GiB peak RSS and ≤ 10 µs per request-iteration for 1,000,000 requests.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time


def peak_rss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux (bytes on macOS)
    return kib / (1 << 20) if sys.platform == "darwin" else kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("-n", "--num-requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second (Poisson)")
    ap.add_argument("--input-len", default="128:1024")
    ap.add_argument("--output-len", default="16:256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=None, help="profile.db (default: the GPU's default path when present)")
    ap.add_argument("--requests-out", default=None, help="also write the per-request results here (.csv/.parquet)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from graphsim.serving import DeploymentConfig, parse_lengths, simulate, summarize, synthetic
    from graphsim.serving.deployment import build_cost, plan_deployment
    from graphsim.serving.records import IterationLog

    dep = plan_deployment(DeploymentConfig(model=args.model, hardware=args.gpu))
    cost, note, _ = build_cost(dep, args.profile)
    setup = dep.simulation_setup(cost)
    rss_setup = peak_rss_mib()
    work = synthetic(args.num_requests, args.rate, parse_lengths(args.input_len, "input"),
                     parse_lengths(args.output_len, "output"), seed=args.seed)
    rss_workload = peak_rss_mib()
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(setup, work, log=IterationLog(keep=False))
    sim_s, sim_cpu_s = time.perf_counter() - w0, time.process_time() - c0
    rss_sim = peak_rss_mib()
    s0 = time.perf_counter()
    s = summarize(res)
    summarize_s = time.perf_counter() - s0
    write_s = None
    if args.requests_out:
        from graphsim.serving.trace_export import write_requests

        t0 = time.perf_counter()
        write_requests(res, args.requests_out)
        write_s = time.perf_counter() - t0
    totals = res.iteration_totals
    v, _, _ = res.itl_runs
    row = {
        "requests": args.num_requests, "completed": s.completed, "rate": args.rate, "input_len": args.input_len,
        "output_len": args.output_len, "model": args.model, "gpu": args.gpu, "data": note,
        "iterations": totals.iterations, "request_iterations": totals.request_iterations,
        "simulate_wall_s": sim_s, "simulate_cpu_s": sim_cpu_s, "summarize_wall_s": summarize_s,
        "requests_out_wall_s": write_s, "us_per_request_iteration": sim_s / totals.request_iterations * 1e6,
        "cpu_us_per_request_iteration": sim_cpu_s / totals.request_iterations * 1e6,
        "peak_rss_mib": {"after_setup": rss_setup, "after_workload": rss_workload, "after_simulate": rss_sim,
                         "end": peak_rss_mib()},
        "result_bytes_per_request": (res.requests.nbytes + sum(a.nbytes for a in res.itl_runs)) / args.num_requests,
        "itl_runs": len(v), "ttft_ms_p50": s.ttft_ms.p50, "tpot_ms_p50": s.tpot_ms.p50,
        "python": platform.python_version(), "machine": platform.machine(),
    }
    if args.json:
        print(json.dumps(row, indent=1))
        return
    r = row["peak_rss_mib"]
    print(f"{args.num_requests:,} requests ({s.completed:,} completed), {totals.iterations:,} iterations, "
          f"{totals.request_iterations:,} request-iterations")
    print(f"simulate {sim_s:.1f} s wall ({sim_cpu_s:.1f} s CPU) = {row['us_per_request_iteration']:.2f} µs "
          f"({row['cpu_us_per_request_iteration']:.2f} µs CPU) per request-iteration (target ≤ 10); summarize {summarize_s:.1f} s" + (f"; --requests-out {write_s:.1f} s" if write_s else ""))
    print(f"peak RSS (MiB): after setup {r['after_setup']:.0f}, workload {r['after_workload']:.0f}, "
          f"simulate {r['after_simulate']:.0f}, end {r['end']:.0f} (target ≤ 1024); "
          f"result keeps {row['result_bytes_per_request']:.0f} B/request")


if __name__ == "__main__":
    main()

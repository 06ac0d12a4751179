"""Cost-tree evaluation speed: batches priced per second for Llama-3.1-70B at TP=4.

    python benchmarks/cost_eval.py [--batches 100000] [--gpu h200] [--profile DB]

The cost model (passes, tree, compilation) is built once; then N random decode/prefill batches are priced in one
vectorised call (leaf lookup per kernel key, then the tree's Sum/Max/Scale program). Reports
batches per second for the evaluation alone and including the construction of the Step objects.
Target (issue 5): ≥ 100,000 batch evaluations per second on this machine.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--batches", type=int, default=100_000)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()

    from graphsim.cost_model import build_cost_model
    from graphsim.importers.hf import import_hf
    from graphsim.workload import SeqGroup, Step

    graph, _ = import_hf(args.model)
    t0 = time.perf_counter()
    # only an explicit --profile is used (no default profile.db), so "roofline only" means what it says
    cm = build_cost_model(graph, args.gpu, tp=args.tp, profile=args.profile, default_profile=False)
    build_s = time.perf_counter() - t0  # the passes and the tree's construction and compilation
    tree, pricer, dtypes = cm.tree, cm.pricer, cm.dtypes

    rng = np.random.default_rng(0)
    n = args.batches
    t0 = time.perf_counter()
    steps = []
    for i, (b, c, p) in enumerate(zip(rng.integers(1, 257, n), rng.integers(1, 32768, n), rng.integers(16, 8193, n), strict=False)):
        if i % 4 == 0:  # a quarter are mixed steps: one prefill chunk plus a decode batch
            steps.append(Step((SeqGroup(int(p), 0, 1), SeqGroup(1, int(c), int(b)))))
        else:
            steps.append(Step((SeqGroup(1, int(c), int(b)),)))
    steps_s = time.perf_counter() - t0
    tree.evaluate(steps[:1000], pricer, dtypes)  # warm the curve cache
    t0 = time.perf_counter()
    ev = tree.evaluate(steps, pricer, dtypes)
    eval_s = time.perf_counter() - t0
    totals = ev.total_us()
    print(json.dumps({
        "model": args.model, "tp": args.tp, "leaves": len(tree.leaves), "batches": n,
        "passes_and_compile_s": round(build_s, 4), "eval_s": round(eval_s, 3),
        "batches_per_s": round(n / eval_s), "batches_per_s_including_step_objects": round(n / (eval_s + steps_s)),
        "median_total_us": float(np.nanmedian(totals)), "missing_batches": int(np.isnan(totals).sum()),
        "data": "profile " + args.profile if args.profile else "roofline only",
    }, indent=1))


if __name__ == "__main__":
    main()

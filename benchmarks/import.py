"""Import speed and memory: graphsim's one-layer-per-type trace vs a naive full-depth trace.

    python benchmarks/import.py [--models llama-3.1-70b deepseek-v3] [--skip-full] [--json]

Each measurement runs in a fresh Python process, so module caches do not favour either side.
Reported per model:
  import_s      wall time of `import_hf(model)` (build on meta + trace + convert), with torch and
                transformers' modelling machinery already imported (a once-per-process cost of
                ~3-5 s, shown as startup_s)
  process_s     wall time of the whole process, start-up included
  peak_rss_mib  peak resident memory of that process
  full_depth_s  wall time of the same import tracing every layer (the naive way)
  speedup       full_depth_s / import_s
  dispatch_s    the same distinct-layer forward recorded by a TorchDispatchMode over fake
                tensors (the alternative tracer), for comparison with torch.export

Targets (issue 2): Llama-3.1-70B ≤ 3 s, DeepSeek-V3 ≤ 10 s, each ≥ 5× faster than full depth,
DeepSeek-V3 under 2 GiB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch, transformers, transformers.modeling_utils, torch.export  # noqa: F401
from graphsim.importers.hf import import_hf
startup = time.perf_counter() - t0
name, mode = sys.argv[1], sys.argv[2]
res = {"startup_s": startup}
if mode == "dispatch":
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from graphsim.catalog import resolve_model
    from graphsim.importers.hf.build import build_on_meta
    from graphsim.importers.hf.custom_ops import semantic_kernels
    from graphsim.importers.hf.layers import keep_representatives, plan_layers

    class Count(TorchDispatchMode):
        n = 0
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    t1 = time.perf_counter()
    built = build_on_meta(resolve_model(name).config)
    keep_representatives(built.model, plan_layers(built.model), built.config)
    with semantic_kernels(built.model), FakeTensorMode(allow_non_fake_inputs=True) as fm:
        ids = fm.from_tensor(torch.zeros((1, 128), dtype=torch.long))
        with Count():
            built.model(input_ids=ids, use_cache=False)
    res["dispatch_s"] = time.perf_counter() - t1
    res["dispatch_ops"] = Count.n
else:
    t1 = time.perf_counter()
    g, rep = import_hf(name, full_depth=(mode == "full"), cache=False)  # the trace itself, never the graph cache
    res["import_s"] = time.perf_counter() - t1
    res["nodes"] = rep.nodes
    res["traced_layers"] = len(rep.traced_layers)
    res["layers"] = rep.num_layers
    res["params"] = rep.param_count
res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(res))
"""


def run_child(model: str, mode: str) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, model, mode], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{model} ({mode}) failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = wall
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama-3.1-70b", "deepseek-v3"])
    ap.add_argument("--skip-full", action="store_true", help="skip the naive full-depth trace")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for m in args.models:
        fast = run_child(m, "fast")
        row = {"model": m, "layers": fast["layers"], "traced_layers": fast["traced_layers"], "nodes": fast["nodes"],
               "import_s": fast["import_s"], "startup_s": fast["startup_s"], "process_s": fast["process_s"],
               "peak_rss_mib": fast["peak_rss_mib"]}
        disp = run_child(m, "dispatch")
        row["dispatch_s"] = disp["dispatch_s"]
        if not args.skip_full:
            full = run_child(m, "full")
            row["full_depth_s"] = full["import_s"]
            row["full_depth_nodes"] = full["nodes"]
            row["speedup"] = full["import_s"] / fast["import_s"]
        rows.append(row)
        print(json.dumps(row) if args.json else
              "  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()

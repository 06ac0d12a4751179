"""Pass time on a large graph: `Graph.node()`'s name index against the linear scan it replaced.

    python benchmarks/graph_lookup.py [--arch RwkvForCausalLM] [--repeat 3] [--json]

Traces the tiny class-default config of `--arch` (benchmarks/architectures_sweep.py's shrink; RWKV's time-mix
loop unrolls to ~8,200 nodes), then times `fold,fuse{target=vllm}` on copies of the graph, alternating the
index and a linear scan patched in for comparison (the same process, interleaved, so the shared machine's load
falls on both). Reported: the median seconds of each and their ratio. Target: the index ≥ 2x faster on this graph
(the fuse pass's `_build_graph` asks for every kept value's spec; a scan makes that quadratic).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Pass time: Graph.node()'s name index against a linear scan.")
    ap.add_argument("--arch", default="RwkvForCausalLM")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from architectures_sweep import tiny_config

    from graphsim.importers.hf import import_hf
    from graphsim.ir import graph as ir_graph
    from graphsim.passes.pipeline import run_pipeline

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        path.write_text(json.dumps(tiny_config(args.arch)))
        graph, _ = import_hf(str(path))

    indexed = ir_graph.Graph.node

    def linear(self: ir_graph.Graph, name: str) -> ir_graph.Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    run_pipeline(copy.deepcopy(graph), "fold,fuse{target=vllm}")  # warm: imports the rule modules
    times: dict[str, list[float]] = {"index": [], "linear": []}
    try:
        for _ in range(args.repeat):
            for label, fn in (("index", indexed), ("linear", linear)):
                ir_graph.Graph.node = fn  # type: ignore[method-assign]
                g = copy.deepcopy(graph)
                t0 = time.perf_counter()
                run_pipeline(g, "fold,fuse{target=vllm}")
                times[label].append(time.perf_counter() - t0)
    finally:
        ir_graph.Graph.node = indexed  # type: ignore[method-assign]
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"arch": args.arch, "nodes": len(graph.nodes), "index_s": round(med["index"], 3),
           "linear_s": round(med["linear"], 3), "speedup": round(med["linear"] / med["index"], 2)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['arch']}: {out['nodes']} nodes; fold+fuse median of {args.repeat}: index {out['index_s']} s, "
              f"linear scan {out['linear_s']} s → {out['speedup']}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does a test's GPU behave like the GPU its page names? Evidence from the measured runs and the datasheets alone.

    python benchmarks/gpu_consistency.py [--json]

A lab that ran one model with one vLLM version and the same workloads on an H100 page and an A100 page gives two
same-work runs per workload: the same requests (one seed, one length), so the same FLOPs and the same bytes. Their
benchmark durations' ratio (A100 / H100) is then the speed ratio of the two servers on that work, with no model of
either. Where the work is mostly compute (long prompts, every request sent at t = 0) it should sit near the two GPUs'
dense BF16 peak ratio; where it is mostly memory (decode steps) near their HBM bandwidth ratio. The script prints,
per pair and workload, the duration ratio and the ratio of median inter-token latencies (the median step: decode
steps on the H100 pages), beside the datasheet ratios of the GPU the page names and of a same-named sibling part.

It also bounds a decode step from below: a step reads every weight once, so at the named GPU's datasheet HBM
bandwidth the weights alone take `weights / bandwidth`, and the KV cache in use can at most double-count the rest of
the memory vLLM manages (`gpu_memory_utilization × memory − weights`). `ceiling_ms` is the time to read ALL of that
at the datasheet peak: a median decode step well above it, on a step of a few sequences (host time under a
millisecond), says the GPU did not stream memory at its named peak.

Datasheet figures (dense, without sparsity; NVIDIA H100 datasheet
https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet, A100 datasheet
https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf):
H100 SXM 989 TFLOP/s BF16, 3.35 TB/s; H100 PCIe 756 TFLOP/s BF16 (1,513 with sparsity), 2.0 TB/s, 350 W;
A100 SXM 80GB 312 TFLOP/s BF16, 2.039 TB/s. The SXM and A100 figures are graphsim's hardware specs
(graphsim/profiles/hardware/); the PCIe figures are the H100 datasheet's PCIe column (aiconfigurator-core 0.12
systems/h100_pcie.yaml holds the same 756.5 TFLOP/s and 2 TB/s, and no measured tables).

Nothing here is fitted and nothing reads a graphsim prediction.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import validate_serving as vs  # noqa: E402  (this folder's harness: runs, tests, deployments)

# Datasheet (dense BF16 FLOP/s, HBM B/s) of the parts a page may name and their siblings (module docstring).
PARTS = {
    "H100 SXM": (989.5e12, 3.35e12),
    "H100 PCIe": (756.5e12, 2.0e12),
    "A100 SXM": (312e12, 2.039e12),
}
NAMED = {"H100 80GB": "H100 SXM", "A100 80GB": "A100 SXM"}  # the harness's GPU names → the part the pages name
SIBLING = {"H100 SXM": "H100 PCIe"}


def workload(run: dict[str, Any]) -> str:
    return run["id"].rsplit("-", 1)[-1]


def pairs(runs: list[dict[str, Any]], tests: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(H100 test, A100 test) keys of one file with one model, TP, node count and vLLM version."""
    out = []
    for hk, h in tests.items():
        if h["gpu"] != "H100 80GB":
            continue
        for ak, a in tests.items():
            same = all(h[f] == a[f] for f in ("model", "tp", "nodes", "vllm"))
            if a["gpu"] == "A100 80GB" and same and hk.split(":")[0] == ak.split(":")[0]:
                out.append((hk, ak))
    return out


def ratio_row(h_run: dict[str, Any], a_run: dict[str, Any]) -> dict[str, Any]:
    hm, am = h_run["measured"], a_run["measured"]
    return {"workload": workload(h_run), "h100_run": h_run["id"], "a100_run": a_run["id"],
            "duration_ratio": am["duration"] / hm["duration"],
            "median_itl_ratio": am["median_itl_ms"] / hm["median_itl_ms"],
            "h100_median_itl_ms": hm["median_itl_ms"], "a100_median_itl_ms": am["median_itl_ms"]}


def datasheet_ratios(part: str) -> dict[str, float]:
    f, b = PARTS[part]
    fa, ba = PARTS["A100 SXM"]
    return {"bf16_ratio": f / fa, "hbm_ratio": b / ba}


def decode_ceiling(test: dict[str, Any], part: str) -> dict[str, float]:
    """Weights per rank and the time to read them, and everything vLLM manages, at `part`'s datasheet HBM peak."""
    dep, _ = vs.Predictor(None).deployment(test)
    mem = dep.to_json()["memory"]
    weights = next(t["bytes"] for t in mem["terms"] if t["name"] == "weights")
    managed = mem["requested_bytes"]  # gpu_memory_utilization × memory: weights + KV + the rest vLLM holds
    bw = PARTS[part][1]
    return {"weights_gb": weights / 1e9, "managed_gb": managed / 1e9, "weights_ms": weights / bw * 1e3,
            "ceiling_ms": managed / bw * 1e3}


def report() -> list[dict[str, Any]]:
    runs, tests = vs.load_runs()
    by_test: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        by_test.setdefault(r["test_key"], {})[workload(r)] = r
    out = []
    for hk, ak in pairs(runs, tests):
        h, a = tests[hk], tests[ak]
        part = NAMED[h["gpu"]]
        rows = [ratio_row(by_test[hk][w], by_test[ak][w]) for w in by_test.get(hk, {}) if w in by_test.get(ak, {})]
        entry: dict[str, Any] = {
            "h100_test": hk, "a100_test": ak, "model": h["model"], "tp": h["tp"], "vllm": h["vllm"], "rows": rows,
            "named": {"part": part, **datasheet_ratios(part)},
        }
        if part in SIBLING:
            entry["sibling"] = {"part": SIBLING[part], **datasheet_ratios(SIBLING[part])}
        if h["tp"] == 1:  # one GPU holds every weight: the decode step's memory floor is plain
            entry["h100_decode"] = {p: decode_ceiling(h, p) for p in (part, *([SIBLING[part]] if part in SIBLING else []))}
            entry["a100_decode"] = {"A100 SXM": decode_ceiling(a, "A100 SXM")}
        if rows:
            entry["median_duration_ratio"] = statistics.median(r["duration_ratio"] for r in rows)
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    out = report()
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for e in out:
        print(f"{e['model']} TP{e['tp']} vLLM {e['vllm']}: {e['h100_test']} (H100) vs {e['a100_test']} (A100)")
        for p in ("named", "sibling"):
            if p in e:
                d = e[p]
                print(f"  datasheet {d['part']:9s} / A100 SXM: BF16 {d['bf16_ratio']:.2f}x, HBM {d['hbm_ratio']:.2f}x")
        for r in e["rows"]:
            print(f"  {r['workload']:>4s}: duration A100/H100 {r['duration_ratio']:.2f}x, median ITL A100/H100 "
                  f"{r['median_itl_ratio']:.2f}x ({r['a100_median_itl_ms']:.2f} / {r['h100_median_itl_ms']:.2f} ms)")
        if "median_duration_ratio" in e:
            print(f"  median duration ratio {e['median_duration_ratio']:.2f}x")
        for side in ("h100_decode", "a100_decode"):
            for part, d in e.get(side, {}).items():
                print(f"  {side.split('_')[0].upper()} as {part}: weights {d['weights_gb']:.1f} GB read in "
                      f"{d['weights_ms']:.1f} ms; all {d['managed_gb']:.1f} GB vLLM manages in {d['ceiling_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

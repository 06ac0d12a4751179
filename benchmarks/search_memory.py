"""Peak memory of `graphsim search` on the Qwen3-32B job: Qwen3-32B on H200, input 4,000 / output 1,000 tokens,
TTFT ≤ 2 s, TPOT ≤ 30 ms; 8 GPUs (the throughput search, refined) and the fewest GPUs for 20 req/s.

    python benchmarks/search_memory.py                 # warm graph cache and cold (GRAPHSIM_NO_CACHE=1)
    python benchmarks/search_memory.py --profile /tmp/h200.db --json

Each job runs in a fresh subprocess; its peak resident set is `resource.getrusage(RUSAGE_SELF).ru_maxrss`
read at the end inside that process (Linux reports KiB). "warm": the traced graph comes from graphsim's graph
cache (a repeated run; no torch import); "cold": GRAPHSIM_NO_CACHE=1, the model is traced on meta with torch
and transformers imported in the process. The target (issue 19) is ≤ 300 MiB.

The command itself is measured too: `graphsim search … --json` for vLLM and with `--engine auto` (the three
engines one after another, each on its own default tables; `--profile` does not apply to it), warm, its JSON
written to a file; its peak is the ru_maxrss `os.wait4` returns for that child process (the whole command,
its JSON output included; the trace never runs in another process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, resource, sys, time
from graphsim.serving import SLO, DeploymentConfig, parse_lengths
from graphsim.serving.backends import LocalBackend
from graphsim.serving.search import run_search
from graphsim.serving.search_load import LoadTarget, run_load_search
from graphsim.serving.search_space import SearchSpec
kind, profile = sys.argv[1], (sys.argv[2] or None)
spec = SearchSpec(base=DeploymentConfig(model="qwen3-32b", hardware="h200"), gpus=8, isl=parse_lengths("4000", "isl"),
                  osl=parse_lengths("1000", "osl"), slo=SLO(2000, 30), profile=profile, verify=4, refine=4)
t = time.perf_counter()
if kind == "search":
    res = run_search(spec, LocalBackend(1))
    answer = res.row(res.best).candidate.label() if res.best is not None else None
else:
    load, _ = run_load_search(spec, LoadTarget(request_rate=20.0), LocalBackend(1))
    answer = f"{load.answer.candidate.label()} x {load.answer.replicas}" if load.answer else None
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "wall_s": time.perf_counter() - t, "torch_imported": "torch" in sys.modules, "answer": answer}))
"""


def run(kind: str, profile: str | None, cold: bool) -> dict:
    env = dict(os.environ)
    if cold:
        env["GRAPHSIM_NO_CACHE"] = "1"
    out = subprocess.run([sys.executable, "-c", CHILD, kind, profile or ""], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the {kind} job failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


CLI_ARGS = ["qwen3-32b", "--gpu", "h200", "--gpus", "8", "--isl", "4000", "--osl", "1000", "--ttft", "2000",
            "--tpot", "30", "--verify", "4", "--json"]


def run_cli(engine: str, profile: str | None) -> dict:
    """`graphsim search … --json` in a child process: its own peak RSS (os.wait4's rusage of that child)."""
    argv = [sys.executable, "-m", "graphsim", "search", *CLI_ARGS, "--engine", engine]
    if profile and engine != "auto":
        argv += ["--profile", profile]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[2:])} failed: {err.read().strip()[-500:]}")
        out.seek(0)
        d = json.load(out)
    if engine == "auto":
        best = d["best_engine"]
        answer = f"{best}: {d['per_engine'][best]['label']}" if best else None
    else:
        answer = next((r["candidate"]["label"] for r in d["rows"] if r["candidate"]["id"] == d["best"]), None)
    return {"peak_rss_mib": usage.ru_maxrss / 1024, "wall_s": wall, "torch_imported": None, "answer": answer}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--profile", default=None, help="profile.db (default: the GPU's default path when present)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    run("search", args.profile, cold=False)  # fill the graph cache once
    for kind in ("search", "load"):
        for cold in (False, True):
            rows.append({"job": "search 8 GPUs" if kind == "search" else "fewest GPUs for 20 req/s",
                         "graph": "cold (traced)" if cold else "warm (cached)", **run(kind, args.profile, cold)})
    for engine in ("vllm", "auto"):
        run_cli(engine, args.profile)  # fill each engine's graph cache once
        rows.append({"job": f"graphsim search --engine {engine}", "graph": "warm (cached)",
                     **run_cli(engine, args.profile)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'job':<32} {'graph':<14} {'peak RSS MiB':>12} {'wall s':>7}  torch  answer")
    for r in rows:
        print(f"{r['job']:<32} {r['graph']:<14} {r['peak_rss_mib']:>12,.0f} {r['wall_s']:>7.1f}  "
              f"{'-' if r['torch_imported'] is None else 'yes' if r['torch_imported'] else 'no':<5}  {r['answer']}")
    print("target: ≤ 300 MiB")


if __name__ == "__main__":
    main()

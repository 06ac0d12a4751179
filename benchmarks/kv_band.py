"""How much of a run's error the unknown KV-cache size can hold: each run without a startup log, simulated at
graphsim's budget and at the least KV cache its server could have started with.

    python benchmarks/kv_band.py [--subset SEL]... [--all] [--json]

A run whose page published no vLLM startup log ("Available KV cache memory") is simulated by
`validate_serving.py` at graphsim's memory budget for the run's `--gpu-memory-utilization` (weights, activation peak,
a non-torch overhead taken from public start-up logs: serving/memory.py, serving/non_torch.py). That budget is an estimate; the run itself bounds it from below:
vLLM refuses to start when the KV cache cannot hold one request of `--max-model-len` tokens
(vLLM 0.10.1 vllm/v1/core/kv_cache_utils.py `check_enough_kv_cache_memory`: "To serve at least one request with
the models's max seq len ..."), and these servers started at vLLM's default `--max-model-len` (the model's
max_position_embeddings).
So the true KV cache lies between that floor, `blocks_per_request + 1` blocks (graphsim's own block count for one
max-length request, as its CapacityError checks, and one block of slack), and whatever vLLM's real budget was; above
graphsim's budget nothing bounds it. The script prints each run's errors at graphsim's budget and at the floor, and
the group medians at both: an error that changes sign inside the band is within what the missing log leaves open.

Nothing is fitted: the floor is the engine's own start-up rule applied to the run's stated `--max-model-len`.
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

import validate_serving as vs  # noqa: E402  (this folder's harness)


def floor_gib(test: dict[str, Any], pred: vs.Predictor) -> tuple[float, float]:
    """(graphsim's KV budget, the least KV cache that starts at the test's --max-model-len), GiB a rank."""
    dep, _ = pred.deployment(test)
    c = dep.capacity
    return c.available_bytes / 2**30, (c.blocks_per_request + 1) * c.bytes_per_block / 2**30


def band(subsets: list[str], take_all: bool = False) -> list[dict[str, Any]]:
    runs, tests = vs.load_runs()
    pred = vs.Predictor(None)
    out = []
    for r in vs.select(runs, tests, subsets):
        t = tests[r["test_key"]]
        if "kv_cache_memory_gib" in t or (vs.excluded(r, t) and not take_all):
            continue  # a logged KV cache has no band; left-out runs as the harness leaves them
        est, floor = floor_gib(t, pred)
        row: dict[str, Any] = {"id": r["id"], "group": f"vLLM {t['vllm']} · {t['gpu']} · {t['model']} · {vs.topology(t)}",
                               "kv_gib": est, "floor_gib": floor}
        for name, kv in (("at_budget", None), ("at_floor", floor)):
            tt = dict(t) if kv is None else {**t, "kv_cache_memory_gib": round(kv, 4)}
            try:
                p = vs.predict(r, tt, runs, pred, None)
            except Exception as e:  # reported, as the harness does
                row[name] = {"failed": f"{type(e).__name__}: {e}"}
                continue
            row[name] = {k: vs.error_pct(p["predicted"][k], r["measured"][k]) for k, _ in vs.METRICS}
        out.append(row)
    return out


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g, rs in groups.items():
        out[g] = {}
        for side in ("at_budget", "at_floor"):
            ok = [r[side] for r in rs if "failed" not in r[side]]
            if ok:
                out[g][side] = {k: statistics.median(abs(e[k]) for e in ok) for k, _ in vs.METRICS}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--subset", action="append", default=[], help="as validate_serving.py's --subset (repeatable)")
    ap.add_argument("--all", action="store_true", help="include the runs the harness leaves out by default")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    rows = band(args.subset, args.all)
    if args.json:
        print(json.dumps({"runs": rows, "medians": medians(rows)}, indent=1))
        return 0
    names = [label for _, label in vs.METRICS]
    for row in rows:
        cells = []
        for side in ("at_budget", "at_floor"):
            e = row[side]
            cells.append(e["failed"][:60] if "failed" in e else
                         " ".join(f"{n} {e[k]:+6.1f}%" for (k, _), n in zip(vs.METRICS, names, strict=True)))
        print(f"{row['id']:14s} KV {row['kv_gib']:6.2f} GiB: {cells[0]}  | floor {row['floor_gib']:6.2f} GiB: {cells[1]}")
    print()
    for g, sides in medians(rows).items():
        parts = [f"{side.replace('_', ' ')}: " + " / ".join(f"{v:.1f} %" for v in m.values()) for side, m in sides.items()]
        print(f"{g}: median |err| TTFT / TPOT / out tok/s  " + "  ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

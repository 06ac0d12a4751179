"""Leave-one-out error of the profile.db interpolation.

    python benchmarks/interpolation_loo.py DB [DB ...] [--tables gemm,moe,...] [--max-keys 400]

For every geometry key with at least three rows, each row that lies strictly inside its key's
measured range (on every coordinate) is removed in turn, the key's curve is rebuilt from the
remaining rows and evaluated at the removed point; the relative error |pred − measured| /
measured is collected per table. Points the reduced curve cannot reach (holes in a
multi-dimensional grid) are counted, not scored. Targets (issue 5): median ≤ 3 %, p90 ≤ 10 %.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from graphsim.costing.interpolate import Curve
from graphsim.costing.kernels import TableKind
from graphsim.costing.profile_db import KernelRows, ProfileDB


def loo_errors(rows: KernelRows) -> tuple[list[float], int]:
    errs, holes = [], 0
    coords, times = rows.coords, rows.times_us
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    for i in range(len(times)):
        if np.any(coords[i] <= lo) or np.any(coords[i] >= hi):
            continue
        keep = np.ones(len(times), dtype=bool)
        keep[i] = False
        curve = Curve(KernelRows(rows.key, coords[keep], times[keep]))
        t, _ = curve.evaluate(coords[i:i + 1])
        if not np.isfinite(t[0]):
            holes += 1
            continue
        errs.append(abs(t[0] - times[i]) / times[i])
    return errs, holes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--tables", default="gemm,attention_decode,attention_prefill,moe,collective,elementwise")
    ap.add_argument("--max-keys", type=int, default=400, help="keys sampled per table (evenly)")
    args = ap.parse_args()
    for path in args.dbs:
        db = ProfileDB.open(path)
        for table in args.tables.split(","):
            kind = TableKind(table)
            keys = db.keys(kind)
            if not keys:
                continue
            step = max(1, len(keys) // args.max_keys)
            errs: list[float] = []
            holes = 0
            for key in keys[::step]:
                rows = db.rows(key)
                if rows is None or len(rows) < 3:
                    continue
                e, h = loo_errors(rows)
                errs += e
                holes += h
            if not errs:
                continue
            a = np.asarray(errs)
            print(json.dumps({"db": path, "device": db.meta.device, "table": table, "keys": len(keys[::step]),
                              "points": len(a), "holes": holes, "median_pct": round(100 * float(np.median(a)), 2),
                              "p90_pct": round(100 * float(np.percentile(a, 90)), 2)}))


if __name__ == "__main__":
    main()

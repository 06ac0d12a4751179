"""Leave-one-geometry-out error of the geometry interpolation (costing/geometry_interp.py).

    python benchmarks/geometry_loo.py DB [DB ...] [--tables attention_prefill,attention_decode,gemm] [--max-keys 400]

Every measured key that lies between other measured geometries of its family (the bracketing the pricer
would do for an unmeasured key) is removed in turn and its rows are predicted from its neighbours' curves,
as if it had never been measured. The relative error |pred − measured| / measured is collected over its
rows per table, beside the error of the hardware roofline (what the pricer used for such a key before).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from graphsim.costing.geometry_interp import GEOMETRY_FIELDS, GeometryCurve, corners, geometry_family
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import Curve
from graphsim.costing.kernels import KernelKey, TableKind
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.roofline import roofline_us


def neighbour_curve(db: ProfileDB, key: KernelKey, keys: list[KernelKey]) -> GeometryCurve | None:
    """The curve the pricer would build for `key` were it not measured (None: not bracketed)."""
    names = GEOMETRY_FIELDS[type(key)]
    family = geometry_family(key, names)
    geos = {tuple(getattr(k, n) for n in names) for k in keys if geometry_family(k, names) == family}
    me = tuple(getattr(key, n) for n in names)
    found = corners(geos - {me}, me)
    if found is None:
        return None
    return GeometryCurve(key, [(w, Curve(db.rows(replace(key, **dict(zip(names, g, strict=True)))))) for w, g in found])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--tables", default="attention_prefill,attention_decode,gemm")
    ap.add_argument("--max-keys", type=int, default=400, help="keys sampled per table (evenly)")
    args = ap.parse_args()
    for path in args.dbs:
        db = ProfileDB.open(path)
        hw = load_hardware(db.meta.hardware) if db.meta.hardware else None
        for table in args.tables.split(","):
            keys = db.keys(TableKind(table))
            errs, roof, scored = [], [], 0
            for key in keys[::max(1, len(keys) // args.max_keys)]:
                curve = neighbour_curve(db, key, keys)
                if curve is None:
                    continue
                rows = db.rows(key)
                q = rows.coords.astype(np.float64)
                t, _ = curve.evaluate(q)
                ok = np.isfinite(t)
                if not ok.any():
                    continue
                scored += 1
                errs.append(np.abs(t[ok] / rows.times_us[ok] - 1))
                r = roofline_us(hw, key, q) if hw is not None else None
                if r is not None:
                    roof.append(np.abs(r[ok] / rows.times_us[ok] - 1))
            if not errs:
                print(f"{path} {table}: no key lies between measured geometries")
                continue
            e = np.concatenate(errs)
            line = (f"{path} {table}: {scored} keys, {len(e)} rows; |error| median {np.median(e):.1%}, "
                    f"p90 {np.percentile(e, 90):.1%}, max {e.max():.1%}")
            if roof:
                r = np.concatenate(roof)
                line += f"; roofline |error| median {np.median(r):.1%}, p90 {np.percentile(r, 90):.1%}"
            print(line)


if __name__ == "__main__":
    main()

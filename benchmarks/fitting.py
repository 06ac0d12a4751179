"""What the fit_*.py scripts share: module constants patched for a run, the validation harness's errors over a set of
runs, a grid search on a log loss, and median summaries.

Each fit_*.py fits a few constants of graphsim's serving model on the public runs of `validate_serving.py` that
isolate them (its training set) and prints the errors on every other run (held out), with and without the fit.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import validate_serving as vs  # noqa: E402  (this folder's harness)

Errors = dict[str, dict[str, float]]  # run id → metric → error %


@contextmanager
def patched(module: ModuleType, **values: float) -> Iterator[None]:
    """`module`'s constants set to `values` for the block (graphsim reads them when it builds a deployment)."""
    saved = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


def usable_runs() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(all runs, tests, the runs the harness does not leave out by default)."""
    runs, tests = vs.load_runs()
    return runs, tests, [r for r in runs if not vs.excluded(r, tests[r["test_key"]])]


def errors(chosen: Iterable[dict[str, Any]], tests: dict[str, dict[str, Any]], runs: list[dict[str, Any]],
           pred: vs.Predictor) -> Errors:
    out = {}
    for r in chosen:
        p = vs.predict(r, tests[r["test_key"]], runs, pred, None)
        out[r["id"]] = {k: vs.error_pct(p["predicted"][k], r["measured"][k]) for k, _ in vs.METRICS}
    return out


def log_loss(errs: Errors, metrics: tuple[str, ...]) -> float:
    """Σ ln²(predicted / measured) over the runs and metrics."""
    return sum(math.log(1 + e[k] / 100) ** 2 for e in errs.values() for k in metrics)


def grid_fit(loss: Callable[..., float], grid: Iterable[tuple[float, ...]]) -> tuple[float, ...]:
    """The grid point of least loss (the first of equals)."""
    best: tuple[float, tuple[float, ...]] | None = None
    for point in grid:
        v = loss(*point)
        if best is None or v < best[0]:
            best = (v, point)
    assert best is not None, "empty grid"
    return best[1]


def summary(errs: Errors) -> dict[str, Any]:
    return {k: {"median_abs_pct": round(statistics.median(abs(e[k]) for e in errs.values()), 1),
                "over": sum(e[k] > 0 for e in errs.values()), "under": sum(e[k] < 0 for e in errs.values())}
            for k, _ in vs.METRICS} if errs else {}


def summary_line(name: str, errs: Errors, width: int = 17) -> str:
    s = summary(errs)
    return f"  {name:<{width}} " + "  ".join(f"{lbl} {s[k]['median_abs_pct']:.1f} % ({s[k]['over']}:{s[k]['under']})"
                                               for k, lbl in vs.METRICS)

"""What the fit_*.py scripts share: module constants patched for a run, the validation harness's errors over a set of
runs, a grid search on a log loss, and median summaries.

Each fit_*.py fits a few constants of graphsim's serving model on the public runs of `validate_serving.py` that
isolate them (its training set) and prints the errors on every other run (held out), with and without the fit.
"""

from __future__ import annotations

import argparse
import json
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

from graphsim.errors import GraphsimError  # noqa: E402

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


# Training tests are named by their file and number (`test_key`): test numbers repeat across the data files (GPUStack's
# held-out tests 2 and 4 are other runs than dennislee22's tests 2 and 4, and no fit may see them).
DL22 = "dennislee22_vllm_benchmarking:"


def usable_runs() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(all runs, tests, the runs the harness does not leave out by default)."""
    runs, tests = vs.load_runs()
    return runs, tests, [r for r in runs if not vs.excluded(r, tests[r["test_key"]])]


def errors(chosen: Iterable[dict[str, Any]], tests: dict[str, dict[str, Any]], runs: list[dict[str, Any]],
           pred: vs.Predictor) -> Errors:
    out = {}
    for r in chosen:
        try:
            p = vs.predict(r, tests[r["test_key"]], runs, pred, None)
        except GraphsimError:  # a run graphsim cannot model (validate_serving.py leaves it out with the reason)
            continue
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


def two_stage_fit(loss: Callable[[float, float], float], coarse: Iterable[tuple[float, float]],
                  steps: tuple[float, float], reach: int) -> tuple[float, float]:
    """`grid_fit` over `coarse`, then over the points within `reach` `steps` of its best (none negative)."""
    a, b = grid_fit(loss, coarse)
    fine = [(a + steps[0] * i, b + steps[1] * j) for i in range(-reach, reach + 1) for j in range(-reach, reach + 1)]
    a, b = grid_fit(loss, [(x, y) for x, y in fine if x >= 0 and y >= 0])
    return a, b


def fit_and_hold(patch: Callable[[float, float], Any], point: tuple[float, float], baseline: tuple[float, float],
                 train: list[dict[str, Any]], held: list[dict[str, Any]], tests: dict[str, dict[str, Any]],
                 runs: list[dict[str, Any]], pred: vs.Predictor) -> tuple[Errors, Errors, Errors]:
    """(training errors at `point`, held-out errors at `point`, held-out errors at `baseline`); `patch(a, b)` is
    the context that sets the constants."""
    with patch(*point):
        fit_train, fit_held = errors(train, tests, runs, pred), errors(held, tests, runs, pred)
    with patch(*baseline):
        base_held = errors(held, tests, runs, pred)
    return fit_train, fit_held, base_held


def summary(errs: Errors) -> dict[str, Any]:
    return {k: {"median_abs_pct": round(statistics.median(abs(e[k]) for e in errs.values()), 1),
                "over": sum(e[k] > 0 for e in errs.values()), "under": sum(e[k] < 0 for e in errs.values())}
            for k, _ in vs.METRICS} if errs else {}


def summary_line(name: str, errs: Errors, width: int = 17) -> str:
    s = summary(errs)
    return f"  {name:<{width}} " + "  ".join(f"{lbl} {s[k]['median_abs_pct']:.1f} % ({s[k]['over']}:{s[k]['under']})"
                                               for k, lbl in vs.METRICS)


def arguments(doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """The fit scripts' command line: --json, --profiles."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profiles", help="as validate_serving.py's --profiles")
    return ap.parse_args(argv)


def report(as_json: bool, train: list[dict[str, Any]], fitted: dict[str, float], fit_train: Errors,
           held: dict[str, Errors], train_metrics: tuple[str, ...], held_note: str = "") -> int:
    """Print a fit (JSON with `as_json`): the training runs, the fitted constants, each training run's errors on
    `train_metrics`, and the held-out runs' medians under each model of `held` (the fit first)."""
    label = dict(vs.METRICS)
    n_held = len(next(iter(held.values()))) if held else 0
    if as_json:
        print(json.dumps({"training_runs": [r["id"] for r in train], "fitted": fitted, "training_errors_pct": fit_train,
                          "held_out": {"runs": n_held, **{k: summary(v) for k, v in held.items()}}}, indent=1))
        return 0
    print(f"training runs: {', '.join(r['id'] for r in train)}")
    print("fitted: " + ", ".join(f"{k} = {v:g}" for k, v in fitted.items()))
    for rid, e in fit_train.items():
        print(f"  {rid:<13} " + ", ".join(f"{label[k]} error {e[k]:+.1f} %" for k in train_metrics))
    print(f"held out ({n_held} runs{held_note}), median |error| (over:under):")
    for name, errs in held.items():
        print(summary_line(name, errs))
    return 0

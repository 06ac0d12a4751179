"""PNG plots of serving simulations: `graphsim sweep --plot` (throughput against TTFT/TPOT/E2E) and
`graphsim simulate --plot` (TTFT and TPOT distributions). matplotlib is an optional extra (`graphsim[plot]`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphsim.errors import GraphsimError


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or the one-line error naming the extra to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GraphsimError("--plot needs matplotlib: pip install 'graphsim[plot]'") from None
    return plt


def check_plot_path(path: str) -> None:
    """Before a run: a .png path that can be written, and matplotlib importable."""
    from graphsim.atomic import check_writable

    if not path.lower().endswith(".png"):
        raise GraphsimError(f"--plot '{path}': give a .png path")
    pyplot()
    check_writable(path)


def _save(fig: Any, path: str) -> None:
    from graphsim.atomic import atomic_path

    plt = pyplot()
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)


def write_sweep_png(points: Sequence[dict[str, Any]], path: str, title: str, x_label: str) -> None:
    """Three panels: output tokens/s per GPU (x) against TTFT, TPOT and E2E (mean and p90, y); every point
    labelled with its rate or concurrency (`point["label"]`). A point is a `Summary.to_json()` plus a label."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), dpi=110)
    x = [p["per_gpu"]["output_tokens_per_s"] for p in points]
    for ax, key, name in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT", "E2E"), strict=True):
        for stat, style in (("mean", "-o"), ("p90", "--s")):
            ax.plot(x, [p[key][stat] for p in points], style, markersize=4, linewidth=1.2, label=f"{name} {stat}")
        for xi, p in zip(x, points, strict=True):
            ax.annotate(p["label"], (xi, p[key]["mean"]), textcoords="offset points", xytext=(3, 4), fontsize=7)
        ax.set_xlabel("output tokens/s per GPU")
        ax.set_ylabel(f"{name}, ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title} (points: {x_label})", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def write_distribution_png(ttft_ms: np.ndarray, tpot_ms: np.ndarray, path: str, title: str) -> None:
    """Histograms of the completed requests' TTFT and TPOT, with the mean, p50, p90 and p99 marked."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for ax, values, name in zip(axes, (ttft_ms, tpot_ms), ("TTFT", "TPOT"), strict=True):
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if len(v):
            ax.hist(v, bins=min(60, max(5, len(v) // 5)), color="tab:blue", alpha=0.75)
            for q, color in ((50, "tab:green"), (90, "tab:orange"), (99, "tab:red")):
                ax.axvline(float(np.percentile(v, q)), color=color, linestyle="--", linewidth=1,
                           label=f"p{q} {np.percentile(v, q):,.1f} ms")
            ax.axvline(float(v.mean()), color="black", linewidth=1, label=f"mean {v.mean():,.1f} ms")
            ax.legend(fontsize=8)
        ax.set_xlabel(f"{name}, ms ({len(v):,} requests)")
        ax.set_ylabel("requests")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def request_latencies(res: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per completed request of a SimulationResult: TTFT and TPOT in ms (TPOT over requests of > 1 token), read
    from its compact request table as `metrics.summarize` does."""
    table = res.requests
    mask = table.completed_mask
    arrival, first, finish = (table.column(c)[mask] for c in ("arrival", "first_token_t", "finish_t"))
    outs = table.column("max_tokens")[mask].astype(np.float64)
    multi = outs > 1
    return (first - arrival) * 1e3, (finish[multi] - first[multi]) / (outs[multi] - 1) * 1e3

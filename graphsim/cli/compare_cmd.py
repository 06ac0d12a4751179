"""`graphsim compare PREDICTED MEASURED`: two `vllm bench serve --save-result` files, metric by metric.

PREDICTED is usually `graphsim simulate --save-result` (its `graphsim` block names the sources of its
times); MEASURED a file `vllm bench serve --save-result` wrote. Each metric present in both is printed
with the error (predicted − measured) / measured and its sign.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.errors import GraphsimError

# The order of the table: totals, throughputs, then each latency metric's statistics.
HEAD_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
             "max_concurrent_requests")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
STAT_PREFIXES = ("mean", "median", "std")


class CompareError(GraphsimError):
    pass


def load_result(path: str, what: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise CompareError(f"no {what} result file '{path}'; give a file written by vllm bench serve --save-result "
                           "or graphsim simulate --save-result")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        reason = ("not UTF-8 text" if isinstance(e, UnicodeDecodeError) else "JSON nested too deeply to read"
                  if isinstance(e, RecursionError) else f"not one JSON document ({e.msg})")
        raise CompareError(f"{what} result '{path}' is {reason}; give one --save-result file (an --append-result "
                           "file holds several: split it into one file per run)") from None
    if not isinstance(doc, dict) or "duration" not in doc:
        raise CompareError(f"{what} result '{path}' has no 'duration'; it is not a vllm bench serve result")
    duration = doc["duration"]
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration < math.inf:
        raise CompareError(f"{what} result '{path}' has duration {duration!r}; a run's result has a positive, "
                           "finite duration in seconds (give the file of a run that completed requests)")
    return doc


def metric_keys(pred: dict[str, Any], meas: dict[str, Any]) -> list[str]:
    """The numeric metrics both files hold, in table order."""
    keys = list(HEAD_KEYS)
    for m in LATENCY_METRICS:
        keys += [f"{s}_{m}_ms" for s in STAT_PREFIXES]
        pct = sorted((k for k in pred if k.startswith("p") and k.endswith(f"_{m}_ms")
                      and k[1:-len(f"_{m}_ms")].replace(".", "", 1).isdigit()),
                     key=lambda k: float(k[1:-len(f"_{m}_ms")]))
        keys += pct

    def numeric(d: dict[str, Any], k: str) -> bool:
        v = d.get(k)
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    return [k for k in keys if numeric(pred, k) and numeric(meas, k)]


def compare(pred: dict[str, Any], meas: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for k in metric_keys(pred, meas):
        p, m = float(pred[k]), float(meas[k])
        err = (p - m) / m * 100 if m != 0 else (0.0 if p == 0 else math.inf)
        rows.append({"metric": k, "predicted": p, "measured": m, "error_pct": err,
                     "sign": "over" if p > m else "under" if p < m else "equal"})
    return rows


@app.command("compare")
def compare_cmd(
    predicted: str = typer.Argument(help="Predicted result (.json, graphsim simulate --save-result)."),
    measured: str = typer.Argument(help="Measured result (.json, vllm bench serve --save-result)."),
    as_json: opt.Json = False,
) -> None:
    """Compare a predicted and a measured vllm bench serve result file, metric by metric."""
    pred, meas = load_result(predicted, "predicted"), load_result(measured, "measured")
    rows = compare(pred, meas)
    if not rows:
        raise CompareError(f"'{predicted}' and '{measured}' share no numeric metric; are both vllm bench serve results?")
    g = pred.get("graphsim") if isinstance(pred.get("graphsim"), dict) else {}
    shares = g.get("source_shares") if g else None
    source = (", ".join(f"{k} {v:.1%}" for k, v in shares.items()) if isinstance(shares, dict) and shares
              else g.get("time_source") if g else None)  # share of predicted time per source, else the worst
    differ = [k for k in ("num_prompts", "request_rate", "max_concurrency", "burstiness") if pred.get(k) != meas.get(k)]
    if as_json:
        print(json.dumps({"predicted": predicted, "measured": measured, "predicted_time_source": source,
                          "settings_differ": {k: [pred.get(k), meas.get(k)] for k in differ}, "rows": rows},
                         indent=1, default=float))
        return
    from rich.table import Table

    title = f"predicted ({predicted}" + (f"; graphsim, iteration times: {source}" if source else "") + f") vs measured ({measured})"
    t = Table(title=title)
    for c in ("metric", "predicted", "measured", "error", "sign"):
        t.add_column(c, justify="left" if c in ("metric", "sign") else "right")
    for r in rows:
        t.add_row(r["metric"], f"{r['predicted']:,.2f}", f"{r['measured']:,.2f}", f"{r['error_pct']:+.1f} %", r["sign"])
    console.print(t)
    for k in differ:
        console.print(f"[yellow]note:[/] {k} differs: predicted {pred.get(k)!r}, measured {meas.get(k)!r}")

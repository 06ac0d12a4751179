"""Fit the front end's two constants (graphsim/serving/frontend.py, host.py `FRONTEND_*`) on the runs that isolate
it, then hold the whole validation set against the fit.

    python benchmarks/fit_frontend.py [--json] [--profiles DIR]

The front end (vLLM's API server: HTTP, tokenising on one worker thread, input processing, the hop to the
engine) is what a request spends before the engine's scheduler sees it: a serial part `frontend_us` per request
(one server, FIFO) and a non-serial `frontend_latency_us`. Two kinds of public run isolate it, because their GPU
work is a small, well-priced part of TTFT (`benchmarks/validate_serving.py` has the runs and their sources):

- one request on one GPU (n = 1): TTFT = latency + service + one prefill;
- a burst whose every prompt is already in the server's prefix cache (rate inf, all prompts warm): the engine
  computes only the last token of each prompt, so TTFT is the queue through the front end.

Training set: single-GPU runs of that kind (today dl22-t4-36, dl22-t5-46, dl22-t5-48, dl22-t5-49: vLLM 0.10.1.1,
A100, Qwen2-7B-Instruct, 1,024-token prompts). The fit minimises Σ ln²(predicted / measured mean TTFT) over a
grid (serial and latency each 0–30 ms in 2 ms steps, then 0.5 ms steps
within ±2 ms of the best). The per-token part is not identifiable from these runs (all
prompts have 1,024 tokens) and stays at its cited value. Every other run is held out: the script prints the
median |error| of TTFT, TPOT and output throughput on them with the fitted front end and without one.
"""

from __future__ import annotations

from typing import Any

import fitting as fit  # this folder's shared fitting code (it puts the harness on the path)
from fitting import vs

COARSE_MS = [i * 2.0 for i in range(16)]  # 0 … 30 ms, then 0.5 ms steps within ±2 ms of the best


def training(run: dict[str, Any], test: dict[str, Any], runs: list[dict[str, Any]], pred: vs.Predictor) -> bool:
    """One GPU, and either one request or a burst whose every prompt is in the prefix cache (as the harness
    simulates it: every request hits the cache the server's earlier runs left, at the constants in the tree)."""
    if test["tp"] != 1 or test.get("nodes", 1) != 1:
        return False
    n = run["bench"]["num_prompts"]
    if n == 1:
        return True
    if run["bench"]["request_rate"] not in ("inf", None):
        return False
    return vs.predict(run, test, runs, pred, None)["warm_prompts"] == n


def main(argv: list[str] | None = None) -> int:
    import graphsim.serving.host as host

    args = fit.arguments(__doc__, argv)
    runs, tests, usable = fit.usable_runs()
    pred = vs.Predictor(args.profiles)
    train = [r for r in usable if training(r, tests[r["test_key"]], runs, pred)]
    held = [r for r in usable if r not in train]

    def frontend(serial_ms: float, latency_ms: float):
        return fit.patched(host, FRONTEND_US=serial_ms * 1e3, FRONTEND_LATENCY_US=latency_ms * 1e3)

    def loss(serial_ms: float, latency_ms: float) -> float:
        with frontend(serial_ms, latency_ms):
            return fit.log_loss(fit.errors(train, tests, runs, pred), ("mean_ttft_ms",))

    serial, latency = fit.two_stage_fit(loss, [(s, lat) for s in COARSE_MS for lat in COARSE_MS], (0.5, 0.5), 4)
    fit_train, fit_held, none_held = fit.fit_and_hold(frontend, (serial, latency), (0.0, 0.0), train, held, tests,
                                                      runs, pred)
    return fit.report(args.json, train, {"FRONTEND_US": serial * 1e3, "FRONTEND_LATENCY_US": latency * 1e3}, fit_train,
                      {"fitted front end": fit_held, "no front end": none_held}, ("mean_ttft_ms",))


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit the V1 engine core's host time beyond its scheduler (graphsim/serving/host.py `V1_RUNNER_STEP_US`,
`V1_ENGINE_PER_SEQ_US`) on public vLLM runs that isolate it, then hold the other runs against the fit.

    python benchmarks/fit_engine_step.py [--json] [--profiles DIR]

A V1 engine step is the scheduler (timed on CPU by benchmarks/host_scheduler.py: `V1_SCHEDULER_*`), the model
runner's input preparation, the GPU step, sampling and the output handling of every sequence; without async
scheduling (vLLM ≤ 0.13) the CPU parts add to the GPU time. What is left beyond the timed scheduler, a per-step and a
per-sequence cost, has no published figure: it is fitted here on the mean TPOT of the single-GPU runs of test 4
(`benchmarks/validate_serving.py` has the runs and their sources: vLLM 0.10.1.1, A100 80GB, Qwen2-7B-Instruct,
TP1, 1 to 500 prompts, so 1 to 256 sequences a step), minimising Σ ln²(predicted / measured mean TPOT) over a grid
(per step 0–1,600 µs in 200 µs steps, per sequence 0–30 µs in 2.5 µs steps, then a finer grid around the best).
Every other run is held out: the same model at another memory setting (test 5), Qwen2.5-32B at TP1 (test 7), the
TP2 runs, and vLLM 0.19 on H100 with async scheduling (kvcached), whose host time overlaps the GPU step.

Superseded for the shipped per-sequence constant by benchmarks/fit_engine_links.py, which fits the per-sequence engine time and
the PCIe share together (fitted apart, each absorbed what the other left out); kept to show that result.
"""

from __future__ import annotations

import fitting as fit  # this folder's shared fitting code (it puts the harness on the path)
from fitting import vs

COARSE = [(200.0 * i, 2.5 * j) for i in range(9) for j in range(13)]
TRAIN_TEST = fit.DL22 + "4"


def main(argv: list[str] | None = None) -> int:
    import graphsim.serving.host as host

    args = fit.arguments(__doc__, argv)
    runs, tests, usable = fit.usable_runs()
    train = [r for r in usable if r["test_key"] == TRAIN_TEST]
    held = [r for r in usable if r["test_key"] != TRAIN_TEST]
    pred = vs.Predictor(args.profiles)

    def engine(step_us: float, per_seq_us: float):
        return fit.patched(host, V1_RUNNER_STEP_US=step_us, V1_ENGINE_PER_SEQ_US=per_seq_us)

    def loss(step_us: float, per_seq_us: float) -> float:
        with engine(step_us, per_seq_us):
            return fit.log_loss(fit.errors(train, tests, runs, pred), ("mean_tpot_ms",))

    step, per_seq = fit.two_stage_fit(loss, COARSE, (50.0, 1.25), 2)
    fit_train, fit_held, none_held = fit.fit_and_hold(engine, (step, per_seq), (0.0, 0.0), train, held, tests, runs,
                                                      pred)
    return fit.report(args.json, train, {"V1_RUNNER_STEP_US": step, "V1_ENGINE_PER_SEQ_US": per_seq}, fit_train,
                      {"fitted": fit_held, "scheduler only": none_held}, ("mean_tpot_ms",))


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit the V1 engine's per-sequence host time and NCCL's speed without peer-to-peer access TOGETHER, then hold the
other runs against the fit.

    python benchmarks/fit_engine_links.py [--json] [--profiles DIR]

`fit_engine_step.py` fitted a per-sequence engine cost on the TP1 runs alone and `fit_links.py` the PCIe-without-P2P
figures on the TP2 runs alone; each constant then absorbs what the other leaves out (a TP2 step holds both). This
fits `V1_ENGINE_PER_SEQ_US` (graphsim/serving/host.py) and `PCIE_SHM_BANDWIDTH_SHARE` (graphsim/costing/hardware.py;
`PCIE_SHM_LATENCY_US` kept at its value) on the mean TPOT of test 4 (vLLM 0.10.1.1, A100 80GB, Qwen2-7B-Instruct,
TP1, 0.25 of the memory) and of test 2 (the same at TP2 without P2P, at most 100 prompts), minimising
Σ ln²(predicted / measured mean TPOT) over a grid, and reports every other run of benchmarks/validate_serving.py
as held out (another memory setting, Qwen2.5-32B, Qwen2-72B, vLLM 0.19 on H100), beside the constants as they are.
"""

from __future__ import annotations

import fitting as fit  # this folder's shared fitting code (it puts the harness on the path)
from fitting import vs

PER_SEQ_US = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0)
SHARES = (0.15, 0.2, 0.25, 0.3, 0.4, 0.6)
TRAIN = {fit.DL22 + "4": 10_000, fit.DL22 + "2": 100}  # dennislee22 test → most prompts of a training run


def main(argv: list[str] | None = None) -> int:
    import graphsim.costing.hardware as hw
    import graphsim.serving.host as host

    args = fit.arguments(__doc__, argv)
    runs, tests, usable = fit.usable_runs()
    train = [r for r in usable if r["test_key"] in TRAIN and r["bench"]["num_prompts"] <= TRAIN[r["test_key"]]]
    held = [r for r in usable if r not in train]

    def errors(chosen, per_seq: float, share: float) -> fit.Errors:
        with fit.patched(host, V1_ENGINE_PER_SEQ_US=per_seq), fit.patched(hw, PCIE_SHM_BANDWIDTH_SHARE=share):
            return fit.errors(chosen, tests, runs, vs.Predictor(args.profiles))  # fresh: trees depend on the link

    per_seq, share = fit.grid_fit(lambda p, s: fit.log_loss(errors(train, p, s), ("mean_tpot_ms",)),
                                  [(p, s) for p in PER_SEQ_US for s in SHARES])
    now = (host.V1_ENGINE_PER_SEQ_US, hw.PCIE_SHM_BANDWIDTH_SHARE)
    return fit.report(args.json, train, {"V1_ENGINE_PER_SEQ_US": per_seq, "PCIE_SHM_BANDWIDTH_SHARE": share},
                      errors(train, per_seq, share),
                      {"fitted": errors(held, per_seq, share), "as they are": errors(held, *now)}, ("mean_tpot_ms",))


if __name__ == "__main__":
    raise SystemExit(main())

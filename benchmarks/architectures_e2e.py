"""Issue 16's architecture list end to end, as a user runs it: import → passes at TP8 (and TP8 + EP8 for MoE) →
predict → kv → simulate, from the real public configs aiconfigurator-core ships (its `model_configs/`).

    python benchmarks/architectures_e2e.py [--profile DB] [--json] [--only SUBSTRING]

Per config it runs the CLI (`graphsim predict … -tp 8 -b decode:64x4096 --json`, the same with
`--enable-expert-parallel` for MoE, `graphsim kv … -tp 8 --json`, `graphsim simulate … -tp 8 --concurrency 16
-n 32 --input-len 1024 --output-len 128 --max-model-len 8192 --json`) and reports: exit status of each (with the
error's one line), the decode step's time and source, the share of time in approximate (placeholder) kernels,
and the step's plausibility: its time over the weight-read floor (weights per rank from `kv` / HBM bandwidth:
must be ≥ 1) and over the sum of its kernels' roofline floors (`roofline_us` of each kernel at its dtype, the
collectives on their link: must be ≤ 3). The partition's conservation check runs inside every `predict` at TP8 (a failure is an error exit). Traces are
cached by graphsim, so only the first command per model traces. Takes a few minutes per model on 2 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

# Issue 16's list (the Hugging Face pages it names), as aiconfigurator-core ships their configs.
CONFIGS = [
    "deepseek-ai--DeepSeek-V3.2", "nvidia--GLM-5-NVFP4", "moonshotai--Kimi-K2-Instruct", "Qwen--Qwen3.5-27B",
    "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "MiniMaxAI--MiniMax-M2.5", "nvidia--Nemotron-H-56B-Base-8K", "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "XiaomiMiMo--MiMo-V2-Flash", "deepseek-ai--DeepSeek-V4-Flash",
]
GPU = "h200"


def _model_configs() -> Path:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("needs aiconfigurator-core (pip install -e '.[aiconfigurator]')")
    return Path(next(iter(spec.submodule_search_locations))) / "model_configs"


def _run(args: list[str]) -> tuple[int, dict | None, str]:
    p = subprocess.run([sys.executable, "-m", "graphsim", *args], capture_output=True, text=True)
    err = p.stderr.strip().splitlines()[-1] if p.returncode and p.stderr.strip() else ""
    try:
        return p.returncode, json.loads(p.stdout) if p.returncode == 0 else None, err
    except json.JSONDecodeError:
        return p.returncode, None, "output is not JSON"


def _is_moe(cfg: dict) -> bool:
    inner = cfg.get("text_config")
    text: dict = inner if isinstance(inner, dict) else cfg
    keys = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    return any(isinstance(text.get(k), int) and text[k] > 1 for k in keys)


def _step_checks(path: Path, ep: int, profile: str | None, weights_bytes: float | None) -> dict:
    """predict's decode step through the library (as tests/costing/test_ssm_real_configs.py does): its time, source,
    placeholder share, and its ratios to the weight-read floor and to the sum of its kernels' roofline floors
    (`costing.roofline.roofline_us` of every kernel at its own dtype, collectives on the link included)."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    spec = "decode:64x4096"
    cm = build_cost_model(str(path), GPU, tp=8, ep=ep, profile=profile)
    step = parse_batch_spec(spec)
    rep = predict(cm, [step], [spec]).batches[0]
    if rep.total_us is None:
        return {"error": f"missing prices: {rep.missing}"}
    hw = cm.pricer.hardware
    assert hw is not None
    floors = float(cm.roofline_sum_us([step])[0])
    approx = sum(r.total_us or 0.0 for r in rep.rows if r.approximate)
    out = {"decode_ms": round(rep.total_us / 1e3, 3), "source": str(getattr(rep, "source", "")),
           "placeholder_share_pct": round(100 * approx / rep.total_us, 2),
           "over_roofline_sum": round(rep.total_us / floors, 2) if floors else None}
    if weights_bytes:
        out["over_weight_floor"] = round(rep.total_us / (weights_bytes / hw.memory_bandwidth_bytes_per_s * 1e6), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--profile", help="profile.db to price with (default: graphsim's default for the GPU)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help="run the configs whose name contains this")
    a = ap.parse_args(argv)
    folder = _model_configs()
    prof = ["--profile", a.profile] if a.profile else []
    rows = []
    for name in CONFIGS:
        if a.only and a.only not in name:
            continue
        path = folder / f"{name}_config.json"
        if not path.is_file():
            rows.append({"config": name, "error": "not shipped by this aiconfigurator-core"})
            continue
        cfg = json.loads(path.read_text())
        row: dict = {"config": name}
        code, kv, err = _run(["kv", str(path), "--gpu", GPU, "-tp", "8", "--json"])
        row["kv"] = "ok" if code == 0 else f"exit {code}: {err}"
        weights = None
        if kv:
            weights = next((t["bytes"] for t in kv["memory"]["terms"] if t["name"] == "weights"), None)
        for label, ep in (("tp8", 1), ("tp8_ep8", 8)):
            if ep > 1 and not _is_moe(cfg):
                continue
            extra = ["--enable-expert-parallel"] if ep > 1 else []
            code, _, err = _run(["predict", str(path), "--gpu", GPU, "-tp", "8", *extra, "-b", "decode:64x4096",
                                 "--json", *prof])
            row[label] = _step_checks(path, ep, a.profile, weights) if code == 0 else f"exit {code}: {err}"
        code, sim, err = _run(["simulate", str(path), "--gpu", GPU, "-tp", "8", "--concurrency", "16", "-n", "32",
                               "--input-len", "1024", "--output-len", "128", "--max-model-len", "8192", "--json",
                               *prof])
        row["simulate"] = (f"ok: {sim['summary']['output_tokens_per_s']:.0f} out tok/s" if sim else f"exit {code}: {err}")
        rows.append(row)
        if not a.json:
            print(json.dumps(row), flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

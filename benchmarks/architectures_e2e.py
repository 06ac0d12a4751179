"""Issue 16's architectures end to end, as a user runs them: import → passes at TP8 (and TP8 + EP8 for MoE) →
predict → kv → simulate, from real public configs.

    python benchmarks/architectures_e2e.py [--profile DB] [--json] [--only SUBSTRING]
    python benchmarks/architectures_e2e.py --all-configs [--log FILE] [--resume] [--profile DB]

By default it runs issue 16's list (the Hugging Face pages the issue names, as aiconfigurator-core ships their
configs). `--all-configs` runs EVERY real config within reach, each once (identical files counted once): all of
aiconfigurator-core's `model_configs/` (with the `*_hf_quant_config.json` beside a config as its quantization),
graphsim's catalog configs (`graphsim/catalog/configs`) and the `config.json` files under `tests/data` and
`benchmarks/data/configs`; the configs of issue 16's families (a class or model_type of a listed config, its own or
its text model's) that are not on the list go first, then the rest, then the list. `--log FILE` appends one JSON line per config as
it finishes and `--resume` skips the configs already in it, so a long run survives an interruption.

Per config it runs the CLI in this process, through `graphsim.cli.app.main` as the `graphsim` command does
(`graphsim kv … -tp 8 --json`; `graphsim predict … -tp 8 -b decode:64x4096 --json`, the same with
`--enable-expert-parallel` for MoE; `graphsim simulate … -tp 8 --concurrency 16 -n 32 --input-len 1024
--output-len 128 --max-model-len 8192 --json`) and records per command: `ok`, `error` (exit ≠ 0 and the error's
one line) or `traceback` (an exception escaped the CLI: its last line, the full text in the log). For each predict
that succeeds, its decode step through the library (`graphsim.costing.plausibility.check_step`, the numbers the
slow tests assert): time and source, the share of time in approximate (placeholder) kernels, and the step over
its weight-read floor (must be ≥ 1) and over the sum of its kernels' roofline floors (must be ≤ 3, or over it
as a stated exception: `exception`, one line naming the measured rows of `costing/measured_slow.py` that vLLM
runs that slow; the tally counts those apart, as ">3x roofline, stated"). The
partition's conservation check runs inside every `predict` at TP8 (a failure is an error exit). Traces are
cached by graphsim, so only the first command per model traces.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import sys
import time
import traceback
from pathlib import Path

# Issue 16's list (the Hugging Face pages it names), as aiconfigurator-core ships their configs.
CONFIGS = [
    "deepseek-ai--DeepSeek-V3.2", "nvidia--GLM-5-NVFP4", "moonshotai--Kimi-K2-Instruct", "Qwen--Qwen3.5-27B",
    "Qwen--Qwen3.5-35B-A3B", "google--gemma-4-26B-A4B", "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "MiniMaxAI--MiniMax-M2.5", "nvidia--Nemotron-H-56B-Base-8K", "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "XiaomiMiMo--MiMo-V2-Flash", "deepseek-ai--DeepSeek-V4-Flash",
]
GPU = "h200"
SPEC = "decode:64x4096"
ROOT = Path(__file__).resolve().parents[1]


def _model_configs() -> Path:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("needs aiconfigurator-core (pip install -e '.[aiconfigurator]')")
    return Path(next(iter(spec.submodule_search_locations))) / "model_configs"


def _architecture(path: Path) -> str:
    cfg = json.loads(path.read_text())
    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    return str(archs[0])


def _family(path: Path) -> set[str]:
    """The names a config goes by: its class and model_type, and its text model's (a wrapper's language model)."""
    cfg = json.loads(path.read_text())
    names = set()
    for c in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}):
        names.update(str(a) for a in (c.get("architectures") or [])[:1])
        names.update([str(c["model_type"])] if c.get("model_type") else [])
    return names


def all_configs() -> list[tuple[str, Path]]:
    """(name, path) of every real config within reach (module doc), each distinct file once, in running order."""
    from graphsim.catalog import hf_quant_config_beside

    folder = _model_configs()
    found = [(p.name.removesuffix("_config.json"), p) for p in sorted(folder.glob("*_config.json"))
             if not p.name.endswith("_hf_quant_config.json")]
    found += [(p.stem, p) for p in sorted((ROOT / "graphsim" / "catalog" / "configs").glob("*.json"))]
    for sub in ("tests/data", "benchmarks/data/configs"):
        found += [(p.parent.name, p) for p in sorted((ROOT / sub).glob("*/config.json"))]
    seen: set[str] = set()
    unique = []
    for name, path in found:  # an identical config (and quantization file) is one config
        quant = hf_quant_config_beside(path)
        text = json.dumps(json.loads(path.read_text()), sort_keys=True)
        text += json.dumps(json.loads(quant.read_text()), sort_keys=True) if quant else ""
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            unique.append((name, path))
    listed = {folder / f"{n}_config.json" for n in CONFIGS}
    families = set().union(*(_family(p) for p in listed if p.is_file()))

    def rank(item: tuple[str, Path]) -> int:
        if item[1] in listed:
            return 2
        return 0 if _family(item[1]) & families else 1
    return sorted(unique, key=rank)


def _run(args: list[str]) -> tuple[str, dict | None, str, str]:
    """`graphsim <args>` in this process: (status, parsed JSON output, one-line error, traceback text)."""
    from graphsim.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    except Exception as e:  # escaped the CLI: a traceback a user would see
        return "traceback", None, f"{type(e).__name__}: {e}".splitlines()[0][:300], traceback.format_exc()
    if code:
        lines = " ".join(err.getvalue().split())  # the error line, unwrapped
        return "error", None, f"exit {code}: {lines[-300:]}", ""
    try:
        return "ok", json.loads(out.getvalue()), "", ""
    except json.JSONDecodeError:
        return "error", None, "output is not JSON", ""


def _is_moe(cfg: dict) -> bool:
    inner = cfg.get("text_config")
    text: dict = inner if isinstance(inner, dict) else cfg
    keys = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    return any(isinstance(text.get(k), int) and text[k] > 1 for k in keys)


def _step_checks(path: Path, ep: int, profile: str | None) -> dict:
    """predict's decode step through the library: `plausibility.check_step`'s figures."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.plausibility import check_step
    from graphsim.errors import GraphsimError

    try:
        c = check_step(build_cost_model(str(path), GPU, tp=8, ep=ep, profile=profile), SPEC, path)
    except GraphsimError as e:  # the one line the CLI would print
        return {"status": "error", "error": str(e).splitlines()[0][:300]}
    except Exception as e:
        return {"status": "traceback", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                "traceback": traceback.format_exc()}
    if c.total_us is None:
        return {"status": "error", "error": f"missing prices: {c.missing[:5]}"}
    ratio = c.over_weight_floor
    return {"status": "ok", "decode_ms": round(c.total_us / 1e3, 3), "source": c.source,
            "placeholder_share_pct": round(100 * c.placeholder_share, 2),
            "placeholders": sorted(c.placeholders, key=lambda x: -x[1])[:3],
            "over_roofline_sum": round(c.over_roofline_sum, 2) if c.over_roofline_sum else None,
            "over_weight_floor": round(ratio, 2) if ratio else None,
            **({"exception": c.exception} if c.exception else {})}


def run_config(name: str, path: Path, profile: str | None) -> dict:
    prof = ["--profile", profile] if profile else []
    cfg = json.loads(path.read_text())
    row: dict = {"config": name, "path": str(path), "architecture": _architecture(path)}
    t0 = time.monotonic()
    cmds: dict[str, list[str]] = {"kv": ["kv", str(path), "--gpu", GPU, "-tp", "8", "--json"]}
    for label, extra in (("tp8", []), ("tp8_ep8", ["--enable-expert-parallel"])):
        if extra and not _is_moe(cfg):
            continue
        cmds[label] = ["predict", str(path), "--gpu", GPU, "-tp", "8", *extra, "-b", SPEC, "--json", *prof]
    cmds["simulate"] = ["simulate", str(path), "--gpu", GPU, "-tp", "8", "--concurrency", "16", "-n", "32",
                        "--input-len", "1024", "--output-len", "128", "--max-model-len", "8192", "--json", *prof]
    for label, args in cmds.items():
        status, out, err, tb = _run(args)
        entry: dict = {"status": status}
        if err:
            entry["error"] = err
        if tb:
            entry["traceback"] = tb
        if status == "ok" and label.startswith("tp8"):
            entry.update(_step_checks(path, 8 if label == "tp8_ep8" else 1, profile))
        if status == "ok" and label == "simulate" and out:
            entry["output_tokens_per_s"] = round(out["summary"]["output_tokens_per_s"])
        row[label] = entry
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def summary(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per command: how many configs ended ok / error / traceback; and the predicts over the bar."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        for label in ("kv", "tp8", "tp8_ep8", "simulate"):
            if label in row:
                d = out.setdefault(label, {"ok": 0, "error": 0, "traceback": 0})
                d[row[label]["status"]] += 1
                if label.startswith("tp8") and row[label]["status"] == "ok":
                    e = row[label]
                    d["placeholders>1%"] = d.get("placeholders>1%", 0) + (e["placeholder_share_pct"] > 1)
                    over = (e["over_roofline_sum"] or 0) > 3
                    d[">3x roofline"] = d.get(">3x roofline", 0) + (over and not e.get("exception"))
                    d[">3x roofline, stated"] = d.get(">3x roofline, stated", 0) + bool(over and e.get("exception"))
                    d["<weight floor"] = d.get("<weight floor", 0) + ((e["over_weight_floor"] or 1) < 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--profile", help="profile.db to price with (default: graphsim's default for the GPU)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help="run the configs whose name contains this")
    ap.add_argument("--all-configs", action="store_true", help="every real config within reach, not just the list")
    ap.add_argument("--log", help="append one JSON line per config to this file")
    ap.add_argument("--resume", action="store_true", help="with --log: skip the configs already logged")
    a = ap.parse_args(argv)
    folder = _model_configs()
    todo = all_configs() if a.all_configs else [(n, folder / f"{n}_config.json") for n in CONFIGS]
    done: dict[str, dict] = {}
    if a.resume and a.log and Path(a.log).is_file():
        for line in Path(a.log).read_text().splitlines():
            row = json.loads(line)
            done[row["path"]] = row
    rows = []
    for name, path in todo:
        if a.only and a.only not in name:
            continue
        if str(path) in done:
            rows.append(done[str(path)])
            continue
        if not path.is_file():
            rows.append({"config": name, "path": str(path), "error": "not shipped by this aiconfigurator-core"})
            continue
        row = run_config(name, path, a.profile)
        rows.append(row)
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps(row) + "\n")
        if not a.json:
            brief = {k: (v if not isinstance(v, dict) else {x: y for x, y in v.items() if x != "traceback"})
                     for k, v in row.items() if k != "path"}
            print(json.dumps(brief), flush=True)
    if a.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=1))
    else:
        print(json.dumps(summary(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

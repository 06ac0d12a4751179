"""End-to-end validation on this CPU: profile → predict → measure the real forward → error per case.

    python benchmarks/validate_cpu.py [--out DIR] [--threads 1] [--models llama,qwen3,moe] [--case SPEC]...
                                      [--traces] [--json]

For each small random-initialised Hugging Face model (Llama- and Qwen3-shaped at hidden 512–768
with 6–8 layers, and a Qwen3-MoE-shaped one; every dimension is the catalog config's, shrunk):

1. import the config with graphsim (meta device) and fuse it for the `eager` target — one kernel
   per aten op, as PyTorch eager runs it;
2. profile every distinct kernel key of that graph on this CPU into `<out>/<model>.db` with the
   profiler (`graphsim.profiles.profiler.profile_graph`), over generic grids (powers of two and
   midpoints) that reach the largest case;
3. predict each case's forward time from the profile (`graphsim.costing.predict.predict`);
4. build the same model with transformers (random init, float32, sdpa attention) and time the
   real forward in this process: warm, median of repeats. Cached context (`@P` prefill, decode)
   sits in a `StaticCache` of exactly P + N positions, reset before each repeat, so every repeat
   does the same work;
5. report predicted vs measured per case and the median absolute error (target: ≤ 10 % over
   ≥ 8 cases spanning batch size, sequence length and context).

`--traces` also records a torch.profiler trace of each case's forward (`<out>/traces/`), to hold
against the graph with `graphsim align <out>/<model> --target eager --dtype float32 --capture TRACE
--profile <out>/<model>.db`. Threads default to 1: on a shared machine multi-threaded BLAS is
at the mercy of other processes (a 16×128×128 GEMM took 16 ms instead of 17 µs with 2 threads
while another job ran).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# ---- models and cases ------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    name: str
    base: str  # catalog model whose config is shrunk
    overrides: dict[str, Any]


MODELS: dict[str, ModelSpec] = {
    "llama": ModelSpec("llama", "llama-3.1-8b", dict(
        hidden_size=768, intermediate_size=2048, num_attention_heads=12, num_key_value_heads=4, num_hidden_layers=6,
        vocab_size=4096, max_position_embeddings=4096)),
    "qwen3": ModelSpec("qwen3", "qwen3-8b", dict(
        hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
        num_hidden_layers=8, vocab_size=4096, max_position_embeddings=4096)),
    "moe": ModelSpec("moe", "qwen3-30b-a3b", dict(
        hidden_size=512, moe_intermediate_size=384, num_experts=8, num_experts_per_tok=2, num_attention_heads=8,
        num_key_value_heads=4, head_dim=64, num_hidden_layers=4, vocab_size=4096, max_position_embeddings=4096)),
}

DEFAULT_CASES: dict[str, tuple[str, ...]] = {
    "llama": ("prefill:1x128", "prefill:1x512", "prefill:4x128", "prefill:1x256@256", "decode:16x512",
              "decode:64x256"),
    "qwen3": ("prefill:1x256", "prefill:2x256@256", "decode:32x1024", "decode:8x128"),
    "moe": ("prefill:1x256", "prefill:4x64", "decode:32x256"),
}


def tiny_config(spec: ModelSpec) -> dict[str, Any]:
    from graphsim.catalog import resolve_model

    cfg = copy.deepcopy(resolve_model(spec.base).config)
    for key in ("quantization_config", "rope_scaling"):
        cfg.pop(key, None)
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and rp.get("rope_type", "default") != "default":
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": rp.get("rope_theta", 10000.0)}
    cfg.update(spec.overrides)
    cfg["torch_dtype"] = "float32"
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg[key] = None
    return cfg


def fused_graph(cfg: dict[str, Any], name: str):
    from graphsim.catalog import ResolvedModel
    from graphsim.cost_model import build_cost_model

    model = ResolvedModel(name, cfg, "path", f"benchmarks/validate_cpu.py:{name}")
    return build_cost_model(model, None, dtype="float32", target="eager").graph


# ---- grid ------------------------------------------------------------------------------------


def _cover(lo: int, hi: int) -> tuple[int, ...]:
    """Powers of two and midpoints from the last such value <= lo up to the first such value >= hi."""
    from graphsim.profiles.profiler import pow2_and_midpoints

    hi = max(lo, hi)
    vals = pow2_and_midpoints(1, 2 * hi)
    bottom = max(v for v in vals if v <= max(1, lo))
    top = min(v for v in vals if v >= hi)
    return tuple(v for v in vals if bottom <= v <= top)


def case_grid(steps) -> Any:
    """A generic grid (powers of two and midpoints, DESIGN §5.5) reaching the largest case."""
    from graphsim.profiles.profiler import Grid

    groups = [g for s in steps for g in s.groups]
    pre = [g for g in groups if g.new_tokens > 1]
    dec = [g for g in groups if g.new_tokens == 1]
    tokens = _cover(1, max(s.tokens for s in steps))
    kv = [g.cached_tokens + g.new_tokens for g in groups]
    dec_kv = [g.cached_tokens + 1 for g in dec] or [1]
    q = [g.new_tokens for g in pre] or [16]
    return Grid(
        gemm_m=tokens, tokens=tokens, moe_tokens=tokens,
        prefill_batch=_cover(1, max((g.count for g in pre), default=1)),
        prefill_q=_cover(min([16, *q]), max(q)),
        prefill_max_kv=_cover(1, max(kv))[-1],
        decode_batch=_cover(1, max((g.count for g in dec), default=1)),
        decode_kv=_cover(min([128, *dec_kv]), max(dec_kv)),
    )


# ---- profiling ------------------------------------------------------------------------------


class ThreadClockTimer:
    """The profiler's CPU timing loop (warm-up, samples, limits from `TimingOptions`), but each sample is
    the calling thread's CPU time (`time.thread_time`), so other processes on a shared machine do not
    inflate it. With `cold`, the data caches are swept before each sample (a read of twice the last-level
    cache) and the kernel's code is warmed again by a tiny call of the same op (`cold()`), so weights and
    the KV cache come from memory as in a real forward, where each layer's weights evict the previous
    layer's (the CUDA timer flushes L2 for the same reason), while code stays hot as it does there."""

    def __init__(self, opts, sweep_bytes: int = 64 * 2**20) -> None:
        import torch

        from graphsim.profiles.profiler.timer import CpuTimer

        self._timer = CpuTimer(opts, time.thread_time)
        self._buf = torch.ones(sweep_bytes // 4, dtype=torch.float32)

    def time(self, fn: Callable[[], Any], cold: Callable[[], Any] | None = None) -> list[float]:
        if cold is None:
            return self._timer.time(fn)

        def sweep_and_rewarm() -> None:
            self._buf.sum()
            cold()

        return self._timer.time(fn, sweep_and_rewarm)


def _code_warmer(key) -> Callable[[], Any] | None:
    """A tiny call of the kernel's op (its code hot, its data not) for keys whose kernels read large
    weights or KV caches; None for per-token kernels, whose inputs a real forward has just written."""
    import torch
    import torch.nn.functional as F

    from graphsim.costing.kernels import (
        AttentionDecodeKey, AttentionPrefillKey, GemmKey, MlaDecodeKey, MlaPrefillKey, MoeKey,
    )
    from graphsim.profiles.profiler import Unmeasurable
    from graphsim.profiles.profiler.device import torch_dtype

    try:
        dt = torch_dtype(key.dtype)
    except Unmeasurable:
        return None
    if isinstance(key, (GemmKey, MoeKey)):
        x, w = torch.randn(4, 32, dtype=dt), torch.randn(32, 32, dtype=dt)
        return lambda: F.linear(x, w)
    if isinstance(key, (AttentionPrefillKey, AttentionDecodeKey, MlaPrefillKey, MlaDecodeKey)):
        q, k = torch.randn(1, 2, 2, 16, dtype=dt), torch.randn(1, 2, 4, 16, dtype=dt)
        return lambda: F.scaled_dot_product_attention(q, k, k)
    return None


def profile_cpu(graph, db_path: Path, *, threads: int, grid, timing, log: Callable[[str], None]) -> dict[str, Any]:
    """Measure every distinct key of the eager graph with the profiler's benchmarks (`make_bench`,
    `points_for_key`) and `ThreadClockTimer` into `db_path` (resumable: rows already there are kept)."""
    import torch

    from graphsim.costing.kernel_map import Dtypes
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta, TimeStatistic
    from graphsim.profiles.profiler import Unmeasurable, collect_targets, open_device, points_for_key
    from graphsim.profiles.profiler.benches import make_bench
    from graphsim.profiles.profiler.timer import summarise

    info = open_device("cpu", threads)
    targets, skipped = collect_targets(graph, Dtypes.for_graph(graph.meta))
    meta = ProfileMeta(device=info.name, engine="torch", engine_version=torch.__version__,
                       torch_version=torch.__version__, time_statistic=TimeStatistic.MEDIAN, provenance={
                           "profiler": "benchmarks/validate_cpu.py (graphsim.profiles.profiler benchmarks)",
                           "threads": str(info.threads), "device_type": "cpu", "fuse_target": "eager",
                           "timing": "median of thread CPU time samples; caches swept before GEMM, attention "
                                     "and MoE samples (code re-warmed)"})
    timer = ThreadClockTimer(timing)
    report: dict[str, Any] = {"rows": 0, "unmeasurable": [{"kernel": s.kernel, "reason": s.reason} for s in skipped]}
    with ProfileDB.create(db_path, meta) as db, torch.inference_mode():
        for t in targets:
            todo = db.missing(t.key, points_for_key(t.key, grid, t.once_only))
            if not todo:
                continue
            try:
                bench = make_bench(t, info)
            except Unmeasurable as e:
                report["unmeasurable"].append({"kernel": t.describe(), "reason": str(e)})
                continue
            rows = []
            cold = _code_warmer(t.key)
            for point in todo:
                try:
                    fn = bench.prepare(point)
                except Unmeasurable as e:
                    report["unmeasurable"].append({"kernel": f"{t.describe()} at {point}", "reason": str(e)})
                    continue
                rows.append((t.key, point, summarise(timer.time(fn, cold), bench.label)))
            report["rows"] += db.put_many(rows)
            log(f"  {t.describe()}: {len(rows)} rows")
    return report


# ---- the real forward ------------------------------------------------------------------------


def build_model(cfg: dict[str, Any]):
    import torch

    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32,
                                                                 attn_implementation="sdpa")
    return model.eval()


def forward_fn(model, cfg: dict[str, Any], step) -> Callable[[], Any]:
    """A call that runs the step's forward; repeated calls do identical work."""
    import torch
    from transformers import StaticCache

    if len(step.groups) != 1:
        raise ValueError(f"{step.label()}: one sequence group per case (a HF forward takes one q_len per batch)")
    g = step.groups[0]
    b, n, p = g.count, g.new_tokens, g.cached_tokens
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, int(cfg["vocab_size"]), (b, n), generator=gen)
    if p == 0:
        return lambda: model(input_ids=ids, use_cache=False)
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    cache = StaticCache(config=model.config, max_cache_len=p + n)
    cache.early_initialization(b, kv_heads, head_dim, torch.float32, torch.device("cpu"))
    # StaticCache holds StaticLayers (keys, values, cumulative_length as tensors) once initialised; its
    # annotation is the union of every cache layer type
    layers: list[Any] = list(cache.layers)
    for layer in layers:
        layer.keys.normal_(generator=gen)
        layer.values.normal_(generator=gen)
    cache_position = torch.arange(p, p + n)
    position_ids = cache_position.unsqueeze(0).expand(b, -1)

    def fn():
        for layer in layers:  # every repeat writes the same P..P+N-1 slots
            layer.cumulative_length.fill_(p)
        return model(input_ids=ids, cache=cache, cache_position=cache_position, position_ids=position_ids,
                     use_cache=True)

    return fn


def time_us(fn: Callable[[], Any], min_repeats: int = 5, min_time_s: float = 1.0, max_time_s: float = 20.0,
            warmup: int = 2) -> tuple[list[float], list[float]]:
    """Warm forward times in µs: (thread CPU time samples, wall time samples), at least `min_repeats`
    calls and `min_time_s` of wall time (at most `max_time_s`)."""
    import torch

    cpu: list[float] = []
    wall: list[float] = []
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        start = time.perf_counter()
        while len(cpu) < min_repeats or (time.perf_counter() - start < min_time_s
                                         and time.perf_counter() - start < max_time_s):
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            cpu.append((time.thread_time() - c0) * 1e6)
            wall.append((time.perf_counter() - t0) * 1e6)
            if time.perf_counter() - start > max_time_s and len(cpu) >= 2:
                break
    return cpu, wall


def record_trace(fn: Callable[[], Any], label: str, path: Path, repeats: int = 2) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with torch.inference_mode():
        fn()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(repeats):
                with record_function(label):
                    fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


# ---- the loop --------------------------------------------------------------------------------


@dataclass
class CaseResult:
    model: str
    case: str
    tokens: int
    predicted_us: float | None  # None when a kernel is missing from the profile
    predicted_source: str
    sources: dict[str, int]  # kernel count per source
    measured_us: float  # median thread CPU time of the real forward
    measured_wall_us: float  # median wall time (inflated by other processes on a shared machine)
    repeats: int
    error: float | None  # predicted / measured - 1
    missing: list[str] = field(default_factory=list)
    trace: str = ""


@dataclass
class ModelRun:
    model: str
    config_dir: str
    db: str
    profiler: str
    profile_s: float
    rows_written: int
    unmeasurable: list[dict[str, Any]]
    cases: list[CaseResult]


def validate_model(spec: ModelSpec, cases: list[str], out: Path, *, threads: int = 1, timing=None, grid=None,
                   min_repeats: int = 5, min_time_s: float = 1.0, traces: bool = False, profiler: str = "thread",
                   log: Callable[[str], None] = lambda s: None) -> ModelRun:
    """`profiler`: `thread` (thread CPU time, cache flushed before weight-reading kernels; the default) or
    `graphsim` (`graphsim.profiles.profiler.profile_graph` as `graphsim profile` runs it: wall clock)."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.profiles.profiler import TimingOptions, open_device, profile_graph
    from graphsim.workload import parse_batch_spec

    steps = [parse_batch_spec(c) for c in cases]
    cfg = tiny_config(spec)
    config_dir = out / spec.name
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.json").write_text(json.dumps(cfg, indent=1))
    log(f"[{spec.name}] importing and fusing (eager target)")
    graph = fused_graph(cfg, spec.name)
    db_path = out / f"{spec.name}{'' if profiler == 'thread' else '_' + profiler}.db"
    grid = grid or case_grid(steps)
    timing = timing or TimingOptions.quick()
    log(f"[{spec.name}] profiling {len(graph.nodes)} kernel nodes into {db_path} ({profiler} timer)")
    t0 = time.perf_counter()
    if profiler == "graphsim":
        rep = profile_graph(graph, db_path, open_device("cpu", threads), grid=grid, timing=timing, target="eager",
                            pipeline="fold,fuse{target=eager}")
        rows, unmeasurable = rep.rows_written, rep.unmeasurable
    elif profiler == "thread":
        rep = profile_cpu(graph, db_path, threads=threads, grid=grid, timing=timing, log=log)
        rows, unmeasurable = rep["rows"], rep["unmeasurable"]
    else:
        raise ValueError(f"unknown profiler '{profiler}'; use thread or graphsim")
    profile_s = time.perf_counter() - t0
    log(f"[{spec.name}] profiled {rows} new rows in {profile_s:.0f} s")
    with ProfileDB.open(db_path) as db:
        pred = predict(build_cost_model(graph, profile=db), steps, list(cases))
    model = build_model(cfg)
    results = []
    for case, step, b in zip(cases, steps, pred.batches, strict=False):
        fn = forward_fn(model, cfg, step)
        cpu, wall = time_us(fn, min_repeats=min_repeats, min_time_s=min_time_s)
        med = statistics.median(cpu)
        trace = ""
        if traces:
            tpath = out / "traces" / f"{spec.name}_{case.replace(':', '_').replace('@', '_at_')}.json"
            record_trace(fn, case, tpath)
            trace = str(tpath)
        err = (b.total_us / med - 1.0) if b.total_us is not None and med > 0 else None
        results.append(CaseResult(spec.name, case, step.tokens, b.total_us, b.source, dict(b.tally), med,
                                  statistics.median(wall), len(cpu), err, list(b.missing), trace))
        log(f"[{spec.name}] {case}: predicted {_ms(b.total_us)} ({b.source}), measured {_ms(med)} CPU time "
            f"({_ms(statistics.median(wall))} wall) → {'–' if err is None else f'{err:+.1%}'}")
    return ModelRun(spec.name, str(config_dir), str(db_path), profiler, profile_s, rows, unmeasurable, results)


def _ms(us: float | None) -> str:
    return "missing" if us is None else f"{us / 1e3:.2f} ms"


def summary(runs: list[ModelRun]) -> dict[str, Any]:
    errs = [abs(c.error) for r in runs for c in r.cases if c.error is not None and math.isfinite(c.error)]
    return {"cases": sum(len(r.cases) for r in runs), "with_prediction": len(errs),
            "median_abs_error": statistics.median(errs) if errs else None,
            "max_abs_error": max(errs) if errs else None}


def print_table(runs: list[ModelRun]) -> None:
    print(f"{'model':6} {'case':18} {'T':>5} {'predicted':>11} {'source':>12} {'measured':>11} {'wall':>11} "
          f"{'error':>8}")
    for r in runs:
        for c in r.cases:
            err = "–" if c.error is None else f"{c.error:+.1%}"
            print(f"{c.model:6} {c.case:18} {c.tokens:5d} {_ms(c.predicted_us):>11} {c.predicted_source:>12} "
                  f"{_ms(c.measured_us):>11} {_ms(c.measured_wall_us):>11} {err:>8}")
    s = summary(runs)
    med = "–" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
    print(f"median |error| over {s['with_prediction']} of {s['cases']} cases: {med} (target ≤ 10 %). "
          "predicted = sum of the profiled kernel times (profile.db rows; source as shown); measured = the real HF "
          "forward in this process, median thread CPU time (wall time beside it)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="validate_cpu_out", help="folder for configs, profile.db files, traces, results")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--case", action="append", default=None,
                    help="batch spec (repeatable; replaces each model's default cases)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="minimum timed forwards per case")
    ap.add_argument("--min-time", type=float, default=1.0, help="minimum seconds of timed forwards per case")
    ap.add_argument("--traces", action="store_true", help="also record a torch.profiler trace per case")
    ap.add_argument("--profiler", choices=("thread", "graphsim"), default="thread",
                    help="thread: thread CPU time, cache flushed before weight-reading kernels (default); graphsim: "
                         "profile_graph as `graphsim profile` runs it (wall clock)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in MODELS:
            print(f"error: unknown model '{name}'; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        cases = args.case or list(DEFAULT_CASES[name])
        runs.append(validate_model(MODELS[name], cases, out, threads=args.threads, min_repeats=args.repeats,
                                   min_time_s=args.min_time, traces=args.traces, profiler=args.profiler,
                                   log=lambda s: print(s, file=sys.stderr, flush=True)))
    result = {"runs": [asdict(r) for r in runs], "summary": summary(runs), "threads": args.threads}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

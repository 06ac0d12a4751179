"""graphsim's static step times against aiconfigurator's own estimate on the same measured rows (issue 12).

    python benchmarks/validate_static.py                                   # H200, the full grid
    python benchmarks/validate_static.py --systems h200_sxm,h100_sxm,a100_sxm
    python benchmarks/validate_static.py --quick                           # Llama-3.1-8B and Qwen3-30B-A3B, 4 steps
    python benchmarks/validate_static.py --json > validate.json
    python benchmarks/validate_static.py --systems h100_sxm --models qwen3-235b-a22b:8 --steps decode:64x4096 --per-op

The grid: Llama-3.1-8B TP1, Llama-3.1-70B TP4, Qwen3-32B TP2, Qwen3-30B-A3B TP1, DeepSeek-V3 TP8, each at
prefill 1×{1024, 4096, 8192} and decode {1, 16, 64, 256}×{1024, 4096}; `--models NAME:TP` and `--steps` price
others, `--per-op` sets both sides side by side op by op (`per_op`: embedding, norms, rotary, qkv / o / router /
logits GEMMs, attention, MoE, the TP all-reduces, the logits all-gather, …).

Both sides read one model config (graphsim's bundled config.json, handed to aiconfigurator as a model directory)
and one system's vLLM tables: aiconfigurator-core's own parquet files for its estimate
(`EngineHandle.compile(...).predict_prefill_latency / predict_decode_latency`, the static_ctx / static_gen step
times, with `run_static_per_op` / `decode_step_per_op` for its per-op breakdown), and the profile.db that
`graphsim profiles import-aiconfigurator --system S --backend vllm` builds from the same files for graphsim's
(`costing.predict.predict` on the traced model). A step is:

- prefill 1×N: one sequence of N new tokens, no cache (graphsim `prefill:1xN`; aiconfigurator
  `predict_prefill_latency(1, N)`);
- decode B×C: B sequences, one new token each after C cached (graphsim `decode:BxC`; aiconfigurator
  `predict_decode_latency(B, C, osl=2)`, its one generation step after a C-token prompt).

KV cache: both sides read the KV dtype vLLM runs by default, the one graphsim prices: `--kv-cache-dtype auto` is
the model's dtype (vllm/config/cache.py `CacheConfig.cache_dtype = "auto"`; vllm/utils/torch_utils.py
`kv_cache_dtype_str_to_dtype`: "auto" → `model_config.dtype`), an fp8 cache only where the checkpoint states one
(graphsim/costing/kernel_map.py `Dtypes.for_graph`); aiconfigurator gets it as `kvcache_quant_mode` (its own default
follows the weights' quantization: fp8 for DeepSeek-V3's fp8 checkpoint, whose config states no KV scheme).

MoE routing: both sides read the balanced-routing MoE rows (every expert the same share of the tokens):
aiconfigurator with `workload_distribution = "balanced"` (its default is power_law, with an exponent its model
classes choose by family: 1.2 generic, 1.01 DeepSeek), graphsim with `--moe-routing balanced`
(`costing.moe_routing`; graphsim's default is power-law:1.2). A system whose tables
have no balanced MoE rows does not cover MoE models (reported, not compared). MoE layers are tensor-parallel over
the TP ranks on both sides (vLLM without --enable-expert-parallel: moe_tp = tp, ep = 1).

Per case: both times, the difference (graphsim / aiconfigurator − 1), graphsim's shares of the predicted time by
source; per system and model group (dense; MoE or MLA, from the config) the median and worst |difference|; for
every case beyond --detail (10 %) the kernel categories that account for it, from both sides, and where graphsim
deliberately differs (it follows vLLM's source and aiconfigurator does not) a note citing the vLLM file.

Eager-rows exception (listed case by case, `EAGER_NOTE`): aiconfigurator's vLLM fp8_block GEMM rows were timed without
CUDA graphs, so near their ~55 µs floor they are host dispatch time, which aiconfigurator adds to its estimate and
graphsim does not (graphsim/costing/eager_rows.py). Where the profile has such rows, graphsim is also run reading
them as aiconfigurator does (every row as GPU time); a case whose time that moves by more than `EAGER_MATTERS` is an
exception, printed with both graphsim times, and the summary gives the figures on both readings.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODELS = [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("qwen3-32b", 2), ("qwen3-30b-a3b", 1), ("deepseek-v3", 8)]
STEPS = ["prefill:1x1024", "prefill:1x4096", "prefill:1x8192"] + [
    f"decode:{b}x{c}" for b in (1, 16, 64, 256) for c in (1024, 4096)]
QUICK_MODELS = [("llama-3.1-8b", 1), ("qwen3-30b-a3b", 1)]
QUICK_STEPS = ["prefill:1x4096", "decode:1x1024", "decode:64x4096", "decode:256x1024"]
HARDWARE = {"h200_sxm": "h200_sxm", "h100_sxm": "h100_sxm", "a100_sxm": "a100_sxm"}  # aiconfigurator → graphsim id

# Kernel categories, to set the two breakdowns side by side. graphsim: by KernelKind value; aiconfigurator: by op
# name (its op names, e.g. context_qkv_gemm, generation_attention, context_moe, context_ar_1).
GRAPHSIM_CATEGORY = {
    "gemm": "gemm", "attention": "attention", "linear_attention": "attention", "moe_experts": "moe",
    "moe_router": "moe", "all_reduce": "communication", "all_gather": "communication",
    "reduce_scatter": "communication", "all_to_all": "communication", "rms_norm": "norm",
    "fused_add_rms_norm": "norm", "layer_norm": "norm", "rotary": "rotary", "kv_cache_write": "kv cache write",
    "embedding": "embedding", "act_and_mul": "activation", "activation": "activation",
}


def aic_category(name: str) -> str:
    n = name.lower()
    rules = ((("attention", "mla", "fmha"), "attention"), (("gemm", "bmm", "proj", "logits"), "gemm"),
             (("_ar", "allreduce", "all_reduce", "p2p", "alltoall", "all2all", "allgather", "reduce_scatter",
               "dispatch", "combine"), "communication"),
             (("moe", "expert", "router", "topk"), "moe"),
             (("norm",), "norm"), (("rope", "rotary"), "rotary"), (("embedding",), "embedding"), (("act",), "activation"))
    for keys, cat in rules:
        if any(k in n for k in keys):
            return cat
    return "other"


# Where graphsim follows vLLM's source and aiconfigurator has fewer ops: printed with a case's breakdown when graphsim
# has more time and more kernel launches in the category than the reference has ops (citations: docs/vllm-kernels.md).
DELIBERATE = {
    "rotary": "graphsim prices vLLM's rotary-embedding launch (vllm/model_executor/layers/rotary_embedding/base.py "
              "RotaryEmbedding.forward_cuda → torch.ops._C.rotary_embedding); aiconfigurator has no RoPE op",
    "kv cache write": "graphsim prices vLLM's KV-cache write (vllm/v1/attention/backends/flash_attn.py "
                      "FlashAttentionImpl.do_kv_cache_update → reshape_and_cache_flash, its own launch before the "
                      "attention kernel); aiconfigurator has no such op",
    "norm": "graphsim prices every RMSNorm launch vLLM's model code makes: per layer the input and post-attention "
            "norms plus per-head q_norm/k_norm where the model has them (vllm/model_executor/models/qwen3.py "
            "Qwen3Attention.forward), and the final norm; aiconfigurator has fewer norm ops",
    "moe": "graphsim prices the router's top-k launch vLLM makes before the experts (vllm/model_executor/layers/"
           "fused_moe/router/fused_topk_router.py fused_topk → _moe_C.topk_softmax; grouped_topk_router.py for "
           "DeepSeek); aiconfigurator has no separate op for it",
    "communication": "graphsim prices the logits all-gather vLLM runs at TP > 1 (vllm/model_executor/layers/"
                     "logits_processor.py LogitsProcessor._gather_logits → tensor_model_parallel_all_gather; "
                     "platforms/interface.py Platform.use_all_gather returns True, vLLM 0.19.0); aiconfigurator has "
                     "no op for it",
}
# Ops the reference prices that vLLM does not run in the deployment compared: printed when the reference's op
# (by name) carries time.
REFERENCE_ONLY = {
    "dispatch": "vLLM's tensor-parallel MoE (no --enable-expert-parallel, no sequence-parallel MoE) dispatches no "
                "tokens: vllm/model_executor/models/deepseek_v2.py DeepseekV2MoE.forward hands the replicated hidden "
                "states to self.experts, whose reduce_results all-reduce is the layer's one collective (priced by "
                "graphsim); aiconfigurator adds MoE pre/post-dispatch ops",
}
# Where the reference follows vLLM and graphsim does not (yet): printed as a graphsim gap when the reference's op (by
# name) carries time.
GRAPHSIM_GAPS: dict[str, str] = {}
# How graphsim books vLLM's shared-expert stream (graphsim/costing/streams.py): printed with the moe category when an
# overlap hides time in the case.
OVERLAP_NOTE = ("graphsim runs the shared experts on vLLM's aux stream beside the router and routed experts at <= "
                "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD (256) tokens, as aiconfigurator's moe_overlap op does; "
                "it books the shared GEMMs under gemm and the time the overlap hides as a negative moe entry")
# The eager-rows exception (module docstring): why graphsim does not read those rows as aiconfigurator does.
EAGER_NOTE = ("aiconfigurator prices vLLM's fp8_block GEMMs from rows its collector timed without CUDA graphs "
              "(collector/vllm/collect_gemm.py run_gemm: use_cuda_graph=gemm_type != 'fp8_block'), which under twice "
              "their ~55 µs floor are host dispatch time; vLLM runs decode, and steps up to max_cudagraph_capture_size "
              "tokens (default min(2 × max_num_seqs, 512)), from CUDA graphs (vllm/config/compilation.py "
              "CompilationConfig), where that host time is not on the GPU's path, so graphsim prices those GEMMs from "
              "the graphed fp8 rows of the same shape × the table's fp8_block/fp8 ratio (graphsim/costing/eager_rows.py)")
EAGER_MATTERS = 0.01  # a case is an eager-rows exception when reading the rows as GPU time moves graphsim by > 1 %


@contextlib.contextmanager
def eager_rows_as_gpu_time() -> Iterator[None]:
    """graphsim reading every eagerly timed GEMM row as GPU time, as aiconfigurator does (the exception's
    counterfactual): no (source, engine) is known to time any dtype eagerly while it lasts."""
    from graphsim.costing import eager_rows

    saved = eager_rows.EAGER_TIMED
    eager_rows.EAGER_TIMED = {}
    try:
        yield
    finally:
        eager_rows.EAGER_TIMED = saved


def has_eager_rows(db: Path) -> bool:
    """The profile holds GEMM rows timed without CUDA graphs (graphsim/costing/eager_rows.py)."""
    from graphsim.costing.eager_rows import eager_floors
    from graphsim.costing.profile_db import ProfileDB

    with ProfileDB.open(db) as pdb:
        return bool(eager_floors(pdb))


def config_notes(config: dict[str, Any]) -> list[str]:
    """Model-level differences that follow from the config (printed with each broken-down case of the model)."""
    text = config.get("text_config", config)
    k = int(text.get("first_k_dense_replace") or 0)
    if k > 0 and text.get("n_routed_experts"):
        return [f"deliberate: graphsim prices the first {k} layers as dense MLPs, as vLLM builds them "
                "(vllm/model_executor/models/deepseek_v2.py DeepseekV2DecoderLayer: is_moe_layer needs layer_idx >= "
                "first_k_dense_replace); aiconfigurator-core 0.12 prices every layer as MoE (sdk/models/deepseek.py: "
                "num_moe_layers = num_layers)"]
    return []


def model_group(config: dict[str, Any]) -> str:
    """'dense' or 'MoE/MLA' from the config: routed experts or a compressed-KV (MLA) attention."""
    text = config.get("text_config", config)
    moe = any(text.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))
    mla = bool(text.get("kv_lora_rank"))
    return "MoE/MLA" if moe or mla else "dense"


def ensure_db(system: str, db_dir: Path, given: dict[str, str]) -> Path:
    """The graphsim profile.db of `system`: given, or imported once into db_dir (`graphsim profiles
    import-aiconfigurator`, ~30 s)."""
    if system in given:
        return Path(given[system])
    path = db_dir / f"{system}_vllm.db"
    if not path.is_file():
        db_dir.mkdir(parents=True, exist_ok=True)
        print(f"importing aiconfigurator's {system} vLLM tables into {path} …", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "graphsim", "profiles", "import-aiconfigurator", "--system", system,
                        "--backend", "vllm", "-o", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


def balanced_moe_rows(system: str) -> bool:
    """aiconfigurator's own vLLM MoE table of `system` has balanced-routing rows (read from its parquet files)."""
    import aiconfigurator_core
    import pyarrow.parquet as pq

    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / "moe" / "vllm"
    for f in root.glob("*/moe_perf.parquet"):
        col = pq.read_table(f, columns=["distribution"]).column("distribution").to_pylist()
        if "balanced" in set(col):
            return True
    return False


def compile_balanced(model_dir: Path, system: str, **parallel: Any) -> Any:
    """aiconfigurator's `EngineHandle.compile(model_dir, system, "vllm", **parallel)` with balanced MoE routing, the
    routing graphsim prices (module docstring): its ModelConfig factory (sdk/engine.py `build_model_config`) is
    wrapped for the call; its prints are swallowed."""
    from aiconfigurator_core.sdk import engine as aic_engine

    builder = "build_model_config"
    orig = getattr(aic_engine, builder)

    def balanced(**kw: Any) -> Any:
        cfg = orig(**kw)
        cfg.workload_distribution = "balanced"
        return cfg

    setattr(aic_engine, builder, balanced)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return aic_engine.EngineHandle.compile(str(model_dir), system, "vllm", **parallel)
    finally:
        setattr(aic_engine, builder, orig)


# graphsim's KV KernelDtype value → aiconfigurator's KVCacheQuantMode name (its one 16-bit mode is bfloat16: an fp16
# cache moves the same bytes)
AIC_KV_MODE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "int8": "int8"}


def reference_kv_mode(graph: Any) -> str:
    """aiconfigurator's `kvcache_quant_mode` for the KV dtype graphsim prices `graph` with (module docstring)."""
    from graphsim.costing.kernel_map import Dtypes

    kv = Dtypes.for_graph(graph.meta).kv.value
    if kv not in AIC_KV_MODE:
        raise ValueError(f"aiconfigurator has no KV-cache mode for graphsim's KV dtype {kv}")
    return AIC_KV_MODE[kv]


class Reference:
    """aiconfigurator's engine for one (model config, system, TP): compiled once, asked per step."""

    def __init__(self, config_path: Path, system: str, tp: int, moe: bool, work: Path,
                 kv_mode: str | None = None) -> None:
        model_dir = work / f"{config_path.stem}"
        model_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config_path, model_dir / "config.json")
        kv = {"kvcache_quant_mode": kv_mode} if kv_mode else {}  # None: aiconfigurator's own default
        self.handle = compile_balanced(model_dir, system, tp_size=tp, moe_tp_size=tp if moe else None,
                                       moe_ep_size=1 if moe else None, **kv)

    def step(self, spec: str) -> tuple[float, list[tuple[str, float, str]]]:
        """(ms, per-op [(name, ms, source)]) of one step spec (prefill:1xN or decode:BxC)."""
        kind, rest = spec.split(":")
        b, n = (int(x) for x in rest.split("x"))
        h = self.handle
        if kind == "prefill":
            ms = h.predict_prefill_latency(b, n)
            ctx, _ = h.run_static_per_op(batch_size=b, isl=n, osl=1, mode="static_ctx")
            ops = ctx
        else:
            ms = h.predict_decode_latency(b, n, 2)
            ops = h.decode_step_per_op(b, n, 2)
        return float(ms), [(name, float(lat), str(src)) for name, lat, _, src in ops]


def graphsim_steps(graph: Any, system: str, tp: int, db: Path, steps: list[str]) -> Any:
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    cm = build_cost_model(graph, HARDWARE[system], tp=tp, profile=db, default_profile=False,
                          moe_routing=parse_routing("balanced"))  # the routing both sides use (module docstring)
    return predict(cm, [parse_batch_spec(s) for s in steps], steps)


def shares(batch: Any) -> dict[str, float]:
    """Shares of a batch's predicted time by kernel source (time-weighted), in SOURCES order."""
    from graphsim.costing.interpolate import SOURCES

    total: dict[str, float] = {}
    for r in batch.rows:
        if r.total_us:
            total[r.source] = total.get(r.source, 0.0) + r.total_us
    whole = sum(total.values())
    order = [s.value for s in SOURCES]
    return {k: total[k] / whole for k in sorted(total, key=order.index)} if whole else {}


def hidden_ms(batch: Any) -> float:
    """What overlapped streams hide in the batch (ms): the kernel sum less the predicted time."""
    return sum(o["hidden_us"] or 0.0 for o in batch.overlaps) / 1e3


def categories_graphsim(batch: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in batch.rows:
        cat = GRAPHSIM_CATEGORY.get(r.kind, "other")
        out[cat] = out.get(cat, 0.0) + (r.total_us or 0.0) / 1e3
    if hidden_ms(batch):
        out["moe"] = out.get("moe", 0.0) - hidden_ms(batch)
    return out


def categories_aic(ops: list[tuple[str, float, str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, ms, _ in ops:
        cat = aic_category(name)
        out[cat] = out.get(cat, 0.0) + ms
    return out


def breakdown(batch: Any, ops: list[tuple[str, float, str]]) -> list[dict[str, Any]]:
    """Kernel categories by |graphsim − aiconfigurator| (ms), each with both sides' largest contributors."""
    g, a = categories_graphsim(batch), categories_aic(ops)
    rows = []
    for cat in set(g) | set(a):
        gk = sorted(((r.kernel, (r.total_us or 0.0) / 1e3, r.source) for r in batch.rows
                     if GRAPHSIM_CATEGORY.get(r.kind, "other") == cat), key=lambda x: -x[1])[:4]
        if cat == "moe" and hidden_ms(batch):
            gk.insert(0, ("hidden by the shared-expert overlap", -hidden_ms(batch), "composed"))
        ak = sorted(((n, ms, s) for n, ms, s in ops if aic_category(n) == cat), key=lambda x: -x[1])[:4]
        launches = sum(1 for r in batch.rows if GRAPHSIM_CATEGORY.get(r.kind, "other") == cat)
        ref_ops = sum(1 for n, ms, _ in ops if aic_category(n) == cat and ms > 0)
        note = DELIBERATE.get(cat) if g.get(cat, 0.0) > a.get(cat, 0.0) and launches > ref_ops else None
        ref_only = [text for key, text in REFERENCE_ONLY.items() if any(key in n and ms > 0 for n, ms, _ in ak)]
        overlap = OVERLAP_NOTE if cat == "moe" and hidden_ms(batch) else None
        note = "; ".join(x for x in (note, *ref_only, overlap) if x) or None
        gap = "; ".join(text for key, text in GRAPHSIM_GAPS.items() if any(key in n and ms > 0 for n, ms, _ in ak))
        rows.append({"category": cat, "graphsim_ms": g.get(cat, 0.0), "aiconfigurator_ms": a.get(cat, 0.0),
                     "diff_ms": g.get(cat, 0.0) - a.get(cat, 0.0), "graphsim_kernels": gk,
                     "aiconfigurator_ops": ak, "deliberate": note, "graphsim_gap": gap or None})
    return sorted(rows, key=lambda r: -abs(r["diff_ms"]))


# Op-level alignment (--per-op): each side's kernels and ops in the groups of a decoder layer, finer than the
# categories above (the GEMMs by role, the collectives by place). graphsim names its GEMMs after the model's modules.
OPS = ["embedding", "embedding all-reduce", "norms", "rotary", "qkv GEMM", "attention", "o GEMM", "TP all-reduce",
       "router GEMM", "MoE", "other GEMM", "activation", "logits GEMM", "logits all-gather", "other"]
QKV_GEMMS = ("qkv", "q_proj", "k_proj", "v_proj", "q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "fused_qkv_a_proj")


def graphsim_op(row: Any) -> str:
    """The OPS group of one graphsim kernel row (a KernelRow: kind, kernel name, region)."""
    kind, name = row.kind, row.kernel
    if kind == "embedding":
        return "embedding"
    if kind == "all_reduce":
        return "embedding all-reduce" if row.region == "before layers" else "TP all-reduce"
    if kind == "all_gather" and row.region == "after layers":
        return "logits all-gather"
    if kind in ("rms_norm", "fused_add_rms_norm", "layer_norm"):
        return "norms"
    if kind == "rotary":
        return "rotary"
    if kind in ("attention", "linear_attention") or name.startswith("composite"):
        return "attention"
    if kind in ("moe_experts", "moe_router"):
        return "MoE"
    if kind == "gemm":
        if name == "lm_head":
            return "logits GEMM"
        if name == "gate":
            return "router GEMM"
        if name == "o_proj":
            return "o GEMM"
        return "qkv GEMM" if name.startswith(QKV_GEMMS) else "other GEMM"
    return "activation" if kind in ("act_and_mul", "activation") else "other"


def aic_op(name: str) -> str:
    """The OPS group of one aiconfigurator op (its names as decode_step_per_op / run_static_per_op return them)."""
    n = name.lower().removeprefix("generation_").removeprefix("context_")
    rules = ((("embedding_ar",), "embedding all-reduce"), (("embedding",), "embedding"), (("norm",), "norms"),
             (("qkv_gemm",), "qkv GEMM"), (("proj_gemm",), "o GEMM"), (("router_gemm",), "router GEMM"),
             (("logits_gemm",), "logits GEMM"), (("attention", "mla"), "attention"),
             (("dispatch", "_ar", "ar_", "allreduce", "all_reduce"), "TP all-reduce"), (("moe",), "MoE"),
             (("gemm", "bmm"), "other GEMM"), (("act",), "activation"))
    for keys, op in rules:
        if any(k in n for k in keys):
            return op
    return "other"


def per_op(batch: Any, ops: list[tuple[str, float, str]]) -> list[dict[str, Any]]:
    """Both sides by OPS group (µs): graphsim's rows (the time overlapped streams hide booked under MoE, as
    categories_graphsim does) and aiconfigurator's ops, each with what it holds."""
    g: dict[str, float] = {}
    gk: dict[str, list[str]] = {}
    for r in batch.rows:
        op = graphsim_op(r)
        g[op] = g.get(op, 0.0) + (r.total_us or 0.0)
        gk.setdefault(op, []).append(f"{r.kernel} x{r.count}")
    if hidden_ms(batch):
        g["MoE"] = g.get("MoE", 0.0) - hidden_ms(batch) * 1e3
        gk.setdefault("MoE", []).append("hidden by the overlap")
    a: dict[str, float] = {}
    ak: dict[str, list[str]] = {}
    for name, ms, _ in ops:
        op = aic_op(name)
        a[op] = a.get(op, 0.0) + ms * 1e3
        ak.setdefault(op, []).append(name)
    return [{"op": op, "graphsim_us": g.get(op, 0.0), "aiconfigurator_us": a.get(op, 0.0),
             "diff_us": g.get(op, 0.0) - a.get(op, 0.0), "graphsim_kernels": gk.get(op, []),
             "aiconfigurator_ops": ak.get(op, [])} for op in OPS if op in g or op in a]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return math.nan if not n else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


def summarize(cases: list[dict[str, Any]], systems: list[str]) -> list[dict[str, Any]]:
    """Per system and model group: the median and worst |difference|, and the same with each eager-rows exception
    (a case with "eager_exception") on aiconfigurator's reading of those rows."""
    summary: list[dict[str, Any]] = []
    for system in systems:
        for group in ("dense", "MoE/MLA"):
            sel = [c for c in cases if c["system"] == system and c["group"] == group and math.isfinite(c["diff"])]
            if not sel:
                continue
            worst = max(sel, key=lambda c: abs(c["diff"]))
            # the same figures with each eager-rows exception on aiconfigurator's reading of those rows
            as_ref = {id(c): c["eager_exception"]["diff"] if "eager_exception" in c else c["diff"] for c in sel}
            worst_ref = max(sel, key=lambda c: abs(as_ref[id(c)]))
            summary.append({"system": system, "group": group, "cases": len(sel),
                            "median_abs_diff": median([abs(c["diff"]) for c in sel]),
                            "worst_abs_diff": abs(worst["diff"]), "worst_case": f"{worst['model']} {worst['step']}",
                            "eager_exceptions": sum("eager_exception" in c for c in sel),
                            "median_abs_diff_eager_as_reference": median([abs(v) for v in as_ref.values()]),
                            "worst_abs_diff_eager_as_reference": abs(as_ref[id(worst_ref)]),
                            "worst_case_eager_as_reference": f"{worst_ref['model']} {worst_ref['step']}"})
    return summary


def select_models(spec: str, grid: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """--models: catalog names of the grid, or NAME:TP for any catalog model at that TP (e.g. qwen3-235b-a22b:8)."""
    out: list[tuple[str, int]] = []
    for item in (x for x in spec.split(",") if x):
        name, _, tp = item.partition(":")
        if tp:
            if not tp.isdigit() or int(tp) < 1:
                raise SystemExit(f"error: --models {item}: the TP after ':' must be a positive integer")
            out.append((name, int(tp)))
        else:
            out.extend(m for m in grid if m[0] == name)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from graphsim.catalog import resolve_model
    from graphsim.importers.hf import import_hf

    models = QUICK_MODELS if args.quick else MODELS
    if args.models:
        models = select_models(args.models, models)
    steps = QUICK_STEPS if args.quick else STEPS
    if getattr(args, "steps", None):
        steps = [x for x in args.steps.split(",") if x]
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in HARDWARE:
            raise SystemExit(f"error: unknown system '{s}'; use {', '.join(HARDWARE)}")
    given = dict(kv.split("=", 1) for kv in args.db.split(",") if kv) if args.db else {}
    db_dir, work = Path(args.db_dir), Path(args.db_dir) / "models"
    cases: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    timings: dict[str, float] = {}
    for name, tp in models:
        resolved = resolve_model(name)
        group = model_group(resolved.config)
        moe = any(resolved.config.get(k) for k in ("num_experts", "n_routed_experts", "num_local_experts"))
        t0 = time.perf_counter()
        graph, _ = import_hf(name)  # traced once per model, reused on every system
        timings[f"trace {name}"] = time.perf_counter() - t0
        for system in systems:
            if moe and not balanced_moe_rows(system):
                skipped.append({"system": system, "model": name, "reason": "aiconfigurator's MoE table has no "
                                "balanced-routing rows (graphsim prices balanced routing)"})
                continue
            t0 = time.perf_counter()
            try:
                db = ensure_db(system, db_dir, given)
                pred = graphsim_steps(graph, system, tp, db, steps)
                ref = Reference(Path(resolved.location), system, tp, moe, work, reference_kv_mode(graph))
                eager_pred = None
                if has_eager_rows(db):  # the eager-rows exception's counterfactual (module docstring)
                    with eager_rows_as_gpu_time():
                        eager_pred = graphsim_steps(graph, system, tp, db, steps)
            except Exception as e:  # a system that does not cover the model (no rows for its dtype, …)
                skipped.append({"system": system, "model": name, "reason": f"{type(e).__name__}: {e}"})
                continue
            eager_batches = eager_pred.batches if eager_pred is not None else [None] * len(steps)
            for spec, batch, eager_batch in zip(steps, pred.batches, eager_batches, strict=True):
                try:
                    a_ms, ops = ref.step(spec)
                except Exception as e:
                    skipped.append({"system": system, "model": name, "step": spec,
                                    "reason": f"aiconfigurator: {type(e).__name__}: {e}"})
                    continue
                g_ms = batch.total_us / 1e3 if batch.total_us is not None else math.nan
                diff = g_ms / a_ms - 1 if a_ms > 0 else math.nan
                case = {"system": system, "model": name, "tp": tp, "group": group, "step": spec,
                        "graphsim_ms": g_ms, "aiconfigurator_ms": a_ms, "diff": diff, "shares": shares(batch),
                        "graphsim_source": batch.source}
                e_ms = eager_batch.total_us / 1e3 if eager_batch is not None and eager_batch.total_us else None
                if e_ms is not None and g_ms > 0 and abs(e_ms / g_ms - 1) > EAGER_MATTERS:
                    case["eager_exception"] = {"graphsim_reading_eager_rows_ms": e_ms,
                                               "diff": e_ms / a_ms - 1 if a_ms > 0 else math.nan}
                if getattr(args, "per_op", False):
                    case["per_op"] = per_op(batch, ops)
                if not math.isfinite(diff) or abs(diff) > args.detail:
                    case["breakdown"] = breakdown(batch, ops)
                    case["notes"] = config_notes(resolved.config)
                cases.append(case)
            timings[f"{name} on {system}"] = time.perf_counter() - t0
    summary = summarize(cases, systems)
    return {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "systems": systems,
            "routing": "balanced top-k on both sides", "detail_threshold": args.detail, "cases": cases,
            "summary": summary, "skipped": skipped, "timings_s": timings}


def _shares_text(s: dict[str, float]) -> str:
    return "all " + next(iter(s)) if len(s) == 1 else ", ".join(f"{k} {v:.0%}" for k, v in s.items())


def print_report(out: dict[str, Any]) -> None:
    print(f"graphsim vs aiconfigurator (same vLLM tables, same config; routing: {out['routing']})")
    print(f"{'system':<9} {'model':<14} {'tp':>2} {'step':<16} {'graphsim':>10} {'aiconfig':>10} {'diff':>7}  "
          "graphsim sources (share of time)")
    for c in out["cases"]:
        print(f"{c['system']:<9} {c['model']:<14} {c['tp']:>2} {c['step']:<16} {c['graphsim_ms']:>8.3f}ms "
              f"{c['aiconfigurator_ms']:>8.3f}ms {c['diff']:>+7.1%}  {_shares_text(c['shares'])}")
    print("\nsummary (|diff| = |graphsim / aiconfigurator − 1|):")
    for s in out["summary"]:
        print(f"  {s['system']:<9} {s['group']:<8} {s['cases']:>3} cases: median {s['median_abs_diff']:.1%}, "
              f"worst {s['worst_abs_diff']:.1%} ({s['worst_case']})")
        if s["eager_exceptions"]:
            print(f"  {'':<9} {'':<8} {s['eager_exceptions']:>3} eager-rows exceptions read as aiconfigurator reads "
                  f"them: median {s['median_abs_diff_eager_as_reference']:.1%}, worst "
                  f"{s['worst_abs_diff_eager_as_reference']:.1%} ({s['worst_case_eager_as_reference']})")
    for sk in out["skipped"]:
        print(f"  skipped: {sk['system']} {sk['model']} {sk.get('step', '')}: {sk['reason']}")
    exceptions = [c for c in out["cases"] if "eager_exception" in c]
    if exceptions:
        print(f"\neager-rows exceptions ({len(exceptions)} cases; deliberate): {EAGER_NOTE}. graphsim, then graphsim "
              "reading those rows as GPU time as aiconfigurator does, against aiconfigurator:")
        for c in exceptions:
            e = c["eager_exception"]
            print(f"  {c['system']:<9} {c['model']:<14} {c['step']:<16} {c['graphsim_ms']:>8.3f}ms {c['diff']:>+7.1%}"
                  f"  → {e['graphsim_reading_eager_rows_ms']:>8.3f}ms {e['diff']:>+7.1%}")
    detail = [c for c in out["cases"] if "breakdown" in c]
    if detail:
        print(f"\ncases beyond {out['detail_threshold']:.0%}: kernel categories by |difference| (ms)")
    for c in detail:
        print(f"- {c['system']} {c['model']} tp{c['tp']} {c['step']}: {c['graphsim_ms']:.3f} vs "
              f"{c['aiconfigurator_ms']:.3f} ms ({c['diff']:+.1%})")
        for note in c.get("notes", []):
            print(f"    {note}")
        if "eager_exception" in c:
            e = c["eager_exception"]
            print(f"    deliberate (eager-rows exception, listed above): reading aiconfigurator's eagerly timed "
                  f"fp8_block rows as GPU time, graphsim gives {e['graphsim_reading_eager_rows_ms']:.3f} ms "
                  f"({e['diff']:+.1%})")
        for r in c["breakdown"][:4]:
            if abs(r["diff_ms"]) < 1e-3:
                continue
            gk = ", ".join(f"{k} {ms:.3f} ({src})" for k, ms, src in r["graphsim_kernels"][:3]) or "–"
            ak = ", ".join(f"{k} {ms:.3f} ({src})" for k, ms, src in r["aiconfigurator_ops"][:3]) or "–"
            print(f"    {r['category']:<14} graphsim {r['graphsim_ms']:.3f} vs {r['aiconfigurator_ms']:.3f} "
                  f"({r['diff_ms']:+.3f}): graphsim [{gk}]; aiconfigurator [{ak}]")
            if r["deliberate"]:
                print(f"      deliberate: {r['deliberate']}")
            if r["graphsim_gap"]:
                print(f"      graphsim gap: {r['graphsim_gap']}")
    for c in (c for c in out["cases"] if "per_op" in c):
        print(f"\nper op (µs): {c['system']} {c['model']} tp{c['tp']} {c['step']}: graphsim {c['graphsim_ms'] * 1e3:.0f}, "
              f"aiconfigurator {c['aiconfigurator_ms'] * 1e3:.0f}")
        print(f"  {'op':<21} {'graphsim':>9} {'aiconfig':>9} {'diff':>8}  graphsim kernels | aiconfigurator ops")
        for r in c["per_op"]:
            print(f"  {r['op']:<21} {r['graphsim_us']:>9.1f} {r['aiconfigurator_us']:>9.1f} {r['diff_us']:>+8.1f}  "
                  f"{', '.join(r['graphsim_kernels']) or '–'} | {', '.join(r['aiconfigurator_ops']) or '–'}")
    print("\n" + "; ".join(f"{k} {v:.1f} s" for k, v in out["timings_s"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--systems", default="h200_sxm", help="comma-separated: h200_sxm, h100_sxm, a100_sxm")
    ap.add_argument("--quick", action="store_true", help="two models (one dense, one MoE), four steps")
    ap.add_argument("--models", default=None, help="only these catalog names (comma-separated) of the grid; "
                    "NAME:TP adds any catalog model at that TP (e.g. qwen3-235b-a22b:8)")
    ap.add_argument("--steps", default=None, help="these steps (comma-separated prefill:1xN / decode:BxC) instead "
                    "of the grid's")
    ap.add_argument("--per-op", action="store_true", help="every case op by op: both sides by decoder-layer op "
                    "(embedding, norms, qkv GEMM, attention, MoE, all-reduce, logits …), µs")
    ap.add_argument("--db", default=None, help="SYSTEM=PATH,… graphsim profile.dbs already imported")
    ap.add_argument("--db-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "graphsim-validate-static"),
                    help="where missing profile.dbs are imported and model configs staged")
    ap.add_argument("--detail", type=float, default=0.10, help="break down cases beyond this |difference|")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print_report(out)


if __name__ == "__main__":
    main()

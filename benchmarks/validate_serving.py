"""Serving validation: graphsim's simulate against real, public `vllm bench serve` runs.

    python benchmarks/validate_serving.py [--json|--markdown] [--subset SEL]... [--all] [--profiles DIR] [--max-prompts N]
                                          [--save-results DIR]

The runs are facts stored under benchmarks/data/ (settings, measured metrics and the source of each;
`benchmarks/data/dennislee22_vllm_benchmarking.json`: vLLM 0.10.1.1 on A100, Qwen2-7B-Instruct at TP1/TP2
on one node and TP2 across two nodes, Qwen2.5-32B at TP1/TP2, Qwen2-72B at TP2, gpt-oss-120b at TP4;
`benchmarks/data/kvcached_h100_qwen3_0.6b.json`: vLLM 0.19.0 on one H100, Qwen3-0.6B, the vllm bench serve
result files of kvcached's vanilla runs, at rate inf and 16; `benchmarks/data/gpustack_performance_lab.json`:
GPUStack's performance-lab baselines with vLLM's defaults, held out: vLLM 0.11.0 with Qwen3-14B and Qwen3-32B on one
H100 or A100 80GB, Qwen3-235B-A22B-Instruct-2507 on 8 H100 / 8 A100 at TP8, DeepSeek-R1-0528 on 8 H200 at TP8, and
vLLM 0.13.0 with DeepSeek-V3.2 on 8 H200 at TP8; 32000/100, 4000/200, 2000/100 and 128/4 tokens, rate inf);
`benchmarks/data/lambdalabs_vllm_benchmark.json`: Lambda's vLLM 0.5.4 runs, held out: Mistral-7B-Instruct-v0.3 on 1,
2 or 4 H100 80GB, ShareGPT prompts at rate inf replayed with each run's own per-request lengths. For each
run the harness

1. plans the deployment with the run's own numbers: GPU, TP, `--max-model-len`, the available KV cache
   memory its startup log printed (`--kv-memory`; without a log, its `--gpu-memory-utilization`), vLLM's
   defaults otherwise; when graphsim's
   deployment config takes an interconnect: a TP group over several nodes (one GPU per node) gets
   `gpus_per_node` 1 (its collectives go over the network: the test's `network` where the data names one,
   e.g. dennislee22's pods talk TCP over 10 GbE, NCCL's socket transport, priced by
   graphsim.costing.network.TcpNetwork; else the GPU spec's InfiniBand figures), and a same-node group whose
   log says the GPUs lack P2P gets link `pcie` (vLLM then all-reduces with NCCL only);
2. prices iterations from aiconfigurator's tables for the run's GPU (`graphsim profiles
   import-aiconfigurator --system a100_sxm|h100_sxm --backend vllm`, imported once into graphsim's
   default place, $GRAPHSIM_HOME/profiles, unless --profiles DIR); each model is traced once per TP size
   and GPU;
3. simulates vLLM bench serve's workload for that run: the random dataset at the run's lengths and
   seed, its --request-rate (inf: every request at t = 0; the dennislee22 runs give none, vLLM's default
   inf), starting from the prefix cache the earlier runs on the same server left (the server is the engine's
   APIServer pid in the log lines, or a named server, the order their times): those runs are simulated as they
   were sent (their own lengths, rate and concurrency, each with the client's test request before it), one after
   another on the same engine, and each hands its block pool to the next (`graphsim.serving.simulate_after`,
   `SimulationSetup.prefix_cache`). Prompt i of a seed is one key over its whole length (`bench_random(...,
   prompt_keys=True)`): vLLM's RandomDataset builds it from (offsets[i] + i + arange(input_len)) % vocab_size, the
   lengths consuming nothing of its generator at range ratio 0, so a run with the same seed sends the same
   prompts, a longer input length extending them, and hits them as far as they are still cached.
   Output length per request: the run's measured total output tokens / completed requests (the runs
   did not pass --ignore-eos, so a few requests stopped early; this is a workload fact, not a fitted
   number);
4. models the run's vLLM version (`--engine vllm==0.10.1`: its defaults and host time) when graphsim's
   deployment config takes an engine version;
5. prints predicted vs measured mean TTFT, mean TPOT and output throughput per run, the median and
   worst |error| per model × topology group, and how many errors are over and under; `--save-results DIR`
   writes each run's predicted and measured results as vllm bench serve result files for `graphsim compare`.

By default the harness leaves out, with the reason printed: runs where some requests failed (the
client's metrics then cover only the successes), runs whose command lost a setting, and gpt-oss-120b
(a reasoning model whose outputs end at EOS after a few dozen tokens: the mean output length the
client divides by is not the length each request ran; and its MXFP4 MoE on A100 runs Triton kernels
the A100 tables do not hold). `--all` takes them too. `--subset` selects by run id prefix, test number
(`t2`), model or topology substring; repeatable.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout: import this tree's graphsim
    sys.path.insert(0, str(HERE.parent))
DATA = HERE / "data"
CONFIGS = DATA / "configs"
# The harness's names for the served models → graphsim's model argument (a catalog name or a config file).
MODELS = {
    "Qwen2-7B-Instruct": str(CONFIGS / "Qwen2-7B-Instruct"),
    "Qwen2.5-32B": str(CONFIGS / "Qwen2.5-32B"),
    "Qwen2-72B": str(CONFIGS / "Qwen2-72B"),
    "Qwen3-0.6B": str(CONFIGS / "Qwen3-0.6B"),
    "Qwen3-14B": str(CONFIGS / "Qwen3-14B"),
    "Qwen3-32B": "qwen3-32b",
    "DeepSeek-R1-0528": "deepseek-r1",  # the 0528 update kept DeepSeek-R1's config.json geometry (catalog entry)
    "Qwen3-235B-A22B-Instruct-2507": str(CONFIGS / "Qwen3-235B-A22B-Instruct-2507"),
    "DeepSeek-V3.2": str(CONFIGS / "DeepSeek-V3.2"),
    "gpt-oss-120b": "gpt-oss-120b",
    # Lambda's runs serve the Instruct releases; the catalog's base configs have their geometry (layers, heads, vocab)
    "Mistral-7B-Instruct-v0.3": "mistral-7b-v0.3",
    "Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b-v0.1",
}
# The runs' GPUs → (graphsim's --gpu, aiconfigurator's system for the tables). No A100 40GB spec or tables: priced as
# the 80 GB SXM part (stated in its group label). "H100 80GB HBM3" is the SXM part's name.
GPU = {"A100 80GB": ("a100", "a100_sxm"), "A100 40GB": ("a100", "a100_sxm"), "H100 80GB": ("h100", "h100_sxm"),
       "H200 141GB": ("h200", "h200_sxm")}
METRICS = (("mean_ttft_ms", "TTFT"), ("mean_tpot_ms", "TPOT"), ("output_throughput", "out tok/s"))
TARGET = {"mean_ttft_ms": 15.0, "mean_tpot_ms": 10.0, "output_throughput": 10.0}  # issue 13's done-when, %


def load_runs() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    runs, tests = [], {}
    for path in sorted(DATA.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        prefix = path.stem
        for k, t in doc["tests"].items():
            tests[f"{prefix}:{k}"] = {**t, "source": doc["source"], "commit": doc.get("commit")}
        for r in doc["runs"]:
            runs.append({**r, "test_key": f"{prefix}:{r['test']}", "file": path.name})
    return runs, tests


def topology(t: dict[str, Any]) -> str:
    if t["tp"] == 1:
        return "TP1"
    where = "1 node" if t["nodes"] == 1 else f"{t['nodes']} nodes"
    return f"TP{t['tp']} {where}"


def excluded(run: dict[str, Any], test: dict[str, Any]) -> str | None:
    if run.get("incomplete"):
        return run["incomplete"]
    if test.get("gpu_mismatch"):  # the runs' timings are not those of the GPU the source names (the data says why)
        return "the GPU is not the one named: " + test["gpu_mismatch"].split(". ")[0]  # its first sentence
    if run["bench"].get("dataset_name", "random") == "random" and run["bench"]["random_output_len"] is None:
        return "the README's command lost its --random-output-len value"
    if test["model"] == "gpt-oss-120b":
        return ("gpt-oss-120b: a reasoning model whose outputs end at EOS long before 1024 tokens (mean "
                f"{run['measured']['total_output_tokens'] / run['measured']['completed']:.0f}), so the client's TPOT "
                "divides by lengths the requests did not run; MXFP4 MoE on A100 runs Triton kernels the A100 tables "
                "do not hold")
    return None


def server(run: dict[str, Any]) -> tuple[Any, ...]:
    """Which server process a run went to: a named server, else the engine's APIServer pid in its log lines, at the
    host the client's command named, serving the run's test (one deployment: its KV cache is fixed when it starts).
    A pid alone is not a server: a restarted container logs the same one (dennislee22's pid 144 served test 2 at
    23:11, test 3 at 23:30 and test 2 again at 23:39 on 09-03; pid 114 answered at 10.254.5.35 for t1-08 and at
    10.254.5.39 for t1-09)."""
    log = run["server_log"]
    return run["file"], run["test"], log.get("host"), log.get("server", log.get("api_server_pid"))


def earlier_runs(run: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs the same server (`server`) took before this one, in the order of their log times."""
    log = run["server_log"]
    return sorted((r for r in runs if r is not run and server(r) == server(run)
                   and r["server_log"].get("time", "") < log.get("time", "")), key=lambda r: r["server_log"]["time"])


def test_request(in_len: int, out_len: int, seed: int):
    """The client's test request before a run: its first prompt, once, with its output length (vllm 0.10.1
    benchmarks/serve.py `benchmark`: "Starting initial single prompt test run", `input_requests[0]`'s prompt,
    prompt_len and expected_output_len), keyed as the run's prompt 0."""
    from graphsim.serving.requests import RequestSpec

    return [RequestSpec(0.0, in_len, out_len, f"prompt-{seed}-0", in_len)]


def network_overrides(network: dict[str, Any] | None) -> dict[str, float]:
    """The interconnect fields of a test's network between nodes (none stated: the GPU spec's own figures).
    "tcp": NCCL over TCP sockets on Ethernet of that line rate (graphsim.costing.network.TcpNetwork), with the
    test's `hop_latency_us` where the data states one (its `hop_latency_evidence` says where it comes from)."""
    if not network:
        return {}
    from graphsim.costing.network import NCCL_SOCKET_HOP_LATENCY_US, TcpNetwork

    if network["transport"] != "tcp":
        raise ValueError(f"network transport {network['transport']!r}: the harness knows 'tcp'")
    return TcpNetwork(network["line_rate_gbit_s"], network.get("mtu", 1500),
                      network.get("hop_latency_us", NCCL_SOCKET_HOP_LATENCY_US)).interconnect()


def ensure_profile(directory: str | None, system: str) -> str:
    """`<directory>/<system>_vllm.db` (default: graphsim's own profile place, $GRAPHSIM_HOME/profiles), imported from
    aiconfigurator's tables the first time it is needed."""
    from graphsim.costing.predict import profile_home

    out = (Path(directory) if directory else profile_home()) / f"{system}_vllm.db"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"building the {system} tables once: {out}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "graphsim", "profiles", "import-aiconfigurator", "--system", system,
                        "--backend", "vllm", "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    return str(out)


class Predictor:
    """Deployments per test, cost trees per (model, TP): each model traced once per TP size."""

    def __init__(self, profile_dir: str | None) -> None:
        self.profile_dir = profile_dir
        # each run's prediction by id, with the prefix cache it left (the next run on its server starts from it), when
        # the caller keeps them (main: each run simulated once); None: every predict() simulates its server's earlier
        # runs again (the fits patch constants between calls, kv_band changes a test's KV cache)
        self.memo: dict[str, dict[str, Any]] | None = None
        self.profiles: dict[str, str] = {}
        self.costs: dict[tuple[Any, ...], Any] = {}
        # tests whose KV cache is the start-up floor: (graphsim's estimate, the floor), bytes a rank; see deployment()
        self.floored: dict[str, tuple[int, int]] = {}

    def deployment(self, test: dict[str, Any]):
        from graphsim.cli import options as opt
        from graphsim.serving.config import DeploymentConfig
        from graphsim.serving.deployment import plan_deployment

        extra: dict[str, Any] = {}
        link: dict[str, Any] = {}
        if test["nodes"] > 1:  # one GPU per node: TP collectives over the network
            link["gpus_per_node"] = max(1, test["tp"] // test["nodes"])
            link.update(network_overrides(test.get("network")))
        elif test["tp"] > 1 and test.get("gpu_p2p") is False:  # vLLM: no custom all-reduce, NCCL without P2P
            link["link"] = "pcie"
        if link and "interconnect" in inspect.signature(opt.deployment_data).parameters:
            extra["interconnect"] = link
        if hasattr(opt, "Engine"):  # graphsim models engine versions: the run's (major.minor.patch)
            extra["engine"] = "vllm==" + ".".join(test["vllm"].split(".")[:3])
        if "kv_cache_memory_gib" in test:  # the run's own "Available KV cache memory"
            extra["kv_memory"] = f"{test['kv_cache_memory_gib']}GiB"
        else:  # no log: graphsim's memory budget at the run's --gpu-memory-utilization
            extra["gpu_memory_utilization"] = test["gpu_memory_utilization"]
        if "max_num_seqs" in test:  # the run's own --max-num-seqs (else vLLM's default for the version)
            extra["max_num_seqs"] = test["max_num_seqs"]
        data = opt.deployment_data(MODELS[test["model"]], GPU[test["gpu"]][0], test["tp"], 1,
                                   max_model_len=test["max_model_len"], **extra)
        dep = plan_deployment(DeploymentConfig.parse(data))
        if "kv_cache_memory_gib" in test or dep.capacity.fits_one_request:
            return dep, "interconnect" in extra
        # No log, and graphsim's estimated budget cannot hold one request of the run's --max-model-len: yet the server
        # started at it, so vLLM's start-up check held (vllm/v1/core/kv_cache_utils.py `check_enough_kv_cache_memory`,
        # 0.10.1 and 0.11.0: "To serve at least one request with the models's max seq len ..." raises otherwise). The
        # estimate is wrong there; the least cache the server can have had (one max-length request and one block of
        # slack, as benchmarks/kv_band.py's floor) replaces it, and the run says so.
        c = dep.capacity
        floor = (c.blocks_per_request + 1) * c.bytes_per_block
        self.floored[test["model"] + " · " + test["gpu"] + f" · tp{test['tp']}"] = (c.available_bytes, floor)
        engine = {k: v for k, v in data["engine"].items() if k != "gpu_memory_utilization"}
        data = dict(data, engine={**engine, "kv_cache_memory_bytes": floor})
        return plan_deployment(DeploymentConfig.parse(data)), "interconnect" in extra

    def profile(self, system: str) -> str:
        if system not in self.profiles:
            self.profiles[system] = ensure_profile(self.profile_dir, system)
        return self.profiles[system]

    def cost(self, dep, key: tuple[Any, ...], system: str):
        from graphsim.serving.deployment import build_cost

        if key not in self.costs:
            self.costs[key] = build_cost(dep, self.profile(system))
        return self.costs[key]


def per_request_lengths(bench: dict[str, Any], n: int) -> tuple[list[int], list[int]] | None:
    """The first n requests' (input, output) token counts when the run states them per request (a benchmark result
    file's `input_lens` / `output_lens`, e.g. ShareGPT prompts); None for the random dataset's fixed lengths."""
    if "input_lens" not in bench:
        return None
    return [int(x) for x in bench["input_lens"][:n]], [int(x) for x in bench["output_lens"][:n]]


def score_empty_text_as_client(doc: dict[str, Any], output_lens: list[int]) -> None:
    """Score the replay as vLLM's client scored the run. A request whose streamed text stayed empty ran its prompt and
    one token, yet the client (benchmarks/backend_request_func.py `async_request_openai_completions`, which sets TTFT
    at the first chunk with text) recorded TTFT 0.0 for it and 0 re-tokenized output tokens, and counted both in the
    mean TTFT and the output throughput; TPOT skips it either way (output length <= 1)."""
    empty = [o == 0 for o in output_lens]
    if not any(empty):
        return
    ttfts = [0.0 if e else t for t, e in zip(doc["ttfts"], empty, strict=True)]
    doc["mean_ttft_ms"] = statistics.fmean(ttfts) * 1e3
    doc["total_output_tokens"] -= sum(empty)
    doc["output_throughput"] = doc["total_output_tokens"] / doc["duration"]
    doc["graphsim"]["empty_text_requests"] = sum(empty)


def predict(run: dict[str, Any], test: dict[str, Any], runs: list[dict[str, Any]], pred: Predictor,
            max_prompts: int | None) -> dict[str, Any]:
    from graphsim.serving import simulate, summarize
    from graphsim.serving.bench_metrics import BenchSettings, bench_result
    from graphsim.serving.requests import RequestSpec, bench_arrivals, bench_random

    m, b = run["measured"], run["bench"]
    n = b["num_prompts"] if max_prompts is None else min(b["num_prompts"], max_prompts)
    in_len = round(m["total_input_tokens"] / m["completed"])
    out_len = max(1, round(m["total_output_tokens"] / m["completed"]))
    if pred.memo is not None and run["id"] in pred.memo:  # simulated already, as an earlier run of a later one's server
        return pred.memo[run["id"]]
    dep, network = pred.deployment(test)
    lens = per_request_lengths(b, n)
    # the cost tree depends on the deployment's engine limits too (max_num_batched_tokens follows --max-model-len
    # in V0, the CUDA-graph bound follows --max-num-seqs): one per model, TP, GPU, network and those limits
    key = (test["model"], test["tp"], test["gpu"], network, test["max_model_len"], test.get("max_num_seqs"))
    cost, note, _ = pred.cost(dep, key, GPU[test["gpu"]][1])
    sampling = test.get("sampling")  # what the run's requests asked the sampler for (None: greedy)
    if sampling:
        from graphsim.serving.sampler import Sampling

        setup = dep.simulation_setup(cost, sampling=Sampling(**sampling))
    else:
        setup = dep.simulation_setup(cost)
    rate = math.inf if b["request_rate"] in ("inf", None) else float(b["request_rate"])
    if lens:  # the run's own per-request lengths (a dataset other than random), all sent at t = 0
        if not math.isinf(rate) or b.get("max_concurrency") is not None:
            raise ValueError("per-request lengths are replayed at rate inf without --max-concurrency only")
        workload = [RequestSpec(0.0, i, max(1, o), None, 0, False) for i, o in zip(*lens, strict=True)]
        in_len, out_len = round(sum(lens[0]) / n), max(1, round(sum(lens[1]) / n))
    else:
        workload = bench_random(n, in_len, out_len, 0.0, 0, rate, 1.0, b.get("max_concurrency"), b["seed"],
                                prompt_keys=True)
    t0 = time.perf_counter()
    earlier = [] if lens else earlier_runs(run, runs)
    if earlier:  # the cache the server's earlier runs left (one server: one test), then the client's test request
        setup = replace(setup, prefix_cache=predict(earlier[-1], test, runs, pred, max_prompts)["prefix_cache"])
    if not lens:
        setup = replace(setup, prefix_cache=simulate(setup, test_request(in_len, out_len, b["seed"])).prefix_cache)
    res = simulate(setup, workload)
    warm = int(np.count_nonzero(res.requests.column("hit_tokens") > 0))
    summary = summarize(res)
    doc = bench_result(res, BenchSettings(model_id=test["model"], num_prompts=n, request_rate=rate,
                                          max_concurrency=b.get("max_concurrency"), save_detailed=bool(lens)),
                       bench_arrivals(n, rate, 1.0, b["seed"]),
                       {"predicted": True, "deployment": dep.to_json(), "data": note, "run": run["id"],
                        "prompts_in_prefix_cache": warm, "time_source": summary.source,
                        "source_shares": getattr(summary, "source_shares", {})})
    if lens:
        score_empty_text_as_client(doc, lens[1])
    out = {
        "predicted": {k: doc[k] for k, _ in METRICS}, "document": doc, "warm_prompts": warm, "prompts": n,
        "input_len": in_len, "output_len": out_len, "sim_s": time.perf_counter() - t0, "data": note,
        "network": network, "prefix_cache": res.prefix_cache, "earlier": [r["id"] for r in earlier]}
    if pred.memo is not None:
        pred.memo[run["id"]] = out
    return out


def save_pair(directory: Path, run: dict[str, Any], test: dict[str, Any], predicted: dict[str, Any]) -> None:
    """The run's predicted and measured results as two vllm bench serve result files (`graphsim compare A B`)."""
    from graphsim.serving.bench_metrics import write_result

    directory.mkdir(parents=True, exist_ok=True)
    b = run["bench"]
    setup = {"backend": "vllm", "model_id": b["model"], "num_prompts": b["num_prompts"],
             "request_rate": b["request_rate"] if b["request_rate"] is not None else "inf", "burstiness": 1.0,
             "max_concurrency": b.get("max_concurrency")}
    predicted = {**predicted, **setup}
    write_result(directory / f"{run['id']}.predicted.json", predicted)
    write_result(directory / f"{run['id']}.measured.json",
                 {**setup, **run["measured"], "source": run["source"], "vllm": test["vllm"], "gpu": test["gpu"]})


def select(runs: list[dict[str, Any]], tests: dict[str, dict[str, Any]], subsets: list[str]) -> list[dict[str, Any]]:
    if not subsets:
        return runs
    out = []
    for r in runs:
        t = tests[r["test_key"]]
        words = {r["id"], f"t{r['test']}", t["model"], topology(t)}
        if any(any(w.startswith(s) or s in w for w in words) for s in subsets):
            out.append(r)
    return out


def error_pct(p: float, m: float) -> float:
    return (p - m) / m * 100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--markdown", action="store_true", help="print the group table as Markdown (for docs)")
    ap.add_argument("--subset", action="append", default=[], help="run id prefix, t<test>, model or topology (repeatable)")
    ap.add_argument("--all", action="store_true", help="include the runs left out by default (reasons printed)")
    ap.add_argument("--profiles", help="folder of <system>_vllm.db tables (default $GRAPHSIM_HOME/profiles; "
                                       "each imported from aiconfigurator the first time it is needed)")
    ap.add_argument("--max-prompts", type=int, help="simulate at most N prompts of each run (stated per run)")
    ap.add_argument("--save-results", metavar="DIR", help="write <id>.predicted.json (graphsim, vllm bench serve's "
                                                           "keys) and <id>.measured.json (the stored facts, the same "
                                                           "keys) per run, for `graphsim compare`")
    args = ap.parse_args(argv)
    runs, tests = load_runs()
    chosen = select(runs, tests, args.subset)
    pred = Predictor(args.profiles)
    pred.memo = {}
    rows, skipped = [], []
    for r in chosen:
        t = tests[r["test_key"]]
        why = excluded(r, t)
        if why and not args.all:
            skipped.append({"id": r["id"], "reason": why})
            continue
        try:
            p = predict(r, t, runs, pred, args.max_prompts)
        except Exception as e:  # a run graphsim cannot model is reported, not fatal
            skipped.append({"id": r["id"], "reason": f"graphsim failed: {type(e).__name__}: {e}"})
            continue
        errs = {k: error_pct(p["predicted"][k], r["measured"][k]) for k, _ in METRICS}
        if args.save_results:
            save_pair(Path(args.save_results), r, t, p["document"])
        rows.append({"id": r["id"], "model": t["model"], "gpu": t["gpu"], "topology": topology(t), "vllm": t["vllm"],
                     "prompts": r["bench"]["num_prompts"], "simulated_prompts": p["prompts"],
                     "input_len": p["input_len"], "output_len": p["output_len"], "warm_prompts": p["warm_prompts"],
                     "measured": {k: r["measured"][k] for k, _ in METRICS}, "predicted": p["predicted"],
                     "error_pct": errs, "sim_s": p["sim_s"], "source": r["source"], "network": p["network"]})
        if not args.json:
            e = errs
            print(f"{r['id']:<13} {t['model']:<18} {topology(t):<22} n={r['bench']['num_prompts']:<5} "
                  f"in {p['input_len']:<5} out {p['output_len']:<5} warm {p['warm_prompts']:<4} "
                  + "  ".join(f"{lbl} {r['measured'][k]:>9.2f}→{p['predicted'][k]:>9.2f} ({e[k]:+6.1f}%)"
                              for k, lbl in METRICS), flush=True)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[f"vLLM {row['vllm']} · {row['gpu']} · {row['model']} · {row['topology']}"].append(row)
    summary = {}
    for g, members in sorted(groups.items()):
        summary[g] = {"runs": len(members)}
        for k, _ in METRICS:
            errs = [m["error_pct"][k] for m in members]
            summary[g][k] = {"median_abs_pct": statistics.median(abs(x) for x in errs),
                             "worst_pct": max(errs, key=abs), "over": sum(x > 0 for x in errs),
                             "under": sum(x < 0 for x in errs), "target_pct": TARGET[k]}
    overall = {}
    for k, _ in METRICS:
        errs = [r["error_pct"][k] for r in rows]
        if errs:
            overall[k] = {"median_abs_pct": statistics.median(abs(x) for x in errs), "worst_pct": max(errs, key=abs),
                          "over": sum(x > 0 for x in errs), "under": sum(x < 0 for x in errs), "target_pct": TARGET[k]}
    floored = [f"KV cache at the start-up floor for {k}: graphsim's budget {est / 2**30:.2f} GiB cannot hold one "
               f"request of the run's --max-model-len, yet the server started, so it had at least {fl / 2**30:.2f} GiB "
               "a rank (vLLM's check_enough_kv_cache_memory); simulated there" for k, (est, fl) in pred.floored.items()]
    doc = {"profiles": pred.profiles, "runs": rows, "groups": summary, "overall": overall, "left_out": skipped,
           "kv_at_floor": floored}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    if args.markdown:
        print("\n| group | runs | " + " | ".join(f"{lbl}: median \\|err\\| / worst (over:under)" for _, lbl in METRICS) + " |")
        print("|---|---|" + "---|" * len(METRICS))
        for g, gs in [*summary.items(), ("all", {"runs": len(rows), **overall})]:
            cells = [f"{gs[k]['median_abs_pct']:.1f} % / {gs[k]['worst_pct']:+.1f} % ({gs[k]['over']}:{gs[k]['under']})"
                     for k, _ in METRICS if k in gs]
            print(f"| {g} | {gs['runs']} | " + " | ".join(cells) + " |")
    print()
    print(f"{'group':<58} {'runs':>4}  " + "  ".join(f"{lbl + ' med|err| / worst (over:under)':<36}" for _, lbl in METRICS))
    for g, s in [*summary.items(), ("all", {"runs": len(rows), **overall})]:
        cells = []
        for k, _ in METRICS:
            if k in s:
                c = s[k]
                cells.append(f"{c['median_abs_pct']:5.1f}% / {c['worst_pct']:+7.1f}% ({c['over']}:{c['under']})".ljust(36))
        print(f"{g:<58} {s['runs']:>4}  " + "  ".join(cells))
    print(f"\ntargets (issue 13): median |error| <= {TARGET['mean_tpot_ms']:g} % TPOT and output throughput, "
          f"<= {TARGET['mean_ttft_ms']:g} % TTFT, per group; errors not all of one sign")
    for line in floored:
        print(line)
    for s in skipped:
        print(f"left out {s['id']}: {s['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

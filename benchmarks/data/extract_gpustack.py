"""Extract the vLLM baseline runs of GPUStack's performance lab (github.com/gpustack/gpustack, docs/performance-lab/)
into one JSON file of facts.

Usage: python benchmarks/data/extract_gpustack.py PERFORMANCE_LAB_DIR COMMIT > benchmarks/data/gpustack_performance_lab.json

PERFORMANCE_LAB_DIR is a checkout's docs/performance-lab/. Each page tunes one model on one GPU type; its
"Other Benchmark Cases" section prints the baseline ("vllm serve <model>", no other option: vLLM's defaults) under
four random-dataset workloads. What each page states, with the page line it was read from in each run's source:

- "Experimental Setup / Hardware" (e.g. "A single NVIDIA H100 SXM GPU."), "Engine Version" ("vLLM: v0.11.0");
- "Benchmark Dataset": very long prompt 32000 in / 100 out, long 4000 / 200, medium 2000 / 100, short 128 / 4;
- "Benchmark Script": `vllm bench serve --model M --backend openai-chat --endpoint /v1/chat/completions
  --dataset-name random --random-input-len 4000 --random-output-len 200 --num-prompts 500 --seed 42`
  ("fixed seed for reproducibility"): no --request-rate (vLLM's default inf: every request at t = 0), no
  --max-concurrency, no --ignore-eos, no --random-range-ratio (default 0: every prompt exactly the length);
- the "Baseline benchmark results" block: one "Serving Benchmark Result" per workload, headed "# random 32K
  input" / "4K" / "2K" / "128".

Only the pages whose serving command is vLLM with no option other than the model and `-tp` (so the engine's
defaults are the deployment; DeepSeek-V3.2's page adds front-end options only) and whose model graphsim has a config for are taken (PAGES below). Not taken: the
gpt-oss-20b / gpt-oss-120b pages (reasoning models whose outputs end at EOS long before the requested length:
52,309 of 100,000 tokens in the 4K run on H100), GLM-4.5-Air / GLM-4.6 / GLM-5.2 and Qwen3.5 (no config here),
and every ShareGPT run (the dataset file is not here; the harness replays random
prompts only).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = "https://github.com/gpustack/gpustack"

# Page → the deployment it states. tp: the serving command's -tp (none: 1); max_model_len: vLLM's default, the
# model's max_position_embeddings (config.json: 40960 for Qwen3-14B / Qwen3-32B, 163840 for DeepSeek-R1-0528 and
# DeepSeek-V3.2, 262144 for Qwen3-235B-A22B-Instruct-2507).
PAGES = {
    1: {"page": "qwen3-14b/h100.md", "tp": 1, "max_model_len": 40960,
        "model": "Qwen3-14B", "hf": "Qwen/Qwen3-14B", "gpu": "H100 80GB",
        "hardware": "A single NVIDIA H100 SXM GPU."},
    2: {"page": "qwen3-14b/a100.md", "tp": 1, "max_model_len": 40960,
        "model": "Qwen3-14B", "hf": "Qwen/Qwen3-14B", "gpu": "A100 80GB",
        "hardware": "A single NVIDIA A100 SXM GPU.",
        "assumed_gpu": "the page does not give the memory size; its sibling pages (qwen3-32b/a100.md, "
                       "gpt-oss-20b/a100.md, same lab, same vLLM) say A100 SXM 80GB"},
    3: {"page": "qwen3-32b/h100.md", "tp": 1, "max_model_len": 40960,
        "model": "Qwen3-32B", "hf": "Qwen/Qwen3-32B", "gpu": "H100 80GB",
        "hardware": "A single NVIDIA H100 SXM GPU."},
    4: {"page": "qwen3-32b/a100.md", "tp": 1, "max_model_len": 40960,
        "model": "Qwen3-32B", "hf": "Qwen/Qwen3-32B", "gpu": "A100 80GB",
        "hardware": "A single NVIDIA A100 SXM 80GB GPU."},
    5: {"page": "deepseek-r1/h200.md", "model": "DeepSeek-R1-0528", "hf": "deepseek-ai/DeepSeek-R1-0528",
        "gpu": "H200 141GB", "tp": 8, "max_model_len": 163840,
        "hardware": "8 × NVIDIA H200 SXM GPUs on a single node."},
    6: {"page": "qwen3-235b-a22b/h100.md", "model": "Qwen3-235B-A22B-Instruct-2507",
        "hf": "Qwen/Qwen3-235B-A22B-Instruct-2507", "gpu": "H100 80GB", "tp": 8, "max_model_len": 262144,
        "hardware": "8 × NVIDIA H100 SXM GPUs on a single node."},
    7: {"page": "qwen3-235b-a22b/a100.md", "model": "Qwen3-235B-A22B-Instruct-2507",
        "hf": "Qwen/Qwen3-235B-A22B-Instruct-2507", "gpu": "A100 80GB", "tp": 8, "max_model_len": 262144,
        "hardware": "8 × NVIDIA A100 SXM 80GB GPUs on a single node."},
    8: {"page": "deepseek-v3.2/h200.md", "model": "DeepSeek-V3.2", "hf": "deepseek-ai/DeepSeek-V3.2", "gpu": "H200 141GB",
        "tp": 8, "max_model_len": 163840, "hardware": "8 × NVIDIA H200 SXM GPUs on a single node.",
        # front-end options only: how the API server tokenizes chat messages and splits reasoning from the answer
        "front_end_options": "--tokenizer-mode deepseek_v32 --reasoning-parser deepseek_v3"},
}
# Pages whose timings are not those of the GPU they name, with the evidence (benchmarks/gpu_consistency.py computes
# every ratio and ceiling from the stored runs and the datasheets; nothing from a graphsim prediction). The harness
# leaves such a test's runs out by default and names this as the reason.
GPU_MISMATCH_COMMON = (
    "The 'SXM' is the lab's later wording: gpustack commit 1f37f1b8 (2026-01-06, 'docs: clarify GPU number') replaced "
    "the page's 'NVIDIA H100 GPUs' of ccf4b940 with it. A 2 TB/s, 350 W part such as the H100 PCIe (datasheet: 756 "
    "TFLOP/s BF16 dense, 2.0 TB/s; 2.42x and 0.98x the A100's) fits both ratios; graphsim has no measured tables for "
    "it (aiconfigurator-core 0.12 ships none). Left out by default (validate_serving.py --all takes it).")
GPU_MISMATCH = {
    1: ("its timings are not an H100 SXM's (python benchmarks/gpu_consistency.py): the same requests ran 1.78x faster "
        "than on the same lab's A100 SXM page (test 2; median duration ratio of the 4 workloads, 1.87x at 32K), where "
        "the datasheets give 3.17x BF16 and 1.64x HBM, and the lab's 8 x H100 SXM node ran its Qwen3-235B workloads "
        "2.57x faster than its 8 x A100 (tests 6 and 7); its median decode step (43.5-46.0 ms) is longer than reading "
        "all 76.5 GB vLLM manages at the SXM's 3.35 TB/s (22.8 ms) plus its host time."),
    3: ("its timings are not an H100 SXM's (python benchmarks/gpu_consistency.py): the same requests ran 1.39x faster "
        "than on the same lab's A100 SXM page (test 4; median of the 4 workloads), where the datasheets give 3.17x "
        "BF16 and 1.64x HBM; its median step (43.3 ms at 32K: one or two sequences, whose host time is under a "
        "millisecond) is 1.12x shorter than the A100's (48.55 ms), while reading ALL 76.5 GB vLLM manages at the "
        "SXM's 3.35 TB/s takes 22.8 ms (the A100's ceiling: 37.6 ms at 2.039 TB/s)."),
}
# "# random <label> input" → (input len, output len) from the page's "Benchmark Dataset" list, and the prompts sent:
# 500 for 4K is the page's command; 100 / 500 / 1000 for 32K / 2K / 128 are what every such run of the lab's pages
# completed but one (qwen3-235b-a22b/h100.md's 128-token run: 984, marked incomplete).
WORKLOADS = {"32K": (32000, 100, 100), "4K": (4000, 200, 500), "2K": (2000, 100, 500), "128": (128, 4, 1000)}

RESULT_KEYS = {
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total Token throughput (tok/s)": "total_token_throughput",
    "Mean TTFT (ms)": "mean_ttft_ms",
    "Median TTFT (ms)": "median_ttft_ms",
    "P99 TTFT (ms)": "p99_ttft_ms",
    "Mean TPOT (ms)": "mean_tpot_ms",
    "Median TPOT (ms)": "median_tpot_ms",
    "P99 TPOT (ms)": "p99_tpot_ms",
    "Mean ITL (ms)": "mean_itl_ms",
    "Median ITL (ms)": "median_itl_ms",
    "P99 ITL (ms)": "p99_itl_ms",
}
INT_KEYS = {"completed", "total_input_tokens", "total_output_tokens"}


def line_of(lines: list[str], pattern: str, start: int = 0) -> int:
    """1-based number of the first line at or after `start` (0-based) matching `pattern`."""
    for i in range(start, len(lines)):
        if re.search(pattern, lines[i]):
            return i + 1
    raise SystemExit(f"pattern {pattern!r} not found")


def baseline_runs(lines: list[str]) -> list[tuple[str, int, dict[str, float]]]:
    """(label, line of its '# random … input' heading, parsed result) for the baseline block's workloads."""
    start = line_of(lines, r'Baseline benchmark results')
    end = line_of(lines, r'Optimized serving script', start)
    out = []
    label, at, res = None, 0, {}
    for i in range(start, end - 1):
        m = re.match(r"\s*# random (\S+) input", lines[i])
        if m:
            label, at, res = m.group(1).upper(), i + 1, {}
            continue
        m = re.match(r"\s*([A-Za-z0-9 ()/]+?):\s+([0-9.]+)\s*$", lines[i])
        if m and label and m.group(1) in RESULT_KEYS:
            key = RESULT_KEYS[m.group(1)]
            res[key] = int(float(m.group(2))) if key in INT_KEYS else float(m.group(2))
        if label and lines[i].strip().startswith("=====") and "mean_ttft_ms" in res:
            out.append((label, at, res))
            label = None
    return out


def main() -> None:
    root, commit = Path(sys.argv[1]), sys.argv[2]
    doc = {
        "source": REPO,
        "commit": commit,
        "what": ("GPUStack's performance lab: vLLM's baseline ('vllm serve <model>', every other setting vLLM's "
                 "default) on one GPU, or on 8 H200 at TP 8 for DeepSeek-R1-0528, benchmarked with vllm bench serve --backend openai-chat --endpoint "
                 "/v1/chat/completions --dataset-name random; facts copied from each page's 'Baseline benchmark "
                 "results' block and its Experimental Setup."),
        "workload_notes": [
            "no --request-rate: vLLM's default inf, every request sent at t = 0; no --max-concurrency",
            "seed 42 (the page's benchmark command, 'fixed seed for reproducibility'), --random-range-ratio 0: "
            "every prompt exactly the stated length as the client counts it",
            "chat endpoint: the server wraps each prompt in the model's chat template, a few tokens more than the "
            "client's count (about 8 for Qwen3), which the harness does not add (about 6 % of the 128-token "
            "prompts, under 0.5 % of the others)",
            "no --ignore-eos: a request may stop at EOS before the requested output length; the measured total "
            "output / completed is the mean output length",
            "the four workloads of one page were sent to one server in an order the page does not state; "
            "vLLM's random prompt i with one seed is (offset_i + i + j) mod vocab for j < length, so a shorter "
            "prompt repeats the start of the longer one and a later run can find a few blocks in the prefix "
            "cache; the harness models none of that (a cold cache, but the client's test prompt)",
        ],
        "tests": {},
        "runs": [],
    }
    for k, p in PAGES.items():
        lines = (root / p["page"]).read_text(encoding="utf-8").splitlines()
        hw = line_of(lines, re.escape(p["hardware"]))
        ver_line = line_of(lines, r"^- vLLM: v")
        version = lines[ver_line - 1].split("v", 2)[-1].strip()
        tp_opt = (f" -tp {p['tp']}" if p["tp"] > 1 else "") + (" " + p["front_end_options"] if "front_end_options" in p
                                                               else "")
        serve = line_of(lines, r"vllm serve " + re.escape(p["hf"] + tp_opt) + r"\s*$",
                        line_of(lines, "Baseline serving script"))
        url = f"{REPO}/blob/{commit}/docs/performance-lab/{p['page']}"
        assumed = ["max_model_len", "gpu_memory_utilization"]
        test = {"model": p["model"], "tp": p["tp"], "nodes": 1, "gpu": p["gpu"], "gpu_memory_utilization": 0.9,
                "max_model_len": p["max_model_len"], "vllm": version, "log": f"{url}#L{hw}",
                "note": (f"hardware (L{hw}): {p['hardware']!r}; vLLM v{version} (L{ver_line}); serving command "
                         f"(L{serve}): 'vllm serve {p['hf']}{tp_opt}' with no other engine option, so TP {p['tp']}, "
                         f"--gpu-memory-utilization 0.9 and --max-model-len {p['max_model_len']} "
                         "(max_position_embeddings) are vLLM's defaults; no startup log published: the KV cache is "
                         "graphsim's budget at 0.9")}
        if "assumed_gpu" in p:
            assumed.append("gpu")
            test["note"] += "; GPU memory assumed: " + p["assumed_gpu"]
        test["assumed"] = assumed
        if k in GPU_MISMATCH:
            test["gpu_mismatch"] = GPU_MISMATCH[k] + " " + GPU_MISMATCH_COMMON
        doc["tests"][str(k)] = test
        for label, at, res in baseline_runs(lines):
            in_len, out_len, prompts = WORKLOADS[label]
            run = {
                "id": f"gps-t{k}-{label.lower()}",
                "test": k,
                "page_line": at,
                "measured": res,
                "server_log": {"server": f"t{k}"},
                "bench": {"dataset_name": "random", "num_prompts": prompts, "random_input_len": in_len,
                          "random_output_len": out_len, "request_rate": "inf", "max_concurrency": None,
                          "seed": 42, "model": p["hf"]},
                "source": f"{url}#L{at}",
            }
            if label != "4K":
                run["assumed"] = ["num_prompts (the page states the command of the 4K run only)"]
            if res["completed"] < prompts:
                run["incomplete"] = (f"{res['completed']} of {prompts} requests succeeded; the benchmark counts only "
                                     "the successful ones")
            doc["runs"].append(run)
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

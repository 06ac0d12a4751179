"""Extract vLLM 0.5.4 serving runs of Lambda's LLM inference benchmark (github.com/LambdaLabsML/vllm-benchmark)
into one JSON file of facts.

Usage: python benchmarks/data/extract_lambdalabs.py CHECKOUT COMMIT > benchmarks/data/lambdalabs_vllm_benchmark.json

CHECKOUT is a checkout of the repository (its results/ folder); COMMIT the commit the files were read at. Each result
file is a `benchmark_serving.py --save-result` document; the harness needs its summary and its per-request
`input_lens` / `output_lens`. What the repository states, and where:

- benchmark.py (`run_benchmark`): the server is `python3 -m vllm.entrypoints.openai.api_server --model M
  --max-model-len L --gpu-memory-utilization 0.95 --max-num-seqs 1024` (+ `--tensor-parallel-size N` on N > 1 GPUs),
  started fresh for every result file and stopped after it; the client is `benchmark_serving.py --backend vllm
  --dataset-name sharegpt --num-prompts P --endpoint /v1/completions` (no --request-rate: inf, every request at
  t = 0; seed 0, the script's default);
- the file name: `results/prompt_P/{N}x{GPU}/{model}_tp{N}_len{L}.json`;
- benchmark_v0.md, "vLLM v0.5.4 v.s. v0.6.0": "This benchmark was conducted with vLLM `v0.5.4`"; its TP/DP
  table reports 1xH100 Mistral-7B-Instruct-v0.3 at 3281.19 tok/s and a median ITL of 27.23 ms, the
  prompt_320 len2000 file's own numbers. Only files dated 2024-08 (their `date` field), before vLLM 0.6.0's release
  (2024-09-04), are taken: files dated 2024-09 carry ITLs of many tokens per chunk (multi-step scheduling) and the
  version that wrote them is not stated.

Taken (RUNS below): Mistral-7B-Instruct-v0.3 on 1, 2 and 4 H100-80GB-SXM. Left out with the reason in the file:
Mixtral-8x7B-Instruct-v0.1 on 2 H100s (cold start, see LEFT_OUT). Files the index of the repository does not hold
(e.g. 1xH100 Mistral prompt_40 len2000) are not listed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = "https://github.com/LambdaLabsML/vllm-benchmark"
GPU = {"H100-80GB-SXM": "H100 80GB"}
MODELS = {"Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-Instruct-v0.3",
          "Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-Instruct-v0.1"}

# (model, GPUs, max_model_len) → test number; the runs of one test share a deployment (each on a fresh server).
TESTS = {("Mistral-7B-Instruct-v0.3", 1, 2000): 1, ("Mistral-7B-Instruct-v0.3", 1, 8000): 2,
         ("Mistral-7B-Instruct-v0.3", 2, 2000): 3, ("Mistral-7B-Instruct-v0.3", 2, 8000): 4,
         ("Mixtral-8x7B-Instruct-v0.1", 2, 2000): 5, ("Mixtral-8x7B-Instruct-v0.1", 2, 16000): 6,
         ("Mistral-7B-Instruct-v0.3", 2, 16000): 7, ("Mistral-7B-Instruct-v0.3", 4, 2000): 8,
         ("Mistral-7B-Instruct-v0.3", 4, 8000): 9, ("Mistral-7B-Instruct-v0.3", 4, 16000): 10}
RUNS = [
    "results/prompt_10/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json",
    "results/prompt_20/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json",
    "results/prompt_80/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len8000.json",
    "results/prompt_160/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json",
    "results/prompt_320/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json",
    "results/prompt_10/2xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp2_len16000.json",
    "results/prompt_20/2xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp2_len2000.json",
    "results/prompt_40/2xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp2_len8000.json",
    "results/prompt_160/2xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp2_len8000.json",
    "results/prompt_320/2xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp2_len8000.json",
    "results/prompt_10/4xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp4_len8000.json",
    "results/prompt_40/4xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp4_len16000.json",
    "results/prompt_80/4xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp4_len2000.json",
    "results/prompt_160/4xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp4_len8000.json",
    "results/prompt_10/2xH100-80GB-SXM/Mixtral-8x7B-Instruct-v0.1_tp2_len2000.json",
    "results/prompt_80/2xH100-80GB-SXM/Mixtral-8x7B-Instruct-v0.1_tp2_len2000.json",
    "results/prompt_320/2xH100-80GB-SXM/Mixtral-8x7B-Instruct-v0.1_tp2_len16000.json",
]
LEFT_OUT = {
    "Mixtral-8x7B-Instruct-v0.1": (
        "cold start: the server was started for this file and benchmarked at once (benchmark.py), and vLLM 0.5.4 "
        "compiles its fused-MoE Triton kernels on their first call: with 10 prompts (1,585 tokens) every request "
        "waited 2,858 ms for its first token, and the 80- and 320-prompt files hold decode gaps of 1.1-1.8 s "
        "between ~25-40 ms ITLs; no steady-state kernel time explains them, and graphsim prices steady kernels"),
}
SUMMARY = ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
           "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms")


def parse_path(path: str) -> tuple[int, int, str, str, int]:
    """`results/prompt_P/{N}x{GPU}/{model}_tp{N}_len{L}.json` → (P, N, GPU, model, L)."""
    _, prompts, node, name = path.split("/")
    n, gpu = node.split("x", 1)
    model, tp, length = name.removesuffix(".json").rsplit("_", 2)
    assert tp == f"tp{n}", path
    return int(prompts.removeprefix("prompt_")), int(n), gpu, model, int(length.removeprefix("len"))


def main() -> None:
    root, commit = Path(sys.argv[1]), sys.argv[2]
    doc = {
        "source": REPO,
        "commit": commit,
        "what": ("Lambda's vLLM benchmark (benchmark_v0.md): vLLM 0.5.4's OpenAI server with --gpu-memory-utilization "
                 "0.95 --max-num-seqs 1024 and a per-file --max-model-len, on 1, 2 or 4 H100-80GB-SXM (TP 1, 2 or 4), "
                 "benchmark_serving.py --backend vllm --dataset-name sharegpt at rate inf; facts copied from each "
                 "result file (summary, per-request input_lens / output_lens)."),
        "workload_notes": [
            "ShareGPT prompts: the client's seed 0 shuffles the dataset once and takes the first P that pass its "
            "length filter, so the P-prompt file's prompts are the first P of the 320-prompt file's (their "
            "input_lens agree); each run replays its own per-request input and output lengths",
            "output lengths are the client's re-tokenized counts of the streamed text (greedy decoding, "
            "max_tokens = the dataset's completion length): the replay runs each request for that many tokens",
            "a request whose streamed text stayed empty (output_lens 0, ttfts 0.0 in the file: about 1 in 10) "
            "still ran its prompt and one token; vLLM's client (backend_request_func.py "
            "async_request_openai_completions) sets TTFT at the first chunk with text, so it records 0.0 for "
            "such a request and counts it in the mean TTFT, and its 0 output tokens in the throughput; the "
            "harness scores graphsim's replay the same way",
            "every file was written by a server started for it (benchmark.py), so no prompt is in a prefix cache "
            "(V0 0.5.4 caches no prefixes by default anyway)",
        ],
        "tests": {},
        "runs": [],
    }
    for path in RUNS:
        prompts, n, gpu, model, max_len = parse_path(path)
        res = json.loads((root / path).read_text(encoding="utf-8"))
        assert res["date"].startswith("202408"), (path, res["date"])  # before vLLM 0.6.0 (see the docstring)
        assert res["num_prompts"] == prompts and res["completed"] == prompts, path
        ins, outs = res["input_lens"], res["output_lens"]
        assert sum(ins) == res["total_input_tokens"] and sum(outs) == res["total_output_tokens"], path
        test = TESTS[(model, n, max_len)]
        doc["tests"].setdefault(str(test), {
            "model": model, "tp": n, "nodes": 1, "gpu": GPU[gpu], "gpu_memory_utilization": 0.95,
            "max_model_len": max_len, "max_num_seqs": 1024, "vllm": "0.5.4",
            "log": f"{REPO}/blob/{commit}/benchmark.py",
            "note": ("no startup log published: the KV cache is graphsim's budget at --gpu-memory-utilization 0.95; "
                     "the model's config is the catalog's base model of the same geometry (config.json of the "
                     "Instruct release: same layers, heads, vocabulary and rope)"),
        })
        run = {
            "id": f"lam-{'mis' if model.startswith('Mistral') else 'mix'}{n}-l{max_len // 1000}k-n{prompts}",
            "test": test,
            "measured": {k: res[k] for k in SUMMARY},
            "server_log": {"server": path, "time": res["date"]},
            "bench": {"dataset_name": "sharegpt", "num_prompts": prompts, "random_input_len": None,
                      "random_output_len": None, "request_rate": "inf", "max_concurrency": None, "seed": 0,
                      "model": MODELS[model], "input_lens": ins, "output_lens": outs},
            "source": f"{REPO}/blob/{commit}/{path}",
            "assumed": ["vLLM 0.5.4 (benchmark_v0.md; the file's date precedes 0.6.0)",
                        "benchmark_serving.py's default seed 0 and no --request-rate (benchmark.py passes neither)"],
        }
        if model in LEFT_OUT:
            run["incomplete"] = LEFT_OUT[model]
        doc["runs"].append(run)
    text = json.dumps(doc, indent=1)
    # per-request lengths on one line each: [14, 30, ...]
    text = re.sub(r"\[\n\s+([\d,\s]+?)\n\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()

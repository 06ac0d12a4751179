"""benchmarks/data/extract_gpustack.py: the baseline blocks of a GPUStack performance-lab page become run facts, and the
stored file holds the pages' numbers (spot values copied by hand from the pages)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "benchmarks" / "data"

PAGE = """\
??? info "Baseline serving script"
    ```bash
    vllm serve Qwen/Qwen3-14B
    ```

??? info "Baseline benchmark results"
    ```bash
    # random 4K input
    ============ Serving Benchmark Result ============
    Successful requests:                     500
    Benchmark duration (s):                  227.57
    Total input tokens:                      1997942
    Total generated tokens:                  99803
    Output token throughput (tok/s):         438.56
    ---------------Time to First Token----------------
    Mean TTFT (ms):                          112716.92
    -----Time per Output Token (excl. 1st token)------
    Mean TPOT (ms):                          132.45
    ==================================================

    # ShareGPT batch size 4
    ============ Serving Benchmark Result ============
    Successful requests:                     100
    Mean TTFT (ms):                          123.30
    ==================================================
    ```

??? info "Optimized serving script"
    # random 2K input
    Mean TTFT (ms):                          1.0
"""


def _extractor():
    name = "extract_gpustack"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_baseline_block_parsed_and_the_rest_ignored():
    x = _extractor()
    runs = x.baseline_runs(PAGE.splitlines())
    # Only the random workload of the baseline block: not the ShareGPT run, not the optimized engine's results.
    assert [(label, line) for label, line, _ in runs] == [("4K", 8)]
    res = runs[0][2]
    assert res == {"completed": 500, "duration": 227.57, "total_input_tokens": 1997942, "total_output_tokens": 99803,
                   "output_throughput": 438.56, "mean_ttft_ms": 112716.92, "mean_tpot_ms": 132.45}


def test_stored_facts_match_the_pages():
    doc = json.loads((ROOT / "gpustack_performance_lab.json").read_text(encoding="utf-8"))
    runs = {r["id"]: r for r in doc["runs"]}
    # qwen3-14b/h100.md, "# random 32K input": 100 requests, 3200000 in, 9855 out, mean TTFT 191024.43 ms,
    # mean TPOT 277.44 ms, 25.48 output tok/s
    r = runs["gps-t1-32k"]
    assert (r["bench"]["num_prompts"], r["bench"]["random_input_len"], r["bench"]["random_output_len"]) == (100, 32000, 100)
    m = r["measured"]
    assert (m["total_input_tokens"], m["total_output_tokens"], m["mean_ttft_ms"], m["mean_tpot_ms"],
            m["output_throughput"]) == (3200000, 9855, 191024.43, 277.44, 25.48)
    # deepseek-r1/h200.md, "# random 128 input": 1000 requests, 126882 in, mean TPOT 351.83 ms, on 8 H200 at TP 8
    r = runs["gps-t5-128"]
    assert (r["measured"]["total_input_tokens"], r["measured"]["mean_tpot_ms"]) == (126882, 351.83)
    t = doc["tests"]["5"]
    assert (t["tp"], t["gpu"], t["vllm"], t["max_model_len"]) == (8, "H200 141GB", "0.11.0", 163840)
    assert doc["tests"]["1"]["vllm"] == "0.11.0" and doc["tests"]["1"]["tp"] == 1
    # deepseek-v3.2/h200.md heads its long run "# random 32k input" (lower case) and runs vLLM v0.13.0
    assert runs["gps-t8-32k"]["bench"]["random_input_len"] == 32000 and doc["tests"]["8"]["vllm"] == "0.13.0"
    # qwen3-235b-a22b/h100.md's 128-token run: 984 successful requests of the 1000 sent
    assert runs["gps-t6-128"]["incomplete"].startswith("984 of 1000")
    assert all(r["source"].startswith(f"{x}/blob/{doc['commit']}/") for r in doc["runs"] for x in [doc["source"]])

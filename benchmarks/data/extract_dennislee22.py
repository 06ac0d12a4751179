"""Extract the runs of github.com/dennislee22/vLLM-benchmarking (README.md + log/) into one JSON file of facts.

Usage: python benchmarks/data/extract_dennislee22.py README.md COMMIT > benchmarks/data/dennislee22_vllm_benchmarking.json

Each run: the benchmark command's settings (model, --num-prompts, --random-input-len, --random-output-len;
no --request-rate, so vLLM's default inf: every request sent at t = 0; no --max-concurrency), the printed
"Serving Benchmark Result" block, and the engine log lines printed right after it (APIServer pid: which
server process; timestamp: order; cumulative prefix-cache hit rate). The deployment of each test comes
from its heading and startup log (TESTS below, each value with the log line it was read from).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = "https://github.com/dennislee22/vLLM-benchmarking"

# Per test: what its heading and startup log say. Startup logs (log/*.log) give the vLLM version
# ("vLLM API server version 0.10.1.1"), non-default args (max_model_len, tensor_parallel_size,
# gpu_memory_utilization), "Available KV cache memory", "GPU KV cache size: N tokens" and
# "Chunked prefill is enabled with max_num_batched_tokens=2048"; gpu_p2p False: the same-node TP2 logs say
# "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed" (vLLM then
# all-reduces with NCCL without peer-to-peer). Tests 6-8 have no startup log: their KV memory is the heading's;
# max_model_len 16384, vLLM 0.10.1.1 and no P2P are assumed from the other tests on the same cluster.
#
# The network of the tests across nodes (1 and 9) is not printed (no NCCL_DEBUG=INFO, so no "NET/Socket" /
# "NET/IB" line); it is read from how the pods were made. The README: Cloudera AI (CML) 1.5.x; the Ray worker pods
# are launched with `cml.workers_v1.launch_workers(n, cpu, memory, nvidia_gpu)` (run-vllm.py), which takes no RDMA
# device or secondary network (https://docs.cloudera.com/machine-learning/cloud/distributed-computing/topics/
# ml-workers-api.html); the workers' addresses are pod-network ones (10.254.x.x `kubectl get pods -o wide` in the
# README, 10.42.x.x in test 9's log, RKE2's default cluster CIDR). With no RDMA device in the pod NCCL falls back
# to TCP sockets over the pod's eth0 (NET/Socket). vLLM logs "Custom allreduce is disabled because this process
# group spans across nodes" and Ray's warning that TP "can degrade the performance unless you have fast
# interconnect across nodes, like Infiniband". The line rate is not stated: 10 Gbit/s Ethernet is Cloudera's
# recommended guaranteed bandwidth between the nodes of CDP Private Cloud Data Services (docs.cloudera.com
# cdp-private-cloud-data-services 1.5.1, installation/topics/cdppvc-installation-network-considerations.html), and
# the interface NCCL reads its speed from in a pod is a veth, which Linux reports at 10000 Mb/s
# (drivers/net/veth.c veth_get_link_ksettings). MTU 1500: Ethernet's default (a VXLAN overlay's pod MTU is lower).
TCP_10GBE = {"transport": "tcp", "line_rate_gbit_s": 10, "mtu": 1500,
             "evidence": "inferred, not logged: CML worker pods on the Kubernetes pod network (no RDMA device: "
                         "NCCL NET/Socket); 10 GbE is Cloudera's recommended node-to-node bandwidth"}
TESTS = {
    1: {"model": "Qwen2-7B-Instruct", "tp": 2, "nodes": 2, "gpu": "A100 40GB", "gpu_memory_utilization": 0.5,
        "kv_cache_memory_gib": 11.03, "kv_cache_tokens": 412944, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-7B-2gpuA10040GB-0.5GRAM-diff-nodes.log", "note": "Ray across 2 pods on 2 nodes; "
        "the log name says A100 40GB (and 0.5 x 40 GB less 7.12 GiB weights fits 11.03 GiB of KV cache)",
        "network": TCP_10GBE},
    2: {"model": "Qwen2-7B-Instruct", "tp": 2, "nodes": 1, "gpu": "A100 80GB", "gpu_memory_utilization": 0.25,
        "kv_cache_memory_gib": 12.02, "kv_cache_tokens": 450192, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-7B-2gpuA10080GB-0.25GRAM-same-node.log", "gpu_p2p": False},
    3: {"model": "Qwen2-7B-Instruct", "tp": 2, "nodes": 1, "gpu": "A100 80GB", "gpu_memory_utilization": 0.5,
        "kv_cache_memory_gib": 31.83, "kv_cache_tokens": 1192160, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-7B-2gpuA10080GB-0.5GRAM-same-node.log", "gpu_p2p": False},
    4: {"model": "Qwen2-7B-Instruct", "tp": 1, "nodes": 1, "gpu": "A100 80GB", "gpu_memory_utilization": 0.25,
        "kv_cache_memory_gib": 5.01, "kv_cache_tokens": 93872, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-7B-1gpuA10080GB-0.25GRAM.log"},
    5: {"model": "Qwen2-7B-Instruct", "tp": 1, "nodes": 1, "gpu": "A100 80GB", "gpu_memory_utilization": 0.5,
        "kv_cache_memory_gib": 24.83, "kv_cache_tokens": 464848, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-7B-1gpuA10080GB-0.5GRAM.log"},
    6: {"model": "Qwen2.5-32B", "tp": 2, "nodes": 1, "gpu": "A100 80GB", "kv_cache_memory_gib": 8.22,
        "max_model_len": 16384, "vllm": "0.10.1.1", "log": None, "gpu_p2p": False,
        "assumed": ["max_model_len", "vllm", "gpu_p2p"]},
    7: {"model": "Qwen2.5-32B", "tp": 1, "nodes": 1, "gpu": "A100 80GB", "kv_cache_memory_gib": 9.70,
        "max_model_len": 16384, "vllm": "0.10.1.1", "log": None, "assumed": ["max_model_len", "vllm"]},
    8: {"model": "Qwen2-72B", "tp": 2, "nodes": 1, "gpu": "A100 80GB", "kv_cache_memory_gib": 6.77,
        "max_model_len": 16384, "vllm": "0.10.1.1", "log": None, "gpu_p2p": False,
        "assumed": ["max_model_len", "vllm", "gpu_p2p"]},
    9: {"model": "gpt-oss-120b", "tp": 4, "nodes": 4, "gpu": "A100 80GB", "gpu_memory_utilization": 0.8,
        "kv_cache_memory_gib": 45.32, "kv_cache_tokens": 2640144, "max_model_len": 16384, "vllm": "0.10.1.1",
        "log": "log/vllm-120B-4gpuA10080GB-0.8GRAM-diff-nodes.log",
        "note": "Ray workers at three other IPs (10.42.9.224, 10.42.9.225, 10.42.11.243): taken as 4 pods on different nodes, "
                "as the heading says; attention on the Triton backend (log: 'Using Triton backend on V1 engine')",
        "network": TCP_10GBE},
}

RESULT_KEYS = {
    "Successful requests": "completed", "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens", "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput", "Output token throughput (tok/s)": "output_throughput",
    "Total Token throughput (tok/s)": "total_token_throughput",
    "Mean TTFT (ms)": "mean_ttft_ms", "Median TTFT (ms)": "median_ttft_ms", "P99 TTFT (ms)": "p99_ttft_ms",
    "Mean TPOT (ms)": "mean_tpot_ms", "Median TPOT (ms)": "median_tpot_ms", "P99 TPOT (ms)": "p99_tpot_ms",
    "Mean ITL (ms)": "mean_itl_ms", "Median ITL (ms)": "median_itl_ms", "P99 ITL (ms)": "p99_itl_ms",
}
_TEST = re.compile(r"^#{3,4} .*Test (\d+):")
_ARG = re.compile(r"--(num-prompts|random-input-len|random-output-len|model|request-rate|max-concurrency)[ =]([^\s\\]+)")
_HOST = re.compile(r"--host[ =]([^\s\\]+)")
_LOG = re.compile(r"\(APIServer pid=(\d+)\) INFO (\d\d-\d\d \d\d:\d\d:\d\d).*Prefix cache hit rate: ([\d.]+)%")


def extract(text: str, commit: str) -> dict:
    lines = text.splitlines()
    runs, test, cur = [], None, None
    for no, line in enumerate(lines, 1):
        m = _TEST.match(line)
        if m:
            test = int(m.group(1))
            continue
        if "benchmark_serving.py" in line and test is not None:
            cur = {"test": test, "readme_line": no, "settings": {}, "measured": {}, "server_log": {}}
            runs.append(cur)
        if cur is None:
            continue
        h = _HOST.search(line)
        if h:  # the client's --host: a restarted server can log the same APIServer pid (server() in validate_serving)
            cur["host"] = h.group(1)
        for k, v in _ARG.findall(line):
            cur["settings"][k.replace("-", "_")] = v if k == "model" else float(v) if "rate" in k else int(v)
        if ":" in line and not line.startswith("("):
            key, _, value = line.partition(":")
            if key.strip() in RESULT_KEYS and value.strip():
                v = float(value.split()[0])
                cur["measured"][RESULT_KEYS[key.strip()]] = int(v) if v.is_integer() and "ms" not in key else v
        m = _LOG.search(line)
        if m and "pid" not in cur["server_log"]:
            cur["server_log"] = {"api_server_pid": int(m.group(1)), "time": m.group(2),
                                 "prefix_cache_hit_rate_pct": float(m.group(3))}
    out = []
    for i, r in enumerate(runs, 1):
        s = r["settings"]
        if "random_output_len" not in s:  # the README's command lost its value (one gpt-oss-120b run)
            s["random_output_len"] = None
        if "host" in r:
            r["server_log"]["host"] = r.pop("host")
        run = {"id": f"dl22-t{r['test']}-{i:02d}", **{k: v for k, v in r.items() if k != "settings"},
               "bench": {"dataset_name": "random", "num_prompts": s["num_prompts"], "random_input_len": s["random_input_len"],
                         "random_output_len": s["random_output_len"], "request_rate": s.get("request_rate", "inf"),
                         "max_concurrency": s.get("max_concurrency"), "seed": 0, "model": s["model"]},
               "source": f"{REPO}/blob/{commit}/README.md#L{r['readme_line']}"}
        if r["measured"].get("completed") != s["num_prompts"]:
            run["incomplete"] = (f"{r['measured'].get('completed')} of {s['num_prompts']} requests succeeded; "
                                 "the benchmark counts only the successful ones")
        out.append(run)
    return {
        "source": REPO, "commit": commit,
        "what": "vLLM 0.10.1.1 OpenAI server on A100 GPUs, benchmarked with vLLM's benchmarks/benchmark_serving.py "
                "(--backend vllm --endpoint /v1/completions --dataset-name random); facts copied from the README's "
                "result blocks and the startup logs.",
        "workload_notes": [
            "no --request-rate: vLLM's default inf, every request sent at t = 0; no --max-concurrency",
            "no --seed: vLLM's default 0, so runs on one server send the same prompts (the first n of them; a longer "
            "input length extends them: RandomDataset builds prompt i from offsets[i] + i + arange(input_len)), and the "
            "engine logs a cumulative prefix-cache hit rate of 30-55 %",
            "no --ignore-eos: total generated tokens can be below num_prompts x output len (a request stopped at EOS)",
            "before each run the client sends the first prompt once as a test request (benchmark_serving.py)",
        ],
        "tests": {str(k): v for k, v in TESTS.items()},
        "runs": out,
    }


if __name__ == "__main__":
    text = Path(sys.argv[1]).read_text(encoding="utf-8")
    print(json.dumps(extract(text, sys.argv[2]), indent=1))

"""Time vLLM's own V1 scheduler on this CPU: `Scheduler.schedule()` + `update_from_output()` per decode step.

The source of graphsim's V1 host constants (graphsim/serving/host.py `V1_SCHEDULER_*`). vLLM's scheduler is
Python; it runs without a GPU. Needs vLLM in the interpreter (not a graphsim dependency), e.g. a venv with
`--system-site-packages`, `pip install --no-deps vllm==0.10.1` and the pure-Python packages its import asks for.

    python benchmarks/host_scheduler.py [--batches 1,8,32,128,256] [--steps 200]

Each batch size: B requests of 128 prompt tokens are admitted and prefilled, then `--steps` decode steps are
timed (schedule + a ModelRunnerOutput with one token per request + update_from_output), median per step.
Prints one JSON line per batch and a least-squares line step_us = a + b × B over the batch sizes.
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from unittest import mock


class _NoStructuredOutput:
    """No structured outputs: nothing to advance, no grammar bitmask."""

    def should_advance(self, request) -> bool:
        return False

    def grammar_bitmask(self, *args, **kwargs) -> None:
        return None


def build(max_seqs: int):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    sched = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max(8192, 128 * max_seqs),
                            max_model_len=4096, enable_chunked_prefill=True)
    cache = CacheConfig(block_size=16, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto",
                        enable_prefix_caching=False)
    num_blocks = 4 * max_seqs * (4096 // 16) + 16
    cache.num_gpu_blocks = num_blocks
    vcfg = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig(device="cpu"))
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, use_mla=False)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    registry = mock.MagicMock()
    registry.supports_multimodal_inputs.return_value = False
    structured = _NoStructuredOutput()  # a plain stub: a MagicMock call costs µs per request and would be timed
    return Scheduler(vcfg, kv, structured_output_manager=structured, mm_registry=registry, log_stats=False)


def run(batch: int, steps: int) -> float:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    s = build(max(batch, 1))
    for i in range(batch):
        s.add_request(Request(str(i), list(range(128)), None, None, None,
                              SamplingParams(max_tokens=10 * steps + 100, ignore_eos=True), None, eos_token_id=None))

    def step() -> float:
        t0 = time.perf_counter()
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)},
                                sampled_token_ids=[[7] for _ in ids], spec_token_ids=None, logprobs=None,
                                prompt_logprobs_dict={}, pooler_output=[])
        s.update_from_output(out, mro)
        return (time.perf_counter() - t0) * 1e6

    for _ in range(3):  # prefill and warm-up
        step()
    return statistics.median(step() for _ in range(steps))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32,128,256")
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    import vllm

    xs, ys = [], []
    for b in (int(x) for x in a.batches.split(",")):
        us = run(b, a.steps)
        xs.append(b)
        ys.append(us)
        print(json.dumps({"vllm": vllm.__version__, "batch": b, "median_step_us": round(us, 1)}))
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    print(json.dumps({"fit": "step_us = a + b * batch", "a_us": round(my - slope * mx, 1), "b_us": round(slope, 3),
                      "cpu": platform.processor() or platform.machine(), "python": platform.python_version()}))


if __name__ == "__main__":
    main()

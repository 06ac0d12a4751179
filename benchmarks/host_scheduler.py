"""Time vLLM's own V1 scheduler on this CPU: `Scheduler.schedule()` + `update_from_output()` per decode step.

The source of graphsim's V1 host constants (graphsim/serving/host.py `V1_SCHEDULER_*`). vLLM's scheduler is
Python; it runs without a GPU. Needs vLLM in the interpreter (not a graphsim dependency), e.g. a venv with
`--system-site-packages`, `pip install --no-deps vllm==0.10.1` and the pure-Python packages its import asks for.

    python benchmarks/host_scheduler.py [--batches 1,8,32,128,256] [--steps 200] [--scheduler async|sync]
                                        [--clock cpu|wall]

Each batch size: B requests of 128 prompt tokens are admitted and prefilled, then `--steps` decode steps are
timed (schedule + a ModelRunnerOutput with one token per request + update_from_output), median per step.
Prints one JSON line per batch and a least-squares line step_us = a + b × B over the batch sizes.
Runs on vLLM 0.10.x (`Scheduler`) and 0.19.x (`AsyncScheduler` by default, the scheduler of async scheduling,
or `--scheduler sync`); a venv with `pip install --no-deps vllm==0.19.0` plus the pure-Python packages its import
asks for (cbor2, gguf, pyzmq, msgspec, ...) works with the system's CPU torch and transformers 5. The clock is
the thread's CPU time by default (`--clock wall`: perf_counter, as 0.10.1's figures in host.py were taken).
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import json
import os
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


def _vllm_minor() -> tuple[int, int]:
    import vllm

    major, minor = vllm.__version__.split(".")[:2]
    return int(major), int(minor)


def build(max_seqs: int, async_scheduler: bool):
    """vLLM's V1 scheduler over one full-attention KV group of ample blocks (no prefix caching, no model).

    Version switches: 0.10.x takes `max_model_len` in `SchedulerConfig` and reads nothing else of the model; 0.19
    takes `max_model_len` / `is_encoder_decoder` as init-only fields, reads `is_encoder_decoder`, `max_model_len` and
    `enable_return_routed_experts` from `vllm_config.model_config` (vllm/v1/core/sched/scheduler.py
    `Scheduler.__init__`), takes the `block_size` as an argument, and has `AsyncScheduler`
    (vllm/v1/core/sched/async_scheduler.py, what the engine uses with async scheduling, 0.19's default)."""
    import types

    import torch
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    new = _vllm_minor() >= (0, 14)
    batched = max(8192, 128 * max_seqs)
    if new:
        sched = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=batched, max_model_len=4096,
                                is_encoder_decoder=False, enable_chunked_prefill=True)
    else:
        sched = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=batched, max_model_len=4096,
                                enable_chunked_prefill=True)
    cache = CacheConfig(block_size=16, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto",
                        enable_prefix_caching=False) if not new else \
        CacheConfig(block_size=16, gpu_memory_utilization=0.9, cache_dtype="auto", enable_prefix_caching=False)
    num_blocks = 4 * max_seqs * (4096 // 16) + 16
    cache.num_gpu_blocks = num_blocks
    vcfg = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig(device="cpu"))
    if new:  # what the scheduler reads of the model (no model is loaded)
        object.__setattr__(vcfg, "model_config", types.SimpleNamespace(
            is_encoder_decoder=False, max_model_len=4096, enable_return_routed_experts=False))
    spec = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16) if new else \
        FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, use_mla=False)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    registry = mock.MagicMock()
    registry.supports_multimodal_inputs.return_value = False
    structured = _NoStructuredOutput()  # a plain stub: a MagicMock call costs µs per request and would be timed
    if new:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler

        cls = AsyncScheduler if async_scheduler else Scheduler
        return cls(vcfg, kv, structured_output_manager=structured, block_size=16, mm_registry=registry,
                   log_stats=False)
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler(vcfg, kv, structured_output_manager=structured, mm_registry=registry, log_stats=False)


def run(batch: int, steps: int, async_scheduler: bool = True, clock=time.thread_time) -> float:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    new = _vllm_minor() >= (0, 14)
    s = build(max(batch, 1), async_scheduler)
    for i in range(batch):
        params = SamplingParams(max_tokens=10 * steps + 100, ignore_eos=True)
        if new:  # 0.19: Request(request_id, prompt_token_ids, sampling_params, pooling_params, ...)
            s.add_request(Request(str(i), list(range(128)), params, None))
        else:  # 0.10: Request(request_id, prompt_token_ids, multi_modal_kwargs, hashes, placeholders, params, ...)
            s.add_request(Request(str(i), list(range(128)), None, None, None, params, None, eos_token_id=None))

    def step() -> float:
        t0 = clock()
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        index = {r: k for k, r in enumerate(ids)}
        if new:  # 0.19's ModelRunnerOutput has no spec_token_ids (drafts are the worker's)
            mro = ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=[[7] for _ in ids],
                                    logprobs=None, prompt_logprobs_dict={}, pooler_output=[])
        else:
            mro = ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=[[7] for _ in ids],
                                    spec_token_ids=None, logprobs=None, prompt_logprobs_dict={}, pooler_output=[])
        s.update_from_output(out, mro)
        return (clock() - t0) * 1e6

    for _ in range(3):  # prefill and warm-up
        step()
    return statistics.median(step() for _ in range(steps))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32,128,256")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--scheduler", choices=("async", "sync"), default="async",
                    help="vLLM >= 0.14: AsyncScheduler (async scheduling, the default engine) or Scheduler; "
                         "0.10 has Scheduler only")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: the thread's CPU time (a loaded machine does not inflate it); wall: perf_counter")
    a = ap.parse_args()
    import vllm

    xs, ys = [], []
    for b in (int(x) for x in a.batches.split(",")):
        us = run(b, a.steps, a.scheduler == "async",
                 time.thread_time if a.clock == "cpu" else time.perf_counter)
        xs.append(b)
        ys.append(us)
        print(json.dumps({"vllm": vllm.__version__, "scheduler": a.scheduler if _vllm_minor() >= (0, 14) else "sync",
                          "clock": a.clock, "batch": b, "median_step_us": round(us, 1)}))
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    print(json.dumps({"fit": "step_us = a + b * batch", "a_us": round(my - slope * mx, 1), "b_us": round(slope, 3),
                      "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "load_1min": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

"""Time vLLM's own per-step engine work beyond the scheduler on this CPU: the model runner's persistent-batch update,
its input preparation, and the engine core's output serialisation and send, per decode step, by batch size.

The source of graphsim's v1-async runner/engine per-sequence term (graphsim/serving/host.py
`V1_ASYNC_ENGINE_PER_SEQ_US`). Runs in an interpreter with vLLM (as benchmarks/host_scheduler.py, whose
`build` it reuses: the same scheduler, requests of 128 prompt tokens, one decode token each a step), on vLLM 0.10.x
and 0.19.x, so the two can be compared pairwise on one CPU:

    python benchmarks/host_engine.py [--batches 1,8,32,128,256] [--steps 100]

Each decode step, timed apart with the thread's CPU time (`time.thread_time`), median over `--steps`:

- `sched`: `Scheduler.schedule()` + `update_from_output()` (0.19: `AsyncScheduler`), as host_scheduler.py;
- `update_states`: vLLM's own `GPUModelRunner._update_states(scheduler_output)` (vllm/v1/worker/gpu_model_runner.py)
  run on a real `InputBatch` (vllm/v1/worker/gpu_input_batch.py) on the CPU device; the runner object carries only
  the attributes that method reads (no model, no GPU; `get_pp_group` is a single rank, `_may_reorder_batch` a no-op:
  FlashAttention does not reorder);
- `prepare_inputs` (0.19 only): `GPUModelRunner._prepare_inputs(scheduler_output, num_scheduled_tokens)` over
  `GPUModelRunner.__init__`'s buffers made on the CPU device; the block table's commit (an H2D copy) and the slot
  mapping (a Triton kernel) are device work and left out; its other `copy_to_gpu` calls run as CPU copies here (a
  few bytes a request: an overcount); 0.10.1's takes other arguments and is not timed;
- `bookkeeping` (0.19 only): `GPUModelRunner._bookkeeping_sync` on the async-scheduling path (sampled tokens kept on the
  device, `[-1]` placeholders appended per request) plus the `tolist()` of the [B, 1] sampled ids that
  `AsyncGPUModelRunnerOutput.get_output` does; 0.10.1 has this loop inline in `execute_model` (not callable apart),
  so it has no figure here;
- `output`: the engine core's output thread (vllm/v1/engine/core.py `EngineCoreProc.process_output_sockets`):
  `MsgpackEncoder.encode_into` (vllm/v1/serial_utils.py) of the step's `EngineCoreOutputs` (those `update_from_output`
  returned) and `send_multipart(copy=False)` on a ZMQ PUSH socket over IPC (a drain thread receives them).

Not timed: the CUDA-graph dispatch and the sampler (GPU), `ModelRunnerOutput` construction, the engine core's busy
loop and queues.
Prints one JSON line per batch and a least-squares slope per part over the batch sizes.
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import types
from typing import Any
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_scheduler as hs  # the same scheduler set-up


class _Runner:
    """Stands in for `GPUModelRunner` as the `self` of its methods: only the attributes they read."""


def _runner(batch: int, new: bool) -> Any:
    import numpy as np
    import torch
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    kw = dict(max_num_reqs=batch, max_model_len=4096, max_num_batched_tokens=max(8192, 128 * batch),
              device=torch.device("cpu"), pin_memory=False, vocab_size=151936, block_sizes=[16])
    if new:
        kw["kernel_block_sizes"] = [16]
    r: Any = _Runner()
    r.__dict__.update(
        requests={}, num_prompt_logprobs={}, input_batch=InputBatch(**kw), encoder_cache={}, speculative_config=None,
        use_async_spec_decode=False, use_async_scheduling=True, device=torch.device("cpu"), pin_memory=False,
        is_pooling_model=False, uses_mrope=False, uses_xdrope_dim=0, max_model_len=4096,
        is_multimodal_raw_input_supported=False, model_config=types.SimpleNamespace(is_multimodal_model=False),
        _may_reorder_batch=lambda so: None, _zero_block_ids=lambda ids: None,
        discard_request_mask=types.SimpleNamespace(np=np.zeros(batch, dtype=bool)),
        late_interaction_runner=types.SimpleNamespace(on_requests_finished=lambda ids: None,
                                                      register_request=lambda rid, p: None))
    r._to_list = lambda t: t.tolist()
    r._get_prompt_logprobs_dict = types.MethodType(GPUModelRunner._get_prompt_logprobs_dict, r)
    if new:  # what 0.19's `_prepare_inputs` reads: GPUModelRunner.__init__'s buffers, on the CPU device
        tokens = max(8192, 128 * batch)
        span = max(batch + 1, tokens)

        def buf(*size, dtype, numpy=True):
            return GPUModelRunner._make_buffer(r, *size, dtype=dtype, numpy=numpy)

        r.__dict__.update(
            max_num_tokens=tokens, max_num_reqs=batch, num_spec_tokens=0, enable_prompt_embeds=False,
            lora_config=None, num_accepted_tokens_event=None, valid_sampled_token_count_gpu=None,
            input_ids=buf(tokens, dtype=torch.int32), positions=torch.zeros(tokens, dtype=torch.int64),
            query_start_loc=buf(batch + 1, dtype=torch.int32), seq_lens=torch.zeros(batch, dtype=torch.int32),
            optimistic_seq_lens_cpu=torch.zeros(batch, dtype=torch.int32),
            num_computed_tokens=torch.zeros(batch, dtype=torch.int32),
            prev_num_draft_tokens=buf(batch, dtype=torch.int32), req_indices=buf(tokens, dtype=torch.int64),
            prev_positions=buf(batch, dtype=torch.int64), num_scheduled_tokens=buf(batch, dtype=torch.int32),
            inputs_embeds=buf(tokens, 8, dtype=torch.bfloat16, numpy=False), is_token_ids=buf(tokens, dtype=torch.bool),
            discard_request_mask=buf(batch, dtype=torch.bool), num_decode_draft_tokens=buf(batch, dtype=torch.int32),
            num_accepted_tokens=buf(batch, dtype=torch.int32), arange_np=np.arange(span, dtype=np.int64),
            query_pos=buf(span, dtype=torch.int64), _arange_scratch=np.empty(span, dtype=np.int64))
        for name in ("_get_cumsum_and_arange", "_prepare_input_ids", "_compute_prev_positions"):
            setattr(r, name, types.MethodType(getattr(GPUModelRunner, name), r))
        # device work, not the host's: the slot mapping is a Triton kernel, the block table's commit a H2D copy
        r.input_batch.block_table.compute_slot_mapping = lambda *a, **k: None
        r.input_batch.block_table.commit_block_table = lambda *a, **k: None
    return r


def run(batch: int, steps: int, clock=time.thread_time) -> dict[str, float]:
    import numpy as np
    import torch
    import zmq
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput, SamplerOutput
    from vllm.v1.request import Request
    from vllm.v1.serial_utils import MsgpackEncoder
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    new = hs._vllm_minor() >= (0, 14)
    s = hs.build(max(batch, 1), True)
    for i in range(batch):
        params = SamplingParams(max_tokens=10 * steps + 100, ignore_eos=True)
        if new:
            s.add_request(Request(str(i), list(range(128)), params, None))
        else:
            s.add_request(Request(str(i), list(range(128)), None, None, None, params, None, eos_token_id=None))
    runner = _runner(batch, new)
    ctx = zmq.Context()
    path = os.path.join(tempfile.mkdtemp(), "out.ipc")
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{path}")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{path}")
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if pull.poll(50):
                pull.recv_multipart()

    threading.Thread(target=drain, daemon=True).start()
    encoder = MsgpackEncoder()
    pp = types.SimpleNamespace(is_last_rank=True, is_first_rank=True)
    parts: dict[str, list[float]] = {"sched": [], "update_states": [], "prepare_inputs": [], "bookkeeping": [],
                                     "output": []}

    def step(record: bool) -> None:
        t0 = clock()
        out = s.schedule()
        t1 = clock()
        GPUModelRunner._update_states(runner, out)
        t2 = clock()
        upd = t2 - t1
        n = runner.input_batch.num_reqs
        prep = 0.0
        if new:
            # the per-request token counts in batch order, as execute_model builds them (not timed)
            per_req = np.array([out.num_scheduled_tokens[q] for q in runner.input_batch.req_ids], dtype=np.int32)
            p0 = clock()
            GPUModelRunner._prepare_inputs(runner, out, per_req)
            prep = clock() - p0
            t2 = clock()
            sampled = torch.full((n, 1), 7, dtype=torch.int64)
            GPUModelRunner._bookkeeping_sync(runner, out, SamplerOutput(sampled_token_ids=sampled,
                                                                        logprobs_tensors=None),
                                             None, torch.empty(0), sum(out.num_scheduled_tokens.values()), None)
            sampled.tolist()
        t3 = clock()
        ids = list(out.num_scheduled_tokens)
        index = {q: k for k, q in enumerate(ids)}
        extra = {} if new else {"spec_token_ids": None}
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=[[7] for _ in ids],
                                logprobs=None, prompt_logprobs_dict={}, pooler_output=[], **extra)
        t4 = clock()
        outputs = s.update_from_output(out, mro)
        t5 = clock()
        for eco in outputs.values():
            push.send_multipart(encoder.encode_into(eco, bytearray()), copy=False)
        t6 = clock()
        if record:
            parts["sched"].append((t1 - t0 + t5 - t4) * 1e6)
            parts["update_states"].append(upd * 1e6)
            parts["prepare_inputs"].append(prep * 1e6)
            parts["bookkeeping"].append((t3 - t2) * 1e6)
            parts["output"].append((t6 - t5) * 1e6)

    with mock.patch("vllm.v1.worker.gpu_model_runner.get_pp_group", return_value=pp):
        for _ in range(3):  # prefill and warm-up
            step(False)
        assert runner.input_batch.num_reqs == batch, "the runner's persistent batch lost requests"
        for _ in range(steps):
            step(True)
    stop.set()
    push.close(0)
    return {k: statistics.median(v) for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32,128,256")
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    import vllm

    xs, rows = [], []
    for b in (int(x) for x in a.batches.split(",")):
        row = run(b, a.steps)
        xs.append(b)
        rows.append(row)
        print(json.dumps({"vllm": vllm.__version__, "batch": b, **{k: round(v, 1) for k, v in row.items()}}))
    slopes = {k: round(statistics.linear_regression(xs, [r[k] for r in rows]).slope, 3) for k in rows[0]}
    print(json.dumps({"fit": "per-part slope, us per sequence", **slopes,
                      "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "load_1min": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

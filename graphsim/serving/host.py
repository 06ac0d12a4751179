"""Engine host time: the CPU work of an iteration and of a request's front end, and sampling, per engine family.

An iteration of vLLM is more than its GPU kernels. The engine schedules (`Scheduler.schedule`), prepares the
inputs (positions, slot mappings, block tables), launches the step, samples, copies the sampled tokens back
and updates its requests (`update_from_output`); the front end tokenises prompts and detokenises and streams
outputs. graphsim models it as

    host_us(tokens, seqs) = step_us + per_seq_us × seqs + per_token_us × tokens        (CPU)
    sample_us(rows)       = rows × vocab × SAMPLE_BYTES_PER_LOGIT / HBM bandwidth      (GPU, roofline)
    iteration             = gpu + sample + host          engines that wait for the GPU (V0, V1 sync)
                          = max(gpu + sample, host)      async scheduling: step n+1 is prepared while n runs

and a front end per request before the engine sees it (frontend.py: tokenise, HTTP, input processing), which
the client's TTFT includes and which queues a burst of requests.
Detokenising and streaming are off the ENGINE's critical path in V1 (a separate API-server process,
vllm/v1/engine/output_processor.py) and in V0 ≥ 0.6 (the async output processor, vllm-project/vllm PR 7049), so
no iteration of those engines is charged for them (V0 before 0.6 is: "v0-sync" below); they are the API server's work on its event loop, beside the front end's serial
work (api_server.py: `api_per_chunk_us` per stream chunk, `api_per_output_us` of it per output even when merged), so
they delay what the client sees.

The constants, per family (each names where it comes from; nothing is fitted to a graphsim run or to one real run):

- v0: `step_us` 4000 — the ≈ 4 ms GPU bubble per decode step in the V0 trace of vllm-project/vllm issue 6854
  ("each highlighted redbox is about 4ms of GPU bubble … for baseline, this overhead is incurred on every
  decode"; the issue gives 5–13 ms overall and names neither model nor batch of that trace); `per_seq_us` 5.9 —
  issue 10634 measured a 5–6 ms gap between V0 decodes at batch 256 (Llama 2 7B, ShareGPT):
  (5500 − 4000) / 256 µs per sequence, a two-point estimate across two reports.
- v0-sync (vLLM 0.5.x, before the async output processor of 0.6.0): the engine detokenises, checks stops and
  builds (and from 0.5.4 pickles to the API server) every request's cumulative output after every step, before
  scheduling the next. `step_us` 3,770 — the v0.6.0 blog's profile of v0.5.3 (Llama 3 8B, one H100): 29 % of
  the time "scheduling" (gathering the last step's results, scheduling, preparing inputs) at 13 ms a token under
  light load; `per_seq_us` 118.9 — MEASURED on vLLM's V0 code (benchmarks/host_v0_output.py: scheduler, output
  processing and pickling, model-runner and sampler preparation; the parts beside `V0_SYNC_PER_SEQ_US`), 20× the
  v0 family's 5.9.
- v1, v1-async: `step_us` and `per_seq_us` from `V1_SCHEDULER_*`, vLLM 0.10.1's own `Scheduler.schedule` +
  `update_from_output` timed on a CPU (benchmarks/host_scheduler.py; the numbers and the CPU beside
  `V1_SCHEDULER_*` below; v1-async: `V1_ASYNC_SCHEDULER_*`, vLLM 0.19.0's `AsyncScheduler`, ≈ 1.4× 0.10.1's
  Python on the same CPU), plus `V1_RUNNER_STEP_US`, the
  model runner's per-step input preparation: vllm-project/vllm PR 17866 reports "around ~10 % improvement for
  TPOT" of Llama 3.2 1B (2.73 ms mean TPOT without it) from a fast path for repeated decodes' `_prepare_inputs`
  — 10 % of 2.73 ms, 273 µs, taken as what that preparation
  costs per step; and `V1_ENGINE_PER_SEQ_US` 60 per sequence beyond the scheduler, FITTED with the PCIe share on
  two tests of the validation set (benchmarks/fit_engine_links.py; held-out result and corroborating public
  figures beside the constant below). v1-async replaces it with `V1_ASYNC_ENGINE_PER_SEQ_US` 4.16, vLLM 0.19.0's
  runner (state update, input preparation, bookkeeping) and engine-core output work per sequence timed on CPU
  (benchmarks/host_engine.py), as the fitted 60 would cap one 0.19 engine below its measured peak.
- `per_token_us` 0 in every family: no published per-token figure for input preparation (vectorised numpy
  in V1); prefill steps are long enough that it would not matter at this scale.
- the front end (frontend.py: a FIFO queue before the engine, one server per replica, beside the API server's
  streaming loop: api_server.py says why), vLLM 0.10.1's in every family, with its tokenising term scaled from
  vLLM 0.19.0 on (`frontend_for`: vLLM's own API server timed per request on 0.10.1 and 0.19.0 by
  benchmarks/host_frontend.py; per request no different, per prompt token 1.46×):
  `frontend_per_token_us` 2.0 — a fast (Rust) tokenizer called per prompt encodes ≈ 500k tokens/s (1.18 ms for
  679 tokens … 220 ms for 101,615 on one core: github.com/andyluo7/cpu-gpu-codesign-agentic-inference,
  RESULTS_SUMMARY.md "Phase 2.1"); `frontend_us` 12,500 (serial) and `frontend_latency_us` 10,000 (not serial)
  are FITTED (with the API server's streaming in place: api_server.py), on a validation set and never on one run:
  `benchmarks/fit_frontend.py` fits both on the four public single-GPU runs whose GPU work is a small, well-priced
  part of TTFT (one request; bursts whose prompts are all in the prefix cache: vLLM 0.10.1.1, A100, Qwen2-7B) and
  reports the other 97 runs as held out (median |TTFT error| 22.3 % without a front end → 13.6 %; TPOT 9.7 %,
  output throughput 6.8 %). What the 12.5 ms of serial work is, the runs do not say: a fast tokenizer takes ~1 ms
  for such a prompt. The same source's server measured 7 ms of "HTTP overhead" for a single 1k-token request on
  vLLM 0.19: the front end depends on the server's CPU and vLLM version, which the runs do not let graphsim
  separate. vLLM's own server, timed on this project's VM (benchmarks/host_frontend.py), spends ~2.9–3.6 ms a
  request plus ~1–1.6 µs a prompt token of CPU: the fitted 12.5 ms holds the fit server's slower CPU or work a CPU
  timing of one request at a time does not see; the version ratio, not the absolute time, is taken from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphsim.serving.eager import EagerDispatch
    from graphsim.serving.kv_write import KvCacheWrite
    from graphsim.serving.sampler import RandomSampler

# --- sampling (GPU) ---------------------------------------------------------------------------------------------
# Bytes the sampler moves per logit, greedy path of vLLM's V1 Sampler (vllm/v1/sample/sampler.py, 0.10.1):
# logits cast to fp32 (read 2 B, write 4 B) and argmax over them (read 4 B). Random sampling adds the
# temperature divide and the softmax (another 16 B); `vllm bench serve` sends temperature 0 (greedy) by default.
SAMPLE_BYTES_PER_LOGIT = 10

# --- V0 (vllm-project/vllm issues 6854 and 10634; see the module docstring) --------------------------------------
V0_STEP_US = 4000.0
V0_PER_SEQ_US = (5500.0 - 4000.0) / 256
# --- V0 before 0.6.0 (vLLM 0.5.x: output processing synchronous, every step, per sequence) -----------------------
# The release that moved it off the critical path: vLLM 0.6.0 (blog.vllm.ai/2024/09/05/perf-update.html,
# "Asynchronous output processing (PR #7049, #7921, #8050)", against v0.5.3; `use_async_output_proc` is in the
# inspected 0.6.3's ModelConfig). Per step: the same blog's profile of v0.5.3, Llama 3 8B on one H100: "29 % of the
# total execution time is spent on scheduling, including gathering the LLM results from the last step, scheduling
# the requests to run for the next step, and preparing these requests as inputs", 33 % the HTTP API server (in the
# engine's process before 0.5.4; its own from 0.5.4, PR 6883, issue 7653: not an engine step's) and 38 % GPU; and
# "Llama3 8B can generate 1 token every 13 ms under light load": 0.29 × 13 ms = 3,770 µs a step. Light load: the
# GPU's 0.38 × 13 = 4.94 ms is 3 % over Llama 3 8B's weight read on an H100 (16.06 GB / 3.35 TB/s = 4.79 ms), a
# batch of a few sequences, so the per-sequence work is a small part of it (taken as none: a ceiling on the step).
# benchmarks/host_v0_output.py's six timed parts (below) take 0.59–0.89 ms at batch 1 on this project's VM; the rest
# is what it does not run (the sampler's eager kernels and syncs, `_get_logprobs`, the graph launch) or 0.5.3's GIL
# shared with its in-process API server: the blog does not separate them.
V0_SYNC_STEP_US = 3_770.0  # 0.29 × 13,000 (written out: the product in floats is 3,769.9999999999995)
# Per sequence: MEASURED on vLLM's own V0 code (benchmarks/host_v0_output.py: vLLM 0.6.3.post1's synchronous path,
# the one `--disable-async-output-proc` selects, which runs the same steps as 0.5.x's; prompts of 230 tokens,
# 200 decode steps so outputs average ~100 tokens, a local byte-level BPE fast tokenizer of 32k tokens; thread CPU
# time on this project's 2-core AMD EPYC VM at load ~6, 3 rounds over batches 1 / 8 / 32 / 128 / 256, least-squares
# slope per part): `Scheduler.schedule` 20.627 / 20.252 / 19.832, the sampler's output objects 1.651 / 1.593 /
# 1.612, `LLMEngine._process_model_outputs` (append, incremental detokenisation, stop checks, a CUMULATIVE
# `RequestOutput`) 37.451 / 36.511 / 38.074, and the `cloudpickle.dumps` of each `RequestOutput` that 0.5.4's
# RPC server sends (vllm/entrypoints/openai/rpc/server.py `AsyncEngineRPCServer.generate`) 36.137 / 36.829 /
# 37.141 µs; sums 95.866 / 95.185 / 96.659, the median 95.866 µs. Plus the model runner's and the sampler's per-step
# CPU preparation, which every V0 release runs in line (`ModelRunner._prepare_model_input_tensors` with the
# FlashAttention metadata builder, `SamplingMetadata.prepare` + `SamplingTensors.from_sampling_metadata`), timed in a
# second run of the same script with all six parts (load 7.4–8.7, which slowed every part: the four above summed
# 128.431 / 122.298 / 120.722): model input 21.781 / 20.845 / 20.195 and sampling metadata 9.132 / 8.812 / 8.004 µs,
# ratios to the same run's four parts 30.913 / 128.431 = 0.24070, 29.657 / 122.298 = 0.24250, 28.199 / 120.722 =
# 0.23359, median 0.24070, which scales the first run's 95.866: 95.866 × 1.24070 = 118.94 µs. A floor: 0.6.3's
# n == 1 fast path and object caches (PR 7162, 0.6.0) are lighter than 0.5.x's Python.
V0_SYNC_PER_SEQ_US = (20.627 + 1.651 + 37.451 + 36.137) * (1 + (21.781 + 9.132) / (28.114 + 2.285 + 46.675 + 51.357))

# --- V1 (measured / cited; see the module docstring) -------------------------------------------------------------
# vLLM 0.10.1's Scheduler.schedule + update_from_output, decode steps, median of 200 (benchmarks/host_scheduler.py
# --batches 1,8,32,128,256 on this project's 2-core AMD EPYC VM under load ~5): 12.6, 49.6, 179.3, 699.0, 1470.6 µs.
# Per sequence: the slope from batch 1 to 256, (1470.6 − 12.6) / 255 = 5.7 µs; per step: 12.6 − 5.7 = 6.9 µs.
V1_SCHEDULER_STEP_US = 12.6 - 5.7
V1_SCHEDULER_PER_SEQ_US = (1470.6 - 12.6) / 255
# v1-async (vLLM >= 0.14): vLLM 0.19.0's AsyncScheduler (vllm/v1/core/sched/async_scheduler.py, the scheduler of async
# scheduling: output placeholders, and `kv_cache_manager.cache_blocks` per request a step in
# `_update_request_with_output`), the same benchmark (benchmarks/host_scheduler.py, CPU time), run interleaved with
# 0.10.1 on the same VM (7 paired rounds, load 3.3–9.7): 0.19 / 0.10.1 per round, median 1.403 at batch 1 and 1.390
# at batch 256 (0.19 alone: 19.25 / 75.5 / 270.7 / 1177.5 / 2572.1 µs at batch 1 / 8 / 32 / 128 / 256, medians of 8;
# 0.19's plain Scheduler: 1.307 / 1.305). The VM ran slower than when 0.10.1's figures above were taken (0.10.1 now
# 13.7 / 1587.7 µs), so 0.10.1's figures scale by the paired ratios: 12.6 × 1.403 = 17.68 µs at batch 1,
# 1470.6 × 1.390 = 2044.1 at 256; per sequence (2044.1 − 17.68) / 255 = 7.95 µs, per step 17.68 − 7.95 = 9.73 µs.
V1_ASYNC_SCHEDULER_AT_1_US = 12.6 * 1.403
V1_ASYNC_SCHEDULER_PER_SEQ_US = (1470.6 * 1.390 - V1_ASYNC_SCHEDULER_AT_1_US) / 255
V1_ASYNC_SCHEDULER_STEP_US = V1_ASYNC_SCHEDULER_AT_1_US - V1_ASYNC_SCHEDULER_PER_SEQ_US
V1_RUNNER_STEP_US = 2730.0 * 0.10  # PR 17866: ≈ 10 % of a 2.73 ms TPOT removed by the decode fast path
# Per sequence beyond the scheduler (the model runner's per-request input and output bookkeeping, the engine core's
# per-request output): FITTED by benchmarks/fit_engine_links.py together with the PCIe-without-P2P share
# (costing/hardware.py PCIE_SHM_BANDWIDTH_SHARE) on the mean TPOT of the validation set's tests 2 and 4 (vLLM
# 0.10.1.1, A100, Qwen2-7B at TP1 and at TP2 without P2P: 23 runs, 1 to 256 sequences a step); the 51 other runs
# are held out (median |error| TTFT 23.2 → 15.2 %, TPOT 14.4 → 10.1 %, output throughput 9.4 → 6.9 %). Its order
# agrees with public figures of vLLM's V1 host loop: tenstorrent/vllm PR 305 measured 1.15 ms of host time a
# decode step at 32 sequences with a no-op model (≈ 36 µs a sequence), and vllm-project/vllm issue 6801 ~20 ms
# between V0 steps at batch 200 (100 µs a sequence). A fit of a per-sequence term alone, on test 4 alone
# (benchmarks/fit_engine_step.py), made the held-out runs worse: the PCIe share fitted alone had absorbed part of it.
V1_ENGINE_PER_SEQ_US = 60.0
# v1-async (vLLM >= 0.14) per sequence beyond the scheduler: MEASURED on vLLM 0.19.0's own code, not fitted.
# V1_ENGINE_PER_SEQ_US above was fitted on vLLM 0.10.1 runs of a SYNC engine; with it a v1-async engine could not
# exceed 1 / 67.9 µs = 14,728 tokens/s, and vLLM 0.19.0 on one H100 measured a peak of 16,751 output tokens/s
# (benchmarks/data/kvcached_h100_qwen3_0.6b.json `max_output_tokens_per_s`), so it cannot hold for this family.
# benchmarks/host_engine.py times, per decode step (thread CPU time, batches 1 / 8 / 32 / 128 / 256, 60 steps each,
# least-squares slope per part), vLLM 0.19.0's `GPUModelRunner._update_states` on a real CPU `InputBatch`, its
# `_prepare_inputs` (the block table's H2D commit and the slot-mapping Triton kernel, device work, left out; its
# other `copy_to_gpu` calls run here as CPU copies of a few bytes a request, an overcount), its
# `_bookkeeping_sync` on the async-scheduling path + the sampled ids' `tolist()` (`AsyncGPUModelRunnerOutput`), and
# the engine core's output thread (`MsgpackEncoder.encode_into` of the step's `EngineCoreOutputs` + ZMQ
# `send_multipart`, vllm/v1/engine/core.py `process_output_sockets`), beside the AsyncScheduler in the same run.
# Two runs on this project's 2-core VM (load 2.5 / 2.2): update_states 0.681 / 0.577, prepare_inputs 2.352 / 2.394,
# bookkeeping 1.653 / 1.442, output 0.188 / 0.146 µs a sequence, against the same run's scheduler 9.397 / 8.612:
# ratios 4.874 / 9.397 = 0.5187 and 4.559 / 8.612 = 0.5294, mean 0.5240, which scales the scheduler's own 7.9469 µs
# (above): 7.9469 × 0.5240 = 4.164 µs. (Two earlier runs without `_prepare_inputs`, load 7.4 / 9.2, gave the other
# three parts 0.315 / 0.365 of the scheduler, against 0.328 / 0.334 here.) Paired with vLLM 0.10.1 (same script,
# same VM, interleaved, those earlier runs): `_update_states` + output 1.367 / 1.915 µs a sequence there against
# 0.19's 1.205 / 1.697 (0.88 / 0.89 of 0.10.1's): the version did not make this work heavier. 0.10.1's bookkeeping
# is inline in `execute_model` and its `_prepare_inputs` takes other arguments: not timed there. Not timed at all
# (so a floor): `ModelRunnerOutput` construction, the engine core's queues and busy loop. The parts' per-step
# intercepts (`_prepare_inputs` ~190–320 µs at batch 1, the others ~15 + ~40 + ~15) are of the order of
# `V1_RUNNER_STEP_US` (273, PR 17866), which stays as it is (not re-derived).
V1_ASYNC_ENGINE_PER_SEQ_US = V1_ASYNC_SCHEDULER_PER_SEQ_US * ((0.681 + 2.352 + 1.653 + 0.188) / 9.397
                                                              + (0.577 + 2.394 + 1.442 + 0.146) / 8.612) / 2

# --- the front end (frontend.py; the same in every family) --------------------------------------------------------
# Fitted by benchmarks/fit_frontend.py on the four single-GPU runs that isolate the front end (dl22-t4-36, t5-46:
# one request; t5-48, t5-49: bursts of 20 and 30 prompts all in the prefix cache; vLLM 0.10.1.1, A100) and held
# against the other 70 runs of benchmarks/validate_serving.py (see the module docstring).
FRONTEND_US = 12_500.0  # serial, per request
FRONTEND_PER_TOKEN_US = 1e6 / 500_000  # serial, per prompt token: a fast tokenizer encodes ~500k tokens/s (above)
FRONTEND_LATENCY_US = 10_000.0  # not serial, per request
# Per vLLM version (frontend_for): the terms above are vLLM 0.10.1's (the fit runs' server). vLLM's own API server,
# timed per request by benchmarks/host_frontend.py on this project's 2-core AMD EPYC VM (0.10.1 and 0.19.0 up at once,
# the same prompts, batch by batch in alternation; server CPU time of all threads, completion endpoint), costs
#   0.10.1: 2,857.7 µs + 1.556 µs a prompt token | 0.19.0: 2,776.2 + 2.279   (run 1: 173 / 1,676 tokens)
#   0.10.1: 3,575.5 µs + 0.953 µs a prompt token | 0.19.0: 3,695.3 + 1.394   (run 2: 173 / 861 / 3,393 tokens)
# (least squares over the lengths; a length's paired ratio 1.07 / 1.21 in run 1, 1.00 / 1.18 / 1.28 in run 2, the
# medians of 12 pairs; benchmarks/data/host_frontend_runs.jsonl holds both runs with their commands: run 1 `--tokens
# 128,1024`, run 2 `--tokens 128,512,2048 --endpoints completion`, `--requests 50 --pairs 12`, load 2.8–3.3). Per request 0.19 / 0.10.1 = 0.971 and 1.033: no difference, FRONTEND_US stays. Per prompt
# token 2.279 / 1.556 = 1.4647 and 1.394 / 0.953 = 1.4627, their mean 1.4637 scales FRONTEND_PER_TOKEN_US from the
# first release taken to share 0.19.0's path (FRONTEND_RENDERER_FROM; frontend_for says why). The same tokenizer
# alone (transformers' fast tokenizer, 4.55 / tokenizers 0.21 against 5.24 / 0.23) encodes at the same rate in both
# venvs (~1.2–1.5 µs a token, three runs), so the extra is vLLM's path, not the tokenizer library. With 16 requests in
# flight (runs 3 and 4 of the same file, `--concurrency 16`) the per-token ratio is 0.97 and 1.19 (per request 1.01,
# 1.13): in a burst 1.46 may overstate 0.19's extra; no run found 0.19 more than 3 % cheaper.
FRONTEND_RENDERER_FROM = (0, 19, 0)
FRONTEND_PER_TOKEN_RATIO_V0_19 = (2.279 / 1.556 + 1.394 / 0.953) / 2
# The API server's CPU time per stream chunk (one per request that got tokens in an iteration), on the server's one
# event loop (api_server.py; the front end above runs beside it): MEASURED, not fitted, by
# benchmarks/host_streaming.py running vLLM 0.10.1's own output path on this project's 2-core AMD EPYC VM (CPU
# time, not wall time): `OutputProcessor.process_outputs` (detokenise, collect) + the completion stream chunk built
# and serialised as `completion_stream_generator` does + FastAPI/uvicorn (uvloop, httptools) sending it to a client
# over TCP. Per chunk at 16 / 64 / 256 concurrent streams (each the median of 3 runs): 37.41 / 32.38 / 36.89 µs
# (process_outputs 4.7 / 4.8 / 7.8, chunk 7.7 / 8.0 / 8.4, HTTP 25.0 / 19.5 / 20.7); the median of the three, 36.89.
API_SERVER_PER_CHUNK_US = 36.89
# Of it, the part paid per request per engine output even when the loop is behind and a request's tokens of several
# iterations leave as one merged chunk: `OutputProcessor.process_outputs` runs on every engine-core output
# (async_llm.py `output_handler`), the chunk is built and sent once per merged delta (`RequestOutputCollector.put`
# merges what the generator has not taken). 7.8 µs of the 36.89 at 256 streams (above).
API_SERVER_PER_OUTPUT_US = 7.8
# v1-async (vLLM >= 0.14): vLLM 0.19.0's output path, the same benchmark run right after 0.10.1's on the same VM and
# the same FastAPI 0.165 / uvicorn 0.54 / uvloop / httptools (so the HTTP part is not the version's): per chunk at
# 16 / 64 / 256 streams, process_outputs 6.53 / 6.42 / 7.01 µs against 0.10.1's 4.70 / 4.64 / 5.32, the completion
# chunk 8.17 / 8.23 / 8.24 against 7.51 / 7.78 / 7.88 (load 4.6–7.2). 0.10.1's parts above scale by those ratios; at
# 256 streams 36.89 + 7.8 × (7.01 / 5.32 − 1) + 8.4 × (8.24 / 7.88 − 1) = 39.75 µs, the median of the three
# (39.92 / 34.68 / 39.75), as 0.10.1's was.
API_SERVER_PER_CHUNK_US_V1_ASYNC = 36.89 + 7.8 * (7.01 / 5.32 - 1) + 8.4 * (8.24 / 7.88 - 1)
API_SERVER_PER_OUTPUT_US_V1_ASYNC = 7.8 * 7.01 / 5.32  # process_outputs at 256 streams, scaled as above


@dataclass(frozen=True)
class HostModel:
    """Host (CPU) time of an engine's iterations and requests, and whether it overlaps the GPU step."""

    family: str
    step_us: float  # per iteration
    per_seq_us: float  # per scheduled sequence (scheduling, input prep, output update)
    per_token_us: float  # per scheduled token
    frontend_us: float  # per request, before the engine sees it
    overlap: bool  # async scheduling: max(gpu, host) instead of gpu + host
    sample_bytes_per_logit: int = SAMPLE_BYTES_PER_LOGIT
    frontend_per_token_us: float = 0.0  # per prompt token, serial with frontend_us (tokenising; frontend.py)
    frontend_latency_us: float = 0.0  # per request, not serial (HTTP, input processing, the hop to the engine)
    api_per_chunk_us: float = 0.0  # per stream chunk on the API server's loop (api_server.py)
    api_per_output_us: float = 0.0  # of it, paid per engine output even when outputs merge into one chunk
    frontend_basis: str = ""  # where the serial front-end terms come from (frontend_for; `--frontend-us`)

    def host_us(self, tokens, seqs):
        """CPU time of an iteration of `tokens` tokens over `seqs` sequences (scalars or numpy arrays)."""
        return self.step_us + self.per_seq_us * seqs + self.per_token_us * tokens

    def sample_us(self, rows, vocab: int, bandwidth_bytes_per_s: float):
        """GPU time to sample `rows` rows over `vocab` logits (roofline on the memory bandwidth)."""
        if bandwidth_bytes_per_s <= 0:
            return 0.0 * rows
        return rows * vocab * self.sample_bytes_per_logit / bandwidth_bytes_per_s * 1e6

    def iteration_us(self, gpu_us, host_us):
        """An iteration's wall time from its GPU time (sampling included) and its host time."""
        if self.overlap:
            import numpy as np

            return np.maximum(gpu_us, host_us) if hasattr(gpu_us, "__len__") else max(gpu_us, host_us)
        return gpu_us + host_us

    def with_overlap(self, overlap: bool) -> HostModel:
        return replace(self, overlap=overlap)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "step_us": self.step_us, "per_seq_us": self.per_seq_us,
                "per_token_us": self.per_token_us, "frontend_us": self.frontend_us,
                "frontend_per_token_us": self.frontend_per_token_us, "frontend_latency_us": self.frontend_latency_us,
                "api_per_chunk_us": self.api_per_chunk_us, "api_per_output_us": self.api_per_output_us,
                **({"frontend_basis": self.frontend_basis} if self.frontend_basis else {}),
                "overlap": self.overlap,
                "sample_bytes_per_logit": self.sample_bytes_per_logit, "source": "derived"}


NO_HOST = HostModel("none", 0.0, 0.0, 0.0, 0.0, True, 0)  # GPU kernels only (the pre-host-model behaviour)


def host_model(family: str) -> HostModel:
    if family in ("v0", "v0-sync"):
        step, per_seq, overlap = (V0_STEP_US, V0_PER_SEQ_US, False) if family == "v0" else \
            (V0_SYNC_STEP_US, V0_SYNC_PER_SEQ_US, False)
        chunk, output = API_SERVER_PER_CHUNK_US, API_SERVER_PER_OUTPUT_US
    else:
        overlap = family == "v1-async"
        chunk, output = API_SERVER_PER_CHUNK_US, API_SERVER_PER_OUTPUT_US
        sched_step, sched_seq = V1_SCHEDULER_STEP_US, V1_SCHEDULER_PER_SEQ_US
        engine_seq = V1_ENGINE_PER_SEQ_US
        if overlap:  # vLLM 0.19's scheduler, runner/engine per sequence and output path (above); runner step as v1's
            sched_step, sched_seq = V1_ASYNC_SCHEDULER_STEP_US, V1_ASYNC_SCHEDULER_PER_SEQ_US
            engine_seq = V1_ASYNC_ENGINE_PER_SEQ_US
            chunk, output = API_SERVER_PER_CHUNK_US_V1_ASYNC, API_SERVER_PER_OUTPUT_US_V1_ASYNC
        step, per_seq = sched_step + V1_RUNNER_STEP_US, sched_seq + engine_seq
    return HostModel(family, step, per_seq, 0.0, FRONTEND_US, overlap, frontend_per_token_us=FRONTEND_PER_TOKEN_US,
                     frontend_latency_us=FRONTEND_LATENCY_US, api_per_chunk_us=chunk, api_per_output_us=output)


def frontend_for(model: HostModel, version: tuple[int, int, int]) -> HostModel:
    """`model` with the API server's serial front end of vLLM `version` (`frontend_us`, `frontend_per_token_us`; the
    non-serial latency stays), and where it comes from (`frontend_basis`).

    - from `FRONTEND_RENDERER_FROM` (0.19.0) on: FRONTEND_US (per request: measured no different) and
      FRONTEND_PER_TOKEN_US × FRONTEND_PER_TOKEN_RATIO_V0_19 (measured, above). 0.19.0's AsyncLLM builds a renderer
      (vllm/v1/engine/async_llm.py `renderer_from_config`) that tokenises completions and renders chats
      (vllm/renderers; vLLM PRs 30200 and 32863) for `InputProcessor.process_inputs`; the inspected 0.14.0 has no
      renderer (its AsyncLLM takes `cached_tokenizer_from_config` and `OpenAIServing` tokenises) and 0.15–0.18 were
      not inspected, so 0.19.0 is the first release taken to share the measured path; newer ones (to 0.33) take
      0.19.0's, the nearer measured one;
    - 0.10.1 up to 0.19: 0.10.1's (0.12.0 renamed `Processor` to `InputProcessor` and moved the tokenizers to
      vllm/tokenizers; a version between the measured two takes the nearer measured older one);
    - before 0.10.1 (V1 0.8–0.10.0, V0): 0.10.1's as well, not measured (V0 ran its API server and engine in one
      process before 0.6's frontend multiprocessing; benchmarks/host_frontend.py times V1's AsyncLLM only)."""
    fitted = "vLLM 0.10.1's, fitted (fit_frontend.py)"
    if version >= FRONTEND_RENDERER_FROM:
        return replace(model, frontend_per_token_us=model.frontend_per_token_us * FRONTEND_PER_TOKEN_RATIO_V0_19,
                       frontend_basis=f"{fitted}; per prompt token x {FRONTEND_PER_TOKEN_RATIO_V0_19:.4f}, vLLM "
                                      "0.19.0's API server over 0.10.1's (measured, host_frontend.py)")
    if version >= (0, 10, 1):
        return replace(model, frontend_basis=fitted)
    return replace(model, frontend_basis=f"{fitted}; not measured for this version")


@dataclass(frozen=True)
class EngineHost:
    """A `HostModel` bound to one deployment: the model's vocabulary and the GPU's memory bandwidth (sampling)."""

    model: HostModel
    vocab: int
    bandwidth_bytes_per_s: float
    eager: EagerDispatch | None = None  # steps above the CUDA-graph capture bound (eager.py); None: not modelled
    kv_write: KvCacheWrite | None = None  # FlashAttention's KV-cache writes, GPU (kv_write.py); None: not modelled
    sampler: RandomSampler | None = None  # random sampling's kernels (sampler.py); None: greedy, the roofline above
    # API server processes per engine (`--api-server-count` / data-parallel engines): each engine's stream is served
    # at this many loops' speed and requests are taken in by this many front ends (api_server.py)
    api_servers_per_engine: float = 1.0

    def iteration_us(self, gpu_us, tokens, seqs):
        """Wall time of iterations whose kernels take `gpu_us` (scalar or array): every scheduled sequence gets a
        sampled row (vLLM V1 samples every request of the batch and discards partial prefills' tokens,
        gpu_model_runner.py `discard_sampled_tokens_req_indices`). A step vLLM runs without a CUDA graph also
        dispatches its kernels from the host (eager.py): host work of the step when it overlaps the GPU, else a
        floor under the GPU time. vLLM's FlashAttention KV-cache writes, which no profile row holds, add GPU time
        (kv_write.py). Requests that sample at random pay vLLM's random-sampling kernels instead of the greedy
        roofline (sampler.py)."""
        m = self.model
        if self.sampler is not None:
            gpu = gpu_us + self.sampler.us(seqs)
        else:
            gpu = gpu_us + m.sample_us(seqs, self.vocab, self.bandwidth_bytes_per_s)
        if self.kv_write is not None:
            gpu = gpu + self.kv_write.us(tokens)
        host = m.host_us(tokens, seqs)
        if self.eager is not None:
            dispatch = self.eager.cpu_us(tokens)
            if m.overlap:
                host = host + dispatch
            else:
                import numpy as np

                gpu = np.maximum(gpu, dispatch) if hasattr(gpu, "__len__") or hasattr(dispatch, "__len__") \
                    else max(gpu, dispatch)
        return m.iteration_us(gpu, host)

"""Time vLLM V0's synchronous per-step engine work on this CPU, per decode step, by batch size: the source of
graphsim's pre-0.6 per-sequence host term (graphsim/serving/host.py `V0_SYNC_PER_SEQ_US`).

Before vLLM 0.6.0 the V0 engine ran, after every step and before scheduling the next, on its one thread:
the scheduler, the sampler's pythonisation of the sampled ids, `LLMEngine._process_model_outputs` (append the token,
incremental detokenisation, stop checks, a `RequestOutput` per request) and, from 0.5.4 on (the OpenAI server's
engine in its own process, vllm/entrypoints/openai/rpc/server.py `AsyncEngineRPCServer.generate`), a
`cloudpickle.dumps` of every request's `RequestOutput` sent over ZMQ. vLLM 0.6.0 moved the output processing off
the critical path (async output processor, vllm-project/vllm PR 7049). The model runner's input preparation and
the sampler's CPU-side preparation run every step in every V0 release and are timed too.

No vLLM 0.5.x wheel can be installed here, so this runs vLLM 0.6.3.post1's own V0 code (the source tree in
`--src`, imported without its package `__init__` and without compiled ops) with its synchronous path, which is what
`--disable-async-output-proc` selects: `_process_model_outputs(ctx)` called with `is_async=False`, so
`SingleStepOutputProcessor._process_sequence_group_outputs` appends the token itself (vllm/engine/
output_processor/single_step.py), then `Detokenizer.decode_sequence_inplace` → `detokenize_incrementally`
(vllm/transformers_utils/detokenizer.py) and `StopChecker.maybe_stop_sequence`; `RequestOutput.from_seq_group`
builds CUMULATIVE outputs (the whole text and token ids so far, as 0.5.x did: `RequestOutputKind` arrived later)
with `use_cache=False` (0.5.x had no output cache: PR 7162 came with 0.6.0). 0.6.3's n == 1 fast path and
its object caches make this a floor for 0.5.x's Python. Parts, thread CPU time (`time.thread_time`), median over
`--steps` decode steps after the prompts:

- `schedule`: `Scheduler.schedule()` (vllm/core/scheduler.py, block manager "selfattn" v2, fcfs, no chunking);
- `pythonize`: the sampler's per-sequence output objects (`SequenceOutput`, `Logprob`,
  `CompletionSequenceGroupOutput`, a `SamplerOutput`) as vllm/model_executor/layers/sampler.py
  `_build_sampler_output` makes them from the sampled ids' list;
- `process`: `LLMEngine._process_model_outputs` (vllm/engine/llm_engine.py) on a `SchedulerContext` whose
  output queue holds that step's output, run as an unbound method over an object that carries only the attributes
  it reads;
- `pickle`: `cloudpickle.dumps` of each `RequestOutput` (0.5.4's RPC server, one message per request per step);
- `model_input`: `ModelRunner._prepare_model_input_tensors` (vllm/worker/model_runner.py: `ModelInputForGPUBuilder`
  and the FlashAttention backend's metadata builder, vllm/attention/backends/flash_attn.py), run over an object that
  carries only the runner attributes they read, on the CPU device (its "H2D" copies are CPU copies here), with
  CUDA graphs captured up to batch 256 as vLLM does (decode batches padded, the cached numpy block table);
- `sampling_metadata`: `SamplingMetadata.prepare` (without 0.6's `SamplingMetadataCache`) and
  `SamplingTensors.from_sampling_metadata`, the sampler's per-step CPU preparation
  (vllm/model_executor/sampling_metadata.py; pinned memory off, none without a GPU).

Not timed: the sampler's GPU work and its GPU→CPU copy, `_get_logprobs`' per-sequence loop, `do_log_stats`, the
AsyncLLMEngine's per-request `AsyncStream` queues and the ZMQ send itself. The compiled FlashAttention ops are
stood in for by name only (the metadata builder never calls them).

Needs an interpreter with torch, transformers, tokenizers, msgspec and cloudpickle (e.g. the venv of
benchmarks/host_scheduler.py). The tokenizer is a local byte-level BPE fast tokenizer (32k vocabulary, trained on
synthetic words by benchmarks/host_streaming.py `_tokenizer_dir`, reused if present); prompts and outputs are its
token ids drawn at random, so detokenisation sees ordinary multi-byte merges, no special tokens.

    python benchmarks/host_v0_output.py --src /path/to/vllm-0.6.3.post1-source [--batches 1,8,32,128,256]
        [--steps 60] [--prompt 230] [--rounds 1]

Prints one JSON line per batch (µs per step for each part) and a least-squares slope per part (µs per sequence).
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import statistics
import sys
import time
import types
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def import_vllm(src: str) -> dict[str, Any]:
    """vLLM's V0 modules from a source tree, without running its package `__init__` (which imports the compiled ops
    and every engine): two modules that only name types are stood in for (`SpecDecodeWorkerMetrics` and the
    Mistral tokenizer, which needs `mistral_common`)."""
    pkg = types.ModuleType("vllm")
    pkg.__path__ = [os.path.join(src, "vllm")]
    sys.modules["vllm"] = pkg
    metrics = types.ModuleType("vllm.spec_decode.metrics")
    metrics.SpecDecodeWorkerMetrics = type("SpecDecodeWorkerMetrics", (), {})  # type: ignore[attr-defined]
    sys.modules["vllm.spec_decode.metrics"] = metrics
    mistral = types.ModuleType("vllm.transformers_utils.tokenizers")
    mistral.MistralTokenizer = type("MistralTokenizer", (), {})  # type: ignore[attr-defined]
    sys.modules["vllm.transformers_utils.tokenizers"] = mistral
    fa = types.ModuleType("vllm.vllm_flash_attn")  # the compiled FlashAttention ops; only their names are imported
    fa.flash_attn_varlen_func = fa.flash_attn_with_kvcache = None  # type: ignore[attr-defined]
    sys.modules["vllm.vllm_flash_attn"] = fa
    names = ["vllm.sequence", "vllm.outputs", "vllm.sampling_params", "vllm.config", "vllm.core.scheduler",
             "vllm.transformers_utils.detokenizer", "vllm.engine.output_processor.stop_checker",
             "vllm.engine.output_processor.single_step", "vllm.engine.llm_engine", "vllm.utils",
             "vllm.model_executor.layers.sampler", "vllm.transformers_utils.tokenizer",
             "vllm.model_executor.sampling_metadata", "vllm.worker.model_runner", "vllm.attention.backends.flash_attn"]
    return {n.rsplit(".", 1)[-1]: importlib.import_module(n) for n in names}


class _Engine:
    """Stands in for `LLMEngine` as the `self` of `_process_model_outputs`: only the attributes it reads."""


class _Runner:
    """Stands in for `ModelRunner` as the `self` of `_prepare_model_input_tensors`: only the attributes it and the
    FlashAttention metadata builder read (CPU device, CUDA graphs up to batch 256 as vLLM captures them)."""


def _runner(m: dict[str, Any], sc: Any, max_len: int) -> Any:
    import numpy as np

    mr = m["model_runner"]
    r: Any = _Runner()
    r._model_input_cls = mr.ModelInputForGPUWithSamplingMetadata
    r._builder_cls = mr.ModelInputForGPUBuilder
    r.attn_backend = m["flash_attn"].FlashAttentionBackend
    r.scheduler_config, r.sliding_window, r.block_size = sc, None, 16
    r.lora_config = r.prompt_adapter_config = r.multi_modal_input_mapper = None
    r.inter_data_cache = {}
    r.model_config = types.SimpleNamespace(is_encoder_decoder_model=False, enforce_eager=False)
    r.model_is_mrope = False
    r.max_seq_len_to_capture, r.max_batchsize_to_capture = 8192, 256
    r.device, r.pin_memory = "cpu", False
    r.graph_block_tables = np.zeros((256, 8192 // 16), dtype=np.int32)
    return r


def run(m: dict[str, Any], tokenizer: Any, batch: int, steps: int, prompt_len: int,
        clock=time.thread_time) -> dict[str, float]:
    import cloudpickle
    import torch

    seqm, cfg = m["sequence"], m["config"]
    vocab = tokenizer.vocab_size
    rng = random.Random(batch)
    max_len = prompt_len + steps + 16
    sc = cfg.SchedulerConfig(max_num_batched_tokens=max(2048, max_len) * max(1, batch), max_num_seqs=max(256, batch),
                             max_model_len=max_len)
    cc = cfg.CacheConfig(block_size=16, gpu_memory_utilization=0.9, swap_space=0, cache_dtype="auto")
    cc.num_gpu_blocks = batch * (max_len // 16 + 2) + 64
    cc.num_cpu_blocks = 0
    sched = m["scheduler"].Scheduler(sc, cc, None)

    class _Group:  # the tokenizer group's one method the detokenizer and stop checker call
        def get_lora_tokenizer(self, lora_request=None):
            return tokenizer

    detok = m["detokenizer"].Detokenizer(_Group())
    stop = m["stop_checker"].StopChecker(max_len, lambda seq: tokenizer)
    counter = m["utils"].Counter()
    proc = m["single_step"].SingleStepOutputProcessor(sc, detok, [sched], counter, stop)
    eng: Any = _Engine()
    eng.scheduler_config = sc
    eng.model_config = types.SimpleNamespace(embedding_mode=False)
    eng.output_processor = proc
    eng.use_cached_outputs = False
    eng.scheduler = [sched]
    eng.process_request_outputs_callback = None
    process = m["llm_engine"].LLMEngine._process_model_outputs
    params = m["sampling_params"].SamplingParams(temperature=0.0, max_tokens=steps + 8, ignore_eos=True)
    for i in range(batch):
        ids = [rng.randrange(1, vocab) for _ in range(prompt_len)]
        seq = seqm.Sequence(i, {"prompt_token_ids": ids, "prompt": tokenizer.decode(ids)}, 16,
                            eos_token_id=tokenizer.eos_token_id)
        sched.add_seq_group(seqm.SequenceGroup(str(i), [seq], time.time(), sampling_params=params))

    runner = _runner(m, sc, max_len)
    prepare_inputs = m["model_runner"].ModelRunner._prepare_model_input_tensors
    smeta = m["sampling_metadata"]
    smeta.is_pin_memory_available = lambda: False  # no pinned host memory without a GPU (the copies are CPU here)
    parts: dict[str, list[float]] = {"schedule": [], "pythonize": [], "process": [], "pickle": [],
                                     "model_input": [], "sampling_metadata": []}

    def step(record: bool) -> None:
        t0 = clock()
        metas, outs, _ = sched.schedule()
        t1 = clock()
        model_input = prepare_inputs(runner, metas)
        t1a = clock()
        sm = smeta.SamplingMetadata.prepare(metas, model_input.seq_lens, model_input.query_lens, "cpu", False)
        smeta.SamplingTensors.from_sampling_metadata(sm, vocab, torch.device("cpu"), torch.float16)
        t1b = clock()
        sampled = [rng.randrange(1, vocab) for _ in metas]  # the sampled ids' `tolist()` (GPU → CPU)
        t2 = clock()
        groups = []
        for meta, tok in zip(metas, sampled, strict=True):
            sid = next(iter(meta.seq_data))
            groups.append(seqm.CompletionSequenceGroupOutput(
                [seqm.SequenceOutput(sid, tok, {tok: seqm.Logprob(0.0)})], None))
        output = m["sampler"].SamplerOutput(outputs=groups)
        t3 = clock()
        ctx = m["llm_engine"].SchedulerContext()
        ctx.append_output(outputs=[output], seq_group_metadata_list=metas, scheduler_outputs=outs, is_async=False,
                          is_last_step=True, is_first_step_output=None)
        process(eng, ctx)
        t4 = clock()
        for ro in ctx.request_outputs:
            cloudpickle.dumps(ro)
        t5 = clock()
        if record:
            assert len(ctx.request_outputs) == batch, (len(ctx.request_outputs), batch)
            parts["schedule"].append((t1 - t0) * 1e6)
            parts["pythonize"].append((t3 - t2) * 1e6)
            parts["process"].append((t4 - t3) * 1e6)
            parts["pickle"].append((t5 - t4) * 1e6)
            parts["model_input"].append((t1a - t1) * 1e6)
            parts["sampling_metadata"].append((t1b - t1a) * 1e6)

    step(False)  # the prompts (prefill)
    for _ in range(2):
        step(False)
    for _ in range(steps):
        step(True)
    return {k: statistics.median(v) for k, v in parts.items()}


def slopes(xs: list[int], rows: list[dict[str, float]]) -> dict[str, float]:
    """Least-squares slope of each part over the batch sizes, µs a sequence."""
    return {k: round(statistics.linear_regression(xs, [r[k] for r in rows]).slope, 3) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="a vLLM 0.6.x source tree (the folder holding vllm/)")
    ap.add_argument("--batches", default="1,8,32,128,256")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--prompt", type=int, default=230, help="prompt tokens a request (ShareGPT-like)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the batch sweep, one slope per round")
    a = ap.parse_args()
    from host_streaming import _tokenizer_dir
    from transformers import AutoTokenizer

    m = import_vllm(a.src)
    # as vLLM's get_tokenizer returns it: special tokens and len cached (transformers recomputes them per call)
    tok = m["tokenizer"].get_cached_tokenizer(AutoTokenizer.from_pretrained(_tokenizer_dir()))
    version = m["llm_engine"].__dict__.get("VLLM_VERSION") or "source"
    batches = [int(x) for x in a.batches.split(",")]
    for r in range(a.rounds):
        rows = []
        for b in batches:
            row = run(m, tok, b, a.steps, a.prompt)
            rows.append(row)
            print(json.dumps({"round": r, "batch": b, **{k: round(v, 1) for k, v in row.items()}}), flush=True)
        s = slopes(batches, rows)
        print(json.dumps({"round": r, "fit": "per-part slope, us per sequence", **s,
                          "sum": round(sum(s.values()), 3), "vllm": version, "fast_tokenizer": tok.is_fast,
                          "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                          "load_1min": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()

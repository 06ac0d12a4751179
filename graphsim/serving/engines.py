"""SGLang and TensorRT-LLM: the defaults, KV budget and scheduling facts graphsim models for them.

vLLM's are in engine_versions.py / engine_config.py / memory.py. Each fact below names the file and function it
was read from, in the release whose kernel tables aiconfigurator-core 0.12 ships for H200
(`systems/data/h200_sxm/*/sglang/0.5.14`, `*/trtllm/1.3.0rc20`).

SGLang 0.5.14 (`python/sglang/srt/…` of the `sglang==0.5.14` wheel):

- `server_args.py ServerArgs._handle_gpu_memory_settings`: `chunked_prefill_size` and the decode CUDA-graph
  `max_bs` by GPU memory (MiB, `get_device_memory_capacity`): < 20 Gi → 2048 / 8; < 35 Gi → 2048 / 24 (80 at
  tp ≥ 4); < 60 Gi → 4096 / 32 (160); < 90 Gi and < 160 Gi → 8192 / 256 (512 at tp ≥ 4); else 16384 / 512.
  Then `mem_fraction_static = round((gpu_mem − reserved) / gpu_mem, 3)` with `reserved = 512 +
  max(chunked_prefill_size, 2048) × 1.5 + max_bs × 2 + tp × pp / 8 × 1024` MiB (+ piecewise CUDA-graph
  terms graphsim leaves out), at least 10 GiB on GPUs over 60 GiB.
- `model_executor/model_runner_kv_cache_mixin.py _profile_available_bytes`: the KV pool gets
  `free_after_weights − free_before_weights × (1 − mem_fraction_static)`, i.e. `free_before ×
  mem_fraction_static − weights`; `_resolve_max_num_reqs`: `max_running_requests = min(max(min(tokens /
  context_len × 512, 4096), 2048), tokens // 2)` when not given.
- `server_args.py`: `schedule_policy = "fcfs"`, `page_size` 1 for the default MHA backends (fa3 on Hopper,
  `_get_default_attn_backend`), the radix cache on (`disable_radix_cache = False`, LRU eviction), the overlap
  scheduler on (`disable_overlap_schedule = False`), `enable_mixed_chunk = False` (a prefill batch runs without
  decodes: `managers/scheduler.py get_next_batch_to_run` runs a new prefill batch before the running decodes),
  `max_prefill_tokens = 16384`.
- `managers/schedule_policy.py PrefillAdder.add_one_req`: a waiting request is admitted when
  `extend_input_len + min(max_new_tokens, 4096) + page_size < available + evictable − Σ_running
  min(max_new − output, 4096) × new_token_ratio` (`CLIP_MAX_NEW_TOKENS` 4096); `environ.py`:
  `SGLANG_INIT_NEW_TOKEN_RATIO` 0.7, `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR` 0.14, `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`
  600 (the ratio falls linearly from 0.7 to 0.098 over 600 decode steps).

TensorRT-LLM 1.3 (PyTorch backend; NVIDIA/TensorRT-LLM main at 0004396, the stored snapshot):

- `tensorrt_llm/llmapi/llm_args.py`: `KvCacheConfig.free_gpu_memory_fraction = 0.9`, `tokens_per_block = 32`,
  `enable_block_reuse = True`; `BaseLlmArgs.max_batch_size = 2048`, `max_num_tokens = 8192`,
  `enable_chunked_prefill = False`; `SchedulerConfig.capacity_scheduler_policy = GUARANTEED_NO_EVICT` (a request
  is admitted only when the blocks for its prompt and all its output fit besides what the running requests will
  still need, so nothing is ever evicted).
- `tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator._cal_max_memory`: `available_kv_mem = (total_gpu_memory
  − peak_memory + allocated_bytes) × fraction`, the peak measured over a dummy batch of `max_num_tokens`
  (weights + activations + memory outside torch), i.e. `0.9 × (total − weights − activation peak − overhead)`.
- the overlap scheduler is on (`TorchLlmArgs.disable_overlap_scheduler = False`).
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20

SGLANG_VERSION = (0, 5, 14)
TRTLLM_VERSION = (1, 3, 0)
ENGINES = ("vllm", "sglang", "trtllm")

# --- SGLang 0.5.14 -----------------------------------------------------------------------------------------------
SGLANG_CLIP_MAX_NEW_TOKENS = 4096  # managers/schedule_policy.py CLIP_MAX_NEW_TOKENS
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7  # environ.py SGLANG_INIT_NEW_TOKEN_RATIO
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # environ.py SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS = 600  # environ.py SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
SGLANG_MAX_PREFILL_TOKENS = 16384  # server_args.py ServerArgs.max_prefill_tokens
SGLANG_PAGE_SIZE = 1  # server_args.py: page_size None → 1 for the fa3 / flashinfer MHA backends
SGLANG_RESERVED_MIN_MIB = 10 * 1024  # _handle_gpu_memory_settings: reserved_mem >= 10 GiB when gpu_mem > 60 GiB

# --- TensorRT-LLM 1.3 --------------------------------------------------------------------------------------------
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9  # llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction
TRTLLM_TOKENS_PER_BLOCK = 32  # llmapi/llm_args.py KvCacheConfig.tokens_per_block
TRTLLM_MAX_BATCH_SIZE = 2048  # llmapi/llm_args.py BaseLlmArgs.max_batch_size
TRTLLM_MAX_NUM_TOKENS = 8192  # llmapi/llm_args.py BaseLlmArgs.max_num_tokens


@dataclass(frozen=True)
class SglangMemoryDefaults:
    """What `_handle_gpu_memory_settings` picks for one GPU and parallel size."""

    gpu_mem_mib: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float
    mem_fraction_static: float


def sglang_memory_defaults(memory_bytes: int, tp: int = 1, pp: int = 1,
                           chunked_prefill_size: int | None = None) -> SglangMemoryDefaults:
    """SGLang 0.5.14's `chunked_prefill_size`, decode CUDA-graph `max_bs` and `mem_fraction_static` for a GPU of
    `memory_bytes` (server_args.py `_handle_gpu_memory_settings`, without the DP-attention, speculative and
    piecewise-CUDA-graph terms)."""
    mem = memory_bytes / MiB
    big_tp = tp >= 4
    if mem < 20 * 1024:
        chunk, bs = 2048, 8
    elif mem < 35 * 1024:
        chunk, bs = 2048, (80 if big_tp else 24)
    elif mem < 60 * 1024:
        chunk, bs = 4096, (160 if big_tp else 32)
    elif mem < 160 * 1024:  # H100 / A100 80 GB and H20 / H200 share the tier
        chunk, bs = 8192, (512 if big_tp else 256)
    else:
        chunk, bs = 16384, 512
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk
    reserved = 512 + max(chunk if chunk > 0 else SGLANG_MAX_PREFILL_TOKENS, 2048) * 1.5 + bs * 2 + tp * pp / 8 * 1024
    if mem > 60 * 1024:
        reserved = max(reserved, SGLANG_RESERVED_MIN_MIB)
    return SglangMemoryDefaults(mem, chunk, bs, reserved, round((mem - reserved) / mem, 3))


def sglang_max_running_requests(tokens: int, context_len: int) -> int:
    """`_resolve_max_num_reqs` (model_runner_kv_cache_mixin.py) with no --max-running-requests."""
    estimated = max(min(int(tokens / max(context_len, 1) * 512), 4096), 2048)
    return max(1, min(estimated, tokens // 2))


def sglang_min_new_token_ratio() -> float:
    return SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR


def sglang_new_token_ratio(decode_steps: int) -> float:
    """The admission ratio after `decode_steps` decode iterations without a retraction (scheduler.py: the ratio
    starts at the init value and drops by (init − min) / decay_steps per decode step, down to the min)."""
    lo = sglang_min_new_token_ratio()
    step = (SGLANG_INIT_NEW_TOKEN_RATIO - lo) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
    return max(lo, SGLANG_INIT_NEW_TOKEN_RATIO - step * decode_steps)


def engine_block_size(engine: str) -> int | None:
    """The KV page an engine allocates in (None: vLLM's layout default): SGLang pages of 1 token (its radix
    tree shares prefixes token by token), TensorRT-LLM blocks of 32."""
    return {"sglang": SGLANG_PAGE_SIZE, "trtllm": TRTLLM_TOKENS_PER_BLOCK}.get(engine)


def engine_memory_budget(engine: str, spec, cfg: dict, precision, tp: int, total_bytes: int,
                         max_num_batched_tokens: int, max_num_seqs: int, *, activation_gib: float | None = None,
                         overhead_gib: float | None = None, cudagraph_gib: float | None = None,
                         available_bytes: int | None = None, expert_ranks: int | None = None,
                         fraction: float | None = None):
    """The KV budget per rank of SGLang or TensorRT-LLM, term by term (a `MemoryBudget` whose utilization is the
    engine's fraction and whose terms are scaled as its formula scales them; see the module docstring).

    SGLang: `total × mem_fraction_static − weights − overhead × mem_fraction_static` (the memory in use before the
    weights load, CUDA context and NCCL buffers, is outside the free memory the fraction applies to).
    TensorRT-LLM: `0.9 × (total − weights − activation peak − overhead − CUDA graphs)`. `fraction`: the user's
    mem_fraction_static / free_gpu_memory_fraction instead of the engine's default."""
    from graphsim.serving.memory import BudgetTerm, MemoryBudget, memory_budget

    full = memory_budget(spec, cfg, precision, tp, total_bytes, 1.0, max_num_batched_tokens, max_num_seqs,
                         activation_gib=activation_gib, overhead_gib=overhead_gib, cudagraph_gib=cudagraph_gib,
                         available_bytes=available_bytes, expert_ranks=expert_ranks)
    if engine == "sglang":
        # the fraction SGLang derives for this chunked_prefill_size (the launch line states it explicitly)
        d = sglang_memory_defaults(total_bytes, tp, chunked_prefill_size=max_num_batched_tokens)
        f = fraction if fraction is not None else d.mem_fraction_static
        terms = [t for t in full.terms if t.name in ("weights", "rotary cos/sin cache")]
        over = full.term("runtime overhead (non-torch)")
        terms.append(BudgetTerm(over.name, int(over.bytes * f), over.origin,
                                f"{over.how}, × mem_fraction_static {f} (in use before the free memory SGLang "
                                "takes its fraction of)"))
        return MemoryBudget(total_bytes, f, tuple(terms), available_bytes)
    f = fraction if fraction is not None else TRTLLM_FREE_GPU_MEMORY_FRACTION
    terms = [BudgetTerm(t.name, int(t.bytes * f), t.origin, f"{t.how}, × free_gpu_memory_fraction {f}")
             for t in full.terms]
    return MemoryBudget(total_bytes, f, tuple(terms), available_bytes)


def engine_profile(hardware_id: str, engine: str) -> str | None:
    """The default profile.db of SGLang / TensorRT-LLM on `hardware_id`: `$GRAPHSIM_HOME/profiles/<id>_<engine>.db`,
    built once from aiconfigurator-core's `<engine>` tables when missing (costing/auto_profile.py); None when there
    is none (the caller then prices on the roofline, never from another engine's tables)."""
    from graphsim.costing.auto_profile import auto_build
    from graphsim.costing.predict import default_profile_path

    path = default_profile_path(hardware_id, engine)
    if not path.exists():
        auto_build(hardware_id, path, backend=engine)
    return str(path) if path.is_file() else None

"""vLLM engine versions: the behaviour and defaults `--engine vllm==X.Y` selects.

Three families, read from vLLM's released wheels (each fact names the file and the versions it was checked in;
"first seen" is the first of the inspected releases 0.6.3, 0.7.3, 0.8.0, 0.10.1, 0.11.0, 0.12.0, 0.13.0,
0.14.0, 0.20.0, 0.25.0, 0.30.0, 0.33.0 that has it, so a change may have landed a little earlier):

- **v0** (≤ 0.7; vllm/envs.py `VLLM_USE_V1` defaults to "0" in 0.7.3, "1" in 0.8.0): the V0 engine.
  `Scheduler._schedule_default` (vllm/core/scheduler.py, 0.6.3) schedules waiting prompts first, whole, and a
  step with prompts runs no decodes; chunked prefill is off unless `max_model_len > 32768` (and no sliding
  window), then `max_num_batched_tokens = 512`, else `max(max_model_len, 2048)`; `max_num_seqs = 256`;
  prefix caching off; admission keeps 1 % of the blocks free (`watermark = 0.01`, EngineArgs). Start-up log
  (vllm/executor/gpu_executor.py `initialize_cache`): `# GPU blocks: N, # CPU blocks: M` and
  `Maximum concurrency for L tokens per request: N × block_size / L`; every layer is paged at full length
  (no hybrid KV manager) and the CPU swap space is `swap_space = 4` GiB. Before 0.6.0 (0.5.x) the engine
  processed every step's outputs synchronously (detokenise, stop checks, a cumulative `RequestOutput` per
  request, pickled to the API server from 0.5.4): the async output processor (PR 7049) came with 0.6.0
  (blog.vllm.ai/2024/09/05/perf-update.html), so 0.5.x takes host.py's "v0-sync" host time (`V0_ASYNC_OUTPUT`);
  the scheduling and defaults above are taken to be 0.5.x's too (0.5.x wheels not inspected).
- **v1** (0.8 – 0.13): the V1 engine, chunked prefill and prefix caching on, synchronous scheduling
  (`SchedulerConfig.async_scheduling = False` through 0.13.0). `EngineArgs._set_default_args_v1`
  (vllm/engine/arg_utils.py): 0.8.0 picks `max_num_batched_tokens` 8192 on a GPU named H100/H200, else 2048,
  `max_num_seqs` 1024; 0.10.1 picks 8192 / 1024 on ≥ 70 GiB GPUs that are not A100s, else 2048 / 256.
  KV log (vllm/v1/core/kv_cache_utils.py 0.10.1): `GPU KV cache size: num_blocks // groups × block_size`
  tokens and `Maximum concurrency: num_blocks / Σ_groups blocks(max_model_len)`, a sliding group reserving
  `cdiv(min(W − 1 + max_num_batched_tokens, L), block) + 1` blocks (`SlidingWindowSpec.max_memory_usage_bytes`).
- **v1-async** (≥ 0.14; `async_scheduling: bool | None = None`, resolved to True by `VllmConfig` unless
  incompatible, first seen 0.14.0): host work overlaps the GPU step. Within the family:
  `scheduler_reserve_full_isl` (admission needs the whole prompt's blocks) first seen 0.20.0 (absent in
  0.14.0); `GPU KV cache size = int(max_concurrency × max_model_len)` (`get_kv_cache_capacity`) first seen
  0.25.0 in the wheels and in a 0.24.0 log (club-3090 issue 612), so taken from 0.24.0; a hybrid model's state
  groups in mamba_cache_mode "align" with prefix caching (two pages a request) from 0.24.0, the same log;
  sliding reservations over `max_concurrent_batches × max_num_batched_tokens` in-flight tokens
  (`VllmConfig.max_in_flight_tokens`), the ≥ 160 GiB default tier 16384 / 1024, and the one-line KV log first
  seen 0.30.0.

Versions newer than `NEWEST` take its profile (recorded in the JSON as `assumed_like`).

`--engine sglang` / `--engine trtllm` (optionally `==X.Y`) select the other two engine families, whose facts live
in `graphsim.serving.engines` (each cited there): their profile has `engine` "sglang" / "trtllm", family of the
same name, and the properties below answer for them too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.engines import (
    SGLANG_VERSION, TRTLLM_MAX_BATCH_SIZE, TRTLLM_MAX_NUM_TOKENS, TRTLLM_VERSION, sglang_memory_defaults,
)
from graphsim.serving.host import HostModel, frontend_for, host_model

GiB = 1 << 30
NEWEST = (0, 33, 0)  # the newest release inspected
OLDEST = (0, 5, 0)  # the oldest V0 release the v0 profile is claimed for (host figures: 0.5.x / 0.6.x traces)
V0_CHUNKED_LONG_CONTEXT = 32768  # EngineArgs.create_engine_config, 0.6.3 / 0.7.3: `use_long_context = L > 32768`
V0_CHUNK_TOKENS = 512  # SchedulerConfig, 0.6.3: max_num_batched_tokens with chunked prefill ("best balance on A100")
V0_WATERMARK = 0.01  # EngineArgs.block_manager watermark, 0.6.3 / 0.7.3 (vllm/engine/arg_utils.py)
V0_SWAP_SPACE_GIB = 4  # EngineArgs.swap_space, 0.6.3 (GiB of CPU blocks per GPU)
V0_ASYNC_OUTPUT = (0, 6, 0)  # async output processing (PR 7049) came with 0.6.0 (blog.vllm.ai 2024/09/05; host.py)
API_SERVER_COUNT_IS_DP = (0, 19, 0)  # --api-server-count defaults to the dp size (PR 32525; first inspected: 0.19.0)


class EngineVersionError(GraphsimError):
    pass


Version = tuple[int, int, int]


@dataclass(frozen=True)
class EngineProfile:
    """What one vLLM version does that graphsim models (see the module docstring for the sources)."""

    version: Version
    family: str  # "v0" | "v1" | "v1-async" | "sglang" | "trtllm"
    engine: str = "vllm"  # "vllm" | "sglang" | "trtllm" (graphsim.serving.engines)

    # --- behaviour -------------------------------------------------------------------------------
    @property
    def is_vllm(self) -> bool:
        return self.engine == "vllm"

    @property
    def fuse_target(self) -> str:
        """The fuse target (passes/fuse) whose kernels this engine launches."""
        return self.engine

    @property
    def compiled(self) -> bool:
        """vLLM compiles the model with Inductor by default: V1 (compilation level PIECEWISE unless enforce_eager;
        custom ops then off, vllm/model_executor/custom_op.py CustomOp.default_on, 0.10.1); V0 compiled nothing
        (config/__init__.py VllmConfig.__post_init__: NO_COMPILATION for V0, 0.10.1). Other engines: not asked."""
        return self.is_vllm and self.family != "v0"

    @property
    def combo_kernels(self) -> bool:
        """Inductor's combo kernels, which vLLM turns on from 0.12.0 (config/compilation.py
        CompilationConfig.__post_init__, torch >= 2.9; absent in 0.10.1's and 0.11.0's)."""
        return self.is_vllm and self.version >= (0, 12, 0)

    @property
    def async_scheduling(self) -> bool:
        # SGLang's overlap scheduler (disable_overlap_schedule = False) and TensorRT-LLM's
        # (disable_overlap_scheduler = False) prepare step n+1 while n runs, as vLLM's async scheduling does
        return self.family == "v1-async" or not self.is_vllm

    @property
    def prefill_priority(self) -> bool:
        """SGLang: a step with a prefill batch (chunked) runs no decodes (enable_mixed_chunk = False)."""
        return self.engine == "sglang"

    @property
    def admission(self) -> str:
        """How admission reserves KV: "vllm" (the current sequence), "sglang" (its prompt and clipped output,
        minus the running requests' estimated growth) or "no-evict" (TensorRT-LLM GUARANTEED_NO_EVICT)."""
        return {"sglang": "sglang", "trtllm": "no-evict"}.get(self.engine, "vllm")

    @property
    def prefill_first(self) -> bool:
        """V0's default policy: a step with waiting prompts (whole) runs no decodes."""
        return self.family == "v0"

    @property
    def reserve_full_isl(self) -> bool:
        return self.version >= (0, 20, 0) if self.is_vllm else True

    @property
    def watermark(self) -> float:
        return V0_WATERMARK if self.family == "v0" else 0.0

    def api_server_count(self, data_parallel_size: int) -> int:
        """`vllm serve`'s API server processes when `--api-server-count` is not given: 1 through the inspected 0.10.1
        (vllm/entrypoints/openai/cli_args.py `--api-server-count` default=1); the data-parallel size from vLLM PR
        32525 (merged 2026-01-17; vllm/entrypoints/cli/serve.py `ServeSubcommand.cmd`, "Defaulting api_server_count
        to data_parallel_size"), first seen in the inspected 0.19.0 (taken from 0.19.0). SGLang and TensorRT-LLM:
        one server process."""
        if self.is_vllm and self.version >= API_SERVER_COUNT_IS_DP:
            return max(1, data_parallel_size)
        return 1

    def concurrent_batches(self, async_scheduling: bool | None = None) -> int:
        """Batches whose tokens a sliding-window reservation covers (`VllmConfig.max_concurrent_batches`, 0.30+:
        2 with async scheduling; before 0.30 the reservation covers one `max_num_batched_tokens`)."""
        on = self.async_scheduling if async_scheduling is None else async_scheduling
        return 2 if on and self.is_vllm and self.version >= (0, 30, 0) else 1

    @property
    def subtracts_cudagraph_memory(self) -> bool:
        """The KV budget subtracts the CUDA-graph estimate (gpu_worker.py `cudagraph_memory_estimate`, with
        VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaulting to 1: first seen 0.20.0, absent 0.14.0)."""
        return self.is_vllm and self.version >= (0, 20, 0)

    @property
    def hybrid_kv(self) -> bool:
        """Per-group paging (sliding windows hold the window). V0 pages every layer at full length."""
        return self.family != "v0"

    @property
    def kv_tokens_formula(self) -> str:
        if self.family == "v0" or not self.is_vllm:
            return "blocks"  # num_gpu_blocks × block_size (SGLang's max_total_num_tokens; TRT-LLM's max tokens)
        # int(max_concurrency × max_model_len): first seen in the 0.25.0 wheel; vLLM 0.24.0 logs it too
        # (github.com/noonghunna/club-3090/issues/612: "GPU KV cache size: 567,978 tokens" = int(299 / 69 × 131,072))
        return "concurrency" if self.version >= (0, 24, 0) else "groups"

    @property
    def mamba_align_with_prefix_caching(self) -> bool:
        """With prefix caching on, a hybrid model's state layers run in mamba_cache_mode "align": two state
        pages a request (MambaModelConfig.verify_and_update_config sets "align" for models without
        SupportsMambaPrefixCaching, vllm/model_executor/models/config.py; MambaSpec.max_memory_usage_bytes,
        vllm/v1/kv_cache_interface.py). 0.11.0's MambaModelConfig disabled prefix caching for hybrid models
        instead; the first evidence of "align" is vLLM 0.24.0's log (club-3090 issues 612 / 652: 69 blocks a
        request = 63 full + 3 state groups × 2), the release between them where it began is not pinned."""
        return self.is_vllm and self.version >= (0, 24, 0)

    @property
    def kv_log_one_line(self) -> bool:
        return self.version >= (0, 30, 0) or not self.is_vllm

    @property
    def host(self) -> HostModel:
        if not self.is_vllm:  # no published host figures for SGLang / TRT-LLM: vLLM V1's, overlapped (assumed)
            return replace(host_model("v1-async"), family=self.family)
        if self.family == "v0" and self.version < V0_ASYNC_OUTPUT:  # 0.5.x: outputs processed every step, in line
            return frontend_for(host_model("v0-sync"), self.version)
        return frontend_for(host_model(self.family), self.version)  # the API server's front end of this version

    @property
    def name(self) -> str:
        return f"{self.engine}==" + ".".join(map(str, self.version))

    @property
    def assumed_like(self) -> Version | None:
        newest = {"sglang": SGLANG_VERSION, "trtllm": TRTLLM_VERSION}.get(self.engine, NEWEST)
        return newest if self.version > newest else None

    # --- defaults ----------------------------------------------------------------------------------
    def enable_chunked_prefill(self, max_model_len: int, sliding_window: bool) -> bool:
        if self.engine == "trtllm":
            return False  # llm_args.py BaseLlmArgs.enable_chunked_prefill = False
        if self.family != "v0":
            return True
        return max_model_len > V0_CHUNKED_LONG_CONTEXT and not sliding_window

    def enable_prefix_caching(self) -> bool:
        return self.family != "v0"

    def batch_defaults(self, hardware: HardwareSpec, max_model_len: int, chunked: bool) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks (UsageContext.OPENAI_API_SERVER); SGLang:
        (chunked_prefill_size, the floor of max_running_requests, which plan_deployment raises from the KV tokens);
        TensorRT-LLM: (max_num_tokens, max_batch_size)."""
        if self.engine == "sglang":
            return sglang_memory_defaults(hardware.memory_bytes).chunked_prefill_size, 2048
        if self.engine == "trtllm":
            return TRTLLM_MAX_NUM_TOKENS, TRTLLM_MAX_BATCH_SIZE
        if self.family == "v0":
            return (V0_CHUNK_TOKENS if chunked else max(max_model_len, 2048)), 256
        mem, names = hardware.memory_bytes, (hardware.name + " " + hardware.id).lower()
        if self.version < (0, 10, 0):  # 0.8.0: keyed on the device name; max_num_seqs 1024 everywhere
            return (8192 if "h100" in names or "h200" in names else 2048), 1024
        if self.version >= (0, 30, 0) and mem >= 160 * GiB:
            tokens, seqs = 16384, 1024
        elif mem >= 70 * GiB and "a100" not in names:
            tokens, seqs = 8192, 1024
        else:
            tokens, seqs = 2048, 256
        if not chunked:  # _set_default_args_v1 (0.10.1): without chunked prefill, the whole context
            tokens = max_model_len
        return tokens, min(seqs, tokens)

    def to_json(self) -> dict[str, Any]:
        h = self.host
        policy = {"sglang": "prefill batches first, fcfs, chunked (SGLang)",
                  "trtllm": "in-flight batching, guaranteed no evict (TensorRT-LLM)"}.get(
            self.engine, "prefill-first (V0 default)" if self.prefill_first else "decode-first, chunked (V1)")
        return {"engine": self.name, "family": self.family, "async_scheduling": self.async_scheduling,
                "scheduler_policy": policy, **({} if self.is_vllm else {"admission": self.admission}),
                "reserve_full_isl": self.reserve_full_isl, "watermark": self.watermark,
                "max_concurrent_batches": self.concurrent_batches(), "hybrid_kv": self.hybrid_kv,
                "subtracts_cudagraph_memory": self.subtracts_cudagraph_memory,
                "kv_tokens_formula": self.kv_tokens_formula, "kv_log_one_line": self.kv_log_one_line,
                "assumed_like": ".".join(map(str, self.assumed_like)) if self.assumed_like else None,
                "host": h.to_json()}


def family_of(version: Version) -> str:
    if version < (0, 8, 0):
        return "v0"
    if version < (0, 14, 0):
        return "v1"
    return "v1-async"


_SPEC = re.compile(r"^\s*(?:vllm\s*(?:==\s*)?)?(v?\d+(?:\.\d+){0,2})?(?:\.?post\d+)?\s*$", re.IGNORECASE)


_OTHER = re.compile(r"^\s*(sglang|trtllm|tensorrt[-_]llm)\s*(?:==\s*(v?\d+(?:\.\d+){0,2})(?:\.?(?:post|rc)\d+)?)?\s*$",
                    re.IGNORECASE)
ENGINE_FORMS = "vllm, sglang or trtllm, optionally with ==X.Y (vllm==0.10.1)"


def _other_engine(text: str) -> EngineProfile | None:
    """`sglang`, `sglang==0.5.14`, `trtllm`, `trtllm==1.3.0rc20` (also `tensorrt-llm`) → its profile."""
    m = _OTHER.match(text)
    if not m:
        return None
    engine = "sglang" if m.group(1).lower() == "sglang" else "trtllm"
    newest = SGLANG_VERSION if engine == "sglang" else TRTLLM_VERSION
    if not m.group(2):
        return EngineProfile(newest, engine, engine)
    parts = [int(p) for p in m.group(2).lstrip("vV").split(".")]
    version: Version = (parts[0], parts[1] if len(parts) > 1 else 0, parts[2] if len(parts) > 2 else 0)
    return EngineProfile(version, engine, engine)


def parse_engine(text: str | None) -> EngineProfile:
    """`vllm` (the newest), `vllm==0.10.1`, `vllm==0.6`, `0.10`, `sglang`, `trtllm==1.3` → its profile
    (EngineVersionError otherwise)."""
    if text is None or not str(text).strip() or str(text).strip().lower() == "vllm":
        return EngineProfile(NEWEST, family_of(NEWEST))
    other = _other_engine(str(text))
    if other is not None:
        return other
    m = _SPEC.match(str(text))
    if not m or not m.group(1):
        raise EngineVersionError(f"cannot read engine '{text}'; write {ENGINE_FORMS}")
    parts = [int(p) for p in m.group(1).lstrip("vV").split(".")]
    version: Version = (parts[0], parts[1] if len(parts) > 1 else 0, parts[2] if len(parts) > 2 else 0)
    if version < OLDEST:
        raise EngineVersionError(f"engine vllm=={'.'.join(map(str, version))} is older than graphsim's oldest "
                                 f"profile ({'.'.join(map(str, OLDEST))}); give --engine vllm=={OLDEST[0]}.{OLDEST[1]} or newer")
    return EngineProfile(version, family_of(version))


NEWEST_PROFILE = EngineProfile(NEWEST, family_of(NEWEST))

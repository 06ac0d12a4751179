"""Scheduler and cache settings of one vLLM engine, with the defaults of the selected vLLM version per GPU.

`engine` names the vLLM version (`vllm`, the newest graphsim knows, or `vllm==0.10.1`, …); its family's
defaults and behaviour come from `graphsim.serving.engine_versions` (V0 ≤ 0.7, V1 0.8–0.13, V1 with async
scheduling ≥ 0.14). For the newest (0.33.0), `vllm serve` (UsageContext.OPENAI_API_SERVER) picks
`max_num_batched_tokens` / `max_num_seqs` from the device memory (`EngineArgs.get_batch_defaults`,
vllm/engine/arg_utils.py): ≥ 160 GiB → 16384 / 1024; ≥ 70 GiB and not an A100 → 8192 / 1024; otherwise
2048 / 256. Chunked prefill and prefix caching are on, async scheduling is on (two batches in flight), the
watermark is 0, and admission requires the whole current sequence to fit (`scheduler_reserve_full_isl = True`,
vllm/config/scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.engine_versions import NEWEST_PROFILE, EngineProfile, EngineVersionError, parse_engine
from graphsim.serving.host import HostModel
from graphsim.validation import Strict

GiB = 1 << 30


class EngineConfigError(GraphsimError):
    pass


class EngineArgs(Strict):
    """The engine settings a user gives, under vLLM's names (EngineArgs / SchedulerConfig / CacheConfig).

    None is vLLM's "pick for me": `max_num_batched_tokens` / `max_num_seqs` from the GPU's memory
    (`batch_defaults`), `max_model_len` from the model's config, `block_size` from the KV layout (16; 64 for
    MLA). `kv_cache_memory_bytes` (vLLM's `--kv-cache-memory-bytes`) is the KV memory per rank instead of
    the budget `gpu_memory_utilization` leaves. `resolve` turns the settings into the `EngineConfig` the
    scheduler runs with. Ranges are checked on construction (pydantic), every bad field at once.
    """

    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=1 << 31)
    max_num_seqs: int | None = Field(default=None, ge=1, le=1 << 31)
    max_model_len: int | None = Field(default=None, ge=1, le=1 << 31)
    block_size: int | None = Field(default=None, ge=1, le=1 << 20)
    enable_prefix_caching: bool | None = None  # None: the engine version's default
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None  # None: the engine version's default (on from 0.14)
    max_concurrent_batches: int | None = Field(default=None, ge=1, le=64)  # None: 2 with async scheduling (0.30+)
    # `vllm serve --api-server-count`: API server processes of one deployment (None: the version's default,
    # EngineProfile.api_server_count; api_server.py)
    api_server_count: int | None = Field(default=None, ge=1, le=4096)
    # graphsim's, not vLLM's: the API server's serial front-end time a request (µs), for a server measured
    # (frontend.py); None: the fitted default (host.py FRONTEND_US)
    frontend_us: float | None = Field(default=None, ge=0, le=1e7)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0, le=1 << 50)
    # SGLang's --mem-fraction-static and TensorRT-LLM's kv_cache_config.free_gpu_memory_fraction (None: the engine's
    # default, serving/engines.py); each only with its engine
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    free_gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    engine: str = "vllm"  # vLLM version: vllm (the newest graphsim knows), vllm==0.10.1, vllm==0.6, …

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        try:
            parse_engine(v)
        except EngineVersionError as e:
            raise PydanticCustomError("engine", "{reason}", {"reason": str(e)}) from None
        return v

    @property
    def profile(self) -> EngineProfile:
        return parse_engine(self.engine)

    def resolve(self, hardware: HardwareSpec, cfg: dict) -> EngineConfig:
        """The settings with vLLM serve's defaults for this GPU and model filled in (EngineConfigError when the
        settings contradict each other); a config without a context length takes the engine's fallback, as the
        engine does (`max_model_len_and_source`)."""
        p = self.profile
        for name, engine in (("mem_fraction_static", "sglang"), ("free_gpu_memory_fraction", "trtllm")):
            if getattr(self, name) is not None and p.engine != engine:
                raise EngineConfigError(f"{name} is {engine}'s setting, not {p.name}'s; drop it or give "
                                        f"--engine {engine}")
        mml, mml_source = max_model_len_and_source(self.max_model_len, cfg, p)
        # vLLM's ModelConfig.get_hf_config_sliding_window (0.6.3): none when the config says use_sliding_window: false
        sliding = ((bool(cfg.get("sliding_window")) and cfg.get("use_sliding_window", True) is not False)
                   or "sliding_attention" in (cfg.get("layer_types") or ()))
        chunked = (p.enable_chunked_prefill(mml, sliding) if self.enable_chunked_prefill is None
                   else self.enable_chunked_prefill)
        mnbt, seqs = p.batch_defaults(hardware, mml, chunked)
        caching = p.enable_prefix_caching() if self.enable_prefix_caching is None else self.enable_prefix_caching
        async_ = p.async_scheduling if self.async_scheduling is None else self.async_scheduling
        batches = self.max_concurrent_batches or p.concurrent_batches(async_)
        return EngineConfig(self.max_num_batched_tokens or mnbt, self.max_num_seqs or seqs, mml, self.block_size,
                            caching, chunked, batches, self.gpu_memory_utilization, p, async_,
                            api_server_count=self.api_server_count, frontend_us=self.frontend_us,
                            max_model_len_source=mml_source).check()


@dataclass(frozen=True)
class EngineConfig:
    """An engine's resolved settings (every default filled in): what the scheduler runs with."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    block_size: int | None = None  # None: the layout's default (16; 64 for MLA)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_concurrent_batches: int = 2  # async scheduling: 2 batches in flight (reserve for sliding windows)
    gpu_memory_utilization: float = 0.9
    profile: EngineProfile = NEWEST_PROFILE  # the vLLM version whose behaviour the scheduler follows
    async_scheduling: bool = True
    executor_step_us: float = 0.0  # per step, the executor's own (a Ray compiled graph across nodes: executor.py)
    api_server_count: int | None = None  # `--api-server-count` as given; None: the version's default for the dp size
    frontend_us: float | None = None  # `--frontend-us` as given; None: the host model's fitted front end
    # where max_model_len came from (max_model_len_and_source): given, a config key, or the engine's fallback
    max_model_len_source: str = "given (--max-model-len)"

    @property
    def max_model_len_fallback(self) -> bool:
        """max_model_len is the engine's fallback (the config states no context length, none was given)."""
        return "fallback" in self.max_model_len_source

    def api_servers(self, data_parallel_size: int) -> int:
        """API server processes in front of `data_parallel_size` engines (`vllm serve --api-server-count`)."""
        return self.api_server_count or self.profile.api_server_count(data_parallel_size)

    @property
    def host(self) -> HostModel:
        """The engine's host-time model: its family's constants plus the executor's per-step time, overlapped with
        the GPU under async scheduling; `--frontend-us` replaces the fitted serial front end."""
        host = self.profile.host.with_overlap(self.async_scheduling)
        if self.frontend_us is not None:
            host = replace(host, frontend_us=self.frontend_us, frontend_basis="given (--frontend-us)")
        return replace(host, step_us=host.step_us + self.executor_step_us) if self.executor_step_us else host

    @property
    def prefill_first(self) -> bool:
        """V0's default scheduler (no chunked prefill): a step with prompts to admit runs no decodes."""
        return self.profile.prefill_first and not self.enable_chunked_prefill

    @property
    def watermark(self) -> float:
        return self.profile.watermark

    @property
    def reserve_full_isl(self) -> bool:
        return self.profile.reserve_full_isl

    @property
    def max_in_flight_tokens(self) -> int:
        return self.max_concurrent_batches * self.max_num_batched_tokens

    def check(self) -> EngineConfig:
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "max_concurrent_batches"):
            if getattr(self, name) < 1:
                raise EngineConfigError(f"{name} = {getattr(self, name)}; give --{name.replace('_', '-')} >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise EngineConfigError(f"gpu_memory_utilization = {self.gpu_memory_utilization}; give a value in (0, 1]")
        # TensorRT-LLM starts with max_num_tokens below max_seq_len (chunked prefill off by default) and refuses
        # only the prompts longer than max_num_tokens
        if (not self.enable_chunked_prefill and self.profile.is_vllm
                and self.max_num_batched_tokens < self.max_model_len):
            raise EngineConfigError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_model_len ({self.max_model_len}); raise --max-num-batched-tokens or lower --max-model-len")
        return self

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)


def batch_defaults(hardware: HardwareSpec, profile: EngineProfile = NEWEST_PROFILE) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` of `profile`'s version picks on this GPU (chunked
    prefill on)."""
    return profile.batch_defaults(hardware, 0, True)


def default_max_model_len(cfg: dict) -> int | None:
    """vLLM derives the context length from the config: the smallest of its context keys, and `model_max_length`
    over them when the config states it (vllm 0.33.0 transformers_utils/model_arch_config_convertor.py
    ModelArchConfigConvertorBase.derive_max_model_len_and_key; 0.19.0 the same; 0.10.1's vllm/config/__init__.py
    _get_and_verify_max_len the same keys and rule), read from `hf_text_config` (transformers_utils/config.py
    get_hf_text_config: a multimodal wrapper's `text_config` first, e.g. MiniMax-M3-NVFP4's wrapper states its
    1,048,576 only there; Kimi-Linear states only `model_max_length`)."""
    found = _context_length(cfg)
    return found[0] if found else None


def _context_length(cfg: dict) -> tuple[int, str] | None:
    """(length, the key it came from) by `default_max_model_len`'s rule; None when no context key is stated."""
    inner = cfg.get("text_config")
    for c in ((inner, cfg) if isinstance(inner, dict) else (cfg,)):
        found = {k: c[k] for k in _CONTEXT_KEYS if isinstance(c.get(k), int) and not isinstance(c[k], bool)
                 and c[k] > 0}
        if "model_max_length" in found:
            return found["model_max_length"], "model_max_length"
        if found:
            key = min(found, key=lambda k: (found[k], _CONTEXT_KEYS.index(k)))
            return found[key], key
    return None


# The context length each engine assumes when the config states none of its keys: 2048 in all three.
# vLLM: `_get_and_verify_max_len`, `default_max_len = 2048` with a warning ("Assuming the model's maximum length is
# 2048"), unless --max-model-len is given (0.10.1 vllm/config/__init__.py; 0.19.0 and 0.33.0 vllm/config/model.py).
# SGLang 0.5.14: srt/utils/hf_transformers/common.py `get_context_length` returns 2048, silently.
# TensorRT-LLM (PyTorch backend): tensorrt_llm/_torch/models/modeling_utils.py
# `DecoderModelForCausalLM.infer_max_seq_len`, `inferred_max_seq_len = 2048` without max_position_embeddings.
# vLLM's V0 releases before 0.10 are taken to do the same (not inspected).
FALLBACK_MAX_MODEL_LEN = {"vllm": 2048, "sglang": 2048, "trtllm": 2048}
_FALLBACK_SOURCE = {
    "vllm": "vllm/config _get_and_verify_max_len",
    "sglang": "sglang/srt/utils/hf_transformers/common.py get_context_length",
    "trtllm": "tensorrt_llm/_torch/models/modeling_utils.py infer_max_seq_len",
}


# SGLang 0.5.14 reads the first of its CONTEXT_LENGTH_KEYS the text config states, in this order
# (srt/utils/hf_transformers/common.py; get_context_length(self.hf_text_config), configs/model_config.py)
_SGLANG_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def _is_length(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _engine_context_length(cfg: dict, engine: str) -> tuple[int, str] | None:
    """The config's context length and key as `engine` reads it (rope scaling's factor is applied by none of them
    here: graphsim does not model it). vLLM: `_context_length`. SGLang: the first of `_SGLANG_KEYS` in the text
    config. TensorRT-LLM: `max_position_embeddings` only, the config's, else its `text_config`'s
    (DecoderModelForCausalLM.infer_max_seq_len, _torch/models/modeling_utils.py)."""
    inner = cfg.get("text_config")
    inner = inner if isinstance(inner, dict) else None
    if engine == "sglang":
        text = inner if inner is not None else cfg
        return next(((text[k], k) for k in _SGLANG_KEYS if _is_length(text.get(k))), None)
    if engine == "trtllm":
        return next(((c["max_position_embeddings"], "max_position_embeddings") for c in (cfg, inner or {})
                     if _is_length(c.get("max_position_embeddings"))), None)
    return _context_length(cfg)


def max_model_len_and_source(given: int | None, cfg: dict, profile: EngineProfile = NEWEST_PROFILE
                             ) -> tuple[int, str]:
    """The context length the engine runs with and where it comes from: `--max-model-len` as given, else the
    config's as the engine reads it (vLLM: `default_max_model_len`; SGLang / TensorRT-LLM: their own keys,
    `_engine_context_length`), else the engine's fallback when the config states none of them (the real
    Falcon-Mamba-7B and Mamba-Codestral-7B configs: vLLM serves them at 2048 tokens, `FALLBACK_MAX_MODEL_LEN`)."""
    if given is not None:
        return given, "given (--max-model-len)"
    found = _engine_context_length(cfg, profile.engine)
    if found is not None:
        return found[0], f"the config's {found[1]}"
    n = FALLBACK_MAX_MODEL_LEN[profile.engine]
    return n, (f"{profile.name}'s fallback: the config states no context length, so the engine assumes {n:,} "
               f"({_FALLBACK_SOURCE[profile.engine]})")


# vLLM's context keys (derive_max_model_len_and_key's possible_keys, vllm 0.33.0, 0.19.0 and 0.10.1): OPT, GPT-2, MPT,
# ChatGLM2, Command-R, Whisper, others.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")

"""Scheduler and cache settings of one vLLM engine, with vLLM 0.33.0's defaults per GPU.

`vllm serve` (UsageContext.OPENAI_API_SERVER) picks `max_num_batched_tokens` / `max_num_seqs` from the
device memory (`EngineArgs.get_batch_defaults`, vllm/engine/arg_utils.py): ≥ 160 GiB → 16384 /
1024; ≥ 70 GiB and not an A100 → 8192 / 1024; otherwise 2048 / 256. Chunked prefill and prefix
caching are on, async scheduling is on (two batches in flight), the watermark is 0, and admission
requires the whole current sequence to fit (`scheduler_reserve_full_isl = True`,
vllm/config/scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import Field

from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
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
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_concurrent_batches: int = Field(default=2, ge=1, le=64)  # async scheduling: 2 batches in flight
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0, le=1 << 50)

    def resolve(self, hardware: HardwareSpec, cfg: dict) -> EngineConfig:
        """The settings with vLLM serve's defaults for this GPU and model filled in (EngineConfigError when
        the model has no context length and none was given, or the settings contradict each other)."""
        mnbt, seqs = batch_defaults(hardware)
        mml = self.max_model_len or default_max_model_len(cfg)
        if mml is None:
            raise EngineConfigError("the config has no max_position_embeddings; give --max-model-len")
        return EngineConfig(self.max_num_batched_tokens or mnbt, self.max_num_seqs or seqs, mml, self.block_size,
                            self.enable_prefix_caching, self.enable_chunked_prefill, self.max_concurrent_batches,
                            self.gpu_memory_utilization).check()


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

    @property
    def max_in_flight_tokens(self) -> int:
        return self.max_concurrent_batches * self.max_num_batched_tokens

    def check(self) -> EngineConfig:
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "max_concurrent_batches"):
            if getattr(self, name) < 1:
                raise EngineConfigError(f"{name} = {getattr(self, name)}; give --{name.replace('_', '-')} >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise EngineConfigError(f"gpu_memory_utilization = {self.gpu_memory_utilization}; give a value in (0, 1]")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise EngineConfigError(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_model_len ({self.max_model_len}); raise --max-num-batched-tokens or lower --max-model-len")
        return self

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)


def batch_defaults(hardware: HardwareSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` picks on this GPU."""
    mem = hardware.memory_bytes
    if mem >= 160 * GiB:
        return 16384, 1024
    if mem >= 70 * GiB and "a100" not in hardware.name.lower() and "a100" not in hardware.id.lower():
        return 8192, 1024
    return 2048, 256


def default_max_model_len(cfg: dict) -> int | None:
    """vLLM derives the context length from the config; graphsim reads max_position_embeddings."""
    for key in ("max_position_embeddings", "max_seq_len", "seq_length"):
        v = cfg.get(key)
        if isinstance(v, int) and v > 0:
            return v
    return None

"""A deployment's settings as one typed, validated value, under vLLM's names where vLLM has one.

    DeploymentConfig(model="llama-3.1-8b", hardware="h100", kv_cache_dtype="fp8",
                     parallel=ParallelConfig(tensor_parallel_size=2, data_parallel_size=4),
                     engine=EngineArgs(max_num_seqs=256, gpu_memory_utilization=0.9))

- `ParallelConfig`: `tensor_parallel_size` (ranks of one engine), `data_parallel_size` (vLLM's: on a MoE
  model, DP ranks with their own attention, scheduler and KV cache whose experts are spread over all
  dp × tp GPUs and run in lockstep — data-parallel attention, docs/deployment-modes.md; on a dense model,
  independent engines, as vLLM runs them), `enable_expert_parallel` and `all2all_backend` (vLLM's, for
  those experts), and `replicas` (graphsim's: independent copies of the whole dp × tp deployment behind the
  router, what `graphsim simulate --replicas` models; each holds a full copy of the weights). A TP group's
  own EP size is not part of a deployment (the search prices EP partitions of its own candidates, and
  `predict`/`analyze` take `--ep` for one step).
- `EngineArgs` (engine_config.py): the scheduler and cache settings (`max_num_batched_tokens`, `max_num_seqs`,
  `max_model_len`, `block_size`, `enable_prefix_caching`, `enable_chunked_prefill`, `gpu_memory_utilization`,
  `kv_cache_memory_bytes`, …), None where vLLM picks a default for the GPU or model.
- `MemoryOverrides`: graphsim's own memory-model terms, in GiB, instead of its estimates (activation peak,
  non-torch runtime memory, CUDA graphs).
- `InterconnectOverrides` (costing/hardware.py): the link between the GPUs of a node, GPUs per node and the
  network between nodes, where they differ from the hardware spec's.

Every model is pydantic: unknown keys, wrong types, NaN/inf and out-of-range values are errors, all reported
at once. `DeploymentConfig.parse` checks a dict (a JSON document, or what a CLI command collected) and raises
`DeploymentConfigError`, one line naming each bad field; `to_json` / `parse` round-trip.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from graphsim.costing.hardware import InterconnectOverrides
from graphsim.errors import GraphsimError
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.speculative import SpeculativeArgs
from graphsim.validation import Strict, validate

_FIX = ("see DeploymentConfig in graphsim/serving/config.py (fields: model, hardware, dtype, kv_cache_dtype, "
        "mamba_ssm_cache_dtype, parallel, engine, memory, interconnect, speculative_config)")


class DeploymentConfigError(GraphsimError):
    pass


class ParallelConfig(Strict):
    """How a deployment spreads over GPUs (vLLM's ParallelConfig names, and graphsim's `replicas`): see the module
    docstring. GPUs used: tp × dp × replicas × pp."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=4096)
    data_parallel_size: int = Field(default=1, ge=1, le=1 << 20)
    enable_expert_parallel: bool = False  # vLLM's --enable-expert-parallel
    all2all_backend: str | None = None  # vLLM's --all2all-backend (None: its default, costing/all2all.py)
    # vLLM's --decode-context-parallel-size: the KV sharded over ranks of the TP group (costing/context_parallel.py)
    decode_context_parallel_size: int = Field(default=1, ge=1, le=4096)
    # vLLM's --prefill-context-parallel-size: prefills split over more ranks, attention as a ring (×pcp the GPUs)
    prefill_context_parallel_size: int = Field(default=1, ge=1, le=4096)
    replicas: int = Field(default=1, ge=1, le=1 << 20)  # independent copies behind the router (graphsim's)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=1024)  # vLLM's --pipeline-parallel-size (costing/pipeline.py)
    pp_layer_partition: str | None = None  # vLLM's VLLM_PP_LAYER_PARTITION, e.g. "4,6,6,4" (None: the environment's)

    @field_validator("all2all_backend")
    @classmethod
    def _known_backend(cls, v: str | None) -> str | None:
        from graphsim.costing.all2all import check_backend

        if v is not None:
            try:
                check_backend(v)
            except GraphsimError as e:
                raise PydanticCustomError("all2all_backend", "{reason}", {"reason": str(e)}) from None
        return v

    @property
    def world_size(self) -> int:
        return (self.tensor_parallel_size * self.data_parallel_size * self.replicas * self.pipeline_parallel_size
                * self.prefill_context_parallel_size)


class MemoryOverrides(Strict):
    """Terms of the memory budget given instead of graphsim's estimates, GiB per rank (None: the estimate)."""

    activation_gib: float | None = Field(default=None, ge=0, le=1 << 20)
    overhead_gib: float | None = Field(default=None, ge=0, le=1 << 20)
    cudagraph_gib: float | None = Field(default=None, ge=0, le=1 << 20)


def _dtype(value: str | None, what: str) -> str | None:
    """A dtype name graphsim parses, as given (None or vLLM's `auto`: the model's own)."""
    if value is None or value.strip().lower() == "auto":
        return None
    from graphsim.work.dtypes import parse_dtype

    try:
        parse_dtype(value, what)
    except GraphsimError as e:
        raise PydanticCustomError("dtype", "{reason}", {"reason": str(e)}) from None
    return value


class DeploymentConfig(Strict):
    """One deployment: model, GPU, dtypes, parallelism, engine settings and memory overrides."""

    model: str = Field(min_length=1)  # catalog name, HF id, config.json or model directory
    hardware: str = Field(min_length=1)  # hardware spec id or alias, or a JSON spec file
    dtype: str | None = None  # model dtype (None: the config's); vLLM's --dtype
    kv_cache_dtype: str | None = None  # None: the model dtype (vLLM's `auto`); vLLM's --kv-cache-dtype
    mamba_ssm_cache_dtype: str | None = None  # recurrent-state dtype (None: the model dtype)
    ignore_quant: bool = False  # weights in `dtype`, ignoring the config's quantization_config
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    engine: EngineArgs = Field(default_factory=EngineArgs)
    memory: MemoryOverrides = Field(default_factory=MemoryOverrides)
    interconnect: InterconnectOverrides = Field(default_factory=InterconnectOverrides)  # where it differs from the spec's
    speculative_config: SpeculativeArgs | None = None  # vLLM's --speculative-config (serving/speculative.py)

    @field_validator("speculative_config")
    @classmethod
    def _known_speculation(cls, v: SpeculativeArgs | None) -> SpeculativeArgs | None:
        if v is not None:
            from graphsim.serving.speculative import parse_speculative_config

            try:
                parse_speculative_config(v)
            except GraphsimError as e:
                raise PydanticCustomError("speculative_config", "{reason}", {"reason": str(e)}) from None
        return v

    @field_validator("dtype", "kv_cache_dtype", "mamba_ssm_cache_dtype")
    @classmethod
    def _known_dtype(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _dtype(v, info.field_name or "dtype")

    @classmethod
    def parse(cls, data: Any, what: str = "deployment config") -> DeploymentConfig:
        """`data` (a dict, e.g. a JSON document) checked field by field: DeploymentConfigError naming every
        bad field otherwise."""
        try:
            return validate(cls, data, what, _FIX)
        except ValueError as e:
            raise DeploymentConfigError(str(e)) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def tensor_parallel_size(self) -> int:
        return self.parallel.tensor_parallel_size

    def derive(self, *, tensor_parallel_size: int | None = None, data_parallel_size: int | None = None,
               **engine: Any) -> DeploymentConfig:
        """This config with parallel sizes and engine settings changed (checked again)."""
        data = self.model_dump()
        if tensor_parallel_size is not None:
            data["parallel"]["tensor_parallel_size"] = tensor_parallel_size
        if data_parallel_size is not None:
            data["parallel"]["data_parallel_size"] = data_parallel_size
        data["engine"].update(engine)
        return self.parse(data)

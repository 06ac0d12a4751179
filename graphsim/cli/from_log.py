"""`--from-vllm-log FILE` (kv, simulate, search): a real vLLM server log sets the options it knows.

What the log states (graphsim/serving/vllm_log.py) sets each option the command line left at its default;
an option given on the command line wins. Every value taken is printed on stderr ("from log: …"), as are the
ones kept or left out, and the JSON result records them. The available KV-cache memory vLLM logged per rank
becomes `--kv-memory` only while nothing that changes it (TP, dtype, GPU memory fraction, token budget)
was given a different value on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import typer

from graphsim.serving.vllm_log import GIB, VllmLog, VllmLogError, read_vllm_log

# vLLM engine argument → the command's parameter (graphsim/cli/options.py) that means the same.
PARAMS = {"tensor_parallel_size": "tp", "max_model_len": "max_model_len", "kv_cache_dtype": "kv_dtype",
          "dtype": "dtype", "gpu_memory_utilization": "gpu_memory_utilization", "block_size": "block_size",
          "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
          "enable_prefix_caching": "prefix_caching", "enable_chunked_prefill": "chunked_prefill",
          "speculative_config": "speculative_config", "data_parallel_size": "data_parallel_size",
          "enable_expert_parallel": "enable_expert_parallel", "api_server_count": "api_server_count"}
# The kind of each value the log may set (vLLM's EngineArgs fields: ints ≥ 1, flags).
_WHOLE = ("tensor_parallel_size", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens",
          "data_parallel_size", "api_server_count")
_FLAGS = ("enable_prefix_caching", "enable_chunked_prefill", "enable_expert_parallel")
# Parameters whose change invalidates the KV memory the log measured (it is what was left after weights and
# activations at those settings).
# data_parallel_size: a MoE model's DP ranks each hold 1/(dp × tp) of the experts (serving/dp_attention.py)
_KV_MEMORY_DEPENDS_ON = ("tp", "dtype", "gpu_memory_utilization", "max_num_batched_tokens", "data_parallel_size")


@dataclass
class FromLog:
    log: VllmLog
    values: dict[str, Any]  # every parameter the command passed in, log values applied
    taken: dict[str, Any] = field(default_factory=dict)  # vLLM name → value taken from the log
    kept: dict[str, Any] = field(default_factory=dict)  # vLLM name → the log's value the command line overrode
    unused: dict[str, str] = field(default_factory=dict)  # vLLM name → why it is not used

    def get(self, *names: str) -> tuple[Any, ...]:
        return tuple(self.values[n] for n in names)

    def to_json(self) -> dict[str, Any]:
        return {"log": self.log.to_json(), "taken": dict(self.taken), "kept_from_command_line": dict(self.kept),
                "not_used": dict(self.unused)}

    def summary(self) -> str:
        head = f"from log {self.log.path}" + (f" (vLLM {self.log.version}{', ' + self.log.engine if self.log.engine else ''})"
                                             if self.log.version else "")
        lines = [head + ": " + (", ".join(f"{k}={_show(k, v)}" for k, v in self.taken.items()) or "nothing taken")]
        if self.kept:
            lines.append("  the command line overrides the log's " + ", ".join(f"{k}={_show(k, v)}" for k, v in self.kept.items()))
        if self.unused:
            lines.append("  not used: " + "; ".join(
                (f"{k}={self.log.args[k]}" if k in self.log.args else k) + f" ({why})" for k, why in self.unused.items()))
        return "\n".join(lines)

    def capacity_check(self, capacity_tokens: int | None) -> str | None:
        """vLLM's logged KV capacity beside graphsim's, when both exist."""
        if self.log.kv_cache_tokens is None or capacity_tokens is None:
            return None
        ratio = capacity_tokens / self.log.kv_cache_tokens if self.log.kv_cache_tokens else float("nan")
        return (f"vLLM logged GPU KV cache size: {self.log.kv_cache_tokens:,} tokens; graphsim: {capacity_tokens:,} "
                f"tokens (x{ratio:.3f})")


def _show(name: str, value: Any) -> str:
    if name == "available_kv_cache_memory":
        return f"{value / GIB:.2f} GiB"
    if name == "version":
        return f"{value} (as --engine {_engine_spec(value)})"
    return str(value)


def _from_commandline(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _convert(name: str, value: Any, path: str) -> Any:
    """The log's value in the form the command's option callback gives (vLLM's spellings → graphsim's)."""
    from graphsim.cli import options as opt

    whole = name in _WHOLE and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
    if whole or (name in _FLAGS and not isinstance(value, bool)) or (name == "gpu_memory_utilization" and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1)):
        want = "a positive whole number" if whole else "true or false" if name in _FLAGS else "a fraction in (0, 1]"
        raise VllmLogError(f"{path}: the log's {name}={value!r} is not {want}; fix the log or pass "
                           f"--{name.replace('_', '-')} yourself")
    try:
        if name == "kv_cache_dtype":
            return opt._kv_cache_dtype(str(value))
        if name == "dtype":
            return opt._model_dtype(str(value))
    except typer.BadParameter as e:
        raise VllmLogError(f"{path}: the log's {name}={value} is not one graphsim reads ({e.message}); "
                           f"pass --{name.replace('_', '-')} yourself") from None
    return value


def apply_vllm_log(ctx: typer.Context, path: str | None, params: dict[str, Any],
                   not_searched: tuple[str, ...] = ()) -> FromLog | None:
    """`params`: the command's parameters by name (its locals()); those the log sets are replaced where the
    command line left them at their default. `not_searched`: vLLM names the command explores itself (search)."""
    if not path:
        return None
    log = read_vllm_log(path)
    out = FromLog(log, dict(params))
    for name, value in log.args.items():
        param = PARAMS.get(name)
        if name in not_searched:
            out.unused[name] = "search tries its own values; pass the option to fix it"
        elif param is None or param not in params:
            out.unused[name] = _why_unused(name, value)
        elif _from_commandline(ctx, param):
            out.kept[name] = value
        else:
            out.values[param] = _convert(name, value, str(path))
            out.taken[name] = value
    if log.version is not None:
        _take_engine(ctx, out, log.version, params)
    if log.available_kv_bytes is not None:
        changed = [p for p in _KV_MEMORY_DEPENDS_ON
                   if p in params and _from_commandline(ctx, p) and _vllm_name(p) in log.args
                   and out.values[p] != _convert(_vllm_name(p), log.args[_vllm_name(p)], str(path))]
        if "kv_memory" not in params:
            out.unused["available_kv_cache_memory"] = "this command sizes the KV cache of each candidate itself"
        elif _from_commandline(ctx, "kv_memory"):
            out.kept["available_kv_cache_memory"] = log.available_kv_bytes
        elif changed:
            out.unused["available_kv_cache_memory"] = (f"measured at the log's {', '.join(_vllm_name(p) for p in changed)}, "
                                                       "which the command line changes")
        else:
            out.values["kv_memory"] = f"{log.available_kv_bytes}B"
            out.taken["available_kv_cache_memory"] = log.available_kv_bytes
    return out


def _engine_spec(version: str) -> str | None:
    """vLLM's logged version as an --engine value: 0.10.1.1 → vllm==0.10.1, 0.6.4.post1 → vllm==0.6.4."""
    import re

    m = re.match(r"v?(\d+(?:\.\d+){0,2})", version)
    return f"vllm=={m.group(1)}" if m else None


def _take_engine(ctx: typer.Context, out: FromLog, version: str, params: dict[str, Any]) -> None:
    """The logged vLLM version → `--engine vllm==X.Y.Z` (the engine family whose defaults and scheduler to model)."""
    if "engine" not in params:
        out.unused["version"] = "this command models no engine version"
        return
    spec = _engine_spec(version)
    if _from_commandline(ctx, "engine"):
        out.kept["version"] = version
        return
    from graphsim.errors import GraphsimError
    from graphsim.serving.engine_versions import parse_engine

    try:
        if spec is None:
            raise GraphsimError(f"cannot read version '{version}'")
        parse_engine(spec)
    except GraphsimError as e:
        out.unused["version"] = f"{e}; pass --engine yourself"
        return
    out.values["engine"] = spec
    out.taken["version"] = version


def _vllm_name(param: str) -> str:
    return next(k for k, v in PARAMS.items() if v == param)


def _why_unused(name: str, value: Any) -> str:
    if name == "model":
        return "the model argument names the model"
    if name == "pipeline_parallel_size":
        return "graphsim models tensor parallelism only" if value not in (1, None) else "1, the default"
    if name == "quantization":
        return "graphsim reads quantization from the model's config"
    if name == "kv_cache_memory_bytes":
        return "the log's 'Available KV cache memory' line states the memory vLLM used"
    if name == "data_parallel_size":
        return "kv and simulate take it (-dp); here pass -dp yourself where the command has it"
    return "this command has no such option"

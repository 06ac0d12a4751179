"""Read a real vLLM server log: the engine arguments, version and KV-cache figures vLLM printed at startup.

    log = read_vllm_log("server.log")
    log.args          # {"tensor_parallel_size": 2, "max_model_len": 16384, "kv_cache_dtype": "auto", …}
    log.where         # each arg → the log line kind it was read from
    log.available_kv_bytes, log.kv_cache_tokens, log.max_concurrency

The lines, by the vLLM code that prints them (vllm-project/vllm):
- `vLLM API server version X` (vllm/entrypoints/openai/api_server.py) and `Initializing a V1 LLM engine (vX)
  with config: model=…, dtype=torch.bfloat16, max_seq_len=…, tensor_parallel_size=…, kv_cache_dtype=…,
  enable_prefix_caching=…, chunked_prefill_enabled=…, …` (vllm/v1/engine/core.py; V0: `Initializing an LLM
  engine (vX) with config:` from vllm/engine/llm_engine.py);
- `non-default args: {…}` (vllm/entrypoints/utils.py log_non_default_args): the options the user gave;
- `Using max model len N` (vllm/config), `Chunked prefill is enabled with max_num_batched_tokens=N`
  (vllm/config/scheduler.py), `Forcing kv cache block size to N for … backend` (vllm/platforms/cuda.py
  CudaPlatformBase.check_and_update_config), `Setting attention block size to N tokens` (hybrid models);
- `Available KV cache memory: X GiB` (vllm/v1/worker/gpu_worker.py, one per worker: the smallest is taken, as
  vLLM sizes every rank's cache alike); V0: `the rest of the memory reserved for KV Cache is X GiB` or
  `kv_cache_size=X GiB` (vllm/worker/worker.py);
- `GPU KV cache size: N tokens` and `Maximum concurrency for N tokens per request: Xx`
  (vllm/v1/core/kv_cache_utils.py); V0: `# GPU blocks: N`.

Terminal-wrapped lines (a record broken at the console width) are joined back; ANSI colour codes are removed.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsim.errors import GraphsimError

GIB = 1 << 30


class VllmLogError(GraphsimError):
    pass


_ANSI = re.compile(r"(?:\x1b)?\[[0-9;]*m")
# A new record: a process prefix `(EngineCore_0 pid=3902)`, a rank prefix, or vLLM's `INFO 09-03 02:11:44`.
_RECORD_START = re.compile(r"^\s*(?:\([^()]*pid=\d+[^()]*\)|\[rank\d+\]|\S*\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"
                           r"\s+\d\d-\d\d\s+\d\d:\d\d:\d\d)")
_WRAP_MIN = 60  # a console wraps only long lines: a shorter line before a non-record line ended its record

_VERSION = re.compile(r"vLLM API server version (\S+)")
_ENGINE = re.compile(r"Initializing an? (V1 )?LLM engine \(v([^)\s]+)\) with config:\s*(.*)")
_NON_DEFAULT = re.compile(r"non-default args:\s*(\{.*)")
_KV_AVAILABLE = [re.compile(r"Available KV cache memory:\s*(-?[\d.]+)\s*GiB"),
                 re.compile(r"reserved for KV Cache is\s*(-?[\d.]+)\s*GiB"),
                 re.compile(r"\bkv_cache_size=(-?[\d.]+)\s*GiB")]
_KV_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
_GPU_BLOCKS = re.compile(r"(?:#\s*)?GPU blocks:\s*([\d,]+)")
_MAX_LEN = re.compile(r"Using max model len (\d+)")
_BATCHED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_BLOCK = re.compile(r"(?:Forcing kv cache block size to|Setting attention block size to) (\d+)")
_UTILIZATION = re.compile(r"gpu_memory_utilization\s*(?:\(|=)\s*([\d.]+)")
_ARCH = re.compile(r"Resolved architecture: (\w+)")

# Engine-config fields (vLLM's names) read from the `Initializing … with config:` record, and the name of the
# engine argument each sets.
_CONFIG_FIELDS = {"model": "model", "dtype": "dtype", "max_seq_len": "max_model_len",
                  "tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
                  "data_parallel_size": "data_parallel_size", "kv_cache_dtype": "kv_cache_dtype",
                  "quantization": "quantization", "enable_prefix_caching": "enable_prefix_caching",
                  "chunked_prefill_enabled": "enable_chunked_prefill"}
# Engine arguments read from `non-default args: {…}` (the user's own settings).
_ARG_FIELDS = ("model", "dtype", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size",
               "data_parallel_size", "kv_cache_dtype", "quantization", "gpu_memory_utilization", "block_size",
               "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
               "kv_cache_memory_bytes", "enable_expert_parallel", "api_server_count")


@dataclass
class VllmLog:
    path: str
    version: str | None = None
    engine: str | None = None  # "V1" or "V0"
    args: dict[str, Any] = field(default_factory=dict)  # vLLM engine-argument name → value
    where: dict[str, str] = field(default_factory=dict)  # → the log line it was read from
    available_kv_bytes: int | None = None
    available_kv_gib: list[float] = field(default_factory=list)  # every worker's line
    kv_cache_tokens: int | None = None
    max_concurrency: tuple[int, float] | None = None  # (tokens per request, concurrency)
    gpu_blocks: int | None = None
    architecture: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "engine": self.engine, "args": dict(self.args),
                "read_from": dict(self.where), "available_kv_bytes": self.available_kv_bytes,
                "available_kv_gib_per_worker": list(self.available_kv_gib), "kv_cache_tokens": self.kv_cache_tokens,
                "max_concurrency": None if self.max_concurrency is None else
                {"tokens_per_request": self.max_concurrency[0], "concurrency": self.max_concurrency[1]},
                "gpu_blocks": self.gpu_blocks, "architecture": self.architecture}

    def _set(self, name: str, value: Any, where: str, *, override: bool = False) -> None:
        if value is None or (name in self.args and not override):
            return
        self.args[name] = value
        self.where[name] = where


def records(text: str) -> list[str]:
    """The log's records: ANSI codes removed, console-wrapped lines joined back to their record."""
    out: list[str] = []
    prev_len = 0
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        if out and not _RECORD_START.match(line) and prev_len >= _WRAP_MIN and line.strip():
            out[-1] += line
        else:
            out.append(line)
        prev_len = len(line)
    return out


def _outside_quotes(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth after it) of every character outside '…' / "…" quotes."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        yield i, ch, depth


def _split_top(text: str) -> list[str]:
    """`a=1, b=X(c=2, d=[3, 4]), e='x, y'` → ['a=1', 'b=X(c=2, d=[3, 4])', "e='x, y'"]: commas at depth 0."""
    parts, start = [], 0
    for i, ch, depth in _outside_quotes(text):
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _scalar(text: str) -> Any:
    """A value as vLLM's config repr prints it: 'x' → x, True/False/None, numbers, torch.bfloat16 → bfloat16."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if t in ("True", "False"):
        return t == "True"
    if t == "None":
        return None
    if re.fullmatch(r"-?\d+", t):
        return int(t)
    if re.fullmatch(r"-?\d+\.\d*(?:e-?\d+)?", t):
        return float(t)
    return t.removeprefix("torch.")


def _balanced(text: str) -> str:
    """The leading `{…}` of `text` (braces counted outside quotes); the whole text when it never closes."""
    for i, ch, depth in _outside_quotes(text):
        if ch in "}])" and depth == 0:
            return text[: i + 1]
    return text


def _non_default_args(text: str) -> dict[str, Any]:
    body = _balanced(text)
    try:
        value = ast.literal_eval(body)
        if isinstance(value, dict):
            return value
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    # a dict holding non-literal reprs (KVTransferConfig(…)): read the plain `'key': value` entries
    out: dict[str, Any] = {}
    for part in _split_top(body.strip()[1:-1] if body.strip().endswith("}") else body.strip()[1:]):
        m = re.fullmatch(r"'(\w+)'\s*:\s*(.+)", part, flags=re.S)
        if m:
            out[m.group(1)] = _scalar(m.group(2))
    return out


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_vllm_log(text: str, path: str = "<log>") -> VllmLog:
    """Everything `text` says about the engine; VllmLogError when it holds none of vLLM's startup lines."""
    log = VllmLog(path)
    kv_gib: list[float] = []
    for rec in records(text):
        if m := _VERSION.search(rec):
            log.version = m.group(1)
        if m := _ENGINE.search(rec):
            log.engine = "V1" if m.group(1) else "V0"
            log.version = log.version or m.group(2)
            for part in _split_top(m.group(3)):
                key, eq, value = part.partition("=")
                if eq and key.strip() in _CONFIG_FIELDS:
                    log._set(_CONFIG_FIELDS[key.strip()], _scalar(value), "engine config", override=True)
        if m := _NON_DEFAULT.search(rec):
            for key, value in _non_default_args(m.group(1)).items():
                if key in _ARG_FIELDS and isinstance(value, (int, float, str, bool)):
                    log._set(key, value, "non-default args")
                elif key == "speculative_config" and isinstance(value, dict):  # --speculative-config, as its JSON
                    log._set(key, json.dumps(value, separators=(",", ":")), "non-default args")
        if m := _MAX_LEN.search(rec):
            log._set("max_model_len", int(m.group(1)), "Using max model len", override=True)
        if m := _BATCHED.search(rec):
            log._set("max_num_batched_tokens", int(m.group(1)), "Chunked prefill is enabled with …", override=True)
        if m := _BLOCK.search(rec):
            log._set("block_size", int(m.group(1)), "kv cache block size line", override=True)
        if (m := _UTILIZATION.search(rec)) and "non-default args" not in rec and "with config" not in rec:
            log._set("gpu_memory_utilization", float(m.group(1)), "memory profiling line")
        for pattern in _KV_AVAILABLE:
            kv_gib += [float(x) for x in pattern.findall(rec)]
        if m := _KV_TOKENS.search(rec):
            log.kv_cache_tokens = _int(m.group(1))
        if m := _CONCURRENCY.search(rec):  # "for N tokens per request": N is the engine's max_model_len
            log.max_concurrency = (_int(m.group(1)), float(m.group(2)))
            log._set("max_model_len", _int(m.group(1)), "Maximum concurrency for … tokens per request")
        if m := _GPU_BLOCKS.search(rec):
            log.gpu_blocks = _int(m.group(1))
        if m := _ARCH.search(rec):
            log.architecture = m.group(1)
    if kv_gib:
        log.available_kv_gib = kv_gib
        smallest = min(kv_gib)
        if smallest <= 0:
            raise VllmLogError(f"{path}: vLLM logged {smallest:g} GiB of available KV cache memory, so that run "
                               "could not start; pass the log of a run that started (or give --kv-memory)")
        log.available_kv_bytes = int(smallest * GIB)
    if log.version is None and not log.args and log.available_kv_bytes is None and log.kv_cache_tokens is None:
        raise VllmLogError(f"{path} holds none of the lines vLLM prints at startup (its version, 'Initializing a V1 "
                           "LLM engine … with config:', 'non-default args:', 'Available KV cache memory:'); pass the "
                           "log of `vllm serve … 2>&1 | tee server.log`")
    return log


def read_vllm_log(path: str | Path) -> VllmLog:
    from graphsim.validation import read_text

    try:
        text = read_text(Path(path), "vLLM log", "pass the text log a vLLM server printed")
    except ValueError as e:
        raise VllmLogError(str(e)) from None
    return parse_vllm_log(text, str(path))

"""Launch command lines for SGLang and TensorRT-LLM instances, with every setting the prediction assumed.

SGLang 0.5.14 (`python -m sglang.launch_server`, flags from `python/sglang/srt/server_args.py` ServerArgs, whose
field names become `--field-name`): `--model-path`, `--port`, `--tp-size`, `--ep-size`, `--context-length`,
`--max-running-requests`, `--chunked-prefill-size` (-1: chunked prefill off), `--mem-fraction-static`, `--dtype`,
`--kv-cache-dtype`, `--page-size`, `--schedule-policy`, `--disable-radix-cache`; a disaggregated instance adds
`--disaggregation-mode prefill|decode` and `--disaggregation-transfer-backend nixl`.

TensorRT-LLM 1.3 (`trtllm-serve`, tensorrt_llm/commands/serve.py click options): `--backend pytorch`, `--port`,
`--tp_size`, `--ep_size`, `--max_batch_size`, `--max_num_tokens`, `--max_seq_len`,
`--kv_cache_free_gpu_memory_fraction`, and `--extra_llm_api_options FILE` for the LLM-API fields without a flag
(`enable_chunked_prefill`, `kv_cache_config.enable_block_reuse`, `kv_cache_config.tokens_per_block`,
`kv_cache_config.dtype`), written beside launch.sh as `extra_llm_api_options.yaml`.
"""

from __future__ import annotations

from typing import Any

PROGRAMS = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server"),
            "trtllm": ("trtllm-serve",)}
TRTLLM_OPTIONS_FILE = "extra_llm_api_options.yaml"


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def engine_settings(engine: str, dep, pool_tp: int, pool_ep: int, dtype: str | None, kv_dtype: str | None
                    ) -> dict[str, Any]:
    """The settings of one SGLang / TensorRT-LLM instance as the prediction resolved them (`plan_deployment`), under
    the engine's own names."""
    e = dep.engine
    if engine == "sglang":
        return {"engine": "sglang", "tp_size": pool_tp, "ep_size": pool_ep,
                "max_running_requests": e.max_num_seqs,
                "chunked_prefill_size": e.max_num_batched_tokens if e.enable_chunked_prefill else -1,
                "context_length": e.max_model_len, "mem_fraction_static": dep.budget.utilization,
                "dtype": dtype or "auto", "kv_cache_dtype": kv_dtype or "auto", "page_size": dep.layout.block_size,
                "schedule_policy": "fcfs", "disable_radix_cache": not e.enable_prefix_caching}
    return {"engine": "trtllm", "tp_size": pool_tp, "ep_size": pool_ep, "max_batch_size": e.max_num_seqs,
            "max_num_tokens": e.max_num_batched_tokens, "max_seq_len": e.max_model_len,
            "kv_cache_free_gpu_memory_fraction": dep.budget.utilization, "dtype": dtype or "auto",
            "kv_cache_dtype": kv_dtype or "auto", "enable_chunked_prefill": e.enable_chunked_prefill,
            "enable_block_reuse": e.enable_prefix_caching, "tokens_per_block": dep.layout.block_size}


def engine_argv(model: str, s: dict[str, Any], port: int, role: str | None) -> list[str]:
    """Arguments after the program (`PROGRAMS`) for one instance; `role` prefill / decode when disaggregated."""
    if s["engine"] == "sglang":
        argv = ["--model-path", model, "--port", str(port)]
        for key in ("tp_size", "ep_size", "context_length", "max_running_requests", "chunked_prefill_size",
                    "mem_fraction_static", "dtype", "kv_cache_dtype", "page_size", "schedule_policy"):
            argv += ["--" + key.replace("_", "-"), _fmt(s[key])]
        if s["disable_radix_cache"]:
            argv.append("--disable-radix-cache")
        if role is not None:
            argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
        return argv
    argv = [model, "--backend", "pytorch", "--port", str(port)]
    for key in ("tp_size", "ep_size", "max_batch_size", "max_num_tokens", "max_seq_len",
                "kv_cache_free_gpu_memory_fraction"):
        argv += ["--" + key, _fmt(s[key])]
    return [*argv, "--extra_llm_api_options", TRTLLM_OPTIONS_FILE]


def trtllm_options_yaml(s: dict[str, Any], disagg: bool) -> str:
    """The LLM-API options file TensorRT-LLM instances read (llmapi/llm_args.py field names)."""
    lines = [f"enable_chunked_prefill: {str(s['enable_chunked_prefill']).lower()}", "kv_cache_config:",
             f"  enable_block_reuse: {str(s['enable_block_reuse']).lower()}",
             f"  tokens_per_block: {s['tokens_per_block']}",
             f"  free_gpu_memory_fraction: {_fmt(s['kv_cache_free_gpu_memory_fraction'])}"]
    if s["kv_cache_dtype"] != "auto":
        lines.append(f"  dtype: {s['kv_cache_dtype']}")
    if disagg:
        lines += ["cache_transceiver_config:", "  backend: NIXL"]
    return "\n".join(lines) + "\n"

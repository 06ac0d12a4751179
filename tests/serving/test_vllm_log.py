"""`--from-vllm-log`: real vLLM server logs (tests/data/vllm_logs, sources in its README) read into engine args.

Every expected value below is read by eye from the fixture's text (the line is quoted in the comment)."""

from __future__ import annotations

import enum
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphsim.cli.from_log import apply_vllm_log
from graphsim.serving.vllm_log import VllmLogError, parse_vllm_log, read_vllm_log, records

LOGS = Path(__file__).resolve().parent.parent / "data" / "vllm_logs"
GIB = 1 << 30


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The installed `graphsim` script (beside this Python, else on PATH)."""
    beside = Path(sys.executable).parent / "graphsim"
    exe = str(beside) if beside.is_file() else shutil.which("graphsim")
    assert exe is not None, "graphsim is not installed"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def test_v1_wrapped_log_tp2():
    log = read_vllm_log(LOGS / "v1_0.10.1.1_qwen2-7b_tp2_wrapped.log")
    # "vLLM API server version 0.10.1.1"; "Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwe|n2-7B-…"
    assert (log.version, log.engine, log.args["model"]) == ("0.10.1.1", "V1", "Qwen2-7B-Instruct")
    # "tensor_parallel_si|ze=2" is wrapped across two console lines; "max_seq_len=16384"; "kv_cache_dtype=auto"
    assert log.args["tensor_parallel_size"] == 2 and log.args["max_model_len"] == 16384
    assert (log.args["kv_cache_dtype"], log.args["dtype"]) == ("auto", "bfloat16")
    # "non-default args: {… 'gpu_memory_utilization': 0.5}"; "Chunked prefill is enabled with max_num_batched_tokens=2048."
    assert log.args["gpu_memory_utilization"] == 0.5 and log.args["max_num_batched_tokens"] == 2048
    assert log.args["enable_prefix_caching"] is True and log.args["enable_chunked_prefill"] is True
    # "Available KV cache memory: 31.83 GiB" from TP0 and TP1; "GPU KV cache size: 1,192,160 tokens";
    # "Maximum concurrency for 16,384 tokens per request: 72.76x"
    assert log.available_kv_gib == [31.83, 31.83] and log.available_kv_bytes == int(31.83 * GIB)
    assert log.kv_cache_tokens == 1_192_160 and log.max_concurrency == (16_384, 72.76)
    assert log.architecture == "Qwen2ForCausalLM"


def test_v1_ray_log_with_ansi_colours():
    log = read_vllm_log(LOGS / "v1_0.10.1.1_gpt-oss-120b_tp4_ray_ansi.log")
    # "non-default args: {'model_tag': 'gpt-oss-120b', …, 'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.8}"
    assert log.args["tensor_parallel_size"] == 4 and log.args["gpu_memory_utilization"] == 0.8
    # "(RayWorkerWrapper pid=345, ip=10.42.9.225) … Available KV cache memory: 45.32 GiB"
    assert log.available_kv_gib == [45.32] and log.kv_cache_tokens == 2_640_144
    assert log.args["quantization"] == "mxfp4"  # "quantization=mxfp4" in the engine config


def test_v0_engine_config():
    log = read_vllm_log(LOGS / "v0_0.6.4_llama-3.1-8b_engine_config.log")
    # "Initializing an LLM engine (v0.6.4.post1) with config: … dtype=torch.bfloat16, max_seq_len=120000, …
    # tensor_parallel_size=1"; "Chunked prefill is enabled with max_num_batched_tokens=512."
    assert (log.version, log.engine) == ("0.6.4.post1", "V0")
    assert log.args["model"] == "NousResearch/Meta-Llama-3.1-8B-Instruct"
    assert (log.args["max_model_len"], log.args["tensor_parallel_size"], log.args["max_num_batched_tokens"]) == (120_000, 1, 512)
    assert log.available_kv_bytes is None  # this excerpt has no memory line


def test_v0_memory_profiling_lines():
    log = read_vllm_log(LOGS / "v0_memory_profiling_rtx3090.log")
    # "Memory profiling results: … kv_cache_size=3.81GiB gpu_memory_utilization=0.90"; "GPU blocks: 1952";
    # "Maximum concurrency for 20000 tokens per request: 1.56x" (N is the engine's max_model_len)
    assert log.available_kv_gib == [3.81] and log.gpu_blocks == 1952
    assert log.args["gpu_memory_utilization"] == 0.9 and log.args["max_model_len"] == 20_000


def test_recent_v1_non_default_args():
    log = read_vllm_log(LOGS / "v1_0.20.1_qwen_tp2_fp8_e5m2.log")
    # "non-default args: {… 'dtype': 'float16', 'max_model_len': 262144, …, 'tensor_parallel_size': 2,
    # 'kv_cache_dtype': 'fp8_e5m2', …, 'max_num_batched_tokens': 8192, 'max_num_seqs': 2, …}"
    assert log.version == "0.20.1"
    assert (log.args["kv_cache_dtype"], log.args["dtype"], log.args["max_num_seqs"]) == ("fp8_e5m2", "float16", 2)
    assert log.args["max_model_len"] == 262_144 and log.args["max_num_batched_tokens"] == 8192
    assert log.kv_cache_tokens == 619_479 and log.max_concurrency == (262_144, 2.36)
    # "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}": kept as the JSON --speculative-config takes
    assert log.args["speculative_config"] == '{"method":"mtp","num_speculative_tokens":3}'


def test_non_literal_args_are_read_entry_by_entry():
    log = read_vllm_log(LOGS / "v1_lmcache_nonliteral_args.log")
    # "'max_model_len': 1024, … 'gpu_memory_utilization': 0.35, 'kv_transfer_config': KVTransferConfig(…)"
    assert log.args["max_model_len"] == 1024 and log.args["gpu_memory_utilization"] == 0.35
    assert log.args["max_num_batched_tokens"] == 8192 and log.architecture == "LlamaForCausalLM"


def test_wrapped_lines_are_joined_and_short_lines_are_not():
    text = "(E pid=1) INFO 09-03 02:11:44 [core.py:74] " + "x" * 80 + "\nabc\nINFO 09-03 02:11:45 [a.py:1] y\nshort\nz\n"
    assert records(text) == ["(E pid=1) INFO 09-03 02:11:44 [core.py:74] " + "x" * 80 + "abc",
                             "INFO 09-03 02:11:45 [a.py:1] y", "short", "z", ]


def test_not_a_vllm_log_and_a_run_that_could_not_start(tmp_path):
    with pytest.raises(VllmLogError, match="holds none of the lines vLLM prints"):
        parse_vllm_log("hello\nworld\n", "x.log")
    # the README of dennislee22/vLLM-benchmarking quotes "Available KV cache memory: -0.53 GiB" (the engine failed)
    with pytest.raises(VllmLogError, match=r"-0\.53 GiB.*could not start"):
        parse_vllm_log("(EngineCore_0 pid=1321) INFO 09-06 03:10:08 [gpu_worker.py:276] Available KV cache memory: -0.53 GiB")
    binary = tmp_path / "b.log"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(VllmLogError, match="not UTF-8"):
        read_vllm_log(binary)


class _Source(enum.Enum):
    DEFAULT = 1
    COMMANDLINE = 2


class _Ctx:
    def __init__(self, given: set[str]):
        self.given = given

    def get_parameter_source(self, name: str) -> _Source:
        return _Source.COMMANDLINE if name in self.given else _Source.DEFAULT


def test_command_line_wins_and_kv_memory_follows_tp():
    path = str(LOGS / "v1_0.10.1.1_qwen2-7b_tp2_wrapped.log")
    params = {"tp": 1, "max_model_len": None, "kv_dtype": None, "dtype": None, "gpu_memory_utilization": 0.9,
              "kv_memory": None, "block_size": None}
    taken = apply_vllm_log(_Ctx(set()), path, params)  # type: ignore[arg-type]
    assert taken is not None
    assert taken.get("tp", "max_model_len", "gpu_memory_utilization", "kv_memory") == (2, 16384, 0.5, f"{int(31.83 * GIB)}B")
    assert taken.get("dtype", "kv_dtype") == ("bf16", None)  # vLLM's bfloat16 / auto in graphsim's spelling
    same_tp = apply_vllm_log(_Ctx({"tp"}), path, {**params, "tp": 2})  # type: ignore[arg-type]
    assert same_tp is not None and same_tp.values["kv_memory"] is not None  # TP 2 given: the log's memory still holds
    other = apply_vllm_log(_Ctx({"tp"}), path, {**params, "tp": 4})  # type: ignore[arg-type]
    assert other is not None and other.values["tp"] == 4 and other.kept == {"tensor_parallel_size": 2}
    assert other.values["kv_memory"] is None and "available_kv_cache_memory" in other.unused
    engine = apply_vllm_log(_Ctx(set()), path, {**params, "engine": "vllm"})  # type: ignore[arg-type]
    assert engine is not None and engine.values["engine"] == "vllm==0.10.1"  # "(v0.10.1.1)": three parts kept
    v0 = apply_vllm_log(_Ctx(set()), str(LOGS / "v0_0.6.4_llama-3.1-8b_engine_config.log"),  # type: ignore[arg-type]
                        {"engine": "vllm", "max_model_len": None})
    assert v0 is not None and v0.values["engine"] == "vllm==0.6.4" and v0.values["max_model_len"] == 120_000
    given = apply_vllm_log(_Ctx({"engine"}), path, {**params, "engine": "vllm==0.24"})  # type: ignore[arg-type]
    assert given is not None and given.values["engine"] == "vllm==0.24" and given.kept["version"] == "0.10.1.1"
    search = apply_vllm_log(_Ctx(set()), path, {"tp": None, "max_model_len": None},  # type: ignore[arg-type]
                            not_searched=("tensor_parallel_size",))
    assert search is not None and search.values["tp"] is None and "tensor_parallel_size" in search.unused


def test_kv_from_log_through_the_entry_point():
    """Qwen2.5-7B has Qwen2-7B's geometry (28 layers, 4 KV heads of 128): at TP 2 a token holds 28 × 2 (K, V) × 2
    heads × 128 × 2 B = 28,672 B per rank, a 16-token block 458,752 B. The log's 31.83 GiB = 34,177,202,257 B
    holds floor(34,177,202,257 / 458,752) = 74,500 blocks = 1,192,000 tokens; vLLM logged 1,192,160 from the
    unrounded memory (0.013 % more)."""
    out = run_cli(["kv", "qwen2.5-7b-instruct", "--gpu", "a100", "--json",
                   "--from-vllm-log", str(LOGS / "v1_0.10.1.1_qwen2-7b_tp2_wrapped.log")])
    assert out.returncode == 0, out.stderr
    assert "from log" in out.stderr and "tensor_parallel_size=2" in out.stderr and "31.83 GiB" in out.stderr
    d = json.loads(out.stdout)
    assert d["tp"] == 2 and d["engine"]["max_model_len"] == 16384 and d["engine"]["gpu_memory_utilization"] == 0.5
    assert d["capacity"]["available_bytes"] == 34_177_202_257
    assert d["layout"]["bytes_per_token_per_rank"] == 28_672 and d["capacity"]["num_blocks"] == 74_500
    assert d["capacity"]["tokens"] == 1_192_000
    assert d["from_vllm_log"]["log"]["kv_cache_tokens"] == 1_192_160
    assert d["versions"]["engine_profile"] == "vllm==0.10.1"  # "vLLM API server version 0.10.1.1"
    assert "1,192,160" in d["from_vllm_log"]["capacity_check"]


def test_bad_log_is_one_error_line(tmp_path):
    bad = tmp_path / "server.log"
    bad.write_text("nothing to see\n")
    out = run_cli(["kv", "llama-3.1-8b", "--from-vllm-log", str(bad)])
    assert out.returncode == 2 and out.stderr.count("error:") == 1 and "Traceback" not in out.stderr
    assert "holds none of the lines vLLM prints" in out.stderr


@pytest.mark.slow
def test_simulate_and_search_from_log_through_the_entry_point():
    log = str(LOGS / "v1_0.10.1.1_qwen2-7b_tp2_wrapped.log")
    sim = run_cli(["simulate", "qwen2.5-7b-instruct", "--gpu", "a100", "--from-vllm-log", log, "--rate", "2",
                   "-n", "20", "--json"])
    assert sim.returncode == 0, sim.stderr
    d = json.loads(sim.stdout)
    assert d["deployment"]["tp"] == 2 and d["deployment"]["engine"]["max_num_batched_tokens"] == 2048
    assert d["deployment"]["capacity"]["available_bytes"] == 34_177_202_257  # the log's 31.83 GiB
    assert d["versions"]["engine_profile"] == "vllm==0.10.1"
    search = run_cli(["search", "qwen2.5-7b-instruct", "--gpus", "2", "--gpu", "a100", "--from-vllm-log", log,
                      "--verify", "0", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048", "--mode", "agg",
                      "--json"])
    assert search.returncode == 0, search.stderr
    taken = json.loads(search.stdout)["from_vllm_log"]
    assert taken["taken"]["max_model_len"] == 16384 and "tensor_parallel_size" in taken["not_used"]


def test_block_size_lines():
    """The block-size lines of vllm/platforms/cuda.py (CudaPlatformBase.check_and_update_config: "Forcing kv cache
    block size to 64 for FlashMLA backend.") and of hybrid models ("Setting attention block size to 544 tokens …")
    override a block size the user asked for (vLLM forces it after reading the arguments)."""
    log = parse_vllm_log("(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'block_size': 16}\n"
                         "(APIServer pid=1) INFO 01-01 00:00:01 [cuda.py:1] Forcing kv cache block size to 64 for "
                         "FlashMLA backend.\n")
    assert log.args["block_size"] == 64 and log.where["block_size"] == "kv cache block size line"
    hybrid = parse_vllm_log("INFO 01-01 00:00:01 [config.py:1] Setting attention block size to 544 tokens to ensure "
                            "that attention page size is >= mamba page size.")
    assert hybrid.args["block_size"] == 544

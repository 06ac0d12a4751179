"""Shared options (graphsim/cli/options.py): one name, default and check everywhere, and vLLM's names and
value spellings as aliases with the same meaning."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from cli_helpers import commands, options, value_type

from graphsim.cli.app import main
from graphsim.cli.options import DEFAULT_GPU, KV_CACHE_DTYPES


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(capsys, *args: str) -> str:
    code, _, err = run(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


def _commands_with(option: str) -> list[tuple[tuple[str, ...], Any]]:
    return [(w, p) for w, cmd in commands() for p in options(cmd) if option in p.opts]


INT_TP = [" ".join(w) for w, p in _commands_with("--tp") if value_type(p) is int]


def test_tp_is_one_option_everywhere():
    assert set(INT_TP) >= {"predict", "align", "analyze", "kv", "simulate", "profile"}
    for _, p in _commands_with("--tp"):
        assert {"--tensor-parallel-size", "-tp"} <= set(p.opts), p.opts


@pytest.mark.parametrize("command", INT_TP)
@pytest.mark.parametrize("spelling", ["--tp", "--tensor-parallel-size", "-tp"])
def test_tp_zero_is_a_usage_error_everywhere(capsys, command, spelling):
    line = one_error_line(capsys, *command.split(), spelling, "0")
    assert "'0'" in line and "--tp" in line and f"graphsim {command}" in line, line


def test_one_default_gpu():
    defaults = {" ".join(w): p.default for w, p in _commands_with("--gpu")}
    assert set(defaults) >= {"predict", "analyze", "kv", "simulate", "search", "align"}
    assert {d for c, d in defaults.items() if c != "align"} == {DEFAULT_GPU} == {"h200"}
    assert defaults["align"] is None  # the profile's own hardware


def test_kv_cache_dtype_is_an_alias_everywhere():
    found = _commands_with("--kv-dtype")
    assert {" ".join(w) for w, _ in found} >= {"predict", "analyze", "kv", "simulate", "search", "work", "profile"}
    for _, p in found:
        assert "--kv-cache-dtype" in p.opts


def kv_json(capsys, *args: str) -> dict:
    code, out, err = run(capsys, "kv", "llama-3.1-8b", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_vllm_names_mean_the_same(capsys):
    assert kv_json(capsys)["hardware"] == "h200_sxm"
    tp2 = kv_json(capsys, "--tp", "2")
    assert tp2["tp"] == 2
    assert kv_json(capsys, "--tensor-parallel-size", "2") == tp2 == kv_json(capsys, "-tp", "2")
    fp8 = kv_json(capsys, "--kv-dtype", "fp8")
    assert fp8["precision"]["kv"] == "fp8" and fp8["layout"]["bytes_per_token_per_rank"] == 65_536
    assert kv_json(capsys, "--kv-cache-dtype", "fp8") == fp8 == kv_json(capsys, "--kv-cache-dtype", "fp8_e4m3")
    e5m2 = kv_json(capsys, "--kv-cache-dtype", "fp8_e5m2")
    assert e5m2["precision"]["kv"] == "fp8_e5m2" and e5m2["layout"] == fp8["layout"]
    default = kv_json(capsys)
    assert kv_json(capsys, "--kv-cache-dtype", "auto") == default == kv_json(capsys, "--dtype", "auto")
    explicit = kv_json(capsys, "--kv-cache-dtype", "bfloat16")
    # the same layout and capacity; the JSON says where the KV dtype came from
    assert (explicit["precision"]["kv_source"], default["precision"]["kv_source"]) == ("--kv-dtype", "parameter dtype")
    explicit["precision"]["kv_source"] = default["precision"]["kv_source"]
    assert explicit == default
    assert kv_json(capsys, "--dtype", "half")["precision"]["weight"] == "fp16"


def test_every_kv_cache_dtype_reaches_both_parsers():
    from graphsim.costing.dtypes import parse_kernel_dtype
    from graphsim.work.dtypes import parse_dtype

    assert {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"} <= set(KV_CACHE_DTYPES)  # vLLM's spellings
    for name in filter(None, KV_CACHE_DTYPES.values()):
        parse_dtype(name)
        parse_kernel_dtype(name)


@pytest.mark.parametrize(("args", "named"), [
    (("kv", "llama-3.1-8b", "--kv-cache-dtype", "fp4x"), "--kv-dtype / --kv-cache-dtype"),
    (("kv", "llama-3.1-8b", "--dtype", "fp5"), "--dtype"),
    (("kv", "llama-3.1-8b", "--gpu-memory-utilization", "0"), "--gpu-memory-utilization"),
    (("kv", "llama-3.1-8b", "--max-model-len", "0"), "--max-model-len"),
    (("simulate", "llama-3.1-8b", "--max-num-seqs", "0"), "--max-num-seqs"),
    (("predict", "llama-3.1-8b", "--target", "sglangx"), "--target"),
    (("analyze", "llama-3.1-8b", "--ep", "0"), "--ep"),
    (("simulate", "llama-3.1-8b", "--router", "rr", "--rate", "1"), "--router"),
])
def test_bad_values_name_the_option(capsys, args, named):
    line = one_error_line(capsys, *args)
    assert f"invalid value '{args[3]}' for {named}" in line, line


def test_vllm_scheduler_switches_parse(capsys):
    # parsed, then the command stops at its own check: no workload given
    line = one_error_line(capsys, "simulate", "llama-3.1-8b", "--no-enable-prefix-caching",
                          "--no-enable-chunked-prefill", "--enable-prefix-caching")
    assert "give exactly one workload" in line, line


@pytest.mark.parametrize(("given", "read"), [
    ("auto", None), ("AUTO", None), ("half", "fp16"), ("float16", "fp16"), ("bfloat16", "bf16"), ("float", "fp32"),
    ("float32", "fp32"), ("bf16", "bf16"),
])
def test_model_dtype_spellings_reach_every_reader(given, read):
    from graphsim.cli.options import _model_dtype
    from graphsim.costing.dtypes import parse_kernel_dtype

    assert _model_dtype(given) == read
    if read is not None:
        parse_kernel_dtype(read)
        if importlib.util.find_spec("torch") is not None:  # the HF importer takes it too
            from graphsim.importers.hf.build import config_dtype

            config_dtype({}, read)


def test_data_parallel_size_is_vllms_and_replicas_graphsims(capsys):
    # -dp is vLLM's --data-parallel-size (lockstep DP ranks on a MoE model); --replicas independent copies
    line = one_error_line(capsys, "simulate", "llama-3.1-8b", "-dp", "0")
    assert "--data-parallel-size / -dp" in line and "--replicas" not in line, line
    line = one_error_line(capsys, "simulate", "llama-3.1-8b", "--replicas", "0")
    assert "--replicas of" in line and "-dp" not in line, line


def test_deployment_and_search_configs_are_checked_once_with_every_bad_field(capsys):
    line = one_error_line(capsys, "kv", "llama-3.1-8b", "--activation-gib", "-1", "--overhead-gib", "nan")
    assert line.startswith("error: deployment config: memory.activation_gib: input should be greater than or equal to 0")
    assert "memory.overhead_gib: input should be a finite number (got nan)" in line, line
    line = one_error_line(capsys, "search", "llama-3.1-8b", "--tp", "0,1", "--kv-link-gbps", "-3")
    assert "error: search spec: tp.0: input should be greater than or equal to 1 (got 0)" in line, line
    assert "kv_link_gbps: input should be greater than 0 (got -3.0)" in line, line

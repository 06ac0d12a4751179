"""A hostile user's inputs to every `graphsim` command, and the check each run must pass.

`cases()` lists the runs: malformed files of every kind a command reads (model config, profile.db, ONNX,
saved graph, graph-cache entry, hardware spec, request trace, vLLM log, result files, captures, location
maps, speculative configs), out-of-range and conflicting numbers, and unwritable or pre-existing output
paths. `make_files(root)` writes the files they name (a `{d}` in an argument is that directory).
`run_case(case, root)` runs one in this process through `graphsim.cli.app.main` and returns what went
wrong, [] when nothing did:

- the exit code is the case's (2 for bad input, 0 for input that is valid);
- no traceback, and a refusal prints at most two lines on stderr (the `error:` line and a hint);
- an output file that existed before a refused run is unchanged, and no temporary is left beside it.

Used by tests/cli/test_bad_input_sweep.py (the default suite runs the fast cases, `-m slow` the rest) and
benchmarks/bad_input_sweep.py (the whole table, with a summary).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import sqlite3
import traceback
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

PREVIOUS = "previous output\n"  # what a pre-existing output file holds before a refused run

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "max_position_embeddings": 2048, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    want: int = 2  # exit code: 2 refused, 0 valid
    outputs: tuple[str, ...] = ()  # output files (under {d}) that exist before the run and must survive it
    slow: bool = False  # traces or prices a model, or runs a simulation
    says: str = ""  # a word the error line must hold (the problem it names)
    known: str = ""  # not fixed: why (the run is still reported)
    corrupt_cache: bool = False  # run in a $GRAPHSIM_HOME of its own whose graph-cache entries are damaged


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    crash: str = ""  # the traceback of an exception that escaped main()
    problems: list[str] = field(default_factory=list)


# --- the files --------------------------------------------------------------------------------------------
def _config(d: Path, name: str, text: str | bytes | None = None, **changes: object) -> None:
    p = d / name
    p.mkdir(parents=True, exist_ok=True)
    if text is None:
        cfg = dict(TINY)
        for k, v in changes.items():
            if v is ...:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        text = json.dumps(cfg)
    (p / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())


def _sqlite(path: Path, *sql: str) -> None:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    for s in sql:
        conn.execute(s)
    conn.commit()
    conn.close()


def _onnx_model() -> bytes | None:
    """A one-MatMul ONNX model's bytes (None without the onnx package)."""
    try:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    w = numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    return helper.make_model(graph).SerializeToString()


def make_files(root: Path) -> None:
    d = root
    # model configs
    _config(d, "tiny")
    _config(d, "cfg_empty", "")
    _config(d, "cfg_truncated", json.dumps(TINY)[:57])
    _config(d, "cfg_not_json", "hidden_size: 64\nnum_hidden_layers: 2\n")
    _config(d, "cfg_list", "[1, 2, 3]")
    _config(d, "cfg_binary", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    _config(d, "cfg_hidden_str", hidden_size="sixty-four")
    _config(d, "cfg_hidden_numeric_str", hidden_size="64")
    _config(d, "cfg_hidden_null", hidden_size=None)
    _config(d, "cfg_layers_negative", num_hidden_layers=-2)
    _config(d, "cfg_layers_bool", num_hidden_layers=True)
    _config(d, "cfg_heads_zero", num_attention_heads=0)
    _config(d, "cfg_heads_not_dividing", num_attention_heads=5, num_key_value_heads=5)
    _config(d, "cfg_kv_heads_not_dividing", num_key_value_heads=3)
    _config(d, "cfg_kv_heads_zero", num_key_value_heads=0)
    _config(d, "cfg_vocab_huge", vocab_size=10**13)
    _config(d, "cfg_unknown_type", model_type="nosuchmodel", architectures=["NoSuchForCausalLM"])
    _config(d, "cfg_unknown_arch", architectures=["FooBarForCausalLM"])
    _config(d, "cfg_arch_string", architectures="LlamaForCausalLM")
    _config(d, "cfg_arch_empty", architectures=[])
    _config(d, "cfg_no_type_no_arch", model_type=..., architectures=...)
    _config(d, "cfg_type_number", model_type=7)
    _config(d, "cfg_max_pos_zero", max_position_embeddings=0)
    _config(d, "cfg_dtype_bad", torch_dtype="float13")
    _config(d, "cfg_rope_bad", rope_scaling="yes please")
    _config(d, "cfg_deep", "[" * 100_000 + "]" * 100_000)
    _config(d, "cfg_quant_string", quantization_config="fp8 please")
    _config(d, "cfg_quant_unknown", quantization_config={"quant_method": "alchemy", "bits": 3})
    _config(d, "cfg_text_config_list", text_config=[1, 2])
    _config(d, "cfg_experts_negative", num_local_experts=-8, num_experts_per_tok=2)
    _config(d, "cfg_topk_over_experts", architectures=["MixtralForCausalLM"], model_type="mixtral",
            num_local_experts=4, num_experts_per_tok=9)
    _config(d, "cfg_layer_types_short", layer_types=["full_attention"])
    _config(d, "cfg_head_dim_zero", head_dim=0)
    _config(d, "cfg_dtype_number", torch_dtype=16)
    (d / "cfg_bad_quant_beside").mkdir(exist_ok=True)
    (d / "cfg_bad_quant_beside" / "config.json").write_text(json.dumps(TINY))
    (d / "cfg_bad_quant_beside" / "hf_quant_config.json").write_text("{quantization: fp8")
    (d / "cfg_symlink_loop").mkdir(exist_ok=True)
    loop = d / "cfg_symlink_loop" / "config.json"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    (d / "cfg_no_file").mkdir(exist_ok=True)
    (d / "cfg_config_is_dir" / "config.json").mkdir(parents=True, exist_ok=True)
    (d / "plain.txt").write_text("not a model\n")
    (d / "empty.json").write_text("")
    (d / "list.json").write_text("[]")
    (d / "garbage.json").write_text("{\"nodes\": [1, 2,")
    (d / "object.json").write_text('{"hello": "world"}')
    (d / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (d / "a_dir").mkdir(exist_ok=True)
    # profile databases
    (d / "db_text.db").write_text("this is not a database\n" * 50)
    (d / "db_empty.db").write_bytes(b"")
    _sqlite(d / "db_no_tables.db", "CREATE TABLE other (x INTEGER)")
    _sqlite(d / "db_meta_wrong_cols.db", "CREATE TABLE meta (a INTEGER, b INTEGER)", "INSERT INTO meta VALUES (1, 2)")
    _sqlite(d / "db_meta_only.db", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
            "INSERT INTO meta VALUES ('device', 'h200_sxm')")
    head = (d / "db_text.db").read_bytes()[:0]
    (d / "db_truncated.db").write_bytes(b"SQLite format 3\x00" + b"\x10\x00\x01\x01" + head + b"\x00" * 80)
    # ONNX
    (d / "garbage.onnx").write_bytes(b"\x08\x07\x12\x04onnx\xff\xfe\x00\x01" * 3)
    (d / "empty.onnx").write_bytes(b"")
    model = _onnx_model()
    if model is not None:  # a real ONNX file, whole and cut short
        (d / "ok.onnx").write_bytes(model)
        (d / "truncated.onnx").write_bytes(model[: len(model) // 2])
    # a gzip that is not
    (d / "bad.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    (d / "gz_not_json.json.gz").write_bytes(gzip.compress(b"{not json"))
    # hardware specs
    (d / "hw_not_json.json").write_text("memory_bytes = 1\n")
    (d / "hw_list.json").write_text("[1, 2]")
    (d / "hw_only_id.json").write_text('{"id": "mine"}')
    hw = json.loads((Path(__file__).parents[2] / "graphsim/profiles/hardware/h100_sxm.json").read_text())
    (d / "hw_negative.json").write_text(json.dumps(dict(hw, memory_bytes=-1)))
    (d / "hw_string_bw.json").write_text(json.dumps(dict(hw, memory_bandwidth_bytes_per_s="fast")))
    (d / "hw_zero_flops.json").write_text(json.dumps(dict(hw, peak_dense_flops_per_s=0)))
    # request traces
    (d / "trace_empty.jsonl").write_text("")
    (d / "trace_not_json.jsonl").write_text("arrival_s=0 input=5\n")
    (d / "trace_missing.jsonl").write_text('{"arrival_s": 0, "input_tokens": 10}\n')
    (d / "trace_negative.jsonl").write_text('{"arrival_s": -1, "input_tokens": 10, "output_tokens": 5}\n')
    (d / "trace_zero_input.jsonl").write_text('{"arrival_s": 0, "input_tokens": 0, "output_tokens": 5}\n')
    (d / "trace_huge_output.jsonl").write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 1e15}\n')
    (d / "trace_nan.jsonl").write_text('{"arrival_s": NaN, "input_tokens": 10, "output_tokens": 5}\n')
    (d / "trace_list_line.jsonl").write_text('[0, 10, 5]\n')
    (d / "trace_ok.jsonl").write_text('{"arrival_s": 0, "input_tokens": 16, "output_tokens": 4}\n'
                                      '{"arrival_s": 0.5, "input_tokens": 32, "output_tokens": 3}\n')
    # vLLM logs
    (d / "vllm_empty.log").write_text("")
    (d / "vllm_noise.log").write_text("hello\nthis is not a vllm log\n" * 5)
    (d / "vllm_bad_args.log").write_text(
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.10.1\n"
        "INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'x', 'tensor_parallel_size': 'two',\n")
    # result files (compare)
    (d / "result_no_duration.json").write_text('{"completed": 10}')
    (d / "result_ok.json").write_text(json.dumps({"duration": 10.0, "completed": 10, "mean_ttft_ms": 50.0}))
    (d / "result_nan.json").write_text('{"duration": NaN, "completed": "ten", "mean_ttft_ms": "fast"}')
    (d / "result_zero.json").write_text('{"duration": 0, "completed": 0, "mean_ttft_ms": 0}')
    # captures
    (d / "capture_events_junk.json").write_text('{"traceEvents": [1, "x", null, {"ph": "X"}]}')
    (d / "capture_kernels_junk.json").write_text('[{"name": 5, "dur": "long"}]')
    (d / "capture_ok.json").write_text(json.dumps({"format": "graphsim.kernels/1", "iterations": [
        {"label": "decode:1x16", "kernels": [{"name": "vllm::rms_norm_kernel", "duration_us": 3.0}]}]}))
    _sqlite(d / "capture_nsys_wrong.sqlite", "CREATE TABLE StringIds (id INTEGER, value TEXT)")
    (d / "capture_text.sqlite").write_text("SELECT 1;\n")
    # speculative configs (a file as well as inline JSON)
    (d / "spec_bad.json").write_text("{method: ngram")
    (d / "graph_wrong_types.json").write_text(json.dumps({"format": "graphsim-graph", "version": 1, "nodes": "x",
                                                          "modules": 5}))
    # outputs that exist before a run
    for name in ("out.json", "out.db", "out.csv", "out.png", "out.jsonl", "hw_out.json"):
        (d / name).write_text(PREVIOUS)


# --- the runs ---------------------------------------------------------------------------------------------
BAD_CONFIGS = {  # directory: a word the error must hold
    "cfg_empty": "", "cfg_truncated": "", "cfg_not_json": "", "cfg_list": "", "cfg_binary": "UTF-8",
    "cfg_hidden_str": "hidden_size", "cfg_hidden_null": "hidden_size", "cfg_layers_negative": "num_hidden_layers",
    "cfg_layers_bool": "num_hidden_layers", "cfg_heads_zero": "num_attention_heads",
    "cfg_heads_not_dividing": "", "cfg_kv_heads_not_dividing": "", "cfg_kv_heads_zero": "",
    "cfg_vocab_huge": "vocab_size", "cfg_unknown_type": "", "cfg_unknown_arch": "", "cfg_arch_string": "",
    "cfg_arch_empty": "", "cfg_no_type_no_arch": "", "cfg_type_number": "", "cfg_max_pos_zero": "",
    "cfg_dtype_bad": "", "cfg_rope_bad": "", "cfg_no_file": "", "cfg_config_is_dir": "",
    "cfg_deep": "", "cfg_quant_string": "", "cfg_quant_unknown": "", "cfg_text_config_list": "",
    "cfg_experts_negative": "", "cfg_topk_over_experts": "num_experts_per_tok", "cfg_layer_types_short": "", "cfg_head_dim_zero": "",
    "cfg_dtype_number": "", "cfg_bad_quant_beside": "", "cfg_symlink_loop": "",
}
MISSING_MODEL = ["", " ", "x" * 5000, "{d}/nul\x00byte", "/dev/null", "nosuchorg/nosuchmodel", "{d}/no_such_dir", "{d}/plain.txt", "{d}/empty.json", "{d}/binary.bin", "{d}/a_dir",
                 "{d}/garbage.onnx", "{d}/empty.onnx", "{d}/garbage.json", "{d}/object.json", "{d}/list.json"]
BAD_DBS = ["{d}/db_text.db", "{d}/db_empty.db", "{d}/db_no_tables.db", "{d}/db_meta_wrong_cols.db",
           "{d}/db_meta_only.db", "{d}/db_truncated.db", "{d}/a_dir", "{d}/no_such.db"]
BAD_HW = ["{d}/hw_not_json.json", "{d}/hw_list.json", "{d}/hw_only_id.json", "{d}/hw_negative.json",
          "{d}/hw_string_bw.json", "{d}/hw_zero_flops.json", "{d}/no_such_hw.json", "{d}/a_dir/", "nosuchgpu"]
BAD_TRACES = ["trace_empty", "trace_not_json", "trace_missing", "trace_negative", "trace_zero_input",
              "trace_huge_output", "trace_nan", "trace_list_line"]
BAD_SPEC_CONFIGS = ["{bad json", "[]", '{"method": "nosuch", "num_speculative_tokens": 2}',
                    '{"method": "ngram", "num_speculative_tokens": -1}', '{"method": "ngram", "num_speculative_tokens": 0}',
                    "{d}/spec_bad.json", "{d}/no_such_spec.json"]
UNWRITABLE = ["/proc/graphsim_out", "{d}/a_dir", "{d}/plain.txt/out.json", "{d}/" + "y" * 300 + ".json",
              "{d}/nul\x00.json"]  # a pseudo file system, a directory, a
# path under a file (a missing directory is not bad input: the writers make it)
T = "{d}/tiny"
S = ["--gpus", "1", "--isl", "100", "--osl", "10"]  # a search whose requests fit the tiny model's 2,048 positions


def cases() -> list[Case]:
    c: list[Case] = []

    def add(id_: str, *argv: str, **kw: object) -> None:
        c.append(Case(id_, tuple(argv), **kw))  # type: ignore[arg-type]

    # every command that reads a model, fed each bad config and each path that is not a model
    model_cmds = {"import": [], "work": [], "kv": [], "predict": [], "analyze": ["--no-table"],
                  "passes": ["--no-show"], "simulate": ["-n", "3", "--rate", "1"], "search": S,
                  "sweep": ["--rates", "1", "-n", "3"], "align": ["--capture", "{d}/capture_ok.json"],
                  "profile": ["-o", "{d}/new.db", "--quick", "--max-points", "1"]}
    for cmd, extra in model_cmds.items():
        is_profile = cmd == "profile"
        for name, says in BAD_CONFIGS.items():
            argv = ["profile", "--model", f"{{d}}/{name}", *extra] if is_profile else [cmd, f"{{d}}/{name}", *extra]
            add(f"{cmd} {name}", *argv, says=says)
        for path in MISSING_MODEL:
            argv = ["profile", "--model", path, *extra] if is_profile else [cmd, path, *extra]
            add(f"{cmd} model={path.rsplit('/', 1)[-1][:20]!r}", *argv)
        add(f"{cmd} unknown-catalog-name", *(["profile", "--model", "no-such-model-xyz", *extra] if is_profile
                                             else [cmd, "no-such-model-xyz", *extra]))
    # the valid tiny model: the baseline every bad case differs from
    add("work tiny (valid)", "work", T, want=0)
    add("kv tiny (valid)", "kv", T, want=0)
    add("import tiny (valid)", "import", T, "--text", want=0, slow=True)
    add("predict tiny (valid)", "predict", T, want=0, slow=True)
    add("simulate tiny (valid)", "simulate", T, "-n", "3", "--rate", "1", want=0, slow=True)
    add("search tiny (valid)", "search", T, *S, want=0, slow=True)
    add("capture show (valid)", "capture", "show", "{d}/capture_ok.json", want=0)
    add("search tiny default lengths over max_model_len", "search", T, "--gpus", "1", says="max_model_len")

    # profile.db files
    for db in BAD_DBS:
        leaf = db.rsplit("/", 1)[-1]
        add(f"profiles show {leaf}", "profiles", "show", db)
        add(f"predict --profile {leaf}", "predict", T, "--profile", db, slow=True)
        add(f"simulate --profile {leaf}", "simulate", T, "-n", "3", "--rate", "1", "--profile", db, slow=True)
        add(f"analyze --profile {leaf}", "analyze", T, "--no-table", "--profile", db, slow=True)
        add(f"align --profile {leaf}", "align", T, "--capture", "{d}/capture_ok.json", "--profile", db)
    # saved graphs / ONNX
    for path in ["{d}/garbage.json", "{d}/empty.json", "{d}/list.json", "{d}/object.json", "{d}/binary.bin",
                 "{d}/a_dir", "{d}/no_such.json", "{d}/garbage.onnx", "{d}/empty.onnx", "{d}/graph_wrong_types.json",
                 "{d}/cfg_deep/config.json", "{d}/nul\x00.json", "{d}/" + "z" * 300 + ".json"]:
        leaf = path.rsplit("/", 1)[-1][:20]
        add(f"show {leaf}", "show", path)
        add(f"passes {leaf}", "passes", path, "--no-show")
    # hardware specs
    for hw in BAD_HW:
        leaf = hw.rstrip("/").rsplit("/", 1)[-1]
        add(f"kv --gpu {leaf}", "kv", T, "--gpu", hw)
        add(f"predict --gpu {leaf}", "predict", T, "--gpu", hw)
        add(f"simulate --gpu {leaf}", "simulate", T, "-n", "3", "--rate", "1", "--gpu", hw)
        add(f"search --gpu {leaf}", "search", T, *S, "--gpu", hw)
        add(f"analyze --gpu {leaf}", "analyze", T, "--no-table", "--gpu", hw)
    # request traces
    for tr in [*BAD_TRACES, "no_such_trace", "a_dir"]:
        path = f"{{d}}/{tr}" if tr == "a_dir" else f"{{d}}/{tr}.jsonl"
        add(f"simulate --trace {tr}", "simulate", T, "--trace", path)
    # vLLM logs
    for log in ["{d}/vllm_empty.log", "{d}/vllm_noise.log", "{d}/vllm_bad_args.log", "{d}/binary.bin", "{d}/a_dir",
                "{d}/no_such.log"]:
        leaf = log.rsplit("/", 1)[-1]
        add(f"kv --from-vllm-log {leaf}", "kv", T, "--from-vllm-log", log)
        add(f"simulate --from-vllm-log {leaf}", "simulate", T, "-n", "3", "--rate", "1", "--from-vllm-log", log)
        if leaf != "vllm_bad_args.log":
            add(f"search --from-vllm-log {leaf}", "search", T, *S, "--from-vllm-log", log)
    # result files
    for p in ["{d}/empty.json", "{d}/garbage.json", "{d}/list.json", "{d}/binary.bin", "{d}/a_dir", "{d}/no_such.json",
              "{d}/result_no_duration.json", "{d}/result_nan.json", "{d}/result_zero.json"]:
        leaf = p.rsplit("/", 1)[-1]
        add(f"compare pred={leaf}", "compare", p, "{d}/result_ok.json")
        add(f"compare meas={leaf}", "compare", "{d}/result_ok.json", p)
    # captures
    for p in ["{d}/empty.json", "{d}/garbage.json", "{d}/list.json", "{d}/object.json", "{d}/binary.bin", "{d}/a_dir",
              "{d}/no_such.json", "{d}/bad.json.gz", "{d}/gz_not_json.json.gz", "{d}/capture_events_junk.json",
              "{d}/capture_kernels_junk.json", "{d}/capture_nsys_wrong.sqlite", "{d}/capture_text.sqlite",
              "{d}/db_empty.db"]:
        leaf = p.rsplit("/", 1)[-1]
        add(f"capture show {leaf}", "capture", "show", p)
        add(f"align --capture {leaf}", "align", T, "--capture", p, slow=True)
    # location maps
    for p in ["{d}/empty.json", "{d}/garbage.json", "{d}/list.json", "{d}/binary.bin", "{d}/a_dir", "{d}/no_such.json"]:
        leaf = p.rsplit("/", 1)[-1]
        add(f"analyze --map {leaf}", "analyze", T, "--no-table", "--map", p, slow=True)
    # speculative configs
    for i, s in enumerate(BAD_SPEC_CONFIGS):
        for cmd, extra in (("predict", []), ("kv", []), ("simulate", ["-n", "3", "--rate", "1"]),
                           ("search", [*S]), ("sweep", ["--rates", "1", "-n", "3"])):
            add(f"{cmd} --speculative-config #{i} {s[:24]}", cmd, T, *extra, "--speculative-config", s)
    # out-of-range and conflicting numbers
    ranges = {
        "kv": [["--tp", "3"], ["--tp", "64"], ["--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization", "0"],
               ["--gpu-memory-utilization", "-0.2"], ["--gpu-memory-utilization", "nan"], ["--max-model-len", "0"],
               ["--max-model-len", "-5"], ["--max-model-len", "99999999999"], ["--block-size", "0"],
               ["--max-num-seqs", "0"], ["--max-num-batched-tokens", "0"],
               ["--kv-memory", "-3"], ["--kv-memory", "lots"], ["--pipeline-parallel-size", "0"],
               ["--pipeline-parallel-size", "5"], ["--data-parallel-size", "0"], ["--pp-layer-partition", "1,1,1"],
               ["--pp-layer-partition", "x,y", "-pp", "2"], ["--activation-gib", "-1"], ["--overhead-gib", "nan"],
               ["--decode-context-parallel-size", "3"], ["--prefill-context-parallel-size", "0"],
               ["--engine", "nosuch"], ["--mem-fraction-static", "2"], ["--kv-cache-free-gpu-memory-fraction", "-1"],
               ["--kv-memory", "1e30"]],
        "predict": [["--tp", "3"], ["--batch", "decode:0x128"], ["--batch", "prefill:1x0"], ["--batch", "nonsense"],
                    ["--batch", "decode:1x99999999999"], ["--pipeline-parallel-size", "0"],
                    ["--data-parallel-size", "0"], ["--link-bandwidth", "-1"], ["--network-latency-us", "-1"],
                    ["--gpus-per-node", "0"], ["--interconnect", "carrier-pigeon"], ["--moe-routing", "psychic"],
                    ["--spec-acceptance", "1.5"], ["--spec-acceptance", "abc"], ["--afd-micro-batches", "0"],
                    ["--afd", "--afd-attention-tp", "3"], ["--limit", "-1"], ["--target", "tensorrt-xl"],
                    ["--all2all-backend", "smoke-signals"]],
        "simulate": [["-n", "3", "--rate", "-1"], ["-n", "3", "--rate", "0"], ["-n", "0", "--rate", "1"],
                     ["-n", "3", "--rate", "1", "--max-num-seqs", "0"], ["-n", "3", "--rate", "1", "--input-len", "0"],
                     ["-n", "3", "--rate", "1", "--output-len", "99999999999999"],
                     ["-n", "3", "--rate", "1", "--gpu-memory-utilization", "1.5"],
                     ["-n", "3", "--rate", "1", "--concurrency", "4"],
                     ["-n", "3", "--concurrency", "0"], ["-n", "3", "--rate", "1", "--trace", "{d}/trace_ok.jsonl"],
                     ["-n", "3", "--rate", "1", "--max-num-batched-tokens", "0"],
                     ["-n", "3", "--rate", "1", "--block-size", "0"], ["-n", "3", "--rate", "1", "--tp", "3"],
                     ["-n", "3", "--rate", "1", "--replicas", "0"], ["-n", "3", "--rate", "1", "--router", "random-ish"],
                     ["-n", "3", "--rate", "1", "--arrival", "lognormal"], ["-n", "3", "--rate", "1", "--cv", "-1"],
                     ["-n", "3", "--rate", "1", "--shared-prefix", "5000", "--input-len", "100"],
                     ["-n", "3", "--rate", "1", "--prefix-groups", "0"], ["-n", "3", "--rate", "1", "--think-s", "-1"],
                     ["-n", "3", "--rate", "1", "--dataset-name", "imagenet"],
                     ["-n", "3", "--rate", "1", "--random-range-ratio", "2"],
                     ["-n", "3", "--rate", "1", "--random-input-len", "0"],
                     ["-n", "3", "--rate", "1", "--burstiness", "0"],
                     ["-n", "3", "--rate", "1", "--percentile-metrics", "nope"],
                     ["-n", "3", "--rate", "1", "--metric-percentiles", "150"],
                     ["-n", "3", "--rate", "1", "--metric-percentiles", "abc"],
                     ["-n", "3", "--rate", "1", "--trace-sample", "-1"], ["-n", "3", "--rate", "1", "--kv-memory", "0"],
                     ["-n", "3", "--rate", "1", "--max-model-len", "4"],
                     ["-n", "3", "--rate", "1", "--afd-micro-batches", "0"],
                     ["-n", "3", "--rate", "1", "--pp-layer-partition", "5,5", "-pp", "2"],
                     ["-n", "3", "--rate", "1", "--data-parallel-size", "0"]],
        "search": [[*S, "--isl", "0"], [*S, "--osl", "-4"], [*S, "--mode", "chaos"],
                   [*S, "--tp", "0"], [*S, "--tp", "a,b"], [*S, "--max-num-seqs", "0"],
                   [*S, "--max-num-batched-tokens", "-1"], [*S, "--gpu-memory-utilization", "1.5"],
                   [*S, "--kv-link-gbps", "-1"], [*S, "--target-request-rate", "-1"],
                   [*S, "--target-concurrency", "0"], [*S, "--backend", "quantum"],
                   [*S, "--workers", "0"], [*S, "--pipeline-parallel-size", "0"],
                   [*S, "--target-request-rate", "1", "--target-concurrency", "2"],
                   [*S, "--decode-context-parallel-size", "x"], [*S, "--spec-acceptance", "2"],
                   [*S, "--prefill-batched-tokens", "0"]],
        "sweep": [["--rates", "-1", "-n", "3"], ["--rates", "a,b", "-n", "3"], ["--rates", "", "-n", "3"],
                  ["--concurrencies", "0", "-n", "3"], ["--rates", "1", "--concurrencies", "2", "-n", "3"],
                  ["-n", "3"], ["--rates", "1", "-n", "0"], ["--rates", "1", "-n", "3", "--input-len", "0"],
                  ["--rates", "1", "-n", "3", "--max-num-seqs", "0"]],
        "work": [["--prefill", "0"], ["--decode", "-1"], ["--prefill", "abc"], ["--state-dtype", "fp3"]],
        "analyze": [["--batch", "decode:0x1", "--no-table"], ["--tp", "3", "--no-table"], ["--ep", "3", "--no-table"]],
        "passes": [["--pipeline", "fold,nosuchpass"], ["--pipeline", "fuse{target=nowhere}"], ["--pipeline", "tp{size=0}"],
                   ["--pipeline", "tp{size=3}"], ["--pipeline", "fold{"], ["--pipeline", ""]],
    }
    for cmd, variants in ranges.items():
        for v in variants:
            slow = cmd in ("simulate", "sweep", "search", "predict") and not any(
                x in v for x in ("0", "-1", "-4", "1.5", "2", "nope", "abc", "150"))
            add(f"{cmd} {' '.join(v)}", cmd, T, *v, slow=slow)
    # a tp that does not divide the query heads (TINY's 4 at tp 3): kv, simulate and predict quote vLLM's own refusal
    # in one line (graphsim/vllm_checks.py; ModelConfig.verify_with_parallel_config checks it before anything else)
    for cmd, extra in (("kv", []), ("simulate", ["-n", "3", "--rate", "1"]), ("predict", [])):
        add(f"{cmd} --tp 3 (heads) quotes vLLM", cmd, T, *extra, "--tp", "3",
            says="'Total number of attention heads (4) must be divisible by tensor parallel size (3)'")
    for v in (["--kinds", "nosuchkind"], ["--device", "tpu"], ["--max-m", "0"], ["--max-kv", "-1"], ["--threads", "0"],
              ["--max-points", "-5"], ["--target", "chaos"]):
        add(f"profile {' '.join(v)}", "profile", "--model", T, "-o", "{d}/new_profile.db", "--quick", "--max-points", "1", *v)
    for v in (["--system", "no_such_system", "--backend", "vllm"], ["--system", "h200_sxm", "--backend", "nope"],
              ["--system", "h200_sxm", "--backend", "vllm", "--version", "0.0.0.0"],
              ["--system", "h200_sxm", "--backend", "vllm", "--tables", "nosuchtable"]):
        add(f"profiles import-aiconfigurator {' '.join(v)}", "profiles", "import-aiconfigurator", *v,
            "-o", "{d}/imported.db")
    more = [
        ["kv", T, "--kv-memory", "12 parsecs"], ["kv", T, "--kv-memory", "-1GiB"], ["kv", T, "--kv-memory", "nanGiB"],
        ["kv", T, "--gpu", ""], ["predict", T, "--batch", "decode:1x1@999999999999"], ["predict", T, "--batch", ""],
        ["predict", T, "--speculative-config",
         '{"method": "eagle", "model": "{d}/cfg_truncated", "num_speculative_tokens": 2}'],
        ["predict", T, "--speculative-config", '{"method": "draft_model", "model": "{d}/no_such_draft", '
         '"num_speculative_tokens": 2}'],
        ["analyze", T, "--no-table", "--map", "{d}/object.json"], ["analyze", T, "--no-table", "--map", "{d}/list.json"],
        ["passes", T, "--no-show", "--pipeline", "tp{size=abc}"], ["passes", T, "--no-show", "--pipeline", "fold{x=1}"],
        ["align", T, "--capture", "{d}/capture_ok.json", "--iteration", "99999"],
        ["align", T, "--capture", "{d}/capture_ok.json", "--phase", "nosuchphase"],
        ["align", T, "--capture", "{d}/capture_ok.json", "--range", "("],
        ["capture", "show", "{d}/capture_ok.json", "--phase", "nosuchphase"],
        ["simulate", T, "-n", "3", "--rate", "1", "--percentile-metrics", ""],
        ["simulate", T, "-n", "3", "--rate", "1", "--metric-percentiles", ""],
        ["simulate", T, "-n", "3", "--rate", "1", "--metric-percentiles", "nan"],
        ["simulate", T, "-n", "3", "--rate", "1", "--spec-acceptance", "-0.5"],
        ["sweep", T, "--rates", "1,nan", "-n", "3"],
        ["search", T, *S, "--max-num-seqs", "1e3"], ["search", T, *S, "--tp", "-2"],
        ["search", T, *S, "--isl", "5:1"], ["work", T, "--prefill", "1e99"], ["work", T, "--decode", "decode:1x1"],
        ["kv", T, "--dtype", ""], ["kv", T, "--engine", "vllm==0.0.1"],
        ["kv", T, "--engine", "vllm==banana"], ["predict", T, "--engine", "sglang==-1"],
    ]
    for argv in more:
        add(" ".join(a[:40] for a in argv).replace("{d}/tiny", "tiny"), *argv)
    # valid, though they look odd: vllm bench serve takes --request-rate inf (every request at once) and any
    # positive rate; empty items of a comma list are skipped; 2 layers in one pipeline stage is the tiny model
    for argv in (["passes", T, "--no-show", "--pipeline", "fuse{target=vllm,,}"],
                 ["simulate", T, "-n", "3", "--rate", "inf"], ["simulate", T, "-n", "3", "--rate", "1e-300"], ["sweep", T, "--rates", "inf", "-n", "3"],
                 ["sweep", T, "--concurrencies", "1,,2", "-n", "3"], ["search", T, *S, "--tp", "1,,2"],
                 ["kv", T, "--pp-layer-partition", "2", "-pp", "1"]):
        add(" ".join(a[:40] for a in argv).replace("{d}/tiny", "tiny") + " (valid)", *argv, want=0)
    for cmd in (["import"], ["passes"], ["show"], ["predict"]):
        add(f"{cmd[0]} truncated.onnx", *cmd, "{d}/truncated.onnx")
    add("passes ok.onnx (valid)", "passes", "{d}/ok.onnx", "--no-show", want=0)
    for cmd in (["work"], ["kv"], ["simulate", "-n", "3", "--rate", "1"], ["analyze", "--no-table"]):  # config readers
        add(f"{cmd[0]} ok.onnx", cmd[0], "{d}/ok.onnx", *cmd[1:], says="is an ONNX file, not a model config")
    add("compare same file (valid)", "compare", "{d}/result_ok.json", "{d}/result_ok.json", want=0)
    add("capture show --range bad regex", "capture", "show", "{d}/capture_kernels_junk.json", "--range", "(")
    # valid: graphsim's own --ep on a dense model has no experts to place; search tries its own TP sizes, so a
    # log's malformed tensor_parallel_size is not read (it is listed as not used). vLLM's --enable-expert-parallel
    # on a dense model is refused, as vLLM refuses it (ModelConfig._verify_with_expert_parallelism, 0.10.1 and 0.19:
    # "Number of experts in the model must be greater than 0 when expert parallelism is enabled")
    add("predict --ep 3 dense (valid)", "predict", T, "--ep", "3", want=0)
    add("predict --enable-expert-parallel dense", "predict", T, "--enable-expert-parallel", says="no routed experts")
    add("search --from-vllm-log vllm_bad_args.log (TP not read)", "search", T, *S, "--from-vllm-log",
        "{d}/vllm_bad_args.log", want=0, slow=True)
    # vLLM 0.19 takes any block size (vllm/config/cache.py `block_size: int`; 0.10.1 allowed 1, 8, …, 128)
    add("kv --block-size 7 (valid)", "kv", T, "--block-size", "7", want=0)
    add("models --json (valid)", "models", "--json", want=0)
    add("profiles hardware (valid)", "profiles", "hardware", want=0)
    add("cache info (valid)", "cache", "info", want=0)

    # outputs: unwritable paths, and a pre-existing file that a refused run must leave as it was
    for path in UNWRITABLE:
        leaf = path.rsplit("/", 1)[-1][:20]
        add(f"import -o {leaf}", "import", T, "-o", path, slow=True)
        add(f"passes -o {leaf}", "passes", T, "--no-show", "-o", path, slow=True)
        add(f"profiles measure-cpu -o {leaf}", "profiles", "measure-cpu", "-o", path)
        add(f"profile -o {leaf}", "profile", "--model", T, "-o", path, "--quick", "--max-points", "1")
        add(f"profiles import-aiconfigurator -o {leaf}", "profiles", "import-aiconfigurator", "--system", "h200_sxm",
            "--backend", "vllm", "-o", path)
        for opt in ("--save-result", "--save-detailed", "--iteration-log", "--chrome-trace", "--requests-out", "--plot"):
            add(f"simulate {opt} {leaf}", "simulate", T, "-n", "3", "--rate", "1", opt, path, slow=True)
        save_dir = {"graphsim_out": "/proc/graphsim_dir", "a_dir": "{d}/plain.txt"}.get(leaf, path)  # a dir is valid
        add(f"search --save-dir {save_dir.rsplit('/', 1)[-1]}", "search", T, *S, "--save-dir", save_dir, slow=True)
        add(f"search --plot {leaf}", "search", T, *S, "--plot", path, slow=True)
        add(f"sweep --plot {leaf}", "sweep", T, "--rates", "1", "-n", "3", "--plot", path, slow=True)
        add(f"analyze --draft-map {leaf}", "analyze", T, "--no-table", "--draft-map", path, slow=True)
    for bad in ("cfg_truncated", "cfg_heads_zero"):
        add(f"import {bad} -o existing", "import", f"{{d}}/{bad}", "-o", "{d}/out.json", outputs=("out.json",))
        add(f"passes {bad} -o existing", "passes", f"{{d}}/{bad}", "-o", "{d}/out.json", outputs=("out.json",))
        add(f"simulate {bad} --save-result existing", "simulate", f"{{d}}/{bad}", "-n", "3", "--rate", "1",
            "--save-result", "{d}/out.json", "--save-detailed", "--requests-out", "{d}/out.jsonl",
            "--iteration-log", "{d}/out.csv", outputs=("out.json", "out.jsonl", "out.csv"))
        add(f"profile {bad} -o existing", "profile", "--model", f"{{d}}/{bad}", "-o", "{d}/out.db", "--quick",
            outputs=("out.db",))
        add(f"analyze {bad} --draft-map existing", "analyze", f"{{d}}/{bad}", "--no-table", "--draft-map",
            "{d}/out.json", outputs=("out.json",))
        add(f"search {bad} --plot existing", "search", f"{{d}}/{bad}", *S, "--plot", "{d}/out.png",
            outputs=("out.png",))
        add(f"sweep {bad} --plot existing", "sweep", f"{{d}}/{bad}", "--rates", "1", "-n", "3", "--plot",
            "{d}/out.png", outputs=("out.png",))
    add("simulate bad rate --save-result existing", "simulate", T, "-n", "3", "--rate", "-1", "--save-result",
        "{d}/out.json", outputs=("out.json",))
    add("profiles import-aiconfigurator bad system -o existing", "profiles", "import-aiconfigurator", "--system",
        "no_such_system", "--backend", "vllm", "-o", "{d}/out.db", outputs=("out.db",))
    add("profile -o existing without --overwrite", "profile", "--model", T, "-o", "{d}/out.db", "--quick",
        "--max-points", "1", outputs=("out.db",))
    add("profiles import-aiconfigurator -o existing text file", "profiles", "import-aiconfigurator", "--system",
        "h200_sxm", "--backend", "vllm", "--tables", "gemm", "-o", "{d}/out.db", outputs=("out.db",), slow=True)
    add("profiles measure-cpu -o dir/", "profiles", "measure-cpu", "-o", "{d}/a_dir/")
    # damaged graph-cache entries: a notice, the model traced again (valid runs)
    for argv in (["predict", T], ["passes", T, "--no-show"], ["cache", "info"], ["cache", "clear"]):
        add(f"{' '.join(argv[:1] if argv[0] != 'cache' else argv)} with damaged cache entries (valid)", *argv, want=0,
            corrupt_cache=True, slow=argv != ["cache", "info"])
    return [_sampled(x) for x in c]


# Commands that refuse bad input without tracing a model: all their cases run in the default suite; of the others'
# a fixed eighth do (chosen by a hash of the case's id), and every case runs with `-m slow`.
CHEAP = ("work", "show", "compare", "capture", "profiles", "models", "cache")


def _sampled(case: Case) -> Case:
    if case.slow or case.argv[0] in CHEAP or zlib.crc32(case.id.encode()) % 8 == 0:
        return case
    return replace(case, slow=True)


# --- one run ----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _home(root: Path, corrupt: bool):
    """With `corrupt`: a $GRAPHSIM_HOME of the case's own, whose graph cache holds the tiny model's entries
    truncated, one binary entry and one that is valid JSON of the wrong shape (the suite's cache is left alone)."""
    if not corrupt:
        yield
        return
    import os

    from graphsim.cli.app import main
    from graphsim.importers.graph_cache import cache_dir

    old = os.environ.get("GRAPHSIM_HOME")
    os.environ["GRAPHSIM_HOME"] = str(root / "home_damaged_cache")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["import", str(root / "tiny"), "--text"])  # fills the cache
        entries = sorted(cache_dir().glob("*.json"))
        for p in entries:
            p.write_bytes(p.read_bytes()[:100])
        (cache_dir() / ("0" * 64 + ".json")).write_bytes(bytes(range(256)))
        (cache_dir() / ("1" * 64 + ".json")).write_text('{"format": "graphsim-graph-cache", "graph": 7}')
        yield
    finally:
        if old is None:
            os.environ.pop("GRAPHSIM_HOME", None)
        else:
            os.environ["GRAPHSIM_HOME"] = old


def expand(case: Case, root: Path) -> list[str]:
    return [a.replace("{d}", str(root)) for a in case.argv]


@contextlib.contextmanager
def _logs_to(stream: io.StringIO):
    """Log handlers made before the case (torch's, at its import) hold the stderr of that time, which
    redirect_stderr does not reach: point every stream handler at the case's stderr while it runs, so what a user
    would see on their terminal is what the case is judged on."""
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    handlers = {h for lg in loggers for h in lg.handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)}
    old = {h: h.setStream(stream) for h in handlers}
    try:
        yield
    finally:
        for h, s in old.items():
            if s is not None:
                h.setStream(s)


def run_case(case: Case, root: Path) -> Outcome:
    from graphsim.atomic import leftover_temporaries
    from graphsim.cli.app import main

    for name in case.outputs:
        (root / name).write_text(PREVIOUS)
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    crash = ""
    with (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _logs_to(err),
          _home(root, case.corrupt_cache)):
        try:
            code = main(expand(case, root))
        except BaseException:  # an exception that escapes main() is a traceback for the user
            crash = traceback.format_exc()
    o = Outcome(code, out.getvalue(), err.getvalue(), crash)
    if crash:
        o.problems.append(f"traceback: {crash.strip().splitlines()[-1][:300]}")
    elif code != case.want:
        o.problems.append(f"exit {code}, want {case.want}: {o.err.strip()[-300:]!r}")
    if "Traceback" in o.err + o.out:
        o.problems.append("a traceback on the output")
    if code == 2 and not crash:
        lines = [ln for ln in o.err.splitlines() if ln.strip() and not ln.startswith("notice:")]
        if not lines or not lines[0].startswith("error:"):
            o.problems.append(f"no error: line: {o.err[:300]!r}")
        elif len(lines) > 2:
            o.problems.append(f"{len(lines)} lines on stderr: {o.err[:300]!r}")
        if case.says and case.says not in o.err:
            o.problems.append(f"the error does not name {case.says!r}: {o.err.strip()[:300]!r}")
        for name in case.outputs:
            p = root / name
            if not p.is_file() or p.read_text(errors="replace") != PREVIOUS:
                o.problems.append(f"the pre-existing {name} was changed by a refused run")
    if leftover_temporaries(root):
        o.problems.append(f"temporaries left: {[p.name for p in leftover_temporaries(root)]}")
    return o

"""Launch files for SGLang and TensorRT-LLM: every parameter the prediction assumed is on the command line (or in
TensorRT-LLM's LLM-API options file) with the value plan_deployment resolved."""

import pytest

from graphsim.serving import SLO, Lengths
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.engines import sglang_memory_defaults
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec


def _spec(engine: str) -> SearchSpec:
    return SearchSpec.parse(dict(base={"model": "llama-3.1-8b", "hardware": "h200_sxm",
                                       "engine": {"engine": engine, "max_model_len": 8192}},
                                 gpus=8, isl=Lengths(1024, 1024), osl=Lengths(128, 128), slo=SLO(1000, 20), seed=0))


def _flag(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, flag
    return argv[argv.index(flag) + 1]


def _agg(tp: int, seqs: int, mnbt: int) -> Candidate:
    return Candidate(0, "agg", (PoolConfig("agg", tp, 1, 1, seqs, mnbt),), 1, seqs)


def test_sglang_launch_matches_the_prediction(tmp_path):
    from graphsim.serving.launch import parse_launch_sh, write_launch_files

    spec = _spec("sglang")
    write_launch_files(tmp_path, spec, _agg(2, 96, 4096), 2, 8, {})
    text = (tmp_path / "launch.sh").read_text()
    assert "python -m sglang.launch_server" in text and "vllm serve" not in text
    cmds = parse_launch_sh(text)
    assert len(cmds) == 2
    dep = plan_deployment(spec.base.derive(tensor_parallel_size=2, max_num_batched_tokens=4096, max_num_seqs=96))
    for argv in cmds:
        assert _flag(argv, "--model-path") == "meta-llama/Llama-3.1-8B"
        assert _flag(argv, "--tp-size") == "2"
        assert _flag(argv, "--max-running-requests") == "96"
        assert _flag(argv, "--chunked-prefill-size") == "4096"
        assert _flag(argv, "--context-length") == "8192"
        assert _flag(argv, "--page-size") == "1" == str(dep.layout.block_size)
        # the fraction the KV budget assumed, SGLang's for chunk 4096 at tp 2 on an H200 (144384 MiB):
        # reserved = max(512 + 4096 × 1.5 + 256 × 2 + 2 / 8 × 1024, 10240) = max(7424, 10240) = 10240 MiB
        # → round((144384 − 10240) / 144384, 3) = round(0.92908, 3) = 0.929
        assert float(_flag(argv, "--mem-fraction-static")) == dep.budget.utilization == 0.929
        assert sglang_memory_defaults(dep.hardware.memory_bytes, 2, chunked_prefill_size=4096).reserved_mib == 10240
        assert "--disable-radix-cache" not in argv  # the radix cache the prediction simulated


def test_trtllm_launch_and_options_file_match_the_prediction(tmp_path):
    yaml = pytest.importorskip("yaml")
    from graphsim.serving.launch import parse_launch_sh, write_launch_files

    spec = _spec("trtllm")
    paths = write_launch_files(tmp_path, spec, _agg(4, 256, 8192), 1, 8, {})
    assert [p.name for p in paths] == ["launch.sh", "deployment.yaml", "prediction.json", "extra_llm_api_options.yaml"]
    (argv,) = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert argv[0] == "meta-llama/Llama-3.1-8B" and _flag(argv, "--backend") == "pytorch"
    assert (_flag(argv, "--tp_size"), _flag(argv, "--max_batch_size"), _flag(argv, "--max_num_tokens"),
            _flag(argv, "--max_seq_len")) == ("4", "256", "8192", "8192")
    assert float(_flag(argv, "--kv_cache_free_gpu_memory_fraction")) == 0.9
    opts = yaml.safe_load((tmp_path / _flag(argv, "--extra_llm_api_options")).read_text())
    dep = plan_deployment(spec.base.derive(tensor_parallel_size=4, max_num_batched_tokens=8192, max_num_seqs=256))
    assert opts["enable_chunked_prefill"] is dep.engine.enable_chunked_prefill is False
    assert opts["kv_cache_config"]["tokens_per_block"] == dep.layout.block_size == 32
    assert opts["kv_cache_config"]["enable_block_reuse"] is True
    docs = list(yaml.safe_load_all((tmp_path / "deployment.yaml").read_text()))
    (ctr,) = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    assert ctr["command"] == ["trtllm-serve"] and ctr["args"] == argv

"""--engine sglang / trtllm through the CLI: kv capacity from the engines' own formulas, and bad input in one line."""

import json

import pytest

from graphsim.cli.app import main


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GRAPHSIM_NO_AUTO_PROFILE", "1")
    monkeypatch.setenv("COLUMNS", "200")


def _kv(capsys, *args):
    assert main(["kv", "llama-3.1-8b", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_kv_given_memory_pages_per_engine(capsys):
    # Llama-3.1-8B: 32 layers × 2 (K,V) × 8 kv heads × 128 × 2 B = 131,072 B per token; 10 GiB / 131,072 = 81,920
    for engine, block in (("sglang", 1), ("trtllm", 32)):
        d = _kv(capsys, "--gpu", "h100", "--engine", engine, "--kv-memory", "10GiB")
        assert d["capacity"]["engine"].startswith(engine + "==")
        assert d["layout"]["bytes_per_block"] == 131_072 * block
        assert d["capacity"]["num_blocks"] == 81_920 // block and d["capacity"]["tokens"] == 81_920
    # SGLang's max_running_requests: min(max(min(81920 / 131072 × 512 = 320, 4096), 2048), 81920 // 2) = 2048
    assert _kv(capsys, "--gpu", "h100", "--engine", "sglang", "--kv-memory", "10GiB")["engine"]["max_num_seqs"] == 2048


def test_kv_sglang_budget_is_its_formula(capsys):
    # rest = total × mem_fraction_static − weights (− what was in use before the weights, scaled the same);
    # H200 tp1: mem_fraction_static 0.907 (test_engine_scheduling derives it)
    d = _kv(capsys, "--gpu", "h200", "--engine", "sglang")
    m = d["memory"]
    assert m["gpu_memory_utilization"] == 0.907
    terms = {t["name"]: t["bytes"] for t in m["terms"]}
    assert terms["runtime overhead (non-torch)"] == int(0.5 * 2**30 * 0.907)
    assert m["available_bytes"] == -(-151_397_597_184 * 907 // 1000) - sum(terms.values())


def test_kv_trtllm_budget_is_nine_tenths_of_what_is_left(capsys):
    d = _kv(capsys, "--gpu", "h200", "--engine", "trtllm")["memory"]
    terms = {t["name"]: t["bytes"] for t in d["terms"]}
    vllm = _kv(capsys, "--gpu", "h200", "--engine", "vllm", "--max-num-batched-tokens", "8192",
               "--max-num-seqs", "2048")["memory"]
    unscaled = {t["name"]: t["bytes"] for t in vllm["terms"]}
    # the same terms as vLLM's accounting at TRT-LLM's max_num_tokens 8192 / max_batch_size 2048, each × 0.9 ...
    over = "runtime overhead (non-torch)"
    assert all(terms[k] == int(unscaled[k] * 0.9) for k in unscaled if k != over)
    # ... but the non-torch memory: vLLM's is the median of its TP1 start-up logs (0.07 GiB, serving/non_torch.py),
    # TensorRT-LLM keeps the assumed 0.5 GiB (those logs are vLLM's), × 0.9
    assert unscaled[over] == int(0.07 * 2**30) and terms[over] == int(int(0.5 * 2**30) * 0.9)
    assert d["available_bytes"] == -(-151_397_597_184 * 9 // 10) - sum(terms.values())


@pytest.mark.parametrize("args", [
    ["kv", "llama-3.1-8b", "--engine", "sglang=0.5"],
    ["kv", "llama-3.1-8b", "--engine", "lmdeploy"],
    ["predict", "llama-3.1-8b", "--engine", "trtllm==next"],
    ["simulate", "llama-3.1-8b", "--engine", "auto"],
    ["search", "llama-3.1-8b", "--engine", "vllm==x"],
    ["search", "llama-3.1-8b", "--engine", "auto", "--save-dir", "/tmp/x"],
    ["kv", "llama-3.1-8b", "--engine", "sglang", "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}'],
    ["kv", "llama-3.1-8b", "--engine", "trtllm", "--tp", "2", "-dcp", "2"],
    ["kv", "llama-3.1-8b", "--mem-fraction-static", "0.8"],  # SGLang's setting with vLLM
    ["kv", "llama-3.1-8b", "--engine", "sglang", "--kv-cache-free-gpu-memory-fraction", "0.5"],
])
def test_bad_engine_is_one_line_exit_2(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "engine" in err and "Traceback" not in err


@pytest.mark.slow
def test_search_engine_auto_reports_each_engine(capsys):
    args = ["search", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--isl", "1024", "--osl", "128", "--ttft",
            "1000", "--tpot", "40", "--max-num-seqs", "4,16", "--max-num-batched-tokens", "2048", "--mode", "agg",
            "--verify", "1", "--refine", "0", "--engine", "auto", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["per_engine"]) == {"vllm", "sglang", "trtllm"} and d["best_engine"] in d["per_engine"]
    best = d["per_engine"][d["best_engine"]]
    assert best["output_tokens_per_s_per_gpu"] == max(p["output_tokens_per_s_per_gpu"] for p in d["per_engine"].values()
                                                      if p["meets_slos"] == best["meets_slos"])
    # each engine's search ran its own kernels and scheduler: TRT-LLM has no rotary kernel, SGLang runs prefill
    # steps alone, so their bests differ from vLLM's (all on the roofline here: no tables in the isolated home)
    figures = {e: p["output_tokens_per_s_per_gpu"] for e, p in d["per_engine"].items()}
    assert len(set(figures.values())) == 3, figures


@pytest.mark.slow
def test_search_engine_auto_for_a_load(capsys):
    args = ["search", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--isl", "1024", "--osl", "128", "--ttft",
            "1000", "--tpot", "40", "--max-num-seqs", "16,64", "--max-num-batched-tokens", "4096", "--mode", "agg",
            "--verify", "1", "--engine", "auto", "--target-request-rate", "10", "--max-gpus", "8", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    per = d["per_engine"]
    assert set(per) == {"vllm", "sglang", "trtllm"}
    answered = [p for p in per.values() if p["gpus"] is not None]
    assert answered and per[d["best_engine"]]["gpus"] == min(p["gpus"] for p in answered)


def test_kv_engine_fractions(capsys):
    assert _kv(capsys, "--gpu", "h200", "--engine", "sglang", "--mem-fraction-static", "0.8")["memory"][
        "gpu_memory_utilization"] == 0.8
    assert _kv(capsys, "--gpu", "h200", "--engine", "trtllm", "--kv-cache-free-gpu-memory-fraction", "0.5")["memory"][
        "gpu_memory_utilization"] == 0.5

"""graphsim predict / kv with vLLM's --data-parallel-size, --enable-expert-parallel and --all2all-backend:
the per-rank KV accounting by hand, the DP prediction's JSON, and bad values as one line with exit 2."""

import json

import pytest

from graphsim.cli.app import main


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))


def run_json(capsys, *args):
    code = main([*list(args), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def weights(doc) -> int:
    return next(t["bytes"] for t in doc["memory"]["terms"] if t["name"] == "weights")


def test_kv_each_dp_rank_holds_a_share_of_the_routed_experts(capsys):
    # Qwen3-30B-A3B (bf16): 48 layers × 128 experts × 3 matrices × 2048 × 768 × 2 B = 57,982,058,496 B routed;
    # DP 8 leaves 1/8 of them on each GPU, everything else whole (tp 1): 7/8 × 57,982,058,496 = 50,734,301,184 B less
    one = run_json(capsys, "kv", "qwen3-30b-a3b", "--gpu", "h200")
    dp8 = run_json(capsys, "kv", "qwen3-30b-a3b", "--gpu", "h200", "-dp", "8", "--enable-expert-parallel")
    tp_sharded = run_json(capsys, "kv", "qwen3-30b-a3b", "--gpu", "h200", "--data-parallel-size", "8")
    assert weights(one) - weights(dp8) == 50_734_301_184
    assert weights(tp_sharded) == weights(dp8)  # EP or TP-sharded over dp × tp: the same bytes per GPU


def test_kv_capacity_is_per_rank_as_vllm_logs_it(capsys):
    # DeepSeek-V3's MLA cache: 64-token blocks × 61 layers × (512 + 64) × 2 B = 4,497,408 B; a rank with 30 GiB
    # available (vLLM's per-worker "Available KV cache memory") holds 32,212,254,720 // 4,497,408 = 7162 blocks
    # = 458,368 tokens, whatever the other ranks hold
    for dp in ("1", "8"):
        doc = run_json(capsys, "kv", "deepseek-v3", "--gpu", "h200", "-dp", dp, "--kv-memory", "30GiB")
        cap = doc["capacity"]
        assert (cap["bytes_per_block"], cap["num_blocks"], cap["tokens"]) == (4_497_408, 7162, 458_368)


@pytest.mark.slow
def test_predict_dp_json(capsys):
    pytest.importorskip("torch")
    doc = run_json(capsys, "predict", "qwen3-30b-a3b", "--gpu", "h200", "-dp", "4", "--enable-expert-parallel",
                   "--all2all-backend", "deepep_low_latency", "-b", "decode:8x512|decode:2x256|idle|decode:1x64")
    dp = doc["data_parallel"]
    assert (dp["moe_ep"], dp["moe_tp"], dp["all2all_backend"]) == (4, 1, "deepep_low_latency")
    (b,) = doc["batches"]
    assert b["rank_tokens"] == [8, 2, 0, 1] and b["global_tokens"] == 8 + 2 + 1 + 1  # the idle rank's dummy token
    assert b["slowest_rank"] == 0 and b["source"] == "roofline"
    assert b["total_us"] == pytest.approx(b["attention_max_us"] + b["experts_us"] + b["dispatch_us"] + b["combine_us"])


@pytest.mark.parametrize("args, says", [
    (["predict", "qwen3-30b-a3b", "-dp", "4", "--ep", "3"], "--ep"),
    (["predict", "qwen3-30b-a3b", "-dp", "4", "--all2all-backend", "nccl"], "--all2all-backend"),
    (["predict", "qwen3-30b-a3b", "--all2all-backend", "naive"], "--data-parallel-size >= 2"),
    (["predict", "qwen3-30b-a3b", "-tp", "2", "--ep", "4", "--enable-expert-parallel"], "EP = tp = 2"),
    (["kv", "deepseek-v3", "-dp", "3", "--enable-expert-parallel"], "256 routed experts do not divide"),
    (["kv", "llama-3.1-8b", "-dp", "2", "--enable-expert-parallel"], "no routed experts"),
    (["predict", "qwen3-30b-a3b", "-dp", "0"], "--data-parallel-size"),
])
def test_bad_values_are_one_line_exit_2(capsys, args, says):
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err and "Traceback" not in err, err


def test_a_vllm_logs_data_parallel_size_is_taken(capsys, tmp_path):
    # vLLM logs its non-default args; -dp 8 with --enable-expert-parallel there makes kv size one DP rank of 8
    # (its weights hold 1/8 of the routed experts: 7/8 × 57,982,058,496 B less than dp 1, as above)
    log = tmp_path / "serve.log"
    log.write_text("(APIServer pid=1) INFO 05-06 22:27:57 [utils.py:233] non-default args: {'model': "
                   "'Qwen/Qwen3-30B-A3B', 'data_parallel_size': 8, 'enable_expert_parallel': True}\n")
    one = run_json(capsys, "kv", "qwen3-30b-a3b", "--gpu", "h200", "--enable-expert-parallel")
    doc = run_json(capsys, "kv", "qwen3-30b-a3b", "--gpu", "h200", "--from-vllm-log", str(log))
    assert doc["from_vllm_log"]["taken"] == {"data_parallel_size": 8, "enable_expert_parallel": True}
    assert weights(one) - weights(doc) == 50_734_301_184


@pytest.mark.slow
def test_sweep_runs_a_moe_models_dp_ranks_in_lockstep(capsys):
    pytest.importorskip("torch")
    doc = run_json(capsys, "sweep", "qwen3-30b-a3b", "--gpu", "h200", "-dp", "2", "--enable-expert-parallel",
                   "--rates", "5,20", "-n", "40", "--input-len", "256", "--output-len", "16")
    assert [p["gpus"] for p in doc["points"]] == [2, 2] and all(p["completed"] == 40 for p in doc["points"])
    assert doc["points"][0]["tpot_ms"]["mean"] <= doc["points"][1]["tpot_ms"]["mean"]  # more load, longer steps

"""-pp / --pipeline-parallel-size on the CLI: predict shows each stage and the transfers, bad values are one line
with exit 2."""

import json

import pytest

from graphsim.cli.app import main

pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def module_home(tmp_path_factory):
    """One GRAPHSIM_HOME for the module: the model is traced once, its graph cached for the other tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHSIM_HOME", str(tmp_path_factory.mktemp("home")))
        yield


@pytest.fixture(autouse=True)
def no_partition_env(monkeypatch):
    monkeypatch.delenv("VLLM_PP_LAYER_PARTITION", raising=False)


def run_json(capsys, *args):
    code = main([*list(args), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_predict_pp_reports_stages_transfers_and_their_sum(capsys):
    p = run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "-tp", "2", "-pp", "2",
                 "--batch", "decode:64x2048", "--batch", "prefill:1x1024")
    pipe = p["pipeline"]
    assert (pipe["pipeline_parallel_size"], pipe["tensor_parallel_size"], pipe["world_size"]) == (2, 2, 4)
    assert pipe["layers_per_stage"] == [16, 16]  # 32 layers, 32 // 2 each
    for batch, pb in zip(p["batches"], pipe["batches"], strict=True):
        stages = pb["stages"]
        assert [s["layers"] for s in stages] == [[0, 16], [16, 32]]
        assert stages[0]["recv_us"] == 0 and stages[1]["recv_us"] > 0
        # one batch's latency is the sum of the stages, and the whole tree's total
        assert pb["latency_us"] == pytest.approx(sum(s["time_us"] for s in stages), rel=1e-12)
        assert pb["latency_us"] == pytest.approx(batch["total_us"], rel=1e-9)
        assert pb["interval_us"] == pytest.approx(max(s["time_us"] for s in stages), rel=1e-12)
        hops = [k for k in batch["kernels"] if k["kind"] == "send_recv"]
        assert [k["region"] for k in hops] == ["stage 1: recv from stage 0 (inside a node)"] * 2  # hidden + residual
    # the text form shows the stage table
    assert main(["predict", "llama-3.1-8b", "--gpu", "h200", "-pp", "2", "--batch", "decode:8x128", "--no-tree"]) == 0
    out = capsys.readouterr().out
    assert "pipeline stages" in out and "recv in" in out


def test_partition_from_vllm_environment_variable(capsys, monkeypatch):
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "10,22")
    p = run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "-pp", "2", "--batch", "decode:8x128")
    assert p["pipeline"]["layers_per_stage"] == [10, 22]
    p = run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "-pp", "2", "--pp-layer-partition", "20,12",
                 "--batch", "decode:8x128")
    assert p["pipeline"]["layers_per_stage"] == [20, 12]  # the option wins over the environment


@pytest.mark.parametrize(("args", "says"), [
    (["-pp", "0"], "--pipeline-parallel-size"),
    (["-pp", "40"], "exceeds the model's 32 layers"),
    (["-pp", "2", "--pp-layer-partition", "4,4"], "sums to 8 layers"),
    (["-pp", "2", "--pp-layer-partition", "x"], "invalid layer partition"),
    (["-pp", "2", "-dp", "2"], "--data-parallel-size with --pipeline-parallel-size is not modelled"),
    (["-pp", "2", "--afd", "2:2"], "--afd with --pipeline-parallel-size is not modelled"),
])
def test_bad_pipeline_values_are_one_line(capsys, args, says):
    code = main(["predict", "llama-3.1-8b", "--gpu", "h200", "--batch", "decode:8x128", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_kv_pp_reports_each_stage_and_the_engine_minimum(capsys):
    k = run_json(capsys, "kv", "llama-3.1-8b", "--gpu", "h200", "-tp", "2", "-pp", "4")
    pipe = k["pipeline"]
    assert pipe["layers_per_stage"] == [8, 8, 8, 8]
    blocks = [s["num_blocks"] for s in pipe["stages"]]
    assert pipe["num_blocks"] == min(blocks) == k["capacity"]["num_blocks"]
    # a stage's KV: 8 layers × 2 × (8 / 2) heads × 128 × 2 B = 16,384 B a token a rank
    assert {s["kv_bytes_per_token_per_rank"] for s in pipe["stages"]} == {16_384}
    assert main(["kv", "llama-3.1-8b", "--gpu", "h200", "-pp", "2"]) == 0
    assert "pipeline stages" in capsys.readouterr().out
    assert main(["kv", "llama-3.1-8b", "--gpu", "h200", "-pp", "2", "--pp-layer-partition", "1,2,3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has 3 stages" in err and len(err.splitlines()) == 1


def test_simulate_pp_runs_batches_in_flight(capsys):
    s = run_json(capsys, "simulate", "llama-3.1-8b", "--gpu", "h200", "-tp", "2", "-pp", "2", "--num-requests", "30",
                 "--rate", "10", "--input-len", "512", "--output-len", "32")
    assert s["summary"]["completed"] == 30 and s["summary"]["gpus"] == 4  # tp 2 × pp 2
    assert "up to 2 batches in flight" in s["data"]
    assert s["deployment"]["pipeline"]["layers_per_stage"] == [16, 16]
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h200", "-pp", "2", "--speculative-config",
                 '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}', "--num-requests", "5",
                 "--rate", "1", "--spec-acceptance", "0.5"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "speculative decoding with --pipeline-parallel-size" in err and len(err.splitlines()) == 1


def test_search_pp_explores_pipelined_candidates(capsys):
    s = run_json(capsys, "search", "llama-3.1-8b", "--gpu", "h200", "--gpus", "2", "--mode", "agg", "-pp", "1,2",
                 "--tp", "1", "--max-num-seqs", "16", "--max-num-batched-tokens", "4096", "--isl", "512", "--osl", "32",
                 "--verify", "1")
    labels = [r["candidate"]["label"] for r in s["rows"]]
    assert "agg tp1 pp2, seqs 16, batch 4096" in labels and "agg tp1, seqs 16, batch 4096 ×2" in labels
    assert main(["search", "llama-3.1-8b", "--gpu", "h200", "--gpus", "2", "-pp", "0,x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--pipeline-parallel-size" in err and len(err.splitlines()) == 1

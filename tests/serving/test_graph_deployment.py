"""Deployments of an architecture the work accountant lacks (graphsim/serving/graph_deployment.py): the memory
budget and KV layout read off the traced graph, so `simulate` and `search` run instead of refusing.

The architecture is taken out of `graphsim.work.registry.BUILDERS` with monkeypatch (other architectures are being
registered all the time: no test relies on one staying unregistered). For a registered architecture the graph-derived
budget is held against the accountant's: weights within 1 %, KV bytes per token exactly; the hand-derived values
in the comments pin the common number.
"""

import copy
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.cli.app import main
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.graph_deployment import GraphDeploymentError
from graphsim.work import registry

# 4 layers, hidden 64, 4 q heads / 2 kv heads of 16, intermediate 128, vocab 96 (divisible by the tp used)
TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  vocab_size=96, max_position_embeddings=256, num_hidden_layers=4)


def tiny_llama() -> ResolvedModel:
    cfg = copy.deepcopy(resolve_model("llama-3.1-8b").config)
    cfg.pop("quantization_config", None)
    cfg.update(TINY_LLAMA)
    return ResolvedModel("tiny-llama", cfg, "path", "test")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


@pytest.fixture
def unregistered(monkeypatch):
    """LlamaForCausalLM as an architecture the accountant has no builder for."""
    monkeypatch.delitem(registry.BUILDERS, "LlamaForCausalLM")


def _config(tp: int, **extra) -> DeploymentConfig:
    return DeploymentConfig.parse({"model": "tiny-llama", "hardware": "h100",
                                   "parallel": {"tensor_parallel_size": tp}, **extra})


def test_graph_budget_agrees_with_the_accountant(home, monkeypatch):
    model = tiny_llama()
    want = {tp: plan_deployment(_config(tp), model=model) for tp in (1, 2)}
    monkeypatch.delitem(registry.BUILDERS, "LlamaForCausalLM")
    for tp in (1, 2):
        acc, got = want[tp], plan_deployment(_config(tp), model=model)
        assert acc.graph is None and acc.layout.source == "config accountant"
        assert got.acc is None and got.graph is not None and got.layout.source == "traced graph"
        w_acc, w_got = acc.budget.term("weights").bytes, got.budget.term("weights").bytes
        assert abs(w_got - w_acc) <= 0.01 * w_acc
        assert "traced graph" in got.budget.term("weights").how
        assert got.layout.bytes_per_token == acc.layout.bytes_per_token
    # weights at tp 1, bf16: embedding 96 × 64 + head 96 × 64 (untied) = 12,288; per layer q 64×64 + k, v 2 × 32×64 +
    # o 64×64 = 12,288, gate+up 2 × 128×64 + down 64×128 = 24,576, two norms 128 → 36,992 × 4 layers = 147,968;
    # final norm 64: 160,320 parameters × 2 B = 320,640 B
    assert want[1].budget.term("weights").bytes == 320_640
    # KV at tp 1: 4 layers × 2 (K, V) × 2 kv heads × 16 × 2 B = 512 B per token; tp 2: one kv head per rank, 256 B
    assert want[1].layout.bytes_per_token == 512 and want[2].layout.bytes_per_token == 256
    # tp 2: every matrix halved (the vocab-parallel embedding and head too), norms whole:
    # (12,288 / 2 + 4 × (12,288 / 2 + 24,576 / 2) + 4 × 128 + 64) × 2 B = 160,896 B
    assert plan_deployment(_config(2), model=model).budget.term("weights").bytes == \
        (6_144 + 4 * (6_144 + 12_288) + 4 * 128 + 64) * 2 == 160_896


def test_simulate_and_search_run_for_an_unregistered_architecture(home, unregistered, capsys):
    d = home / "tiny-llama"
    d.mkdir()
    cfg = copy.deepcopy(resolve_model("llama-3.1-8b").config)
    cfg.pop("quantization_config", None)
    (d / "config.json").write_text(json.dumps({**cfg, **TINY_LLAMA}))
    assert main(["simulate", str(d), "--gpu", "h100", "--tp", "2", "--rate", "20", "-n", "8", "--input-len", "64",
                 "--output-len", "8", "--max-model-len", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "traced graph" in json.dumps(out)  # the layout / budget source stated in the output
    assert main(["simulate", str(d), "--gpu", "h100", "--tp", "2", "--rate", "20", "-n", "4", "--input-len", "64",
                 "--output-len", "4", "--max-model-len", "256"]) == 0
    assert "KV layout and memory budget: traced graph (the work accountant has no builder for LlamaForCausalLM" in \
        " ".join(capsys.readouterr().out.split())
    assert main(["kv", str(d), "--tp", "2", "--kv-memory", "1GiB", "--json"]) == 0  # the kv command's own path
    assert json.loads(capsys.readouterr().out)["layout"]["source"] == "traced graph"
    assert main(["search", str(d), "--gpu", "h100", "--gpus", "2", "--isl", "64", "--osl", "8", "--ttft", "1000",
                 "--tpot", "50", "--max-num-seqs", "8", "--max-num-batched-tokens", "512", "--mode", "agg",
                 "--verify", "0", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["best"] is not None and s["rows"]


def test_what_the_graph_path_does_not_model_is_refused_in_one_line(home, unregistered, capsys):
    model = tiny_llama()
    with pytest.raises(GraphDeploymentError, match="does not model --engine sglang"):
        plan_deployment(_config(1, engine={"engine": "sglang"}), model=model)
    d = home / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**model.config}))
    assert main(["simulate", str(d), "--gpu", "h100", "-pp", "2", "--rate", "1", "-n", "2"]) == 2
    err = capsys.readouterr().err
    assert "--pipeline-parallel-size" in err and "traced graph" in err and "Traceback" not in err

"""A pipeline-parallel deployment's memory and KV cache per stage (serving/pipeline_plan.py), against vLLM's
per-worker sizing and the min over workers."""

from __future__ import annotations

import pytest

from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.pipeline_plan import PipelinedDeployment, pp_of


def _plan(model: str, tp: int, pp: int, **parallel):
    return plan_deployment(DeploymentConfig.parse({
        "model": model, "hardware": "h200",
        "parallel": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, **parallel}}))


def test_stage_weights_by_hand_and_conserved():
    # Llama-3.1-8B, tp 2, pp 2 (untied embeddings): 16 layers a stage at 218,120,192 B per rank each (the GEMMs
    # split, two 4096-wide norms whole: (218,103,808 / 2 + 8192) × 2 B); stage 0 adds the embedding shard
    # (128,256 / 2 × 4096 × 2 B = 525,336,576 B), stage 1 the final norm (8192 B) and the LM head shard (525,336,576 B)
    one = _plan("llama-3.1-8b", 2, 1)
    two = _plan("llama-3.1-8b", 2, 2)
    assert isinstance(two, PipelinedDeployment) and pp_of(two) == 2 and pp_of(one) == 1
    w = [s.weight_bytes for s in two.stages]
    assert w == [16 * 218_120_192 + 525_336_576, 16 * 218_120_192 + 8192 + 525_336_576]
    assert sum(w) == one.budget.term("weights").bytes
    assert [s.layers for s in two.stages] == [(0, 16), (16, 32)]
    # each stage's KV holds its own 16 layers: 16 × 2 (K, V) × 8 / 2 heads × 128 × 2 B = 32,768 B a token a rank
    assert [s.layout.bytes_per_token for s in two.stages] == [32_768, 32_768]
    assert one.layout.bytes_per_token == 65_536


def test_tied_embeddings_cost_the_last_stage_a_second_table():
    # Gemma-2-9B ties its head to the embedding: vLLM's last stage builds embed_tokens to tie lm_head to, so
    # the stages together hold one more 256,000 × 3584 × 2 B = 1,835,008,000 B table than one GPU does.
    one = _plan("gemma-2-9b", 1, 1)
    two = _plan("gemma-2-9b", 1, 2)
    assert isinstance(two, PipelinedDeployment)
    assert sum(s.weight_bytes for s in two.stages) == one.budget.term("weights").bytes + 1_835_008_000


def test_the_engine_takes_the_smallest_block_count():
    dep = _plan("llama-3.1-8b", 2, 4)
    assert isinstance(dep, PipelinedDeployment)
    blocks = [s.capacity.num_blocks for s in dep.stages]
    # the outer stages hold the embedding / head as well: fewer blocks than the middle ones
    assert blocks[0] < blocks[1] and blocks[3] < blocks[2]
    assert dep.capacity.num_blocks == min(blocks) and blocks[dep.binding] == min(blocks)
    assert dep.to_json()["pipeline"]["num_blocks"] == min(blocks)
    assert dep.config.parallel.world_size == 8  # tp 2 × pp 4


def test_partition_and_refusals():
    dep = _plan("llama-3.1-8b", 1, 2, pp_layer_partition="12,20")
    assert isinstance(dep, PipelinedDeployment) and [s.layers for s in dep.stages] == [(0, 12), (12, 32)]
    from graphsim.costing.pipeline import PipelineError

    with pytest.raises(PipelineError, match="sums to 30"):
        _plan("llama-3.1-8b", 1, 2, pp_layer_partition="10,20")
    with pytest.raises(PipelineError, match="exceeds the model's 32 layers"):
        _plan("llama-3.1-8b", 1, 33)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-2-9b", "deepseek-v2-lite"])
@pytest.mark.parametrize("pp", [2, 3])
def test_kv_bytes_per_token_are_conserved_over_stages(model, pp):
    # each stage keeps the KV of its own layers: summed over the stages, a token's KV bytes are one GPU's
    # (full, sliding-window and MLA layers alike; padding layers vLLM adds to equalise groups are not KV of a token)
    one = _plan(model, 1, 1)
    split = _plan(model, 1, pp)
    assert isinstance(split, PipelinedDeployment)
    assert sum(s.layout.bytes_per_token for s in split.stages) == one.layout.bytes_per_token
    layers = {}
    for s in split.stages:
        for part in s.layout.parts():
            layers[part.layer.label] = layers.get(part.layer.label, 0) + part.layers
    assert layers == {part.layer.label: part.layers for part in one.layout.parts()}

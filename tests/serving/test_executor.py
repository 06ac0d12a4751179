"""The executor's per-step time when vLLM's group spans nodes (graphsim/serving/executor.py): the Ray compiled graph's
cross-node round trip. Expected values derived by hand in the comments."""

import pytest

from graphsim.costing.hardware import InterconnectOverrides, load_hardware
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.executor import RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US, executor_step_us

QWEN2_7B = "benchmarks/data/configs/Qwen2-7B-Instruct"


def test_ray_round_trip_is_ray_s_multinode_figure():
    # ray-project/ray PR 49755: exec_ray_dag_cpu across nodes, 640.6405 executions/s → 1e6 / 640.6405 = 1560.94 µs
    assert abs(RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US - 1560.94) < 0.01


def test_only_a_vllm_v1_group_across_nodes_pays_it():
    one_gpu_nodes = InterconnectOverrides(gpus_per_node=1, network_bandwidth_gb_s=1.18).apply(load_hardware("a100"))
    node = load_hardware("a100")  # 8 GPUs a node
    assert executor_step_us(one_gpu_nodes, 2, is_vllm=True, family="v1") == RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US
    assert executor_step_us(one_gpu_nodes, 2, is_vllm=True, family="v1-async") == RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US
    assert executor_step_us(one_gpu_nodes, 1, is_vllm=True, family="v1") == 0.0  # one GPU: no group
    assert executor_step_us(node, 8, is_vllm=True, family="v1") == 0.0  # inside one node: multiprocessing
    assert executor_step_us(one_gpu_nodes, 2, is_vllm=True, family="v0") == 0.0  # V0: not modelled
    assert executor_step_us(one_gpu_nodes, 2, is_vllm=False, family="v1-async") == 0.0  # SGLang / TRT-LLM: no Ray


def _deployment(gpus_per_node: int | None):
    data = {"model": QWEN2_7B, "hardware": "a100", "parallel": {"tensor_parallel_size": 2},
            "engine": {"engine": "vllm==0.10.1", "max_model_len": 4096}}
    if gpus_per_node is not None:
        data["interconnect"] = {"gpus_per_node": gpus_per_node, "network_bandwidth_gb_s": 1.18}
    return plan_deployment(DeploymentConfig.parse(data))


def test_a_two_node_tp2_engine_adds_the_round_trip_to_every_step():
    across, inside = _deployment(1), _deployment(None)
    assert across.engine.executor_step_us == RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US
    assert inside.engine.executor_step_us == 0.0
    # vLLM 0.10.1 steps synchronously (no async scheduling, max_concurrent_batches 1): the round trip adds to the
    # host time of every iteration, whatever its batch: host(1 token, 1 seq) and host(2048, 64) both grow by it
    for tokens, seqs in ((1, 1), (2048, 64)):
        grown = across.engine.host.host_us(tokens, seqs) - inside.engine.host.host_us(tokens, seqs)
        assert grown == pytest.approx(RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US)
    assert not across.engine.host.overlap


def test_the_deployment_json_states_the_executor_term_and_its_source():
    across, inside = _deployment(1).to_json()["engine"], _deployment(None).to_json()["engine"]
    assert across["executor"]["step_us"] == RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US
    assert "PR 49755" in across["executor"]["source"]
    # the host model's own step term carries it too: 1560.94 µs more than the one-node deployment's
    assert across["host"]["step_us"] - inside["host"]["step_us"] == pytest.approx(RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US)
    assert inside["executor"]["step_us"] == 0.0

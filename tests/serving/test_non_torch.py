"""vLLM's non-torch memory in the KV budget: the median of public start-up logs per TP group (serving/non_torch.py)."""

import json

import pytest

from graphsim.costing.hardware import LinkKind
from graphsim.serving import DeploymentConfig, EngineArgs, ParallelConfig
from graphsim.serving.config import MemoryOverrides
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.non_torch import LOGS, non_torch_estimate

GiB = 2**30
OVER = "runtime overhead (non-torch)"


def test_group_medians_are_the_logged_values_middle():
    # TP 1, the 15 logged values sorted: 0.02 0.02 0.03 0.04 0.05 0.05 0.06 [0.07] 0.07 0.08 0.09 0.11 0.23 0.26 0.35
    # → the 8th of 15 is 0.07 GiB
    tp1 = non_torch_estimate(1, LinkKind.NVSWITCH)
    assert (tp1.gib, len(tp1.logs), tp1.group) == (0.07, 15, "TP 1")
    # TP > 1 over NVLink, 5 logs: 0.95 (B200) 1.07 (A100 40GB, Ray) [1.38] (H200 TP2) 1.39 (TP4) 2.10 (A100 TP8)
    nv = non_torch_estimate(8, LinkKind.NVSWITCH)
    assert (nv.gib, len(nv.logs)) == (1.38, 5)
    assert "spread 0.95–2.10 GiB" in nv.how() and "TP > 1 over NVLink" in nv.how()
    assert non_torch_estimate(2, LinkKind.NVLINK).gib == 1.38  # direct NVLink is fully connected too
    # TP > 1 over PCIe: the one L40S TP4 log, 0.21 GiB, said to be a single log
    pcie = non_torch_estimate(4, LinkKind.PCIE)
    assert (pcie.gib, len(pcie.logs)) == (0.21, 1) and "one log only" in pcie.how()
    assert non_torch_estimate(2, LinkKind.PCIE_P2P).gib == 0.21
    assert non_torch_estimate(2, None).gib == 0.21  # a spec without a link kind: PCIe (HardwareSpec.topology)
    assert all(g.source and g.gib > 0 and g.tp >= 1 for g in LOGS)


def _dep(gpu: str, tp: int, **memory):
    return plan_deployment(DeploymentConfig(model="Qwen/Qwen3-8B", hardware=gpu,
                                            parallel=ParallelConfig(tensor_parallel_size=tp),
                                            engine=EngineArgs(), memory=MemoryOverrides(**memory)))


@pytest.mark.parametrize("gpu,tp,expected", [
    # int(0.07 × 2^30) = int(75,161,927.68) = 75,161,927
    ("h200", 1, 75_161_927),
    # H200 nodes are NVSwitch: int(1.38 × 2^30) = int(1,481,763,717.12) = 1,481,763,717
    ("h200", 2, 1_481_763_717),
    # L40S is PCIe: int(0.21 × 2^30) = int(225,485,783.04) = 225,485,783
    ("l40s", 2, 225_485_783),
])
def test_budget_subtracts_the_group_median(gpu, tp, expected):
    dep = _dep(gpu, tp)
    term = dep.budget.term(OVER)
    assert term.bytes == expected and term.origin == "estimated"
    assert "public vLLM start-up log" in term.how and "--overhead-gib" in term.how
    # everything else equal, the KV budget is larger than at the old assumed 0.5 GiB by exactly the difference:
    # 0.5 GiB = 536,870,912 B
    old = _dep(gpu, tp, overhead_gib=0.5)
    assert old.budget.term(OVER).origin == "given"
    assert dep.budget.available_bytes - old.budget.available_bytes == 536_870_912 - expected


def test_data_parallel_attention_takes_the_expert_groups_size():
    # a MoE at -dp 2 -tp 1: its experts spread over dp × tp = 2 GPUs that all-gather / reduce-scatter over NCCL, so
    # the rank is in a 2-GPU collective group (H200: NVLink group, 1,481,763,717 B as above); a dense model at -dp 2
    # is two separate TP-1 engines (75,161,927 B)
    moe = plan_deployment(DeploymentConfig(model="Qwen/Qwen3-30B-A3B", hardware="h200", engine=EngineArgs(),
                                           parallel=ParallelConfig(tensor_parallel_size=1, data_parallel_size=2)))
    assert moe.budget.term(OVER).bytes == 1_481_763_717 and "collectives over 2 GPUs" in moe.budget.term(OVER).how
    dense = plan_deployment(DeploymentConfig(model="Qwen/Qwen3-8B", hardware="h200", engine=EngineArgs(),
                                             parallel=ParallelConfig(tensor_parallel_size=1, data_parallel_size=2)))
    assert dense.budget.term(OVER).bytes == 75_161_927


def test_interconnect_override_moves_the_group():
    # the same H200s deployed over PCIe (--interconnect pcie) take the PCIe log's 0.21 GiB
    from graphsim.costing.hardware import InterconnectOverrides

    dep = plan_deployment(DeploymentConfig(model="Qwen/Qwen3-8B", hardware="h200",
                                           parallel=ParallelConfig(tensor_parallel_size=2), engine=EngineArgs(),
                                           interconnect=InterconnectOverrides(link=LinkKind.PCIE)))
    assert dep.budget.term(OVER).bytes == 225_485_783


def test_kv_command_states_the_value_and_its_source(capsys):
    from graphsim.cli.app import main

    assert main(["kv", "Qwen/Qwen3-8B", "--gpu", "h200", "-tp", "8", "--json"]) == 0
    terms = {t["name"]: t for t in json.loads(capsys.readouterr().out)["memory"]["terms"]}
    assert terms[OVER]["bytes"] == 1_481_763_717 and terms[OVER]["origin"] == "estimated"
    assert terms[OVER]["how"].startswith("median of 5 public vLLM start-up logs at TP > 1 over NVLink")
    assert main(["kv", "Qwen/Qwen3-8B", "--gpu", "h200", "--overhead-gib", "2"]) == 0
    out = capsys.readouterr().out
    assert "2.00 GiB" in out and "--overhead-gib" in out

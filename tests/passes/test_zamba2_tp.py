"""Zamba2 at tp 2 as vLLM splits it (vllm 0.33.0 model_executor/models/zamba2.py): the hybrid layer's transformer
projection `linear` is a ReplicatedLinear, the shared MLP's LoRA adapter A is ColumnParallelLinear(gather_output=True)
and B column-parallel, the Mamba2 mixer's one B/C group is replicated (mamba_groups.py), and a mixer whose heads
the tp size does not divide is refused with MambaMixer2's own message. Per-rank shapes are derived by hand from
the tiny config below (arithmetic in the comments)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from passes_helpers import ZAMBA2

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import CollectiveGeometry, GemmGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.passes import run_pipeline
from graphsim.passes.base import PassError
from graphsim.passes.partition.replicated import lora_downs, residual_projections

# ZAMBA2 (passes_helpers): layer 0 a Mamba2 layer, layer 1 a hybrid layer; its shapes are commented there.


def _fused(cfg):
    graph, _ = import_hf(ResolvedModel("tiny-zamba2", dict(cfg), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


@pytest.fixture(scope="module")
def zamba2():
    return _fused(ZAMBA2)


def _users(graph):
    users: dict = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    return users


def _gemm(graph, name):
    return next(n for n in graph.nodes if n.name == name).kernel.geometry_as(GemmGeometry)


def test_the_structural_finds_are_the_hybrid_projection_and_the_lora_down(zamba2):
    users = _users(zamba2)
    assert residual_projections(zamba2, users) == {"L1.linear"}
    assert lora_downs(zamba2, users) == {"L1.0"}  # gate_up_proj_adapter_list.0.0 (Zamba2LoRA.A, 64 -> 8)


def test_tp2_splits_the_hybrid_layer_as_vllm(zamba2):
    res = run_pipeline(zamba2, "tp{size=2}").results[0][1]
    g = res.graph
    names = [n.name for n in g.nodes]
    # linear: ReplicatedLinear(64, 64) -> 64 x 64 on every rank, no collective after it
    assert (_gemm(g, "L1.linear").n, _gemm(g, "L1.linear").k) == (64, 64)
    assert names[names.index("L1.linear") + 1] == "L1.fused_add_rms_norm"
    # LoRA A: 8 / 2 = 4 outputs a rank, then an all-gather of the 8 (16 bytes a token in bf16)
    assert _gemm(g, "L1.0").n == 4
    gather = next(n for n in g.nodes if n.name == "L1.0.all_gather")
    assert gather.kernel.geometry_as(CollectiveGeometry).width == 8
    # LoRA B and gate_up: column-parallel, 192 / 2 = 96 each; down_proj row-parallel k = 96 / 2 = 48, all-reduced
    assert _gemm(g, "L1.1").n == 96 and _gemm(g, "L1.gate_up_proj").n == 96
    assert "L1.gate_up_proj.all_gather" not in names
    assert _gemm(g, "L1.down_proj").k == 48 and "L1.down_proj.all_reduce" in names
    # in_proj: (intermediate 128 + conv 128 + 2·16 + heads 4 + the replicated group's 2·(2 − 1)·16) / 2 = 162
    assert _gemm(g, "L1.in_proj").n == 162
    collectives = [n.kernel.kind for n in g.nodes if n.kernel.kind.is_collective]
    # embedding, L0/L1 gated-norm variance, L0/L1 out_proj, o_proj, down_proj: 7 all-reduces; A and lm_head gathers
    assert collectives.count(KernelKind.ALL_REDUCE) == 7 and collectives.count(KernelKind.ALL_GATHER) == 2


def test_a_mixer_whose_heads_tp_does_not_divide_is_refused_as_vllm_does():
    one_head = _fused({**ZAMBA2, "n_mamba_heads": 1})  # head dim 128: one Mamba2 head
    with pytest.raises(PassError, match=r"Tensor parallel world size must divide num heads\.' \(1 heads"):
        run_pipeline(one_head, "tp{size=2}")

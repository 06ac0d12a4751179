"""The pass pipeline on real catalog configs: kernels per layer, TP/EP invariants, fold."""

import pytest

pytest.importorskip("torch")

from passes_helpers import attention_width, gemm_flops_per_token, is_kind, kernels_of_layer, tiny_config

from graphsim.catalog import catalog
from graphsim.importers.hf import import_hf
from graphsim.ir import graph_from_json, graph_to_json
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry, GemmGeometry, MoeExpertsGeometry, RotaryGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import PassError, run_pipeline

ALL = [e.name for e in catalog()]


@pytest.fixture(scope="module")
def imported(hf_import):
    return lambda name: hf_import(name)[0]


@pytest.mark.parametrize("name", ALL)
def test_default_pipeline_verifies_for_every_catalog_model(name, imported):
    g = imported(name)
    for pipe in ("fold,fuse{target=vllm}", "fold,fuse{target=eager}", "fold,fuse{target=vllm},tp{size=2}"):
        run = run_pipeline(g, pipe)
        out = run.graph
        out.verify("test")
        # every node is a kernel after fuse; every traced layer keeps kernels
        assert all(isinstance(n.attrs, KernelAttrs) for n in out.nodes)
        assert out.schedule is not None
        for rep in out.schedule.representative.values():
            assert kernels_of_layer(out, rep)
        assert graph_from_json(graph_to_json(out)) == out


def test_llama_layer_is_the_vllm_kernel_sequence(imported):
    # vLLM LlamaDecoderLayer.forward (model_executor/models/llama.py): input RMSNorm, fused QKV GEMM,
    # rotary, attention, o_proj, fused add+RMSNorm, fused gate_up GEMM, SiluAndMul, down_proj.
    out = run_pipeline(imported("llama-3.1-8b"), "fold,fuse{target=vllm}").graph
    seq = [(n.kernel.kind.value, n.kernel.name) for n in kernels_of_layer(out, 0)]
    assert seq == [
        ("rms_norm", "rms_norm"), ("gemm", "qkv_proj"), ("rotary", "rotary_embedding"),
        ("attention", "flash_attn_varlen"), ("gemm", "o_proj"), ("fused_add_rms_norm", "fused_add_rms_norm"),
        ("gemm", "gate_up_proj"), ("act_and_mul", "silu_and_mul"), ("gemm", "down_proj"),
    ]
    geo = {n.kernel.name: n.kernel.geometry for n in kernels_of_layer(out, 0)}
    # Llama-3.1-8B: q 4096 + k 1024 + v 1024 = 6144 outputs; gate+up 2 × 14336 = 28672
    assert geo["qkv_proj"] == GemmGeometry(n=6144, k=4096, q_features=4096, num_kv_heads=8)
    assert (geo["gate_up_proj"], geo["down_proj"]) == (GemmGeometry(n=28672, k=4096), GemmGeometry(n=4096, k=14336))
    lm = next(n for n in out.nodes if n.kernel.name == "lm_head")
    assert lm.kernel.rows.value == "sequences"  # logits only for the sampled position of each sequence


def test_dense_layer_under_tp_has_two_all_reduces_and_conserves_flops(imported):
    g = imported("llama-3.1-8b")
    base = run_pipeline(g, "fold,fuse{target=vllm}").graph
    for t in (2, 4, 8):
        part = run_pipeline(g, f"fold,fuse{{target=vllm}},tp{{size={t}}}").graph
        layer = kernels_of_layer(part, 0)
        assert sum(is_kind(n, KernelKind.ALL_REDUCE) for n in layer) == 2
        full = {n.kernel.name: n for n in kernels_of_layer(base, 0)}
        for n in layer:
            if is_kind(n, KernelKind.GEMM):
                assert gemm_flops_per_token(n) * t == gemm_flops_per_token(full[n.kernel.name])
            if is_kind(n, KernelKind.ATTENTION):
                assert attention_width(n) * t == attention_width(full[n.kernel.name])
        ar = next(n for n in layer if is_kind(n, KernelKind.ALL_REDUCE))
        cg = ar.kernel.geometry_as(CollectiveGeometry)
        assert cg.num_gpus == t and cg.bytes_per_row == 4096 * 2  # hidden × bf16


def test_kv_heads_replicated_beyond_their_count(imported):
    # Qwen3-30B-A3B has 4 KV heads: at tp=8 each rank keeps 1 KV head, replicated 2×.
    run = run_pipeline(imported("qwen3-30b-a3b"), "fold,fuse{target=vllm},tp{size=8}")
    attn = next(n for n in run.graph.nodes if is_kind(n, KernelKind.ATTENTION))
    g = attn.kernel.geometry_as(AttentionGeometry)
    assert g.num_kv_heads == 1 and g.kv_replicas == 2
    # the fused QKV GEMM keeps one whole KV head per rank, as vLLM's QKVParallelLinear does:
    # q 32 heads × 128 / 8 = 512, plus k and v one head of 128 each = 768 (not 5120 / 8 = 640)
    qkv = next(n for n in run.graph.nodes if n.kernel.name == "qkv_proj")
    assert qkv.kernel.geometry_as(GemmGeometry).n == 768
    assert run.graph.params["model.layers.0.self_attn.k_proj.weight"].shape == (128, 2048)
    assert run.results[-1][1].stats["kv_heads_replicated"] == 1


def test_split_that_does_not_divide_names_the_dimension(imported):
    # Qwen2.5-7B: 28 attention heads (refused as vLLM's ModelConfig.verify_with_parallel_config refuses it)
    with pytest.raises(PassError, match=r"attention heads \(28\) must be divisible by tensor parallel size \(8\)"):
        run_pipeline(imported("qwen2.5-7b-instruct"), "fold,fuse{target=vllm},tp{size=8}")
    with pytest.raises(PassError, match=r"num_experts .* = 8 is not divisible by 3"):
        run_pipeline(imported("mixtral-8x7b-v0.1"), "fold,fuse{target=vllm},ep{size=3}")


def test_ep_spreads_experts(imported):
    g = imported("deepseek-v3")
    run = run_pipeline(g, "fold,fuse{target=vllm},tp{size=2},ep{size=8}")
    out = run.graph
    moe = [n for n in out.nodes if is_kind(n, KernelKind.MOE_EXPERTS)]
    assert len(moe) == 1
    mg = moe[0].kernel.geometry_as(MoeExpertsGeometry)
    assert mg.ep == 8 and mg.tp == 1
    # expert weights per rank: 256 / 8 = 32 experts, intermediate dim whole again
    w = out.params["model.layers.3.mlp.experts.gate_up_proj"]
    assert w.shape == (32, 4096, 7168)
    a2a = [n for n in out.nodes if is_kind(n, KernelKind.ALL_TO_ALL)]
    assert len(a2a) == 2 and {n.kernel.geometry_as(CollectiveGeometry).reason for n in a2a} == {"moe_dispatch", "moe_combine"}
    # DeepSeek's routed output is summed with the TP-split shared expert before one all-reduce (tp pass), so
    # no experts-only all-reduce is left to replace; the sum's all-reduce stays for the shared expert
    assert run.results[-1][1].stats["tp_all_reduce_replaced"] == 0
    reasons = [n.kernel.geometry_as(CollectiveGeometry).reason for n in out.nodes if is_kind(n, KernelKind.ALL_REDUCE)
               and n.layer == moe[0].layer]
    assert reasons == ["row_parallel", "moe_shared_sum"]


def test_fold_of_full_depth_trace_matches_reduced_import():
    from graphsim.catalog import ResolvedModel

    # Gemma-2 geometry: alternating sliding/full layers must stay two distinct types
    cfg = tiny_config("gemma-2-9b", num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                      layer_types=["sliding_attention", "full_attention"] * 2)
    model = ResolvedModel("tiny-gemma", cfg, "path", "test")
    full, _ = import_hf(model, full_depth=True)
    reduced, _ = import_hf(model)
    run = run_pipeline(full, "fold")
    folded = run.graph
    sched = folded.schedule
    assert sched is not None and reduced.schedule is not None
    assert run.results[0][1].stats["nodes_removed"] > 0
    assert sched.tags == reduced.schedule.tags
    assert sorted(sched.representative.values()) == [0, 1]
    assert len(folded.nodes) == len(reduced.nodes)
    # parameters: non-layer once + each representative × its count == the model's total
    stack = folded.meta.layer_stack
    total = 0
    for name, spec in folded.params.items():
        if name.startswith(stack + "."):
            idx = int(name[len(stack) + 1:].split(".")[0])
            tag = sched.tags[idx]
            total += int(spec.numel) * sched.count(tag)
        else:
            total += int(spec.numel)
    assert total == folded.meta.param_count


def test_rotary_dim_is_twice_the_inverse_frequencies(imported):
    # gpt-oss: head_dim 64, full rotary → 64 (its code rotates two halves with a 32-wide cos);
    # Qwen3-Next: head_dim 256 with partial_rotary_factor 0.25 → 64.
    for name, want in (("gpt-oss-20b", 64), ("qwen3-next-80b-a3b", 64), ("llama-3.1-8b", 128)):
        out = run_pipeline(imported(name), "fold,fuse{target=vllm}").graph
        rot = [n for n in out.nodes if is_kind(n, KernelKind.ROTARY)]
        assert rot and {n.kernel.geometry_as(RotaryGeometry).rot_dim for n in rot} == {want}, name


def test_eager_target_partitions_with_small_incidental_widths(imported):
    # top-k scores and reduced sums (width 1) are computed whole on every rank, not an error
    run = run_pipeline(imported("qwen3-30b-a3b"), "fold,fuse{target=eager},tp{size=2}")
    assert run.results[-1][1].stats.get("elementwise_replicated", 0) > 0


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "qwen3-next-80b-a3b"])
def test_routed_and_shared_experts_are_summed_then_reduced_once(name, imported):
    # vLLM hands the shared MLP (built with reduce_results=False) to the FusedMoE layer, which adds it to
    # the routed output and all-reduces the sum once (models/deepseek_v2.py DeepseekV2MoE, qwen3_next.py
    # Qwen3NextSparseMoeBlock): per MoE layer one all-reduce for attention (o_proj) and one after the add.
    g = imported(name)
    base = run_pipeline(g, "fold,fuse{target=vllm}").graph
    part = run_pipeline(g, "fold,fuse{target=vllm},tp{size=2}").graph
    assert part.schedule is not None
    rep = part.schedule.representative["full.moe"]
    layer = kernels_of_layer(part, rep)
    reduces = [n for n in layer if is_kind(n, KernelKind.ALL_REDUCE)]
    assert [n.kernel.geometry_as(CollectiveGeometry).reason for n in reduces] == ["row_parallel", "moe_shared_sum"]
    add = next(n for n in layer if n.kernel.name == "add" and n.name in reduces[1].inputs)
    moe = next(n for n in layer if is_kind(n, KernelKind.MOE_EXPERTS))
    assert moe.name in add.inputs  # the routed output enters the sum unreduced
    # the shared MLP is still split: its GEMM FLOPs per token are the unsplit ones / 2
    full = {n.kernel.name: n for n in kernels_of_layer(base, rep)}
    for n in layer:
        if is_kind(n, KernelKind.GEMM) and "shared_expert" in n.scope and n.kernel.name != "shared_expert_gate":
            assert gemm_flops_per_token(n) * 2 == gemm_flops_per_token(full[n.kernel.name])


def test_routed_experts_without_shared_experts_reduce_after_the_experts(imported):
    part = run_pipeline(imported("qwen3-30b-a3b"), "fold,fuse{target=vllm},tp{size=2}").graph
    reasons = [n.kernel.geometry_as(CollectiveGeometry).reason for n in kernels_of_layer(part, 0)
               if is_kind(n, KernelKind.ALL_REDUCE)]
    assert reasons == ["row_parallel", "moe_experts"]
    # EP over the TP group (vLLM's --enable-expert-parallel, dp 1): no exchange, the experts-only all-reduce stays
    # (FusedMoE.forward_impl: naive dispatch/combine only with dp_size > 1, then the group's all-reduce)
    run = run_pipeline(imported("qwen3-30b-a3b"), "fold,fuse{target=vllm},tp{size=2},ep{size=2}")
    stats = run.results[-1][1].stats
    assert (stats["tp_all_reduce_replaced"], stats["all_to_all"]) == (0, 0)
    layer = kernels_of_layer(run.graph, 0)
    assert [n.kernel.geometry_as(CollectiveGeometry).reason for n in layer
            if is_kind(n, KernelKind.ALL_REDUCE)] == ["row_parallel", "moe_experts"]
    (moe,) = [n for n in layer if is_kind(n, KernelKind.MOE_EXPERTS)]
    assert (moe.kernel.geometry_as(MoeExpertsGeometry).ep, moe.kernel.geometry_as(MoeExpertsGeometry).tp) == (2, 1)
    # graphsim's own --ep beyond the TP group: the experts-only all-reduce is the one the combine replaces
    run = run_pipeline(imported("qwen3-30b-a3b"), "fold,fuse{target=vllm},tp{size=2},ep{size=4}")
    assert run.results[-1][1].stats["tp_all_reduce_replaced"] == 1

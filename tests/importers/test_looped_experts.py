"""Experts written as a Python loop over the hit experts (graphsim/importers/hf/looped_experts.py): DBRX's Megablocks
GLU (`DbrxExperts`) and LongCat-Flash's experts with zero-computation (identity) experts (`LongcatFlashExperts`)
trace as one `graphsim::moe_experts` node: tiny models' logits equal transformers' eager loop, the node's shapes and
the weights' vLLM layout by hand, the fuse to vLLM's kernels (no placeholders; LongCat's zero_experts_compute + add),
TP 2 and EP 2 (the conservation check runs inside), and `predict` end to end."""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import MoEAttrs, Op  # noqa: E402
from graphsim.ir.geometry import MoeExpertsGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402

# DBRX: d_model 32 = 4 heads × 8, one KV head, 4 experts of ffn 24, top-2 (dbrx-instruct's clip_qkv 8)
TINY_DBRX = {
    "architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "torch_dtype": "bfloat16", "vocab_size": 96,
    "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 128,
    "attn_config": {"kv_n_heads": 1, "clip_qkv": 8, "rope_theta": 500000.0},
    "ffn_config": {"ffn_hidden_size": 24, "moe_num_experts": 4, "moe_top_k": 2, "ffn_act_fn": {"name": "silu"}},
}
# LongCat-Flash: 4 routed experts of 24 and 2 identity experts, top-2 of the 6; MLA with small ranks
TINY_LONGCAT = {
    "architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "torch_dtype": "bfloat16",
    "vocab_size": 96, "hidden_size": 32, "num_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
    "ffn_hidden_size": 32, "expert_ffn_hidden_size": 24, "n_routed_experts": 4, "zero_expert_num": 2, "moe_topk": 2,
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "head_dim": 8,
    "v_head_dim": 8, "qk_head_dim": 16, "routed_scaling_factor": 6.0, "max_position_embeddings": 128,
}
CASES = {"dbrx": TINY_DBRX, "longcat": TINY_LONGCAT}


@pytest.fixture(scope="module", params=sorted(CASES))
def imported(request):
    cfg = CASES[request.param]
    return request.param, import_hf(ResolvedModel(f"tiny-{request.param}", copy.deepcopy(cfg), "path", "test"),
                                    cache=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tiny_model_logits_unchanged_by_the_swap(name):
    from graphsim.importers.hf.build import make_hf_config, model_class

    cfg = CASES[name]
    torch.manual_seed(0)
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(copy.deepcopy(cfg)),
                                                              dtype=torch.float32).eval()
    for p in model.parameters():  # (LongCat initialises its expert tensors to zeros / ones: make the experts differ)
        torch.nn.init.normal_(p, std=0.2)
    ids = torch.randint(0, 96, (2, 5))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert any(s.endswith(("DbrxExperts.forward", "LongcatFlashExperts.forward")) for s in swapped), swapped
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    # the parameters are the model's own again (the re-laid views are gone)
    assert all(p.dim() == 2 for n, p in model.named_parameters() if n.endswith(("mlp.w1", "mlp.v1", "mlp.w2")))
    if name == "longcat":
        assert model.model.layers[0].mlp.experts.gate_up_proj.shape == (6, 48, 32)


def test_one_experts_node_with_vllm_layout(imported):
    name, (g, report) = imported
    # Both inside the routing math the router kernel takes: DBRX renormalises its top-k by their L1 norm (torch.norm
    # p=1: aten linalg_vector_norm; vLLM dbrx.py fused_moe(..., renormalize=True)); LongCat's router picks its top-k
    # under @torch.no_grad() (LongcatFlashTopkRouter.get_topk_indices: export's wrap_with_set_grad_enabled)
    assert report.dynamic_tokens
    assert set(report.opaque_ops) <= {"aten::linalg_vector_norm", "wrap_with_set_grad_enabled"}
    moe = [n for n in g.nodes if n.op is Op.MOE_EXPERTS]
    assert len(moe) == len(set(g.schedule.representative.values()))  # one per traced layer
    a = moe[0].attrs_as(MoEAttrs)
    assert (a.num_experts, a.top_k, a.hidden_size, a.intermediate_size, a.gated, a.activation) == (
        4, 2, 32, 24, True, "silu")
    shapes = {k.rsplit(".", 1)[-1]: tuple(v.shape) for k, v in g.params.items() if ".experts." in k}
    if name == "dbrx":
        # w1 (gate) / v1 (up) [E·F, H] = [96, 32] viewed [E, F, H]; w2 [E·F, H] viewed and transposed to [E, H, F]
        assert shapes == {"w1": (4, 24, 32), "v1": (4, 24, 32), "w2": (4, 32, 24)}
    else:
        # gate_up_proj [E, 2F, H] holds the 4 real experts only (transformers allocates 4 + 2 zero experts: [6, 48, 32])
        assert shapes == {"gate_up_proj": (4, 48, 32), "down_proj": (4, 32, 24)}
    assert report.param_count == sum(
        p.numel() for p in _meta_model(CASES[name]).parameters())  # the transformers model's count, unchanged


def _meta_model(cfg):
    from graphsim.importers.hf.build import build_on_meta

    return build_on_meta(copy.deepcopy(cfg)).model


def _layer_kernels(g) -> list[KernelAttrs]:
    reps = set(g.schedule.representative.values())
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer in reps]


def test_fuse_tp2_ep2(imported):
    name, (g, _) = imported
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    ks = _layer_kernels(fused)
    names = [k.name for k in ks]
    assert not [k.name for k in ks if k.approximate], names
    assert names.count("fused_moe") == 1 and "topk_softmax" in names
    if name == "longcat":  # vLLM ZeroExpertFusedMoE: zero_experts_compute_triton, then fused_out + zero result
        assert names.count("zero_experts_compute") == 1
        zk = next(k for k in ks if k.name == "zero_experts_compute")
        assert zk.rule == "zero_experts_compute" and not zk.approximate
        # SGLang's LongcatFlashMoE.forward runs the same two kernels
        sg = run_pipeline(copy.deepcopy(g), "fold,fuse{target=sglang}").graph
        assert [k.name for k in _layer_kernels(sg)].count("zero_experts_compute") == 1
    tp2 = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph
    geo = next(k for k in _layer_kernels(tp2) if k.kind is KernelKind.MOE_EXPERTS).geometry_as(MoeExpertsGeometry)
    assert (geo.tp, geo.inter_size) == (2, 24)
    expert_params = {k: tuple(v.shape) for k, v in tp2.params.items() if ".experts." in k}
    # F = 24 split by 2 in every expert tensor: 12 (down), 12 (DBRX's gate / up apart) or 24 (LongCat's 2F gate_up)
    assert all(s[0] == 4 and (12 in s[1:] or s[1] == 24) and 32 in s for s in expert_params.values()), expert_params
    ep2 = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2},ep{size=2}").graph
    geo = next(k for k in _layer_kernels(ep2) if k.kind is KernelKind.MOE_EXPERTS).geometry_as(MoeExpertsGeometry)
    assert (geo.ep, geo.tp) == (2, 1)
    assert {v.shape[0] for k, v in ep2.params.items() if ".experts." in k} == {2}  # 4 experts over 2 ranks


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_predict_end_to_end(name, tmp_path, capsys):
    from graphsim.cli.app import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(CASES[name]))
    assert main(["predict", str(path), "--gpu", "h100", "-b", "decode:4x128", "-tp", "2", "--json"]) == 0
    batch = json.loads(capsys.readouterr().out)["batches"][0]
    kernels = batch["kernels"]
    assert any(k["kernel"] == "fused_moe" for k in kernels)
    assert not [k["node"] for k in kernels if k.get("approximate")]
    assert all(k["total_us"] is not None for k in kernels)


def test_mixture_of_attention_experts_is_one_named_refusal():
    # JetMoE's attention (JetMoeMoA.map / .reduce): each token's top-k query / output projections from routed experts,
    # kept apart per slot around the attention (not summed as graphsim::moe_experts does): refused by name before the
    # trace (was: "cannot price cat ... depends on the data" from the ParallelExperts split by expert_size)
    from graphsim.errors import UnsupportedArchitectureError

    cfg = {"architectures": ["JetMoeForCausalLM"], "model_type": "jetmoe", "vocab_size": 96, "hidden_size": 32,
           "num_hidden_layers": 1, "num_key_value_heads": 2, "kv_channels": 8, "intermediate_size": 16,
           "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 128}
    with pytest.raises(UnsupportedArchitectureError, match=r"mixture of attention experts \(JetMoeMoA\.map.*vLLM has "
                       r"no implementation of JetMoeForCausalLM \(none in vllm 0\.33\.0's model registry; only its "
                       r"generic Transformers backend"):
        import_hf(ResolvedModel("tiny-jetmoe", cfg, "path", "test"), cache=False)


def test_layout_by_structure_not_by_name():
    # Step-3.7's experts (Step3p7Experts: 3-D gate_up_proj [E, 2F, H] / down_proj [E, H, F] in a hit-experts loop,
    # a clamped SwiGLU of its own `_apply_gate`) are recognised like LongCat's; an experts class dispatched through
    # ExpertsInterface (Mixtral's, @use_experts_implementation) is left to graphsim's experts implementation.
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig
    from transformers.models.step3p7.modeling_step3p7 import Step3p7Experts

    from graphsim.importers.hf.looped_experts import layout

    with torch.device("meta"):
        step = Step3p7Experts(Step3p7TextConfig(hidden_size=32, moe_intermediate_size=24, n_routed_experts=4,
                                                hidden_act="silu"), swiglu_limit=7.0)
        mixtral = MixtralExperts(MixtralConfig(hidden_size=32, intermediate_size=24, num_local_experts=4))
    lay = layout(step)
    assert lay is not None and (lay.num_experts, lay.transposed, lay.identity, lay.gate) == (4, False, False, None)
    assert tuple(lay.up.shape) == (4, 48, 32) and tuple(lay.down.shape) == (4, 32, 24)
    assert lay.activation == "custom_gate:Step3p7Experts"  # its clamp is its own: named, not called silu
    assert layout(mixtral) is None

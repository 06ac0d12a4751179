"""The location maps of Gemma-4 (MoE and dense) and of latent-MoE Nemotron-H (Nemotron-3 Super / Ultra) fit tiny
configs of the real layouts at tp=1, under TP and under EP, and the necessary work they spread reconciles with the
accountant. Tiny configs (same fields as the real ones, small sizes) keep the traces on the meta device short."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.analysis import analyze_prepared, prepare_model
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelKind

# Gemma-4 as published (google/gemma-4-26B-A4B: Gemma4ForConditionalGeneration wrapping a gemma4_text config):
# sliding and full layers, the full ones with K = V and their own head dim; 4 layers so that the last sliding and
# the last full layer (traced on their own: their modules differ) and two others each appear.
GEMMA4_TEXT = {
    "model_type": "gemma4_text", "attention_bias": False, "attention_k_eq_v": True, "enable_moe_block": True,
    "final_logit_softcapping": 30.0, "global_head_dim": 16, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 32, "hidden_size_per_layer_input": 0, "intermediate_size": 48,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "max_position_embeddings": 256, "moe_intermediate_size": 16, "num_attention_heads": 4, "num_experts": 8,
    "num_global_key_value_heads": 1, "num_hidden_layers": 4, "num_key_value_heads": 2, "num_kv_shared_layers": 0,
    "rms_norm_eps": 1e-6, "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1e6, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}},
    "sliding_window": 16, "tie_word_embeddings": True, "top_k_experts": 2, "vocab_size": 96,
}
# Nemotron-H with a latent MoE (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B: moe_latent_size 1024 of hidden 4096):
# Mamba2, attention and MoE layers, the routed experts between fc1_latent_proj and fc2_latent_proj
NEMOTRON_LATENT = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4,
    "hybrid_override_pattern": "ME*E", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 96, "intermediate_size": 32, "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16,
    "n_groups": 2, "conv_kernel": 4, "use_conv_bias": True, "use_bias": False, "mamba_ssm_cache_dtype": "float32",
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "moe_latent_size": 32,
    "moe_shared_expert_intermediate_size": 32, "mlp_bias": False, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _config(tmp_path, name: str, cfg: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _fits(path: str, map_id: str, cases) -> None:
    graph, _ = import_hf(path, cache=False)
    for tp, ep in cases:
        a = analyze_prepared(prepare_model(path, gpu="h200", tp=tp, ep=ep, batch="mixed:1x512@1024+16x4096",
                                           graph=graph))
        assert a.necessary_work_available, (tp, ep, a.reason)
        assert a.map_id == f"{map_id} v1", (tp, ep)
        assert a.reconciliation is not None and a.reconciliation.ok, (tp, ep, a.reconciliation)
        assert a.coverage is not None and a.coverage.share is not None and 0 < a.coverage.share <= 1


@pytest.fixture(autouse=True)
def _roofline_only(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # roofline pricing: no profile.db
    monkeypatch.setenv("GRAPHSIM_NO_AUTO_PROFILE", "1")


@pytest.mark.slow
@pytest.mark.parametrize(("moe", "map_id", "cases"), [
    (True, "gqa-qkvnorm-sandwich-moe-parallel", ((1, 1), (2, 1), (2, 2))),
    (False, "gqa-qkvnorm-sandwich-dense-scaled", ((1, 1), (2, 1))),
])
def test_gemma4_maps_fit_and_reconcile(tmp_path, moe, map_id, cases):
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": "bfloat16",
           "tie_word_embeddings": True, "text_config": {**GEMMA4_TEXT, "enable_moe_block": moe}}
    _fits(_config(tmp_path, f"gemma4-{moe}", cfg), map_id, cases)


def test_latent_moe_map_fits_and_reconciles_under_tp_and_ep(tmp_path):
    _fits(_config(tmp_path, "nemotron-latent", NEMOTRON_LATENT), "mamba2-hybrid-latent-moe", ((1, 1), (2, 1), (2, 2)))


def test_latent_moe_projections_stay_whole_and_one_all_reduce_follows_the_shared_sum(tmp_path):
    # vLLM models/nemotron_h.py NemotronHMoE: fc1/fc2_latent_proj are ReplicatedLinear, the experts are built with
    # reduce_results=False and the routed (after fc2) + shared sum is all-reduced once
    from graphsim.passes import run_pipeline

    graph, _ = import_hf(_config(tmp_path, "nemotron-latent", NEMOTRON_LATENT), cache=False)
    k = run_pipeline(graph, "fold,fuse{target=vllm},tp{size=2}").graph
    assert k.schedule is not None
    layer = k.schedule.representative["full.moe"]
    names = [n.name.split(".", 1)[1] for n in k.nodes if n.layer == layer]
    assert names == ["fused_add_rms_norm", "cast", "gate", "grouped_topk", "fc1_latent_proj", "fused_moe",
                     "fc2_latent_proj", "up_proj", "relu2", "down_proj", "add", "add.all_reduce"]
    by = {n.name.split(".", 1)[1]: n.kernel.geometry_as(GemmGeometry) for n in k.nodes
          if n.layer == layer and n.kernel.kind is KernelKind.GEMM}
    # fc1: hidden 64 → latent 32 and fc2: 32 → 64, whole on each rank; the shared expert's 32 split in two
    assert (by["fc1_latent_proj"].n, by["fc1_latent_proj"].k) == (32, 64)
    assert (by["fc2_latent_proj"].n, by["fc2_latent_proj"].k) == (64, 32)
    assert (by["up_proj"].n, by["down_proj"].k) == (16, 16)

"""tp per mechanism on tiny hand-written configs, and the conservation check that runs after it.

Expected per-rank shapes are derived by hand from the config (arithmetic in the comments), never
from the code under test."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import CollectiveGeometry, Conv1dGeometry, GemmGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import run_pipeline
from graphsim.passes.partition import tp as tp_mod
from graphsim.passes.partition.conservation import ConservationError

# Nemotron-H: one Mamba2 mixer (M), one attention (*), one MLP (-) layer.
# mamba: 8 heads × 16 = intermediate 128, n_groups 2, ssm_state_size 16.
NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 3, "hybrid_override_pattern": "M*-",
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "attention_head_dim": 16,
    "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4,
    "chunk_size": 8, "expand": 2, "time_step_rank": 8, "vocab_size": 96, "max_position_embeddings": 256,
    "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu", "use_conv_bias": True, "use_bias": False,
    "mamba_proj_bias": False, "mlp_bias": False, "attention_bias": False, "layer_norm_epsilon": 1e-5,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "time_step_limit": [0.0, 1e30],
}

# MiniMax-M2: q/k RMS norms over all heads (qk_norm_type per_layer); 4 q heads, 2 kv heads, head_dim 16.
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "intermediate_size": 32, "vocab_size": 96, "num_experts_per_tok": 2, "num_local_experts": 4,
    "max_position_embeddings": 256, "rope_theta": 10000, "rotary_dim": 8, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "use_qk_norm": True, "qk_norm_type": "per_layer", "use_routing_bias": True,
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def nemotron_h():
    graph, _ = import_hf(ResolvedModel("tiny-nemotron-h", dict(NEMOTRON_H), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


@pytest.fixture(scope="module")
def minimax_m2():
    graph, _ = import_hf(ResolvedModel("tiny-minimax-m2", dict(MINIMAX_M2), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


def _node(graph, suffix):
    hits = [n for n in graph.nodes if n.name.endswith(suffix) and isinstance(n.attrs, KernelAttrs)]
    assert hits, suffix
    return hits[0]


def _tp(graph, t):
    res = run_pipeline(graph, f"tp{{size={t}}}").results[0][1]
    return res.graph, res


def test_mamba2_mixer_is_column_then_row_parallel(nemotron_h):
    out, res = _tp(nemotron_h, 2)
    in_proj = _node(out, "L0.in_proj").kernel.geometry_as(GemmGeometry)
    # in_proj out features: gate 128 + x 128 + B 2·16 + C 2·16 + dt 8 = 328, half per rank (vLLM's
    # MambaMixer2 in_proj is column-parallel over all five parts)
    assert (in_proj.n, in_proj.k) == (164, 64)
    assert tuple(out.params["model.layers.0.mixer.in_proj.weight"].shape) == (164, 64)
    # conv1d over x, B, C: 128 + 2·16 + 2·16 = 192 channels, 96 per rank; its weight and bias follow
    conv = _node(out, "L0.causal_conv1d").kernel.geometry_as(Conv1dGeometry)
    assert conv.channels == 96
    assert out.params["model.layers.0.mixer.conv1d.bias"].shape[0] == 96
    # out_proj contracts the 128 intermediate features: row-parallel, k = 64, then one all-reduce of 64
    out_proj = _node(out, "L0.out_proj")
    assert (out_proj.kernel.geometry_as(GemmGeometry).n, out_proj.kernel.geometry_as(GemmGeometry).k) == (64, 64)
    after = out.nodes[out.nodes.index(out_proj) + 1]
    assert after.kernel.kind is KernelKind.ALL_REDUCE
    assert after.kernel.geometry_as(CollectiveGeometry).width == 64
    # the residual stream stays whole: the next layer's fused add+norm is 64 wide on every rank
    assert _node(out, "L1.fused_add_rms_norm").kernel.geometry_as(NormGeometry).width == 64
    # the gated norm runs on the rank's 64 of 128 features with no collective (tp 2 divides n_groups 2)
    gated = _node(out, "L0.rms_norm_gated")
    assert gated.kernel.geometry_as(NormGeometry).width == 64
    assert out.nodes[out.nodes.index(gated) + 1].kernel.kind is not KernelKind.ALL_REDUCE
    assert any("conservation" in x for x in res.notes)


def test_minimax_qkv_split_with_whole_vector_qk_norms(minimax_m2):
    out, _ = _tp(minimax_m2, 2)
    qkv = _node(out, "L0.qkv_proj").kernel.geometry_as(GemmGeometry)
    # (4 q + 2 k + 2 v heads) × 16 = 128 → q 2 heads + k 1 + v 1 = 4 × 16 = 64 per rank
    assert qkv.n == 64
    norms = [n for n in out.nodes if n.layer == 0 and n.kernel.kind is KernelKind.RMS_NORM
             and n.kernel.geometry_as(NormGeometry).dim != n.kernel.geometry_as(NormGeometry).width]
    # q norm: 32 of the 64-wide vector per rank; k norm: 16 of 32
    assert sorted((n.kernel.geometry_as(NormGeometry).width, n.kernel.geometry_as(NormGeometry).dim)
                  for n in norms) == [(16, 32), (32, 64)]
    # one f32 all-reduce of the two per-token sums of squares (q and k): 2 × 4 B = 8 B per token
    var = [n for n in out.nodes if n.kernel.kind is KernelKind.ALL_REDUCE
           and n.kernel.geometry_as(CollectiveGeometry).reason == "norm_variance"]
    assert len(var) == 1
    g = var[0].kernel.geometry_as(CollectiveGeometry)
    assert (g.width, g.bytes_per_row) == (2, 8)


def test_mla_latent_stays_replicated_and_conserves(hf_import):
    graph = run_pipeline(hf_import("deepseek-v2-lite")[0], "fold,fuse{target=vllm}").graph
    out, res = _tp(graph, 2)
    # kv_a_proj_with_mqa: kv_lora_rank 512 + rope 64 = 576 out features, whole on every rank
    kv_a = [n for n in out.nodes if n.layer == 0 and n.kernel.kind is KernelKind.GEMM
            and n.kernel.geometry_as(GemmGeometry).n == 576]
    assert kv_a
    assert any("replicated" in x and "latent" in x for x in res.notes)


@pytest.fixture(scope="module")
def nemotron_h_unfused_scan():
    """The mixer as traced before its scan became one semantic op (graphsim::ssm_scan): the scan's torch
    fallback, static at a probe token count, fused into per-op placeholders between in_proj and the norm."""
    from graphsim.importers.hf import custom_ops

    with pytest.MonkeyPatch.context() as mp:
        mp.delitem(custom_ops.LOOP_KERNELS, "mamba2_chunk_scan")
        graph, _ = import_hf(ResolvedModel("tiny-nemotron-h", dict(NEMOTRON_H), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


def test_broken_partition_is_refused_in_one_line(nemotron_h_unfused_scan, monkeypatch):
    # the pre-fix rule: a projection whose output is normalised as a whole vector stays replicated.
    # The mixer's in_proj is then whole, its out_proj column-parallel, and the residual stream split.
    # (With the semantic scan the head-parallel scan shards out_proj's input whatever in_proj does, so the
    # graph of the unfused scan is the one this rule broke.)
    monkeypatch.setattr(tp_mod, "_whole_norm_consumer", lambda *a: "latent")
    with pytest.raises(ConservationError) as err:
        _tp(nemotron_h_unfused_scan, 2)
    msg = str(err.value)
    assert "\n" not in msg
    assert "fused_add_rms_norm" in msg and "residual stream" in msg


def test_weights_not_split_with_their_gemm_are_refused(nemotron_h, monkeypatch):
    real = tp_mod._shard_dim

    def keep_out_features(spec, dim, t, what, where):  # column-parallel weights left whole
        return spec if what == "out_features" else real(spec, dim, t, what, where)

    monkeypatch.setattr(tp_mod, "_shard_dim", keep_out_features)
    with pytest.raises(ConservationError, match="split differently"):
        _tp(nemotron_h, 2)


def test_gated_delta_net_is_column_then_row_parallel(hf_import):
    from graphsim.ir.geometry import LinearAttentionGeometry

    graph = run_pipeline(hf_import("qwen3-next-80b-a3b")[0], "fold,fuse{target=vllm}").graph
    out, _ = _tp(graph, 8)
    # config: 16 key heads × 128, 32 value heads × 128, hidden 2048
    # in_proj_qkvz: q 16·128 + k 16·128 + v 32·128 + z 32·128 = 12288 → 1536 per rank (vLLM
    # qwen3_next.py Qwen3NextGatedDeltaNet: in_proj_qkvz column-parallel)
    gemms = {n.name.split(".")[-1]: n.kernel.geometry_as(GemmGeometry) for n in out.nodes
             if n.kernel.kind is KernelKind.GEMM}
    assert gemms["in_proj_qkvz"].n == 1536
    # in_proj_ba: b and a per value head, 2 × 32 = 64 → 8
    assert gemms["in_proj_ba"].n == 8
    # conv1d over q, k, v: 2048 + 2048 + 4096 = 8192 channels → 1024
    conv = next(n for n in out.nodes if n.kernel.kind is KernelKind.CONV1D)
    assert conv.kernel.geometry_as(Conv1dGeometry).channels == 1024
    lin = next(n for n in out.nodes if n.kernel.kind is KernelKind.LINEAR_ATTENTION)
    g = lin.kernel.geometry_as(LinearAttentionGeometry)
    assert (g.num_k_heads, g.num_v_heads) == (2, 4)
    # out_proj contracts the 32·128 = 4096 value features: row-parallel, k = 512
    assert (gemms["out_proj"].n, gemms["out_proj"].k) == (2048, 512)

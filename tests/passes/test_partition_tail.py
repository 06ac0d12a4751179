"""tp 2 on the long tail's mechanisms the architectures sweep refused (issue 16): a norm over a whole vector on a
rank's slice (BitNet's sub-norms), per-expert biases (GPT-OSS), an elementwise op reading one row of the embedding
table (Gemma-4's pad embedding). Tiny hand-written configs; expected shapes derived by hand in the comments."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import CollectiveGeometry, GemmGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import run_pipeline

# BitNet: attn_sub_norm over the attention output (hidden 64) before o_proj, ffn_sub_norm over the 96 intermediate
# features before down_proj (transformers models/bitnet/modeling_bitnet.py BitNetAttention / BitNetMLP).
BITNET = {
    "architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "max_position_embeddings": 256, "hidden_act": "relu2", "torch_dtype": "bfloat16",
}

# GPT-OSS: 4 experts of 32 intermediate features with biases, top 2, hidden 48.
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 48, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 128, "max_position_embeddings": 256,
    "sliding_window": 64, "layer_types": ["full_attention"], "torch_dtype": "bfloat16",
}


def _fused(name, cfg):
    graph, _ = import_hf(ResolvedModel(name, dict(cfg), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


def _node(graph, suffix):
    hits = [n for n in graph.nodes if n.name.endswith(suffix) and isinstance(n.attrs, KernelAttrs)]
    assert hits, suffix
    return hits[0]


def _after(graph, node):
    return graph.nodes[graph.nodes.index(node) + 1]


def test_bitnet_sub_norms_reduce_their_variance_and_keep_the_slice():
    fused = _fused("tiny-bitnet", BITNET)
    run = run_pipeline(fused, "tp{size=2}")
    out = run.graph  # the conservation check ran inside the pass (it raised before: "splits the residual stream")
    norms = [n for n in out.nodes if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.RMS_NORM
             and n.name.startswith("L0.")]
    # input_layernorm (whole, 64), attn_sub_norm (64 over the 4 heads -> 32 a rank), ffn_sub_norm (96 -> 48)
    sub = [n for n in norms if n.kernel.geometry_as(NormGeometry).width < n.kernel.geometry_as(NormGeometry).dim]
    assert sorted((n.kernel.geometry_as(NormGeometry).width, n.kernel.geometry_as(NormGeometry).dim)
                  for n in sub) == [(32, 64), (48, 96)]
    for n in sub:  # each rank's sum of squares all-reduced: one f32 a token
        reduce = _after(out, n)
        assert reduce.kernel.kind is KernelKind.ALL_REDUCE
        assert reduce.kernel.geometry_as(CollectiveGeometry).reason == "norm_variance"
    # the projections after them contract the rank's slice: row-parallel, then the usual all-reduce of 64
    o = _node(out, "L0.o_proj").kernel.geometry_as(GemmGeometry)
    down = _node(out, "L0.down_proj").kernel.geometry_as(GemmGeometry)
    assert (o.n, o.k) == (64, 32)  # 4 heads x 16 = 64 input features, 32 a rank
    assert (down.n, down.k) == (64, 48)  # 96 / 2
    assert _after(out, _node(out, "L0.down_proj")).kernel.kind is KernelKind.ALL_REDUCE


@pytest.fixture(scope="module")
def gpt_oss():
    return _fused("tiny-gpt-oss", GPT_OSS)


def test_gpt_oss_expert_biases_follow_vllm(gpt_oss):
    res = run_pipeline(gpt_oss, "tp{size=2}").results[0][1]  # refused before: weights split by 1.99, not 2
    out = res.graph
    p = out.params
    # gate_up bias [4 experts, 2 x 32] narrowed to the rank's 2 x 16; the down bias [4, 48] whole on every rank
    assert tuple(p["model.layers.0.mlp.experts.gate_up_proj_bias"].shape) == (4, 32)
    assert tuple(p["model.layers.0.mlp.experts.down_proj_bias"].shape) == (4, 48)
    assert tuple(p["model.layers.0.mlp.experts.gate_up_proj"].shape) == (4, 48, 32)
    assert any("row-parallel biases" in x for x in res.notes), res.notes


def test_gpt_oss_expert_biases_spread_with_their_experts(gpt_oss):
    out = run_pipeline(gpt_oss, "ep{size=2}").graph
    p = out.params
    # 4 experts / 2 ranks = 2 each: weights and both biases
    assert tuple(p["model.layers.0.mlp.experts.gate_up_proj_bias"].shape) == (2, 64)
    assert tuple(p["model.layers.0.mlp.experts.down_proj_bias"].shape) == (2, 48)
    assert tuple(p["model.layers.0.mlp.experts.down_proj"].shape) == (2, 32, 48)


@pytest.mark.slow  # a Gemma-4 wrapper trace (~20 s with the first trace's warm-up)
def test_gemma4_pad_embedding_row_is_not_the_table():
    # Gemma4Model.forward (transformers models/gemma4/modeling_gemma4.py) takes embed_tokens.weight[pad_token_id]
    # into a where for its per-layer inputs: the fused where reads the table's name. vLLM's vocab-parallel embedding
    # halves the table a rank; the where still works on one row, so its weights were "split differently" from
    # its FLOPs and tp 2 was refused. The table is counted once, by the embedding that owns it.
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "vision_config": None,
           "audio_config": None,
           "text_config": {"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128,
                           "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                           "vocab_size": 256, "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16,
                           "sliding_window": 64, "max_position_embeddings": 512, "pad_token_id": 0,
                           "layer_types": ["sliding_attention", "full_attention"]}}
    fused = _fused("tiny-gemma4-wrapper", cfg)
    where = [n for n in fused.nodes if "model.language_model.embed_tokens.weight" in n.inputs
             and n.kernel.kind is KernelKind.ELEMENTWISE]
    assert where, "the pad-embedding where no longer reads the table: this test lost its subject"
    out = run_pipeline(fused, "tp{size=2}").graph
    # 256 rows x 64 features, 128 rows a rank (vocab-parallel)
    assert tuple(out.params["model.language_model.embed_tokens.weight"].shape) == (128, 64)


# Gemma-3n: AltUp keeps 4 copies of the hidden state (64); copies 1-3 come from altup_projections (64 -> 64) and
# are stacked with the replicated embedding, the per-layer inputs (4 layers x 16) from per_layer_model_projection
# added to the replicated per-layer embedding (transformers models/gemma3n/modeling_gemma3n.py Gemma3nTextModel).
GEMMA3N = {
    "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 64,
    "intermediate_size": [128] * 4, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
    "head_dim": 32, "vocab_size": 256, "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16,
    "sliding_window": 64, "max_position_embeddings": 512, "layer_types": ["sliding_attention", "full_attention"] * 2,
    "num_kv_shared_layers": 0, "laurel_rank": 8, "activation_sparsity_pattern": [0.0] * 4, "altup_num_inputs": 4,
    "torch_dtype": "bfloat16",
}


@pytest.mark.slow  # a Gemma-3n trace with its full-depth retry (~5 s, more on 2 shared cores)
def test_gemma3n_projections_stacked_with_the_embedding_are_gathered():
    # vLLM builds them ColumnParallelLinear(gather_output=True) (models/gemma3n.py Gemma3nTextModel.__init__):
    # split GEMM, then an all-gather; tp 2 had split them and stacked each rank's half with the whole embedding,
    # and the conservation check refused the AltUp residual ("splits the residual stream")
    fused = _fused("tiny-gemma3n", GEMMA3N)
    out = run_pipeline(fused, "tp{size=2}").graph
    gathers = {n.inputs[0]: n for n in out.nodes if isinstance(n.attrs, KernelAttrs)
               and n.attrs.kind is KernelKind.ALL_GATHER}
    projections = [n for n in out.nodes if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.GEMM
                   and n.scope.startswith(("model.altup_projections", "model.per_layer_model_projection"))]
    assert len(projections) == 4  # 3 AltUp projections and the per-layer one
    for p in projections:
        g = p.kernel.geometry_as(GemmGeometry)
        whole = 4 * 16 if "per_layer" in p.scope else 64
        assert (g.n, g.k) == (whole // 2, 64)  # column-parallel: half the output features a rank
        assert gathers[p.name].kernel.geometry_as(CollectiveGeometry).width == whole  # gathered back whole
    # the layers' residual stream (the fused add + norms) stays 64 wide on every rank
    for n in out.nodes:
        if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.FUSED_ADD_RMS_NORM:
            assert n.kernel.geometry_as(NormGeometry).width == 64, n.name


def test_heads_tp_does_not_divide_is_vllms_own_refusal():
    # Falcon-7B's 71 heads at tp 2: vLLM refuses before building the model (ModelConfig.verify_with_parallel_config);
    # graphsim said "num_heads = 71 is not divisible by 2" at the first rotary kernel. A tiny Llama with 3 heads.
    from graphsim.passes.base import PassError

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 48, "intermediate_size": 96,
           "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 3, "vocab_size": 192,
           "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
    fused = _fused("tiny-llama-3-heads", cfg)
    with pytest.raises(PassError) as err:
        run_pipeline(fused, "tp{size=2}")
    msg = str(err.value)
    assert "\n" not in msg
    assert "'Total number of attention heads (3) must be divisible by tensor parallel size (2)'" in msg
    assert run_pipeline(fused, "tp{size=3}").graph.meta.tp == 3  # a size that divides the heads partitions


def test_a_vocabulary_tp_does_not_divide_is_padded_as_vllm_pads_it():
    # vLLM's VocabParallelEmbedding / ParallelLMHead pad the vocabulary to a multiple of 64, then split it (GPT-2's
    # 50257 rows run at tp 2); graphsim refused "vocab_size = 50257 is not divisible by 2" (XLM-RoBERTa-XL's one
    # token type: "vocab_size = 1"). 129 rows -> 192 padded -> 96 a rank, for the table and the LM head.
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 48, "intermediate_size": 96,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 129,
           "max_position_embeddings": 256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    res = run_pipeline(_fused("tiny-llama-odd-vocab", cfg), "tp{size=2}").results[0][1]
    p = res.graph.params
    assert tuple(p["model.embed_tokens.weight"].shape) == (96, 48)
    assert tuple(p["lm_head.weight"].shape) == (96, 48)
    assert _node(res.graph, "lm_head").kernel.geometry_as(GemmGeometry).n == 96
    # the padding is stated as replication: 2 x 96 = 192 rows for 129
    assert any("vocabulary padded to a multiple of 64" in x for x in res.notes), res.notes


def test_k_norm_on_replicated_kv_heads_runs_whole():
    # Qwen3 with one KV head at tp 2: vLLM's QKVParallelLinear gives every rank the whole head, and k_norm runs on it
    # as it is. tp split the k norm's width to half a head and added a variance all-reduce (seen on Gemma-3n's tiny
    # config). 4 q heads of 16, 1 KV head of 16.
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
           "vocab_size": 256, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
    out = run_pipeline(_fused("tiny-qwen3-one-kv-head", cfg), "tp{size=2}").graph
    norms = [n for n in out.nodes if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.RMS_NORM
             and n.layer == 0 and n.kernel.geometry_as(NormGeometry).dim == 16]
    q_norm, k_norm = norms  # per head: q over the rank's 2 heads (32), k over the whole replicated head (16)
    assert q_norm.kernel.geometry_as(NormGeometry).width == 32
    assert k_norm.kernel.geometry_as(NormGeometry).width == 16
    assert all(_after(out, n).kernel.kind is not KernelKind.ALL_REDUCE for n in norms)

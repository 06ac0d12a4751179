"""GPT-era decoders after `fold,fuse{target=vllm}`: the kernels their vLLM ports launch (issue 16: no silent wrong
numbers). Tiny configs of the real layouts (same fields, small sizes), one traced layer each:

- GPT-2 (transformers' Conv1D: addmm with an [in, out] weight), GPT-BigCode (multi-query c_attn), GPT-J (parallel
  attention + MLP, rotary), OPT (learned positions with an offset, query pre-scaled), BLOOM (ALiBi, fused
  query_key_value). Expected per layer, from vLLM's model files (gpt2.py GPT2Block.forward, gpt_bigcode.py,
  gpt_j.py GPTJBlock.forward, opt.py OPTDecoderLayer.forward, bloom.py BloomBlock.forward): nn.LayerNorm →
  `layer_norm`, plain residual `add`s, the GEMMs (4 per layer; GPT-J's q/k/v packed into one, OPT's too), one
  attention kernel, one activation kernel; no approximate placeholder anywhere.
"""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.importers.hf import import_hf  # noqa: E402
from graphsim.ir import Op  # noqa: E402
from graphsim.ir.attrs import AttentionAttrs  # noqa: E402
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402

TINY = {
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
             "n_positions": 256, "vocab_size": 96, "bos_token_id": 0, "eos_token_id": 0},
    "gpt_bigcode": {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "n_embd": 64, "n_head": 4,
                    "n_layer": 2, "n_positions": 256, "vocab_size": 96, "multi_query": True, "bos_token_id": 0,
                    "eos_token_id": 0},
    "gptj": {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 64, "n_head": 4, "n_layer": 2,
             "n_positions": 256, "vocab_size": 96, "rotary_dim": 8, "bos_token_id": 0, "eos_token_id": 0},
    "opt": {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64, "ffn_dim": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 256, "vocab_size": 96,
            "word_embed_proj_dim": 64, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1},
    # OPT-350m's layout: post-LN (do_layer_norm_before false) and a 32-wide embedding projected in and out
    "opt_350m": {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64, "ffn_dim": 128,
                 "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 256, "vocab_size": 96,
                 "word_embed_proj_dim": 32, "do_layer_norm_before": False, "bos_token_id": 0, "eos_token_id": 0,
                 "pad_token_id": 1},
    "bloom": {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 64, "n_head": 4,
              "n_layer": 2, "vocab_size": 96, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1},
    # Falcon-40B's layout (new_decoder_architecture: GQA, two parallel norms) and Falcon-7B's (multi-query,
    # parallel attention, one norm), both rotary; and an ALiBi Falcon (falcon-rw style: sequential, biases)
    "falcon": {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 64,
               "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 96, "new_decoder_architecture": True,
               "num_kv_heads": 2, "bos_token_id": 0, "eos_token_id": 0},
    "falcon_mqa": {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 64,
                   "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 96, "multi_query": True,
                   "parallel_attn": True, "bias": False, "bos_token_id": 0, "eos_token_id": 0},
    "falcon_alibi": {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 64,
                     "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 96, "multi_query": False,
                     "alibi": True, "parallel_attn": False, "bias": True, "bos_token_id": 0, "eos_token_id": 0},
    # MPT-7B's layout (ALiBi always, fused Wqkv, no biases)
    "mpt": {"architectures": ["MptForCausalLM"], "model_type": "mpt", "d_model": 64, "n_heads": 4, "n_layers": 2,
            "max_seq_len": 256, "vocab_size": 96, "bos_token_id": 0, "eos_token_id": 0},
}

# per layer: (GEMMs, layer norms, adds, activation kernel) as vLLM's port launches them
EXPECTED = {
    # gpt2.py: ln_1, c_attn, attn, c_proj, + residual, ln_2, c_fc, gelu_new, c_proj, + residual
    "gpt2": (4, 2, 2, "gelu_new"),
    # gpt_bigcode.py GPTBigCodeBlock: the same order; activation_function gelu_pytorch_tanh → nn.GELU(tanh)
    "gpt_bigcode": (4, 2, 2, "gelu"),
    # gpt_j.py GPTJBlock.forward: ln_1, qkv_proj (packed), rotary, attn, out_proj ‖ fc_in, gelu_new, fc_out; then
    # attn_output + mlp_output + residual (two adds)
    "gptj": (4, 1, 2, "gelu_new"),
    # opt.py OPTDecoderLayer.forward (do_layer_norm_before): self_attn_layer_norm, qkv_proj, attn, out_proj, + residual,
    # final_layer_norm, fc1, relu, fc2, + residual
    "opt": (4, 2, 2, "relu"),
    "opt_350m": (4, 2, 2, "relu"),  # the norms after each residual add; project_in / project_out outside the layers
    # bloom.py BloomBlock.forward: input_layernorm, query_key_value, attn (ALiBi), dense, + residual,
    # post_attention_layernorm, dense_h_to_4h, gelu, dense_4h_to_h, + residual
    "bloom": (4, 2, 2, "gelu"),
    # falcon.py FalconDecoderLayer.forward: ln_attn ‖ ln_mlp (new_decoder_architecture), query_key_value, rotary,
    # attn, dense ‖ dense_h_to_4h, gelu, dense_4h_to_h; mlp_output += attention_output; + residual
    "falcon": (4, 2, 2, "gelu"),
    "falcon_mqa": (4, 1, 2, "gelu"),  # one input_layernorm shared by the parallel attention and MLP
    "falcon_alibi": (4, 2, 2, "gelu"),  # sequential: input_layernorm, attn, + residual, post_attention_layernorm, MLP
    # mpt.py MPTBlock.forward: norm_1, Wqkv, attn (ALiBi), out_proj, + residual, norm_2, up_proj, gelu, down_proj, +
    "mpt": (4, 2, 2, "gelu"),
}


def _import(name: str):
    g, _ = import_hf(ResolvedModel(f"tiny-{name}", copy.deepcopy(TINY[name]), "path", "test"), cache=False)
    return g


@pytest.fixture(scope="module")
def graphs():
    memo: dict = {}

    def get(name: str):
        if name not in memo:
            memo[name] = _import(name)
        return memo[name]

    return get


def _kernels(g, layer):
    return [n for n in g.nodes if n.op is Op.KERNEL and n.layer == layer]


@pytest.mark.parametrize("name", list(TINY))
def test_layer_is_the_kernels_vllm_launches(name, graphs):
    fused = run_pipeline(graphs(name), "fold,fuse{target=vllm}").graph
    every = [n.attrs_as(KernelAttrs) for n in fused.nodes if n.op is Op.KERNEL]
    assert not [k.name for k in every if k.approximate], "no approximate placeholder kernel"
    assert not [k for k in every if k.kind is KernelKind.FUSED_ADD_RMS_NORM or k.name.endswith("rms_norm")]
    layer = [n.attrs_as(KernelAttrs) for n in _kernels(fused, 0)]
    gemms, norms, adds, act = EXPECTED[name]
    assert sum(k.kind is KernelKind.GEMM for k in layer) == gemms
    assert [k.name for k in layer if k.kind is KernelKind.ATTENTION] == ["flash_attn_varlen"]
    assert [k.name for k in layer if k.kind is KernelKind.LAYER_NORM] == ["layer_norm"] * norms
    assert [k.name for k in layer if k.kind is KernelKind.ELEMENTWISE] == ["add"] * adds
    assert [k.name for k in layer if k.kind is KernelKind.ACTIVATION] == [act]
    # outside the layers: the final norm is torch's layer_norm too (post-LN OPT has none: opt.py OPTDecoder builds
    # final_layer_norm only when do_layer_norm_before; BLOOM also norms its embeddings: bloom.py BloomModel
    # word_embeddings_layernorm), the token embedding a gather
    top = [k.name for k in (n.attrs_as(KernelAttrs) for n in _kernels(fused, None))]
    assert top.count("layer_norm") == {"opt_350m": 0, "bloom": 2}.get(name, 1)
    assert "embedding" in top


def test_gpt2_conv1d_is_a_gemm_with_its_weight_read_as_in_by_out(graphs):
    g = graphs("gpt2")
    # transformers' Conv1D stores c_attn's weight [in 64, out 192]; the linear reads in = 64, out = 3 · 64
    c_attn = next(n for n in g.nodes if n.op is Op.LINEAR and n.scope.endswith("attn.c_attn"))
    assert (c_attn.attrs.in_features, c_attn.attrs.out_features, c_attn.attrs.has_bias) == (64, 192, True)
    fused = run_pipeline(g, "fold,fuse{target=vllm}").graph
    geo = {n.scope.split("h.0.")[-1]: n.attrs_as(KernelAttrs).geometry for n in _kernels(fused, 0)
           if n.attrs_as(KernelAttrs).kind is KernelKind.GEMM}
    # c_attn is vLLM's QKVParallelLinear (q = 4 heads × 16, 4 KV heads); c_fc 64 → 4 · 64, c_proj back
    assert geo["attn.c_attn"] == GemmGeometry(n=192, k=64, bias=True, q_features=64, num_kv_heads=4)
    assert geo["mlp.c_fc"] == GemmGeometry(n=256, k=64, bias=True)
    assert geo["mlp.c_proj"] == GemmGeometry(n=64, k=256, bias=True)
    # the position embedding is a gather over n_positions rows, summed with the token embedding by one add
    top = [n.attrs_as(KernelAttrs) for n in _kernels(fused, None)]
    assert sorted(k.name for k in top if k.kind is KernelKind.EMBEDDING) == ["embedding", "embedding"]
    assert [k.rule for k in top if k.kind is KernelKind.ELEMENTWISE] == ["position_embedding_add"]


def test_gpt2_tp2_splits_conv1d_weights_on_the_right_dimension(graphs):
    run = run_pipeline(graphs("gpt2"), "fold,fuse{target=vllm},tp{size=2}")
    p = run.graph.params
    # column-parallel c_attn / c_fc split their out dim (dim 1 of an [in, out] weight), row-parallel c_proj its in
    # dim (dim 0); the row-parallel bias stays whole (vLLM RowParallelLinear adds it on rank 0)
    assert p["transformer.h.0.attn.c_attn.weight"].shape == (64, 96)
    assert p["transformer.h.0.attn.c_attn.bias"].shape == (96,)
    assert p["transformer.h.0.mlp.c_fc.weight"].shape == (64, 128)
    assert p["transformer.h.0.mlp.c_proj.weight"].shape == (128, 64)
    assert p["transformer.h.0.mlp.c_proj.bias"].shape == (64,)
    layer = [n.attrs_as(KernelAttrs) for n in _kernels(run.graph, 0)]
    assert sum(k.kind is KernelKind.ALL_REDUCE for k in layer) == 2


@pytest.mark.parametrize("name", list(TINY))
def test_tp2_conserves_work(name, graphs):
    # the conservation check runs inside tp and raises on any kernel neither split nor declared whole
    run = run_pipeline(graphs(name), "fold,fuse{target=vllm},tp{size=2}")
    notes = " ".join(n for _, r, _ in run.results for n in r.notes)
    assert "conservation: per-rank × 2" in notes


def test_bigcode_multi_query_c_attn_keeps_the_kv_head_whole_per_rank(graphs):
    run = run_pipeline(graphs("gpt_bigcode"), "fold,fuse{target=vllm},tp{size=2}")
    c_attn = next(n for n in _kernels(run.graph, 0) if n.scope.endswith("attn.c_attn"))
    # vLLM gpt_bigcode.py: c_attn is QKVParallelLinear with 1 KV head: per rank q 64/2 = 32 + k 16 + v 16 = 64
    assert c_attn.attrs_as(KernelAttrs).geometry_as(GemmGeometry).n == 64
    assert run.graph.params["transformer.h.0.attn.c_attn.weight"].shape == (64, 64)


def test_bloom_alibi_attention_is_one_attention_node(graphs):
    g = graphs("bloom")
    attn = [n for n in g.nodes if n.op is Op.ATTENTION]
    assert len(attn) == 1 and not [n for n in g.nodes if n.op is Op.BMM]
    a = attn[0].attrs_as(AttentionAttrs)
    assert (a.alibi, a.num_heads, a.num_kv_heads, a.head_dim, a.causal) == (True, 4, 4, 16, True)
    fused = run_pipeline(g, "fold,fuse{target=vllm}").graph
    geo = next(n for n in _kernels(fused, 0) if n.attrs_as(KernelAttrs).kind is KernelKind.ATTENTION)
    attn_geo = geo.attrs_as(KernelAttrs).geometry_as(AttentionGeometry)
    assert (attn_geo.num_heads, attn_geo.alibi) == (4, True)


def test_bloom_alibi_op_gives_transformers_eager_logits():
    from graphsim.importers.hf.alibi_ops import alibi_patches
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    cfg = TINY["bloom"]
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32).eval()
    ids = torch.randint(0, 96, (1, 11))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with alibi_patches(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert swapped == ["transformers.models.bloom.modeling_bloom.BloomAttention.forward"]
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["falcon", "falcon_mqa", "falcon_alibi"])
def test_falcon_attention_op_gives_transformers_sdpa_logits(name):
    # the reference is transformers' sdpa path: with `alibi`, FalconModel folds alibi × inv_norm_factor into the
    # attention mask, and its eager path then adds the bias a second time in FalconAttention.forward
    # (`attention_scores + alibi`, then `+ attention_mask`); vLLM (falcon.py) applies the scaled slopes once
    from graphsim.importers.hf.alibi_ops import alibi_patches
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    cfg = TINY[name]
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32,
                                                              attn_implementation="sdpa").eval()
    ids = torch.randint(0, 96, (1, 11))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with alibi_patches(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert swapped == ["transformers.models.falcon.modeling_falcon.FalconAttention.forward"]
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_mpt_alibi_op_gives_transformers_eager_logits():
    from graphsim.importers.hf.alibi_ops import alibi_patches
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    cfg = TINY["mpt"]
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    ids = torch.randint(0, 96, (1, 11))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with alibi_patches(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert swapped == ["transformers.models.mpt.modeling_mpt.MptAttention.forward"]
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("name", "kv_heads", "n_rank"), [("falcon", 2, 64), ("falcon_mqa", 1, 64)])
def test_falcon_qkv_keeps_whole_kv_heads_at_tp2(name, kv_heads, n_rank, graphs):
    # vLLM falcon.py: query_key_value is QKVParallelLinear over total_num_kv_heads (num_kv_heads, or 1 for
    # multi_query): at tp 2, q 64/2 = 32 plus whole KV heads: 2 heads → 1 per rank (32 + 2·16 = 64),
    # 1 head → replicated (32 + 2·16 = 64)
    fused = run_pipeline(graphs(name), "fold,fuse{target=vllm}").graph
    qkv = next(n for n in _kernels(fused, 0) if n.scope.endswith("query_key_value"))
    assert qkv.attrs_as(KernelAttrs).geometry_as(GemmGeometry).num_kv_heads == kv_heads
    run = run_pipeline(graphs(name), "fold,fuse{target=vllm},tp{size=2}")
    qkv = next(n for n in _kernels(run.graph, 0) if n.scope.endswith("query_key_value"))
    assert qkv.attrs_as(KernelAttrs).geometry_as(GemmGeometry).n == n_rank


@pytest.mark.parametrize("name", list(TINY))
def test_predict_decode_has_no_elementwise_kernel_with_matmul_work(name, tmp_path):
    from typer.testing import CliRunner

    from graphsim.cli.app import _register, app

    _register()
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY[name]))
    res = CliRunner().invoke(app, ["--no-cache", "predict", str(cfg), "--gpu", "h100", "-b", "decode:4x128", "--json"])
    assert res.exit_code == 0, res.output
    kernels = json.loads(res.output)["batches"][0]["kernels"]
    assert not [k["kernel"] for k in kernels if k["approximate"]]
    # every kernel with FLOPs is a GEMM or the attention (an elementwise kernel carries none)
    assert {k["kind"] for k in kernels if k["flops"] > 0} <= {"gemm", "attention"}
    layer = [k for k in kernels if "×" in k["region"]]
    assert sum(k["kind"] == "gemm" for k in layer) == EXPECTED[name][0]
    assert [k["kernel"] for k in layer if k["kind"] == "attention"] == ["flash_attn_varlen"]

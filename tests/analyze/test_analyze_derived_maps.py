"""Location maps derived from kernel order and kind (`graphsim.work.analyzer.derived`): the rules on plain sites
and rows (no torch), one tiny model of each long-tail group (GPT-era, BERT-style, encoder-decoder decoder, SSM,
linear attention, MoE), the derived map against a shipped one, and (slow) every registered class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plain_sites import Rows as _Rows
from plain_sites import row as _row
from plain_sites import site as _site

from graphsim.work.analyzer import UnsupportedDeployment
from graphsim.work.analyzer.derived import derive_map

# --- the rules on plain data -----------------------------------------------------------------------




OUTSIDE_SITES = [("outside/model.wte/embedding", "embedding"), ("outside/model.wpe/embedding", "embedding")]
HEAD_SITES = [("outside/model.ln_f/layer_norm", "layer_norm"), ("outside/lm_head/lm_head", "gemm")]
OUTSIDE_ROWS = [_row("outside", "embed"), _row("outside", "final_norm"), _row("outside", "head")]
LAYER_ROWS = ["attn.norm:input_layernorm", "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
              "attn.qkv:self_attn.v_proj", "attn.out:self_attn.o_proj", "ffn.norm:post_attention_layernorm",
              "ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj", "attn.core:compute"]


def _derive(layer: list[tuple[str, str]], layer_rows: list[str]):
    sites = [_site(*s) for s in OUTSIDE_SITES + [(f"full.dense/{at}", k) for at, k in layer] + HEAD_SITES]
    rows = _Rows(OUTSIDE_ROWS + [_row("full.dense", ref) for ref in layer_rows])
    m = derive_map(sites, rows, "vllm")  # type: ignore[arg-type]  # a RowSet's rows and of_region suffice
    return {e.location: e.rows for e in m.entries}


def test_packed_and_unpacked_projections_are_told_apart_by_the_kernel_count():
    # Llama-like: q/k/v in one GEMM (QKVParallelLinear), gate/up in one (MergedColumnParallelLinear)
    packed = _derive([("input_layernorm/rms_norm", "rms_norm"), ("self_attn/qkv_proj", "gemm"),
                      ("self_attn/rotary_embedding", "rotary"), ("self_attn/attn", "attention"),
                      ("self_attn.o_proj/o_proj", "gemm"), ("[layer]/fused_add_rms_norm", "fused_add_rms_norm"),
                      ("mlp/gate_up_proj", "gemm"), ("mlp/silu_and_mul", "act_and_mul"),
                      ("mlp.down_proj/down_proj", "gemm")], LAYER_ROWS)
    assert packed["full.dense/self_attn/qkv_proj"] == ("attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
                                                      "attn.qkv:self_attn.v_proj")
    assert packed["full.dense/mlp/gate_up_proj"] == ("ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj")
    assert packed["full.dense/[layer]/fused_add_rms_norm"] == ("ffn.norm:post_attention_layernorm",)
    assert packed["full.dense/self_attn/attn"] == ("attn.core:compute",)
    assert packed["full.dense/self_attn/rotary_embedding"] == ()
    # outside: the token table (the first embedding), the first norm and the last GEMM after the layers
    assert packed["outside/model.wte/embedding"] == ("embed",) and packed["outside/model.wpe/embedding"] == ()
    assert packed["outside/model.ln_f/layer_norm"] == ("final_norm",) and packed["outside/lm_head/lm_head"] == ("head",)
    # BERT-like: three GEMMs for q, k, v, and the MLP's two separate: one GEMM per row
    apart = _derive([("q/q", "gemm"), ("k/k", "gemm"), ("v/v", "gemm"), ("attn/attn", "attention"),
                     ("o/o", "gemm"), ("ln1/layer_norm", "layer_norm"), ("w1/w1", "gemm"), ("w3/w3", "gemm"),
                     ("w2/w2", "gemm"), ("ln2/layer_norm", "layer_norm")], LAYER_ROWS)
    assert apart["full.dense/k/k"] == ("attn.qkv:self_attn.k_proj",)
    assert apart["full.dense/w3/w3"] == ("ffn.mlp:mlp.up_proj",)
    # post-norm: the norms are taken in order wherever they sit
    assert apart["full.dense/ln1/layer_norm"] == ("attn.norm:input_layernorm",)
    assert apart["full.dense/ln2/layer_norm"] == ("ffn.norm:post_attention_layernorm",)


def test_what_the_rules_cannot_place_is_unsupported_with_the_reason():
    layer = [("n/rms_norm", "rms_norm"), ("a/qkv", "gemm"), ("a/attn", "attention"), ("a/o", "gemm"),
             ("n2/rms_norm", "rms_norm"), ("m/gate_up", "gemm"), ("m/down", "gemm")]
    # two norm kernels but three norm rows (a q-norm fused into another kernel, say)
    with pytest.raises(UnsupportedDeployment, match="2 norm kernels for 3 norm rows"):
        _derive(layer, [*LAYER_ROWS, "attn.norm:self_attn.q_norm"])
    # more GEMMs than linear rows (a projection the accountant does not know). Fewer GEMMs than a packing gives,
    # or q, k, v split in two, would fit another packing: that the kernels' shapes agree is checked at tp 1 below
    with pytest.raises(UnsupportedDeployment, match=r"8 GEMM kernels .* no packing"):
        _derive([*layer[:2], *[(f"a/x{i}", "gemm") for i in range(4)], *layer[2:]], LAYER_ROWS)
    # two attention kernels in one layer (DiffLlama's two softmax maps)
    with pytest.raises(UnsupportedDeployment, match="2 attention kernels"):
        _derive([*layer[:3], ("a/attn2", "attention"), *layer[3:]], LAYER_ROWS)
    # a recurrence with no kernel of its own (RecurrentGemma's RG-LRU unrolled into placeholders) is not put on the
    # convolution kernel beside it; only a core of convolution weights is (LFM2)
    rglru = ["attn.norm:input_layernorm", "attn.qkv:blk.linear_x", "attn.core:blk.conv_1d", "attn.core:blk.rg_lru.a",
             "attn.out:blk.linear_out", "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.up_proj",
             "ffn.mlp:mlp.down_proj", "attn.core:compute"]
    with pytest.raises(UnsupportedDeployment, match="0 attention kernels"):
        _derive([("n/rms_norm", "rms_norm"), ("blk.linear_x/linear_x", "gemm"), ("blk/causal_conv1d", "conv1d"),
                 ("blk.rg_lru/mul", "elementwise"), ("blk.linear_out/linear_out", "gemm"), ("n2/rms_norm", "rms_norm"),
                 ("m/up", "gemm"), ("m/down", "gemm")], rglru)
    # a part no rule knows (a KV compressor): shipped maps only
    with pytest.raises(UnsupportedDeployment, match=r"part\(s\) attn\.compress need a shipped"):
        _derive(layer, [*LAYER_ROWS, "attn.compress:self_attn.compressor.wkv"])
    # an indexer row placed by module needs the one kernel of that module
    with pytest.raises(UnsupportedDeployment, match=r"0 'self_attn\.indexer\.wk' kernels"):
        _derive(layer, [*LAYER_ROWS, "attn.index:self_attn.indexer.wk"])


def test_indexer_and_hyper_connection_rows_go_to_their_modules_kernels():
    # HunYuan-V4's layer (tiny trace's kernel order): iHC pre gate, MLA with a DSA indexer and a sigmoid output
    # gate, iHC post; the accountant lists the indexer and hc rows after the attention's projections
    layer = [("attn_hc/triton_ihc_pre", "elementwise"), ("input_layernorm/rms_norm", "rms_norm"),
             ("self_attn.gate_proj/gate_proj", "gemm"), ("self_attn/fused_qkv_a_proj", "gemm"),
             ("self_attn.q_a_layernorm/rms_norm", "rms_norm"), ("self_attn.q_b_proj/q_b_proj", "gemm"),
             ("self_attn.kv_a_layernorm/rms_norm", "rms_norm"), ("self_attn.kv_b_proj/kv_b_proj", "gemm"),
             ("self_attn/rotary_embedding", "rotary"), ("self_attn.indexer.wq_b/wq_b", "gemm"),
             ("self_attn.indexer.wk/wk", "gemm"), ("self_attn.indexer.k_norm/layer_norm", "layer_norm"),
             ("self_attn.indexer.weights_proj/weights_proj", "gemm"),
             ("self_attn.indexer/sparse_attn_indexer", "sparse_indexer"), ("self_attn/flashmla_sparse", "attention"),
             ("self_attn/sigmoid", "elementwise"), ("self_attn/mul", "elementwise"),
             ("self_attn.o_proj/o_proj", "gemm"), ("[layer]/triton_ihc_post", "elementwise"),
             ("ffn_hc/triton_ihc_pre", "elementwise"), ("post_attention_layernorm/rms_norm", "rms_norm"),
             ("mlp/gate_up_proj", "gemm"), ("mlp/silu_and_mul", "act_and_mul"), ("mlp.down_proj/down_proj", "gemm"),
             ("[layer]/triton_ihc_post#2", "elementwise")]
    rows = ["attn.norm:input_layernorm", "attn.q:self_attn.q_a_proj", "attn.norm:self_attn.q_a_layernorm",
            "attn.q:self_attn.q_b_proj", "attn.kv:self_attn.kv_a_proj_with_mqa", "attn.norm:self_attn.kv_a_layernorm",
            "attn.kv:self_attn.kv_b_proj", "attn.out:self_attn.o_proj", "attn.index:self_attn.indexer.wq_b",
            "attn.index:self_attn.indexer.wk", "attn.index:self_attn.indexer.k_norm",
            "attn.index:self_attn.indexer.weights_proj", "attn.gate:self_attn.gate_proj",
            "attn.core:self_attn.sinks", "attn.hc:attn_hc.fn", "attn.hc:attn_hc.base", "attn.hc:attn_hc.scale",
            "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj",
            "ffn.mlp:mlp.down_proj", "ffn.hc:ffn_hc.fn", "ffn.hc:ffn_hc.base", "ffn.hc:ffn_hc.scale",
            "attn.core:compute", "attn.core:indexer"]
    m = _derive(layer, rows)
    at = "full.dense/"
    # the gate weights of each hyper-connection (parameters of attn_hc / ffn_hc) to that module's pre kernel
    assert m[at + "attn_hc/triton_ihc_pre"] == ("attn.hc:attn_hc.fn", "attn.hc:attn_hc.base", "attn.hc:attn_hc.scale")
    assert m[at + "ffn_hc/triton_ihc_pre"] == ("ffn.hc:ffn_hc.fn", "ffn.hc:ffn_hc.base", "ffn.hc:ffn_hc.scale")
    assert m[at + "[layer]/triton_ihc_post"] == () and m[at + "[layer]/triton_ihc_post#2"] == ()
    # the indexer's projections and key norm by module; its scoring to its kernel, the attention core to MLA's
    assert m[at + "self_attn.indexer.k_norm/layer_norm"] == ("attn.index:self_attn.indexer.k_norm",)
    assert m[at + "self_attn.indexer.weights_proj/weights_proj"] == ("attn.index:self_attn.indexer.weights_proj",)
    assert m[at + "self_attn.indexer/sparse_attn_indexer"] == ("attn.core:indexer",)
    assert m[at + "self_attn/flashmla_sparse"] == ("attn.core:self_attn.sinks", "attn.core:compute")
    # the rest as before: the gate GEMM by its name though listed late, MLA's a projections packed
    assert m[at + "self_attn.gate_proj/gate_proj"] == ("attn.gate:self_attn.gate_proj",)
    assert m[at + "self_attn/fused_qkv_a_proj"] == ("attn.q:self_attn.q_a_proj", "attn.kv:self_attn.kv_a_proj_with_mqa")
    assert m[at + "self_attn.q_a_layernorm/rms_norm"] == ("attn.norm:self_attn.q_a_layernorm",)


def test_a_kernel_named_as_a_module_takes_that_row_whatever_the_order():
    # Laguna's gated attention: the accountant lists o_proj before g_proj, vLLM runs g_proj first; by order alone
    # the two would swap (their shapes differ: the tp 1 check caught it on the tiny config)
    rows = ["attn.norm:input_layernorm", "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
            "attn.qkv:self_attn.v_proj", "attn.out:self_attn.o_proj", "attn.qkv:self_attn.g_proj",
            "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj", "attn.core:compute"]
    got = _derive([("n/rms_norm", "rms_norm"), ("self_attn/qkv_proj", "gemm"), ("self_attn/attn", "attention"),
                   ("self_attn.g_proj/g_proj", "gemm"), ("self_attn.o_proj/o_proj", "gemm"),
                   ("n2/rms_norm", "rms_norm"), ("m/up", "gemm"), ("m/down", "gemm")], rows)
    assert got["full.dense/self_attn.g_proj/g_proj"] == ("attn.qkv:self_attn.g_proj",)
    assert got["full.dense/self_attn.o_proj/o_proj"] == ("attn.out:self_attn.o_proj",)
    assert got["full.dense/self_attn/qkv_proj"] == ("attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
                                                   "attn.qkv:self_attn.v_proj")


def test_weightless_norms_mla_packing_and_a_convolution_core():
    # OLMo: two LayerNorms without weights, no norm rows
    rows = [r for r in LAYER_ROWS if ".norm:" not in r]
    got = _derive([("n/layer_norm", "layer_norm"), ("a/qkv", "gemm"), ("a/attn", "attention"), ("a/o", "gemm"),
                   ("n2/layer_norm", "layer_norm"), ("m/gate_up", "gemm"), ("m/down", "gemm")], rows)
    assert got["full.dense/n/layer_norm"] == () and got["full.dense/n2/layer_norm"] == ()
    # MLA with q_lora_rank: vLLM's fused_qkv_a_proj packs q_a_proj and kv_a_proj_with_mqa (rows apart)
    mla = ["attn.norm:input_layernorm", "attn.q:self_attn.q_a_proj", "attn.norm:self_attn.q_a_layernorm",
           "attn.q:self_attn.q_b_proj", "attn.kv:self_attn.kv_a_proj_with_mqa", "attn.norm:self_attn.kv_a_layernorm",
           "attn.kv:self_attn.kv_b_proj", "attn.out:self_attn.o_proj", "ffn.norm:post_attention_layernorm",
           "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj", "attn.core:compute"]
    got = _derive([("n/rms_norm", "rms_norm"), ("self_attn/fused_qkv_a_proj", "gemm"),
                   ("self_attn.q_a_layernorm/rms_norm", "rms_norm"), ("self_attn.q_b_proj/q_b_proj", "gemm"),
                   ("self_attn.kv_a_layernorm/rms_norm", "rms_norm"), ("self_attn.kv_b_proj/kv_b_proj", "gemm"),
                   ("self_attn/mla_attention", "attention"), ("self_attn.o_proj/o_proj", "gemm"),
                   ("n2/rms_norm", "rms_norm"), ("m/up", "gemm"), ("m/down", "gemm")], mla)
    assert got["full.dense/self_attn/fused_qkv_a_proj"] == ("attn.q:self_attn.q_a_proj",
                                                           "attn.kv:self_attn.kv_a_proj_with_mqa")
    assert got["full.dense/n/rms_norm"] == ("attn.norm:input_layernorm",)
    assert got["full.dense/self_attn.kv_a_layernorm/rms_norm"] == ("attn.norm:self_attn.kv_a_layernorm",)
    # LFM2's short convolution: no attention kernel, the conv kernel holds the core
    conv = ["attn.norm:input_layernorm", "attn.in:conv.in_proj", "attn.core:conv.conv", "attn.out:conv.out_proj",
            "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj", "attn.core:compute"]
    got = _derive([("n/rms_norm", "rms_norm"), ("conv.in_proj/in_proj", "gemm"), ("conv/causal_conv1d", "conv1d"),
                   ("conv.out_proj/out_proj", "gemm"), ("n2/rms_norm", "rms_norm"), ("m/up", "gemm"),
                   ("m/down", "gemm")], conv)
    assert got["full.dense/conv/causal_conv1d"] == ("attn.core:conv.conv", "attn.core:compute")


def test_parallel_attention_and_mamba_each_hold_their_own_core():
    # Falcon-H1: the accountant's core split into the attention's (compute) and the Mamba2 recurrence's (ssm)
    rows = ["attn.norm:input_layernorm", "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
            "attn.qkv:self_attn.v_proj", "attn.out:self_attn.o_proj", "attn.in:mamba.in_proj",
            "attn.core:mamba.conv1d", "attn.core:mamba.dt_bias", "attn.core:mamba.A_log", "attn.core:mamba.D",
            "attn.out:mamba.out_proj", "ffn.norm:post_attention_layernorm", "ffn.mlp:mlp.up_proj",
            "ffn.mlp:mlp.down_proj", "attn.core:compute", "attn.core:ssm"]
    got = _derive([("input_layernorm/rms_norm", "rms_norm"), ("mamba.in_proj/in_proj", "gemm"),
                   ("mamba/causal_conv1d", "conv1d"), ("mamba/scan", "linear_attention"),
                   ("mamba.out_proj/out_proj", "gemm"), ("self_attn/qkv_proj", "gemm"),
                   ("self_attn/attn", "attention"), ("self_attn.o_proj/o_proj", "gemm"), ("n2/rms_norm", "rms_norm"),
                   ("m/up", "gemm"), ("m/down", "gemm")], rows)
    assert got["full.dense/self_attn/attn"] == ("attn.core:compute",)
    assert got["full.dense/mamba/scan"] == ("attn.core:mamba.dt_bias", "attn.core:mamba.A_log", "attn.core:mamba.D",
                                            "attn.core:ssm")
    assert got["full.dense/mamba/causal_conv1d"] == ("attn.core:mamba.conv1d",)
    assert got["full.dense/mamba.in_proj/in_proj"] == ("attn.in:mamba.in_proj",)


def test_gemm_packings_that_fit_twice_are_refused():
    # q/k/v unpacked + gate/up packed gives as many GEMMs as q/k/v packed + gate/up and the shared expert's
    # gate/up unpacked ... here: two gate/up runs of the same size, one packed and one not, is ambiguous
    rows = ["attn.norm:input_layernorm", "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj",
            "attn.qkv:self_attn.v_proj", "attn.out:self_attn.o_proj", "ffn.norm:post_attention_layernorm",
            "ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj", "ffn.mlp:mlp.down_proj",
            "ffn.shared:mlp.shared.gate_proj", "ffn.shared:mlp.shared.up_proj", "ffn.shared:mlp.shared.down_proj",
            "attn.core:compute"]
    layer = [("n/rms_norm", "rms_norm"), ("a/qkv", "gemm"), ("a/attn", "attention"), ("a/o", "gemm"),
             ("n2/rms_norm", "rms_norm"), ("m/g1", "gemm"), ("m/g2", "gemm"), ("m/g3", "gemm"), ("m/g4", "gemm"),
             ("m/g5", "gemm")]
    with pytest.raises(UnsupportedDeployment, match="2 packings"):
        _derive(layer, rows)


# --- tiny models of each group ---------------------------------------------------------------------

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.analysis import analyze_prepared, prepare_model  # noqa: E402

BATCH = "decode:4x16"
TOKENS = 4  # decode:4x16: 4 new tokens


def _analysis(tmp_path: Path, cfg: dict, tp: int = 1, batch: str = BATCH):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return analyze_prepared(prepare_model(str(path), gpu="h200", tp=tp, batch=batch))


def _by_location(a) -> dict:
    assert a.necessary_work_available, a.reason
    assert a.map_id == "derived v1" and a.map_path == "derived by graphsim/work/analyzer/derived.py"
    assert a.reconciliation is not None and a.reconciliation.ok, a.reconciliation
    return {r.location: r for r in a.locations}


def _running(locs: dict, kernel: str):
    """The location that runs the custom-op kernel `kernel`: itself, or the generated kernel that replaced it in vLLM's
    compiled mode (its `members`)."""
    found = [r for r in locs.values() if r.location == kernel or kernel in r.members]
    assert len(found) == 1, (kernel, [r.location for r in found])
    return found[0]


def _gemms_match(locs: dict) -> None:
    """At tp 1 every GEMM in the layers performs the FLOPs its rows need: the alignment found each module's kernel
    (a wrong one would give another shape; the cores' own cost models may count their work otherwise). Outside the layers a segment's extra
    kernels (BERT's head transform, OPT's project_out) have no row of their own."""
    for r in locs.values():
        if not r.location.startswith("outside/") and r.kind == "gemm":
            assert r.performed.flops == pytest.approx(r.necessary.flops, rel=0.02), r.location


def _cores_match(locs: dict) -> None:
    """At tp 1 the routed experts perform the FLOPs their rows need (gated experts three matrices, non-gated two:
    Nemotron-H's relu² experts were priced as three), and a recurrence kernel never performs less than the
    accountant's recurrent form (the gated delta rule was priced at 0 FLOPs); more is the kernels' own work
    (the decay multiply, the chunked algorithms' intra-chunk products: costing/ssm.py, kda.py, gdn.py, ...)."""
    for r in locs.values():
        if r.kind == "moe_experts":
            assert r.performed.flops == pytest.approx(r.necessary.flops, rel=0.02), r.location
        if r.kind == "linear_attention" and r.necessary.flops:
            assert r.performed.flops >= 0.98 * r.necessary.flops, r.location


def test_gpt2_conv1d_layernorm_learned_positions(tmp_path):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
           "n_positions": 512, "vocab_size": 96, "n_inner": None, "torch_dtype": "bfloat16"}
    locs = _by_location(_analysis(tmp_path, cfg))
    _gemms_match(locs)
    # c_attn (HF Conv1D, 64 -> 192) holds q, k and v: 2 x 4 tokens x 192 x 64 x 2 layers = 196,608 FLOPs
    c_attn = locs["full.dense/attn.c_attn/c_attn"]
    assert c_attn.rows == ("attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj", "attn.qkv:self_attn.v_proj")
    assert c_attn.necessary.flops == 2 * TOKENS * 192 * 64 * 2
    # ln_1 / ln_2 are the pre-norms; the position table has no row of its own (it is in the embed segment).
    # Compiled (the inductor pass): ln_2 runs in one generated kernel with the attention's residual add, ln_1 (the
    # next layer's input norm) in the layer's trailing kernel with the MLP's residual add (across_layers)
    assert _running(locs, "full.dense/ln_1/layer_norm").rows == ("attn.norm:input_layernorm",)
    assert _running(locs, "full.dense/ln_2/layer_norm").rows == ("ffn.norm:post_attention_layernorm",)
    assert locs["full.dense/[layer]/triton_fused"].members == ("full.dense/[layer]/add", "full.dense/ln_2/layer_norm")
    assert locs["full.dense/[layer]/triton_fused#2"].members == ("full.dense/[layer]/add#2",
                                                                 "full.dense/ln_1/layer_norm")
    assert locs["outside/model.wpe/embedding"].rows == ()
    # c_fc 64 -> 256 (n_inner None: 4 x n_embd), ungated
    assert locs["full.dense/mlp.c_fc/c_fc"].rows == ("ffn.mlp:mlp.up_proj",)
    assert locs["full.dense/mlp.c_fc/c_fc"].necessary.flops == 2 * TOKENS * 256 * 64 * 2
    # under tp 2 the same rules place the rows among the sharded kernels (collectives are not listed)
    tp2 = _by_location(_analysis(tmp_path, cfg, tp=2))
    assert tp2["full.dense/attn.c_attn/c_attn"].rows == c_attn.rows


def test_bert_style_post_norm_decoder(tmp_path):
    cfg = {"architectures": ["BertLMHeadModel"], "model_type": "bert", "hidden_size": 64, "num_attention_heads": 4,
           "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 96, "max_position_embeddings": 512,
           "is_decoder": True, "torch_dtype": "bfloat16"}
    locs = _by_location(_analysis(tmp_path, cfg))
    _gemms_match(locs)
    # q, k, v are three GEMMs (BertSelfAttention's query/key/value), each 2 x 4 x 64 x 64 x 2 layers = 65,536 FLOPs
    for name, ref in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        r = locs[f"full.dense/attention.self.{name}/{name}"]
        assert r.rows == (f"attn.qkv:self_attn.{ref}",)
        assert r.necessary.flops == 2 * TOKENS * 64 * 64 * 2
    # post-norm: the LayerNorm after the attention output is the accountant's first block norm; compiled, each
    # LayerNorm runs in one generated kernel with the residual add before it
    assert _running(locs, "full.dense/attention.output.LayerNorm/layer_norm").rows == ("attn.norm:input_layernorm",)
    assert _running(locs, "full.dense/output.LayerNorm/layer_norm").rows == ("ffn.norm:post_attention_layernorm",)
    assert locs["full.dense/output/triton_fused"].members == ("full.dense/output/add",
                                                              "full.dense/output.LayerNorm/layer_norm")


def test_encoder_decoder_decoder_keeps_its_idle_cross_attention_weights(tmp_path):
    cfg = {"architectures": ["BartForCausalLM"], "model_type": "bart", "d_model": 64, "decoder_attention_heads": 4,
           "encoder_attention_heads": 4, "decoder_layers": 2, "encoder_layers": 2, "decoder_ffn_dim": 128,
           "encoder_ffn_dim": 128, "vocab_size": 96, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
    a = _analysis(tmp_path, cfg)
    locs = _by_location(a)
    _gemms_match(locs)
    core = locs["full.dense/self_attn/flash_attn_varlen"]
    cross = [ref for ref in core.rows if ref.startswith("attn.cross:")]
    assert len(cross) == 5  # encoder_attn q/k/v/out_proj and its LayerNorm: counted, never read
    assert core.necessary.param_bytes == 0


def test_mamba2_mixer(tmp_path):
    cfg = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2,
           "num_heads": 8, "head_dim": 16, "expand": 2, "n_groups": 1, "state_size": 16, "conv_kernel": 4,
           "vocab_size": 96, "chunk_size": 16, "torch_dtype": "bfloat16"}
    locs = _by_location(_analysis(tmp_path, cfg))
    _gemms_match(locs)
    assert locs["full.dense/mixer/causal_conv1d"].rows == ("attn.core:mixer.conv1d",)
    scan = locs["full.dense/mixer/mamba_chunk_scan_combined"]
    assert set(scan.rows) == {"attn.core:mixer.dt_bias", "attn.core:mixer.A_log", "attn.core:mixer.D",
                              "attn.core:compute"}
    assert locs["full.dense/mixer.norm/rms_norm_gated"].rows == ("attn.norm:mixer.norm",)


def test_minimax_lightning_attention_and_moe(tmp_path):
    cfg = {"architectures": ["MiniMaxForCausalLM"], "model_type": "minimax", "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
           "layer_types": ["linear_attention", "full_attention"], "intermediate_size": 32, "num_local_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 96, "max_position_embeddings": 512, "block_size": 16,
           "torch_dtype": "bfloat16"}
    locs = _by_location(_analysis(tmp_path, cfg))
    _gemms_match(locs)
    assert locs["linear.moe/self_attn.output_gate/output_gate"].rows == ("attn.qkv:self_attn.output_gate",)
    assert locs["linear.moe/mlp.gate/gate"].rows == ("ffn.router:mlp.gate",)
    assert locs["linear.moe/mlp.experts/fused_moe"].rows[0].startswith("ffn.routed:")
    assert locs["linear.moe/mlp.gate/topk_softmax"].rows == ()


def test_a_family_with_a_shipped_map_derives_the_same_assignment(tmp_path):
    """Llama fits the shipped gqa-dense map; the derived map of the same deployment assigns every row to the same
    location."""
    from graphsim.work.analyzer import check_map, select_map, shipped_maps

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 96,
           "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = prepare_model(str(path), gpu="h200", batch=BATCH)
    assert p.rows is not None
    shipped = select_map(shipped_maps(), p.sites, p.rows, p.fuse_target)
    assert shipped.ok and shipped.check is not None and shipped.check.map.id == "gqa-dense"
    derived = check_map(derive_map(p.sites, p.rows, p.fuse_target), p.sites, p.rows, p.fuse_target)
    assert derived.ok, derived.problems

    def refs(check) -> dict[str, set[str]]:
        return {loc: {r.ref for r in rows} for loc, rows in check.assignment.items()}

    assert refs(derived) == refs(shipped.check)


# --- every registered class (slow) -------------------------------------------------------------------

SWEEP_BATCH = "decode:512x400"  # long enough that attention and GEMMs, not the kernels' floor, dominate a tiny model
# Classes whose tiny config does not analyze (measured 2026-12-01, tp 1, SWEEP_BATCH), by reason; skipped.
UNSUPPORTED: dict[str, str] = {
    "AXK2ForCausalLM": "3 norm rows for 2 norm kernels (its input_layernorm holds an MLP: fc1 / fc2 rows of part attn.norm)",
    "Apertus1p5TextForCausalLM": "rows no derivation rule places (ffn.extra: xIELU's per-layer activation scalars)",
    "ApertusForCausalLM": "rows no derivation rule places (ffn.extra: xIELU's per-layer activation scalars)",
    "BeamForCausalLM": "attn.gate holds a vector (gate_bias) beside its GEMM: the GEMM alignment cannot tell them apart",
    "BigBirdForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "BlenderbotForCausalLM": "its 128-position table is shorter than the sweep's 401 positions",
    "CTRLLMHeadModel": "its 256-position table is shorter than the sweep's 401 positions",
    "DeciLMForCausalLM": "no transformers class to trace",
    "DeepseekV4ForCausalLM": "rows no derivation rule places (attn.compress: the compressed-hc-moe maps' family)",
    "DiffLlamaForCausalLM": "two attention kernels and a group norm a layer (differential attention)",
    "FalconMambaForCausalLM": "three weightless B/C/dt norms beside the one weighted norm: order cannot tell them apart",
    "GPTNeoXJapaneseForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "Gemma3nForCausalLM": "rows no derivation rule places (ffn.altup, ffn.laurel, ffn.ple)",
    "Gemma4AssistantForCausalLM": "not traceable yet (one-line import error)",
    "Gemma4ForCausalLM": "rows no derivation rule places (ffn.ple, ffn.scalar: per-layer inputs and the layer scalar)",
    "Gemma4ForConditionalGeneration": "rows no derivation rule places (ffn.ple, ffn.scalar: per-layer inputs and the layer scalar)",
    "Gemma4UnifiedAssistantForCausalLM": "not traceable yet (one-line import error)",
    "Gemma4UnifiedForCausalLM": "rows no derivation rule places (ffn.scalar: the layer scalar)",
    "Gemma4UnifiedForConditionalGeneration": "rows no derivation rule places (ffn.scalar: the layer scalar)",
    "JetMoeForCausalLM": "not traceable yet (one-line import error)",
    "LongcatFlashForCausalLM": "the fold counts 28 layers where the accountant counts 56 (two sub-layers a layer)",
    "MegatronBertForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "MllamaForCausalLM": "the fold counts 32 layers where the accountant counts 40 (cross-attention layers)",
    "MusicgenForCausalLM": "not traceable yet (one-line import error)",
    "MusicgenMelodyForCausalLM": "not traceable yet (one-line import error)",
    "MvpForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "OlmoHybridForCausalLM": "the accountant's rows pack in_proj_qkvz / in_proj_ba where vLLM packs q/k/v with g "
                             "(in_proj_qkvg) and runs b and a apart",
    "OpenAIGPTLMHeadModel": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "RecurrentGemmaForCausalLM": "its RG-LRU recurrence is unrolled into placeholders: no kernel holds the recurrence",
    "RemBertForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "RoFormerForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "RwkvForCausalLM": "a third norm (the first layer's ln0) that order cannot place; its WKV recurrence is unrolled",
    "Step3p5ForCausalLM": "no transformers class to trace",
    "Step3p7FlashForCausalLM": "no transformers class to trace",
    "TrOCRForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "XGLMForCausalLM": "the fuse pass leaves its attention unfused (no attention kernel to hold attn.core)",
    "XLMWithLMHeadModel": "not traceable yet (one-line import error)",
    "XmodForCausalLM": "not traceable yet (one-line import error)",
    "Zamba2ForCausalLM": "rows no derivation rule places (attn.mlp: the shared transformer block's MLP)",
    "xLSTMForCausalLM": "not traceable yet (one-line import error)",
}
# Classes that analyze, reconcile and pass the GEMM check with R6 under 90 % (measured, same run, roofline), with the
# R6 measured; held to R6 >= 0.6.
LOW_R6: dict[str, float] = {
    # 2026-12-01 (h6): 0.819 at decode:512x400 on h200; its many small kernels with no compulsory work (iHC post
    # gates, the attention's sigmoid gate, rotary, the stream lift) each at the 3.02 µs launch floor, x 23 layers
    "HYV4ForCausalLM": 0.819,
}  # (Qwen3-Next left it since the gated delta rule holds its work: 0.897 -> 0.933)


def _registered() -> list[str]:
    from graphsim.work.registry import supported_architectures

    return list(supported_architectures())


@pytest.mark.slow
@pytest.mark.parametrize("arch", _registered())
def test_every_registered_class_analyzes_at_tp1(benchmark_script, tmp_path, arch):
    """Necessary work available, reconciled, every GEMM in the layers at its rows' FLOPs (derived maps), the routed
    experts at theirs and no recurrence below the accountant's (`_cores_match`), and R6 in [90 %, 101 %] at tp 1 for each registered class's tiny config (`benchmarks/architectures_sweep.py`); all
    classes together took 240 s on 2 cores (133 passed, 41 skipped)."""
    if arch in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[arch])
    a = _analysis(tmp_path, benchmark_script("architectures_sweep").tiny_config(arch), batch=SWEEP_BATCH)
    assert a.necessary_work_available, a.reason
    assert a.reconciliation is not None and a.reconciliation.ok, a.reconciliation
    if a.map_id == "derived v1":
        _gemms_match({r.location: r for r in a.locations})
    _cores_match({r.location: r for r in a.locations})
    assert a.coverage is not None and a.coverage.share is not None
    low = 0.6 if arch in LOW_R6 else 0.90
    assert low <= a.coverage.share <= 1.01, a.coverage.share

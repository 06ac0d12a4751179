"""HF importer: every catalog config imports; parameter counts; schedules; semantic nodes."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import catalog, resolve_model  # noqa: E402
from graphsim.importers.hf import import_hf  # noqa: E402
from graphsim.importers.hf.build import build_on_meta  # noqa: E402
from graphsim.ir import Op, T, graph_from_json, graph_to_json  # noqa: E402

ALL = [e.name for e in catalog()]


@pytest.fixture(scope="module")
def imported(hf_import):
    return hf_import


def _full_param_count_from_graph(g) -> int:
    """Non-layer params once + each traced layer's params × the number of layers of its type."""
    sched = g.schedule
    stack = g.meta.layer_stack
    per_layer: dict[int, int] = {}
    outside = 0
    for name, spec in g.params.items():
        if name.startswith(stack + "."):
            idx = int(name[len(stack) + 1:].split(".")[0])
            per_layer[idx] = per_layer.get(idx, 0) + int(spec.numel)
        else:
            outside += int(spec.numel)
    return outside + sum(per_layer[rep] * sched.count(tag) for tag, rep in sched.representative.items())


@pytest.mark.parametrize("name", ALL)
def test_every_catalog_model_imports(name, imported):
    g, rep = imported(name)
    g.verify("test")
    cfg = resolve_model(name).config
    assert g.meta.num_layers == cfg["num_hidden_layers"] == g.schedule.num_layers
    # fewer traced layers than the real depth whenever layers repeat
    assert len(rep.traced_layers) == len(g.schedule.representative) <= cfg["num_hidden_layers"]
    assert rep.opaque_ops == {}, f"unmapped aten ops: {rep.opaque_ops}"
    # the token dimension is symbolic: the embedding output is [1, T, hidden]
    emb = next(n for n in g.nodes if n.op is Op.EMBEDDING)
    assert emb.outputs[0].shape == (1, T, cfg["hidden_size"])
    # one semantic attention (or linear-attention) node per traced layer
    attn = [n for n in g.nodes if n.op in (Op.ATTENTION, Op.LINEAR_ATTENTION)]
    assert sorted(n.layer for n in attn) == sorted(rep.traced_layers)
    # JSON round trip keeps everything
    assert graph_from_json(graph_to_json(g)) == g


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3", "gemma-2-9b", "qwen3-next-80b-a3b", "gpt-oss-20b"])
def test_param_count_matches_meta_model(name, imported):
    g, _ = imported(name)
    built = build_on_meta(resolve_model(name).config)
    meta_total = sum(p.numel() for p in built.model.parameters())
    assert g.meta.param_count == meta_total
    assert _full_param_count_from_graph(g) == meta_total


def test_llama_attention_node(imported):
    g, _ = imported("llama-3.1-8b")
    (a,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    # Llama-3.1-8B: 32 heads, 8 KV heads, head_dim 4096/32 = 128, scale 128**-0.5
    assert (a.attrs.num_heads, a.attrs.num_kv_heads, a.attrs.head_dim) == (32, 8, 128)
    assert a.attrs.causal and a.attrs.sliding_window is None
    assert a.attrs.scale == pytest.approx(128 ** -0.5)
    assert a.scope == "model.layers.0.self_attn" and a.layer == 0
    linears = {n.scope.rsplit(".", 1)[-1]: n.attrs for n in g.nodes if n.op is Op.LINEAR and n.layer == 0}
    assert (linears["q_proj"].in_features, linears["q_proj"].out_features) == (4096, 4096)
    assert linears["k_proj"].out_features == 1024  # 8 kv heads × 128
    assert linears["gate_proj"].out_features == 14336


def test_sliding_window_softcap_and_sinks(imported):
    g, _ = imported("gemma-2-9b")
    attns = {n.layer: n.attrs for n in g.nodes if n.op is Op.ATTENTION}
    # Gemma-2: even layers slide over 4096 tokens, odd layers are global; softcap 50
    assert attns[0].sliding_window == 4096 and attns[1].sliding_window is None
    assert attns[0].softcap == 50.0
    assert g.schedule.tags[:4] == ("sliding.dense", "full.dense", "sliding.dense", "full.dense")
    g2, _ = imported("gpt-oss-20b")
    a2 = [n.attrs for n in g2.nodes if n.op is Op.ATTENTION]
    assert all(a.has_sinks for a in a2) and {a.sliding_window for a in a2} == {128, None}


def test_moe_is_one_node_per_layer(imported):
    g, _ = imported("deepseek-v3")
    moe = [n for n in g.nodes if n.op is Op.MOE_EXPERTS]
    assert len(moe) == 1 and moe[0].layer == 3  # first_k_dense_replace = 3
    a = moe[0].attrs
    assert (a.num_experts, a.top_k, a.hidden_size, a.intermediate_size) == (256, 8, 7168, 2048)
    # expert weights are direct inputs: [E, 2I, H] and [E, H, I]
    assert g.spec_of(moe[0].inputs[3]).shape == (256, 4096, 7168)
    assert [t for t, _, _ in g.schedule.runs()] == ["full.dense", "full.moe"]
    assert g.schedule.count("full.moe") == 58
    mla = next(n for n in g.nodes if n.op is Op.ATTENTION).attrs
    assert (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.head_dim, mla.v_head_dim) == (512, 64, 192, 128)


def test_hybrid_linear_attention(imported):
    g, rep = imported("qwen3-next-80b-a3b")
    la = [n for n in g.nodes if n.op is Op.LINEAR_ATTENTION]
    assert len(la) == 1
    assert (la[0].attrs.num_k_heads, la[0].attrs.num_v_heads) == (16, 32)
    assert g.schedule.count("linear.moe") == 36 and g.schedule.count("full.moe") == 12
    assert rep.semantic_kernels  # the Python-loop kernel was swapped for a semantic op


def test_dtype_override_and_config_path(tmp_path, imported):
    import json

    cfg = resolve_model("qwen3-8b").config
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    g, rep = import_hf(str(tmp_path), dtype="float16")
    assert rep.source == "path"
    lin = next(n for n in g.nodes if n.op is Op.LINEAR)
    assert lin.outputs[0].dtype.value == "f16"

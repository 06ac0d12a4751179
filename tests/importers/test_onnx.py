"""ONNX importer: models built here (torch exports and onnx.helper graphs) → graphsim IR."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import pytest

onnx = pytest.importorskip("onnx")
np = pytest.importorskip("numpy")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from graphsim.errors import GraphsimError  # noqa: E402
from graphsim.importers.onnx_importer import import_onnx, layer_of  # noqa: E402
from graphsim.ir import (  # noqa: E402
    AttentionAttrs, CastAttrs, ConvAttrs, DType, EmbeddingAttrs, LinearAttrs, NormAttrs, Op, OpaqueAttrs, ReduceAttrs,
    T, TensorSpec, dim_symbol, graph_from_json, graph_to_json, load_graph, save_graph,
)


# --- helpers ----------------------------------------------------------------------------------
def _init(name, shape, dtype=np.float32):
    return numpy_helper.from_array((np.arange(int(np.prod(shape))) % 7).reshape(shape).astype(dtype), name)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _save(tmp_path, nodes, inputs, outputs, inits=(), value_info=(), opset=18, extra_opsets=(), name="m"):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    model = helper.make_model(graph, producer_name="graphsim-test",
                              opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets])
    model.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _initializer_numel(path) -> int:
    model = onnx.load(str(path), load_external_data=False)
    return sum(math.prod(t.dims) for t in model.graph.initializer)


def _one_line_error(path, match, **kw):
    with pytest.raises(GraphsimError, match=match) as e:
        import_onnx(path, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


# --- torch models -----------------------------------------------------------------------------
torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)))


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d))  # distinct values: no initializer dedup

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rotate(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        k = k.repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.hd)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.o_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, d, i):
        super().__init__()
        self.gate_proj = nn.Linear(d, i, bias=False)
        self.up_proj = nn.Linear(d, i, bias=False)
        self.down_proj = nn.Linear(i, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, d, heads, kv_heads, inter):
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = Attention(d, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = MLP(d, inter)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, vocab, d, heads, kv_heads, inter, layers):
        super().__init__()
        self.hd = d // heads
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Layer(d, heads, kv_heads, inter) for _ in range(layers)])
        self.norm = RMSNorm(d)

    def forward(self, ids):
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.arange(ids.shape[1]).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, emb.cos(), emb.sin())
        return self.norm(x)


class TinyLlama(nn.Module):
    """Llama-shaped: embedding, 2 × (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU), lm_head."""

    VOCAB, D, HEADS, KV_HEADS, INTER, LAYERS = 128, 64, 4, 2, 128, 2

    def __init__(self):
        super().__init__()
        self.model = Decoder(self.VOCAB, self.D, self.HEADS, self.KV_HEADS, self.INTER, self.LAYERS)
        self.lm_head = nn.Linear(self.D, self.VOCAB, bias=False)

    def forward(self, ids):
        return self.lm_head(self.model(ids))


def _legacy_export(model, args, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), dynamo=False, **kw)
    return path


@pytest.fixture(scope="module")
def mlp_legacy(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    m = TinyMLP()
    _legacy_export(m, (torch.randn(3, 8),), path, input_names=["x"], output_names=["y"],
                   dynamic_axes={"x": {0: "tokens"}, "y": {0: "tokens"}})
    return path, m


@pytest.fixture(scope="module")
def llama_dynamo(tmp_path_factory):
    """The exporter torch recommends (torch.export-based); it records module scopes and exact shapes."""
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("onnx") / "tiny_llama.onnx"
    m = TinyLlama().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randint(0, 128, (1, 8)),), str(path), dynamo=True, input_names=["input_ids"],
                          output_names=["logits"], dynamic_shapes=({1: torch.export.Dim("sequence_length")},),
                          verbose=False)
    return path, m


# --- torch-exported models --------------------------------------------------------------------
def test_mlp_legacy_export(mlp_legacy):
    path, m = mlp_legacy
    g = import_onnx(path)
    assert g.count_by_op() == {Op.LINEAR: 2, Op.SIGMOID: 1, Op.MUL: 1}
    fc1, fc2 = [n for n in g if n.op is Op.LINEAR]
    assert fc1.attrs == LinearAttrs(in_features=8, out_features=16, has_bias=True)
    assert fc2.attrs == LinearAttrs(in_features=16, out_features=4, has_bias=False)
    assert (fc1.scope, fc2.scope) == ("fc1", "fc2")  # from the node names /fc1/Gemm, /fc2/MatMul
    assert g.inputs == {"x": TensorSpec((T, 8), DType.FLOAT32)}
    assert g.spec_of(g.outputs[0]) == TensorSpec((T, 4), DType.FLOAT32)
    assert all(n.target.startswith("onnx::") and n.provenance == "onnx_importer" for n in g)
    assert g.param_count() == _initializer_numel(path) == sum(p.numel() for p in m.parameters())
    assert g.meta.param_count == g.param_count()
    assert g.meta.source_format == "onnx" and g.meta.opset == {"ai.onnx": 20}
    assert g.meta.opaque_ops == [] and g.meta.dim_symbols == {"tokens": "T"}


def test_tiny_llama_dynamo_export(llama_dynamo):
    path, m = llama_dynamo
    g = import_onnx(path)
    counts = g.count_by_op()
    L = TinyLlama
    assert counts[Op.LINEAR] == 7 * L.LAYERS + 1  # q k v o gate up down per layer, lm_head
    assert counts[Op.EMBEDDING] == 1
    assert counts[Op.SOFTMAX] == L.LAYERS
    assert counts[Op.MATMUL] == 2 * L.LAYERS  # q·kᵀ and p·v, as the file states them

    # Shapes: the sequence dim is the only dynamic dim → T, carried exactly through the graph.
    assert g.inputs["input_ids"] == TensorSpec((1, T), DType.INT64)
    assert g.spec_of(g.outputs[0]) == TensorSpec((1, T, L.VOCAB), DType.FLOAT32)
    emb = next(n for n in g if n.op is Op.EMBEDDING)
    assert emb.attrs == EmbeddingAttrs(L.VOCAB, L.D) and emb.scope == "model.embed_tokens"
    assert emb.outputs[0] == TensorSpec((1, T, L.D), DType.FLOAT32)
    for sm in g.nodes_in_group(Op.SOFTMAX.group):
        if sm.op is Op.SOFTMAX:
            assert sm.outputs[0].shape == (1, L.HEADS, T, T) and sm.attrs == ReduceAttrs((3,), True)

    # Scope and layer come from the exporter's module metadata.
    by_scope = {n.scope: n for n in g if n.op is Op.LINEAR}
    q = by_scope["model.layers.1.self_attn.q_proj"]
    assert q.layer == 1 and q.module_type == "Linear"
    assert q.attrs == LinearAttrs(L.D, L.D)
    assert by_scope["model.layers.0.self_attn.k_proj"].attrs == LinearAttrs(L.D, L.KV_HEADS * L.D // L.HEADS)
    assert by_scope["model.layers.0.mlp.down_proj"].attrs == LinearAttrs(L.INTER, L.D)
    assert by_scope["lm_head"].layer is None
    assert {n.layer for n in g} == {None, 0, 1}
    assert all(n.scope.startswith(f"model.layers.{n.layer}") for n in g if n.layer is not None)

    # Every model weight is an initializer: the weights the linears and the embedding read are the
    # torch module's, and the graph's parameters are exactly the file's initializers.
    assert g.param_count() == _initializer_numel(path)
    read = {v for n in g if n.op in (Op.LINEAR, Op.EMBEDDING) for v in n.inputs if v in g.params}
    torch_counts = sum(mod.weight.numel() for mod in m.modules() if isinstance(mod, (nn.Linear, nn.Embedding)))
    assert sum(int(g.params[v].numel) for v in read) == torch_counts

    # Opaque nodes (e.g. the causal mask's Trilu) are kept and reported, never dropped.
    assert sorted({n.attrs_as(OpaqueAttrs).target for n in g.opaque_nodes()}) == g.meta.opaque_ops
    assert sum(g.meta.opaque_counts.values()) == len(g.opaque_nodes())
    assert g.meta.unknown_shapes == []

    back = graph_from_json(json.loads(json.dumps(graph_to_json(g))))
    assert back == g


def test_imported_graph_saves_and_loads(mlp_legacy, tmp_path):
    g = import_onnx(mlp_legacy[0])
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g


# --- helper-built graphs: op mapping ------------------------------------------------------------
@pytest.fixture
def ops_model(tmp_path):
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="/model/layers.2/mlp/fc/Gemm", transB=1),
        helper.make_node("SimplifiedLayerNormalization", ["h", "g1"], ["n"], name="/model/layers.2/norm/SLN", epsilon=1e-5),
        helper.make_node("LayerNormalization", ["n", "g2", "b2"], ["ln"], name="ln", epsilon=1e-6),
        helper.make_node("MatMul", ["ln", "W2"], ["y"], name="/lm_head/MatMul"),
        helper.make_node("Transpose", ["ln"], ["lnT"], perm=[1, 0]),
        helper.make_node("MatMul", ["ln", "lnT"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("ReduceMean", ["y", "axes"], ["mean"], keepdims=0),
        helper.make_node("Cast", ["y"], ["y16"], to=TP.FLOAT16),
        helper.make_node("Erf", ["y"], ["erf"]),
        helper.make_node("Frob", ["y"], ["frob"], domain="com.example"),
        helper.make_node("Gather", ["E", "ids"], ["emb"], name="/model/embed_tokens/Gather"),
        helper.make_node("Gather", ["y", "zero"], ["row"], axis=0),
    ]
    inputs = [_vi("x", TP.FLOAT, ["tokens", 8]), _vi("ids", TP.INT64, ["tokens"])]
    outs = ["probs", "mean", "y16", "erf", "frob", "emb", "row"]
    outputs = [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outs]
    inits = [_init("W1", [16, 8]), _init("b1", [16]), _init("g1", [16]), _init("g2", [16]), _init("b2", [16]),
             _init("W2", [16, 4]), _init("E", [32, 8]), numpy_helper.from_array(np.array(0, np.int64), "zero")]
    # Ops onnx's shape inference does not know need value_info in the file.
    vinfo = [_vi("n", TP.FLOAT, ["tokens", 16]), _vi("frob", TP.FLOAT, ["tokens", 4])]
    return _save(tmp_path, nodes, inputs, outputs, inits, vinfo, extra_opsets=[("com.example", 1)])


def test_op_mapping(ops_model):
    g = import_onnx(ops_model)
    by_target = {}
    for n in g:
        by_target.setdefault(n.target, []).append(n)
    gemm = by_target["onnx::Gemm"][0]
    assert (gemm.op, gemm.attrs) == (Op.LINEAR, LinearAttrs(8, 16, has_bias=True))
    assert gemm.scope == "model.layers.2.mlp.fc" and gemm.layer == 2
    sln = by_target["onnx::SimplifiedLayerNormalization"][0]
    assert (sln.op, sln.attrs) == (Op.RMS_NORM, NormAttrs(eps=1e-5, normalized_dim=16))
    assert sln.outputs[0] == TensorSpec((T, 16), DType.FLOAT32)
    ln = by_target["onnx::LayerNormalization"][0]
    assert (ln.op, ln.attrs) == (Op.LAYER_NORM, NormAttrs(eps=1e-6, normalized_dim=16))
    lin, mm = by_target["onnx::MatMul"]
    assert (lin.op, lin.attrs, lin.scope, lin.layer) == (Op.LINEAR, LinearAttrs(16, 4), "lm_head", None)
    assert mm.op is Op.MATMUL and mm.outputs[0] == TensorSpec((T, T), DType.FLOAT32)
    assert by_target["onnx::Transpose"][0].op is Op.TRANSPOSE
    sm = by_target["onnx::Softmax"][0]
    assert (sm.op, sm.attrs) == (Op.SOFTMAX, ReduceAttrs((1,), True))
    mean = by_target["onnx::ReduceMean"][0]
    assert (mean.op, mean.attrs) == (Op.MEAN, ReduceAttrs((1,), False))
    assert mean.outputs[0] == TensorSpec((T,), DType.FLOAT32)
    cast = by_target["onnx::Cast"][0]
    assert (cast.op, cast.attrs, cast.outputs[0].dtype) == (Op.CAST, CastAttrs("f16"), DType.FLOAT16)
    emb, row = by_target["onnx::Gather"]
    assert (emb.op, emb.attrs, emb.scope) == (Op.EMBEDDING, EmbeddingAttrs(32, 8), "model.embed_tokens")
    assert emb.outputs[0] == TensorSpec((T, 8), DType.FLOAT32)
    assert row.op is Op.SELECT and row.outputs[0] == TensorSpec((4,), DType.FLOAT32)
    assert by_target["onnx::Constant"][0].op is Op.FULL

    erf, frob = by_target["onnx::Erf"][0], by_target["onnx::com.example.Frob"][0]
    assert (erf.op, erf.attrs) == (Op.OPAQUE, OpaqueAttrs("onnx::Erf"))
    assert (frob.op, frob.attrs) == (Op.OPAQUE, OpaqueAttrs("onnx::com.example.Frob"))
    assert frob.outputs[0] == TensorSpec((T, 4), DType.FLOAT32)
    assert g.meta.opaque_ops == ["onnx::Erf", "onnx::com.example.Frob"]
    assert g.meta.opset == {"ai.onnx": 18, "com.example": 1}
    assert len(g) == 14  # nothing dropped
    assert g.param_count() == _initializer_numel(ops_model) == 16 * 8 + 16 * 4 + 16 * 4 + 32 * 8 + 1


def test_reduction_axes_found_through_layout_ops_or_shapes(tmp_path):
    nodes = [
        helper.make_node("Constant", [], ["axes_flat"], value_ints=[-1]),
        helper.make_node("Reshape", ["axes_flat", "shape1"], ["axes"]),
        helper.make_node("ReduceMean", ["x", "axes"], ["m1"]),  # axes: a reshaped constant
        helper.make_node("ReduceSum", ["x", "axes_in"], ["m2"], keepdims=0),  # axes: a run-time input
    ]
    inputs = [_vi("x", TP.FLOAT, ["n", 4, 8]), _vi("axes_in", TP.INT64, [1])]
    outputs = [_vi("m1", TP.FLOAT, ["n", 4, 1]), _vi("m2", TP.FLOAT, ["n", 8])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "shape1")]
    g = import_onnx(_save(tmp_path, nodes, inputs, outputs, inits))
    m1, m2 = g.nodes[-2:]
    assert (m1.op, m1.attrs) == (Op.MEAN, ReduceAttrs((2,), True))
    assert (m2.op, m2.attrs) == (Op.SUM, ReduceAttrs((1,), False))


def test_contrib_attention_and_quantised_linear(tmp_path):
    nodes = [
        helper.make_node("MatMulNBits", ["x", "Wq", "scales"], ["qkv"], domain="com.microsoft",
                         K=64, N=128, bits=4, block_size=32),
        helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "total_len"], ["attn"],
                         domain="com.microsoft", num_heads=4, kv_num_heads=2, local_window_size=16),
    ]
    inputs = [_vi("x", TP.FLOAT16, [1, "sequence_length", 64]), _vi("seqlens_k", TP.INT32, [1]),
              _vi("total_len", TP.INT32, [])]
    inits = [_init("Wq", [128, 2, 16], np.uint8), _init("scales", [128 * 2], np.float16),
             numpy_helper.from_array(np.array([64, 32, 32], np.int64), "split")]
    vinfo = [_vi("qkv", TP.FLOAT16, [1, "sequence_length", 128])]
    out = _vi("attn", TP.FLOAT16, [1, "sequence_length", 64])
    g = import_onnx(_save(tmp_path, nodes, inputs, [out], inits, vinfo, extra_opsets=[("com.microsoft", 1)]))
    mm, split, attn = g.nodes
    assert (mm.op, mm.attrs) == (Op.LINEAR, LinearAttrs(64, 128))
    assert split.op is Op.SPLIT and [s.shape for s in split.outputs] == [(1, T, 64), (1, T, 32), (1, T, 32)]
    assert attn.op is Op.ATTENTION
    assert attn.attrs == AttentionAttrs(num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=16, causal=True,
                                        sliding_window=16)
    assert attn.inputs == (split.name, f"{split.name}#1", f"{split.name}#2", "seqlens_k", "total_len")
    assert g.params["Wq"].dtype is DType.UINT8
    assert g.meta.opaque_ops == []


def test_onnx_attention_op(tmp_path):
    inputs = [_vi("q", TP.FLOAT, [1, 4, "seq", 16]), _vi("k", TP.FLOAT, [1, 2, "seq", 16]),
              _vi("v", TP.FLOAT, [1, 2, "seq", 8])]
    node = helper.make_node("Attention", ["q", "k", "v"], ["o"], is_causal=1, scale=0.25)
    g = import_onnx(_save(tmp_path, [node], inputs, [helper.make_tensor_value_info("o", TP.UNDEFINED, None)], opset=23))
    (n,) = g.nodes
    assert n.attrs == AttentionAttrs(num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=8, causal=True, scale=0.25)
    assert n.outputs[0] == TensorSpec((1, 4, T, 8), DType.FLOAT32)


def test_conv1d_and_unknown_conv(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], group=8, pads=[3, 0]),
             helper.make_node("Conv", ["img", "w2"], ["c2"])]
    inputs = [_vi("x", TP.FLOAT, [1, 8, "seq"]), _vi("img", TP.FLOAT, [1, 3, 8, 8])]
    outs = [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in ("c1", "c2")]
    g = import_onnx(_save(tmp_path, nodes, inputs, outs, [_init("w1", [8, 1, 4]), _init("w2", [4, 3, 3, 3])]))
    c1, c2 = g.nodes
    conv = c1.attrs_as(ConvAttrs)
    assert (c1.op, conv.channels, conv.kernel_size, conv.groups) == (Op.CONV1D, 8, 4, 8)
    assert c2.op is Op.OPAQUE and g.meta.opaque_ops == ["onnx::Conv"]


# --- symbolic dims ------------------------------------------------------------------------------
def _relu_model(tmp_path, shape, name="relu"):
    return _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TP.FLOAT, shape)],
                 [helper.make_tensor_value_info("y", TP.UNDEFINED, None)], name=name)


def test_two_dynamic_dims_stay_their_own_symbols(tmp_path):
    g = import_onnx(_relu_model(tmp_path, ["batch", "sequence_length", 8]))
    shape = (dim_symbol("batch"), dim_symbol("sequence_length"), 8)
    assert g.inputs["x"].shape == shape and g.nodes[0].outputs[0].shape == shape
    assert g.meta.dim_symbols == {"batch": "batch", "sequence_length": "sequence_length"}


def test_explicit_dim_symbols(tmp_path):
    g = import_onnx(_relu_model(tmp_path, ["batch", "sequence_length", 8]), dim_symbols={"sequence_length": "T", "batch": 1})
    assert g.inputs["x"] == TensorSpec((1, T, 8), DType.FLOAT32)
    assert g.nodes[0].outputs[0] == TensorSpec((1, T, 8), DType.FLOAT32)


def test_single_non_token_dim_is_not_T(tmp_path):
    g = import_onnx(_relu_model(tmp_path, ["batch", 16]))
    assert g.inputs["x"].shape == (dim_symbol("batch"), 16)


@pytest.mark.parametrize("name", ["num_tokens", "seq_len", "s0", "T", "total_sequence_length"])
def test_single_token_like_dim_is_T(tmp_path, name):
    g = import_onnx(_relu_model(tmp_path, [name, 16]))
    assert g.inputs["x"].shape == (T, 16)


def test_dim_expression_over_T(tmp_path):
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], axis=0)]
    g = import_onnx(_save(tmp_path, nodes, [_vi("x", TP.FLOAT, ["tokens", 8])], [_vi("y", TP.FLOAT, ["2*tokens", 8])]))
    assert g.inputs["x"].shape == (T, 8)
    assert g.nodes[0].outputs[0].shape == (2 * T, 8)
    assert g.meta.dim_symbols == {"tokens": "T", "2*tokens": "2*T"}


def test_dim_expressions_and_odd_names(tmp_path):
    nodes = [helper.make_node("Concat", ["x", "x"], ["y"], axis=0), helper.make_node("Relu", ["p"], ["z"])]
    inputs = [_vi("x", TP.FLOAT, ["tokens", 8]), _vi("p", TP.FLOAT, ["past-len", "E", "lambda"])]
    outputs = [_vi("y", TP.FLOAT, ["2*tokens", 8]), helper.make_tensor_value_info("z", TP.UNDEFINED, None)]
    g = import_onnx(_save(tmp_path, nodes, inputs, outputs))
    tokens = dim_symbol("tokens")  # not alone among the input dims: no T
    assert g.inputs["x"].shape == (tokens, 8)
    assert g.nodes[0].outputs[0].shape == (2 * tokens, 8)
    assert g.inputs["p"].shape == (dim_symbol("past_len"), dim_symbol("E"), dim_symbol("lambda_"))
    back = graph_from_json(json.loads(json.dumps(graph_to_json(g))))
    assert back == g


# --- structure ----------------------------------------------------------------------------------
def test_out_of_order_and_unnamed_nodes(tmp_path):
    nodes = [
        helper.make_node("Relu", ["a"], ["b"], name="dup"),  # reads a, defined below
        helper.make_node("Neg", ["x"], ["a"], name="dup"),
        helper.make_node("Add", ["b", "x"], ["x#1"]),  # no name; '#' is reserved in the IR
    ]
    g = import_onnx(_save(tmp_path, nodes, [_vi("x", TP.FLOAT, [4])], [_vi("x#1", TP.FLOAT, [4])]))
    assert [n.op for n in g] == [Op.NEG, Op.RELU, Op.ADD]
    assert len({n.name for n in g}) == 3 and all("#" not in n.name for n in g)
    assert g.spec_of(g.outputs[0]) == TensorSpec((4,), DType.FLOAT32)


def test_local_functions_are_inlined(tmp_path):
    fn = helper.make_function("local", "Block", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["r"]),
                              helper.make_node("Neg", ["r"], ["b"])], [helper.make_opsetid("", 18)])
    graph = helper.make_graph([helper.make_node("Block", ["x"], ["y"], domain="local")], "g",
                              [_vi("x", TP.FLOAT, ["tokens", 4])], [helper.make_tensor_value_info("y", TP.UNDEFINED, None)])
    model = helper.make_model(graph, functions=[fn],
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    onnx.save(model, str(tmp_path / "fn.onnx"))
    g = import_onnx(tmp_path / "fn.onnx")
    assert [n.op for n in g] == [Op.RELU, Op.NEG] and g.meta.opaque_ops == []
    assert g.spec_of(g.outputs[0]) == TensorSpec((T, 4), DType.FLOAT32)


def test_nodes_without_scope_borrow_one(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/model/layers.4/mlp/Relu"),
        helper.make_node("Neg", ["a"], ["b"], name="inserted_by_optimiser"),  # from its producer
        helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Identity", ["c0"], ["c"]),  # constant chain: from the reader, back to front
        helper.make_node("Mul", ["b", "c"], ["y"], name="/model/layers.5/attn/Mul"),
        helper.make_node("Constant", [], ["d0"], value=numpy_helper.from_array(np.array([3.0], np.float32))),
        helper.make_node("Identity", ["d0"], ["d"]),
        helper.make_node("Add", ["y", "c"], ["z"], name="/Add"),  # root scope, not "unknown"
        helper.make_node("Sub", ["z", "d"], ["w"], name="/model/layers.6/Sub"),
    ]
    g = import_onnx(_save(tmp_path, nodes, [_vi("x", TP.FLOAT, [4])], [_vi("w", TP.FLOAT, [4])]))
    by_out = {n.name: (n.scope, n.layer) for n in g}
    assert by_out["inserted_by_optimiser"] == ("model.layers.4.mlp", 4)
    assert by_out["/Add"] == ("", None)
    # c is read by layer 5 and by the root: no single scope to borrow; d only by layer 6.
    assert by_out["c"] == by_out["c0"] == ("", None)
    assert by_out["d"] == by_out["d0"] == ("model.layers.6", 6)


def test_initializer_listed_as_graph_input(tmp_path):
    """Old exporters (IR < 4) list initializers among the graph inputs: they are params, not inputs."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    g = import_onnx(_save(tmp_path, nodes, [_vi("x", TP.FLOAT, ["n", 8]), _vi("W", TP.FLOAT, [8, 2])],
                          [helper.make_tensor_value_info("y", TP.UNDEFINED, None)], [_init("W", [8, 2])]))
    assert list(g.inputs) == ["x"] and list(g.params) == ["W"]
    assert g.nodes[0].op is Op.LINEAR


def test_external_data_is_never_read(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_vi("x", TP.FLOAT, ["n", 256])], [_vi("y", TP.FLOAT, ["n", 512])],
                              [_init("W", [256, 512])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()  # weights gone: shapes alone must do
    g = import_onnx(path)
    assert g.params["W"] == TensorSpec((256, 512), DType.FLOAT32)
    assert g.nodes[0].attrs == LinearAttrs(256, 512)


def test_unknown_shapes_are_reported(tmp_path):
    nodes = [helper.make_node("Frob", ["x"], ["y"], domain="com.example")]
    g = import_onnx(_save(tmp_path, nodes, [_vi("x", TP.FLOAT, [4])], [helper.make_tensor_value_info("y", TP.UNDEFINED, None)],
                          extra_opsets=[("com.example", 1)]))
    assert g.meta.unknown_shapes == ["y"]
    assert g.nodes[0].outputs[0] == TensorSpec((), DType.FLOAT32)


def test_layer_of():
    assert layer_of("model.layers.3.mlp.experts.7.down_proj") == 3
    assert layer_of("transformer.h.11.attn") == 11
    assert layer_of("0.weight") is None
    assert layer_of("lm_head") is None and layer_of("") is None


# --- bad input ----------------------------------------------------------------------------------
def test_missing_file(tmp_path):
    _one_line_error(tmp_path / "nope.onnx", "cannot read .*no such file")


def test_directory(tmp_path):
    _one_line_error(tmp_path, "not a file")


@pytest.mark.parametrize("content", [b"", b"\x00\xffgarbage" * 50, b'{"not": "onnx"}', None])
def test_corrupt_file(tmp_path, mlp_legacy, content):
    if content is None:  # a real model cut in half
        data = mlp_legacy[0].read_bytes()
        content = data[: len(data) // 2]
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    _one_line_error(path, "not (a readable )?(an )?ONNX model")


def test_undefined_value(tmp_path):
    nodes = [helper.make_node("Relu", ["ghost"], ["y"], name="r")]
    path = _save(tmp_path, nodes, [_vi("x", TP.FLOAT, [4])], [_vi("y", TP.FLOAT, [4])])
    _one_line_error(path, "node 'r' reads 'ghost'.*malformed")


def test_cycle(tmp_path):
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])]
    path = _save(tmp_path, nodes, [_vi("x", TP.FLOAT, [4])], [_vi("b", TP.FLOAT, [4])])
    _one_line_error(path, "cycle")


def test_missing_onnx_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    message = _one_line_error(tmp_path / "m.onnx", "pip install onnx")
    assert message.startswith("reading .onnx files needs the onnx package")


def test_onnx_is_imported_lazily():
    code = ("import sys; import graphsim.importers.onnx_importer, graphsim.importers.onnx_ops; "
            "print('onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_onnx_file_through_the_cli(llama_dynamo, capsys):
    """`graphsim import` shows every layer of an ONNX file; `graphsim passes` folds and fuses it."""
    import json as _json

    from graphsim.cli.app import main

    path, _ = llama_dynamo
    assert main(["import", str(path), "--max-ops", "1"]) == 0
    out = capsys.readouterr().out
    assert "layer 0" in out and "layer 1" in out and "not folded" in out
    assert main(["passes", str(path), "-p", "fold,fuse{target=vllm}", "--json"]) == 0
    summary = _json.loads(capsys.readouterr().out)
    fold, fuse = summary["passes"]
    assert fold["stats"]["layers"] == 2
    assert fuse["nodes_after"] < fuse["nodes_before"]
    kinds = {k["kind"] for layer in summary["layers"] for k in layer["kernels"]}
    assert "gemm" in kinds  # the projections became GEMM kernels

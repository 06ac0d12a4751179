"""JSON round trip, text form, and the file errors of load_graph / save_graph."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphsim.errors import GraphError, GraphsimError
from graphsim.ir import (
    AttentionAttrs, CastAttrs, CollectiveAttrs, ConvAttrs, DType, EmbeddingAttrs, Graph, GraphMeta, IndexerAttrs,
    LayerSchedule, LinearAttentionAttrs, LinearAttrs, MoEAttrs, NoAttrs, Node, NormAttrs, Op, OpaqueAttrs, ReduceAttrs,
    T, TensorSpec, dim_symbol, graph_from_json, graph_to_json, graph_to_text, load_graph, save_graph, value_name,
)
from graphsim.ir.attrs import allowed_attrs
from graphsim.ir.geometry import GEOMETRY_CLASSES, AttentionGeometry, GemmGeometry, Geometry
from graphsim.ir.kernel import GEOMETRY_FOR_KIND, KernelAttrs, KernelKind, Rows

# --- strategies ---------------------------------------------------------------------------------
BATCH = dim_symbol("batch")
dims = st.one_of(
    st.integers(0, 1 << 20),
    st.sampled_from([T, 2 * T, T + 7, BATCH, BATCH * T, sympy.floor(T / 2), T * 3 + BATCH, dim_symbol("E")]),
)
specs = st.builds(lambda shape, dt: TensorSpec(tuple(shape), dt), st.lists(dims, max_size=4), st.sampled_from(list(DType)))
small = st.integers(1, 1 << 16)
maybe_int = st.none() | small
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
text = st.text(st.characters(codec="utf-8", exclude_characters="#"), max_size=12)
# names printed in the one-line-per-value text form: no line breaks or other control characters
name_text = st.text(st.characters(codec="utf-8", exclude_characters="#", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12)

ATTRS = {
    NoAttrs: st.just(NoAttrs()),
    LinearAttrs: st.builds(LinearAttrs, small, small, st.booleans()),
    AttentionAttrs: st.builds(AttentionAttrs, small, small, small, small, st.booleans(), maybe_int, st.booleans(),
                              st.none() | floats, st.none() | floats, maybe_int, maybe_int),
    LinearAttentionAttrs: st.builds(LinearAttentionAttrs, name_text, small, small, small, small, st.booleans()),
    IndexerAttrs: st.builds(IndexerAttrs, small, small, small),
    MoEAttrs: st.builds(MoEAttrs, small, small, small, small, st.booleans(), st.booleans(), name_text),
    EmbeddingAttrs: st.builds(EmbeddingAttrs, small, small),
    NormAttrs: st.builds(NormAttrs, st.none() | floats, maybe_int),
    ReduceAttrs: st.builds(ReduceAttrs, st.lists(st.integers(-4, 4), max_size=3).map(tuple), st.booleans()),
    CastAttrs: st.builds(CastAttrs, st.sampled_from([d.value for d in DType])),
    ConvAttrs: st.builds(ConvAttrs, small, small, small),
    CollectiveAttrs: st.builds(CollectiveAttrs, small, st.sampled_from(["tp", "ep", "dp"])),
    OpaqueAttrs: st.builds(OpaqueAttrs, name_text),
}
# kernel nodes (made by the fuse pass): each kind with its typed geometry, every field drawn by its type
_GEOMETRY_FIELD = {"int": small, "int | None": maybe_int, "bool": st.booleans(), "float": floats, "str": name_text}


def _geometry(cls: type[Geometry]) -> st.SearchStrategy[Geometry]:
    return st.builds(cls, **{f.name: _GEOMETRY_FIELD[str(f.type)] for f in fields(cls)})


def _kernel(kind: KernelKind) -> st.SearchStrategy[KernelAttrs]:
    return st.builds(
        KernelAttrs, st.just(kind), name_text, _geometry(GEOMETRY_FOR_KIND[kind]),
        st.sampled_from([d.value for d in DType]),
        st.sampled_from(list(Rows)), st.lists(name_text, max_size=3).map(tuple), name_text, st.booleans(),
    )


ATTRS[KernelAttrs] = st.sampled_from(list(KernelKind)).flatmap(_kernel)

json_leaf = st.none() | st.booleans() | st.integers(-(1 << 40), 1 << 40) | floats | text
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3), max_leaves=6)
# Typed fields as importers and passes write them, plus keys this version does not know (kept in `extra`).
meta = st.builds(
    GraphMeta, source_format=st.sampled_from(["", "hf", "onnx"]), model=text, param_count=st.none() | st.integers(0, 10**12),
    opaque_ops=st.lists(text, max_size=3), num_layers=st.none() | st.integers(1, 200),
    traced_layers=st.lists(st.integers(0, 200), max_size=4), quantization_config=st.none() | st.dictionaries(text, json_value, max_size=3),
    tied_params=st.dictionaries(text, text, max_size=2), dynamic_tokens=st.booleans(), opset=st.dictionaries(text, st.integers(1, 30), max_size=2),
    tp=st.integers(1, 64), ep=st.integers(1, 64), moe_tp=st.none() | st.just(1),
    extra=st.dictionaries(text.map(lambda k: "x_" + k), json_value, max_size=2),
)


@st.composite
def graphs(draw) -> Graph:
    inputs = {f"in{i}": draw(specs) for i in range(draw(st.integers(0, 3)))}
    params = {f"model.p{i}.weight": draw(specs) for i in range(draw(st.integers(0, 3)))}
    defined = list(inputs) + list(params)
    schedule = None
    if draw(st.booleans()):
        tags = tuple(draw(st.lists(st.sampled_from(["dense", "moe", "linear"]), min_size=1, max_size=6)))
        schedule = LayerSchedule(tags, {t: tags.index(t) for t in dict.fromkeys(tags)})
        layers = st.none() | st.sampled_from(sorted(schedule.representative.values()))
    else:
        layers = st.none() | st.integers(0, 100)
    nodes = []
    for i in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(list(Op)))
        attrs = draw(st.one_of(*(ATTRS[c] for c in allowed_attrs(op))))
        ins = tuple(draw(st.lists(st.sampled_from(defined), max_size=3))) if defined else ()
        outs = tuple(draw(st.lists(specs, min_size=1, max_size=3)))
        name = f"n{i}" + draw(st.sampled_from(["", "/model/layers.0/mlp/MatMul", ".sub"]))
        nodes.append(Node(
            name=name, op=op, inputs=ins, outputs=outs, attrs=attrs,
            scope=draw(st.sampled_from(["", "model.layers.3.mlp.down_proj", "lm_head"])),
            module_type=draw(st.sampled_from(["", "LlamaMLP"])), layer=draw(layers),
            target=draw(st.sampled_from(["", "aten.mm.default", "onnx::MatMul"])), provenance=draw(text),
        ))
        defined += [value_name(name, k) for k in range(len(outs))]
    outputs = draw(st.lists(st.sampled_from(defined), max_size=3)) if defined else []
    if schedule is not None:  # every representative layer needs nodes
        missing = set(schedule.representative.values()) - {n.layer for n in nodes}
        for _j, layer in enumerate(sorted(missing)):
            nodes.append(Node(f"layer{layer}", Op.ADD, (), (TensorSpec((T,), DType.FLOAT32),), layer=layer))
    g = Graph(name=draw(name_text), inputs=inputs, params=params, nodes=nodes, outputs=outputs, schedule=schedule,
              meta=draw(meta))
    g.verify("strategy")
    return g


def test_every_attrs_class_has_a_strategy():
    """A new attrs class needs a strategy here, so that the round trip covers it."""
    from graphsim.ir.attrs import ATTR_CLASSES

    assert set(ATTR_CLASSES.values()) <= set(ATTRS)


def test_every_geometry_class_belongs_to_a_kind():
    assert set(GEOMETRY_FOR_KIND.values()) == set(GEOMETRY_CLASSES)
    assert set(GEOMETRY_FOR_KIND) == set(KernelKind)


def test_kernel_geometry_must_match_its_kind():
    with pytest.raises(TypeError, match="expected AttentionGeometry"):
        KernelAttrs(KernelKind.ATTENTION, "attn", GemmGeometry(n=8, k=8), "bf16")
    gemm = KernelAttrs(KernelKind.GEMM, "linear", GemmGeometry(n=8, k=8), "bf16")
    assert gemm.geometry_as(GemmGeometry).n == 8
    with pytest.raises(TypeError, match="not AttentionGeometry"):
        gemm.geometry_as(AttentionGeometry)
    bad = Node("k", Op.KERNEL, (), (TensorSpec((T,), DType.BFLOAT16),), gemm)
    object.__setattr__(gemm, "kind", KernelKind.ATTENTION)  # as a broken pass could leave it
    with pytest.raises(GraphError, match="has GemmGeometry, expected AttentionGeometry"):
        Graph("g", nodes=[bad], outputs=["k"]).verify("test")


def test_kernel_geometry_json_is_field_value_pairs():
    """Graph files keep version 1's geometry form: [field, value] pairs, optional fields at their default left out."""
    n = Node("qkv", Op.KERNEL, (), (TensorSpec((T, 8), DType.BFLOAT16),),
             KernelAttrs(KernelKind.GEMM, "qkv_proj", GemmGeometry(n=48, k=16, q_features=32, num_kv_heads=2), "bf16"))
    d = graph_to_json(Graph("g", nodes=[n], outputs=["qkv"]))
    assert d["version"] == 1
    assert d["nodes"][0]["attrs"]["geometry"] == [["n", 48], ["k", 16], ["q_features", 32], ["num_kv_heads", 2]]
    assert graph_from_json(d).nodes[0] == n
    d["nodes"][0]["attrs"]["geometry"].append(["heads", 4])
    with pytest.raises(ValueError, match="GemmGeometry has no field 'heads'"):
        graph_from_json(d)


def _through_json_text(g: Graph) -> Graph:
    return graph_from_json(json.loads(json.dumps(graph_to_json(g))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_json_round_trip(g):
    back = _through_json_text(g)
    assert back == g
    back.verify("round trip")
    assert graph_to_text(back) == graph_to_text(g)
    assert json.dumps(graph_to_json(back), sort_keys=True) == json.dumps(graph_to_json(g), sort_keys=True)


@settings(max_examples=30, deadline=None)
@given(graphs())
def test_text_form_is_deterministic(g):
    t = graph_to_text(g)
    assert t == graph_to_text(g.copy())
    assert t.startswith("graph ") and t.endswith("\n")
    assert len(t.splitlines()) == 2 + len(g.inputs) + len(g.params) + len(g) + (g.schedule is not None)


def _tiny() -> Graph:
    x = TensorSpec((T, 8), DType.BFLOAT16)
    return Graph(
        name="tiny",
        inputs={"x": x},
        params={"w": TensorSpec((16, 8), DType.FLOAT4)},
        nodes=[
            Node("mm", Op.LINEAR, ("x", "w"), (TensorSpec((T, 16), DType.BFLOAT16),), LinearAttrs(8, 16),
                 scope="model.layers.0.mlp.up_proj", layer=0, target="aten.linear.default"),
            Node("sm", Op.SOFTMAX, ("mm",), (TensorSpec((T, 16), DType.BFLOAT16),), ReduceAttrs((1,), True),
                 scope="model.layers.0.mlp", layer=0),
        ],
        outputs=["sm"],
        schedule=LayerSchedule(("dense",) * 3, {"dense": 0}),
        meta=GraphMeta(source_format="test"),
    )


def test_text_form_golden():
    assert graph_to_text(_tiny()) == (
        "graph tiny\n"
        "  input %x: bf16[T,8]\n"
        "  param @w: f4[16,8]\n"
        "  %mm = linear(%x, @w) -> bf16[T,16] {in_features=8, out_features=16}  # model.layers.0.mlp.up_proj L0\n"
        "  %sm = softmax(%mm) -> bf16[T,16] {dims=(1,), keepdim=True}  # model.layers.0.mlp L0\n"
        "  return %sm\n"
        "  schedule densex3\n"
    )


# --- files ------------------------------------------------------------------------------------
def test_save_and_load(tmp_path):
    g = _tiny()
    path = tmp_path / "g.json"
    save_graph(g, path)
    assert load_graph(path) == g
    assert os.listdir(tmp_path) == ["g.json"]
    save_graph(g, path)  # overwrite in place
    assert os.listdir(tmp_path) == ["g.json"]


def _load_error(path: Path, match: str) -> None:
    with pytest.raises(GraphsimError, match=match) as e:
        load_graph(path)
    assert "\n" not in str(e.value)


def test_load_missing_file(tmp_path):
    _load_error(tmp_path / "nope.json", "cannot read")


def test_load_directory(tmp_path):
    _load_error(tmp_path, "cannot read")


@pytest.mark.parametrize(("content", "match"), [
    pytest.param(b"graph tiny\n  input %x: f32[T]\n", "not valid JSON", id="non_json"),
    pytest.param(bytes(range(256)), "not a text file", id="binary"),
    pytest.param(json.dumps(graph_to_json(_tiny()))[:-40].encode(), "not valid JSON", id="truncated"),
    pytest.param(b"[1, 2, 3]", "not a graphsim graph file", id="json_that_is_not_an_object"),
    pytest.param(json.dumps({"name": "x"}).encode(), "not a graphsim graph file", id="wrong_format_tag"),
    pytest.param(json.dumps({**graph_to_json(_tiny()), "version": 999}).encode(), "version 999 is not supported",
                 id="wrong_version"),
])
def test_load_bad_file(tmp_path, content: bytes, match: str):
    p = tmp_path / "g.json"
    p.write_bytes(content)
    _load_error(p, match)


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("nodes"),
    lambda d: d.__setitem__("inputs", ["x"]),
    lambda d: d["nodes"][0].__setitem__("op", "frobnicate"),
    lambda d: d["nodes"][0].__setitem__("outputs", ["bf16(T,16)"]),
    lambda d: d["nodes"][0].__setitem__("outputs", ["q7[T,16]"]),
    lambda d: d["nodes"][0]["attrs"].__setitem__("type", "NoSuchAttrs"),
    lambda d: d["nodes"][0]["attrs"].__setitem__("bogus", 1) or d["nodes"][0]["attrs"].pop("in_features"),
    lambda d: d["params"].__setitem__("w", "f32[2*(]"),
    lambda d: d["params"].__setitem__("w", "f32[lambda]"),
    lambda d: d["nodes"].__setitem__(0, "mm"),
    lambda d: d.__setitem__("schedule", {"tags": ["dense"]}),
])
def test_load_damaged(tmp_path, damage):
    d = graph_to_json(_tiny())
    damage(d)
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    _load_error(p, "damaged graph file")


def test_load_graph_that_breaks_an_invariant(tmp_path):
    d = graph_to_json(_tiny())
    d["outputs"] = ["ghost"]
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    with pytest.raises(GraphError, match=r"loading g\.json broke graph 'tiny': graph output 'ghost'"):
        load_graph(p)


def test_save_into_missing_directory(tmp_path):
    with pytest.raises(GraphsimError, match="cannot write") as e:
        save_graph(_tiny(), tmp_path / "no" / "such" / "g.json")
    assert "\n" not in str(e.value)
    assert os.listdir(tmp_path) == []


def test_save_under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(GraphsimError, match="cannot write"):
        save_graph(_tiny(), tmp_path / "file" / "g.json")
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_save_into_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(GraphsimError, match="cannot write"):
            save_graph(_tiny(), ro / "g.json")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    """The final rename fails (as it does in a directory the user may not write): no temp file, old file intact."""
    target = tmp_path / "g.json"
    target.write_text("previous")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(GraphsimError, match=r"cannot write .*Permission denied"):
        save_graph(_tiny(), target)
    assert os.listdir(tmp_path) == ["g.json"]
    assert target.read_text() == "previous"

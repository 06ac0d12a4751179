"""GraphMeta: typed fields in, the recorded ones out, unknown keys kept."""

from __future__ import annotations

import os
import stat

from graphsim.ir import DType, Graph, GraphMeta, load_graph, save_graph


def test_json_holds_what_was_recorded_and_keeps_unknown_keys():
    m = GraphMeta.from_json({"source_format": "hf", "model": "m", "tp": 4, "dtype": "bfloat16",
                             "quantization_config": None, "opaque_ops": [], "from_a_newer_graphsim": {"a": 1}})
    assert (m.source_format, m.model, m.tp, m.ep) == ("hf", "m", 4, 1)
    assert m.extra == {"from_a_newer_graphsim": {"a": 1}}
    # defaults (None, [], ep = 1) are not written; the unknown key is written back unchanged
    assert m.to_json() == {"source_format": "hf", "model": "m", "dtype": "bfloat16", "tp": 4,
                           "from_a_newer_graphsim": {"a": 1}}
    assert GraphMeta.from_json(m.to_json()) == m


def test_copy_is_deep_for_lists():
    m = GraphMeta(traced_layers=[0, 3])
    c = m.copy()
    c.traced_layers.append(5)
    assert m.traced_layers == [0, 3]


def test_model_dtype_is_a_serving_dtype_or_none():
    assert GraphMeta(dtype="bfloat16").model_dtype is DType.BFLOAT16
    assert GraphMeta(dtype="float32").model_dtype is DType.FLOAT32
    assert GraphMeta(dtype="int8").model_dtype is None and GraphMeta().model_dtype is None


def test_a_saved_graph_is_readable_like_any_output(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "g.json"
        save_graph(Graph("g", meta=GraphMeta(model="m", tp=2)), path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert load_graph(path).meta == GraphMeta(model="m", tp=2)

"""Graph.verify(): every broken invariant is caught and the message names the stage."""

from __future__ import annotations

import pytest

from graphsim.errors import GraphError, GraphsimError
from graphsim.ir import (
    DType, Graph, LayerSchedule, LinearAttrs, NoAttrs, Node, Op, OpaqueAttrs, ReduceAttrs, T, TensorSpec,
)

X = TensorSpec((T, 8), DType.BFLOAT16)
H = TensorSpec((T, 16), DType.BFLOAT16)


def _graph(**changes) -> Graph:
    """x → linear(w) → silu → linear(w2), one decoder layer (layer 0)."""
    nodes = [
        Node("up", Op.LINEAR, ("x", "w"), (H,), LinearAttrs(8, 16), scope="model.layers.0.mlp.up", layer=0),
        Node("act", Op.SILU, ("up",), (H,), scope="model.layers.0.mlp", layer=0),
        Node("down", Op.LINEAR, ("act", "w2"), (X,), LinearAttrs(16, 8), scope="model.layers.0.mlp.down", layer=0),
    ]
    g = Graph(
        name="tiny",
        inputs={"x": X},
        params={"w": TensorSpec((16, 8), DType.BFLOAT16), "w2": TensorSpec((8, 16), DType.BFLOAT16)},
        nodes=nodes,
        outputs=["down"],
    )
    for k, v in changes.items():
        setattr(g, k, v)
    return g


def _broken(g: Graph, match: str, stage: str = "some_pass") -> None:
    with pytest.raises(GraphError, match=match) as e:
        g.verify(stage)
    assert str(e.value).startswith(f"{stage} broke graph 'tiny'")
    assert "\n" not in str(e.value)


def test_valid_graph_passes():
    _graph().verify("test")


def test_graph_error_is_a_user_facing_error():
    assert issubclass(GraphError, GraphsimError)


def test_non_topological_input():
    g = _graph()
    g.nodes = [g.nodes[1], g.nodes[0], g.nodes[2]]  # act reads up before it exists
    _broken(g, "reads 'up' before it is defined")


def test_reading_an_undefined_value():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(inputs=("nowhere",))
    _broken(g, "reads 'nowhere'")


def test_reading_a_missing_output_index():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(inputs=("up#1",))  # up has one output only
    _broken(g, r"reads 'up#1'")


def test_duplicate_node_names():
    g = _graph()
    g.nodes[2] = g.nodes[2].with_(name="up", inputs=("act", "w2"))
    _broken(g, "node name 'up' is not unique")


def test_node_name_shadowing_an_input():
    g = _graph()
    g.nodes.append(Node("x", Op.RELU, ("down",), (X,)))
    _broken(g, "node name 'x' is not unique")


def test_value_defined_as_input_and_param():
    g = _graph()
    g.params["x"] = X
    _broken(g, "value 'x' defined twice")


def test_wrong_attrs_class_for_op():
    g = _graph()
    g.nodes[0] = g.nodes[0].with_(attrs=NoAttrs())
    _broken(g, r"node 'up' \(linear\) has NoAttrs, expected LinearAttrs")


def test_attrs_on_an_op_that_takes_none():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(attrs=LinearAttrs(1, 1))
    _broken(g, "expected NoAttrs")


def test_opaque_needs_its_target():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(op=Op.OPAQUE)
    _broken(g, "expected OpaqueAttrs")
    g.nodes[1] = g.nodes[1].with_(attrs=OpaqueAttrs("aten.foo.default"))
    g.verify()


def test_max_takes_reduce_or_no_attrs():
    g = _graph()
    for attrs in (NoAttrs(), ReduceAttrs((1,), True)):
        g.nodes[1] = g.nodes[1].with_(op=Op.MAX, attrs=attrs)
        g.verify()


def test_op_that_is_not_an_op():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(op="silu")
    _broken(g, "not an Op")


def test_node_without_outputs():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(outputs=())
    _broken(g, "node 'act' has no outputs")


def test_output_without_spec():
    g = _graph()
    g.nodes[1] = g.nodes[1].with_(outputs=((16, 8),))
    _broken(g, "output 0 has no TensorSpec")


def test_undefined_graph_output():
    _broken(_graph(outputs=["down", "ghost"]), "graph output 'ghost' is not defined")


def test_graph_output_may_be_an_input_or_param():
    _graph(outputs=["down", "x", "w"]).verify()


# --- layer schedule ---------------------------------------------------------------------------
def test_valid_schedule():
    _graph(schedule=LayerSchedule(("dense",) * 4, {"dense": 0})).verify()


def test_schedule_tag_without_representative():
    _broken(_graph(schedule=LayerSchedule(("dense", "moe"), {"dense": 0})), "every tag needs exactly one representative")


def test_schedule_representative_for_unknown_tag():
    _broken(_graph(schedule=LayerSchedule(("dense",), {"dense": 0, "moe": 0})), "every tag needs exactly one representative")


def test_schedule_representative_out_of_range():
    _broken(_graph(schedule=LayerSchedule(("dense",), {"dense": 3})), "representative 3 of 'dense' does not have that tag")


def test_schedule_representative_with_other_tag():
    _broken(_graph(schedule=LayerSchedule(("moe", "dense"), {"dense": 0, "moe": 0})), "does not have that tag")


def test_schedule_representative_without_nodes():
    g = _graph(schedule=LayerSchedule(("dense", "moe"), {"dense": 0, "moe": 1}))
    _broken(g, "representative layer 1 of 'moe' has no nodes")


def test_nodes_in_a_layer_that_represents_nothing():
    g = _graph(schedule=LayerSchedule(("dense", "dense"), {"dense": 0}))
    g.nodes[1] = g.nodes[1].with_(layer=1)
    _broken(g, r"nodes belong to layers \[1\] that represent no tag")


def test_schedule_runs_and_counts():
    s = LayerSchedule(("dense", "dense", "moe", "moe", "moe", "dense"), {"dense": 0, "moe": 2})
    assert s.num_layers == 6
    assert s.count("moe") == 3
    assert s.runs() == [("dense", 0, 2), ("moe", 2, 3), ("dense", 5, 1)]

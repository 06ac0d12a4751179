"""Pipeline parsing, registration and verify-after-every-pass."""

import pytest

from graphsim.ir import DType, Graph, LinearAttrs, Node, Op, T, TensorSpec
from graphsim.passes import PassError, PassResult, parse_pipeline, register_pass, run_pipeline
from graphsim.passes.base import Pass
from graphsim.passes.partition.sharding import PartitionPass


def test_parse_pipeline_with_options():
    steps = parse_pipeline("fold,fuse{target=eager},tp{size=4},ep{size=8}")
    assert [s.spec() for s in steps] == ["fold", "fuse{target=eager}", "tp{size=4}", "ep{size=8}"]
    tp = steps[2]
    assert isinstance(tp, PartitionPass)  # tp's base, which declares size (register_pass types tp as Pass)
    assert tp.size == 4 and isinstance(tp.size, int)


@pytest.mark.parametrize("text, fragment", [
    ("", "empty pipeline"),
    ("nope", "unknown pass 'nope'"),
    ("tp{size=two}", "not a valid int"),
    ("tp{width=2}", "has no option 'width'"),
    ("fuse{target=tensorrt}", "unknown target"),
    ("tp{size}", "key=value"),
    ("tp{size=0}", "size must be >= 1"),
])
def test_bad_pipelines_name_the_problem(text, fragment):
    with pytest.raises(PassError, match=fragment):
        parse_pipeline(text)


def _tiny_graph() -> Graph:
    x = TensorSpec((1, T, 8), DType.BFLOAT16)
    g = Graph("tiny", inputs={"x": x}, params={"w": TensorSpec((8, 8), DType.BFLOAT16)})
    g.nodes.append(Node("lin", Op.LINEAR, ("x", "w"), (x,), LinearAttrs(8, 8)))
    g.outputs = ["lin"]
    return g


def test_verify_names_the_pass_that_broke_the_graph():
    @register_pass("break_it")
    class BreakIt(Pass):
        def run(self, graph):
            bad = graph.copy([n.with_(inputs=("missing",)) for n in graph.nodes])
            return PassResult(bad, True, {"broken": 1})

    with pytest.raises(Exception, match="pass 'break_it' broke graph"):
        run_pipeline(_tiny_graph(), [BreakIt()])


def test_tp_requires_fused_graph():
    with pytest.raises(PassError, match="needs a fused graph"):
        run_pipeline(_tiny_graph(), "tp{size=2}")

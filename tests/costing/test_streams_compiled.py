"""vLLM's shared-expert aux stream on the compiled graph: the inductor pass merges the shared gate's `mul` and the
routed + shared `add` into one generated kernel (passes/fuse/vllm_inductor.py), and the overlap must still be found
(vLLM's FusedMoE runs the shared experts on the aux stream in either mode: costing/streams.py)."""

import pytest
from test_streams import _moe_layer_graph

from graphsim.costing.cost_tree import build_tree, compile_tree
from graphsim.costing.streams import StreamSettings, shared_expert_overlaps
from graphsim.passes.fuse.vllm_inductor import compile_regions


@pytest.mark.parametrize("gated", [False, True])
def test_the_generated_sum_still_joins_the_two_streams(gated):
    g, _ = compile_regions(_moe_layer_graph(gated))
    by_name = {n.name: n for n in g.nodes}
    # the custom-op norm and its cast are one generated kernel (L0.norm), so the cast leaves the routed branch; gated,
    # the gate's mul and the add are one generated kernel (L0.mul) that joins the branches as the add did
    assert [m.name for m in by_name["L0.norm"].kernel.merged] == ["rms_norm", "cast"]
    join = "L0.mul" if gated else "L0.add"
    assert [m.name for m in by_name[join].kernel.merged] == (["mul", "add"] if gated else [])
    (ov,) = shared_expert_overlaps(g.nodes)
    assert ov.routed == ("L0.gate", "L0.topk", "L0.experts")
    assert ov.shared == ("L0.gate_up", "L0.act", "L0.down") + (("L0.sgate", "L0.sig") if gated else ())
    tree = compile_tree(build_tree(g, streams=StreamSettings()))
    (node,) = tree.overlaps
    assert sorted(tree.leaves[i].name for i in tree.under[node]) == sorted(ov.routed + ov.shared)
    assert join not in {tree.leaves[i].name for i in tree.under[node]}  # the sum runs after the streams meet


def test_a_routed_scale_merged_into_the_sum_is_not_taken_for_a_shared_gate():
    # MiniMax-style: the routed output is scaled (mul by a constant) before the add, so the experts do not feed the
    # add and the custom-op graph has no overlap; Inductor's one kernel for that mul and the add reads the experts
    # directly, but holds a mul with no shared-side gate input: no overlap either (the two modes agree)
    from dataclasses import replace

    from graphsim.ir import Node, Op
    from graphsim.ir.geometry import ElementwiseGeometry
    from graphsim.ir.kernel import KernelAttrs, KernelKind

    g = _moe_layer_graph(False)
    add = next(n for n in g.nodes if n.name == "L0.add")
    scale = Node("L0.scale", Op.KERNEL, ("L0.experts",), add.outputs,
                 KernelAttrs(KernelKind.ELEMENTWISE, "mul", ElementwiseGeometry(width=64), "bf16"), layer=0)
    nodes = []
    for n in g.nodes:
        nodes += [scale, replace(n, inputs=("L0.scale", "L0.down"))] if n.name == "L0.add" else [n]
    g.nodes = nodes
    g.verify()
    assert shared_expert_overlaps(g.nodes) == []
    c, _ = compile_regions(g)
    join = next(n for n in c.nodes if n.kernel.merged and [m.name for m in n.kernel.merged] == ["mul", "add"])
    assert "L0.experts" in join.inputs
    assert shared_expert_overlaps(c.nodes) == []

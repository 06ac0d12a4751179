"""ep{size=e}: expert parallelism for the routed experts of a fused kernel graph.

Routed experts are spread over e ranks (E/e per rank; an error if that does not divide) and are whole again (not
tensor-split). Shared experts and dense layers are untouched (replicated, or split by tp).

- e equal to the graph's tp (vLLM's `--enable-expert-parallel` without data parallelism: EP over the TP group): no
  exchange. The hidden states are already whole on every rank of the group; vLLM runs the all-to-all kernels only
  with dp > 1 (`FusedMoEParallelConfig.use_all2all_kernels` = `dp_size > 1 and use_ep`, fused_moe/config.py) and
  its naive dispatch / combine too (`do_naive_dispatch_combine` = `dp_size > 1 …`, `FusedMoE.forward_impl`), then
  all-reduces the experts' output over the group as at tp (`reduce_results and (tp_size > 1 or ep_size > 1)` →
  `tensor_model_parallel_all_reduce`; vllm/model_executor/layers/fused_moe/layer.py 0.10.1). Each rank's
  fused_moe skips the tokens routed to other ranks' experts (`expert_map`), so its rows are the EP rows.
- any other e (graphsim's own `--ep`): each MoE layer gains an all-to-all dispatch before and an all-to-all combine
  after its experts, and a TP all-reduce on the experts' output is replaced by the combine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.ir import Graph, Node, TensorSpec, split_value, unique_name
from graphsim.ir.geometry import MoeExpertsGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.base import PassResult, register_pass
from graphsim.passes.partition.conservation import Declared, check_conservation
from graphsim.passes.partition.sharding import PartitionPass, collective, split


@register_pass("ep")
@dataclass(frozen=True)
class ExpertParallel(PartitionPass):
    def run(self, graph: Graph) -> PassResult:
        self.require_fused(graph)
        e = self.size
        out = graph.copy([])
        out.meta.ep = e
        moe = [n for n in graph.nodes if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.MOE_EXPERTS]
        if e == 1 or not moe:
            out.nodes = list(graph.nodes)
            return PassResult(out, False, {"moe_layers": len(moe)})
        used = {n.name for n in graph.nodes}
        params = dict(graph.params)
        exchange = e != graph.meta.tp  # EP over the TP group: no all-to-all, the group's all-reduce stays
        stats = {"moe_layers": len(moe), "all_to_all": 0, "tp_all_reduce_replaced": 0}
        rename: dict[str, str] = {}
        moe_names = {n.name for n in moe}
        for n in graph.nodes:
            a = n.attrs
            # the TP all-reduce that followed the experts is replaced by the combine
            if (exchange and isinstance(a, KernelAttrs) and a.kind is KernelKind.ALL_REDUCE and n.inputs
                    and n.inputs[0] in moe_names):
                rename[n.name] = rename.get(n.inputs[0], n.inputs[0])
                stats["tp_all_reduce_replaced"] += 1
                continue
            n = n.with_(inputs=tuple(rename.get(v, v) for v in n.inputs))
            if n.name not in moe_names:
                out.nodes.append(n)
                continue
            where = f"ep{{size={e}}} at {n.name}"
            a = n.kernel
            g = a.geometry_as(MoeExpertsGeometry)
            experts = g.num_experts
            local = split(experts, e, "num_experts (routed experts)", where)
            tp = g.tp
            inter = g.inter_size
            for v in n.inputs:
                spec = graph.params.get(v)
                # the expert weights [E, ., .] and per-expert biases [E, .] (GPT-OSS: vllm-project/vllm
                # models/gpt_oss.py load_weights narrows w13/w2 weights and biases to the rank's experts under EP)
                if spec is None or len(spec.shape) not in (2, 3) or spec.shape[0] != experts:
                    continue
                # experts are whole under EP: undo tp's split of the intermediate dim
                dims = tuple(d * tp if i > 0 and tp > 1 and d in (inter // tp, 2 * inter // tp) else d
                             for i, d in enumerate(spec.shape))
                params[v] = TensorSpec((local, *dims[1:]), spec.dtype)
            if not exchange:
                out.nodes.append(n.with_(attrs=a.with_geometry(replace(g, ep=e, tp=1))))
                continue
            width = g.hidden_size * g.top_k
            hidden_in = n.inputs[0]
            spec_in = _spec_of(out.nodes, graph, hidden_in)
            dispatch = collective(unique_name(f"{n.name}.dispatch", used), KernelKind.ALL_TO_ALL, hidden_in, spec_in,
                                  n, e, width, Rows.TOKENS, "moe_dispatch", "ep")
            n = n.with_(inputs=(dispatch.name, *n.inputs[1:]), attrs=a.with_geometry(replace(g, ep=e, tp=1)))
            combine = collective(unique_name(f"{n.name}.combine", used), KernelKind.ALL_TO_ALL, n.name, n.outputs[0],
                                 n, e, width, Rows.TOKENS, "moe_combine", "ep")
            out.nodes += [dispatch, n, combine]
            rename[n.name] = combine.name
            stats["all_to_all"] += 2
        out.params = params
        out.outputs = [rename.get(o, o) for o in graph.outputs]
        if graph.meta.tp > 1:
            out.meta.moe_tp = 1
        notes = check_conservation(graph, out, e, "ep", Declared())
        return PassResult(out, True, stats, notes)


def _spec_of(nodes: list[Node], graph: Graph, value: str) -> TensorSpec:
    name, idx = split_value(value)
    for m in reversed(nodes):
        if m.name == name:
            return m.outputs[idx]
    return graph.spec_of(value)

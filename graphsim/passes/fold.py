"""fold: keep one set of nodes per distinct decoder-layer type; the schedule says how many of each.

A graph imported with one traced layer per type (the HF importer's default) is already folded:
the pass checks it and reports its regions. A graph with every layer present (a full-depth trace,
an ONNX file) is folded here. Each layer's node sequence is hashed with its parameters named
relative to the layer, its own values by position, values read by several layers (RoPE tables,
masks) by name — so sliding and full layers that read different shared inputs stay apart — and
its incoming hidden state by shape. Layers with equal hashes share a type; the first of each
type is kept, and reads of dropped layers are rewired to the same position in their type's
representative.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from graphsim.ir import AttentionAttrs, Graph, LayerSchedule, Node, Op, split_value, value_name
from graphsim.passes.base import Pass, PassResult, register_pass


def _layer_prefix(scope: str, layer: int) -> str:
    marker = f".{layer}"
    i = scope.find(marker + ".")
    if i < 0 and scope.endswith(marker):
        i = len(scope) - len(marker)
    return scope[: i + len(marker)] if i >= 0 else ""


def _relative(name: str, layer: int) -> str:
    pre = _layer_prefix(name, layer)
    return name[len(pre):] if pre else name


def _signature(nodes: list[Node], layer: int, graph: Graph, readers: dict[str, set[int]]) -> str:
    local = {n.name: i for i, n in enumerate(nodes)}
    parts = []
    for n in nodes:
        ins = []
        for v in n.inputs:
            src, idx = split_value(v)
            if src in local:
                ins.append(("local", local[src], idx))
            elif v in graph.params:
                ins.append(("param", _relative(v, layer), graph.params[v].to_str()))
            elif len(readers.get(v, ())) > 1:  # read by several layers (RoPE tables, masks): bind by name
                ins.append(("shared", v))
            else:  # the layer's incoming hidden state (from the embedding or the previous layer)
                ins.append(("incoming", graph.spec_of(v).to_str()))
        parts.append((n.op.value, repr(n.attrs), tuple(s.to_str() for s in n.outputs), tuple(ins),
                      _relative(n.scope, layer), n.module_type))
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def _tag(nodes: list[Node]) -> str:
    attn = [n.attrs for n in nodes if n.op is Op.ATTENTION and isinstance(n.attrs, AttentionAttrs)]
    if any(n.op is Op.LINEAR_ATTENTION for n in nodes):
        a = "linear"
    elif attn and attn[0].sliding_window:
        a = "sliding"
    else:
        a = "full"
    f = "moe" if any(n.op is Op.MOE_EXPERTS for n in nodes) else "dense"
    return f"{a}.{f}"


@register_pass("fold")
@dataclass(frozen=True)
class Fold(Pass):
    def run(self, graph: Graph) -> PassResult:
        by_layer: dict[int, list[Node]] = {}
        for n in graph.nodes:
            if n.layer is not None:
                by_layer.setdefault(n.layer, []).append(n)
        if not by_layer:
            return PassResult(graph, False, {"layers": 0, "regions": 0}, ["graph has no decoder layers"])
        sched = graph.schedule
        if sched is not None and set(by_layer) == set(sched.representative.values()):
            return PassResult(graph, False, self._stats(sched, 0))
        readers: dict[str, set[int]] = {}  # value → layers whose nodes read it
        for n in graph.nodes:
            if n.layer is not None:
                for v in n.inputs:
                    readers.setdefault(v, set()).add(n.layer)
        layers = sorted(by_layer)
        sigs = {i: _signature(by_layer[i], i, graph, readers) for i in layers}
        rep_of_sig: dict[str, int] = {}
        for i in layers:
            rep_of_sig.setdefault(sigs[i], i)
        tag_of_sig: dict[str, str] = {}
        used: dict[str, int] = {}
        for s, rep in rep_of_sig.items():
            hint = sched.tags if sched is not None else graph.meta.layer_tags
            base = hint[rep] if hint and rep < len(hint) else _tag(by_layer[rep])
            used[base] = used.get(base, 0) + 1
            tag_of_sig[s] = base if used[base] == 1 else f"{base}{used[base]}"
        keep = set(rep_of_sig.values())
        # rewire reads of dropped layers to the same position in their representative
        rename: dict[str, str] = {}
        for i in layers:
            rep = rep_of_sig[sigs[i]]
            if rep == i:
                continue
            for pos, n in enumerate(by_layer[i]):
                twin = by_layer[rep][pos]
                for k in range(len(n.outputs)):
                    rename[value_name(n.name, k)] = value_name(twin.name, k)
        nodes = []
        for n in graph.nodes:
            if n.layer is not None and n.layer not in keep:
                continue
            if any(v in rename for v in n.inputs):
                n = n.with_(inputs=tuple(rename.get(v, v) for v in n.inputs))
            nodes.append(n)
        read_by_kept = {v for n in nodes for v in n.inputs}
        read_by_dropped = {v for n in graph.nodes if n.layer is not None and n.layer not in keep for v in n.inputs}
        dropped_params = (read_by_dropped & set(graph.params)) - read_by_kept
        out = graph.copy(nodes)
        out.params = {k: v for k, v in graph.params.items() if k not in dropped_params}
        out.outputs = [rename.get(o, o) for o in graph.outputs]
        tags = tuple(tag_of_sig[sigs[i]] for i in layers)
        out.schedule = LayerSchedule(tags, {tag_of_sig[s]: rep for s, rep in rep_of_sig.items()})
        out.meta.num_layers = len(layers)
        out.meta.traced_layers = sorted(keep)
        return PassResult(out, True, self._stats(out.schedule, len(graph.nodes) - len(nodes)))

    @staticmethod
    def _stats(sched: LayerSchedule, removed: int) -> dict[str, int]:
        return {"layers": sched.num_layers, "layer_types": len(sched.representative),
                "regions": len(sched.runs()), "nodes_removed": removed}

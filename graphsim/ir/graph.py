"""Node and Graph: a topologically ordered tensor graph with module scope on every node.

Values are named: a graph input or parameter by its own name, a node's k-th output by
`node.name` (k = 0) or `node.name#k`. `Graph.verify()` checks every invariant and names the
stage (importer or pass) that broke one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from graphsim.errors import GraphError
from graphsim.ir.attrs import Attrs, NoAttrs, allowed_attrs
from graphsim.ir.kernel import GEOMETRY_FOR_KIND, KernelAttrs
from graphsim.ir.meta import GraphMeta
from graphsim.ir.ops import Op, OpGroup
from graphsim.ir.tensor import TensorSpec

if TYPE_CHECKING:  # networkx is imported where a graph is converted (it costs ~19 MiB a search never needs)
    import networkx as nx

A = TypeVar("A")


def value_name(node: str, index: int = 0) -> str:
    return node if index == 0 else f"{node}#{index}"


def unique_name(base: str, used: set[str], last: dict[str, int] | None = None) -> str:
    """`base`, or `base_2`, `base_3`, … — the first not in `used` (which it joins).

    `last` (base → the suffix it last got) lets many calls with one base start where the previous one stopped
    instead of probing every taken suffix again (7,423 kernels named from a few bases took 1.6 s); valid while
    names are only added to `used`.
    """
    k = 1 if last is None else last.get(base, 1)
    name = base if k == 1 else f"{base}_{k}"
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    if last is not None:
        last[base] = k
    return name


def split_value(name: str) -> tuple[str, int]:
    if "#" in name:
        n, i = name.rsplit("#", 1)
        return n, int(i)
    return name, 0


@dataclass(frozen=True)
class Node:
    name: str
    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[TensorSpec, ...]
    attrs: Attrs = field(default_factory=NoAttrs)
    scope: str = ""  # module path, e.g. model.layers.3.mlp.down_proj
    module_type: str = ""  # class of the innermost module, e.g. LlamaRMSNorm
    layer: int | None = None  # decoder layer index (None outside the layer stack)
    target: str = ""  # framework op it came from, e.g. aten.linear.default
    provenance: str = ""  # importer or pass/rule that made it

    def with_(self, **changes: Any) -> Node:
        return replace(self, **changes)

    def attrs_as(self, cls: type[A]) -> A:
        """The attributes typed as `cls` (TypeError naming the node when they are another class)."""
        a = self.attrs
        if not isinstance(a, cls):
            raise TypeError(f"node '{self.name}' ({self.op.value}) has {type(a).__name__}, not {cls.__name__}")
        return a

    @property
    def kernel(self) -> KernelAttrs:
        """The kernel attributes of an `Op.KERNEL` node."""
        return self.attrs_as(KernelAttrs)


@dataclass(frozen=True)
class LayerSchedule:
    """The model's full decoder stack: a type tag per layer, and which traced layer represents it.

    An importer may trace one layer per distinct type; `representative[tag]` names the layer
    index whose nodes stand for every layer with that tag.
    """

    tags: tuple[str, ...]
    representative: dict[str, int]

    @property
    def num_layers(self) -> int:
        return len(self.tags)

    def count(self, tag: str) -> int:
        return sum(1 for t in self.tags if t == tag)

    def runs(self) -> list[tuple[str, int, int]]:
        """Contiguous runs as (tag, first layer, length)."""
        out: list[tuple[str, int, int]] = []
        for i, t in enumerate(self.tags):
            if out and out[-1][0] == t:
                out[-1] = (t, out[-1][1], out[-1][2] + 1)
            else:
                out.append((t, i, 1))
        return out


@dataclass
class Graph:
    """Topologically ordered nodes plus the graph's inputs, parameters and outputs."""

    name: str
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    params: dict[str, TensorSpec] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    schedule: LayerSchedule | None = None
    meta: GraphMeta = field(default_factory=GraphMeta)
    # name → position in `nodes`, rebuilt when a lookup finds it stale (passes edit `nodes` in place)
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    # --- access -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> Node:
        """The node called `name` (KeyError if none); O(1) through an index checked on every hit."""
        i = self._index.get(name)
        nodes = self.nodes
        if i is None or i >= len(nodes) or nodes[i].name != name:
            index: dict[str, int] = {}
            for k, n in enumerate(nodes):
                index.setdefault(n.name, k)
            self._index = index
            i = index.get(name)
            if i is None:
                raise KeyError(name)
        return nodes[i]

    def spec_of(self, value: str) -> TensorSpec:
        if value in self.inputs:
            return self.inputs[value]
        if value in self.params:
            return self.params[value]
        node_name, idx = split_value(value)
        return self.node(node_name).outputs[idx]

    def value_specs(self) -> dict[str, TensorSpec]:
        specs = dict(self.inputs)
        specs.update(self.params)
        for n in self.nodes:
            for i, s in enumerate(n.outputs):
                specs[value_name(n.name, i)] = s
        return specs

    def count_by_op(self) -> dict[Op, int]:
        out: dict[Op, int] = {}
        for n in self.nodes:
            out[n.op] = out.get(n.op, 0) + 1
        return out

    def opaque_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.op is Op.OPAQUE]

    def nodes_in_group(self, group: OpGroup) -> list[Node]:
        return [n for n in self.nodes if n.op.group is group]

    def users(self) -> dict[str, list[str]]:
        """value name → names of nodes reading it."""
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n.name)
        return out

    def to_networkx(self) -> nx.DiGraph:
        import networkx as nx

        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.name, op=n.op.value, scope=n.scope)
            for v in n.inputs:
                src, _ = split_value(v)
                if v in self.inputs or v in self.params:
                    continue
                g.add_edge(src, n.name)
        return g

    def param_count(self) -> int:
        """Parameters present in this graph (traced layers only; see meta.param_count for the model)."""
        total = 0
        for spec in self.params.values():
            n = spec.numel
            total += int(n)
        return total

    # --- invariants -------------------------------------------------------------------------
    def verify(self, stage: str = "graph") -> None:
        """Raise GraphError naming `stage` if any invariant is broken."""

        def fail(msg: str) -> None:
            raise GraphError(f"{stage} broke graph '{self.name}': {msg}")

        defined: dict[str, TensorSpec] = {}
        for k, s in list(self.inputs.items()) + list(self.params.items()):
            if k in defined:
                fail(f"value '{k}' defined twice")
            if not isinstance(s, TensorSpec):
                fail(f"value '{k}' has no TensorSpec")
            defined[k] = s
        seen_nodes: set[str] = set()
        for n in self.nodes:
            if n.name in seen_nodes or n.name in defined:
                fail(f"node name '{n.name}' is not unique")
            if not isinstance(n.op, Op):
                fail(f"node '{n.name}' has op {n.op!r}, not an Op")
            if not isinstance(n.attrs, allowed_attrs(n.op)):
                allowed = "/".join(c.__name__ for c in allowed_attrs(n.op))
                fail(f"node '{n.name}' ({n.op.value}) has {type(n.attrs).__name__}, expected {allowed}")
            if isinstance(n.attrs, KernelAttrs) and type(n.attrs.geometry) is not GEOMETRY_FOR_KIND[n.attrs.kind]:
                fail(f"kernel '{n.name}' ({n.attrs.kind.value}) has {type(n.attrs.geometry).__name__}, expected "
                     f"{GEOMETRY_FOR_KIND[n.attrs.kind].__name__}")
            for v in n.inputs:
                if v not in defined:
                    fail(f"node '{n.name}' reads '{v}' before it is defined (not topological)")
            if not n.outputs:
                fail(f"node '{n.name}' has no outputs")
            for i, s in enumerate(n.outputs):
                if not isinstance(s, TensorSpec):
                    fail(f"node '{n.name}' output {i} has no TensorSpec")
                defined[value_name(n.name, i)] = s
            seen_nodes.add(n.name)
        for o in self.outputs:
            if o not in defined:
                fail(f"graph output '{o}' is not defined")
        if self.schedule is not None:
            tags = set(self.schedule.tags)
            if set(self.schedule.representative) != tags:
                fail("layer schedule: every tag needs exactly one representative layer")
            layers = {n.layer for n in self.nodes if n.layer is not None}
            for tag, idx in self.schedule.representative.items():
                if not 0 <= idx < self.schedule.num_layers or self.schedule.tags[idx] != tag:
                    fail(f"layer schedule: representative {idx} of '{tag}' does not have that tag")
                if layers and idx not in layers:
                    fail(f"layer schedule: representative layer {idx} of '{tag}' has no nodes")
            stray = layers - set(self.schedule.representative.values())
            if stray:
                fail(f"nodes belong to layers {sorted(stray)} that represent no tag")

    def copy(self, nodes: Iterable[Node] | None = None) -> Graph:
        return Graph(
            name=self.name,
            inputs=dict(self.inputs),
            params=dict(self.params),
            nodes=list(self.nodes if nodes is None else nodes),
            outputs=list(self.outputs),
            schedule=self.schedule,
            meta=self.meta.copy(),
        )

"""Mamba2 mixers with fewer B/C groups than TP ranks: vLLM replicates the group on every rank.

vLLM's `MambaMixer2.__init__` (vllm-project/vllm@bb435dbd, model_executor/layers/mamba/mamba_mixer2.py) splits a
Mamba2 mixer by heads; the B and C projections belong to `n_groups` groups. When the tp size divides n_groups each
rank holds n_groups / tp whole groups (the plain column-parallel split). Otherwise it asserts n_groups == 1 ("If
tensor parallel world size does not divide num_groups, then num_groups must equal 1") and pads the group count
to tp (`extra_groups_for_head_shards`: tp − n_groups extra groups), so that `conv_dim = intermediate + 2 ·
(n_groups + extra) · state_size` splits over the ranks and every rank holds the one group whole:

- `in_proj` (ColumnParallelLinear of intermediate + conv_dim + num_heads outputs, loaded by
  `mamba_v2_sharded_weight_loader` with `duplicate_groups`: every rank reads group 0's B and C rows) and
  `conv1d` (ColumnParallelLinear over conv_dim, the same loader) each hold, per rank,
  intermediate / tp + 2 · state_size (+ num_heads / tp for in_proj) rows: (n + 2 · (tp − 1) · state_size) / tp;
- the scan (`mamba_chunk_scan_combined` / `selective_state_update`) reads B and C of that one group on every rank;
- the per-request conv state follows conv_dim (`MambaStateShapeCalculator.mamba2_state_shape`, mamba_utils.py;
  graphsim.serving.kv_layout / graph_kv already lay it out so);
- the gated norm (`Mixer2RMSNormGated.forward_native`, n_groups == 1) normalises the whole intermediate vector
  spread over the ranks: a local sum of squares, then an all-reduce of one f32 value per token (`norms`: the tp
  pass adds it as for any whole-vector norm on sharded activations).

A quantized checkpoint is refused: vLLM asserts the tp size divides n_groups when a quant_config is given
("Tensor parallel currently supported for quantized models only if tensor parallel world size divides num
groups", MambaMixer2.__init__ of later versions; earlier ones refused tp > 1 with any quant_config).

The replicated rows are stated, not hidden: the tp pass declares each grown kernel with the factor its per-rank
work and weights must have against the unpartitioned ones ((n + extra) / n), and the conservation check holds
it to that factor and lists the excess as "Mamba2 B/C groups (n_groups < tp)".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from graphsim.ir import Graph, Node, TensorSpec
from graphsim.ir.geometry import Conv1dGeometry, ElementwiseGeometry, GemmGeometry, LinearAttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes.base import PassError
from graphsim.passes.partition.sharding import split

REASON = "Mamba2 B/C groups (n_groups < tp)"


@dataclass
class GroupReplication:
    """The kernels a tp split grows because a Mamba2 mixer's groups are replicated.

    `extra`: node name -> per-token elements added to its split dimension before dividing by tp (in_proj's n,
    the conv1d's channels, a per-token elementwise kernel between them such as Falcon-H1's mup multiplier);
    `width`: node name -> that dimension unpartitioned; `scans`: scan node name -> its groups per rank; `norms`:
    the gated norms over such a mixer's output (one group: normalised over the whole vector spread over the ranks,
    so vLLM's Mixer2RMSNormGated.forward_native all-reduces each rank's sum of squares)."""

    extra: dict[str, int] = field(default_factory=dict)
    width: dict[str, int] = field(default_factory=dict)
    scans: dict[str, int] = field(default_factory=dict)
    norms: set[str] = field(default_factory=set)

    def factor(self, name: str) -> float:
        """per-rank × tp over the unpartitioned size of a grown kernel: (width + extra) / width."""
        return (self.width[name] + self.extra[name]) / self.width[name]


def extra_groups(n_groups: int, t: int) -> int:
    """vLLM's `extra_groups_for_head_shards`: 0 when t divides n_groups, else t − n_groups."""
    return 0 if n_groups % t == 0 else t - n_groups


def plan(graph: Graph, users: dict[str, list[Node]], t: int) -> GroupReplication:
    """Find every Mamba2 scan whose groups t does not divide, and the kernels its replicated groups grow."""
    out = GroupReplication()
    producer = {v: n for n in graph.nodes for v in _values(n)}
    for n in graph.nodes:
        a = n.attrs
        if not (isinstance(a, KernelAttrs) and isinstance(a.geometry, LinearAttentionGeometry)
                and a.geometry.kind == "mamba2_ssd"):
            continue
        g = a.geometry
        groups = g.num_k_heads
        where = f"tp{{size={t}}} at {n.name}"
        if g.num_v_heads % t:  # vllm 0.33.0 model_executor/layers/mamba/mamba_mixer2.py MambaMixer2.__init__
            raise PassError(f"{where}: vLLM refuses this Mamba2 mixer at tensor parallel size {t}: 'Tensor parallel "
                            f"world size must divide num heads.' ({g.num_v_heads} heads; MambaMixer2.__init__); "
                            f"choose a -tp that divides {g.num_v_heads}")
        if groups % t == 0:
            continue
        if groups != 1:
            raise PassError(f"{where}: n_groups = {groups} is neither 1 nor divisible by tp size {t}; vLLM's "
                            "MambaMixer2 replicates B/C groups only for n_groups == 1 (mamba_mixer2.py); "
                            f"choose a tp size that divides {groups}")
        if graph.meta.quantization_config:
            raise PassError(f"{where}: a quantized Mamba2 mixer with n_groups = 1 at tp size {t}; vLLM's "
                            "MambaMixer2 supports tensor parallelism of quantized checkpoints only when the tp "
                            "size divides n_groups (mamba_mixer2.py); use tp 1")
        pad = 2 * extra_groups(groups, t) * g.k_head_dim  # B and C of the added groups, per token
        conv = next((producer[v] for v in n.inputs if v in producer
                     and producer[v].kernel.kind is KernelKind.CONV1D), None)
        if conv is None:
            raise PassError(f"{where}: no causal_conv1d feeds this Mamba2 scan, so graphsim cannot place its "
                            "replicated B/C groups; report it with the model's config")
        channels = conv.kernel.geometry_as(Conv1dGeometry).channels
        expected = g.num_v_heads * g.v_head_dim + 2 * groups * g.k_head_dim
        if channels != expected:
            raise PassError(f"{where}: the conv before the scan has {channels} channels, not intermediate + "
                            f"2 · n_groups · state = {expected}; graphsim cannot place the replicated groups")
        out.extra[conv.name], out.width[conv.name] = pad, channels
        gemm = _projection(conv, producer, out, pad, where)
        gn = gemm.kernel.geometry_as(GemmGeometry).n
        if gn < channels:
            raise PassError(f"{where}: {gemm.name} ({gn} outputs) does not hold the conv's {channels} channels")
        out.extra[gemm.name], out.width[gemm.name] = pad, gn
        out.scans[n.name] = split(groups + extra_groups(groups, t), t, "Mamba2 n_groups (padded)", where)
        out.norms.update(u.name for v in _values(n) for u in users.get(v, [])
                         if isinstance(u.attrs, KernelAttrs) and u.attrs.kind is KernelKind.RMS_NORM)
    return out


def _projection(conv: Node, producer: dict[str, Node], out: GroupReplication, pad: int, where: str) -> Node:
    """The in_proj GEMM whose output the conv reads, through per-token elementwise kernels on the whole in_proj
    width (each of them grows with it: Falcon-H1's mup_vector multiply, models/falcon_h1.py)."""
    m = conv
    for _ in range(8):
        acts = [producer[v] for v in m.inputs if v in producer]
        if not acts:
            break
        m = acts[0]
        if m.kernel.kind is KernelKind.GEMM:
            return m
        if m.kernel.kind is not KernelKind.ELEMENTWISE:
            break
        out.extra[m.name], out.width[m.name] = pad, m.kernel.geometry_as(ElementwiseGeometry).width
    raise PassError(f"{where}: no in_proj GEMM feeds {conv.name}, so graphsim cannot place the replicated B/C "
                    "groups; report it with the model's config")


def grow(n: Node, graph: Graph, params: dict[str, TensorSpec], rep: GroupReplication, t: int, where: str) -> Node:
    """One rank's version of a kernel grown by replicated groups: its split dimension (width + extra) / t, and
    every parameter tensor with a dimension of that width likewise (in_proj's weight and bias, the conv's
    weight and bias, a per-channel multiplier)."""
    a = n.kernel
    width, extra = rep.width[n.name], rep.extra[n.name]
    rank = split(width + extra, t, "Mamba2 in_proj / conv width with replicated groups", where)
    g = a.geometry
    if isinstance(g, GemmGeometry):
        geo = replace(g, n=rank)
    elif isinstance(g, Conv1dGeometry):
        geo = replace(g, channels=rank)
    elif isinstance(g, ElementwiseGeometry):
        geo = replace(g, width=rank, in_width=None if g.in_width is None else rank)
    else:
        raise PassError(f"{where}: graphsim cannot grow a {a.kind.value} kernel by replicated Mamba2 groups")
    for v in n.inputs:
        spec = graph.params.get(v)
        if spec is None or width not in spec.shape:
            continue
        shape = list(spec.shape)
        shape[shape.index(width)] = rank
        params[v] = TensorSpec(tuple(shape), spec.dtype)
    return n.with_(attrs=a.with_geometry(geo))


def _values(n: Node) -> list[str]:
    return [n.name if i == 0 else f"{n.name}#{i}" for i in range(len(n.outputs))]

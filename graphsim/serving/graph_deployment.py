"""A deployment of an architecture the work accountant has no builder for: its memory budget and KV layout read
off the traced graph (issue 16: "KV layout from the traced graph ... so kv/simulate/search work").

`plan_deployment` (deployment.py) takes this path when `graph_kv.accountant_lacks` names the architecture. The
model is traced (graphsim.importers.hf, on the meta device; cached on disk) and:

- the KV / state layout is `graph_kv.graph_kv_layout` of the unpartitioned graph (vLLM's per-rank cache shapes);
- the weights per rank are the parameters of the graph fused for vLLM and split by the tp pass
  (`pipeline_for("vllm", tp)`, the graph the cost model prices): each parameter's per-rank shape × the decoder
  layers its traced layer stands for (the fold pass's schedule); a matrix a GEMM / MoE kernel reads in a
  quantized kernel dtype is counted in the checkpoint's stored bytes (graphsim.quantization, scales included),
  every other parameter in its own dtype. Tied parameters are one tensor in the graph and counted once;
- the rotary cos/sin cache is max_position_embeddings × each distinct `rot_dim` of the graph's rotary kernels ×
  the model dtype (vLLM's RotaryEmbedding cache, as `memory.rotary_cache_bytes`);
- the activation peak is `memory.activation_peak`'s formula with the widest per-token intermediate of the
  partitioned graph (activation inputs + outputs of one kernel, or a routed-experts kernel's top_k × its
  gate/up/down intermediates), labelled estimated like the accountant's;
- overhead and CUDA-graph terms are the same stated assumptions as `memory.memory_budget`.

Every term says it comes from the traced graph. Refused in one line (not modelled on this path): engines other
than vLLM, pipeline / context parallelism, speculative decoding, and data-parallel attention of a MoE model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from graphsim.errors import GraphsimError
from graphsim.serving.graph_kv import SOURCE, graph_blind_spots, graph_dtypes, graph_kv_layout
from graphsim.serving.memory import SAMPLER_FP32_COPIES, BudgetTerm, MemoryBudget, engine_terms
from graphsim.serving.non_torch import NonTorchEstimate, non_torch_estimate

if TYPE_CHECKING:
    from graphsim.catalog import ResolvedModel
    from graphsim.costing.hardware import HardwareSpec
    from graphsim.ir import Graph
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import Deployment
    from graphsim.serving.engine_config import EngineConfig


class GraphDeploymentError(GraphsimError):
    """A deployment the traced-graph path does not model (one line naming what to drop)."""


@dataclass(frozen=True)
class GraphFacts:
    """What a deployment reads off the traced graph in place of the accountant's model spec."""

    reason: str  # why the accountant's spec is not used
    vocab: int
    has_routed_experts: bool
    precision: tuple[tuple[str, str], ...]  # `Precision.describe`'s items: weight / KV / state dtypes and sources


def layer_multiplicity(graph: Graph) -> dict[int, int]:
    """Decoder layers each traced layer stands for (1 each without a schedule)."""
    if graph.schedule is None:
        return {}
    out: dict[int, int] = {}
    for tag, rep in graph.schedule.representative.items():
        out[rep] = out.get(rep, 0) + graph.schedule.count(tag)
    return out


def _int_dims(shape: tuple[Any, ...]) -> list[int]:
    return [int(d) for d in shape if isinstance(d, int)]


def graph_weight_bytes(graph: Graph, quantization: Any = None) -> tuple[int, list[str]]:
    """Parameter bytes of a (partitioned) kernel graph over the whole decoder stack, and notes. `quantization`:
    the checkpoint's `graphsim.quantization.Quantization` (None: every parameter in its graph dtype)."""
    from graphsim.ir import Op
    from graphsim.ir.kernel import KernelKind

    mult = layer_multiplicity(graph)
    reader: dict[str, tuple[int | None, str, str]] = {}  # param -> (layer, kernel dtype, kernel kind)
    for n in graph.nodes:
        kind, dtype = "", ""
        if n.op is Op.KERNEL:
            kind, dtype = n.kernel.kind.value, n.kernel.dtype
        for v in n.inputs:
            if v in graph.params and v not in reader:
                reader[v] = (n.layer, dtype, kind)
    quantized_kinds = {KernelKind.GEMM.value, KernelKind.MOE_EXPERTS.value}
    total, stored_quantized = 0.0, 0
    for name, spec in graph.params.items():
        layer, kdtype, kind = reader.get(name, (None, "", ""))
        copies = mult.get(layer, 1) if layer is not None else 1
        dims = _int_dims(spec.shape)
        nbytes = float(math.prod(dims)) * spec.dtype.bytes
        if (quantization is not None and kind in quantized_kinds and len(dims) >= 2 and kdtype
                and kdtype != spec.dtype.value):
            path = name.removesuffix(".weight")  # a linear's module; fused experts' tensors are named themselves
            per_matrix = quantization.matrix_bytes_at(path, dims[-2], dims[-1])
            if per_matrix is not None:
                nbytes = float(math.prod(dims[:-2])) * per_matrix
                stored_quantized += 1
        total += nbytes * copies
    notes = [f"{len(graph.params)} parameter tensors of the traced graph" + (
        f", {stored_quantized} stored quantized" if stored_quantized else "")]
    return int(round(total)), notes


def _widest_per_token(graph: Graph) -> tuple[int, str]:
    """Widest per-token intermediate of one kernel of the partitioned graph (elements per rank) and which kernel,
    from the kernels' per-rank geometry: a GEMM's output, an elementwise kernel's output + input (gate/up → act =
    3 × intermediate, as the accountant counts it), attention's q/k/v + output, routed experts' top_k × their
    gate/up/down intermediates."""
    from graphsim.ir import Op
    from graphsim.ir.geometry import AttentionGeometry, ElementwiseGeometry, GemmGeometry, MoeExpertsGeometry
    from graphsim.ir.kernel import KernelKind

    best, what = 0, ""
    for n in graph.nodes:
        if n.op is not Op.KERNEL or n.layer is None:  # the LM head's logits: sampled rows only (the sampler term)
            continue
        g = n.kernel.geometry
        if isinstance(g, MoeExpertsGeometry):
            w, label = g.top_k * (3 if g.gated else 2) * g.inter_size // (g.tp * g.ep), "routed experts' intermediates"
        elif isinstance(g, GemmGeometry):
            w, label = g.n, "GEMM output"
        elif isinstance(g, ElementwiseGeometry) and n.kernel.kind is KernelKind.ACT_AND_MUL:
            w, label = 3 * g.width, "gated activation: 2 × width in + width out"
        elif isinstance(g, ElementwiseGeometry):
            w, label = g.width + (g.in_width or 0), "elementwise output + input"
        elif isinstance(g, AttentionGeometry):
            w = (g.num_heads + g.num_kv_heads) * g.head_dim + (g.num_kv_heads + g.num_heads) * g.v_head_dim
            label = "attention q/k/v + output"
        else:
            continue
        if w > best:
            best, what = w, f"{n.name}, {label}"
    return best, what


def _rotary_bytes(graph: Graph, cfg: dict[str, Any], dtype_bytes: float) -> tuple[int, str]:
    from graphsim.ir import Op
    from graphsim.ir.geometry import RotaryGeometry

    max_pos = cfg.get("max_position_embeddings")
    if not isinstance(max_pos, int):
        return 0, ""
    dims = {n.kernel.geometry.rot_dim for n in graph.nodes
            if n.op is Op.KERNEL and isinstance(n.kernel.geometry, RotaryGeometry)}
    return int(sum(max_pos * d * dtype_bytes for d in dims)), ", ".join(str(d) for d in sorted(dims))


def graph_memory_budget(kernels: Graph, cfg: dict[str, Any], quantization: Any, tp: int, total_bytes: int,
                        utilization: float, max_num_batched_tokens: int, max_num_seqs: int, *,
                        activation_gib: float | None = None, overhead_gib: float | None = None,
                        cudagraph_gib: float | None = None, available_bytes: int | None = None,
                        cudagraph_subtracted: bool = True, non_torch: NonTorchEstimate | None = None) -> MemoryBudget:
    """The KV budget term by term from the tp-partitioned kernel graph `kernels` (see the module docstring)."""
    weights, notes = graph_weight_bytes(kernels, quantization)
    dt = kernels.meta.model_dtype.bytes if kernels.meta.model_dtype is not None else 2
    wq = f"quantized: {quantization.describe()}" if quantization is not None else (kernels.meta.dtype or "model dtype")
    terms = [BudgetTerm("weights", weights, "derived",
                        f"{SOURCE}: parameter bytes per rank of the graph fused for vLLM and split by tp={tp}, × the "
                        f"layers each traced layer stands for ({wq}; {notes[0]})")]
    rot, rot_dims = _rotary_bytes(kernels, cfg, dt)
    if rot:
        terms.append(BudgetTerm("rotary cos/sin cache", rot, "derived",
                                f"{SOURCE}: max_position_embeddings × rotary dim ({rot_dims}) × dtype"))
    peak = _activation_peak(kernels, cfg, dt, max_num_batched_tokens, max_num_seqs) if activation_gib is None else None
    terms += engine_terms(peak, activation_gib, overhead_gib, cudagraph_gib, cudagraph_subtracted, non_torch)
    return MemoryBudget(total_bytes, utilization, tuple(terms), available_bytes)


def _activation_peak(kernels: Graph, cfg: dict[str, Any], dt: float, tokens: int, seqs: int) -> BudgetTerm:
    """`memory.activation_peak`'s formula (forward T × dtype × (3 × hidden + widest), or the sampler's rows ×
    vocab × 4 B × 2 + hidden states) with the hidden size and widest intermediate of the traced graph."""
    hidden = int(cfg.get("hidden_size") or 0)
    vocab = int(cfg.get("vocab_size") or 0)
    widest, what = _widest_per_token(kernels)
    forward = tokens * dt * (3 * hidden + widest)
    sampler = seqs * vocab * 4 * SAMPLER_FP32_COPIES + tokens * hidden * dt
    if forward >= sampler:
        return BudgetTerm("activation peak", int(forward), "estimated",
                          f"forward over {tokens} tokens: T × {dt:g} B × (3 × hidden {hidden} + widest {widest}: "
                          f"{what}, {SOURCE})")
    return BudgetTerm("activation peak", int(sampler), "estimated",
                      f"sampler over {seqs} rows: rows × vocab {vocab} × 4 B × {SAMPLER_FP32_COPIES} + the hidden "
                      "states held")


def _refuse(config: DeploymentConfig, engine: EngineConfig, reason: str, moe: bool) -> None:
    par = config.parallel
    unsupported = [name for name, on in (
        ("--pipeline-parallel-size", par.pipeline_parallel_size > 1 or bool(par.pp_layer_partition)),
        ("-dcp / -pcp", par.decode_context_parallel_size * par.prefill_context_parallel_size > 1),
        ("--speculative-config", config.speculative_config is not None),
        ("--data-parallel-size > 1 of a MoE model (data-parallel attention)", moe and par.data_parallel_size > 1),
        ("--enable-expert-parallel", par.enable_expert_parallel or bool(par.all2all_backend)),
        (f"--engine {engine.profile.name}", not engine.profile.is_vllm)) if on]
    if unsupported:
        raise GraphDeploymentError(f"{reason}; its deployment from the {SOURCE} does not model "
                                   f"{', '.join(unsupported)}: drop it")


def plan_graph_deployment(config: DeploymentConfig, resolved: ResolvedModel, hw: HardwareSpec, engine: EngineConfig,
                          cfg: dict[str, Any], reason: str) -> Deployment:
    """The `Deployment` of an architecture the accountant lacks: layout and budget from its traced graph
    (`acc` None; `graph` holds what its spec would have said)."""
    from graphsim.cost_model import pipeline_for
    from graphsim.importers.hf import import_hf
    from graphsim.ir import Op
    from graphsim.passes import run_pipeline
    from graphsim.quantization import parse_quantization
    from graphsim.serving.capacity import kv_capacity
    from graphsim.serving.deployment import Deployment
    from graphsim.serving.kv_layout import KvLayoutError

    graph, _ = import_hf(resolved, dtype=config.dtype)
    moe = any(n.op is Op.MOE_EXPERTS for n in graph.nodes)
    _refuse(config, engine, reason, moe)
    if not graph.meta.dynamic_tokens:  # as graph_kv.plan_graph_kv: the graph cannot say what the cache keeps
        raise KvLayoutError(f"{reason}, and its graph traced only at a fixed token count (a sequence mechanism without "
                            "a semantic op in graphsim), so the graph cannot say what its KV cache keeps; "
                            "docs/adding-an-architecture.md")
    tp, e, mem = config.parallel.tensor_parallel_size, config.engine, config.memory
    quant, weight, kv, state = graph_dtypes(config, graph,
                                            None if config.ignore_quant else parse_quantization(resolved.config))
    layout = graph_kv_layout(graph, kv, state, tp, e.block_size, reason)
    layout = replace(layout, notes=(*layout.notes, *graph_blind_spots(resolved.config)))
    kernels = run_pipeline(graph, pipeline_for(engine.profile.fuse_target, tp)).graph
    budget = graph_memory_budget(kernels, cfg, quant, tp, hw.engine_memory_bytes, e.gpu_memory_utilization,
                                 engine.max_num_batched_tokens, engine.max_num_seqs,
                                 activation_gib=mem.activation_gib, overhead_gib=mem.overhead_gib,
                                 cudagraph_gib=mem.cudagraph_gib, available_bytes=e.kv_cache_memory_bytes,
                                 cudagraph_subtracted=engine.profile.subtracts_cudagraph_memory,
                                 non_torch=non_torch_estimate(tp, hw.topology().link))
    cap = kv_capacity(layout, budget.available_bytes, engine.max_model_len, engine.max_in_flight_tokens,
                      engine.profile)
    vocab = int(cfg.get("vocab_size") or 0)
    kv_source = "--kv-dtype" if config.kv_cache_dtype else "checkpoint" if quant and quant.kv_dtype else "parameter dtype"
    precision = (("weight", weight.label), ("weight_source", "--dtype" if config.dtype else f"{SOURCE} (model dtype)"),
                 ("kv", kv.label), ("kv_source", kv_source), ("state", state.label),
                 ("quantization", quant.describe() if quant is not None else "none"))
    return Deployment(config, resolved, hw, None, engine, layout, budget, cap,
                      graph=GraphFacts(reason, vocab, moe, precision))

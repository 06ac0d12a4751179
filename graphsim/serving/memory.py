"""The memory budget for the KV cache on one rank, term by term, as vLLM 0.33.0 computes it.

vllm/v1/worker/gpu_worker.py `Worker.determine_available_memory`:

    requested_memory = ceil(total_memory × gpu_memory_utilization)       (v1/worker/utils.py request_memory)
    available_kv     = requested_memory − non_kv_cache_memory − cudagraph_memory_estimate

with `non_kv_cache_memory = total_consumed + transient_peak_headroom` (vllm/utils/mem_utils.py
`memory_profiling`): the weights, memory held outside torch (cuBLAS/NCCL workspaces, buffers) and the
activation peak of a dummy forward over `max_num_batched_tokens` tokens plus a sampler run over
`max_num_seqs` rows. The CUDA-graph estimate is subtracted by default since vLLM 0.21
(`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`).

graphsim derives the weights from the config (the work accountant's stored bytes, split per rank) and
estimates the activation peak with a stated formula; the runtime overhead and CUDA-graph memory cannot
be derived from a config, so they are stated assumptions. Each can be overridden; the available KV
memory itself can be given directly, as vLLM logs it ("Available KV cache memory: X GiB").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphsim.serving.non_torch import NonTorchEstimate
from graphsim.work.dtypes import Precision
from graphsim.work.specs import (
    CompressedAttention, DenseFfn, GatedDeltaNet, GqaAttention, Mamba1Mixer, Mamba2Mixer, MlaAttention, ModelSpec,
    MoeFfn, NoAttention, NoFfn, ParallelMixers, RecurrentMixer, ShortConv, WeightKind,
)
from graphsim.work.weights import model_weights, stored_bytes_per_copy

GiB = 1 << 30

# non-torch memory where no engine-specific estimate is given (SGLang's and TensorRT-LLM's budgets, serving/engines.py):
# not derivable. vLLM's budget takes the median of public start-up logs per TP group instead (serving/non_torch.py).
ASSUMED_OVERHEAD_GIB = 0.5
ASSUMED_CUDAGRAPH_GIB = 0.5  # CUDA-graph pools captured by default: not derivable from a config
SAMPLER_FP32_COPIES = 2  # fp32 logits and probabilities over (max_num_seqs × vocab) in the sampler dummy run


@dataclass(frozen=True)
class BudgetTerm:
    name: str
    bytes: int
    origin: str  # "derived", "estimated", "assumed" or "given"
    how: str  # the formula or the source


@dataclass(frozen=True)
class MemoryBudget:
    total_bytes: int
    utilization: float
    terms: tuple[BudgetTerm, ...]  # subtracted from the requested memory
    given_available: int | None = None  # --kv-memory: replaces the computation

    @property
    def requested_bytes(self) -> int:
        return math.ceil(self.total_bytes * self.utilization)

    @property
    def available_bytes(self) -> int:
        if self.given_available is not None:
            return self.given_available
        return self.requested_bytes - sum(t.bytes for t in self.terms)

    @property
    def source(self) -> str:
        if self.given_available is not None:
            return "given"
        return "estimated" if any(t.origin in ("estimated", "assumed") for t in self.terms) else "derived"

    def term(self, name: str) -> BudgetTerm:
        return next(t for t in self.terms if t.name == name)

    def to_json(self) -> dict[str, object]:
        return {"total_bytes": self.total_bytes, "gpu_memory_utilization": self.utilization,
                "requested_bytes": self.requested_bytes,
                "terms": [dict(vars(t)) for t in self.terms], "given_available_bytes": self.given_available,
                "available_bytes": self.available_bytes, "available_gib": self.available_bytes / GiB,
                "source": self.source}


# --- weights per rank ----------------------------------------------------------------------------
_REPLICATED_MLA = ("q_a_proj", "kv_a_proj_with_mqa")  # vLLM: ReplicatedLinear / fused_qkv_a_proj


def weight_bytes_per_rank(spec: ModelSpec, precision: Precision, tp: int, expert_ranks: int | None = None) -> int:
    """Stored parameter bytes on one TP rank. `expert_ranks`: the GPUs the routed experts are spread over when it is
    not the TP group (vLLM's data-parallel attention: dp × tp, whole experts under expert parallelism or every
    expert tensor-sharded, the same bytes per GPU either way; FusedMoEParallelConfig.make).

    Matrices, convs, the embedding and the head are split over the ranks (column/row/vocab parallel);
    routers, MLA's down-projections (`q_a_proj`, `kv_a_proj_with_mqa`) and norms, biases and other
    vectors stay whole on every rank (small vectors split in vLLM are counted whole: an upper bound of
    a few MB); GQA's K/V projections keep `max(1, kv_heads // tp)` heads per rank."""
    kv_share: dict[str, float] = {}
    group_share: dict[str, float] = {}  # Mamba2 in_proj / conv1d paths -> their share per rank
    for group in spec.stack.groups():
        attn = group.spec.attn
        if isinstance(attn, ParallelMixers):
            attn = attn.attn  # Falcon-H1: its attention's K/V projections
        if isinstance(attn, GqaAttention):
            kv_share[f"model.layers.{group.first_index}."] = max(1, attn.kv_heads // tp) / attn.kv_heads
        mamba = group.spec.attn.mamba if isinstance(group.spec.attn, ParallelMixers) else group.spec.attn
        if isinstance(mamba, Mamba2Mixer) and mamba.groups_at(tp) != mamba.n_groups:
            # one B/C group replicated on every rank (vLLM MambaMixer2, n_groups == 1): in_proj and conv1d hold
            # (width + 2·(tp − 1)·state) / tp rows each (Mamba2Mixer.groups_at)
            mx = f"model.layers.{group.first_index}.{mamba.module}."
            group_share[mx + "in_proj"] = mamba.in_proj_width_at(tp) / mamba.in_proj_width / tp
            group_share[mx + "conv1d"] = mamba.conv_dim_at(tp) / mamba.conv_dim / tp
    total = 0.0
    for placed in model_weights(spec):
        w = placed.weight
        full = stored_bytes_per_copy(placed, precision) * w.copies * placed.layers
        leaf = placed.path.rsplit(".", 1)[-1]
        if expert_ranks is not None and w.top_k is not None:  # a routed expert's tensor
            share = 1.0 / expert_ranks
        elif w.kind in (WeightKind.NORM, WeightKind.BIAS, WeightKind.VECTOR):
            share = 1.0
        elif w.part == "router" or (not w.quantizable and w.kind is WeightKind.MATRIX and placed.segment != "head"):
            share = 1.0  # routers, shared-expert gates
        elif leaf in _REPLICATED_MLA:
            share = 1.0
        elif placed.path in group_share:
            share = group_share[placed.path]
        elif leaf in ("k_proj", "v_proj"):
            prefix = next((p for p in kv_share if placed.path.startswith(p)), None)
            share = kv_share[prefix] if prefix else 1.0 / tp
        else:
            share = 1.0 / tp
        total += full * share
    return int(round(total))


def rotary_cache_bytes(spec: ModelSpec, cfg: dict, precision: Precision) -> int:
    """vLLM's rotary cos/sin cache: max_position_embeddings × rotary dim × dtype (one per model)."""
    max_pos = cfg.get("max_position_embeddings")
    if not isinstance(max_pos, int):
        return 0
    dims = set()
    factor = float(cfg.get("partial_rotary_factor", 1.0) or 1.0)
    for layer in spec.stack.layers:
        a = layer.attn.attn if isinstance(layer.attn, ParallelMixers) else layer.attn
        if isinstance(a, GqaAttention):
            dims.add(int(a.head_dim * factor))
        elif isinstance(a, MlaAttention):
            dims.add(a.qk_rope_head_dim)
    return int(sum(max_pos * d * precision.weight.bytes_per_element for d in dims))


# --- activation peak -----------------------------------------------------------------------------
def _widest_per_token(spec: ModelSpec, tp: int) -> tuple[int, str]:
    """Widest per-token intermediate of any block on one rank (elements) and which block it is."""
    best, what = 0, ""
    for layer in spec.stack.layers:
        a, f = layer.attn, layer.ffn
        if isinstance(a, GqaAttention):
            heads = a.heads // tp
            kv = max(1, a.kv_heads // tp)
            w = (heads * (2 if a.output_gate else 1) + kv) * a.head_dim + (kv + heads) * a.v_head_dim
            cand = [(w, "attention q/k/v + output")]
        elif isinstance(a, MlaAttention):
            heads = a.heads // tp
            w = heads * (a.qk_head_dim + a.qk_nope_head_dim + 2 * a.v_head_dim) + a.kv_elements_per_token
            cand = [(w, "MLA q + decompressed k/v + output")]
        elif isinstance(a, Mamba2Mixer):
            cand = [((a.in_proj_width_at(tp) + a.intermediate) // tp, "Mamba2 in_proj (z, xBC, dt) + scan output")]
        elif isinstance(a, Mamba1Mixer):
            cand = [((2 * a.intermediate + a.intermediate) // tp, "Mamba in_proj (x, z) + scan output")]
        elif isinstance(a, ShortConv):
            cand = [((3 * a.hidden + a.hidden) // tp, "short-conv in_proj (B, C, x) + conv output")]
        elif isinstance(a, ParallelMixers):
            g, m = a.attn, a.mamba
            w = ((2 * (g.heads // tp) + 2 * max(1, g.kv_heads // tp)) * g.head_dim
                 + (m.in_proj_width_at(tp) + m.intermediate) // tp)
            cand = [(w, "attention q/k/v + output beside Mamba2 in_proj + scan output")]
        elif isinstance(a, CompressedAttention):
            # vLLM shards the query heads over TP (deepseek_v4_attention.py: num_heads already TP-adjusted);
            # the q latent and the shared K=V are whole on every rank
            cand = [(a.q_lora_rank + a.head_dim + 2 * a.heads * a.head_dim // tp, "DeepSeek-V4 q latent + K=V + q and output")]
        elif isinstance(a, NoAttention):
            cand = []
        elif isinstance(a, RecurrentMixer):
            cand = [(a.activation_width // tp, f"{a.mechanism} projections + output")]
        else:
            assert isinstance(a, GatedDeltaNet)
            w = (2 * a.key_dim + 2 * a.value_dim) // tp + a.value_dim // tp
            cand = [(w, "gated-delta-net projections + output")]
        if isinstance(f, DenseFfn):
            cand.append((3 * f.intermediate // tp, "gate_up + activation (3 × intermediate)"))
        elif isinstance(f, NoFfn):
            pass
        else:
            assert isinstance(f, MoeFfn)
            w = f.top_k * 3 * f.expert_intermediate // tp + 3 * f.shared_intermediate // tp + f.experts
            cand.append((w, "routed experts top_k × 3 × expert intermediate (+ shared, router logits)"))
        for w, name in cand:
            if w > best:
                best, what = w, name
    return best, what


def activation_peak(spec: ModelSpec, precision: Precision, tp: int, max_num_batched_tokens: int,
                    max_num_seqs: int) -> BudgetTerm:
    """Estimate of the transient peak of vLLM's profile run.

    forward: T × dtype × (3 × hidden + widest intermediate) — residual, normed input and block output
    plus the widest intermediate of one block, T = max_num_batched_tokens. (Checks against a vLLM
    log for Llama-3.1-8B with T = 20000, github.com/vllm-project/vllm/issues/10517: peak torch memory
    17.06 GiB − 14.99 GiB weights = 2.07 GiB; the formula gives 20000 × 2 × (3·4096 + 3·14336) B =
    2.06 GiB.) sampler: max_num_seqs × vocab × 4 B × 2 (fp32 logits and probabilities) plus the
    hidden states still held. The peak is the larger of the two."""
    dt = precision.weight.bytes_per_element
    widest, what = _widest_per_token(spec, tp)
    forward = max_num_batched_tokens * dt * (3 * spec.hidden + widest)
    sampler = max_num_seqs * spec.vocab * 4 * SAMPLER_FP32_COPIES + max_num_batched_tokens * spec.hidden * dt
    if forward >= sampler:
        how = (f"forward over {max_num_batched_tokens} tokens: T × {dt:g} B × (3 × hidden {spec.hidden} + widest "
               f"{widest}: {what})")
        return BudgetTerm("activation peak", int(forward), "estimated", how)
    how = (f"sampler over {max_num_seqs} rows: rows × vocab {spec.vocab} × 4 B × {SAMPLER_FP32_COPIES} "
           "+ the hidden states held")
    return BudgetTerm("activation peak", int(sampler), "estimated", how)


def _given_or_assumed(name: str, given_gib: float | None, option: str, assumed_gib: float, why: str) -> BudgetTerm:
    """A term the user may give (`option`, in GiB) that is otherwise assumed, for `why`."""
    if given_gib is not None:
        return BudgetTerm(name, int(given_gib * GiB), "given", option)
    return BudgetTerm(name, int(assumed_gib * GiB), "assumed", f"{why} ({option})")


def memory_budget(spec: ModelSpec, cfg: dict, precision: Precision, tp: int, total_bytes: int, utilization: float,
                  max_num_batched_tokens: int, max_num_seqs: int, *, activation_gib: float | None = None,
                  overhead_gib: float | None = None, cudagraph_gib: float | None = None,
                  available_bytes: int | None = None, cudagraph_subtracted: bool = True,
                  expert_ranks: int | None = None, non_torch: NonTorchEstimate | None = None) -> MemoryBudget:
    """The KV budget term by term. `cudagraph_subtracted`: the engine version subtracts its CUDA-graph estimate
    (`cudagraph_memory_estimate`, vllm/v1/worker/gpu_worker.py, first seen in 0.20.0 of the releases inspected,
    absent in 0.14.0); before, graphs are captured after the KV cache inside gpu_memory_utilization's headroom.
    `non_torch`: vLLM's non-torch memory for the deployment (serving/non_torch.py); None: the assumed 0.5 GiB."""
    weights = weight_bytes_per_rank(spec, precision, tp, expert_ranks)
    rot = rotary_cache_bytes(spec, cfg, precision)
    wq = f"quantized: {precision.quant.describe()}" if precision.quant else f"{precision.weight.label}"
    spread = f", routed experts over {expert_ranks} GPUs (data-parallel attention)" if expert_ranks else ""
    terms = [BudgetTerm("weights", weights, "derived", f"work accountant's stored bytes per rank ({wq}), tp={tp}{spread}")]
    if rot:
        terms.append(BudgetTerm("rotary cos/sin cache", rot, "derived",
                                "max_position_embeddings × rotary dim × dtype"))
    peak = activation_peak(spec, precision, tp, max_num_batched_tokens, max_num_seqs) if activation_gib is None else None
    terms += engine_terms(peak, activation_gib, overhead_gib, cudagraph_gib, cudagraph_subtracted, non_torch)
    return MemoryBudget(total_bytes, utilization, tuple(terms), available_bytes)


NON_TORCH = "runtime overhead (non-torch)"


def engine_terms(peak: BudgetTerm | None, activation_gib: float | None, overhead_gib: float | None,
                 cudagraph_gib: float | None, cudagraph_subtracted: bool,
                 non_torch: NonTorchEstimate | None = None) -> list[BudgetTerm]:
    """The budget's terms after weights and rotary cache, whatever gave the model's side: the activation peak
    (`peak`, estimated by the caller, or `--activation-gib`), the runtime overhead (`--overhead-gib`, else
    `non_torch`, else assumed) and the CUDA-graph pools."""
    if activation_gib is not None or peak is None:
        peak = BudgetTerm("activation peak", int((activation_gib or 0.0) * GiB), "given", "--activation-gib")
    terms = [peak]
    if overhead_gib is None and non_torch is not None:
        terms.append(BudgetTerm(NON_TORCH, non_torch.bytes, "estimated", f"{non_torch.how()} (--overhead-gib)"))
    else:
        terms.append(_given_or_assumed(NON_TORCH, overhead_gib, "--overhead-gib", ASSUMED_OVERHEAD_GIB,
                                       "cuBLAS/NCCL workspaces and buffers outside torch; not derivable from the "
                                       "config"))
    if cudagraph_gib is None and not cudagraph_subtracted:
        terms.append(BudgetTerm("CUDA graphs", 0, "derived", "not subtracted by this vLLM version (< 0.20): captured "
                                "after the KV cache, inside gpu_memory_utilization's headroom"))
    else:
        terms.append(_given_or_assumed("CUDA graphs", cudagraph_gib, "--cudagraph-gib", ASSUMED_CUDAGRAPH_GIB,
                                       "captured graph pools, subtracted by default since vLLM 0.20 (0.20.0 has it, "
                                       "0.14.0 not); not derivable from the config"))
    return terms

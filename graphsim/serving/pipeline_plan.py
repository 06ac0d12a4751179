"""A pipeline-parallel deployment's memory and KV cache, stage by stage, as vLLM V1 sizes them.

Each stage's workers load only their layers (vLLM's `make_layers` leaves the others PPMissingLayer), the
embedding on the first stage, the final norm and the LM head on the last (with tied embeddings the last stage
builds the embedding table too, to tie its head to: it holds a second copy). Each worker profiles its own memory
and builds its own KV cache spec over its own layers (vllm/v1/worker/gpu_worker.py
`determine_available_memory`, `get_kv_cache_spec`); the engine then takes, for every worker, the block count its
memory allows and uses the smallest (vllm/v1/core/kv_cache_utils.py `get_kv_cache_configs`: "Change the
num_blocks of each rank to the smallest among all ranks", called from vllm/v1/engine/core.py
`EngineCore._initialize_kv_caches`). So the scheduler's capacity is the tightest stage's.

Stage weights come from the accountant (serving/memory.py `weight_bytes_per_rank`) on the stage's slice of the
layer stack: its layers' bytes, plus the embedding (first stage), plus the final norm and head (last stage).
Stated limits: the activation-peak estimate keeps its sampler term on every stage (vLLM runs the dummy sampler
on the last stage only), so a middle stage's budget can be low by that term when the sampler term is the larger;
a quantization config that names layers by index is matched against the stage's own layer numbering.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from graphsim.costing.cost_model import CostModel
from graphsim.costing.pipeline import (
    PipelinedCostModel, PipelineError, PipelineSplit, partition_from_env, with_pipeline,
)
from graphsim.serving.capacity import KvCapacity, kv_capacity
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import Deployment
from graphsim.serving.kv_layout import KvLayout, kv_layout
from graphsim.serving.memory import BudgetTerm, MemoryBudget, memory_budget, weight_bytes_per_rank
from graphsim.serving.pipeline_engine import PipelineCost
from graphsim.serving.pricing import IterationCost, iteration_cost
from graphsim.work.registry import language_model_config
from graphsim.work.specs import LayerStack, ModelSpec


@dataclass(frozen=True)
class StagePlan:
    stage: int
    layers: tuple[int, int]  # [first, one past the last)
    weight_bytes: int  # per rank of this stage
    layout: KvLayout
    budget: MemoryBudget
    capacity: KvCapacity

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "layers": list(self.layers), "weight_bytes": self.weight_bytes,
                "kv_bytes_per_token_per_rank": self.layout.bytes_per_token,
                "available_bytes": self.budget.available_bytes, "num_blocks": self.capacity.num_blocks,
                "tokens": self.capacity.tokens}


@dataclass(frozen=True)
class PipelinedDeployment(Deployment):
    """A deployment of `pp` stages; `layout`, `budget` and `capacity` are those of the stage with the fewest blocks
    (`binding`), whose block count the engine uses for every stage."""

    split: PipelineSplit | None = None
    stages: tuple[StagePlan, ...] = ()
    binding: int = 0

    @property
    def pp(self) -> int:
        return self.split.pp if self.split is not None else 1

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["pipeline"] = {"pipeline_parallel_size": self.pp, "layers_per_stage": list(self.split.layers) if self.split else [],
                           "binding_stage": self.binding, "num_blocks": self.capacity.num_blocks,
                           "how": "each stage's workers size their own KV cache over their own layers; the engine "
                                  "uses the smallest block count (vllm/v1/core/kv_cache_utils.py get_kv_cache_configs)",
                           "stages": [s.to_json() for s in self.stages]}
        return out


def pp_of(dep: Deployment) -> int:
    return dep.pp if isinstance(dep, PipelinedDeployment) else 1


def stage_spec(spec: ModelSpec, first: int, end: int) -> ModelSpec:
    """The model with only layers [first, end) in its stack."""
    return replace(spec, stack=LayerStack(spec.stack.layers[first:end]))


def stage_weight_bytes(spec: ModelSpec, precision, tp: int, split: PipelineSplit,
                       expert_ranks: int | None = None) -> list[int]:
    """Stored weight bytes per rank of each stage (module docstring): the stage's layers, the embedding on the
    first, the final norm and the head (tied: the embedding table again) on the last."""
    def w(s: ModelSpec) -> int:
        return weight_bytes_per_rank(s, precision, tp, expert_ranks)

    empty = stage_spec(spec, 0, 0)
    norm = w(replace(empty, vocab=0))  # the final norm alone (no layers, no vocab-sized tables)
    emb = w(replace(empty, tie_embeddings=True)) - norm  # the embedding table alone
    head = w(empty) - norm - emb if not spec.tie_embeddings else emb  # the last stage's head (tied: its own table)
    out = []
    for s, (a, b) in enumerate(split.ranges):
        layers = w(replace(stage_spec(spec, a, b), vocab=0)) - norm
        out.append(layers + (emb if s == 0 else 0) + (norm + head if s == split.pp - 1 else 0))
    return out


def plan_stages(dep: Deployment) -> Deployment:
    """`dep` (planned for the whole model) re-planned per pipeline stage; itself when pipeline_parallel_size is 1."""
    par = dep.config.parallel
    pp = getattr(par, "pipeline_parallel_size", 1)
    partition = getattr(par, "pp_layer_partition", None) or partition_from_env()
    if pp == 1 and partition is None:
        return dep
    if dep.config.speculative_config:
        raise PipelineError("speculative decoding with --pipeline-parallel-size > 1 is not modelled; drop one of them")
    from graphsim.serving.dp_attention import coupled

    if getattr(par, "decode_context_parallel_size", 1) > 1:
        raise PipelineError("decode context parallelism with --pipeline-parallel-size > 1 is not modelled; drop one of "
                            "them")
    if coupled(par, dep.accountant.spec):
        raise PipelineError("data-parallel attention (-dp on a MoE model) with --pipeline-parallel-size > 1 is not "
                            "modelled; drop one of them")
    spec, precision, tp = dep.accountant.spec, dep.accountant.precision, dep.tp
    split = PipelineSplit.of(len(spec.stack), pp, tp, dep.hardware.topology().gpus_per_node, partition)
    cfg = language_model_config(dep.model.config)
    e, mem, eng = dep.config.engine, dep.config.memory, dep.engine
    from graphsim.serving.dp_attention import expert_ranks
    from graphsim.serving.non_torch import non_torch_estimate

    ranks = expert_ranks(par, spec)
    weights = stage_weight_bytes(spec, precision, tp, split, ranks)
    plans: list[StagePlan] = []
    for s, (a, b) in enumerate(split.ranges):
        sub = stage_spec(spec, a, b)
        layout = kv_layout(sub, precision, tp, e.block_size)
        if e.block_size is None and layout.block_size != dep.layout.block_size:
            layout = kv_layout(sub, precision, tp, dep.layout.block_size)  # one block size for the engine
        budget = memory_budget(sub, cfg, precision, tp, dep.hardware.engine_memory_bytes, e.gpu_memory_utilization,
                               eng.max_num_batched_tokens, eng.max_num_seqs, expert_ranks=ranks,
                               activation_gib=mem.activation_gib, overhead_gib=mem.overhead_gib,
                               cudagraph_gib=mem.cudagraph_gib, available_bytes=e.kv_cache_memory_bytes,
                               cudagraph_subtracted=eng.profile.subtracts_cudagraph_memory,
                               non_torch=non_torch_estimate(max(tp, ranks or 1), dep.hardware.topology().link))
        terms = tuple(BudgetTerm("weights", weights[s], t.origin, f"{t.how}; pipeline stage {s} of {pp}: layers "
                                 f"{a}–{b - 1}" + (", embedding" if s == 0 else "")
                                 + (", final norm and LM head" if s == pp - 1 else ""))
                      if t.name == "weights" else t for t in budget.terms)
        budget = replace(budget, terms=terms)
        cap = kv_capacity(layout, budget.available_bytes, eng.max_model_len, eng.max_in_flight_tokens, eng.profile)
        plans.append(StagePlan(s, (a, b), weights[s], layout, budget, cap))
    binding = min(range(pp), key=lambda i: (plans[i].capacity.num_blocks, i))
    low = plans[binding]
    # the engine's blocks: the smallest stage's count, on every stage
    base = {f: getattr(dep, f) for f in ("config", "model", "hardware", "acc", "engine")}
    return PipelinedDeployment(**base, layout=low.layout, budget=low.budget, capacity=low.capacity, split=split,
                               stages=tuple(plans), binding=binding)


def pipeline_cost(dep: Deployment, cm: CostModel) -> tuple[PipelineCost, str, int]:
    """The simulator's cost of a pipelined deployment: `cm` (the deployment's cost model, unsplit) split into its
    stages, each stage's tree wrapped for fast pricing (pricing.iteration_cost). Returns (cost, note, kernels)."""
    par = dep.config.parallel
    pc = with_pipeline(cm, par.pipeline_parallel_size, par.pp_layer_partition or partition_from_env())
    assert isinstance(pc, PipelinedCostModel) and pc.split is not None
    e = dep.engine
    stages: list[IterationCost] = [iteration_cost(t, pc.pricer, pc.dtypes, e.max_num_batched_tokens, e.max_num_seqs,
                                                  e.max_model_len) for t in pc.stages]
    note = f"{pc.data_note}; MoE routing: {pc.moe_routing}" if pc.moe_routing else pc.data_note
    note += f"; pipeline: {pc.split.describe()}, up to {pc.split.pp} batches in flight"
    return PipelineCost(stages), note, pc.kernels


def with_pipeline_size(config: DeploymentConfig, pp: int, partition: str | None = None) -> DeploymentConfig:
    """`config` with vLLM's pipeline-parallel size and layer partition set (checked again)."""
    data = config.model_dump()
    data["parallel"]["pipeline_parallel_size"] = pp
    data["parallel"]["pp_layer_partition"] = partition
    return DeploymentConfig.parse(data)


def stage_costs(cm: CostModel, pp: int, max_tokens: int, max_seqs: int, max_context: int,
                partition: str | None = None) -> PipelineCost:
    """`cm` split into `pp` stages, each stage's tree tabulated (pricing.iteration_cost) for the simulator."""
    pc = with_pipeline(cm, pp, partition)
    assert isinstance(pc, PipelinedCostModel)
    return PipelineCost([iteration_cost(t, pc.pricer, pc.dtypes, max_tokens, max_seqs, max_context) for t in pc.stages])

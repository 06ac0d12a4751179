"""A deployment: a `DeploymentConfig` (model + GPU + parallelism + engine settings, config.py) → KV layout,
memory budget, capacity, and the iteration-cost model the simulator prices with.

`plan_deployment` is config-only (no torch); `Deployment.cost_model` / `build_cost` trace the model into a
fused, partitioned graph and compile its cost tree (`graphsim.cost_model.build_cost_model`, the flow of every
command), so they need the `trace` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.costing.cost_model import CostModel
from graphsim.costing.hardware import HardwareSpec, load_hardware
from graphsim.costing.moe_routing import RoutingModel
from graphsim.serving.capacity import CapacityError, KvCapacity, kv_capacity
from graphsim.serving.config import DeploymentConfig, ParallelConfig
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.executor import executor_json, with_executor
from graphsim.serving.host import EngineHost
from graphsim.serving.kv_layout import KvLayout, KvLayoutError, kv_layout, with_mamba_cache_mode
from graphsim.serving.memory import MemoryBudget, memory_budget
from graphsim.serving.mixed_attention import mixed_decode
from graphsim.serving.pricing import IterationCost, TreeCost, iteration_cost
from graphsim.serving.sampler import Sampling, check_engine, random_sampler
from graphsim.serving.simulator import SimulationSetup
from graphsim.vllm_checks import config_heads_refusal
from graphsim.work import accounting
from graphsim.work.api import Accounting
from graphsim.work.registry import language_model_config

if TYPE_CHECKING:
    from graphsim.serving.graph_deployment import GraphFacts


@dataclass(frozen=True)
class Deployment:
    config: DeploymentConfig
    model: ResolvedModel
    hardware: HardwareSpec
    acc: Accounting | None  # None: an architecture the accountant lacks, laid out from its traced graph (`graph`)
    engine: EngineConfig  # the config's engine settings with vLLM's defaults for this GPU and model filled in
    layout: KvLayout
    budget: MemoryBudget
    capacity: KvCapacity
    graph: GraphFacts | None = None  # set when layout and budget come from the traced graph (graph_deployment.py)

    @property
    def accountant(self) -> Accounting:
        """The accountant's model; a deployment laid out from the traced graph has none (one-line error)."""
        if self.acc is None:
            from graphsim.serving.graph_deployment import GraphDeploymentError

            why = self.graph.reason if self.graph is not None else "no work-accountant model"
            raise GraphDeploymentError(f"{why}; this needs the accountant's model spec (docs/serving.md, "
                                       "deployments from the traced graph)")
        return self.acc

    @property
    def vocab(self) -> int:
        return self.graph.vocab if self.graph is not None else self.accountant.spec.vocab

    @property
    def dp_coupled(self) -> bool:
        """vLLM couples the DP ranks (data-parallel attention) of a MoE model with dp > 1."""
        if self.graph is not None:
            return self.config.parallel.data_parallel_size > 1 and self.graph.has_routed_experts
        from graphsim.serving.dp_attention import coupled

        return coupled(self.config.parallel, self.accountant.spec)

    @property
    def precision(self) -> dict[str, str]:
        """Weight / KV / state dtypes and their sources (`Precision.describe`'s keys)."""
        return dict(self.graph.precision) if self.graph is not None else self.accountant.precision.describe()

    @property
    def tp(self) -> int:
        return self.config.parallel.tensor_parallel_size

    @property
    def kv_dtype(self) -> str | None:
        return self.config.kv_cache_dtype

    @property
    def dtype(self) -> str | None:
        return self.config.dtype

    def engine_host(self, cost: IterationCost | None = None, sampling: Sampling | None = None) -> EngineHost:
        """The engine's host time and sampling bound to this deployment's vocabulary and GPU (host.py); with `cost`,
        a vLLM V1 engine's steps above its CUDA-graph capture bound also pay their kernels' dispatch (eager.py), and its
        FlashAttention kernels' KV-cache writes their GPU time (kv_write.py); `sampling` at a temperature above 0:
        the random-sampling kernels (sampler.py; None: greedy)."""
        eager = write = None
        prof = self.engine.profile
        if cost is not None and prof.is_vllm and prof.family in ("v1", "v1-async"):
            from graphsim.costing.collectives import CollectiveSettings
            from graphsim.serving.eager import eager_dispatch
            from graphsim.serving.kv_write import kv_cache_write

            bound = CollectiveSettings.for_engine(self.engine.max_num_seqs, self.engine.max_num_batched_tokens)
            eager = eager_dispatch(cost, bound.max_cudagraph_tokens)
            write = kv_cache_write(cost, self.engine.max_num_batched_tokens)
        bandwidth = self.hardware.memory_bandwidth_bytes_per_s
        dp = self.config.parallel.data_parallel_size
        check_engine(sampling, prof)
        return EngineHost(self.engine.host, self.vocab, bandwidth, eager, write,
                          random_sampler(sampling, self.vocab, bandwidth), self.engine.api_servers(dp) / dp)

    def simulation_setup(self, cost: IterationCost, replicas: int | None = None, router: str = "round-robin",
                         fast_forward: bool = True, host_time: bool = True,
                         sampling: Sampling | None = None) -> SimulationSetup:
        """The simulator's setup: `replicas` engines (default: the config's data_parallel_size × replicas, independent
        engines; a MoE model's coupled DP ranks are `dp_simulation_setup`'s) behind `router`; `host_time`: each
        iteration carries the engine's host time (host.py; False: GPU kernels only); `sampling`: what the requests
        ask the sampler for (sampler.py; None: greedy)."""
        if not self.capacity.fits_one_request:
            raise CapacityError(
                f"the KV cache holds {self.capacity.num_blocks} blocks but one request of max_model_len "
                f"{self.engine.max_model_len} needs {self.capacity.blocks_per_request}; lower --max-model-len or raise "
                "--gpu-memory-utilization (or --kv-memory)")
        if not self.engine.profile.hybrid_kv and self.layout.hybrid:
            raise CapacityError(
                f"{self.engine.profile.name} (V0) pages every layer at full length, which graphsim does not simulate for "
                "sliding-window or linear-attention layers; give --engine vllm==0.10 or newer (graphsim kv shows V0's "
                "capacity)")
        p = self.config.parallel
        parallel = ParallelConfig(tensor_parallel_size=self.tp, pipeline_parallel_size=p.pipeline_parallel_size,
                                  data_parallel_size=p.data_parallel_size * p.replicas if replicas is None else replicas,
                                  prefill_context_parallel_size=p.prefill_context_parallel_size)
        host = self.engine_host(cost, sampling) if host_time else None
        return SimulationSetup(self.engine, self.layout, self.capacity.num_blocks, cost, parallel, router, fast_forward,
                               host=host)

    def cost_model(self, profile: str | None = None, target: str | None = None,
                   moe_routing: RoutingModel | None = None) -> CostModel:
        """The deployment's cost model: its model traced with its dtype, fused for `target`, split over its TP
        ranks (no expert parallelism), priced with its KV dtype on its hardware from `profile` (default: the
        hardware's default profile.db when present). `target` None: the engine's own (vllm, sglang or trtllm).
        Needs the `trace` extra (torch)."""
        from graphsim.cost_model import build_cost_model
        from graphsim.costing.collectives import CollectiveSettings

        # CUDA graphs up to vLLM's capture bound for this engine's max_num_seqs / max_num_batched_tokens
        coll = CollectiveSettings.for_engine(self.engine.max_num_seqs, self.engine.max_num_batched_tokens)
        model = self.model
        if self.config.ignore_quant:  # priced as the accountant stores it: every weight in the model dtype
            from dataclasses import replace

            from graphsim.quantization import without_quantization

            model = replace(model, config=without_quantization(model.config))
        default = True
        if profile is None and not self.engine.profile.is_vllm:  # the engine's own tables, never vLLM's
            from graphsim.serving.engines import engine_profile

            profile = engine_profile(self.hardware.id, self.engine.profile.engine)
            default = False
        return build_cost_model(model, self.hardware, tp=self.tp, dtype=self.dtype, kv_dtype=self.kv_dtype,
                                collectives=coll, profile=profile, default_profile=default,
                                target=target or self.engine.profile.fuse_target, moe_routing=moe_routing,
                                compiled=self.engine.profile.compiled, combo=self.engine.profile.combo_kernels)

    def to_json(self) -> dict[str, Any]:
        e = self.engine
        return {
            "model": self.model.name, "architecture": self.model.architecture, "hardware": self.hardware.id,
            "interconnect": self.hardware.topology().describe(),
            "tp": self.tp, "precision": self.precision,
            "engine": {"max_num_batched_tokens": e.max_num_batched_tokens, "max_num_seqs": e.max_num_seqs,
                       "max_model_len": e.max_model_len, "max_model_len_source": e.max_model_len_source,
                       "block_size": self.layout.block_size,
                       "enable_prefix_caching": e.enable_prefix_caching,
                       "prefix_caching_simulated": e.enable_prefix_caching and self.layout.prefix_cacheable,
                       "enable_chunked_prefill": e.enable_chunked_prefill,
                       "max_in_flight_tokens": e.max_in_flight_tokens,
                       "gpu_memory_utilization": e.gpu_memory_utilization,
                       "async_scheduling": e.async_scheduling,
                       "api_server_count": e.api_servers(self.config.parallel.data_parallel_size),
                       "profile": e.profile.to_json(),
                       "host": e.host.to_json(), "executor": executor_json(e.executor_step_us)},
            "layout": {
                "source": self.layout.source,
                "bytes_per_token_per_rank": self.layout.bytes_per_token,
                "state_bytes_per_request_per_rank": self.layout.state_bytes_per_request,
                "parts": [{"kind": p.layer.kind.value, "label": p.layer.label, "layers": p.layers,
                           "bytes_per_token_per_layer": p.layer.bytes_per_token,
                           "bytes_per_token": p.bytes_per_token, "state_bytes": p.state_bytes,
                           "window": p.layer.window, "detail": p.layer.detail} for p in self.layout.parts()],
                "groups": [{"kind": g.kind.value, "layers": g.layers, "real_layers": g.real_layers,
                            "block_size": g.block_size, "page_bytes": g.page_bytes, "window": g.window}
                           for g in self.layout.groups],
                "bytes_per_block": self.layout.bytes_per_block, "notes": list(self.layout.notes)},
            "memory": self.budget.to_json(),
            "capacity": self.capacity.to_json(),
        }


def plan_deployment(config: DeploymentConfig, *, model: ResolvedModel | None = None,
                    hardware: HardwareSpec | None = None) -> Deployment:
    """KV layout, memory budget and capacity of `config`. `model` / `hardware`: `config.model` /
    `config.hardware` already resolved (a caller planning many deployments of one model resolves it once)."""
    resolved = model or resolve_model(config.model)
    hw = hardware or config.interconnect.apply(load_hardware(config.hardware))
    # a multimodal wrapper's context length, rotary cache etc. are its language model's (text_config)
    cfg = language_model_config(resolved.config)
    tp, mem, e = config.parallel.tensor_parallel_size, config.memory, config.engine
    if refusal := config_heads_refusal(cfg, tp, e.profile.engine):  # vLLM checks it first (as predict says it)
        raise KvLayoutError(refusal)
    from graphsim.serving.graph_kv import accountant_lacks

    reason = accountant_lacks(resolved.config)
    if reason is not None:  # no accountant model: layout and budget from the traced graph (graph_deployment.py)
        from graphsim.serving.graph_deployment import plan_graph_deployment

        return plan_graph_deployment(config, resolved, hw, with_executor(e.resolve(hw, cfg), hw, _world(config)), cfg,
                                     reason)
    acc = accounting(resolved.config, dtype=config.dtype, kv_dtype=config.kv_cache_dtype, state_dtype=config.mamba_ssm_cache_dtype,
                     ignore_quant=config.ignore_quant)
    eng = with_executor(e.resolve(hw, cfg), hw, _world(config))  # a Ray round trip a step across nodes (executor.py)
    if not eng.profile.is_vllm and (config.parallel.pipeline_parallel_size > 1 or config.parallel.pp_layer_partition):
        from graphsim.costing.pipeline import PipelineError

        raise PipelineError(f"--pipeline-parallel-size is modelled for vLLM's engine only, not {eng.profile.name}")
    if not eng.profile.is_vllm:  # SGLang / TensorRT-LLM: their own page size and KV budget (serving/engines.py)
        return _plan_other_engine(config, resolved, hw, acc, eng, cfg)
    layout = kv_layout(acc.spec, acc.precision, tp, e.block_size)
    if eng.enable_prefix_caching and eng.profile.mamba_align_with_prefix_caching and layout.attention_and_state:
        layout = with_mamba_cache_mode(layout, "align")  # hybrid: the state pages a request holds
    from graphsim.serving.dp_attention import expert_ranks
    from graphsim.serving.non_torch import non_torch_estimate

    experts_over = expert_ranks(config.parallel, acc.spec)
    budget = memory_budget(acc.spec, cfg, acc.precision, tp, hw.engine_memory_bytes, e.gpu_memory_utilization,
                           eng.max_num_batched_tokens, eng.max_num_seqs, expert_ranks=experts_over,
                           activation_gib=mem.activation_gib,
                           overhead_gib=mem.overhead_gib, cudagraph_gib=mem.cudagraph_gib,
                           available_bytes=e.kv_cache_memory_bytes,
                           cudagraph_subtracted=eng.profile.subtracts_cudagraph_memory,
                           non_torch=non_torch_estimate(max(tp, experts_over or 1), hw.topology().link))
    cap = kv_capacity(layout, budget.available_bytes, eng.max_model_len, eng.max_in_flight_tokens, eng.profile)
    if config.parallel.decode_context_parallel_size * config.parallel.prefill_context_parallel_size > 1:
        from graphsim.serving.context_parallel import kv_copies, sharded_capacity  # the KV over CP ranks

        cap = sharded_capacity(cap, config.parallel, tp, kv_copies(acc.spec, acc.precision, tp))
    dep = Deployment(config, resolved, hw, acc, eng, layout, budget, cap)
    if config.parallel.pipeline_parallel_size > 1 or config.parallel.pp_layer_partition:  # per stage (pipeline_plan.py)
        from graphsim.serving.pipeline_plan import plan_stages

        dep = plan_stages(dep)
    if config.speculative_config:  # the draft's KV layers and weights (spec_deployment.py)
        from graphsim.serving.spec_deployment import deployment_speculation, with_speculation

        spec = deployment_speculation(dep)
        assert spec is not None
        dep = with_speculation(dep, spec)
    return dep


def _world(config: DeploymentConfig) -> int:
    """GPUs of one engine's TP × PP group (the ranks its executor drives)."""
    return config.parallel.tensor_parallel_size * config.parallel.pipeline_parallel_size


def _plan_other_engine(config: DeploymentConfig, resolved: ResolvedModel, hw: HardwareSpec, acc: Accounting,
                       eng: EngineConfig, cfg: dict) -> Deployment:
    """SGLang's / TensorRT-LLM's page size, KV budget and (SGLang) max_running_requests from the KV tokens."""
    from graphsim.serving.dp_attention import expert_ranks
    from graphsim.serving.engine_config import EngineConfigError
    from graphsim.serving.engines import engine_block_size, engine_memory_budget, sglang_max_running_requests

    tp, mem, e, par = config.parallel.tensor_parallel_size, config.memory, config.engine, config.parallel
    engine = eng.profile.engine
    if config.speculative_config or par.decode_context_parallel_size * par.prefill_context_parallel_size > 1:
        raise EngineConfigError(f"speculative decoding and context parallelism are modelled for vLLM's engine only, "
                                f"not {eng.profile.name}; drop --speculative-config / -dcp / -pcp or use --engine vllm")
    layout = kv_layout(acc.spec, acc.precision, tp, e.block_size or engine_block_size(engine))
    budget = engine_memory_budget(engine, acc.spec, cfg, acc.precision, tp, hw.memory_bytes,
                                  eng.max_num_batched_tokens, eng.max_num_seqs, activation_gib=mem.activation_gib,
                                  overhead_gib=mem.overhead_gib, cudagraph_gib=mem.cudagraph_gib,
                                  available_bytes=e.kv_cache_memory_bytes,
                                  expert_ranks=expert_ranks(par, acc.spec),
                                  fraction=e.mem_fraction_static if engine == "sglang" else e.free_gpu_memory_fraction)
    cap = kv_capacity(layout, budget.available_bytes, eng.max_model_len, eng.max_in_flight_tokens, eng.profile)
    if engine == "sglang" and e.max_num_seqs is None:
        eng = eng.with_(max_num_seqs=sglang_max_running_requests(cap.tokens, eng.max_model_len))
    return Deployment(config, resolved, hw, acc, eng, layout, budget, cap)


def build_cost(dep: Deployment, profile: str | None = None, target: str | None = None,
               moe_routing: RoutingModel | None = None) -> tuple[IterationCost, str, int]:
    """Trace, fuse and partition the model (`graphsim.cost_model.build_cost_model`), and wrap its cost tree for
    the simulator. Returns (cost, what the numbers rest on, kernels in the tree)."""
    if dep.config.speculative_config:  # target verification + draft passes (spec_deployment.py)
        from graphsim.serving.spec_deployment import deployment_speculation, speculative_cost

        spec = deployment_speculation(dep)
        assert spec is not None
        return speculative_cost(dep, spec, profile, target or "vllm", moe_routing)
    cm = dep.cost_model(profile, target, moe_routing)
    cp = dep.config.parallel
    if cp.decode_context_parallel_size * cp.prefill_context_parallel_size > 1:  # ring / sharded attention
        from graphsim.costing.context_parallel import ContextParallel, with_context_parallel

        cm = with_context_parallel(cm, ContextParallel(cp.prefill_context_parallel_size, cp.decode_context_parallel_size))
    if dep.config.parallel.pipeline_parallel_size > 1 or dep.config.parallel.pp_layer_partition:
        from graphsim.serving.pipeline_plan import pipeline_cost

        return pipeline_cost(dep, cm)  # one cost per stage; the simulator runs pp batches at once
    e = dep.engine
    cost = iteration_cost(cm.tree, cm.pricer, cm.dtypes, e.max_num_batched_tokens, e.max_num_seqs, e.max_model_len)
    if isinstance(cost, TreeCost):  # vLLM V1's FlashAttention-2: decodes unpacked in a step with a prefill chunk
        cost.mixed = mixed_decode(cm.tree, e.profile, dep.hardware, cm.dtypes.kv.element_bytes)
    note = f"{cm.data_note}; MoE routing: {cm.moe_routing}" if cm.moe_routing else cm.data_note
    return cost, note, cm.kernels

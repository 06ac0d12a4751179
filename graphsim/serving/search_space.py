"""The deployments `graphsim search` considers, and the memory check that prunes those that cannot run.

A candidate is one *unit* — an aggregated instance (TP × EP ranks, chunked prefill), or an xPyD set of
x prefill and y decode instances with their own TP/EP and batch settings — copied `replicas` times over
the GPU budget, serving a closed loop of clients that keeps every decode slot busy (`max_num_seqs`
clients per (decode) instance). Per-GPU figures are the unit's figures over the unit's GPUs; copies of a
unit are independent, so they do not change them.

Memory comes from the KV-capacity model (`plan_deployment`: weights per rank, activation peak, runtime
overhead and CUDA graphs subtracted from `gpu_memory_utilization × memory`, the rest paged in blocks).
A pool is pruned when nothing is left for KV, when one `max_model_len` request does not fit (vLLM
refuses to start), when its KV cache cannot hold `max_num_seqs` requests of `isl + osl` tokens (they
would queue or be preempted: the same deployment with `max_num_seqs` at the KV limit is enumerated
instead), or when `max_num_batched_tokens < max_num_seqs` (vLLM refuses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from graphsim.catalog import ResolvedModel
from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.engine_config import batch_defaults
from graphsim.serving.metrics import SLO
from graphsim.serving.requests import Lengths
from graphsim.validation import Strict, validate

GiB = 1 << 30
DEFAULT_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DEFAULT_BATCHED_TOKENS = (2048, 4096, 8192, 16384)
DEFAULT_PREFILL_BATCHED_TOKENS = (4096, 8192, 16384)


class SearchSpecError(GraphsimError):
    pass


_SIZE = Annotated[int, Field(ge=1, le=1 << 31)]
_SIZES = Annotated[tuple[_SIZE, ...], Field(min_length=1)]
_SPEC_FIX = "see SearchSpec in graphsim/serving/search_space.py"


class SearchSpec(Strict):
    """What `graphsim search` explores. `base` is the deployment every candidate starts from (model, GPU,
    dtypes, `max_model_len`, `gpu_memory_utilization`, …); the search sets each candidate's
    `tensor_parallel_size`, `max_num_seqs` and `max_num_batched_tokens` from the axes below and its replicas
    from the GPU budget. Ranges are checked on construction (pydantic), every bad field at once; `parse` turns
    a problem into a one-line SearchSpecError."""

    base: DeploymentConfig
    gpus: int = Field(default=8, ge=1, le=1 << 20)
    isl: Lengths = Field(default_factory=lambda: Lengths(4000, 4000))
    osl: Lengths = Field(default_factory=lambda: Lengths(1000, 1000))
    slo: SLO = Field(default_factory=SLO)
    tp: _SIZES | None = None  # None: powers of two up to min(gpus, GPUs per node)
    # pipeline-parallel sizes of aggregated candidates (vLLM's --pipeline-parallel-size, serving/pipeline_plan.py).
    # None: 1, and the powers of two ≥ 2 whose tp × pp spans more than one node (vLLM's guidance: tensor parallel
    # inside a node, pipeline parallel across nodes, https://docs.vllm.ai/en/v0.8.3/serving/distributed_serving.html
    # "How to decide the distributed inference strategy?"); give (1,) to explore none.
    pp: _SIZES | None = None
    # context-parallel sizes (vLLM's --prefill-/--decode-context-parallel-size; cp_search.py, which states the
    # defaults): pcp for aggregated instances and prefill pools, dcp for aggregated instances and decode pools.
    # None: pcp 1 unless one prompt cannot be prefilled within the TTFT SLO on one GPU at its peak; dcp 1 and the
    # sizes that remove KV duplicated over the TP group
    pcp: _SIZES | None = None
    dcp: _SIZES | None = None
    # afd: afd_search.py; dp: data-parallel attention + expert parallel, MoE models (dp_search.py)
    modes: Annotated[tuple[Literal["agg", "disagg", "afd", "dp"], ...], Field(min_length=1)] = ("agg", "disagg")
    max_num_seqs: _SIZES = DEFAULT_SEQS
    max_num_batched_tokens: _SIZES = DEFAULT_BATCHED_TOKENS
    prefill_batched_tokens: _SIZES = DEFAULT_PREFILL_BATCHED_TOKENS
    decode_batched_tokens: _SIZE | None = None  # None: the engine default (raised to max_num_seqs)
    profile: str | None = None
    kv_link_gbps: float | None = Field(default=None, gt=0, le=1e6)
    kv_link_latency_us: float | None = Field(default=None, ge=0, le=1e6)
    verify: int = Field(default=4, ge=0, le=1 << 20)  # simulate the best this many under the SLOs (and more while they fail)
    seed: int = 0
    refine: int = Field(default=0, ge=0, le=1 << 20)  # bisect max_num_seqs of the best N to the SLO boundary (search_load.py)
    moe_routing: str | None = None  # the MoE routing model, as --moe-routing spells it (costing/moe_routing.py; None: its default)
    # speculative decoding's acceptance per position when `base.speculative_config` is set (None: the default rate)
    spec_acceptance: tuple[Annotated[float, Field(ge=0, le=1)], ...] | None = None

    @field_validator("moe_routing")
    @classmethod
    def _routing(cls, value: str | None) -> str | None:
        from graphsim.costing.moe_routing import MoeRoutingError, parse_routing

        try:
            parse_routing(value)
        except MoeRoutingError as e:
            raise ValueError(str(e)) from None
        return value

    @classmethod
    def parse(cls, data: Any) -> SearchSpec:
        """`data` checked field by field (SearchSpecError naming every bad field otherwise)."""
        try:
            return validate(cls, data, "search spec", _SPEC_FIX)
        except ValueError as e:
            raise SearchSpecError(str(e)) from None

    def check(self) -> SearchSpec:
        """The spec checked again (a copy made with `model_copy(update=…)` skips validation)."""
        return self.parse({k: getattr(self, k) for k in type(self).model_fields})


@dataclass(frozen=True)
class PoolConfig:
    """Instances of one engine configuration: TP × EP ranks each."""

    role: str  # "agg", "prefill" or "decode"
    tp: int
    ep: int
    instances: int
    max_num_seqs: int
    max_num_batched_tokens: int
    pp: int = 1  # pipeline stages of an instance (tp GPUs each)
    dp: int = 1  # vLLM's --data-parallel-size of an instance: lockstep DP ranks of tp GPUs each (dp_search.py)
    pcp: int = 1  # vLLM's --prefill-context-parallel-size: pcp × the GPUs of an instance (cp_search.py)
    dcp: int = 1  # vLLM's --decode-context-parallel-size: inside the TP group, no extra GPUs

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.pcp * self.instances * self.dp

    @property
    def cp(self) -> str:
        """' pcp2' / ' dcp4' for a label ('' without context parallel)."""
        return (f" pcp{self.pcp}" if self.pcp > 1 else "") + (f" dcp{self.dcp}" if self.dcp > 1 else "")

    def label(self) -> str:
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        if self.dp > 1:
            return f"dp{self.dp} tp{self.tp}{ep}, seqs {self.max_num_seqs}, batch {self.max_num_batched_tokens} a rank"
        if self.role == "prefill":
            return f"{self.instances}P tp{self.tp}{self.cp}{ep} (batch {self.max_num_batched_tokens})"
        if self.role == "decode":
            return f"{self.instances}D tp{self.tp}{self.cp}{ep} (seqs {self.max_num_seqs})"
        if self.role in ("attention", "ffn"):  # an AFD unit's pools (afd_search.py)
            dp = f"{self.instances}×" if self.instances > 1 else ""
            return f"{'A' if self.role == 'attention' else 'F'} {dp}tp{self.tp}{ep}"
        pp = f" pp{self.pp}" if self.pp > 1 else ""
        return f"tp{self.tp}{pp}{self.cp}{ep}, seqs {self.max_num_seqs}, batch {self.max_num_batched_tokens}"


@dataclass(frozen=True)
class PoolMemory:
    """What the KV-capacity model says about one instance of a pool (per rank)."""

    weights_bytes: int
    available_kv_bytes: int
    num_blocks: int
    blocks_per_request: int  # one request of isl + osl tokens
    kv_requests: int  # requests of isl + osl tokens the KV cache holds

    def to_json(self) -> dict[str, Any]:
        return {"weights_gib": self.weights_bytes / GiB, "available_kv_gib": self.available_kv_bytes / GiB,
                "num_blocks": self.num_blocks, "blocks_per_request": self.blocks_per_request,
                "kv_requests": self.kv_requests}


@dataclass(frozen=True)
class Candidate:
    id: int
    mode: str  # "agg" or "disagg"
    pools: tuple[PoolConfig, ...]  # agg: (instance,), disagg: (prefill, decode)
    replicas: int  # copies of the unit in the GPU budget
    clients: int  # closed-loop clients per unit
    memory: tuple[PoolMemory, ...] = field(compare=False, default=())
    micro_batches: int = 0  # an AFD unit's ping-pong micro-batches (afd_search.py); 0 for the other modes

    @property
    def unit_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def gpus_used(self) -> int:
        return self.unit_gpus * self.replicas

    @property
    def partitions(self) -> tuple[tuple[int, int, int, int], ...]:
        return tuple(sorted({(p.tp, p.ep, p.pcp, p.dcp) for p in self.pools}))

    def label(self) -> str:
        rep = f" ×{self.replicas}" if self.replicas > 1 else ""
        if self.mode == "agg":
            return f"agg {self.pools[0].label()}{rep}"
        if self.mode == "dp":  # the pool's label starts with its dp size
            return f"{self.pools[0].label()}{rep}"
        if self.mode == "afd":
            a, f = self.pools
            return (f"afd {a.label()} + {f.label()}, m={self.micro_batches}, seqs {a.max_num_seqs}, "
                    f"batch {a.max_num_batched_tokens}{rep}")
        return f"disagg {self.pools[0].label()} + {self.pools[1].label()}{rep}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "mode": self.mode, "label": self.label(), "replicas": self.replicas,
                "unit_gpus": self.unit_gpus, "gpus_used": self.gpus_used, "clients_per_unit": self.clients,
                "pools": [{**vars(p), "gpus": p.gpus} for p in self.pools],
                "memory": [m.to_json() for m in self.memory],
                **({"micro_batches": self.micro_batches} if self.mode == "afd" else {})}


@dataclass(frozen=True)
class Pruned:
    label: str
    reason: str
    kind: str  # "memory" or "engine"

    def to_json(self) -> dict[str, str]:
        return {"label": self.label, "reason": self.reason, "kind": self.kind}


def _pow2_upto(n: int) -> tuple[int, ...]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return tuple(out)


def _experts(cfg: dict) -> int:
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        v = cfg.get(key) or (cfg.get("text_config") or {}).get(key)
        if isinstance(v, int) and v > 1:
            return v
    return 0


class _Planner:
    """`plan_deployment` per (tp, batch settings), memoised; errors become prune reasons."""

    def __init__(self, spec: SearchSpec, model: ResolvedModel, hw: HardwareSpec) -> None:
        self.spec, self.model, self.hardware = spec, model, hw
        self.default_batched_tokens, self.default_seqs = batch_defaults(hw, spec.base.engine.profile)
        self._plans: dict[tuple[int, ...], Any] = {}
        self.request_tokens = spec.isl.hi + spec.osl.hi

    def plan(self, tp: int, mnbt: int, seqs: int, pp: int = 1, pcp: int = 1, dcp: int = 1):
        key = (tp, mnbt, seqs) if (pp, pcp, dcp) == (1, 1, 1) else (tp, mnbt, seqs, pp, pcp, dcp)
        if key not in self._plans:
            from graphsim.serving.deployment import plan_deployment

            try:
                config = self.spec.base.derive(tensor_parallel_size=tp, max_num_batched_tokens=mnbt, max_num_seqs=seqs)
                if pp > 1:  # each stage sized as vLLM's workers size it (pipeline_plan.py)
                    from graphsim.serving.pipeline_plan import with_pipeline_size

                    config = with_pipeline_size(config, pp)
                if (pcp, dcp) != (1, 1):  # the pool's own sizes (cp_search.py; 1, 1: the base's)
                    from graphsim.serving.context_parallel import with_context_parallel

                    config = with_context_parallel(config, pcp, dcp)
                self._plans[key] = plan_deployment(config, model=self.model, hardware=self.hardware)
            except GraphsimError as e:
                self._plans[key] = e
        return self._plans[key]

    def memory(self, dep, seqs: int | None = None, per: str = "") -> tuple[PoolMemory | None, str]:
        """(memory, '') if the instance can start (and, given `seqs`, its KV cache holds max_num_seqs requests),
        else (None or memory, why not); `per` qualifies the count (" a rank")."""
        mem, why = self._memory(dep)
        if not why and mem is not None and seqs is not None and seqs > mem.kv_requests:
            why = (f"KV cache holds {mem.kv_requests:,} requests of {self.request_tokens:,} tokens{per}, fewer than "
                   f"max_num_seqs {seqs}")
        return mem, why

    def _memory(self, dep) -> tuple[PoolMemory | None, str]:
        cap, budget = dep.capacity, dep.budget
        weights = budget.term("weights").bytes if any(t.name == "weights" for t in budget.terms) else 0
        if cap.available_bytes <= 0:
            return None, (f"weights {weights / GiB:,.1f} GiB per rank and the rest leave no KV memory on a "
                          f"{dep.hardware.memory_bytes / GiB:,.0f} GiB GPU at tp{dep.tp}")
        per_req = dep.layout.admission_blocks(self.request_tokens, dep.engine.max_in_flight_tokens)
        mem = PoolMemory(weights, cap.available_bytes, cap.num_blocks, per_req,
                         cap.num_blocks // per_req if per_req else 0)
        if not cap.fits_one_request:
            return mem, (f"KV cache {cap.num_blocks:,} blocks; one max_model_len {dep.engine.max_model_len:,} request "
                         f"needs {cap.blocks_per_request:,} (vLLM refuses to start)")
        if mem.kv_requests < 1:
            return mem, f"KV cache holds no request of {self.request_tokens:,} tokens"
        return mem, ""


def pp_options(spec: SearchSpec, hw: HardwareSpec, tp: int) -> tuple[int, ...]:
    """Pipeline-parallel sizes of aggregated candidates at `tp` (SearchSpec.pp), within the GPU budget."""
    if spec.pp is not None:
        return tuple(p for p in sorted(set(spec.pp)) if tp * p <= spec.gpus)
    return (1, *(p for p in _pow2_upto(spec.gpus // tp) if p > 1 and tp * p > max(hw.devices_per_node, 1)))


def tp_options(spec: SearchSpec, hw: HardwareSpec) -> tuple[int, ...]:
    if spec.tp is not None:
        return tuple(sorted(set(spec.tp)))
    return _pow2_upto(min(spec.gpus, max(hw.devices_per_node, 1)))


def _check_request_fits(spec: SearchSpec, model: ResolvedModel) -> None:
    """The longest request (isl + osl) within max_model_len: vLLM's OpenAI server refuses a request whose prompt
    plus max_tokens exceeds it (vllm 0.10.1 entrypoints/openai/serving_engine.py `_validate_input`), so a search
    over such requests would have no completed request to measure."""
    from graphsim.serving.engine_config import max_model_len_and_source

    mml, _ = max_model_len_and_source(spec.base.engine.max_model_len, model.config, spec.base.engine.profile)
    longest = spec.isl.hi + spec.osl.hi
    if longest > mml:
        raise SearchSpecError(f"requests of up to {longest:,} tokens (--isl {spec.isl.hi:,} + --osl {spec.osl.hi:,}) "
                              f"exceed max_model_len {mml:,} of {model.name}; lower --isl/--osl or raise "
                              "--max-model-len")


def enumerate_candidates(spec: SearchSpec, model: ResolvedModel, hw: HardwareSpec
                         ) -> tuple[list[Candidate], list[Pruned]]:
    """Every deployment of the search space that fits, and every one that was pruned, with the reason."""
    spec.check()
    _check_request_fits(spec, model)
    planner = _Planner(spec, model, hw)
    cands: list[Candidate] = []
    pruned: list[Pruned] = []
    experts = _experts(model.config)
    tps = [t for t in tp_options(spec, hw) if t <= spec.gpus]
    if not tps:
        raise SearchSpecError(f"no TP size in {spec.tp} fits in {spec.gpus} GPUs")
    parts = [(t, e) for t in tps for e in ((1, t) if experts and t > 1 and experts % t == 0 else (1,))]

    def add(mode: str, pools: tuple[PoolConfig, ...], clients: int, memory: tuple[PoolMemory, ...],
            micro_batches: int = 0) -> None:
        unit = sum(p.gpus for p in pools)
        cands.append(Candidate(len(cands), mode, pools, spec.gpus // unit, clients, memory, micro_batches))

    def seqs_options(tp: int, mnbt: int, role: str, label, pp: int = 1, pcp: int = 1,
                     dcp: int = 1) -> list[tuple[int, PoolMemory]]:
        """max_num_seqs values that fit, with the pool's memory; the KV limit itself is added."""
        out: list[tuple[int, PoolMemory]] = []
        values = sorted(set(spec.max_num_seqs))
        limit = None
        for seqs in values:
            eff_mnbt = max(mnbt, seqs) if role == "decode" else mnbt
            dep = planner.plan(tp, eff_mnbt, seqs, pp, pcp, dcp)
            if isinstance(dep, GraphsimError):
                pruned.append(Pruned(label(seqs, eff_mnbt), str(dep), "engine"))
                continue
            mem, why = planner.memory(dep)
            if why:
                pruned.append(Pruned(label(seqs, eff_mnbt), why, "memory"))
                continue
            assert mem is not None
            if eff_mnbt < seqs:
                pruned.append(Pruned(label(seqs, eff_mnbt), f"max_num_batched_tokens {eff_mnbt} < max_num_seqs {seqs} "
                                     "(vLLM refuses)", "engine"))
                continue
            if seqs > mem.kv_requests:
                limit = mem.kv_requests if limit is None else limit
                pruned.append(Pruned(label(seqs, eff_mnbt), f"KV cache holds {mem.kv_requests:,} requests of "
                                     f"{planner.request_tokens:,} tokens, fewer than max_num_seqs {seqs}", "memory"))
                continue
            out.append((seqs, mem))
        if limit is not None and limit not in values and limit >= 1:
            eff_mnbt = max(mnbt, limit) if role == "decode" else mnbt
            dep = planner.plan(tp, eff_mnbt, limit, pp, pcp, dcp)
            if not isinstance(dep, GraphsimError):
                mem, why = planner.memory(dep)
                if not why and mem is not None and limit <= mem.kv_requests and eff_mnbt >= limit:
                    out.append((limit, mem))
        return out

    from graphsim.serving.cp_search import CpPlan

    cp = CpPlan.make(spec, model, hw)  # context-parallel sizes per pool (cp_search.py)
    most = max(spec.max_num_seqs)

    def kv_bound(tp: int) -> bool:
        dep = planner.plan(tp, max(max(spec.max_num_batched_tokens), most), most)
        if isinstance(dep, GraphsimError):
            return False
        mem, _ = planner.memory(dep)
        return mem is not None and mem.kv_requests < most
    cp.kv_bound = kv_bound

    def cp_options(tp: int, ep: int, pp: int, role: str) -> list[tuple[int, int]]:
        ok, refused = cp.options(tp, pp, role)
        for pcp, dcp, why in refused:
            lab = f"{role} tp{tp}{f' pp{pp}' if pp > 1 else ''}{PoolConfig(role, tp, ep, 1, 1, 1, pcp=pcp, dcp=dcp).cp}"
            if not any(p.label == lab and p.reason == why for p in pruned):
                pruned.append(Pruned(lab, why, "engine"))
        return ok

    if "agg" in spec.modes:
        for tp, ep in parts:
            for pp in pp_options(spec, hw, tp):
                for pcp, dcp in cp_options(tp, ep, pp, "agg"):
                    for mnbt in sorted(set(spec.max_num_batched_tokens)):
                        def agg_lab(seqs, m, tp=tp, ep=ep, pp=pp, pcp=pcp, dcp=dcp):
                            return f"agg {PoolConfig('agg', tp, ep, 1, seqs, m, pp, pcp=pcp, dcp=dcp).label()}"
                        for seqs, mem in seqs_options(tp, mnbt, "agg", agg_lab, pp, pcp, dcp):
                            add("agg", (PoolConfig("agg", tp, ep, 1, seqs, mnbt, pp, pcp=pcp, dcp=dcp),), seqs, (mem,))

    if "disagg" in spec.modes and spec.gpus >= 2:
        # prefill pools: one per (tp, ep, batch); their own max_num_seqs stays the engine default
        prefill: list[tuple[int, int, int, int, PoolMemory]] = []
        for tp, ep, pcp in [(t, e, p) for t, e in parts for p, _ in cp_options(t, e, 1, "prefill")]:
            for mnbt in sorted(set(spec.prefill_batched_tokens)):
                dep = planner.plan(tp, mnbt, planner.default_seqs, 1, pcp)
                label = f"prefill tp{tp}{f' pcp{pcp}' if pcp > 1 else ''}{f' ep{ep}' if ep > 1 else ''} (batch {mnbt})"
                if isinstance(dep, GraphsimError):
                    pruned.append(Pruned(label, str(dep), "engine"))
                    continue
                mem, why = planner.memory(dep)
                in_flight = dep.engine.max_concurrent_batches * -(-mnbt // max(spec.isl.lo, 1)) + 1
                prompt_blocks = dep.layout.admission_blocks(spec.isl.hi, dep.engine.max_in_flight_tokens)
                if not why and mem is not None and in_flight * prompt_blocks > mem.num_blocks:
                    why = f"KV cache holds fewer than the {in_flight} prompts two batches of {mnbt} tokens hold"
                if why:
                    pruned.append(Pruned(label, why, "memory"))
                    continue
                assert mem is not None
                prefill.append((tp, ep, pcp, mnbt, mem))
        decode: list[tuple[int, int, int, int, int, PoolMemory]] = []
        dec_default = spec.decode_batched_tokens
        for tp, ep, dcp in [(t, e, d) for t, e in parts for _, d in cp_options(t, e, 1, "decode")]:
            mnbt = dec_default or planner.default_batched_tokens

            def lab(seqs, m, tp=tp, ep=ep, dcp=dcp):
                return f"decode {PoolConfig('decode', tp, ep, 1, seqs, m, dcp=dcp).label()}"
            for seqs, mem in seqs_options(tp, mnbt, "decode", lab, 1, 1, dcp):
                decode.append((tp, ep, dcp, seqs, max(mnbt, seqs), mem))
        for tp_p, ep_p, pcp_p, mnbt_p, mem_p in prefill:
            for x in range(1, spec.gpus // (tp_p * pcp_p) + 1):
                left = spec.gpus - x * tp_p * pcp_p
                for tp_d, ep_d, dcp_d, seqs, mnbt_d, mem_d in decode:
                    for y in range(1, left // tp_d + 1):
                        pools = (PoolConfig("prefill", tp_p, ep_p, x, planner.default_seqs, mnbt_p, pcp=pcp_p),
                                 PoolConfig("decode", tp_d, ep_d, y, seqs, mnbt_d, dcp=dcp_d))
                        add("disagg", pools, y * seqs, (mem_p, mem_d))
    if "dp" in spec.modes and experts and spec.gpus >= 2:  # data-parallel attention + expert parallel instances
        from graphsim.serving.dp_search import enumerate_dp

        enumerate_dp(spec, planner, tps, experts, add, pruned)
    if "afd" in spec.modes and spec.gpus >= 2:  # attention–FFN disaggregated units
        from graphsim.serving.afd_search import enumerate_afd

        enumerate_afd(spec, planner, tps, experts, add, pruned)
    return cands, pruned


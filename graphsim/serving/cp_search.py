"""Context parallel in `graphsim search`: which prefill (`-pcp`) and decode (`-dcp`) context-parallel sizes a
candidate pool is given, and why the others cannot run.

vLLM's `--prefill-context-parallel-size` multiplies an instance's GPUs (world size pp × tp × pcp,
vllm/config/parallel.py ParallelConfig.world_size) and splits each prompt over them (ring attention);
`--decode-context-parallel-size` shards the KV cache along tokens over ranks of the TP group that would otherwise
hold copies of the same KV heads (no extra GPUs). Both are priced by the tree transformations of
`costing.context_parallel` and the KV capacity of `serving.context_parallel`, so a CP candidate is enumerated,
evaluated in steady state and verified by simulation like any other.

Where they apply:
- aggregated instances: every (pcp, dcp) pair of the two lists, pp 1 for pcp > 1 (a ring inside a pipeline is
  not searched); prefill pools of xPyD: the pcp list; decode pools: the dcp list.
- refused, with the reason, as pruned pool configurations: both > 1 on one instance (not modelled:
  `costing.context_parallel.with_context_parallel`), dcp not dividing tp or above the ranks holding one KV head
  (vLLM shards those copies), linear-attention / Mamba models (state is not sharded along tokens), speculative
  decoding with CP (not modelled together), tp × pcp over the GPU budget, engines other than vLLM.

Defaults (no list given):
- pcp: 1, and the powers of two up to the budget, when a TTFT SLO is set and one prompt of the longest ISL
  cannot be prefilled within it on one GPU even at the GPU's dense peak (`prefill_floor_s`: the model's necessary
  prefill FLOPs, `work.account_step`, over the peak of its compute dtype). Below that, one GPU can in principle meet
  the TTFT and splitting a prompt over more GPUs only costs throughput per GPU; above it, a prompt must be split
  (by TP or by PCP) and the search compares the two.
- dcp: 1, and the powers of two dividing tp up to the ranks holding one KV head (`kv_copies`), where TP duplicates
  the KV (tp above the KV heads, and MLA) and the KV cache at dcp 1 holds fewer requests of isl + osl tokens than
  the largest `max_num_seqs` of the grid: DCP only removes duplicated KV, which buys concurrency, so it is
  explored where concurrency is KV-bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from graphsim.catalog import ResolvedModel
from graphsim.costing.context_parallel import ContextParallelError
from graphsim.costing.dtypes import PeakClass
from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.search_space import SearchSpec, SearchSpecError


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return tuple(out)


def prefill_floor_s(spec: SearchSpec, model: ResolvedModel, hw: HardwareSpec) -> float:
    """The physical floor of one prefill of the search's longest prompt on one GPU: the model's necessary FLOPs
    for `isl.hi` new tokens (`work.account_step`: every matmul, the causal attention scores and values) over the
    GPU's dense peak for the model's compute dtype (16-bit: BF16; quantized or 8/4-bit weights: the highest peak
    the GPU has, so the floor stays a floor)."""
    from graphsim.work import accounting
    from graphsim.work.account import account_step
    from graphsim.work.dtypes import DType
    from graphsim.workload import SeqGroup, Step

    b = spec.base
    acc = accounting(model.config, dtype=b.dtype, kv_dtype=b.kv_cache_dtype, state_dtype=b.mamba_ssm_cache_dtype,
                     ignore_quant=b.ignore_quant)
    flops = account_step(acc.spec, Step((SeqGroup(spec.isl.hi, 0),)), acc.precision).total.flops
    sixteen = acc.precision.quant is None and acc.precision.weight in (DType.BFLOAT16, DType.FLOAT16)
    peak = hw.peak_flops(PeakClass.BF16) if sixteen else None
    peak = peak or max(hw.peak_flops_per_s.values())
    return flops / peak


@dataclass
class CpPlan:
    """The CP sizes of one search (the lists given, or the defaults above) and the model facts they need."""

    spec: SearchSpec
    model: ResolvedModel
    hardware: HardwareSpec
    pcp: tuple[int, ...] = ()  # the pcp list (before the per-tp budget)
    dcp: tuple[int, ...] | None = None  # the dcp list; None: the default per tp
    floor_s: float = 0.0
    pcp_default_reason: str = ""
    # kv_bound(tp): whether the KV cache of a tp instance without DCP holds fewer requests than the largest
    # max_num_seqs (search_space.enumerate_candidates gives it; None: always)
    kv_bound: Callable[[int], bool] | None = None
    _copies: dict[int, int | str] = field(default_factory=dict)

    @classmethod
    def make(cls, spec: SearchSpec, model: ResolvedModel, hw: HardwareSpec) -> CpPlan:
        base = spec.base.parallel
        if base.decode_context_parallel_size > 1 and spec.dcp is not None:
            raise SearchSpecError("the search spec's base deployment sets decode_context_parallel_size and the spec "
                                  "a dcp list; give the sizes in one place (the dcp list)")
        if base.prefill_context_parallel_size > 1 and spec.pcp is not None:
            raise SearchSpecError("the search spec's base deployment sets prefill_context_parallel_size and the "
                                  "spec a pcp list; give the sizes in one place (the pcp list)")
        plan = cls(spec, model, hw)
        if spec.pcp is not None:
            plan.pcp = tuple(sorted(set(spec.pcp)))
        elif base.prefill_context_parallel_size > 1:
            plan.pcp = (base.prefill_context_parallel_size,)
        else:
            plan.pcp = (1,)
            ttft = spec.slo.ttft_ms
            if ttft is not None and spec.gpus >= 2:
                try:
                    plan.floor_s = prefill_floor_s(spec, model, hw)
                except GraphsimError:
                    plan.floor_s = 0.0
                if plan.floor_s * 1e3 > ttft:
                    plan.pcp = _pow2(1, spec.gpus)
                    plan.pcp_default_reason = (
                        f"one {spec.isl.hi:,}-token prefill needs ≥ {plan.floor_s * 1e3:,.0f} ms on one GPU at its "
                        f"peak, over the TTFT SLO of {ttft:g} ms: prefill context parallel explored")
        if spec.dcp is not None:
            plan.dcp = tuple(sorted(set(spec.dcp)))
        elif base.decode_context_parallel_size > 1:
            plan.dcp = (base.decode_context_parallel_size,)
        return plan

    def copies(self, tp: int) -> int | str:
        """Ranks of a TP group holding one KV head (`serving.context_parallel.kv_copies`), or why CP cannot run."""
        if tp not in self._copies:
            from graphsim.serving.context_parallel import kv_copies
            from graphsim.serving.graph_kv import accountant_lacks
            from graphsim.work import accounting

            b = self.spec.base
            lacks = accountant_lacks(self.model.config)  # laid out from its traced graph, which models no CP
            if lacks is not None:
                self._copies[tp] = f"{lacks}: context parallelism is not modelled from the traced graph"
                return self._copies[tp]
            try:
                acc = accounting(self.model.config, dtype=b.dtype, kv_dtype=b.kv_cache_dtype,
                                 state_dtype=b.mamba_ssm_cache_dtype, ignore_quant=b.ignore_quant)
                self._copies[tp] = kv_copies(acc.spec, acc.precision, tp)
            except ContextParallelError as e:
                self._copies[tp] = str(e)
        return self._copies[tp]

    def dcp_sizes(self, tp: int) -> tuple[int, ...]:
        if self.dcp is not None:
            return self.dcp
        copies = self.copies(tp)
        if isinstance(copies, str) or copies == 1 or (self.kv_bound is not None and not self.kv_bound(tp)):
            return (1,)
        return tuple(d for d in _pow2(1, copies) if tp % d == 0)

    def refusal(self, tp: int, pp: int, pcp: int, dcp: int) -> str:
        """Why an instance of tp × pp with these CP sizes cannot run ('' if it can)."""
        if pcp == 1 and dcp == 1:
            return ""
        if self.spec.base.speculative_config is not None:
            return "speculative decoding with context parallel is not modelled; drop one of them"
        if not self.spec.base.engine.profile.is_vllm:
            return f"context parallel is modelled for vLLM's engine only, not {self.spec.base.engine.profile.name}"
        if pcp > 1 and dcp > 1:
            return "prefill and decode context parallel together are not modelled (costing/context_parallel.py)"
        if pcp > 1 and pp > 1:
            return "prefill context parallel inside a pipeline is not searched"
        if tp * pp * pcp > self.spec.gpus:
            return f"tp{tp} × pcp{pcp} needs {tp * pp * pcp} GPUs, over the budget of {self.spec.gpus}"
        copies = self.copies(tp)
        if isinstance(copies, str):
            return copies
        if tp % dcp:
            return (f"--decode-context-parallel-size {dcp} must divide the tensor-parallel size {tp} (vLLM shards "
                    "the KV over ranks of the TP group)")
        if dcp > copies:
            return (f"--decode-context-parallel-size {dcp}: at tp{tp} each KV head is held by {copies} rank(s); DCP "
                    f"shards those copies along tokens, so it can be at most {copies}")
        return ""

    def options(self, tp: int, pp: int, role: str) -> tuple[list[tuple[int, int]], list[tuple[int, int, str]]]:
        """(pcp, dcp) pairs for a pool of `role` at tp × pp, and the refused pairs with their reasons. Pairs whose
        GPUs exceed the budget are dropped without a reason when they come from a default list."""
        pcps = self.pcp if role in ("agg", "prefill") else (1,)
        dcps = self.dcp_sizes(tp) if role in ("agg", "decode") else (1,)
        given_pcp = self.spec.pcp is not None
        ok: list[tuple[int, int]] = []
        refused: list[tuple[int, int, str]] = []
        for pcp in pcps:
            if not given_pcp and tp * pp * pcp > self.spec.gpus:
                continue
            if not given_pcp and pcp > 1 and pp > 1:
                continue
            for dcp in dcps:
                if (pcp, dcp) != (1, 1) and not given_pcp and self.spec.dcp is None and pcp > 1 and dcp > 1:
                    continue  # the defaults do not pair sizes that cannot run together
                why = self.refusal(tp, pp, pcp, dcp)
                if why:
                    refused.append((pcp, dcp, why))
                else:
                    ok.append((pcp, dcp))
        return ok, refused

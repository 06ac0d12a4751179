"""The MoE token exchange of data-parallel attention + expert parallel: vLLM's all2all backends, priced.

With `--data-parallel-size` > 1 on a MoE model every DP rank routes its own tokens, and the MoE layer's
dispatch hands each token to the ranks holding its experts; the combine brings the expert outputs back
(vllm/model_executor/layers/fused_moe/layer.py `FusedMoE.forward_impl` → `get_ep_group().dispatch / combine`,
or a modular kernel's prepare/finalize for the DeepEP / pplx backends). Which exchange runs is vLLM's
`--all2all-backend` (`ParallelConfig.all2all_backend`, vllm/config/parallel.py; the `VLLM_ALL2ALL_BACKEND`
environment variable in releases before the option existed):

- `allgather_reducescatter` (the default of `ParallelConfig.all2all_backend`): dispatch is an all-gather of every
  DP rank's hidden states over the DP group, so every rank holds the global batch; combine is a reduce-scatter
  of the partial expert outputs (vllm/distributed/device_communicators/all2all.py `AgRsAll2AllManager`, NCCL
  through `all_gatherv` / `reduce_scatterv`).
- `naive` (the default of `VLLM_ALL2ALL_BACKEND` in the releases that read it, vllm/envs.py): dispatch
  broadcasts each rank's chunk in turn (priced as the all-gather it amounts to); combine all-reduces the global
  buffer and keeps the rank's slice (all2all.py `NaiveAll2AllManager`).
- `deepep_high_throughput` / `deepep_low_latency`: DeepEP's normal and low-latency kernels, which send each token
  only to the ranks owning its top-k experts. Priced from measured rows where the profile has them
  (aiconfigurator's `moe_a2a_perf` table, imported as all-to-all collective rows whose implementation names
  backend, phase and geometry, see `implementation`), else on the topology's roofline. The low-latency buffers
  hold `VLLM_MOE_DP_CHUNK_SIZE` tokens per rank (256 by default, vllm/envs.py); a larger batch runs in chunks of
  that many (`FusedMoEModularKernel` chunking), each priced at the chunk size.
- `pplx`: no rows anywhere; priced as the low-latency exchange on the roofline.

Message sizes (bf16 hidden states, the activation dtype): an all-gather / reduce-scatter moves the global batch
(Σ tokens over DP ranks × hidden × bytes, the tensor the collective produces, as graphsim's all-gather rows are
keyed); a DeepEP exchange sends each of a rank's tokens once per routed expert (tokens × top-k × hidden × bytes,
the low-latency layout; the normal kernels send once per destination rank, at most this). The roofline of an
exchange is `costing.roofline.collective_roofline_us` on the deployment's topology (bus factor (n-1)/n of the
bytes over one GPU's link bandwidth, plus the link latency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graphsim.costing.collectives import CollectiveContext, plan_collective
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.interpolate import SOURCES, KernelPricer
from graphsim.costing.kernels import CollectiveKey, CollectiveOp
from graphsim.errors import GraphsimError

# vllm/config/parallel.py All2AllBackend (the ones graphsim prices)
ALL2ALL_BACKENDS = ("allgather_reducescatter", "naive", "deepep_high_throughput", "deepep_low_latency", "pplx")
DEFAULT_ALL2ALL_BACKEND = "allgather_reducescatter"  # vllm/config/parallel.py ParallelConfig.all2all_backend
MOE_DP_CHUNK_SIZE = 256  # vllm/envs.py VLLM_MOE_DP_CHUNK_SIZE: tokens per rank per low-latency dispatch
# aiconfigurator's moe_a2a_perf names of the DeepEP backends (sdk/operations/moe_comm.py MOE_A2A_BACKENDS)
ROWS_BACKEND = {"deepep_high_throughput": "deepep_ht", "deepep_low_latency": "deepep_ll"}


class All2AllError(GraphsimError):
    pass


def check_backend(name: str) -> str:
    """`name` if graphsim prices it, else one line naming the choices."""
    if name not in ALL2ALL_BACKENDS:
        raise All2AllError(f"unknown --all2all-backend '{name}'; use one of {', '.join(ALL2ALL_BACKENDS)} "
                           f"(vLLM's default: {DEFAULT_ALL2ALL_BACKEND})")
    return name


def implementation(rows_backend: str, phase: str, hidden_size: int, topk: int, num_experts: int) -> str:
    """The collective-row implementation name of one measured DeepEP exchange: backend, phase and the MoE
    geometry it was measured with (`deepep_ll.dispatch.h7168.k8.e256`); keyed on geometry only (DESIGN §5.4)."""
    return f"{rows_backend}.{phase}.h{hidden_size}.k{topk}.e{num_experts}"


def exchange_bytes(tokens: int, hidden_size: int, topk: int, act_bytes: float = 2.0) -> int:
    """Bytes a rank sends in one DeepEP dispatch (or receives back in the combine): one hidden vector per
    routed expert (the message coordinate of the imported rows)."""
    return max(1, int(tokens * topk * hidden_size * act_bytes))


@dataclass(frozen=True)
class ExchangeTime:
    """One MoE layer's dispatch or combine."""

    phase: str  # dispatch | combine
    time_us: float  # NaN when missing
    source: str  # measured / interpolated / derived / roofline / missing
    note: str  # which implementation and rows


@dataclass(frozen=True)
class MoeExchange:
    """What pricing the exchange needs from the model and the deployment."""

    backend: str
    dp: int  # DP ranks (the all-gather group)
    ep: int  # ranks the experts are spread over (dp × tp)
    hidden_size: int
    topk: int
    num_experts: int
    dtype: KernelDtype = KernelDtype.BF16

    def __post_init__(self) -> None:
        check_backend(self.backend)
        if self.dp < 2 or self.ep < self.dp:
            raise All2AllError(f"a MoE exchange needs at least 2 DP ranks and ep >= dp (got dp={self.dp}, ep={self.ep})")

    def price(self, rank_tokens: Sequence[int], pricer: KernelPricer) -> tuple[ExchangeTime, ExchangeTime]:
        """(dispatch, combine) of one MoE layer when DP rank r holds rank_tokens[r] tokens. All ranks wait for
        the exchange, so it takes as long as its busiest rank's part."""
        busiest = max(1, max(rank_tokens, default=1))
        total = max(1, sum(rank_tokens))
        ctx = CollectiveContext.of(pricer)
        b = self.dtype.activation_bytes
        if self.backend in ("allgather_reducescatter", "naive"):
            msg = max(1, int(total * self.hidden_size * b))
            combine_op = CollectiveOp.REDUCE_SCATTER if self.backend == "allgather_reducescatter" else CollectiveOp.ALL_REDUCE
            return (self._nccl("dispatch", CollectiveOp.ALL_GATHER, msg, total, ctx, pricer),
                    self._nccl("combine", combine_op, msg, total, ctx, pricer))
        chunks, per = 1, busiest
        if self.backend in ("deepep_low_latency", "pplx") and busiest > MOE_DP_CHUNK_SIZE:
            chunks, per = math.ceil(busiest / MOE_DP_CHUNK_SIZE), MOE_DP_CHUNK_SIZE
        rows = ROWS_BACKEND.get(self.backend, ROWS_BACKEND["deepep_low_latency"])
        out = []
        for phase in ("dispatch", "combine"):
            impl = implementation(rows, phase, self.hidden_size, self.topk, self.num_experts)
            key = CollectiveKey(CollectiveOp.ALL_TO_ALL, self.ep, KernelDtype.BF16, impl)
            t, s = pricer.times(key, np.asarray([[exchange_bytes(per, self.hidden_size, self.topk, b)]]))
            src = SOURCES[int(s[0])].value
            how = (f"{self.backend}: rows {impl}" if src in ("measured", "interpolated", "extrapolated") else
                   f"{self.backend}: no rows {impl} (a profile imported from aiconfigurator-core's moe_a2a_perf "
                   "tables has them where measured, e.g. H200 EP8), topology roofline")
            if chunks > 1:
                how += f"; {chunks} chunks of {MOE_DP_CHUNK_SIZE} tokens (VLLM_MOE_DP_CHUNK_SIZE)"
            out.append(ExchangeTime(phase, float(t[0]) * chunks, src, how))
        return out[0], out[1]

    def _nccl(self, phase: str, op: CollectiveOp, msg: int, tokens: int, ctx: CollectiveContext,
              pricer: KernelPricer) -> ExchangeTime:
        plan = plan_collective(op, self.dp, self.dtype, msg, tokens, ctx)
        t, s = pricer.times(plan.key, np.asarray([[msg]]))
        return ExchangeTime(phase, float(t[0]), SOURCES[int(s[0])].value,
                            f"{self.backend}: {op.value} of {msg:,} B over {self.dp} DP ranks; {plan.note}")

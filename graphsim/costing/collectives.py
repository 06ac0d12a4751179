"""Which all-reduce vLLM runs, and which profile.db rows price a collective (DESIGN §1: every number says
where it comes from).

vLLM's TP all-reduce (`CudaCommunicator.all_reduce`, vllm/distributed/device_communicators/cuda_communicator.py)
tries, in order: its custom all-reduce (`CustomAllreduce.should_custom_ar`, custom_all_reduce.py), torch
symmetric memory (`SymmMemCommunicator.should_use_symm_mem`, symm_mem.py, on by default:
`VLLM_ALLREDUCE_USE_SYMM_MEM=1` in vllm/envs.py), then NCCL (`PyNcclCommunicator`). `choose_all_reduce`
replays those checks from the message size, the group size, the topology and the GPU's compute capability.
All-gather, reduce-scatter and all-to-all always run NCCL (`CudaCommunicator.reduce_scatter` /
`all_gatherv` call pynccl only).

Rows. aiconfigurator's `vLLM_custom_graph` / `vLLM_custom_eager` rows (imported as implementations
`vllm_custom_graph` / `vllm_custom_eager`) time vLLM's own `tensor_model_parallel_all_reduce` call on an
NVSwitch node, in a CUDA graph and eagerly (aiconfigurator collector/collect_all_reduce.py,
`benchmark_vllm_allreduce`); so at every size they hold what vLLM dispatched there: custom all-reduce below its
limit, symmetric memory or NCCL above. The `nccl` rows time NCCL alone, in fp16 and int8 only. A collective is
priced from:

- custom all-reduce or symmetric memory: the `vllm_custom_<graph|eager>` rows (vLLM's own call);
- NCCL: the `nccl` rows; a bf16 message from fp16 rows of equal bytes where no bf16 rows exist (NCCL moves
  bytes: its ring and tree algorithms cost by size, and fp16 and bf16 are both 2-byte types reduced by the same
  kernels), said in the note.

Rows are used only where the deployment's topology is the one they were measured on (the profile's own
hardware spec: same link kind and bandwidth) and the group fits in one node; elsewhere the collective is
priced by the topology's roofline (`costing.roofline.collective_roofline_us`) and the note says why.

Graph or eager: vLLM replays CUDA graphs for steps of at most `max_cudagraph_capture_size` tokens, whose default
is min(max_num_seqs × 2, 512) bounded by max_num_batched_tokens (vllm/config/vllm.py `_set_cudagraph_sizes`),
i.e. 512 with vLLM's default max_num_seqs (256 and above); larger steps run eagerly
(`CudagraphDispatcher.dispatch` returns CUDAGraphMode.NONE past the largest captured size).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import HardwareSpec, LinkKind, Topology, load_hardware
from graphsim.costing.kernels import CollectiveKey, CollectiveOp
from graphsim.errors import GraphsimError

if TYPE_CHECKING:
    from graphsim.costing.interpolate import KernelPricer

MiB = 1 << 20
KiB = 1 << 10

# vllm/distributed/device_communicators/custom_all_reduce.py, CustomAllreduce
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)  # _SUPPORTED_WORLD_SIZES
CUSTOM_AR_MAX_BYTES = 8192 * 1024  # __init__ default max_size
CUSTOM_AR_ALIGN = 16  # should_custom_ar: "input byte size to be multiples of 16"
# vllm/distributed/device_communicators/all_reduce_utils.py, CUSTOM_ALL_REDUCE_MAX_SIZES: the custom all-reduce
# limit per compute capability and world size when symmetric memory is enabled (then min(this, max_size))
CUSTOM_AR_MAX_WITH_SYMM_MEM: dict[str, dict[int, int]] = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
    "10.0": {2: 2 * MiB, 4: 2 * MiB, 6: 1 * MiB, 8: 1 * MiB},
    "10.3": {2: 4 * MiB, 4: 4 * MiB, 6: 8 * MiB, 8: 4 * MiB},
}
# the same file, SYMM_MEM_ALL_REDUCE_MAX_SIZES: symmetric memory runs up to (<=) these sizes
SYMM_MEM_MAX_BYTES: dict[str, dict[int, int]] = {
    "9.0": {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB},
    "10.0": {2: 8 * MiB, 4: 32 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    "10.3": {2: 4 * MiB, 4: 32 * MiB, 6: 32 * MiB, 8: 64 * MiB},
}
SYMM_MEM_ALIGN = 4  # SymmMemCommunicator.should_use_symm_mem: inp_size % 4
# vllm/config/vllm.py _set_cudagraph_sizes: min(max_num_seqs * 2, 512) with vLLM's default max_num_seqs (>= 256)
MAX_CUDAGRAPH_CAPTURE_SIZE = 512

# the implementation names of imported rows (costing/aiconfigurator_tables.py convert_nccl / convert_custom_allreduce)
NCCL_ROWS = "nccl"
VLLM_GRAPH_ROWS = "vllm_custom_graph"
VLLM_EAGER_ROWS = "vllm_custom_eager"


class AllReduceImpl(str, Enum):
    CUSTOM = "custom_ar"  # vLLM's CustomAllreduce (P2P IPC buffers)
    SYMM_MEM = "symm_mem"  # torch symmetric memory (NVLink multicast), vLLM's SymmMemCommunicator
    NCCL = "nccl"  # PyNcclCommunicator


@dataclass(frozen=True)
class AllReduceChoice:
    impl: AllReduceImpl
    reason: str  # why, in vLLM's terms


def symm_mem_enabled(world_size: int, topology: Topology, compute_capability: str) -> bool:
    """SymmMemCommunicator is enabled: a capability and world size in SYMM_MEM_ALL_REDUCE_MAX_SIZES and NVLink
    multicast (its `handle.multicast_ptr == 0` check), which needs NVSwitch inside one node."""
    return (compute_capability in SYMM_MEM_MAX_BYTES and world_size in SYMM_MEM_MAX_BYTES[compute_capability]
            and topology.link is LinkKind.NVSWITCH and topology.nodes(world_size) == 1)


def custom_ar_limit(world_size: int, topology: Topology, compute_capability: str) -> tuple[int, str]:
    """(bytes, reason): messages below `bytes` run vLLM's custom all-reduce; 0 where it is disabled."""
    if topology.nodes(world_size) > 1:
        return 0, "custom all-reduce is disabled when the group spans nodes"
    if world_size not in CUSTOM_AR_WORLD_SIZES:
        return 0, f"custom all-reduce supports world sizes {CUSTOM_AR_WORLD_SIZES}, not {world_size}"
    if not topology.link.p2p:
        return 0, "custom all-reduce is disabled without GPU peer-to-peer access"
    if world_size > 2 and not topology.link.fully_connected:
        return 0, "custom all-reduce is disabled on more than two PCIe-only GPUs"
    limit = CUSTOM_AR_MAX_BYTES
    if symm_mem_enabled(world_size, topology, compute_capability) and compute_capability in CUSTOM_AR_MAX_WITH_SYMM_MEM:
        limit = min(CUSTOM_AR_MAX_WITH_SYMM_MEM[compute_capability][world_size], limit)
    return limit, f"custom all-reduce below {_size(limit)}"


def choose_all_reduce(message_bytes: int, world_size: int, topology: Topology, *, compute_capability: str = "",
                      dtype: KernelDtype = KernelDtype.BF16, custom_all_reduce: bool = True) -> AllReduceChoice:
    """The all-reduce vLLM runs for one message on a TP group of `world_size` GPUs (see the module docstring).
    `custom_all_reduce=False` is vLLM's --disable-custom-all-reduce. The reason names the rule, not the size."""
    limit, why = custom_ar_limit(world_size, topology, compute_capability) if custom_all_reduce else (
        0, "custom all-reduce disabled (--disable-custom-all-reduce)")
    if limit and message_bytes % CUSTOM_AR_ALIGN == 0 and message_bytes < limit:
        return AllReduceChoice(AllReduceImpl.CUSTOM, f"below the {_size(limit)} custom all-reduce limit")
    symm = symm_mem_enabled(world_size, topology, compute_capability) and dtype is KernelDtype.BF16
    cap = SYMM_MEM_MAX_BYTES[compute_capability][world_size] if symm else 0
    if symm and message_bytes % SYMM_MEM_ALIGN == 0 and message_bytes <= cap:
        low = f"at or above the {_size(limit)} custom all-reduce limit, " if limit else ""
        return AllReduceChoice(AllReduceImpl.SYMM_MEM, f"{low}up to the {_size(cap)} symmetric-memory limit "
                                                       f"(sm {compute_capability}, {world_size} GPUs)")
    if symm:
        why = f"above the {_size(cap)} symmetric-memory limit"
    elif limit:
        why = f"at or above the {_size(limit)} custom all-reduce limit"
    if limit and message_bytes % CUSTOM_AR_ALIGN:
        why += f"; not a multiple of {CUSTOM_AR_ALIGN} bytes"
    return AllReduceChoice(AllReduceImpl.NCCL, why)


def _size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


@dataclass(frozen=True)
class CollectiveSettings:
    """The engine settings that change which collective runs: vLLM's --disable-custom-all-reduce, and the
    largest step replayed in a CUDA graph (0: vLLM's --enforce-eager)."""

    custom_all_reduce: bool = True
    max_cudagraph_tokens: int = MAX_CUDAGRAPH_CAPTURE_SIZE

    @classmethod
    def for_engine(cls, max_num_seqs: int, max_num_batched_tokens: int, *, enforce_eager: bool = False,
                   custom_all_reduce: bool = True) -> CollectiveSettings:
        """vLLM's default capture bound: min(max_num_seqs × 2, 512, max_num_batched_tokens) (vllm/config/vllm.py
        `_set_cudagraph_sizes`, without speculative decoding)."""
        size = 0 if enforce_eager else min(max_num_seqs * 2, MAX_CUDAGRAPH_CAPTURE_SIZE, max_num_batched_tokens)
        return cls(custom_all_reduce, size)


@dataclass(frozen=True)
class CollectiveContext:
    """What choosing a collective's rows needs beyond the kernel: the deployment's topology, whether the
    profile's rows were measured on it, and which keys have rows."""

    topology: Topology | None  # None: no hardware spec (rows as they are, roofline impossible anyway)
    compute_capability: str = ""
    rows_topology: Topology | None = None  # where the profile's collective rows were measured (None: unknown)
    has_rows: Callable[[CollectiveKey], bool] = lambda _key: False
    custom_all_reduce: bool = True
    max_cudagraph_tokens: int = MAX_CUDAGRAPH_CAPTURE_SIZE  # 0: eager always (vLLM's --enforce-eager)

    @classmethod
    def of(cls, pricer: KernelPricer) -> CollectiveContext:
        hw: HardwareSpec | None = pricer.hardware
        db = pricer.db
        rows_topo = _spec_topology(db.meta.hardware) if db is not None and db.meta.hardware else None
        settings = pricer.collectives
        return cls(hw.topology() if hw is not None else None, hw.compute_capability if hw is not None else "",
                   rows_topo, lambda key: pricer.curve(key) is not None, settings.custom_all_reduce,
                   settings.max_cudagraph_tokens)

    def rows_apply(self, world_size: int) -> str:
        """'' where the profile's collective rows describe this deployment's links, else why not."""
        if self.topology is None or self.rows_topology is None:
            return ""
        t, r = self.topology, self.rows_topology
        if t.nodes(world_size) > 1:
            return f"the group spans {t.nodes(world_size)} nodes; the rows were measured inside one node"
        if t.link is not r.link or t.link_bandwidth_bytes_per_s != r.link_bandwidth_bytes_per_s:
            return (f"the rows were measured on {r.link.value} ({r.link_bandwidth_bytes_per_s / 1e9:,.0f} GB/s), "
                    f"not on this {t.link.value} ({t.link_bandwidth_bytes_per_s / 1e9:,.0f} GB/s)")
        return ""


@functools.cache
def _spec_topology(hardware_id: str) -> Topology | None:
    """The topology of a shipped spec, read once (every cost-tree evaluation asks)."""
    try:
        return load_hardware(hardware_id).topology()
    except GraphsimError:  # a profile naming a spec this install lacks: its rows are taken as they are
        return None


@dataclass(frozen=True)
class CollectivePlan:
    """The key a collective message is priced with, and a note saying which implementation and rows."""

    key: CollectiveKey
    note: str


# vLLM's all-gather and reduce-scatter call pynccl only (CudaCommunicator.all_gatherv / reduce_scatter); its EP
# all-to-all goes through an all2all manager (VLLM_ALL2ALL_BACKEND: naive, allgather_reducescatter, DeepEP, ...)
_NOT_ALL_REDUCE = {CollectiveOp.ALL_TO_ALL: "priced as NCCL's all-to-all; vLLM's all2all backend may differ"}


def plan_collective(op: CollectiveOp, world_size: int, dtype: KernelDtype, message_bytes: int, tokens: int,
                    ctx: CollectiveContext | None) -> CollectivePlan:
    """Which implementation runs one collective message (`tokens`: the step's tokens, for graph or eager) and
    which rows price it; the key's `implementation` names rows that exist, or a name no rows hold (roofline)."""
    if ctx is None or ctx.topology is None:
        return CollectivePlan(CollectiveKey(op, world_size, dtype, NCCL_ROWS), "nccl")
    graph = 0 < tokens <= ctx.max_cudagraph_tokens
    if op is CollectiveOp.ALL_REDUCE:
        choice = choose_all_reduce(message_bytes, world_size, ctx.topology, compute_capability=ctx.compute_capability,
                                   dtype=dtype, custom_all_reduce=ctx.custom_all_reduce)
    else:
        choice = AllReduceChoice(AllReduceImpl.NCCL, _NOT_ALL_REDUCE.get(op, f"vLLM runs {op.value} with NCCL"))
    impl = choice.impl.value
    mode = "graph" if graph else "eager"
    no_rows = ctx.rows_apply(world_size)
    if not no_rows and choice.impl is not AllReduceImpl.NCCL and not ctx.custom_all_reduce:
        # vLLM's rows time its default dispatch: with custom all-reduce on, this size may have run that instead
        default = choose_all_reduce(message_bytes, world_size, ctx.topology, compute_capability=ctx.compute_capability,
                                    dtype=dtype)
        if default.impl is not choice.impl:
            no_rows = f"vLLM's all-reduce rows at this size timed {default.impl.value}"
    if no_rows:
        key = CollectiveKey(op, world_size, dtype, f"{impl}@{ctx.topology.link.value}")
        return CollectivePlan(key, f"{impl} ({choice.reason}); {mode}; no rows: {no_rows}; priced on the topology")
    if choice.impl is AllReduceImpl.NCCL:
        candidates = [(dtype, NCCL_ROWS, "")]
        if dtype is KernelDtype.BF16:
            candidates.append((KernelDtype.FP16, NCCL_ROWS, "; bf16 from fp16 rows of equal bytes"))
    else:
        rows = VLLM_GRAPH_ROWS if graph else VLLM_EAGER_ROWS
        candidates = [(dtype, rows, "")]
    for dt, rows, extra in candidates:
        key = CollectiveKey(op, world_size, dt, rows)
        if ctx.has_rows(key):
            return CollectivePlan(key, f"{impl} ({choice.reason}); {mode}; rows {rows} {dt.value}{extra}")
    return CollectivePlan(CollectiveKey(op, world_size, dtype, candidates[0][1]),
                          f"{impl} ({choice.reason}); {mode}; no {candidates[0][1]} rows for {world_size} GPUs")


def plan_steps(op: CollectiveOp, world_size: int, dtype: KernelDtype, message_bytes: np.ndarray, tokens: np.ndarray,
               ctx: CollectiveContext | None) -> list[tuple[CollectivePlan, np.ndarray]]:
    """`plan_collective` for many steps at once: (plan, indices of the steps it prices). A plan depends on a
    message only through the limits it crosses and its alignment, so steps are grouped by those first and one
    message of each group is planned (a simulator's probe tables price thousands of steps)."""
    n = np.asarray(message_bytes, dtype=np.int64)
    t = np.asarray(tokens, dtype=np.int64)
    if ctx is None or ctx.topology is None:
        return [(plan_collective(op, world_size, dtype, 0, 0, ctx), np.arange(len(n)))]
    limit, _ = custom_ar_limit(world_size, ctx.topology, ctx.compute_capability)
    symm = symm_mem_enabled(world_size, ctx.topology, ctx.compute_capability)
    cap = SYMM_MEM_MAX_BYTES[ctx.compute_capability][world_size] if symm else 0
    graph = (t > 0) & (t <= ctx.max_cudagraph_tokens)
    sig = np.stack([n < limit, n % CUSTOM_AR_ALIGN == 0, n <= cap, n % SYMM_MEM_ALIGN == 0, graph], axis=1)
    _, first, inverse = np.unique(sig, axis=0, return_index=True, return_inverse=True)
    by_plan: dict[CollectivePlan, list[np.ndarray]] = {}
    for g, i in enumerate(first):
        plan = plan_collective(op, world_size, dtype, int(n[i]), int(t[i]), ctx)
        by_plan.setdefault(plan, []).append(np.flatnonzero(inverse.reshape(-1) == g))
    return [(plan, np.sort(np.concatenate(idx))) for plan, idx in by_plan.items()]

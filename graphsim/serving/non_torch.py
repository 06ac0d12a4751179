"""The non-torch memory vLLM's KV budget subtracts, from the logs of real servers.

What vLLM measures (vllm/utils/mem_utils.py `memory_profiling`, 0.19 and 0.33; vllm/utils/__init__.py at 0.10.1):
`MemoryProfilingResult.non_torch_increase` is the growth of `cuda_memory − torch.cuda.memory_reserved()` from the
worker's start-up snapshot (`Worker.init_snapshot`, vllm/v1/worker/gpu_worker.py `init_device`) to the end of the
profile run. It holds everything the GPU gives out past torch's caching allocator: NCCL's buffers, the custom
all-reduce's shared buffers, library handles and loaded kernel images. `Worker.determine_available_memory` subtracts
it with the weights and the activation peak (`non_kv_cache_memory`).

Where the snapshot is taken moved: up to 0.10.1 it is taken before `init_worker_distributed_environment`, so the
communicators created there count; vLLM PR 25359 (2025-09) moved it after (0.19.0 and 0.33.0 read so). The logs
below do not show a drop with that move: a recent B200 TP4 server (its worker logs from `gpu_worker.py:857`, a
layout later than 0.19's) still logs 0.95 GiB, within the V0 logs' 1.07–2.10 GiB, and an H200 TP2 server of
October 2025 (`gpu_worker.py:391`; whether its release has the move is not checked) 1.38 GiB. So most of the memory
at TP > 1 appears to be taken during the profile run itself, after the snapshot in either order. The value cannot be
derived from a config: it depends on NCCL's channels and protocols on the machine. So graphsim takes the median of the public
start-up logs below for the deployment's case, and states the spread:

- TP 1: 15 logs, median 0.07 GiB (0.02–0.35);
- TP > 1 with NVLink between the GPUs (NVSwitch or direct NVLink; vLLM's custom all-reduce on in every one of these
  logs): 5 logs, median 1.38 GiB (0.95–2.10);
- TP > 1 over PCIe: one log, 0.21 GiB (L40S, TP4 with expert parallelism). Without full NVLink vLLM runs no custom
  all-reduce past two GPUs.

Not separated, for want of logs: the vLLM version (V0 and V1 logs are mixed in each group), the GPU within a group,
the TP size beyond "1 or more" (the NVLink logs are TP 2, 4, 8 and 8 or 16, no trend visible in five), and
`--disable-custom-all-reduce` (no log with it). The group is chosen by the largest set of GPUs a rank runs collectives
with during the profile run: the TP group, or a MoE's expert group under data-parallel attention (dp × tp, whose
experts all-gather / reduce-scatter over NCCL as a TP group all-reduces; no log of it). Pipeline parallelism's
send/recv between stages is not counted (no log), nor are the buffers expert-parallel all-to-all backends such as
DeepEP allocate for themselves.

Each log is cited by where it was read. Most were found through this project's code-search index over public GitHub
files: that index names a file by a numeric id and not its URL, so the id and the logged line are given.
`--overhead-gib` replaces the value.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from graphsim.costing.hardware import LinkKind

GiB = 1 << 30


@dataclass(frozen=True)
class NonTorchLog:
    """One public vLLM start-up log's non-torch memory on one rank."""

    gib: float  # as logged: "non_torch_memory takes X GiB" (V0) or "X GiB for non-torch memory" (V1)
    tp: int  # tensor-parallel size (a lower bound where only a worker name shows it: `tp_at_least`)
    nvlink: bool | None  # GPUs linked by NVLink (None: TP 1, no link used)
    gpu: str  # the GPU as the log or its page states it, with the total CUDA reports
    vllm: str  # the version, or the logging line that dates it
    source: str  # where the log was read
    tp_at_least: bool = False


# TP 1 (engine in one process: no worker-process prefix, or TP 1 stated)
_TP1 = (
    NonTorchLog(0.35, 1, None, "RTX 3090 (23.58 GiB)", "V0 0.6.x",
                "github.com/vllm-project/vllm/issues/10517 (tests/data/vllm_logs/v0_memory_profiling_rtx3090.log)"),
    NonTorchLog(0.04, 1, None, "12 GiB GPU (12.00 GiB)", "V0 (worker.py:267)",
                "code index id 40791855483: Qwen3-4B docker run, 'non_torch_memory takes 0.04GiB'"),
    NonTorchLog(0.08, 1, None, "48 GB GPU (47.50 GiB)", "V0 (worker.py:295), Unsloth",
                "code index id 33210791296: 'non_torch_memory takes 0.08GiB'"),
    NonTorchLog(0.05, 1, None, "T4 (14.74 GiB)", "V0 (worker.py:267)",
                "code index id 44847761102: 'non_torch_memory takes 0.05GiB'"),
    NonTorchLog(0.09, 1, None, "32 GB GPU (31.74 GiB)", "V0 (worker.py:266)",
                "code index id 4922787267: DeepSeek-R1-Distill-Qwen-7B, 'non_torch_memory takes 0.09GiB'"),
    NonTorchLog(0.11, 1, None, "T4 (14.56 GiB)", "V0 (worker.py:241)",
                "code index id 69421856836: 'non_torch_memory takes 0.11GiB'"),
    NonTorchLog(0.07, 1, None, "16 GB GPU (15.55 GiB)", "V1 (gpu_worker.py:857)",
                "code index id 69421856836: '0.07 GiB for non-torch memory'"),
    NonTorchLog(0.05, 1, None, "A10G (22.06 GiB)", "V0 (worker.py:267)",
                "code index id 60663571995: Qwen2.5-Math-1.5B, 'non_torch_memory takes 0.05GiB'"),
    NonTorchLog(0.06, 1, None, "24 GB GPU (23.68 GiB)", "V0 (worker.py:295), Unsloth",
                "code index id 33404547317: 'non_torch_memory takes 0.06GiB'"),
    NonTorchLog(0.02, 1, None, "24 GB GPU (23.53 GiB)", "V1, Sept.–Oct. 2025 (gpu_worker.py:391), --tensor-parallel-size 1",
                "code index id 34681159919: '0.02 GiB for non-torch memory'"),
    NonTorchLog(0.02, 1, None, "A100 40GB (39.49 GiB)", "V1, Sept.–Oct. 2025 (gpu_worker.py:391), EngineCore_DP0",
                "code index id 57034141296: '0.02 GiB for non-torch memory'"),
    NonTorchLog(0.26, 1, None, "RTX PRO 6000 Blackwell (96 GB)", "V1, TP1 stated",
                "code index id 60828809390: '0.26 GiB for non-torch memory'"),
    NonTorchLog(0.07, 1, None, "H100 80GB (79.19 GiB)", "V1, Sept.–Oct. 2025 (gpu_worker.py:391), EngineCore_DP0",
                "code index id 34680831065: '0.07 GiB for non-torch memory'"),
    NonTorchLog(0.03, 1, None, "L40S (47.37 GiB)", "V1 (gpu_worker.py:598), EngineCore_DP0",
                "code index id 66080606939: '0.03 GiB for non-torch memory'"),
    NonTorchLog(0.23, 1, None, "B300 (267.69 GiB)", "V1 (gpu_worker.py:857), EngineCore",
                "code index id 63390294774: '0.23 GiB for non-torch memory'"),
)

# TP > 1: worker processes per rank (Worker_TPn / VllmWorkerProcess / Ray workers)
_TP_MANY = (
    NonTorchLog(1.38, 2, True, "H200 (139.81 GiB)", "V1, Sept.–Oct. 2025 (gpu_worker.py:391), custom all-reduce on",
                "code index id 7292846353: Worker_TP0/TP1, '1.38 GiB for non-torch memory'", tp_at_least=True),
    NonTorchLog(0.95, 4, True, "B200 (184.31 GiB)", "V1 (gpu_worker.py:857), TP with EP, custom all-reduce on",
                "code index id 61511710941: Worker_TP3_EP3, '0.95 GiB for non-torch memory'", tp_at_least=True),
    NonTorchLog(1.39, 4, True, "80 GB GPU (79.33 GiB)", "V0 (worker.py:267), custom all-reduce on",
                "code index id 12053131581: Qwen2.5-VL-7B, world size 4, 'non_torch_memory takes 1.39GiB'"),
    NonTorchLog(2.10, 8, True, "A100 40GB (39.39 GiB)", "V0 (worker.py:266)",
                "code index id 3706561278: DeepSeek-Coder-V2-Lite on 8 GPUs, 'non_torch_memory takes 2.10GiB'"),
    NonTorchLog(1.07, 8, True, "A100 40GB (39.49 GiB)", "V0 (worker.py:267), Ray over two nodes",
                "code index id 17822999525: DeepSeek-V2.5, P2P/IPC channels, 'non_torch_memory takes 1.07GiB'",
                tp_at_least=True),
    NonTorchLog(0.21, 4, False, "L40S (44.42 GiB)", "V1, Sept.–Oct. 2025 (gpu_worker.py:391), TP with EP, PCIe",
                "code index id 38962983769: Worker_TP2_EP2, '0.21 GiB for non-torch memory'", tp_at_least=True),
)

LOGS: tuple[NonTorchLog, ...] = _TP1 + _TP_MANY


@dataclass(frozen=True)
class NonTorchEstimate:
    gib: float
    group: str  # which logs
    logs: tuple[NonTorchLog, ...]
    ranks: int = 1  # GPUs of the rank's largest collective group

    @property
    def bytes(self) -> int:
        return int(self.gib * GiB)

    def how(self) -> str:
        lo, hi = min(g.gib for g in self.logs), max(g.gib for g in self.logs)
        n = len(self.logs)
        spread = f"spread {lo:.2f}–{hi:.2f} GiB" if n > 1 else "one log only"
        group = f"; collectives over {self.ranks} GPUs here" if self.ranks > 1 else ""
        return (f"median of {n} public vLLM start-up log{'s' if n > 1 else ''} at {self.group} ({spread}{group}; "
                "graphsim/serving/non_torch.py, docs/serving.md); not derivable from the config")


def _group(ranks: int, link: LinkKind | None) -> tuple[str, tuple[NonTorchLog, ...]]:
    if ranks <= 1:
        return "TP 1", _TP1
    nvlink = link is not None and link.fully_connected
    logs = tuple(g for g in _TP_MANY if g.nvlink is nvlink)
    return ("TP > 1 over NVLink" if nvlink else "TP > 1 over PCIe"), logs


def non_torch_estimate(ranks: int, link: LinkKind | None) -> NonTorchEstimate:
    """The non-torch memory of one rank of a vLLM engine whose largest collective group has `ranks` GPUs (the TP size,
    or dp × tp for a MoE's experts under data-parallel attention) linked by `link` (the hardware spec's
    `topology().link`): the median of the logs of that group (module docstring)."""
    group, logs = _group(ranks, link)
    return NonTorchEstimate(round(statistics.median(g.gib for g in logs), 4), group, logs, ranks)

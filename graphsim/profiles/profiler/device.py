"""The device kernels run on: selection, naming, threads, memory budget, dtype mapping."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import cpu_name
from graphsim.errors import GraphsimError


class Unmeasurable(Exception):
    """This kernel (or this point of it) cannot be timed here; the message says why."""


_TORCH_DTYPES: dict[KernelDtype, torch.dtype] = {
    KernelDtype.FP32: torch.float32,
    KernelDtype.BF16: torch.bfloat16,
    KernelDtype.FP16: torch.float16,
}


@dataclass(frozen=True)
class DeviceInfo:
    device: torch.device
    name: str  # ProfileMeta.device, e.g. "NVIDIA H200" or "cpu: AMD EPYC (2 logical cpus)"
    threads: int  # torch intra-op threads (CPU)
    count: int  # devices of this type on the machine (collectives need several)
    memory_budget_bytes: int  # largest working set one benchmark point may allocate

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def _available_memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def open_device(kind: str, threads: int | None = None, memory_fraction: float | None = None) -> DeviceInfo:
    """Select `cpu` or `cuda` (optionally `cuda:N`) and set torch's thread count (default: all cores).

    `memory_fraction` of the available memory (default: half of the host's free memory on CPU,
    80 % of the free GPU memory on CUDA) bounds one benchmark point's working set."""
    kind = kind.strip().lower()
    n_threads = threads if threads and threads > 0 else (os.cpu_count() or 1)
    torch.set_num_threads(n_threads)
    if kind == "cpu":
        budget = int(_available_memory_bytes() * (memory_fraction or 0.5))
        return DeviceInfo(torch.device("cpu"), f"cpu: {cpu_name()} ({os.cpu_count()} logical cpus)", n_threads, 1,
                          budget)
    if kind.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise GraphsimError(f"--device {kind}: {why} (torch {torch.__version__}); use --device cpu")
        dev = torch.device(kind)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        dev = torch.device("cuda", index)
        torch.cuda.set_device(dev)
        free, _total = torch.cuda.mem_get_info(dev)
        return DeviceInfo(dev, torch.cuda.get_device_name(dev), n_threads, torch.cuda.device_count(),
                          int(free * (memory_fraction or 0.8)))
    raise GraphsimError(f"unknown device '{kind}'; use --device cpu or --device cuda")


def torch_dtype(dtype: KernelDtype, what: str = "kernel") -> torch.dtype:
    """The torch dtype a 16/32-bit kernel runs in; other modes are `Unmeasurable` here."""
    t = _TORCH_DTYPES.get(dtype)
    if t is None:
        raise Unmeasurable(f"{what} in {dtype.value} has no plain torch op in the profiler")
    return t


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class OverBudget(Unmeasurable):
    """The point's working set does not fit the memory budget (the message is the same for every
    point of a device, so failures group by it; `detail` names the point)."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def check_budget(info: DeviceInfo, nbytes: float, what: str) -> None:
    if nbytes > info.memory_budget_bytes:
        raise OverBudget(f"working set over the memory budget ({info.memory_budget_bytes / 2**30:.1f} GiB on "
                         f"{info.name})", f"{what} needs {nbytes / 2**30:.1f} GiB")

"""Hardware specs: datasheet peaks for GPUs (profiles/hardware/*.json) and a measured local CPU.

A spec feeds the roofline fallback: max(flops / peak, bytes / bandwidth), plus interconnect
bandwidth and latency for collectives. GPU numbers are vendor datasheet figures (each JSON names its
source); peaks are *dense* (datasheet sparsity figures halved). The local CPU is measured with numpy
(`measure_cpu_spec`), not guessed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import Field

from graphsim.costing.dtypes import KernelDtype, PeakClass
from graphsim.costing.errors import HardwareSpecError
from graphsim.validation import Strict, read_json, validate


class DeviceKind(str, Enum):
    GPU = "gpu"
    CPU = "cpu"


class LinkKind(str, Enum):
    """How the GPUs of one node reach each other. What each kind lets vLLM run is decided in
    `costing.collectives.choose_all_reduce` (from vLLM's CustomAllreduce and SymmMemCommunicator)."""

    NVSWITCH = "nvswitch"  # every GPU on NVLink through NVSwitch: fully connected, NVLink multicast
    NVLINK = "nvlink"  # every GPU pair linked directly by NVLink (fully connected), no switch, no multicast
    PCIE_P2P = "pcie-p2p"  # PCIe only, with GPU peer-to-peer access
    PCIE = "pcie"  # PCIe only, no peer-to-peer: NCCL stages through host memory

    @property
    def p2p(self) -> bool:
        return self is not LinkKind.PCIE

    @property
    def fully_connected(self) -> bool:
        """vLLM's `current_platform.is_fully_connected`: NVLink between every pair of GPUs."""
        return self in (LinkKind.NVSWITCH, LinkKind.NVLINK)


# NCCL between GPUs without peer-to-peer access (LinkKind.PCIE) uses its SHM transport: every byte is staged
# through host memory by a proxy thread, at a fraction of the PCIe link and with a larger latency than a direct
# path. Public nccl-tests runs put it at a quarter of the link or below (NVIDIA/nccl issue 384: all-reduce bus
# bandwidth 3.9 GB/s on 2 GPUs over PCIe Gen3 x16, 15.75 GB/s per direction, NCCL_P2P_DISABLE=1). The share is
# FITTED by benchmarks/fit_engine_links.py together with the engine's per-sequence host time
# (serving/host.py V1_ENGINE_PER_SEQ_US) on the vLLM TP1 and TP2-without-P2P runs of its training set, the rest
# held out (docs/serving.md); the latency by benchmarks/fit_links.py (the link alone). A spec or --link-bandwidth
# that states the link's bandwidth is used as given.
PCIE_SHM_BANDWIDTH_SHARE = 0.25  # of the spec's PCIe bandwidth per direction
PCIE_SHM_LATENCY_US = 60.0  # per collective, replaces the spec's link latency


@dataclass(frozen=True)
class Topology:
    """Where a deployment's GPUs sit and what joins them: one link kind inside a node, a network between
    nodes. Bandwidths are per GPU and per direction."""

    link: LinkKind
    link_bandwidth_bytes_per_s: float
    link_latency_us: float
    gpus_per_node: int
    network_bandwidth_bytes_per_s: float = 0.0  # 0: no network (a group cannot span nodes)
    network_latency_us: float = 0.0

    def nodes(self, world_size: int) -> int:
        """Nodes a group of `world_size` GPUs spans (filled node by node)."""
        return max(1, -(-world_size // max(self.gpus_per_node, 1)))

    def describe(self) -> str:
        s = f"{self.link.value} {self.link_bandwidth_bytes_per_s / 1e9:,.0f} GB/s, {self.gpus_per_node} GPUs/node"
        if self.network_bandwidth_bytes_per_s > 0:
            s += (f"; network {self.network_bandwidth_bytes_per_s / 1e9:,.1f} GB/s per GPU, "
                  f"{self.network_latency_us:g} µs a network step")
        return s


@dataclass(frozen=True)
class HardwareSpec:
    id: str  # file stem, e.g. "h200_sxm"
    name: str  # e.g. "NVIDIA H200 SXM 141GB"
    kind: DeviceKind
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict[PeakClass, float]  # dense peaks; absent = no such hardware path
    interconnect: str = ""  # e.g. "NVLink 4", "PCIe Gen4 x16"
    interconnect_bandwidth_bytes_per_s: float = 0.0  # per device, one direction
    interconnect_latency_us: float = 0.0
    devices_per_node: int = 1
    source: str = ""  # where the numbers come from (datasheet URL, or how they were measured)
    notes: str = ""
    aliases: tuple[str, ...] = ()
    link: LinkKind | None = None  # the kind of `interconnect`; None: not stated (collectives run NCCL)
    pcie_bandwidth_bytes_per_s: float = 0.0  # host PCIe link per GPU, one direction
    network_bandwidth_bytes_per_s: float = 0.0  # between nodes, per GPU, one direction (0: none stated)
    network_latency_us: float = 0.0
    compute_capability: str = ""  # CUDA compute capability ("9.0"); vLLM keys its all-reduce limits on it
    link_measured: bool = False  # the interconnect figures are what NCCL achieves there (given), not the datasheet's
    l2_cache_bytes: int = 0  # on-chip L2 (0: not stated); serving/mixed_attention.py asks whether a working set fits
    cuda_memory_bytes: int = 0  # the total CUDA reports (cudaMemGetInfo), below the datasheet's size (0: not stated)

    @property
    def engine_memory_bytes(self) -> int:
        """The total vLLM sizes its KV budget from: `torch.cuda.mem_get_info()[1]` (vLLM 0.10.1
        vllm/v1/worker/gpu_worker.py `Worker.init_device`: requested_memory = MemorySnapshot().total_memory ×
        gpu_memory_utilization, `MemorySnapshot.measure` in vllm/utils/__init__.py; 0.33.0: v1/worker/utils.py
        `request_memory`), which the driver reports below the datasheet's size: the spec's `cuda_memory_bytes`
        where stated, else `memory_bytes`."""
        return self.cuda_memory_bytes or self.memory_bytes

    def topology(self) -> Topology:
        """The spec's interconnect as a `Topology` (no link kind stated: PCIe without peer access, the
        assumption that lets vLLM run nothing but NCCL). Without peer access NCCL stages through host memory:
        the datasheet PCIe figures become PCIE_SHM_* (unless the link's figures were given as measured)."""
        link = self.link or LinkKind.PCIE
        bw, latency = self.interconnect_bandwidth_bytes_per_s, self.interconnect_latency_us
        if not link.p2p and not self.link_measured:
            bw, latency = bw * PCIE_SHM_BANDWIDTH_SHARE, PCIE_SHM_LATENCY_US
        return Topology(link, bw, latency, self.devices_per_node, self.network_bandwidth_bytes_per_s,
                        self.network_latency_us)

    def with_topology(self, link: LinkKind | None = None, *, link_bandwidth_gb_s: float | None = None,
                      gpus_per_node: int | None = None, network_bandwidth_gb_s: float | None = None,
                      network_latency_us: float | None = None) -> HardwareSpec:
        """This spec deployed on another interconnect (the CLI's --interconnect, --gpus-per-node, ...).

        A PCIe link without a bandwidth given runs at the spec's `pcie_bandwidth_bytes_per_s`; an NVLink one
        needs the spec to have NVLink (or a bandwidth given). Raises HardwareSpecError naming the fix."""
        bw, what = self.interconnect_bandwidth_bytes_per_s, self.interconnect
        if link is not None and link is not self.link:
            if link_bandwidth_gb_s is None:
                if not link.fully_connected:
                    if self.pcie_bandwidth_bytes_per_s <= 0:
                        raise HardwareSpecError(f"the {self.id} spec states no PCIe bandwidth; give --link-bandwidth "
                                                "(GB/s per GPU, one direction)")
                    bw = self.pcie_bandwidth_bytes_per_s
                    what = f"PCIe ({bw / 1e9:,.0f} GB/s per direction, {link.value})"
                    if not link.p2p:
                        what = (f"PCIe without peer access ({bw / 1e9:,.0f} GB/s per direction; NCCL through host "
                                f"memory at {PCIE_SHM_BANDWIDTH_SHARE:g} of it, {PCIE_SHM_LATENCY_US:g} µs, fitted)")
                elif self.link is None or not self.link.fully_connected:
                    raise HardwareSpecError(f"the {self.id} spec has no NVLink; give --link-bandwidth (GB/s per GPU, "
                                            f"one direction) with --interconnect {link.value}")
            what = f"{link.value} (given)" if link_bandwidth_gb_s is not None else what
        if link_bandwidth_gb_s is not None:
            bw = link_bandwidth_gb_s * 1e9
            what = f"{(link or self.link or LinkKind.PCIE).value} {link_bandwidth_gb_s:g} GB/s (given)"
        return dataclasses.replace(
            self, link=link or self.link, interconnect=what, interconnect_bandwidth_bytes_per_s=bw,
            link_measured=self.link_measured if link_bandwidth_gb_s is None else True,
            devices_per_node=gpus_per_node or self.devices_per_node,
            network_bandwidth_bytes_per_s=(network_bandwidth_gb_s * 1e9 if network_bandwidth_gb_s is not None
                                           else self.network_bandwidth_bytes_per_s),
            network_latency_us=network_latency_us if network_latency_us is not None else self.network_latency_us)

    def peak_flops(self, what: KernelDtype | PeakClass) -> float | None:
        """Dense peak FLOP/s for a dtype, or None where the hardware has no such path.

        BF16 and FP16 stand in for each other; a CPU spec uses its FP32 peak for any dtype it
        did not measure (CPU kernels of 16-bit types do not run faster than FP32 in eager torch)."""
        cls = what.peak_class if isinstance(what, KernelDtype) else what
        if cls in self.peak_flops_per_s:
            return self.peak_flops_per_s[cls]
        twin = {PeakClass.BF16: PeakClass.FP16, PeakClass.FP16: PeakClass.BF16}.get(cls)
        if twin is not None and twin in self.peak_flops_per_s:
            return self.peak_flops_per_s[twin]
        if self.kind is DeviceKind.CPU:
            return self.peak_flops_per_s.get(PeakClass.FP32)
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind.value,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "peak_dense_flops_per_s": {k.value: v for k, v in self.peak_flops_per_s.items()},
            "interconnect": self.interconnect,
            "interconnect_bandwidth_bytes_per_s": self.interconnect_bandwidth_bytes_per_s,
            "interconnect_latency_us": self.interconnect_latency_us,
            "devices_per_node": self.devices_per_node,
            "link": self.link.value if self.link else None,
            "pcie_bandwidth_bytes_per_s": self.pcie_bandwidth_bytes_per_s,
            "network_bandwidth_bytes_per_s": self.network_bandwidth_bytes_per_s,
            "network_latency_us": self.network_latency_us,
            "compute_capability": self.compute_capability,
            "link_measured": self.link_measured,
            "l2_cache_bytes": self.l2_cache_bytes,
            "cuda_memory_bytes": self.cuda_memory_bytes,
            "source": self.source,
            "notes": self.notes,
            "aliases": list(self.aliases),
        }

    @classmethod
    def from_json(cls, data: object, origin: str = "") -> HardwareSpec:
        """A spec from its JSON document, checked field by field (HardwareSpecError naming every problem)."""
        where = origin or (str(data.get("id", "?")) if isinstance(data, dict) else "?")
        try:
            f = validate(HardwareSpecFile, data, f"malformed hardware spec {where}",
                         "see graphsim/profiles/hardware/*.json for the format")
        except ValueError as e:
            raise HardwareSpecError(str(e)) from None
        return cls(id=f.id, name=f.name, kind=f.kind, memory_bytes=f.memory_bytes,
                   memory_bandwidth_bytes_per_s=f.memory_bandwidth_bytes_per_s,
                   peak_flops_per_s=dict(f.peak_dense_flops_per_s), interconnect=f.interconnect,
                   interconnect_bandwidth_bytes_per_s=f.interconnect_bandwidth_bytes_per_s,
                   interconnect_latency_us=f.interconnect_latency_us, devices_per_node=f.devices_per_node,
                   source=f.source, notes=f.notes, aliases=f.aliases, link=f.link,
                   pcie_bandwidth_bytes_per_s=f.pcie_bandwidth_bytes_per_s,
                   network_bandwidth_bytes_per_s=f.network_bandwidth_bytes_per_s,
                   network_latency_us=f.network_latency_us, compute_capability=f.compute_capability,
                   link_measured=f.link_measured, l2_cache_bytes=f.l2_cache_bytes,
                   cuda_memory_bytes=f.cuda_memory_bytes)


# Upper bounds are sanity limits, each far above any device shipped today (an H200 has 141 GB at
# 4.8 TB/s and ~2 PFLOP/s dense fp8; a B200 192 GB at 8 TB/s, per the specs in profiles/hardware/):
# a value past them is a unit slip (bits for bytes, TB for B), not a faster GPU.
_PEAK = Annotated[float, Field(gt=0, le=1e17)]  # 100 EFLOP/s


class HardwareSpecFile(Strict):
    """The JSON form of a hardware spec (profiles/hardware/*.json, or a user's file)."""

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    kind: DeviceKind
    memory_bytes: int = Field(gt=0, le=1 << 50)  # 1 PiB
    memory_bandwidth_bytes_per_s: float = Field(gt=0, le=1e15)  # 1 PB/s
    peak_dense_flops_per_s: dict[PeakClass, _PEAK] = Field(min_length=1)
    interconnect: str = ""
    interconnect_bandwidth_bytes_per_s: float = Field(0.0, ge=0, le=1e15)
    interconnect_latency_us: float = Field(0.0, ge=0, le=1e6)  # 1 s
    devices_per_node: int = Field(1, ge=1, le=4096)
    link: LinkKind | None = None  # nvswitch, nvlink, pcie-p2p or pcie: the kind of `interconnect`
    pcie_bandwidth_bytes_per_s: float = Field(0.0, ge=0, le=1e15)
    network_bandwidth_bytes_per_s: float = Field(0.0, ge=0, le=1e15)  # per GPU, between nodes
    network_latency_us: float = Field(0.0, ge=0, le=1e6)
    compute_capability: str = Field("", pattern=r"^(\d+\.\d+)?$")
    link_measured: bool = False  # interconnect_* are NCCL's achieved figures on this link, not the datasheet's
    l2_cache_bytes: int = Field(0, ge=0, le=1 << 34)  # on-chip L2 cache (0: not stated)
    cuda_memory_bytes: int = Field(0, ge=0, le=1 << 50)  # total memory as CUDA reports it (0: memory_bytes)
    source: str = ""
    notes: str = ""
    aliases: tuple[str, ...] = ()


class InterconnectOverrides(Strict):
    """A deployment's interconnect where it differs from the spec's (CLI: --interconnect, --link-bandwidth,
    --gpus-per-node, --network-bandwidth, --network-latency-us; a deployment document's `interconnect`)."""

    link: LinkKind | None = None
    link_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=1e6)  # per GPU, one direction
    gpus_per_node: int | None = Field(default=None, ge=1, le=4096)
    network_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=1e6)  # per GPU, one direction
    network_latency_us: float | None = Field(default=None, ge=0, le=1e6)

    def apply(self, spec: HardwareSpec) -> HardwareSpec:
        """`spec` on this interconnect (itself when nothing is overridden)."""
        if all(v is None for v in self.model_dump().values()):
            return spec
        return spec.with_topology(self.link, link_bandwidth_gb_s=self.link_bandwidth_gb_s,
                                  gpus_per_node=self.gpus_per_node, network_bandwidth_gb_s=self.network_bandwidth_gb_s,
                                  network_latency_us=self.network_latency_us)


def _hardware_dir():
    return resources.files("graphsim.profiles") / "hardware"


def list_hardware() -> list[HardwareSpec]:
    """The shipped specs (profiles/hardware/*.json), sorted by id."""
    out = []
    for entry in _hardware_dir().iterdir():
        if entry.name.endswith(".json"):
            out.append(HardwareSpec.from_json(json.loads(entry.read_text()), entry.name))
    return sorted(out, key=lambda s: s.id)


def load_hardware(name: str) -> HardwareSpec:
    """A spec by id (`h200_sxm`), alias (`h200`, case-insensitive) or path to a JSON file."""
    if name.endswith(".json") or os.sep in name:
        p = Path(name)
        if not p.is_file():
            raise HardwareSpecError(f"no hardware spec file '{name}'")
        try:
            data = read_json(p, "hardware spec")
        except ValueError as e:
            raise HardwareSpecError(f"{e}; pass a hardware spec .json (see graphsim/profiles/hardware/)") from None
        return HardwareSpec.from_json(data, str(p))
    want = name.strip().lower().replace("-", "_")
    specs = list_hardware()
    for spec in specs:
        if want == spec.id or want in (a.lower().replace("-", "_") for a in spec.aliases):
            return spec
    known = ", ".join(s.id for s in specs)
    raise HardwareSpecError(f"unknown hardware '{name}'; known: {known} (or pass a spec .json path)")


def save_hardware(spec: HardwareSpec, path: str | os.PathLike[str]) -> Path:
    from graphsim.atomic import atomic_writer

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(p) as f:  # whole or not at all
        f.write(json.dumps(spec.to_json(), indent=2) + "\n")
    return p


# ---- the local CPU, measured ---------------------------------------------------------------------


@dataclass(frozen=True)
class CpuMeasureSettings:
    matmul_n: int = 2048  # square fp32 matmul size
    copy_bytes: int = 256 * 2**20  # size of each array in the copy test
    repeats: int = 5  # best of


def cpu_name() -> str:
    """This machine's CPU model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_cpu_spec(settings: CpuMeasureSettings = CpuMeasureSettings(), spec_id: str = "local_cpu") -> HardwareSpec:
    """Measure this machine's peak FP32 GEMM FLOP/s and memory copy bandwidth with numpy.

    Both are best-of-`repeats` achieved figures (what numpy's BLAS and a large copy reach), which
    is the ceiling the CPU profiler's eager kernels can approach."""
    n = settings.matmul_n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    gemm_s = _best_seconds(lambda: np.matmul(a, b, out=c), settings.repeats)
    fp32_flops = 2.0 * n**3 / gemm_s

    elems = settings.copy_bytes // 8
    src = np.ones(elems, dtype=np.float64)
    dst = np.empty_like(src)
    copy_s = _best_seconds(lambda: np.copyto(dst, src), settings.repeats)
    bandwidth = 2.0 * src.nbytes / copy_s  # read + write

    stamp = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    source = (f"measured with numpy {np.__version__} on {socket.gethostname()} at {stamp}: "
              f"fp32 matmul {n}x{n}x{n} best of {settings.repeats}; "
              f"copy of {settings.copy_bytes // 2**20} MiB best of {settings.repeats} (read+write bytes)")
    return HardwareSpec(
        id=spec_id,
        name=f"{cpu_name()} ({os.cpu_count()} logical cpus)",
        kind=DeviceKind.CPU,
        memory_bytes=_memory_bytes(),
        memory_bandwidth_bytes_per_s=bandwidth,
        peak_flops_per_s={PeakClass.FP32: fp32_flops},
        source=source,
        notes="achieved, not theoretical; other dtypes fall back to the fp32 peak",
    )

"""What every kernel benchmark provides, and tensor helpers shared by them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch

from graphsim.costing.kernels import Point
from graphsim.ir.kernel import KernelAttrs
from graphsim.profiles.profiler.device import DeviceInfo

P_contra = TypeVar("P_contra", bound=Point, contravariant=True)
K = TypeVar("K")


class KernelBench(Protocol[P_contra]):
    """A kernel geometry ready to time: `prepare(point)` allocates the inputs of one grid point and
    returns the call to time (raising `Unmeasurable` when that point cannot run here)."""

    label: str  # what runs, recorded in the row's `kernel` column
    notes: tuple[str, ...]  # approximations a reader of the numbers must know

    def prepare(self, point: P_contra) -> Callable[[], Any]: ...


@dataclass
class BenchInputs(Generic[K]):
    """What every bench is made from: its table key, the fused kernel it stands for and the device.
    A bench subclasses this with its key type and fills `label`/`notes` in `__post_init__`."""

    key: K
    attrs: KernelAttrs
    info: DeviceInfo
    label: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """The bench's own set-up (dtype, label, notes; `Unmeasurable` when it cannot run here)."""


def randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(shape, dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def positive(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Values in [0.5, 1.5): safe for rsqrt, log, sqrt, pow with fractional exponents."""
    return (torch.rand(shape, dtype=torch.float32, device=device) + 0.5).to(dtype)

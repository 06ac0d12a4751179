"""GEMM rows (`GemmKey(n, k, dtype)`, `GemmPoint(m)`): `F.linear` of an [m, k] activation with an
[n, k] weight, as vLLM's UnquantizedLinearMethod and HF eager both call it. FP8 (per-tensor
scales) runs `torch._scaled_mm` on a CUDA device that supports it; other quantised modes and FP8
on CPU are reported as not measurable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernels import GemmKey, GemmPoint
from graphsim.ir.geometry import GemmGeometry
from graphsim.profiles.profiler.base import BenchInputs, randn
from graphsim.profiles.profiler.device import Unmeasurable, check_budget, element_size, torch_dtype


class GemmBench(BenchInputs[GemmKey]):
    def __post_init__(self) -> None:
        n, k, dev = self.key.n, self.key.k, self.info.device
        self.fp8 = self.key.dtype is KernelDtype.FP8
        if self.fp8:
            if not self.info.is_cuda:
                raise Unmeasurable("fp8 GEMM needs a CUDA device with FP8 tensor cores; skipped on CPU")
            if not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability(dev) < (8, 9):
                raise Unmeasurable(f"fp8 GEMM needs torch._scaled_mm on compute capability >= 8.9 ({self.info.name})")
            self.dtype = torch.bfloat16
            self.label = "torch._scaled_mm e4m3 (per-tensor scales) → bf16"
        else:
            self.dtype = torch_dtype(self.key.dtype, "GEMM")
            self.label = "aten::linear"
        esize = 1 if self.fp8 else element_size(self.dtype)
        check_budget(self.info, n * k * esize, f"GEMM weight {n}x{k}")
        w = randn((n, k), self.dtype, dev, 0.02)
        geo = self.attrs.geometry
        bias = isinstance(geo, GemmGeometry) and geo.bias and not self.fp8
        self.bias = randn((n,), self.dtype, dev) if bias else None
        if self.fp8:
            self.weight = w.to(torch.float8_e4m3fn)  # [n, k] row-major: .t() is the column-major [k, n] operand
            self.scale = torch.ones((), dtype=torch.float32, device=dev)
            del w
        else:
            self.weight = w

    def prepare(self, point: GemmPoint) -> Callable[[], Any]:
        m, n, k = point.m, self.key.n, self.key.k
        esize = element_size(self.dtype)
        check_budget(self.info, (m * k + m * n) * esize + n * k * (1 if self.fp8 else esize), f"GEMM m={m} n={n} k={k}")
        x = randn((m, k), self.dtype, self.info.device)
        if self.fp8:
            x8 = x.to(torch.float8_e4m3fn)
            w8, s = self.weight, self.scale
            return lambda: torch._scaled_mm(x8, w8.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)  # pyright: ignore[reportPrivateImportUsage]
        w, b = self.weight, self.bias
        return lambda: F.linear(x, w, b)

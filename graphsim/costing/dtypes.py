"""Kernel dtypes: the numeric mode a kernel runs in (a quantisation scheme, not just an element type).

A profile.db row is keyed on these. `fp8_block` (block-scaled FP8) and `int4_wo` (4-bit weights,
16-bit activations) time differently from plain `fp8` / `int8`, so they are separate members.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache

from graphsim.ir.tensor import DTYPE_ALIASES, DType


class PeakClass(str, Enum):
    """Which tensor-core peak a dtype runs at; keys of `HardwareSpec.peak_flops_per_s`."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    FP4 = "fp4"


class KernelDtype(str, Enum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"  # e4m3, per-tensor or per-channel scales
    FP8_BLOCK = "fp8_block"  # e4m3 with block scales (DeepSeek-style 128x128)
    FP8_WO = "fp8_wo"  # e4m3 weights, 16-bit activations (modelopt FP8_PB_WO, compressed-tensors W8A16 fp8)
    INT8 = "int8"
    INT8_SQ = "int8_sq"  # SmoothQuant W8A8
    INT8_WO = "int8_wo"  # 8-bit weights, 16-bit activations
    INT4_WO = "int4_wo"  # 4-bit weights, 16-bit activations
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"
    W4A16_MXFP4 = "w4a16_mxfp4"
    W4A8_MXFP4_MXFP8 = "w4a8_mxfp4_mxfp8"
    W4AFP8 = "w4afp8"

    @property
    def element_bytes(self) -> float:
        """Bytes per stored element of the weights / payload (scales not counted)."""
        return _ELEMENT_BYTES[self]

    @property
    def weight_bytes(self) -> float:
        """Bytes per stored weight element with the format's fixed-group scales: NVFP4 adds one e4m3 scale
        per 16 elements (vLLM quantization/modelopt.py ModelOptNvFp4LinearMethod.create_weights), MX formats
        one e8m0 scale per 32 (OCP MX v1.0). Formats whose scale group the key does not fix (int4 groups,
        fp8 blocks / channels, a few bytes per matrix) count the elements only."""
        return self.element_bytes + _SCALE_BYTES.get(self, 0.0)

    @property
    def activation_bytes(self) -> float:
        """Bytes per activation element the kernel reads and writes."""
        return _ACTIVATION_BYTES.get(self, self.element_bytes)

    @property
    def peak_class(self) -> PeakClass:
        return _PEAK[self]


_ELEMENT_BYTES: dict[KernelDtype, float] = {
    KernelDtype.FP32: 4, KernelDtype.BF16: 2, KernelDtype.FP16: 2, KernelDtype.FP8: 1,
    KernelDtype.FP8_BLOCK: 1, KernelDtype.FP8_WO: 1, KernelDtype.INT8: 1, KernelDtype.INT8_SQ: 1, KernelDtype.INT8_WO: 1,
    KernelDtype.INT4_WO: 0.5, KernelDtype.NVFP4: 0.5, KernelDtype.MXFP4: 0.5,
    KernelDtype.W4A16_MXFP4: 0.5, KernelDtype.W4A8_MXFP4_MXFP8: 0.5, KernelDtype.W4AFP8: 0.5,
}
_SCALE_BYTES: dict[KernelDtype, float] = {
    KernelDtype.NVFP4: 1 / 16, KernelDtype.MXFP4: 1 / 32, KernelDtype.W4A16_MXFP4: 1 / 32,
    KernelDtype.W4A8_MXFP4_MXFP8: 1 / 32,
}
_ACTIVATION_BYTES: dict[KernelDtype, float] = {
    KernelDtype.FP8_WO: 2, KernelDtype.INT8_WO: 2, KernelDtype.INT4_WO: 2, KernelDtype.W4A16_MXFP4: 2,
    KernelDtype.W4A8_MXFP4_MXFP8: 1, KernelDtype.W4AFP8: 1,
}
_PEAK: dict[KernelDtype, PeakClass] = {
    KernelDtype.FP32: PeakClass.FP32, KernelDtype.BF16: PeakClass.BF16, KernelDtype.FP16: PeakClass.FP16,
    KernelDtype.FP8: PeakClass.FP8, KernelDtype.FP8_BLOCK: PeakClass.FP8, KernelDtype.FP8_WO: PeakClass.BF16,
    KernelDtype.INT8: PeakClass.INT8,
    KernelDtype.INT8_SQ: PeakClass.INT8, KernelDtype.INT8_WO: PeakClass.BF16,
    KernelDtype.INT4_WO: PeakClass.BF16, KernelDtype.NVFP4: PeakClass.FP4, KernelDtype.MXFP4: PeakClass.FP4,
    KernelDtype.W4A16_MXFP4: PeakClass.BF16, KernelDtype.W4A8_MXFP4_MXFP8: PeakClass.FP8,
    KernelDtype.W4AFP8: PeakClass.FP8,
}

# An element type's plain kernel mode. Every spelling of an element type (torch, HF configs, vLLM's
# --kv-cache-dtype) is read through the IR's one alias table; an e5m2 cache moves the same bytes at
# the same fp8 peak as e4m3, so both are `fp8`. Element types no kernel table holds (int4 without a
# scheme, 64-bit, bool, complex) have no entry.
_FROM_ELEMENT: dict[DType, KernelDtype] = {
    DType.FLOAT32: KernelDtype.FP32, DType.BFLOAT16: KernelDtype.BF16, DType.FLOAT16: KernelDtype.FP16,
    DType.FLOAT8_E4M3: KernelDtype.FP8, DType.FLOAT8_E5M2: KernelDtype.FP8, DType.INT8: KernelDtype.INT8,
    DType.FLOAT4: KernelDtype.NVFP4,
}
# aiconfigurator's name for SmoothQuant W8A8.
_KERNEL_ALIASES: dict[str, KernelDtype] = {"sq": KernelDtype.INT8_SQ}


def kernel_dtype_of(dtype: DType) -> KernelDtype:
    """The plain kernel mode of an element type (ValueError for types no kernel table holds)."""
    if dtype not in _FROM_ELEMENT:
        raise ValueError(f"no kernel dtype runs {dtype.label} elements")
    return _FROM_ELEMENT[dtype]


@lru_cache(maxsize=256)
def parse_kernel_dtype(name: str) -> KernelDtype:
    """`bfloat16`, `torch.bfloat16`, `bf16`, `half`, `fp8_block`, ... → KernelDtype (ValueError if unknown)."""
    key = name.strip().lower().removeprefix("torch.")
    if key in _KERNEL_ALIASES:
        return _KERNEL_ALIASES[key]
    element = DTYPE_ALIASES.get(key) or next((d for d in DType if d.value == key), None)
    if element is not None and element in _FROM_ELEMENT:
        return _FROM_ELEMENT[element]
    try:
        return KernelDtype(key)
    except ValueError:
        known = ", ".join(d.value for d in KernelDtype)
        raise ValueError(f"unknown kernel dtype '{name}' (known: {known})") from None

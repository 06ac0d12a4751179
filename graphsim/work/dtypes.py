"""Element types and the precision a step is accounted in.

`DType` is a closed enum of storage types with their size in bytes per element (fractional for
4-bit types). `Precision` says which type holds the parameters, the KV cache and the recurrent
state, and which checkpoint quantization (if any) applies to the weight matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from graphsim.errors import ConfigError

if TYPE_CHECKING:
    from graphsim.work.quant import Quantization


class DType(Enum):
    FP32 = ("fp32", 4.0)
    BF16 = ("bf16", 2.0)
    FP16 = ("fp16", 2.0)
    FP8_E4M3 = ("fp8", 1.0)
    FP8_E5M2 = ("fp8_e5m2", 1.0)
    INT8 = ("int8", 1.0)
    INT4 = ("int4", 0.5)

    def __init__(self, label: str, bytes_per_element: float) -> None:
        self.label = label
        self.bytes_per_element = bytes_per_element


_ALIASES: dict[str, DType] = {
    "fp32": DType.FP32,
    "float32": DType.FP32,
    "float": DType.FP32,
    "bf16": DType.BF16,
    "bfloat16": DType.BF16,
    "fp16": DType.FP16,
    "float16": DType.FP16,
    "half": DType.FP16,
    "fp8": DType.FP8_E4M3,
    "fp8_e4m3": DType.FP8_E4M3,
    "e4m3": DType.FP8_E4M3,
    "float8_e4m3fn": DType.FP8_E4M3,
    "fp8_e5m2": DType.FP8_E5M2,
    "e5m2": DType.FP8_E5M2,
    "float8_e5m2": DType.FP8_E5M2,
    "int8": DType.INT8,
    "int4": DType.INT4,
}


def parse_dtype(text: str, what: str = "dtype") -> DType:
    """Parse a dtype name as written in configs or on the command line (`bf16`, `bfloat16`, `fp8`…)."""
    key = str(text).strip().lower().removeprefix("torch.")
    if key in _ALIASES:
        return _ALIASES[key]
    names = ", ".join(sorted({d.label for d in DType}))
    raise ConfigError(f"unknown {what} '{text}'; use one of {names}")


@dataclass(frozen=True)
class Precision:
    """Storage types for one accounting: parameters, KV cache, recurrent state, weight quantization.

    `weight` holds every parameter the quantization does not cover (norms, embeddings, biases,
    routers, and all matrices when `quant` is None).
    """

    weight: DType
    kv: DType
    state: DType
    quant: Quantization | None = None
    weight_source: str = "config"

    def describe(self) -> dict[str, str]:
        return {
            "weight": self.weight.label,
            "weight_source": self.weight_source,
            "kv": self.kv.label,
            "state": self.state.label,
            "quantization": self.quant.describe() if self.quant else "none",
        }

"""Element types and the precision a step is accounted in.

Element types are the IR's one `DType` enum (`graphsim.ir.tensor`: size in bytes per element,
fractional for 4-bit types, and the name configs and vLLM use as `label`). `Precision` says which type
holds the parameters, the KV cache and the recurrent
state, and which checkpoint quantization (if any) applies to the weight matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphsim.errors import ConfigError
from graphsim.ir.tensor import DTYPE_ALIASES, DType

if TYPE_CHECKING:
    from graphsim.work.quant import Quantization


# The accountant's storage types: the element types a parameter, KV cache or recurrent state is
# accounted in. Other element types (bool, complex, 64-bit) never hold model state.
ACCOUNTED: tuple[DType, ...] = (
    DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.FLOAT8_E4M3, DType.FLOAT8_E5M2, DType.INT8, DType.INT4,
)


def parse_dtype(text: str, what: str = "dtype") -> DType:
    """Parse a dtype name as written in configs or on the command line (`bf16`, `bfloat16`, `fp8`…)."""
    key = str(text).strip().lower().removeprefix("torch.")
    dtype = DTYPE_ALIASES.get(key)
    if dtype is None or dtype not in ACCOUNTED:
        names = ", ".join(sorted(d.label for d in ACCOUNTED))
        raise ConfigError(f"unknown {what} '{text}'; use one of {names}")
    return dtype


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
    kv_source: str = "parameter dtype"  # or "--kv-dtype", or "checkpoint" (kv_cache_quant_algo / kv_cache_scheme)

    def describe(self) -> dict[str, str]:
        return {
            "weight": self.weight.label,
            "weight_source": self.weight_source,
            "kv": self.kv.label,
            "kv_source": self.kv_source,
            "state": self.state.label,
            "quantization": self.quant.describe() if self.quant else "none",
        }

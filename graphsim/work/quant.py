"""Checkpoint weight quantization (`quantization_config`) and the stored bytes of a weight.

Supported methods, from the config's `quant_method`:

- `fp8` with `weight_block_size [bo, bi]` (DeepSeek-V3): 1 byte per element plus one fp32 scale per
  `bo × bi` block, `ceil(out/bo) · ceil(in/bi)` scales per matrix. Without a block size: one
  fp32 scale per matrix.
- `mxfp4` (gpt-oss): 4-bit elements plus one 8-bit shared exponent per 32 elements along the input
  dimension, i.e. 4.25 bits per element when the input dimension is a multiple of 32.

Only weight *matrices* that a checkpoint quantizes are covered (linear layers and expert matrices;
not routers, embeddings, the LM head, norms, biases or vectors), minus the modules the config's
`modules_to_not_convert` names. Everything else is stored in the precision's `weight` dtype.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from graphsim.errors import ConfigError

FP32_SCALE_BYTES = 4
MX_BLOCK = 32
MX_SCALE_BYTES = 1


class QuantMethod(Enum):
    FP8 = "fp8"
    MXFP4 = "mxfp4"


@dataclass(frozen=True)
class Quantization:
    method: QuantMethod
    block_size: tuple[int, int] | None = None  # fp8 (rows, cols) per scale; None = one scale per matrix
    not_convert: tuple[str, ...] = ()

    def describe(self) -> str:
        text = self.method.value
        if self.block_size:
            text += f" block {self.block_size[0]}x{self.block_size[1]}"
        if self.not_convert:
            text += f" (not converted: {', '.join(self.not_convert)})"
        return text

    def covers(self, module_path: str) -> bool:
        """False when `modules_to_not_convert` names this module (or a module above it)."""
        return not any(_matches(module_path, pattern) for pattern in self.not_convert)

    def matrix_bytes(self, out_features: int, in_features: int) -> float:
        """Stored bytes of one quantized (out × in) matrix, scales included."""
        elements = out_features * in_features
        if self.method is QuantMethod.FP8:
            if self.block_size is None:
                return elements * 1 + FP32_SCALE_BYTES
            bo, bi = self.block_size
            scales = math.ceil(out_features / bo) * math.ceil(in_features / bi)
            return elements * 1 + scales * FP32_SCALE_BYTES
        # MXFP4: two elements per byte, one E8M0 scale per 32 input elements of each row.
        return elements * 0.5 + out_features * math.ceil(in_features / MX_BLOCK) * MX_SCALE_BYTES


def _matches(path: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], path) is not None
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*")
    return f".{pattern}." in f".{path}."


def parse_quantization(cfg: dict[str, Any]) -> Quantization | None:
    """Read `quantization_config`; None when the checkpoint is not quantized."""
    raw = cfg.get("quantization_config")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("quantization_config is not a JSON object; fix or remove it")
    method = str(raw.get("quant_method", "")).lower()
    not_convert = tuple(str(m) for m in (raw.get("modules_to_not_convert") or ()))
    if method == QuantMethod.FP8.value:
        block = raw.get("weight_block_size")
        if block is not None:
            if (
                not isinstance(block, (list, tuple))
                or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
            ):
                raise ConfigError(
                    f"quantization_config.weight_block_size {block!r} is not two positive integers; fix it"
                )
            block = (block[0], block[1])
        return Quantization(QuantMethod.FP8, block, not_convert)
    if method == QuantMethod.MXFP4.value:
        return Quantization(QuantMethod.MXFP4, None, not_convert)
    supported = ", ".join(m.value for m in QuantMethod)
    raise ConfigError(
        f"quantization_config.quant_method '{method}' is not supported (supported: {supported}); "
        "pass --ignore-quant to account the weights in --dtype"
    )

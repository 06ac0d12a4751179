"""Tensor types: dtypes with (possibly fractional) bytes per element, symbolic dims, TensorSpec."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache, reduce

import sympy

# Workload symbols. T = tokens in the step (Σ q_len over the batch).
T = sympy.Symbol("T", positive=True, integer=True)
WORKLOAD_SYMBOLS: dict[str, sympy.Symbol] = {"T": T}

Dim = int | sympy.Expr


class DType(str, Enum):
    FLOAT32 = "f32"
    FLOAT16 = "f16"
    BFLOAT16 = "bf16"
    FLOAT8_E4M3 = "f8e4m3"
    FLOAT8_E5M2 = "f8e5m2"
    FLOAT4 = "f4"  # mxfp4 / nvfp4 payload
    FLOAT64 = "f64"
    INT64 = "i64"
    INT32 = "i32"
    INT16 = "i16"
    INT8 = "i8"
    UINT8 = "u8"
    INT4 = "i4"
    BOOL = "bool"
    COMPLEX64 = "c64"

    @property
    def bytes(self) -> float:
        return _DTYPE_BYTES[self]

    @property
    def bytes_per_element(self) -> float:
        """Bytes per element as a float (the accountant's arithmetic; `bytes` keeps ints for exact shapes)."""
        return float(_DTYPE_BYTES[self])

    @property
    def label(self) -> str:
        """The name configs and vLLM's flags use (`bf16`, `fp8`, `fp8_e5m2`, `int4`, …)."""
        return _LABELS[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS


_DTYPE_BYTES = {
    DType.FLOAT32: 4, DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.FLOAT8_E4M3: 1,
    DType.FLOAT8_E5M2: 1, DType.FLOAT4: 0.5, DType.FLOAT64: 8, DType.INT64: 8, DType.INT32: 4,
    DType.INT16: 2, DType.INT8: 1, DType.UINT8: 1, DType.INT4: 0.5, DType.BOOL: 1,
    DType.COMPLEX64: 8,
}
_LABELS = {
    DType.FLOAT32: "fp32", DType.FLOAT16: "fp16", DType.BFLOAT16: "bf16", DType.FLOAT8_E4M3: "fp8",
    DType.FLOAT8_E5M2: "fp8_e5m2", DType.FLOAT4: "fp4", DType.FLOAT64: "fp64", DType.INT64: "int64",
    DType.INT32: "int32", DType.INT16: "int16", DType.INT8: "int8", DType.UINT8: "uint8", DType.INT4: "int4",
    DType.BOOL: "bool", DType.COMPLEX64: "complex64",
}
_FLOATS = {DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT8_E4M3, DType.FLOAT8_E5M2,
           DType.FLOAT4, DType.FLOAT64}

# Config / torch / vLLM spellings → DType: the one alias table (the accountant and the kernel dtypes read it too).
DTYPE_ALIASES: dict[str, DType] = {
    "float32": DType.FLOAT32, "float": DType.FLOAT32, "fp32": DType.FLOAT32,
    "float16": DType.FLOAT16, "half": DType.FLOAT16, "fp16": DType.FLOAT16,
    "bfloat16": DType.BFLOAT16, "bf16": DType.BFLOAT16,
    "float8_e4m3fn": DType.FLOAT8_E4M3, "fp8": DType.FLOAT8_E4M3, "float8": DType.FLOAT8_E4M3,
    "fp8_e4m3": DType.FLOAT8_E4M3, "e4m3": DType.FLOAT8_E4M3,
    "float8_e5m2": DType.FLOAT8_E5M2, "fp8_e5m2": DType.FLOAT8_E5M2, "e5m2": DType.FLOAT8_E5M2,
    "float64": DType.FLOAT64, "double": DType.FLOAT64,
    "int64": DType.INT64, "long": DType.INT64, "int32": DType.INT32, "int": DType.INT32,
    "int16": DType.INT16, "int8": DType.INT8, "uint8": DType.UINT8, "bool": DType.BOOL,
    "complex64": DType.COMPLEX64, "fp4": DType.FLOAT4, "int4": DType.INT4,
}


def parse_dtype(name: str) -> DType:
    key = name.lower().removeprefix("torch.")
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    try:
        return DType(key)
    except ValueError:
        raise ValueError(f"unknown dtype '{name}'") from None


def dim_to_str(d: Dim) -> str:
    return str(d)


def dim_symbol(name: str) -> sympy.Symbol:
    """The symbol for a dim named `name`: a workload symbol (T) or a positive-integer symbol.

    Every symbolic dim is a positive integer, so symbols made here compare equal to those that
    `parse_dim` reads back from a graph file.
    """
    if name in WORKLOAD_SYMBOLS:
        return WORKLOAD_SYMBOLS[name]
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"dim symbol name '{name}' is not an identifier")
    return sympy.Symbol(name, positive=True, integer=True)


# Functions that may appear in a dim expression; every other name is a dim symbol.
_DIM_FUNCTIONS = {"Max": sympy.Max, "Min": sympy.Min, "floor": sympy.floor, "ceiling": sympy.ceiling,
                  "Mod": sympy.Mod}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def parse_dim(s: str | int) -> Dim:
    if isinstance(s, int):
        return s
    if s.isdigit():  # a plain size, most dims of a saved graph: no sympy parse
        return int(s)
    return _parse_dim_expr(s)


@lru_cache(maxsize=4096)
def _parse_dim_expr(s: str) -> Dim:
    """A dim expression (`T`, `Max(1, T)`); cached: a graph repeats a few expressions many times, and sympy
    expressions are immutable."""
    # Bind every name to a positive-integer symbol, so that names sympy would otherwise read as
    # its own constants or functions (E, I, N, S, beta, ...) stay dims, and a parsed symbol equals
    # the one that was written (same assumptions).
    names = {n: _DIM_FUNCTIONS.get(n) or dim_symbol(n) for n in _IDENTIFIER.findall(s)}
    expr = sympy.sympify(s, locals=names)  # pyright: ignore[reportCallIssue]  (sympy's overloads omit `locals`)
    if not isinstance(expr, sympy.Expr):
        raise ValueError(f"'{s}' is not a dim expression")
    if expr.is_Integer:
        return int(expr)
    return expr


def normalize_dim(d: Dim) -> Dim:
    if isinstance(d, sympy.Expr) and d.is_Integer:
        return int(d)
    return d


def evaluate_dim(d: Dim, values: dict[str, int]) -> int:
    if isinstance(d, int):
        return d
    return int(d.subs({WORKLOAD_SYMBOLS[k]: v for k, v in values.items() if k in WORKLOAD_SYMBOLS}))


@dataclass(frozen=True)
class TensorSpec:
    """Shape + dtype of one value. Dims are ints or sympy expressions over workload symbols."""

    shape: tuple[Dim, ...]
    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(normalize_dim(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Dim:
        return normalize_dim(reduce(lambda a, b: a * b, self.shape, 1))

    @property
    def nbytes(self) -> Dim:
        return normalize_dim(self.numel * sympy.nsimplify(self.dtype.bytes))

    @property
    def is_symbolic(self) -> bool:
        return any(not isinstance(d, int) for d in self.shape)

    def evaluate(self, values: dict[str, int]) -> tuple[int, ...]:
        return tuple(evaluate_dim(d, values) for d in self.shape)

    def to_str(self) -> str:
        return f"{self.dtype.value}[{','.join(dim_to_str(d) for d in self.shape)}]"

    @classmethod
    def from_str(cls, s: str) -> TensorSpec:
        dtype, rest = s.split("[", 1)
        body = rest.rstrip("]")
        dims = tuple(parse_dim(p) for p in _split_dims(body)) if body else ()
        return cls(dims, DType(dtype))

    def __str__(self) -> str:
        return self.to_str()


def _split_dims(body: str) -> list[str]:
    """Split on commas at parenthesis depth 0 (dims may be expressions like Max(1, T))."""
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]

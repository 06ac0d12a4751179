"""ONNX op type → graphsim `Op`: the table the ONNX importer maps nodes with.

Plain ops map one-to-one through `SIMPLE_OPS` and take `NoAttrs`. Ops whose IR kind or typed
attributes depend on their inputs (a MatMul against a weight is a LINEAR, a Gather from a weight
table is an EMBEDDING, ...) have a handler in `HANDLERS`. A handler returns `(op, attrs)`, or
`None` when the node does not fit any IR kind; the importer then makes it OPAQUE and reports it.
Anything absent from both tables is OPAQUE too. Nothing here imports onnx.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsim.ir import (
    AttentionAttrs, CastAttrs, ConvAttrs, DType, EmbeddingAttrs, LinearAttrs, NoAttrs, NormAttrs, Op, ReduceAttrs,
    TensorSpec,
)

DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"

# TensorProto.DataType → DType. Unsigned ints without a DType of their own map to the signed
# type of the same width (bytes per element are what the IR prices).
ONNX_DTYPES: dict[int, DType] = {
    1: DType.FLOAT32, 2: DType.UINT8, 3: DType.INT8, 4: DType.INT16, 5: DType.INT16, 6: DType.INT32,
    7: DType.INT64, 9: DType.BOOL, 10: DType.FLOAT16, 11: DType.FLOAT64, 12: DType.INT32,
    13: DType.INT64, 14: DType.COMPLEX64, 16: DType.BFLOAT16, 17: DType.FLOAT8_E4M3,
    18: DType.FLOAT8_E4M3, 19: DType.FLOAT8_E5M2, 20: DType.FLOAT8_E5M2, 21: DType.INT4,
    22: DType.INT4, 23: DType.FLOAT4, 24: DType.UINT8,
}

# (domain-free) op type → Op, for ops that need no attributes.
SIMPLE_OPS: dict[str, Op] = {
    # elementwise
    "Add": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL, "Div": Op.DIV, "Reciprocal": Op.DIV,
    "Neg": Op.NEG, "Pow": Op.POW, "Sqrt": Op.SQRT, "Exp": Op.EXP, "Log": Op.LOG, "Abs": Op.ABS,
    "Relu": Op.RELU, "Gelu": Op.GELU, "Sigmoid": Op.SIGMOID, "Tanh": Op.TANH,
    "Softplus": Op.SOFTPLUS, "Sin": Op.SIN, "Cos": Op.COS, "Where": Op.WHERE, "Clip": Op.CLAMP,
    "Max": Op.CLAMP, "Min": Op.CLAMP,  # elementwise max/min of tensors: clamp against a tensor
    "Equal": Op.COMPARE, "Less": Op.COMPARE, "Greater": Op.COMPARE, "LessOrEqual": Op.COMPARE,
    "GreaterOrEqual": Op.COMPARE, "IsNaN": Op.COMPARE, "IsInf": Op.COMPARE,
    "And": Op.LOGICAL, "Or": Op.LOGICAL, "Xor": Op.LOGICAL, "Not": Op.LOGICAL,
    # reductions and selection
    "TopK": Op.TOPK, "CumSum": Op.CUMSUM,
    # data movement
    "Reshape": Op.VIEW, "Flatten": Op.VIEW, "Squeeze": Op.SQUEEZE, "Unsqueeze": Op.UNSQUEEZE,
    "Expand": Op.EXPAND, "Slice": Op.SLICE, "Concat": Op.CAT, "Split": Op.SPLIT,
    "GatherElements": Op.GATHER, "GatherND": Op.INDEX, "ScatterElements": Op.SCATTER,
    "ScatterND": Op.SCATTER, "Scatter": Op.SCATTER, "Identity": Op.COPY, "Dropout": Op.COPY,
    "Tile": Op.COPY,
    # creation: constants, and host-side shape arithmetic (Shape/Size make small int64 tensors)
    "Constant": Op.FULL, "ConstantOfShape": Op.FULL, "EyeLike": Op.FULL, "Shape": Op.FULL,
    "Size": Op.FULL, "Range": Op.ARANGE,
}

# com.microsoft contrib ops that are plain elementwise kernels.
SIMPLE_MS_OPS: dict[str, Op] = {"FastGelu": Op.GELU, "BiasGelu": Op.GELU, "QuickGelu": Op.GELU}


@dataclass
class NodeView:
    """What a handler may know about one ONNX node (filled in by the importer)."""

    op_type: str
    domain: str
    attrs: dict[str, Any]
    inputs: list[str]  # ONNX value names ("" for an omitted optional input)
    input_specs: list[TensorSpec | None]
    output_specs: list[TensorSpec]
    weight_inputs: list[bool]  # input i is an initializer or computed from initializers only
    const_ints: Callable[[int], list[int] | None] = field(default=lambda i: None)
    opset: int = 21  # of the node's domain

    def spec(self, i: int) -> TensorSpec | None:
        return self.input_specs[i] if i < len(self.input_specs) else None

    def is_weight(self, i: int) -> bool:
        return i < len(self.weight_inputs) and self.weight_inputs[i]

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""


Mapped = tuple[Op, Any] | None


def _f32(x: Any) -> float:
    """An ONNX float attribute (stored as float32) as the shortest decimal that denotes it: 1e-05, not 9.99e-06."""
    return float(str(np.float32(x)))


def _ints(*dims: Any) -> bool:
    return all(isinstance(d, int) for d in dims)


def _as_ints(*dims: object) -> tuple[int, ...] | None:
    """The values as ints when every one is a plain int (not symbolic, not None), else None."""
    if all(isinstance(d, int) for d in dims):
        return tuple(d for d in dims if isinstance(d, int))
    return None


def _norm_axis(axis: int, rank: int | None) -> int:
    return axis % rank if rank and axis < 0 else axis


# --- matmul-like --------------------------------------------------------------------------------
def _matmul(v: NodeView) -> Mapped:
    w = v.spec(1)
    kn = _as_ints(*w.shape) if w is not None and w.rank == 2 else None
    if v.is_weight(1) and not v.is_weight(0) and kn is not None:
        return Op.LINEAR, LinearAttrs(in_features=kn[0], out_features=kn[1])
    return Op.MATMUL, NoAttrs()


def _gemm(v: NodeView) -> Mapped:
    w = v.spec(1)
    shape = _as_ints(*w.shape) if w is not None and w.rank == 2 else None
    if v.is_weight(1) and not v.is_weight(0) and not v.attrs.get("transA", 0) and shape is not None:
        k, n = (shape[1], shape[0]) if v.attrs.get("transB", 0) else shape
        return Op.LINEAR, LinearAttrs(in_features=k, out_features=n, has_bias=v.has_input(2))
    return Op.MATMUL, NoAttrs()


def _matmul_nbits(v: NodeView) -> Mapped:
    """com.microsoft MatMulNBits: a weight-only quantised linear layer; K, N are attributes."""
    kn = _as_ints(v.attrs.get("K"), v.attrs.get("N"))
    if kn is None:
        return None
    k, n = kn
    return Op.LINEAR, LinearAttrs(in_features=k, out_features=n, has_bias=v.has_input(5))


def _conv(v: NodeView) -> Mapped:
    w = v.spec(1)
    dims = _as_ints(w.shape[0], w.shape[2]) if w is not None and w.rank == 3 else None
    if dims is None:
        return None  # only 1-D convolutions have an IR kind
    return Op.CONV1D, ConvAttrs(channels=dims[0], kernel_size=dims[1], groups=int(v.attrs.get("group", 1)))


# --- embedding / indexing -----------------------------------------------------------------------
def _gather(v: NodeView) -> Mapped:
    table, idx = v.spec(0), v.spec(1)
    axis = v.attrs.get("axis", 0)
    rows_cols = _as_ints(*table.shape) if table is not None and table.rank == 2 else None
    if v.is_weight(0) and not v.is_weight(1) and axis == 0 and rows_cols is not None:
        return Op.EMBEDDING, EmbeddingAttrs(num_embeddings=rows_cols[0], embedding_dim=rows_cols[1])
    if idx is not None and idx.rank == 0:
        return Op.SELECT, NoAttrs()
    return Op.INDEX, NoAttrs()


# --- reductions ---------------------------------------------------------------------------------
def _softmax(v: NodeView) -> Mapped:
    x = v.spec(0)
    axis = int(v.attrs.get("axis", -1 if v.opset >= 13 or v.domain not in DEFAULT_DOMAINS else 1))
    return Op.SOFTMAX, ReduceAttrs(dims=(_norm_axis(axis, x.rank if x else None),), keepdim=True)


def _reduce(op: Op) -> Callable[[NodeView], Mapped]:
    def handler(v: NodeView) -> Mapped:
        x = v.spec(0)
        rank = x.rank if x else None
        axes = v.attrs.get("axes")
        keepdim = bool(v.attrs.get("keepdims", 1))
        if axes is None and v.has_input(1):  # opset ≥ 18 passes axes as an input
            axes = v.const_ints(1)
            if axes is None:  # computed at run time: read the reduced dims off the shapes
                dims = _reduced_dims(x, v.output_specs[0], keepdim)
                return (op, ReduceAttrs(dims=dims, keepdim=keepdim)) if dims is not None else None
        if not axes:
            if v.attrs.get("noop_with_empty_axes", 0):
                return Op.COPY, NoAttrs()
            axes = list(range(rank)) if rank is not None else []
        dims = tuple(sorted(_norm_axis(int(a), rank) for a in axes))
        return op, ReduceAttrs(dims=dims, keepdim=keepdim)

    return handler


def _reduced_dims(x: TensorSpec | None, out: TensorSpec, keepdim: bool) -> tuple[int, ...] | None:
    """Which dims a reduction removed, from its input and output shapes (None if they do not tell)."""
    if x is None or out.rank > x.rank or (keepdim and out.rank != x.rank):
        return None
    if keepdim:
        dims = tuple(i for i, (a, b) in enumerate(zip(x.shape, out.shape, strict=True)) if a != b)
        return dims if all(out.shape[i] == 1 for i in dims) and dims else None
    dims, j = [], 0
    for i, d in enumerate(x.shape):
        if j < out.rank and out.shape[j] == d:
            j += 1
        else:
            dims.append(i)
    return tuple(dims) if j == out.rank and len(dims) == x.rank - out.rank and dims else None


# --- casts and layout ---------------------------------------------------------------------------
def _cast(v: NodeView) -> Mapped:
    to = ONNX_DTYPES.get(v.attrs["to"]) if "to" in v.attrs else None
    like = v.spec(1) if v.op_type == "CastLike" else None
    if to is None and like is not None:
        to = like.dtype
    return Op.CAST, CastAttrs(to=(to or v.output_specs[0].dtype).value)


def _transpose(v: NodeView) -> Mapped:
    x = v.spec(0)
    perm = v.attrs.get("perm")
    if perm is None and x is not None:
        perm = list(reversed(range(x.rank)))
    moved = sum(1 for i, p in enumerate(perm or []) if i != p)
    return (Op.TRANSPOSE if moved == 2 else Op.PERMUTE), NoAttrs()


# --- norms --------------------------------------------------------------------------------------
def _norm(op: Op) -> Callable[[NodeView], Mapped]:
    def handler(v: NodeView) -> Mapped:
        x = v.spec(0)
        last = x.shape[-1] if x is not None and x.rank else None
        eps = v.attrs.get("epsilon")
        return op, NormAttrs(eps=_f32(eps) if eps is not None else None,
                             normalized_dim=last if isinstance(last, int) else None)

    return handler


# --- attention ----------------------------------------------------------------------------------
def _heads_and_dim(spec: TensorSpec | None, heads: int | None) -> tuple[int, int] | None:
    """(heads, head_dim) of a 4-D [B, H, S, D] or 3-D [B, S, H·D] attention input."""
    if spec is None:
        return None
    if spec.rank == 4 and (hd := _as_ints(spec.shape[1], spec.shape[3])) is not None:
        return hd[0], hd[1]
    width = spec.shape[2] if spec.rank == 3 else None
    if heads and isinstance(width, int) and width % heads == 0:
        return heads, width // heads
    return None


def _attention(v: NodeView) -> Mapped:
    """ai.onnx Attention (opset 23): Q, K, V in, 4-D or 3-D with q_num_heads/kv_num_heads."""
    q = _heads_and_dim(v.spec(0), v.attrs.get("q_num_heads"))
    k = _heads_and_dim(v.spec(1), v.attrs.get("kv_num_heads"))
    val = _heads_and_dim(v.spec(2), v.attrs.get("kv_num_heads"))
    if q is None or k is None or val is None:
        return None
    softcap = v.attrs.get("softcap") or None
    return Op.ATTENTION, AttentionAttrs(
        num_heads=q[0], num_kv_heads=k[0], head_dim=q[1], v_head_dim=val[1],
        causal=bool(v.attrs.get("is_causal", 0)), softcap=_f32(softcap) if softcap else None,
        scale=_f32(v.attrs["scale"]) if "scale" in v.attrs else None,
    )


def _group_query_attention(v: NodeView) -> Mapped:
    """com.microsoft GroupQueryAttention: causal GQA over [B, S, H·D] (or packed QKV) inputs."""
    q = v.spec(0)
    dims = _as_ints(v.attrs.get("num_heads"), v.attrs.get("kv_num_heads"), q.shape[2] if q is not None and q.rank == 3 else None)
    if dims is None:
        return None
    heads, kv_heads, q_width = dims
    width = heads if v.has_input(1) else heads + 2 * kv_heads  # no key input: packed QKV
    if q_width % width:
        return None
    head_dim = q_width // width
    window = int(v.attrs.get("local_window_size", -1))
    softcap = v.attrs.get("softcap") or None
    return Op.ATTENTION, AttentionAttrs(
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim, causal=True,
        sliding_window=window if window > 0 else None, softcap=_f32(softcap) if softcap else None,
        scale=_f32(v.attrs["scale"]) if v.attrs.get("scale") else None,
    )


def _multi_head_attention(v: NodeView) -> Mapped:
    """com.microsoft MultiHeadAttention: projected Q, K, V in, [B, S, H·D]."""
    heads = v.attrs.get("num_heads")
    q = _heads_and_dim(v.spec(0), heads)
    if q is None:
        return None
    val = _heads_and_dim(v.spec(2), heads) if v.has_input(2) else q
    return Op.ATTENTION, AttentionAttrs(
        num_heads=q[0], num_kv_heads=q[0], head_dim=q[1], v_head_dim=(val or q)[1],
        causal=bool(v.attrs.get("unidirectional", 0)),
        scale=_f32(v.attrs["scale"]) if v.attrs.get("scale") else None,
    )


HANDLERS: dict[tuple[str, str], Callable[[NodeView], Mapped]] = {}


def _register(domain: str, names: tuple[str, ...], handler: Callable[[NodeView], Mapped]) -> None:
    for d in (DEFAULT_DOMAINS if domain == "" else (domain,)):
        for n in names:
            HANDLERS[(d, n)] = handler


_register("", ("MatMul",), _matmul)
_register("", ("Gemm",), _gemm)
_register("", ("Conv",), _conv)
_register("", ("Gather",), _gather)
_register("", ("Softmax", "LogSoftmax"), _softmax)
_register("", ("ReduceMean",), _reduce(Op.MEAN))
_register("", ("ReduceSum",), _reduce(Op.SUM))
_register("", ("ReduceMax",), _reduce(Op.MAX))
_register("", ("Cast", "CastLike", "DequantizeLinear", "QuantizeLinear"), _cast)
_register("", ("Transpose",), _transpose)
_register("", ("LayerNormalization",), _norm(Op.LAYER_NORM))
# SimplifiedLayerNormalization is onnxruntime's RMSNorm, registered in the default domain.
_register("", ("SimplifiedLayerNormalization", "RMSNormalization"), _norm(Op.RMS_NORM))
_register("", ("Attention",), _attention)
_register(MS_DOMAIN, ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"), _norm(Op.RMS_NORM))
_register(MS_DOMAIN, ("SkipLayerNormalization",), _norm(Op.LAYER_NORM))
_register(MS_DOMAIN, ("GroupQueryAttention",), _group_query_attention)
_register(MS_DOMAIN, ("MultiHeadAttention",), _multi_head_attention)
_register(MS_DOMAIN, ("MatMulNBits",), _matmul_nbits)
_register(MS_DOMAIN, ("DequantizeLinear", "QuantizeLinear"), _cast)


def map_node(v: NodeView) -> Mapped:
    """(op, attrs) for an ONNX node, or None: it has no IR kind and becomes OPAQUE."""
    handler = HANDLERS.get((v.domain, v.op_type))
    if handler is not None:
        return handler(v)
    if v.domain in DEFAULT_DOMAINS and v.op_type in SIMPLE_OPS:
        return SIMPLE_OPS[v.op_type], NoAttrs()
    if v.domain == MS_DOMAIN and v.op_type in SIMPLE_MS_OPS:
        return SIMPLE_MS_OPS[v.op_type], NoAttrs()
    return None


def onnx_target(op_type: str, domain: str) -> str:
    """`onnx::<OpType>` (default domain) or `onnx::<domain>.<OpType>`."""
    return f"onnx::{op_type}" if domain in DEFAULT_DOMAINS else f"onnx::{domain}.{op_type}"

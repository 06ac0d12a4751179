"""The closed set of op kinds in graphsim's IR, with named groups.

Importers map every framework op onto one of these; what they cannot map becomes `Op.OPAQUE`
and is reported, never dropped.
"""

from __future__ import annotations

from enum import Enum


class OpGroup(str, Enum):
    MATMUL = "matmul"
    ATTENTION = "attention"
    NORM = "norm"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    DATA_MOVEMENT = "data_movement"
    EMBEDDING = "embedding"
    COLLECTIVE = "collective"
    MOE = "moe"
    KERNEL = "kernel"
    CONV = "conv"
    CREATION = "creation"
    OPAQUE = "opaque"


class Op(str, Enum):
    # matmul-like
    LINEAR = "linear"
    MATMUL = "matmul"
    BMM = "bmm"
    GROUPED_MM = "grouped_mm"
    # attention (semantic nodes)
    ATTENTION = "attention"
    LINEAR_ATTENTION = "linear_attention"
    SPARSE_INDEXER = "sparse_indexer"  # DSA lightning indexer: top-k keys per query (attrs: IndexerAttrs)
    KV_COMPRESS = "kv_compress"  # DeepSeek-V4's KV compressor: one pooled entry per window of m tokens (NoAttrs)
    HYPER_CONNECTION = "hyper_connection"  # mHC stream mixing: pre (collapse), post (update) or head (NoAttrs)
    # norms
    RMS_NORM = "rms_norm"
    LAYER_NORM = "layer_norm"
    # elementwise
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    NEG = "neg"
    POW = "pow"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    EXP = "exp"
    LOG = "log"
    FLOOR = "floor"  # floor / ceil / round / trunc
    ABS = "abs"
    SILU = "silu"
    GELU = "gelu"
    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    SOFTPLUS = "softplus"
    SIN = "sin"
    COS = "cos"
    WHERE = "where"
    CLAMP = "clamp"
    COMPARE = "compare"
    LOGICAL = "logical"
    CAST = "cast"
    POLAR = "polar"  # complex from magnitude and angle (complex-valued RoPE)
    # reductions and selection
    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    SOFTMAX = "softmax"
    TOPK = "topk"
    SORT = "sort"
    CUMSUM = "cumsum"
    HISTC = "histc"
    # data movement
    VIEW = "view"
    TRANSPOSE = "transpose"
    PERMUTE = "permute"
    EXPAND = "expand"
    SLICE = "slice"
    SELECT = "select"
    CAT = "cat"
    SPLIT = "split"
    INDEX = "index"
    GATHER = "gather"
    SCATTER = "scatter"
    COPY = "copy"
    SQUEEZE = "squeeze"
    UNSQUEEZE = "unsqueeze"
    # tensor creation
    ARANGE = "arange"
    FULL = "full"
    # embedding
    EMBEDDING = "embedding"
    # conv
    CONV1D = "conv1d"
    # MoE
    MOE_EXPERTS = "moe_experts"
    # collectives (inserted by partition passes)
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    # an engine kernel made by the fuse pass (attrs: KernelAttrs)
    KERNEL = "kernel"
    # anything an importer could not map
    OPAQUE = "opaque"

    @property
    def group(self) -> OpGroup:
        return OP_GROUPS[self]


_GROUP_MEMBERS: dict[OpGroup, tuple[Op, ...]] = {
    OpGroup.MATMUL: (Op.LINEAR, Op.MATMUL, Op.BMM, Op.GROUPED_MM),
    OpGroup.ATTENTION: (Op.ATTENTION, Op.LINEAR_ATTENTION, Op.SPARSE_INDEXER, Op.KV_COMPRESS),
    OpGroup.NORM: (Op.RMS_NORM, Op.LAYER_NORM),
    OpGroup.ELEMENTWISE: (
        Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.POW, Op.SQRT, Op.RSQRT, Op.EXP, Op.LOG, Op.FLOOR,
        Op.ABS, Op.SILU, Op.GELU, Op.RELU, Op.SIGMOID, Op.TANH, Op.SOFTPLUS, Op.SIN, Op.COS,
        Op.WHERE, Op.CLAMP, Op.COMPARE, Op.LOGICAL, Op.CAST, Op.POLAR, Op.HYPER_CONNECTION,
    ),
    OpGroup.REDUCTION: (Op.MEAN, Op.SUM, Op.MAX, Op.SOFTMAX, Op.TOPK, Op.SORT, Op.CUMSUM, Op.HISTC),
    OpGroup.DATA_MOVEMENT: (
        Op.VIEW, Op.TRANSPOSE, Op.PERMUTE, Op.EXPAND, Op.SLICE, Op.SELECT, Op.CAT, Op.SPLIT,
        Op.INDEX, Op.GATHER, Op.SCATTER, Op.COPY, Op.SQUEEZE, Op.UNSQUEEZE,
    ),
    OpGroup.CREATION: (Op.ARANGE, Op.FULL),
    OpGroup.EMBEDDING: (Op.EMBEDDING,),
    OpGroup.CONV: (Op.CONV1D,),
    OpGroup.MOE: (Op.MOE_EXPERTS,),
    OpGroup.COLLECTIVE: (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL),
    OpGroup.KERNEL: (Op.KERNEL,),
    OpGroup.OPAQUE: (Op.OPAQUE,),
}

OP_GROUPS: dict[Op, OpGroup] = {op: g for g, ops in _GROUP_MEMBERS.items() for op in ops}

# Ops that only re-describe memory (no kernel of their own in an engine when contiguous).
VIEW_LIKE: frozenset[Op] = frozenset(
    {Op.VIEW, Op.TRANSPOSE, Op.PERMUTE, Op.EXPAND, Op.SQUEEZE, Op.UNSQUEEZE, Op.SLICE, Op.SELECT, Op.SPLIT}
)

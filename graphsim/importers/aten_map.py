"""aten op name → IR Op. Names are the overload packet (`aten.add.Tensor` → `add`).

Ops absent here become `Op.OPAQUE` and are listed in the import report. Ops in `DROPPED`
produce no value the model computes with (assertions, symbolic sizes); ops in `ALIASES`
return their first input unchanged and are forwarded rather than kept.
"""

from __future__ import annotations

from graphsim.ir import Op

ATEN_OPS: dict[str, Op] = {
    # matmul-like
    "linear": Op.LINEAR, "mm": Op.MATMUL, "matmul": Op.MATMUL, "addmm": Op.MATMUL, "bmm": Op.BMM,
    "baddbmm": Op.BMM, "_grouped_mm": Op.GROUPED_MM, "einsum": Op.MATMUL,
    # norms
    "rms_norm": Op.RMS_NORM, "layer_norm": Op.LAYER_NORM, "native_layer_norm": Op.LAYER_NORM,
    "group_norm": Op.LAYER_NORM,
    # elementwise
    "add": Op.ADD, "add_": Op.ADD, "sub": Op.SUB, "rsub": Op.SUB, "mul": Op.MUL, "mul_": Op.MUL,
    "div": Op.DIV, "div_": Op.DIV, "neg": Op.NEG, "pow": Op.POW, "square": Op.POW, "sqrt": Op.SQRT, "rsqrt": Op.RSQRT,
    "exp": Op.EXP, "log": Op.LOG, "log1p": Op.LOG, "floor": Op.FLOOR, "ceil": Op.FLOOR, "round": Op.FLOOR,
    "trunc": Op.FLOOR, "abs": Op.ABS, "silu": Op.SILU, "gelu": Op.GELU, "relu": Op.RELU,
    "sigmoid": Op.SIGMOID, "tanh": Op.TANH, "softplus": Op.SOFTPLUS, "sin": Op.SIN, "cos": Op.COS,
    "where": Op.WHERE, "clamp": Op.CLAMP, "clamp_min": Op.CLAMP, "clamp_max": Op.CLAMP,
    "clamp_": Op.CLAMP, "masked_fill": Op.WHERE, "masked_fill_": Op.WHERE,
    "eq": Op.COMPARE, "ne": Op.COMPARE, "lt": Op.COMPARE, "le": Op.COMPARE, "gt": Op.COMPARE,
    "ge": Op.COMPARE, "logical_and": Op.LOGICAL, "logical_or": Op.LOGICAL, "logical_not": Op.LOGICAL,
    "bitwise_and": Op.LOGICAL, "bitwise_or": Op.LOGICAL, "bitwise_not": Op.LOGICAL,
    "__and__": Op.LOGICAL, "__or__": Op.LOGICAL, "__xor__": Op.LOGICAL, "__invert__": Op.LOGICAL,
    "reciprocal": Op.DIV, "polar": Op.POLAR, "floor_divide": Op.DIV, "remainder": Op.DIV,
    "to": Op.CAST, "_to_copy": Op.CAST, "type_as": Op.CAST,
    # reductions and selection
    "mean": Op.MEAN, "sum": Op.SUM, "amax": Op.MAX, "max": Op.MAX, "softmax": Op.SOFTMAX,
    "_softmax": Op.SOFTMAX, "log_softmax": Op.SOFTMAX, "topk": Op.TOPK, "sort": Op.SORT,
    "argsort": Op.SORT, "cumsum": Op.CUMSUM, "histc": Op.HISTC, "bincount": Op.HISTC,
    "argmax": Op.MAX, "any": Op.MAX, "all": Op.MAX, "prod": Op.SUM,
    # data movement
    "view": Op.VIEW, "_unsafe_view": Op.VIEW, "reshape": Op.VIEW, "flatten": Op.VIEW,
    "unflatten": Op.VIEW, "transpose": Op.TRANSPOSE, "t": Op.TRANSPOSE, "numpy_T": Op.TRANSPOSE, "permute": Op.PERMUTE,
    "expand": Op.EXPAND, "expand_as": Op.EXPAND, "repeat": Op.EXPAND, "repeat_interleave": Op.EXPAND,
    "slice": Op.SLICE, "narrow": Op.SLICE, "select": Op.SELECT, "cat": Op.CAT, "stack": Op.CAT,
    "split": Op.SPLIT, "split_with_sizes": Op.SPLIT, "chunk": Op.SPLIT, "unbind": Op.SPLIT,
    "index": Op.INDEX, "index_select": Op.INDEX, "gather": Op.GATHER, "scatter": Op.SCATTER,
    "scatter_add": Op.SCATTER, "scatter_": Op.SCATTER, "scatter_add_": Op.SCATTER,
    "slice_scatter": Op.SCATTER, "select_scatter": Op.SCATTER, "masked_scatter": Op.SCATTER, "index_put": Op.SCATTER, "index_put_": Op.SCATTER,
    "index_add": Op.SCATTER, "index_add_": Op.SCATTER, "index_copy_": Op.SCATTER,
    "copy_": Op.COPY, "copy": Op.COPY, "clone": Op.COPY, "contiguous": Op.COPY,
    "view_as_complex": Op.VIEW, "view_as_real": Op.VIEW, "view_as": Op.VIEW,
    "squeeze": Op.SQUEEZE, "unsqueeze": Op.UNSQUEEZE, "one_hot": Op.SCATTER, "pad": Op.COPY,
    "constant_pad_nd": Op.COPY, "roll": Op.COPY, "tril": Op.WHERE, "triu": Op.WHERE,
    # creation
    "arange": Op.ARANGE, "full": Op.FULL, "zeros": Op.FULL, "ones": Op.FULL, "empty": Op.FULL,
    "zeros_like": Op.FULL, "ones_like": Op.FULL, "empty_like": Op.FULL, "full_like": Op.FULL,
    "new_zeros": Op.FULL, "new_ones": Op.FULL, "new_empty": Op.FULL, "new_full": Op.FULL,
    "scalar_tensor": Op.FULL, "fill_": Op.FULL, "zero_": Op.FULL, "lift_fresh_copy": Op.COPY,
    # embedding, conv
    "embedding": Op.EMBEDDING, "conv1d": Op.CONV1D, "convolution": Op.CONV1D,
    # graphsim semantic ops
    "attention": Op.ATTENTION, "moe_experts": Op.MOE_EXPERTS, "gated_delta_rule": Op.LINEAR_ATTENTION,
    "ssm_scan": Op.LINEAR_ATTENTION, "kda": Op.LINEAR_ATTENTION, "dsa_indexer": Op.SPARSE_INDEXER,
    "selective_scan": Op.LINEAR_ATTENTION, "block_indexer": Op.SPARSE_INDEXER, "lightning_attention": Op.LINEAR_ATTENTION,
    "alibi_attention": Op.ATTENTION, "compressed_attention": Op.ATTENTION, "compressed_indexer": Op.SPARSE_INDEXER, "kv_compress": Op.KV_COMPRESS,
    "hc_pre": Op.HYPER_CONNECTION, "hc_post": Op.HYPER_CONNECTION, "hc_head": Op.HYPER_CONNECTION,
    "ihc_pre": Op.HYPER_CONNECTION, "ihc_post": Op.HYPER_CONNECTION,
}

DROPPED = {
    "_assert_tensor_metadata", "sym_size", "sym_numel", "sym_stride", "_assert_scalar",
    "sym_constrain_range_for_size", "_assert_async", "detach_", "set_grad_enabled",
}

ALIASES = {"alias", "detach", "lift_fresh", "dropout", "identity", "_autocast_to_reduced_precision"}


def packet_name(target) -> str:
    """`aten.add.Tensor` → `add`; `graphsim.attention.default` → `attention`."""
    name = getattr(target, "__name__", str(target))
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__.split(".")[-1]
    return name.split(".")[0]


def qualified_name(target) -> str:
    name = getattr(target, "name", None)
    if callable(name):
        try:
            return str(name())
        except TypeError:
            pass
    return getattr(target, "__name__", str(target))

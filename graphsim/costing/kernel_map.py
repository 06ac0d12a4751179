"""From a kernel node of the IR to profile.db keys and batch-dependent points.

`key_for(attrs, ...)` gives the table key of a kernel (model geometry + dtypes only);
`points_for(attrs, step)` gives the points a step evaluates it at, each with a multiplicity.
Attention is priced per sequence group of the step — decode groups as decode points
(batch, kv_len), prefill sequences one by one at (1, q_len, kv_len) — and summed: vLLM's varlen
kernel covers the whole ragged batch in one launch, whose time this sum approximates (prefill
attention is compute-bound, so sequences add).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphsim.costing.dtypes import KernelDtype, parse_kernel_dtype
from graphsim.costing.kernels import (
    AttentionDecodeKey,
    AttentionDecodePoint,
    AttentionPrefillKey,
    AttentionPrefillPoint,
    CollectiveKey,
    CollectiveOp,
    ElementwiseKey,
    GemmKey,
    GemmPoint,
    KernelKey,
    MessagePoint,
    MlaDecodeKey,
    MlaPrefillKey,
    MoeKey,
    Point,
    TokensPoint,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import Step


class NoKernelKey(ValueError):
    """A kernel that no profile.db table can hold (its time is reported missing)."""


_COLLECTIVES = {
    KernelKind.ALL_REDUCE: CollectiveOp.ALL_REDUCE, KernelKind.ALL_GATHER: CollectiveOp.ALL_GATHER,
    KernelKind.REDUCE_SCATTER: CollectiveOp.REDUCE_SCATTER, KernelKind.ALL_TO_ALL: CollectiveOp.ALL_TO_ALL,
}


@dataclass(frozen=True)
class Dtypes:
    """How IR dtype names become kernel dtypes for one deployment."""

    kv: KernelDtype = KernelDtype.BF16
    fp8_block: bool = False  # fp8 weights with block scales (e.g. DeepSeek-V3's 128×128)

    def of(self, name: str) -> KernelDtype:
        """A kernel dtype; raises NoKernelKey for dtypes no kernel table holds (bool, complex)."""
        if name in ("bool", "c64", "i64", "i32", "i16", "u8"):
            raise NoKernelKey(f"no kernel tables hold {name} kernels")
        if name == "f8e4m3":
            return KernelDtype.FP8_BLOCK if self.fp8_block else KernelDtype.FP8
        if name == "f4":
            return KernelDtype.MXFP4
        return parse_kernel_dtype(name)

    @classmethod
    def for_graph(cls, meta: dict[str, Any], kv_dtype: str | None = None) -> Dtypes:
        q = meta.get("quantization_config") or {}
        block = q.get("quant_method") == "fp8" and bool(q.get("weight_block_size"))
        model = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}.get(str(meta.get("dtype")), "bf16")
        return cls(kv=parse_kernel_dtype(kv_dtype or model), fp8_block=block)


def _geo(a: KernelAttrs, name: str) -> Any:
    v = a.geo(name)
    if v is None:
        raise KeyError(f"kernel {a.name} has no geometry field '{name}'")
    return v


def is_mla(a: KernelAttrs) -> bool:
    return a.kind is KernelKind.ATTENTION and bool(a.geo("kv_lora_rank"))


def key_for(a: KernelAttrs, dt: Dtypes, prefill: bool = True) -> KernelKey:
    """The profile.db key of a kernel. Attention has two (prefill / decode): pick with `prefill`."""
    dtype = dt.of(a.dtype)
    if a.kind is KernelKind.GEMM:
        return GemmKey(int(_geo(a, "n")), int(_geo(a, "k")), dtype)
    if a.kind is KernelKind.ATTENTION:
        if is_mla(a):
            rope = int(_geo(a, "qk_rope_head_dim"))
            cls = MlaPrefillKey if prefill else MlaDecodeKey
            return cls(int(_geo(a, "num_heads")), int(_geo(a, "kv_lora_rank")), int(_geo(a, "head_dim")) - rope, rope,
                       int(_geo(a, "v_head_dim")), dtype, dt.kv)
        cls = AttentionPrefillKey if prefill else AttentionDecodeKey
        return cls(int(_geo(a, "num_heads")), int(_geo(a, "num_kv_heads")), int(_geo(a, "head_dim")), dtype, dt.kv,
                   int(a.geo("window") or 0))
    if a.kind is KernelKind.MOE_EXPERTS:
        return MoeKey(int(_geo(a, "hidden_size")), int(_geo(a, "inter_size")), int(_geo(a, "top_k")),
                      int(_geo(a, "num_experts")), int(a.geo("tp") or 1), int(a.geo("ep") or 1), dtype)
    if a.kind in _COLLECTIVES:
        return CollectiveKey(_COLLECTIVES[a.kind], int(_geo(a, "num_gpus")), dtype)
    return ElementwiseKey(elementwise_op(a), per_token_width(a), dtype)


def per_token_width(a: KernelAttrs) -> int:
    """Elements each token reads or writes in a per-token kernel (the key's `width`)."""
    if a.kind is KernelKind.ROTARY:
        return (int(_geo(a, "num_heads")) + int(_geo(a, "num_kv_heads"))) * int(_geo(a, "rot_dim"))
    if a.kind is KernelKind.LINEAR_ATTENTION:
        return int(_geo(a, "num_v_heads")) * int(_geo(a, "v_head_dim"))
    if a.kind is KernelKind.MOE_ROUTER:
        return int(_geo(a, "num_experts"))
    if a.kind is KernelKind.CONV1D:
        return int(_geo(a, "channels"))
    # reductions read more per token than they write: key them on the wider side
    return max(int(_geo(a, "width")), int(a.geo("in_width") or 0))


def elementwise_op(a: KernelAttrs) -> str:
    """The key's op name; a norm over a vector shorter than the token (per-head q/k norms) says
    its vector length, since it runs more, shorter reductions than a norm over the hidden size."""
    dim, width = a.geo("dim"), a.geo("width")
    if dim is not None and width is not None and int(dim) != int(width):
        return f"{a.name}/dim{int(dim)}"
    return a.name


def rows_of(a: KernelAttrs, step: Step) -> int:
    if a.rows is Rows.SEQUENCES:
        return step.sequences
    if a.rows is Rows.ONCE:
        return 1
    return step.tokens


def points_for(a: KernelAttrs, step: Step, dt: Dtypes) -> list[tuple[KernelKey, Point]]:
    """(key, point) pairs whose times add up to this kernel's time for `step`."""
    if a.kind is KernelKind.ATTENTION:
        out: list[tuple[KernelKey, Point]] = []
        for g in step.groups:
            kv_len = g.cached_tokens + g.new_tokens
            if g.new_tokens == 1:
                out.append((key_for(a, dt, prefill=False), AttentionDecodePoint(g.count, kv_len)))
            else:  # one prefill point per sequence (see module docstring)
                out += [(key_for(a, dt, prefill=True), AttentionPrefillPoint(1, g.new_tokens, kv_len))] * g.count
        return out
    key = key_for(a, dt)
    rows = rows_of(a, step)
    if isinstance(key, GemmKey):
        return [(key, GemmPoint(rows))]
    if isinstance(key, CollectiveKey):
        return [(key, MessagePoint(max(1, rows * int(_geo(a, "bytes_per_row")))))]
    return [(key, TokensPoint(rows))]

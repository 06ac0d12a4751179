"""Per-token kernels (`ElementwiseKey` rows, `TokensPoint(tokens)`): norms, rotary, gated
activations, routers, embedding, causal conv, and the elementwise ops the fuse pass leaves as
placeholders (the eager target's aten op kinds: mul, add, cast, pow, mean, rsqrt, cat, ...).

Each op is built from real torch ops on a `[tokens, width]` tensor (`width` from the key, the
reduced or concatenated input width `in_width` from the kernel's geometry). An op name missing
from the tables, or one whose shape the key does not determine, raises `Unmeasurable` — it is
reported, never replaced by a different op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from graphsim.costing.kernels import ElementwiseKey, TokensPoint
from graphsim.costing.roofline import READS_TAG, elementwise_reads
from graphsim.ir.geometry import (
    Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, Geometry, MoeRouterGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.profiles.profiler.base import BenchInputs, positive, randn
from graphsim.profiles.profiler.device import Unmeasurable, check_budget, element_size, torch_dtype

Fn = Callable[[], Any]


@dataclass(frozen=True)
class Shape:
    """One grid point of a per-token kernel."""

    tokens: int
    width: int  # elements per token the kernel writes (the key's width)
    in_width: int  # elements per token of its widest non-parameter input
    dtype: torch.dtype
    device: torch.device
    geometry: Geometry | None = None  # the kernel's geometry (dims the key does not carry)
    cache: dict[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    def const(self, name: str, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A tensor independent of the token count (a table, weights), made once per key."""
        if name not in self.cache:
            self.cache[name] = make()
        return self.cache[name]

    def x(self, width: int | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
        return randn((self.tokens, width or self.width), dtype or self.dtype, self.device)


# ---- activations -----------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


# ops timed on two [tokens, width] operands (a key `op/r2`, costing/roofline.py READS_TAG, is the same kernel)
BINARY_OPS = ("add", "sub", "mul", "div")


# ---- elementwise placeholders by op name -------------------------------------------------------

def _unary(op: Callable[[torch.Tensor], torch.Tensor], domain_positive: bool = False):
    def build(s: Shape) -> Fn:
        x = positive((s.tokens, s.width), s.dtype, s.device) if domain_positive else s.x()
        return lambda: op(x)

    return build


def _binary(op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    def build(s: Shape) -> Fn:
        # both operands [tokens, width]: the larger traffic of the broadcast cases the key cannot tell apart
        x, y = s.x(), positive((s.tokens, s.width), s.dtype, s.device)
        return lambda: op(x, y)

    return build


def _cast(s: Shape) -> Fn:
    src = torch.bfloat16 if s.dtype == torch.float32 else torch.float32
    x = s.x(dtype=src)
    return lambda: x.to(s.dtype)


def _copy(s: Shape) -> Fn:
    x, y = s.x(), torch.empty((s.tokens, s.width), dtype=s.dtype, device=s.device)
    return lambda: y.copy_(x)


def _reduce(op: Callable[[torch.Tensor, int], torch.Tensor]):
    def build(s: Shape) -> Fn:
        if s.in_width % s.width:
            raise Unmeasurable(f"reduction from width {s.in_width} to {s.width}: the reduced axis is not a divisor")
        x = s.x(s.in_width).view(s.tokens, s.in_width // s.width, s.width)
        return lambda: op(x, 1)

    return build


def _cat(s: Shape) -> Fn:
    if s.in_width > s.width:
        raise Unmeasurable(f"cat to width {s.width} from a wider input ({s.in_width})")
    sizes = [s.in_width] * (s.width // s.in_width) + ([s.width % s.in_width] if s.width % s.in_width else [])
    parts = [s.x(w) for w in sizes]
    return lambda: torch.cat(parts, dim=-1)


def _topk(s: Shape) -> Fn:
    if s.width > s.in_width:
        raise Unmeasurable(f"topk of {s.width} from {s.in_width} values")
    x = s.x(s.in_width)
    return lambda: torch.topk(x, s.width, dim=-1)


def _gather(s: Shape) -> Fn:
    x = s.x(s.in_width)
    idx = torch.randint(0, s.in_width, (s.tokens, s.width), device=s.device)
    return lambda: torch.gather(x, -1, idx)


def _scatter(s: Shape) -> Fn:
    out = torch.zeros((s.tokens, s.width), dtype=s.dtype, device=s.device)
    idx = torch.argsort(torch.rand((s.tokens, s.width), device=s.device), dim=-1)
    src = s.x()
    return lambda: out.scatter(-1, idx, src)


def _where(s: Shape) -> Fn:
    cond = torch.rand((s.tokens, s.width), device=s.device) > 0.5
    x, y = s.x(), s.x()
    return lambda: torch.where(cond, x, y)


def _index(s: Shape) -> Fn:
    x = s.x()
    idx = torch.randperm(s.tokens, device=s.device)
    return lambda: x.index_select(0, idx)


def _rms(s: Shape) -> Fn:
    x, w = s.x(), torch.ones(s.width, dtype=s.dtype, device=s.device)
    return lambda: F.rms_norm(x, (s.width,), w, 1e-6)


def _layer_norm(s: Shape) -> Fn:
    x, w, b = s.x(), torch.ones(s.width, dtype=s.dtype, device=s.device), torch.zeros(s.width, dtype=s.dtype, device=s.device)
    return lambda: F.layer_norm(x, (s.width,), w, b, 1e-5)


def _gdn_gating(s: Shape) -> Fn:
    g = s.geometry
    h = g.num_v_heads if isinstance(g, ElementwiseGeometry) and g.num_v_heads else s.width // 2
    a, b = s.x(h), s.x(h)
    a_log = randn((h,), torch.float32, s.device)
    dt_bias = randn((h,), torch.float32, s.device)

    def fn():
        g = -torch.exp(a_log) * F.softplus(a.float() + dt_bias)
        return g, torch.sigmoid(b.float())

    return fn


# name → (builder, label). Names are the IR op kinds (graphsim.ir.Op values) and vLLM kernel names;
# the plain aten ops are torch's (or torch.nn.functional's) function of the same name.
ELEMENTWISE_OPS: dict[str, tuple[Callable[[Shape], Fn], str]] = {
    **{op: (_binary(getattr(torch, op)), f"aten::{op}") for op in BINARY_OPS},
    **{op: (_unary(getattr(torch, op)), f"aten::{op}") for op in ("neg", "exp", "abs", "sin", "cos", "tanh", "sigmoid")},
    **{op: (_unary(getattr(torch, op), True), f"aten::{op}") for op in ("log", "sqrt", "rsqrt")},  # positive inputs
    **{op: (_unary(getattr(F, op)), f"aten::{op}") for op in ("silu", "gelu", "relu", "softplus")},
    "pow": (_unary(lambda x: torch.pow(x, 2)), "aten::pow(x, 2)"),
    "clamp": (_unary(lambda x: torch.clamp(x, -1.0, 1.0)), "aten::clamp"),
    "cast": (_cast, "aten::_to_copy"),
    "copy": (_copy, "aten::copy_"),
    "mean": (_reduce(lambda x, d: x.mean(d)), "aten::mean"),
    "sum": (_reduce(lambda x, d: x.sum(d)), "aten::sum"),
    "max": (_reduce(lambda x, d: x.amax(d)), "aten::amax"),
    "softmax": (_unary(lambda x: torch.softmax(x, -1)), "aten::_softmax"),
    "cumsum": (_unary(lambda x: torch.cumsum(x, -1)), "aten::cumsum"),
    "sort": (_unary(lambda x: torch.sort(x, -1)[0]), "aten::sort"),
    "topk": (_topk, "aten::topk"),
    "cat": (_cat, "aten::cat"),
    "gather": (_gather, "aten::gather"),
    "scatter": (_scatter, "aten::scatter"),
    "where": (_where, "aten::where"),
    "index": (_index, "aten::index_select"),
    "rms_norm": (_rms, "aten::rms_norm"),
    "layer_norm": (_layer_norm, "aten::layer_norm"),
    "fused_gdn_gating": (_gdn_gating, "torch: -exp(A)·softplus(a+dt_bias), sigmoid(b)"),
}

# Names the key cannot shape (kernel size, matrix sizes or a complex/bool payload are not in it).
NOT_MEASURABLE: dict[str, str] = {
    "conv1d": "the eager conv1d key has no kernel size; the vLLM target's causal_conv1d kernel is measured instead",
    "matmul": "a matmul placeholder's key has no matrix sizes",
    "bmm": "a bmm placeholder's key has no matrix sizes",
    "grouped_mm": "a grouped_mm placeholder's key has no matrix sizes",
    "polar": "complex-valued op",
    "histc": "histc's bin count is not in the key",
    "opaque": "opaque op: unknown work",
}


# ---- kernels of the vLLM target ----------------------------------------------------------------

def _rows_per_token(s: Shape, dim: int) -> int:
    if dim <= 0 or s.width % dim:
        raise Unmeasurable(f"norm over dim {dim} does not divide width {s.width}")
    return s.tokens * (s.width // dim)


def _norm_dim(s: Shape) -> int:
    g = s.geometry
    return g.dim if isinstance(g, NormGeometry) and g.dim else s.width


def _norm_kernel(a: KernelAttrs) -> tuple[Callable[[Shape], Fn], str]:
    if a.kind is KernelKind.LAYER_NORM:
        def build_ln(s: Shape) -> Fn:
            d = _norm_dim(s)
            x = randn((_rows_per_token(s, d), d), s.dtype, s.device)
            w, b = torch.ones(d, dtype=s.dtype, device=s.device), torch.zeros(d, dtype=s.dtype, device=s.device)
            return lambda: F.layer_norm(x, (d,), w, b, 1e-5)

        return build_ln, "aten::layer_norm"
    gated = a.name == "rms_norm_gated"
    fused_add = a.kind is KernelKind.FUSED_ADD_RMS_NORM

    def build(s: Shape) -> Fn:
        d = _norm_dim(s)
        rows = _rows_per_token(s, d)
        x = randn((rows, d), s.dtype, s.device)
        w = torch.ones(d, dtype=s.dtype, device=s.device)
        if fused_add:
            residual = randn((rows, d), s.dtype, s.device)

            def fused() -> Any:
                residual.add_(x)
                return F.rms_norm(residual, (d,), w, 1e-6)

            return fused
        if gated:
            z = randn((rows, d), s.dtype, s.device)
            return lambda: F.rms_norm(x, (d,), w, 1e-6) * F.silu(z)
        return lambda: F.rms_norm(x, (d,), w, 1e-6)

    label = ("aten::add_ + aten::rms_norm" if fused_add else
             "aten::rms_norm · silu(z)" if gated else "aten::rms_norm")
    return build, label


def _rotary(s: Shape) -> Fn:
    g = s.geometry
    if not isinstance(g, RotaryGeometry):
        raise Unmeasurable("rotary benchmark without a rotary geometry")
    h, kvh = g.num_heads, g.num_kv_heads
    rot, hd = g.rot_dim, g.head_dim or g.rot_dim
    max_pos = 4096
    q = randn((s.tokens, h, hd), s.dtype, s.device)
    k = randn((s.tokens, kvh, hd), s.dtype, s.device)
    cache = s.const("cos_sin_cache", lambda: randn((max_pos, rot), s.dtype, s.device))
    pos = torch.randint(0, max_pos, (s.tokens,), device=s.device)

    def fn() -> Any:  # vLLM RotaryEmbedding.forward_native (neox style), in place on q and k
        cos, sin = cache.index_select(0, pos).unsqueeze(1).chunk(2, dim=-1)
        for x in (q, k):
            xr = x[..., :rot]
            x1, x2 = xr.chunk(2, dim=-1)
            xr.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
        return q, k

    return fn


def _act_and_mul(name: str) -> tuple[Callable[[Shape], Fn], str]:
    # TensorRT-LLM names its SiLU-and-mul kernel swiglu (tensorrt_llm/_torch/modules/swiglu.py)
    act_name = "silu" if name == "swiglu" else name.removesuffix("_and_mul")
    act = ACTIVATIONS.get(act_name)
    if act is None:
        raise Unmeasurable(f"no torch activation for '{act_name}' (known: {', '.join(sorted(ACTIVATIONS))})")

    def build(s: Shape) -> Fn:
        x = s.x(2 * s.width)
        return lambda: act(x[:, :s.width]) * x[:, s.width:]

    return build, f"aten::{act_name} · mul"


def _embedding(s: Shape) -> Fn:
    vocab = s.geometry.vocab if isinstance(s.geometry, EmbeddingGeometry) and s.geometry.vocab else 32000
    table = s.const("table", lambda: randn((vocab, s.width), s.dtype, s.device, 0.02))
    ids = torch.randint(0, vocab, (s.tokens,), device=s.device)
    return lambda: F.embedding(ids, table)


def _router(name: str) -> tuple[Callable[[Shape], Fn], str, tuple[str, ...]]:
    def build(s: Shape) -> Fn:
        g = s.geometry
        e, k = (g.num_experts or s.width, g.top_k or 1) if isinstance(g, MoeRouterGeometry) else (s.width, 1)
        logits = s.x(e)
        if name == "grouped_topk":
            bias = randn((e,), torch.float32, s.device)

            def grouped() -> Any:
                scores = logits.float().sigmoid()
                _, idx = torch.topk(scores + bias, k, dim=-1)
                w = scores.gather(1, idx)
                return w / w.sum(-1, keepdim=True), idx

            return grouped

        def softmax_topk() -> Any:
            w, idx = torch.topk(torch.softmax(logits, -1, dtype=torch.float32), k, dim=-1)
            return w / w.sum(-1, keepdim=True), idx

        return softmax_topk

    if name == "grouped_topk":
        return build, "aten::sigmoid + topk + gather", (
            "grouped_topk measured without the expert-group limit (n_group/topk_group are not in the key)",)
    if name == "topk_softmax":
        return build, "aten::softmax + topk", ()
    raise Unmeasurable(f"unknown MoE router kernel '{name}'")


def _causal_conv1d(s: Shape) -> Fn:
    g = s.geometry
    c, k = (g.channels or s.width, g.kernel_size or 4) if isinstance(g, Conv1dGeometry) else (s.width, 4)
    x = randn((1, c, s.tokens), s.dtype, s.device)
    w = s.const("weight", lambda: randn((c, 1, k), s.dtype, s.device))
    return lambda: F.silu(F.conv1d(x, w, padding=k - 1, groups=c)[..., :s.tokens])


def _kv_cache_write(s: Shape) -> Fn:
    slots = max(4 * s.tokens, 4096)
    cache = torch.zeros((slots, s.width), dtype=s.dtype, device=s.device)
    x = s.x()
    idx = torch.randperm(slots, device=s.device)[:s.tokens]
    return lambda: cache.index_copy_(0, idx, x)


class PointwiseBench(BenchInputs[ElementwiseKey]):
    """A per-token kernel, timed at TokensPoint(tokens)."""

    def __post_init__(self) -> None:
        self.dtype = torch_dtype(self.key.dtype, f"{self.attrs.kind.value} {self.key.op}")
        self.build, self.label, self.notes = _select(self.attrs, self.key)
        self.cache: dict[str, torch.Tensor] = {}

    def prepare(self, point: TokensPoint) -> Fn:
        geo = self.attrs.geometry
        elementwise = geo if isinstance(geo, ElementwiseGeometry) else None
        in_width = (elementwise.in_width if elementwise else None) or self.key.width
        vocab = geo.vocab if isinstance(geo, EmbeddingGeometry) else 0
        # a few [tokens, width] buffers (inputs, output, temporaries) plus an embedding table
        elems = 8 * point.tokens * max(self.key.width, in_width) + vocab * self.key.width
        check_budget(self.info, elems * max(element_size(self.dtype), 4), f"{self.key.op} at {point.tokens} tokens")
        # the key's width is the wider side (a reduction is keyed on its input); the op itself
        # writes the kernel's own per-token width
        width = elementwise.width if elementwise and self.attrs.kind is KernelKind.ELEMENTWISE else self.key.width
        shape = Shape(point.tokens, width, in_width, self.dtype, self.info.device, geo, self.cache)
        return self.build(shape)


def _select(a: KernelAttrs, key: ElementwiseKey) -> tuple[Callable[[Shape], Fn], str, tuple[str, ...]]:
    kind = a.kind
    if kind in (KernelKind.RMS_NORM, KernelKind.FUSED_ADD_RMS_NORM, KernelKind.LAYER_NORM):
        build, label = _norm_kernel(a)
        return build, label, ()
    if kind is KernelKind.ROTARY:
        return _rotary, "torch rotary (vLLM forward_native, neox)", ()
    if kind is KernelKind.ACT_AND_MUL:
        build, label = _act_and_mul(a.name)
        return build, label, ()
    if kind is KernelKind.ACTIVATION:
        act = ACTIVATIONS.get(a.name)
        if act is None:
            raise Unmeasurable(f"no torch activation for '{a.name}'")
        return _unary(act), f"aten::{a.name}", ()
    if kind is KernelKind.EMBEDDING:
        return _embedding, "aten::embedding", ()
    if kind is KernelKind.MOE_ROUTER:
        return _router(a.name)
    if kind is KernelKind.CONV1D:
        return _causal_conv1d, "aten::conv1d (depthwise, causal) + silu", ()
    if kind is KernelKind.KV_CACHE_WRITE:
        return _kv_cache_write, "aten::index_copy_", ()
    if kind is KernelKind.LINEAR_ATTENTION:
        raise Unmeasurable(f"linear attention ({a.name}) has no torch kernel in the profiler "
                           "(vLLM runs fla Triton kernels)")
    if kind is not KernelKind.ELEMENTWISE:
        raise Unmeasurable(f"no per-token benchmark for kernel kind {kind.value}")
    if key.op in ELEMENTWISE_OPS:
        build, label = ELEMENTWISE_OPS[key.op]
        return build, label, ()
    base = key.op.rpartition(READS_TAG)[0]
    if elementwise_reads(key.op) == 2 and base in BINARY_OPS:  # `add/r2`: the binary op the table already times
        build, label = ELEMENTWISE_OPS[base]
        return build, label, ()
    if key.op in NOT_MEASURABLE:
        raise Unmeasurable(f"elementwise '{key.op}': {NOT_MEASURABLE[key.op]}")
    raise Unmeasurable(f"elementwise op '{key.op}' is not in the profiler's op table")

"""Map an exported FX graph (aten level) onto graphsim's IR.

Every call_function node becomes an IR node with its output TensorSpecs (shapes symbolic in the
token dimension T), its module scope and class, its decoder-layer index, and typed attributes
for the ops that need them. Unknown aten targets become OPAQUE nodes and are reported.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sympy
import torch
import torch.fx

from graphsim.errors import GraphError
from graphsim.importers.aten_map import ALIASES, ATEN_OPS, DROPPED, packet_name, qualified_name
from graphsim.ir import (
    AttentionAttrs, CastAttrs, ConvAttrs, DType, EmbeddingAttrs, Graph, IndexerAttrs, LinearAttentionAttrs, LinearAttrs,
    MoEAttrs, NoAttrs, Node, NormAttrs, OpaqueAttrs, ReduceAttrs, TensorSpec, value_name,
)
from graphsim.ir.attrs import Attrs
from graphsim.ir.ops import Op

N = TypeVar("N", int, float)

_TORCH_TO_DTYPE = {
    torch.float32: DType.FLOAT32, torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16,
    torch.float64: DType.FLOAT64, torch.int64: DType.INT64, torch.int32: DType.INT32,
    torch.int16: DType.INT16, torch.int8: DType.INT8, torch.uint8: DType.UINT8, torch.bool: DType.BOOL,
    torch.float8_e4m3fn: DType.FLOAT8_E4M3, torch.float8_e5m2: DType.FLOAT8_E5M2,
    torch.complex64: DType.COMPLEX64,
}


def to_dtype(dt: torch.dtype) -> DType:
    return _TORCH_TO_DTYPE[dt]


@dataclass
class ConvertContext:
    token_symbols: dict[sympy.Symbol, sympy.Expr]  # shape-env symbol → T
    layer_map: dict[int, int]  # traced ModuleList position → original layer index
    stack_path: str  # e.g. "model.layers"
    root_prefix: str = ""  # prefix the tracing wrapper adds to every module path
    opaque: list[str] = field(default_factory=list)


def _dim(d: Any, ctx: ConvertContext):
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        if isinstance(expr, (int, sympy.Integer)):
            return int(expr)
        return sympy.simplify(expr.xreplace(ctx.token_symbols))
    return int(d)


def _spec(val: Any, ctx: ConvertContext) -> TensorSpec | None:
    if isinstance(val, torch.Tensor):
        return TensorSpec(tuple(_dim(d, ctx) for d in val.shape), to_dtype(val.dtype))
    return None


def remap_scope(path: str, ctx: ConvertContext) -> tuple[str, int | None]:
    """Map `model.layers.1.mlp` of the reduced stack back to the original layer index."""
    path = path.removeprefix(ctx.root_prefix)
    prefix = ctx.stack_path + "."
    if not path.startswith(prefix):
        return path, None
    rest = path[len(prefix):]
    m = re.match(r"(\d+)(.*)", rest)
    if not m:
        return path, None
    orig = ctx.layer_map.get(int(m.group(1)), int(m.group(1)))
    return f"{prefix}{orig}{m.group(2)}", orig


def _scope_of(n: torch.fx.Node, ctx: ConvertContext) -> tuple[str, str, int | None]:
    stack = n.meta.get("nn_module_stack") or {}
    if not stack:
        return "", "", None
    path, cls = list(stack.values())[-1]
    if path.startswith(("L['self']", "_empty")):
        return "", "", None
    cls_name = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    scope, layer = remap_scope(path, ctx)
    return scope, cls_name, layer


def _arg(n: torch.fx.Node, i: int, name: str, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _number(a: object, default: N, cast: Callable[[Any], N], what: str) -> N:
    """A number argument of an aten call (an int, a bool, a float or a constant SymInt / SymFloat) made
    `cast`; `default` for None."""
    if a is None:
        return default
    if isinstance(a, (int, float, torch.SymInt, torch.SymFloat)):
        return cast(a)
    raise GraphError(f"expected {what} argument, got {type(a).__name__}: {a!r}")


def _int(a: object, default: int = 0) -> int:
    return _number(a, default, int, "an integer")


def _float(a: object, default: float = 0.0) -> float:
    return _number(a, default, float, "a number")


def _tensor(specs: list[TensorSpec | None], i: int, n: torch.fx.Node) -> TensorSpec:
    """The i-th tensor argument's spec; an error naming the node when the trace gave none."""
    s = specs[i] if i < len(specs) else None
    if s is None:
        raise GraphError(f"import.hf: {n.name} ({qualified_name(n.target)}) has no tensor at argument {i}")
    return s


def _attrs(op: Op, n: torch.fx.Node, in_specs: list[TensorSpec | None], out: TensorSpec | None) -> Attrs:
    """Typed attributes for the ops that carry them."""
    if op is Op.LINEAR:
        w = _tensor(in_specs, 1, n)
        has_bias = len(n.args) > 2 and n.args[2] is not None
        return LinearAttrs(int(w.shape[1]), int(w.shape[0]), has_bias)
    if op is Op.EMBEDDING:
        w = _tensor(in_specs, 0, n)
        return EmbeddingAttrs(int(w.shape[0]), int(w.shape[1]))
    if op in (Op.MEAN, Op.SUM, Op.MAX, Op.SOFTMAX):
        dim_arg = _arg(n, 1, "dim", ())
        dim_list = [dim_arg] if isinstance(dim_arg, int) else dim_arg if isinstance(dim_arg, (list, tuple)) else []
        dims = tuple(int(d) for d in dim_list if isinstance(d, int))
        if op is Op.SOFTMAX:
            return ReduceAttrs(dims, True)
        return ReduceAttrs(dims, bool(_arg(n, 2, "keepdim", False)))
    if op is Op.CAST:
        return CastAttrs(out.dtype.value if out is not None else "")
    if op in (Op.RMS_NORM, Op.LAYER_NORM):
        eps = n.kwargs.get("eps")
        return NormAttrs(float(eps) if isinstance(eps, (int, float)) else None, None)
    if op is Op.CONV1D:
        w = _tensor(in_specs, 1, n)
        groups = _int(_arg(n, 8, "groups", 1) if packet_name(n.target) == "convolution" else _arg(n, 6, "groups", 1), 1)
        return ConvAttrs(int(w.shape[0]), int(w.shape[-1]), groups)
    if op is Op.ATTENTION and packet_name(n.target) == "compressed_attention":
        # graphsim::compressed_attention(q [B,H,T,D], kv [B,1,T,D], compressed, indices, sinks, scale, window, ratio,
        # rope_dim)
        q = _tensor(in_specs, 0, n)
        indices = in_specs[3] if len(in_specs) > 3 else None
        scale, window, ratio, rope = (tuple(n.args) + (None,) * 9)[5:9]
        return AttentionAttrs(
            num_heads=int(q.shape[1]), num_kv_heads=1, head_dim=int(q.shape[-1]), v_head_dim=int(q.shape[-1]),
            causal=True, sliding_window=_int(window) or None, has_sinks=True, scale=_float(scale),
            index_topk=int(indices.shape[-1]) if indices is not None else None, compress_ratio=_int(ratio) or None,
            qk_rope_head_dim=_int(rope) or None,
        )
    if op is Op.ATTENTION and packet_name(n.target) == "alibi_attention":
        # graphsim::alibi_attention(q [B,H,S,D], k, v, slopes [H], scale): causal MHA with ALiBi (alibi_ops.py)
        q, v = _tensor(in_specs, 0, n), _tensor(in_specs, 2, n)
        return AttentionAttrs(num_heads=int(q.shape[1]), num_kv_heads=int(_tensor(in_specs, 1, n).shape[1]),
                              head_dim=int(q.shape[-1]), v_head_dim=int(v.shape[-1]), causal=True,
                              scale=_float(n.args[4] if len(n.args) > 4 else None) or None, alibi=True)
    if op is Op.SPARSE_INDEXER and packet_name(n.target) == "compressed_indexer":
        q = _tensor(in_specs, 0, n)  # q [B, S, H, D]; args: q, keys, weights, topk, ratio, scale
        topk, ratio = (tuple(n.args) + (None,) * 5)[3:5]
        return IndexerAttrs(num_heads=int(q.shape[2]), head_dim=int(q.shape[3]), topk=_int(topk),
                            compress_ratio=_int(ratio) or None)
    if op is Op.ATTENTION:
        q, k, v = _tensor(in_specs, 0, n), _tensor(in_specs, 1, n), _tensor(in_specs, 2, n)
        sinks, scale, causal, window, softcap, lora, rope = (tuple(n.args) + (None,) * 10)[3:10]
        indices = in_specs[10] if len(in_specs) > 10 else None  # DSA: [B, S, topk] keys per query
        blocks = in_specs[11] if len(in_specs) > 11 else None  # MiniMax-M3: [B, Hi, S, topk] blocks per query
        if indices is None and blocks is not None and len(n.args) > 12 and _int(n.args[12]):
            indices = TensorSpec((int(blocks.shape[-1]) * _int(n.args[12]),), blocks.dtype)  # at most topk·block keys
        return AttentionAttrs(
            num_heads=int(q.shape[1]), num_kv_heads=int(k.shape[1]), head_dim=int(q.shape[-1]),
            v_head_dim=int(v.shape[-1]), causal=bool(causal), sliding_window=_int(window) or None,
            has_sinks=sinks is not None, softcap=_float(softcap) or None, scale=_float(scale),
            kv_lora_rank=_int(lora) or None, qk_rope_head_dim=_int(rope) or None,
            index_topk=int(indices.shape[-1]) if indices is not None else None,
        )
    if op is Op.SPARSE_INDEXER and packet_name(n.target) == "block_indexer":
        q = _tensor(in_specs, 0, n)  # q [B, Hi, S, D]; args: q, k, block_size, topk, local
        return IndexerAttrs(num_heads=int(q.shape[1]), head_dim=int(q.shape[3]), topk=_int(n.args[3]),
                            block_size=_int(n.args[2]))
    if op is Op.SPARSE_INDEXER:
        q = _tensor(in_specs, 0, n)  # q [B, S, H, D]
        return IndexerAttrs(num_heads=int(q.shape[2]), head_dim=int(q.shape[3]), topk=_int(n.args[3]))
    if op is Op.MOE_EXPERTS:
        hidden, idx, w_down = _tensor(in_specs, 0, n), _tensor(in_specs, 1, n), _tensor(in_specs, 4, n)
        num_experts, gated, transposed, _, activation = n.args[7:12]
        inter = int(w_down.shape[2] if transposed is False else w_down.shape[1])
        return MoEAttrs(
            num_experts=_int(num_experts), top_k=int(idx.shape[-1]), hidden_size=int(hidden.shape[-1]),
            intermediate_size=inter, gated=bool(gated), has_bias=n.args[5] is not None, activation=str(activation),
        )
    if op is Op.LINEAR_ATTENTION and packet_name(n.target) == "ssm_scan":
        x, b = _tensor(in_specs, 0, n), _tensor(in_specs, 3, n)  # x [B,S,H,P], B [B,S,G,N]
        return LinearAttentionAttrs(
            kind="mamba2_ssd", num_k_heads=int(b.shape[2]), num_v_heads=int(x.shape[2]), k_head_dim=int(b.shape[3]),
            v_head_dim=int(x.shape[3]), chunked=True, chunk_size=_int(n.args[11] if len(n.args) > 11 else 0),
        )
    if op is Op.LINEAR_ATTENTION and packet_name(n.target) == "selective_scan":
        x, a = _tensor(in_specs, 0, n), _tensor(in_specs, 2, n)  # x [B,D,S], A [D,N] (mamba1_ops.py)
        # Mamba-1: every channel its own "head" of one value, one B/C group of the state size (x_proj's output)
        return LinearAttentionAttrs(kind="mamba1", num_k_heads=1, num_v_heads=int(x.shape[1]), k_head_dim=int(a.shape[1]),
                                    v_head_dim=1, chunked=False)
    if op is Op.LINEAR_ATTENTION and packet_name(n.target) == "lightning_attention":
        q, v = _tensor(in_specs, 0, n), _tensor(in_specs, 2, n)  # q, k, v [B, H, S, D], slope, block_size
        return LinearAttentionAttrs(
            kind="lightning", num_k_heads=int(q.shape[1]), num_v_heads=int(v.shape[1]), k_head_dim=int(q.shape[3]),
            v_head_dim=int(v.shape[3]), chunked=True, chunk_size=_int(n.args[4]),
        )
    if op is Op.LINEAR_ATTENTION and packet_name(n.target) == "kda":
        k, v = _tensor(in_specs, 1, n), _tensor(in_specs, 2, n)  # graphsim::kda: q, k, v, g, beta, state, …
        # the recurrent state is float32 whatever the cache dtype (vLLM mamba_utils.py
        # MambaStateDtypeCalculator.kda_state_dtype: (conv dtype, torch.float32))
        return LinearAttentionAttrs(
            kind="kda", num_k_heads=int(k.shape[2]), num_v_heads=int(v.shape[2]), k_head_dim=int(k.shape[3]),
            v_head_dim=int(v.shape[3]), chunked=bool(n.args[7]), chunk_size=_int(n.args[8]), state_dtype="f32",
        )
    if op is Op.LINEAR_ATTENTION:
        k, v = _tensor(in_specs, 1, n), _tensor(in_specs, 2, n)
        return LinearAttentionAttrs(
            kind="gated_delta_rule", num_k_heads=int(k.shape[2]), num_v_heads=int(v.shape[2]),
            k_head_dim=int(k.shape[3]), v_head_dim=int(v.shape[3]), chunked=bool(n.args[7]),
        )
    if op is Op.OPAQUE:
        return OpaqueAttrs(qualified_name(n.target))
    return NoAttrs()


_TRANSPOSES = ("t", "numpy_T", "transpose", "permute")


def _transposed_linear(pname: str, n: torch.fx.Node, ref: Callable[[Any], list[str]],
                       params: dict[str, TensorSpec]) -> tuple[list[str], LinearAttrs, torch.fx.Node | None] | None:
    """A projection written as a matrix product with a 2-D parameter, made `Op.LINEAR` with inputs `(x, W[, bias])`
    as `linear(x, W, bias)` orders them and its features read from W's stored layout; vLLM runs each as its parallel
    linear's one GEMM. Two spellings:

    - `addmm(bias, x, W)` / `mm(x, W)` with W stored [in_features, out_features] (transformers' `Conv1D`: GPT-2,
      GPT-1, ImageGPT; pytorch_utils.py `Conv1D.forward` runs `torch.addmm(self.bias, x.view(-1, x.size(-1)),
      self.weight)`); vLLM loads these weights transposed ([out, in]; model_executor/models/gpt2.py
      `GPT2LMHeadModel.load_weights`: `loaded_weight.t()` for c_attn, c_proj, c_fc);
    - `matmul(x, W.T)` with W stored [out, in], and its bias `+ b` when that add is the product's only user
      (Falcon's `FalconLinear.forward`: `input @ self.weight.T` then `+ self.bias`; vLLM falcon.py builds
      QKVParallelLinear / ColumnParallelLinear / RowParallelLinear with the bias inside). The add is returned so the
      converter forwards it to the linear's output."""
    if any(n.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) or len(n.args) > 3:
        return None
    if pname in ("addmm", "mm"):
        args = [ref(a) for a in n.args[:3]]
        x, w, b = (args[1], args[2], args[0]) if pname == "addmm" else (args[0], args[1], [])
        if len(x) != 1 or len(w) != 1 or w[0] not in params or params[w[0]].rank != 2:
            return None
        if pname == "addmm" and (len(b) != 1 or b[0] not in params or params[b[0]].rank != 1):
            return None
        spec = params[w[0]]
        return [x[0], w[0], *b], LinearAttrs(int(spec.shape[0]), int(spec.shape[1]), bool(b)), None
    if pname != "matmul" or len(n.args) != 2 or not isinstance(n.args[1], torch.fx.Node):
        return None
    t = n.args[1]
    if packet_name(t.target) not in _TRANSPOSES or not t.args:
        return None
    if packet_name(t.target) == "permute" and (len(t.args) < 2 or t.args[1] not in ([1, 0], (1, 0))):
        return None
    x, w = ref(n.args[0]), ref(t.args[0])
    if len(x) != 1 or len(w) != 1 or w[0] not in params or params[w[0]].rank != 2:
        return None
    spec = params[w[0]]
    users = list(n.users)
    add, bias = None, []
    if len(users) == 1 and packet_name(users[0].target) == "add" and len(users[0].args) == 2:
        other = [ref(a) for a in users[0].args if a is not n]
        if len(other) == 1 and len(other[0]) == 1 and other[0][0] in params and params[other[0][0]].rank == 1 \
                and params[other[0][0]].shape[0] == spec.shape[0]:
            add, bias = users[0], other[0]
    return [x[0], w[0], *bias], LinearAttrs(int(spec.shape[1]), int(spec.shape[0]), bool(bias)), add


def _flatten_tensors(val: Any) -> list[Any]:
    if isinstance(val, (list, tuple)):
        return list(val)
    return [val]


def convert_graph(gm_graph: torch.fx.Graph, name: str, placeholders: dict[str, tuple[str, str]],
                  ctx: ConvertContext) -> Graph:
    """placeholders: fx placeholder name → (kind, IR name) with kind in param/buffer/input."""
    g = Graph(name=name)
    env: dict[str, str | list[str | None] | None] = {}  # fx node name → IR value name(s)
    specs: dict[str, TensorSpec] = {}
    used_names: set[str] = set()
    folded: dict[str, str] = {}  # fx bias-add node → the fx matrix product now a linear that includes it

    def ref(a: Any) -> list[str]:
        if isinstance(a, torch.fx.Node):
            v = env.get(a.name)
            if v is None:
                return []
            return [x for x in v if x is not None] if isinstance(v, list) else [v]
        if isinstance(a, (list, tuple)):
            return [r for x in a for r in ref(x)]
        return []

    for n in gm_graph.nodes:
        if n.op == "placeholder":
            kind, ir_name = placeholders.get(n.name, ("input", n.name))
            spec = _spec(n.meta.get("val"), ctx)
            if spec is None:
                continue
            scope, layer = remap_scope(ir_name, ctx)
            (g.params if kind == "param" else g.inputs)[scope] = spec
            env[n.name] = scope
            specs[scope] = spec
            if kind == "buffer":
                g.meta.buffers.append(scope)
        elif n.op == "call_function":
            if n.target is operator.getitem:
                src = env.get(n.args[0].name)
                env[n.name] = src[n.args[1]] if isinstance(src, list) else src
                continue
            pname = packet_name(n.target)
            if pname in DROPPED:
                continue
            if n.name in folded:  # a bias add taken into its linear
                env[n.name] = env.get(folded[n.name])
                continue
            val = n.meta.get("val")
            inputs = [r for a in list(n.args) + list(n.kwargs.values()) for r in ref(a)]
            if pname in ALIASES and inputs:
                env[n.name] = inputs[0]
                continue
            if pname == "to" and inputs:  # .to(device) / same-dtype .to are no-ops
                out = _spec(val, ctx)
                if out is not None and specs.get(inputs[0]) is not None and specs[inputs[0]].dtype == out.dtype:
                    env[n.name] = inputs[0]
                    continue
            op = ATEN_OPS.get(pname, Op.OPAQUE)
            vals = _flatten_tensors(val)
            outs: list[TensorSpec] = []
            names: list[str | None] = []
            base = n.name
            while base in used_names:
                base += "_"
            used_names.add(base)
            for v in vals:
                s = _spec(v, ctx)
                if s is None:
                    names.append(None)
                    continue
                names.append(value_name(base, len(outs)))
                outs.append(s)
            if not outs:
                continue
            if op is Op.OPAQUE:
                ctx.opaque.append(qualified_name(n.target))
            in_specs = [specs.get(i) for i in inputs]
            # keep positional tensor args addressable for attrs (None args stay None)
            pos_specs = [specs.get(ref(a)[0]) if ref(a) else None for a in n.args]
            attrs = _attrs(op, n, pos_specs if op in (Op.ATTENTION, Op.MOE_EXPERTS, Op.LINEAR_ATTENTION, Op.SPARSE_INDEXER,
                                                       Op.LINEAR, Op.EMBEDDING, Op.CONV1D) else in_specs, outs[0])
            product = _transposed_linear(pname, n, ref, g.params)
            if product is not None:  # a projection written as a matrix product with a parameter (Conv1D, FalconLinear)
                op, inputs, attrs = Op.LINEAR, product[0], product[1]
                if product[2] is not None:
                    folded[product[2].name] = n.name  # its bias add: forwarded to the linear's output
            scope, cls, layer = _scope_of(n, ctx)
            g.nodes.append(Node(
                name=base, op=op, inputs=tuple(inputs), outputs=tuple(outs), attrs=attrs, scope=scope,
                module_type=cls, layer=layer, target=qualified_name(n.target), provenance="import.hf",
            ))
            specs.update({nm: spec for nm, spec in zip(names, [_spec(v, ctx) for v in vals], strict=True)
                          if nm is not None and spec is not None})
            env[n.name] = names if isinstance(val, (list, tuple)) else names[0]
        elif n.op == "output":
            g.outputs = [o for o in ref(n.args[0]) if o in specs]
    return g

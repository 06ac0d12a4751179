"""vLLM fuse rules for Gemma-3n's leftover ops (AltUp, the Laurel residual scale, the per-layer input gate, the
activation-sparsity threshold), which were priced as approximate placeholders (38 % of its tiny decode step), and
two cases of "no kernel at all" that PyTorch itself decides, whatever the model.

No kernel (absorbed):

- a cast to the dtype its input already has (`x.to(dtype)` / `x.type_as(y)` with `x.dtype == dtype`): PyTorch returns
  `x` itself, no copy (torch `Tensor.to`: "If the self Tensor already has the correct torch.dtype and torch.device,
  then self is returned"; `type_as` is `self.to(tensor.type())`). transformers' Gemma3n ends AltUp's predict and
  correct with `.type_as(hidden_states)` on a tensor of that dtype; vLLM's port (Gemma3nAltUp) has no such call.
- `x[a] += y` traced as an in-place op on a slice and a `copy_` of its result into the same slice of the same base
  (Python's `__setitem__` after `__iadd__`): ATen's `copy_` returns at once when source and destination are the
  same tensor (aten/src/ATen/native/Copy.cpp copy_impl: `if (self.is_same(src)) return self;`). Gemma3n's
  `corrected_predictions[1:] += first_prediction` (vLLM Gemma3nDecoderLayer.forward, the same line). Matched by
  structure: the destination and the in-place op's input are slices / selects of one base with one shape.
- the scalar tensors transformers' activation sparsity builds on every forward (`torch.tensor(activation_sparsity)`,
  the normal quantile): vLLM's GeluAndMulSparse computes `std_multiplier` once in `__init__`
  (model_executor/layers/activation.py), so no kernel in a step.

Kernels vLLM's port launches as written (vllm/model_executor/models/gemma3n.py: Gemma3nAltUp.predict / correct /
_compute_router_modalities / scale_corrected_output, Gemma3nDecoderLayer.forward; GeluAndMulSparse._gaussian_topk),
one PyTorch kernel per op on the custom-op path, each a named kernel priced by the bytes it moves (a binary op on two
token tensors of its width reads two, `ElementwiseGeometry.reads`; a reduction reads its wider input, `in_width`; a
broadcast factor of a few elements a token is not counted), no longer approximate:

- the router modalities `torch.tanh(routed.float()).type_as(x)`: cast, tanh, cast (4 elements a token);
- predict's `torch.matmul(hidden_states.permute(1, 2, 0), all_coefs_T)`: one batched GEMM (`bmm`) of a token's
  [hidden, n] block by its [n, n] coefficients, 2·n FLOPs an element against 2 bytes read and 2 written — memory
  bound on every GPU graphsim knows, so priced by its bytes; then `predictions += hidden_states` (add, reads two)
  and `.contiguous()` (a copy: the sum is a permuted view);
- `(attn_gated + laurel_output) / torch.sqrt(torch.tensor(2.0))`: the div;
- correct's `activated - predictions[active]` (sub, reads two), `correction_coefs(...) + 1.0` (add), the
  `torch.mul(innovation, all_coefs)` broadcast (mul), `corrected += predictions` (add, reads two);
- scale_corrected_output's first `type_as` (the cast before the multiply by `correct_output_scale`);
- `torch.mul(first_prediction, per_layer_input)` (mul, reads two);
- the sparsity threshold `mean`, `std`, `std * std_multiplier`, `mean + ...`, `x - cutoff_x`, `relu`;
- Gemma3nTextModel.forward's AltUp embed and unembed: per extra stream `mean(h ** 2) ** 0.5` (pow, mean, pow),
  `torch.maximum(new_magnitude, eps)`, the div and the `*=` (transformers: pow, mean, clamp, sqrt, mul, div: as
  many kernels), `torch.stack` (one cat) and the final `torch.mean(hidden_states, dim=0)`.

Not modelled: vLLM keeps `correct_output_scale` in float32 (`torch.zeros(hidden_size, dtype=torch.float32)`), so its
multiply and the cast back run in float32 (one more cast kernel than transformers' bf16 trace, which the trace does
not show); `innovation.repeat(n, 1, 1)` materialises n copies in both (graphsim absorbs repeat as a view).
"""

from __future__ import annotations

from graphsim.ir import DType, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

# transformers' Gemma-3n modules whose leftover ops vLLM's port (models/gemma3n.py) runs as written: AltUp's predict
# and correct are methods called from the decoder layer (their ops are in its scope); the sparsity is in the MLP; the
# AltUp embed / unembed (magnitude matching of the n streams, their stack and final mean) in the text model
GEMMA3N_MODULES = {"Gemma3nTextDecoderLayer", "Gemma3nTextMLP", "Gemma3nTextModel"}
_VIEWS = (Op.SLICE, Op.SELECT)


def _input_dtype(ctx: FuseContext, n: Node) -> DType | None:
    """The dtype of a cast's source (its first operand: `to` has one, `type_as` reads only the other's dtype)."""
    if not n.inputs:
        return None
    try:
        return ctx.spec(n.inputs[0]).dtype
    except (KeyError, ValueError):  # (a constant operand)
        return None


def _match_noop_cast(ctx: FuseContext) -> list[Candidate]:
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.CAST and ctx.is_free(n)
            and n.outputs[0].dtype is _input_dtype(ctx, n)]


NOOP_CAST = Rule(
    "noop_cast", "torch Tensor.to / type_as (self returned when the dtype is already the target's: no kernel); "
    "vLLM models/gemma3n.py Gemma3nAltUp.predict / correct end without transformers' .type_as(hidden_states)",
    _match_noop_cast, lambda _ctx, _c: None,
)


def _in_place(n: Node) -> bool:
    """An in-place aten op (`aten::add_.Tensor`): its name ends with an underscore."""
    name = n.target.removeprefix("aten::").split(".")[0]
    return n.target.startswith("aten::") and name.endswith("_") and not name.startswith("_")


def _view_of(ctx: FuseContext, value: str) -> Node | None:
    p = ctx.producer(value)
    return p if p is not None and p.op in _VIEWS and p.inputs else None


def _match_self_copy(ctx: FuseContext) -> list[Candidate]:
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.COPY or n.target != "aten::copy_" or not ctx.is_free(n) or len(n.inputs) != 2:
            continue
        dst, src = _view_of(ctx, n.inputs[0]), ctx.producer(n.inputs[1])
        if dst is None or src is None or not _in_place(src) or not src.inputs:
            continue
        twin = _view_of(ctx, src.inputs[0])
        if (twin is not None and twin.op is dst.op and twin.inputs[0] == dst.inputs[0]
                and twin.outputs[0].shape == dst.outputs[0].shape):
            out.append(Candidate([n]))
    return out


SELF_COPY = Rule(
    "self_copy", "aten/src/ATen/native/Copy.cpp copy_impl (if (self.is_same(src)) return self: x[a] += y's "
    "__setitem__ copies the in-place sum onto itself); vLLM models/gemma3n.py Gemma3nDecoderLayer.forward "
    "(corrected_predictions[1:] += first_prediction)", _match_self_copy, lambda _ctx, _c: None,
)


def _match_host_scalars(ctx: FuseContext) -> list[Candidate]:
    """transformers' per-forward scalar constants (lift_fresh_copy of a 0-d tensor) in Gemma-3n's MLP."""
    return [Candidate([n]) for n in ctx.graph.nodes if n.module_type == "Gemma3nTextMLP" and ctx.is_free(n)
            and n.op is Op.COPY and n.target == "aten::lift_fresh_copy" and not n.outputs[0].shape]


HOST_SCALARS = Rule(
    "sparsity_constants", "model_executor/layers/activation.py:GeluAndMulSparse.__init__ (std_multiplier = "
    "normal_dist.icdf(target_sparsity_tensor), once: no kernel in a step)", _match_host_scalars,
    lambda _ctx, _c: None,
)


def _token_widths(ctx: FuseContext, n: Node) -> list[int]:
    """The per-token widths of the activation operands of `n` (parameters, buffers and constants left out)."""
    widths = []
    for v in n.inputs[:1] if n.op is Op.CAST else n.inputs:  # type_as reads only the other tensor's dtype
        if v in ctx.graph.params or v in ctx.graph.meta.buffers:
            continue
        try:
            w, rows = P.per_token(ctx.spec(v))
        except (KeyError, ValueError):
            continue
        if rows is Rows.TOKENS:
            widths.append(w)
    return widths


# aten aliases graphsim's IR traces as opaque ops, by the kernel they launch
_ALIASES = {"multiply": "mul", "concatenate": "cat"}


def _name(n: Node) -> str:
    if n.op is Op.MATMUL:
        return "bmm"
    if n.op is Op.OPAQUE and n.target.startswith("aten::"):
        name = n.target.removeprefix("aten::").split(".")[0]
        return _ALIASES.get(name, name)
    return n.op.value


def leftover_ops_in(ctx: FuseContext, modules: set[str], rule: str) -> list[Candidate]:
    """Each free, priced op (not a view, not position arithmetic, not a GEMM) of the given module classes."""
    return [Candidate([n], {"rule": rule}) for n in ctx.graph.nodes if n.module_type in modules and ctx.is_free(n)
            and n.outputs and n.op not in P.ABSORBED_OPS and not ctx.index_only(n) and n.op is not Op.LINEAR]


def _match_layer_ops(ctx: FuseContext) -> list[Candidate]:
    return leftover_ops_in(ctx, GEMMA3N_MODULES, "gemma3n_ops")


def port_op_kernel(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    """One named kernel for a leftover op a vLLM port runs as written, priced by the bytes it moves (the candidate's
    info names the rule; else gemma3n_ops)."""
    n = c.nodes[0]
    width, rows = P.per_token(n.outputs[0], n)
    widths = _token_widths(ctx, n)
    reads = sum(w == width for w in widths)
    if widths and max(widths) > width:  # a reduction (mean, std over the features or the streams) reads its input
        geo = ElementwiseGeometry(width=width, in_width=max(widths))
    else:
        geo = ElementwiseGeometry(width=width, reads=reads if reads > 1 else None)
    return KernelAttrs(KernelKind.ELEMENTWISE, _name(n), geo, n.outputs[0].dtype.value, rows, (n.name,),
                       c.info.get("rule", "gemma3n_ops"))


GEMMA3N_OPS = Rule(
    "gemma3n_ops", "model_executor/models/gemma3n.py Gemma3nAltUp.predict / correct / _compute_router_modalities / "
    "scale_corrected_output, Gemma3nDecoderLayer.forward (the Laurel scale, the per-layer input mul); "
    "layers/activation.py GeluAndMulSparse._gaussian_topk (mean, std, mul, add, sub, relu); Gemma3nTextModel.forward "
    "(AltUp embed / unembed: magnitudes, stack, mean): one kernel each",
    _match_layer_ops, port_op_kernel,
)

# after every specific rule, before the elementwise catch-alls (vllm.py RULES)
RULES: list[Rule] = [NOOP_CAST, SELF_COPY, HOST_SCALARS, GEMMA3N_OPS]

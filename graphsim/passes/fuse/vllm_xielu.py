"""vLLM fuse rule for the xIELU activation (Apertus), whose elementwise ops were priced as approximate placeholders.

vLLM's `XIELU` (model_executor/layers/activation.py, `get_act_fn("xielu")`) runs the experimental fused CUDA kernel
only when the separate `xielu` package is installed; otherwise (a default install: "CUDA-fused xIELU not available
... falling back to a Python version") `_xielu_python`, which is character for character transformers'
`XIELUActivation._xielu_python` (activations.py): softplus of alpha_p and alpha_n (one-element parameters, once a
step), beta + softplus, x > 0, alpha_p * x * x + beta * x, (expm1(min(x, eps)) - x) * alpha_n + beta * x, where.
On the custom-op path graphsim follows, each op is one PyTorch kernel, so the traced ops are vLLM's kernels: each
becomes a named elementwise kernel (the op's name; `min` and `expm1`, which graphsim's IR traces as opaque ops, by
their aten name), priced by its bytes, no longer approximate. The comparison's bool output is priced at its input's
dtype, as the placeholder was.
"""

from __future__ import annotations

from graphsim.ir import DType, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule

# transformers' activation class whose forward is vLLM's XIELU._xielu_python op for op
XIELU_MODULES = {"XIELUActivation"}


def _match_xielu(ctx: FuseContext) -> list[Candidate]:
    return [Candidate([n]) for n in ctx.graph.nodes if n.module_type in XIELU_MODULES and ctx.is_free(n)
            and n.op not in P.ABSORBED_OPS and not ctx.index_only(n)]


def _dtype(ctx: FuseContext, n: Node) -> str:
    out = n.outputs[0].dtype
    if out is not DType.BOOL:
        return out.value
    for v in n.inputs:
        if v in ctx.graph.params or ctx.producer(v) is not None:
            dtype = ctx.spec(v).dtype
            if dtype.is_float:
                return dtype.value
    return out.value


def _build(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    width, rows = P.per_token(n.outputs[0], n)
    return KernelAttrs(KernelKind.ELEMENTWISE, _name(n), ElementwiseGeometry(width=width), _dtype(ctx, n), rows,
                       (n.name,), "xielu_python")


def _name(n: Node) -> str:
    """The op's name; an op graphsim's IR has no kind for (min, expm1: `opaque`) by its aten target."""
    if n.op is Op.OPAQUE and n.target.startswith("aten::"):
        return n.target.removeprefix("aten::").split(".")[0]
    return n.op.value


XIELU_PYTHON = Rule(
    "xielu_python", "model_executor/layers/activation.py:XIELU._xielu_python (the default, without the xielu CUDA "
    "package: softplus x2, add, gt, mul x3, add, minimum, expm1, sub, mul, add, where: one kernel each on the "
    "custom-op path)", _match_xielu, _build,
)

RULES: list[Rule] = [XIELU_PYTHON]

"""vLLM fuse rules around Mamba-1's selective scan (`graphsim::selective_scan`, graphsim/importers/hf/mamba1_ops.py),
read from vllm/model_executor/layers/mamba/mamba_mixer.py (MambaMixer, used by models/mamba.py for Mamba and
FalconMamba and by models/jamba.py). Its forward_cuda runs inside the `vllm.mamba_mixer` custom op (opaque to
torch.compile, so each PyTorch op in it is its own kernel):

- in_proj (MergedColumnParallelLinear), the causal conv1d (`causal_conv1d_fn` for prefill tokens,
  `causal_conv1d_update` for decode tokens, activation inside) and x_proj (RowParallelLinear) are vllm.py's GEMM and
  CONV1D rules; FalconMamba's and Jamba's dt/B/C RMSNorms its RMS_NORM rule;
- `A = -exp(A_log)` is computed once at load (`A_weight_loader`: `-torch.exp(loaded_weight.float())`), no kernel;
- dt_proj is a ColumnParallelLinear with `skip_bias_add=True` (`_ssm_transform`: `self.dt_proj(time_step)[0]`), the
  bias added inside the scan; transformers writes it `self.dt_proj.weight @ time_step.transpose(1, 2)`: one GEMM;
- the scan's fp32 dt bias, `_time_proj_bias()` (`self.dt_proj.bias.float()`, on the prefill and the decode path): one
  small cast kernel per step, on a parameter only (`Rows.ONCE`). D's `self.D.float()` runs on the prefill path only
  (decode passes `self.D` as stored): absorbed, so a step with a prefill misses one such launch per layer (a few µs
  against its milliseconds), where a kernel would have charged it to every decode step too;
- the scan itself is vllm.py's LINEAR_ATTENTION rule (`selective_scan_fn` for prefill tokens,
  `selective_state_update` for decode tokens, kind "mamba1"), priced in costing/mamba1.py;
- transformers' Mamba / FalconMamba blocks keep the residual in fp32 when the config says `residual_in_fp32` (a cast
  of every token's hidden vector, and one back before lm_head); vLLM's MambaDecoderLayer keeps it in the model
  dtype (models/mamba.py: `self.norm(hidden_states, residual)`, fused_add_rms_norm), so those casts are no kernel.
"""

from __future__ import annotations

from graphsim.ir import LinearAttentionAttrs, Node, Op
from graphsim.ir.geometry import ElementwiseGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_ssm_residual import residual_fp32_casts

_SOURCE = "model_executor/layers/mamba/mamba_mixer.py:MambaMixer"
# the scan's inputs (mamba1_ops.selective_scan_op): x, dt, A, B, C, D, z, delta_bias, initial_state
_DT, _A, _D, _BIAS = 1, 2, 5, 7


def _scans(ctx: FuseContext) -> list[Node]:
    return [n for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION and n.attrs_as(LinearAttentionAttrs).kind == "mamba1"]


def _static(n: Node) -> bool:
    """No token dimension in the node's outputs: math on parameters only."""
    return all(isinstance(d, int) for o in n.outputs for d in o.shape)


def _param_chain(ctx: FuseContext, scan: Node, index: int) -> list[Node]:
    """The free elementwise nodes on parameters only that produce the scan's input `index` (with their ancestors in
    the mixer's module)."""
    if len(scan.inputs) <= index:
        return []
    p = ctx.producer(scan.inputs[index])
    if p is None:
        return []
    chain = [n for n in [p, *P.ancestors_within(ctx, p, {scan.scope})] if ctx.is_free(n)]
    if chain and all(n.op.group is OpGroup.ELEMENTWISE and _static(n) for n in chain):
        return sorted(chain, key=lambda n: ctx.pos[n.name])
    return []


def _match_a(ctx: FuseContext) -> list[Candidate]:
    return [Candidate(c) for s in _scans(ctx) if (c := _param_chain(ctx, s, _A))]


MAMBA1_A = Rule(
    "mamba1_a_at_load", f"{_SOURCE}.__init__ (A_weight_loader: weight_loader(param, -torch.exp(loaded_weight."
    "float())): A is stored negated and exponentiated in fp32 at load, no kernel per step)", _match_a,
    lambda _ctx, _c: None,
)


def _casts_of(index: int):
    def match(ctx: FuseContext) -> list[Candidate]:
        out = []
        for s in _scans(ctx):
            chain = _param_chain(ctx, s, index)
            if len(chain) == 1 and chain[0].op is Op.CAST:
                out.append(Candidate(chain))
        return out

    return match


def _cast(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    return KernelAttrs(KernelKind.ELEMENTWISE, "cast", ElementwiseGeometry(width=int(n.outputs[0].numel)),
                       n.outputs[0].dtype.value, Rows.ONCE, (n.name,), "mamba1_param_cast")


MAMBA1_PARAM_CASTS = Rule(
    "mamba1_param_cast", f"{_SOURCE}.forward_cuda (time_proj_bias = self._time_proj_bias() = self.dt_proj.bias.float() "
    "on both paths: one cast kernel per step, eager inside the vllm.mamba_mixer custom op)", _casts_of(_BIAS), _cast,
)

MAMBA1_D_CAST = Rule(
    "mamba1_d_cast_prefill_only", f"{_SOURCE}.forward_cuda (selective_scan_fn(..., self.D.float(), ...) on the prefill "
    "path only; selective_state_update(..., self.D, ...) on the decode path: no launch in a decode step)",
    _casts_of(_D), lambda _ctx, _c: None,
)


def _match_dt_proj(ctx: FuseContext) -> list[Candidate]:
    """`W @ x` with W a 2-D parameter [channels, rank] producing the scan's dt ([B, channels, T])."""
    out = []
    for s in _scans(ctx):
        p = ctx.producer(s.inputs[_DT]) if len(s.inputs) > _DT else None
        if p is None or p.op is not Op.MATMUL or not ctx.is_free(p) or len(p.inputs) != 2:
            continue
        w = ctx.graph.params.get(p.inputs[0])
        if w is not None and w.rank == 2 and int(w.shape[0]) == s.attrs_as(LinearAttentionAttrs).num_v_heads:
            out.append(Candidate([p], {"n": int(w.shape[0]), "k": int(w.shape[1])}))
    return out


def _dt_proj(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    return KernelAttrs(KernelKind.GEMM, "dt_proj", GemmGeometry(n=c.info["n"], k=c.info["k"]), n.outputs[0].dtype.value,
                       Rows.TOKENS, (n.name,), "mamba1_dt_proj")


MAMBA1_DT_PROJ = Rule(
    "mamba1_dt_proj", f"{_SOURCE}._ssm_transform (self.dt_proj(time_step)[0]: ColumnParallelLinear(time_step_rank, "
    "intermediate_size, skip_bias_add=True), the bias added inside the scan)", _match_dt_proj, _dt_proj,
)


def _match_residual_fp32(ctx: FuseContext) -> list[Candidate]:
    """In a model with a Mamba-1 scan: a cast to float32 of a token's whole hidden vector in a block's own scope (the
    residual, `residual.to(torch.float32)`), and the cast of the final norm's output back to lm_head's dtype."""
    return residual_fp32_casts(ctx, _scans(ctx))


MAMBA1_RESIDUAL_FP32 = Rule(
    "mamba1_residual_in_model_dtype", "model_executor/models/mamba.py:MambaDecoderLayer.forward (hidden_states, "
    "residual = self.norm(hidden_states, residual): the residual stays in the model dtype; transformers' "
    "residual_in_fp32 casts are no vLLM kernel)", _match_residual_fp32, lambda _ctx, _c: None,
)

# before vllm.py's GEMM and elementwise rules (dt_proj is a matmul, the casts elementwise)
RULES: list[Rule] = [MAMBA1_A, MAMBA1_DT_PROJ, MAMBA1_PARAM_CASTS, MAMBA1_D_CAST, MAMBA1_RESIDUAL_FP32]

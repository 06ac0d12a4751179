"""Mamba-1's selective scan as one semantic op, so a trace keeps the token count symbolic.

transformers (models/mamba, models/falcon_mamba and models/jamba: the module-global `mamba_selective_scan`, the
torch fallback of mamba_ssm's `selective_scan_fn`) writes the scan as a Python loop over the sequence
(`for index in range(seq_len)`), which pinned the trace to a fixed token count and unrolled into ~100 placeholder
ops per layer (98.8 % of a tiny MambaForCausalLM decode step). While tracing, that function is swapped (by the
module-global name the mixers call it by: custom_ops.LOOP_KERNELS) for `graphsim::selective_scan`, in the
channels-first layout of mamba_ssm's and vLLM's kernel:

    x [B, D, S], dt [B, D, S], A [D, N], B, C [B, N, S], D [D], z [B, D, S], delta_bias [D]
    → (y [B, D, S] in x's dtype, state [B, D, N] fp32)

The recurrence (Mamba, arXiv:2312.00752 Algorithm 2; mamba_ssm selective_scan_ref): Δ_t = softplus(dt_t + bias);
h_t = exp(Δ_t·A) ∘ h_{t-1} + Δ_t·x_t ⊗ B_t (per channel d and state n); y_t = h_t·C_t + D·x_t, gated y·silu(z_t).
Softplus, the bias, the D skip and the gate are inside the kernel, as in vLLM's `selective_scan_fn` /
`selective_state_update` (vllm/model_executor/layers/mamba/mamba_mixer.py MambaMixer.forward_cuda passes
`self.D`, `gate`, `time_proj_bias` and `delta_softplus=True` to both). The reference kernel runs that recurrence
in float32, so a tiny random model traced through it computes transformers' logits
(tests/importers/test_mamba1_scan.py).

The causal conv1d before it stays aten (transformers' `causal_conv1d_fn` fallback is an `F.conv1d` with
kernel − 1 padding, a slice and the activation), which the vLLM fuse pass makes one `causal_conv1d` kernel.
`mamba_selective_state_update` (the one-token path with a cache) is not swapped: graphsim traces without a cache.
The fuse rules are passes/fuse/vllm_mamba1.py, the pricing costing/mamba1.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.library.custom_op("graphsim::selective_scan", mutates_args=())
def selective_scan_op(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None,
    z: torch.Tensor | None, delta_bias: torch.Tensor | None, initial_state: torch.Tensor | None, delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, dt, z [B,D,S], A [D,N], B, C [B,N,S] (one group), D, delta_bias [D], initial_state [B,D,N] →
    (y [B,D,S] in x's dtype, final state [B,D,N] fp32)."""
    b, d, s = x.shape
    n = A.shape[-1]
    delta = dt.float()
    if delta_bias is not None:
        delta = delta + delta_bias.float()[:, None]
    if delta_softplus:
        delta = F.softplus(delta)
    xf, af, bf, cf = x.float(), A.float(), B.float(), C.float()
    state = torch.zeros(b, d, n) if initial_state is None else initial_state.float().clone()
    out = torch.empty(b, d, s)
    for t in range(s):
        state = torch.exp(delta[:, :, t, None] * af) * state + (delta[:, :, t] * xf[:, :, t])[..., None] * bf[:, None, :, t]
        out[:, :, t] = (state * cf[:, None, :, t]).sum(-1)
    if D is not None:
        out = out + xf * D.float()[:, None]
    if z is not None:
        out = out * F.silu(z.float())
    return out.to(x.dtype), state


@selective_scan_op.register_fake
def _selective_scan_fake(x, dt, A, B, C, D, z, delta_bias, initial_state, delta_softplus):
    b, d, _ = x.shape
    return torch.empty_like(x), x.new_empty((b, d, A.shape[-1]), dtype=torch.float32)


def mamba_selective_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                         return_last_state=False, **kwargs):
    """Drop-in for transformers' `mamba_selective_scan` (modeling_mamba / falcon_mamba / jamba): the same
    arguments (`use_mambapy` / `use_associative_scan` choose a torch fallback, not the result) and results."""
    out, state = torch.ops.graphsim.selective_scan(hidden_states, dt, A, B, C, D, z, delta_bias, None,
                                                   bool(delta_softplus))
    return (out, state) if return_last_state else out


# module-global names the modelling files call, keyed by role (custom_ops.LOOP_KERNELS)
MAMBA1_KERNELS = {"mamba_selective_scan": mamba_selective_scan}

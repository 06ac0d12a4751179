"""Kimi Delta Attention (KDA) as one semantic op, so a trace keeps the token count symbolic.

transformers writes KDA (models/kimi_linear `chunk_kimi_delta_attention` / `recurrent_kimi_delta_attention`;
the same two functions in models/glm5_next and models/bailing_hybrid) in Python: the chunked form pads the
sequence to a multiple of its chunk (a guard on the token count: the trace fell back to a static one) and
unrolls a 64-step triangular solve per chunk plus a loop over chunks, which the importer turned into ~990
elementwise nodes per layer. While tracing, both functions are swapped (by the module-global name the modelling
file calls them by) for `graphsim::kda`:

    q, k [B,S,H,Dk], v [B,S,H,Dv], g [B,S,H,Dk] (the per-channel log decay), beta [B,S,H]
    → (o [B,S,H,Dv], state [B,H,Dk,Dv] fp32)

KDA is the gated delta rule with a per-key-channel decay (Kimi Linear, arXiv:2510.26692 §3): per token
S ← diag(exp(g_t))·S; S ← S + β_t·k_t ⊗ (v_t − Sᵀk_t); o_t = Sᵀ(q_t·Dk^-½), q and k L2-normalised in the kernel
(`use_qk_l2norm_in_kernel=True` at every call site). The reference kernel is that recurrence in float32
(transformers' `recurrent_kimi_delta_attention`), so a tiny random model traced through it computes the same
logits as transformers' own path (tests/importers/test_kda.py).

vLLM runs it as `chunk_kda` for every token of a step that holds a prefill and `fused_recurrent_kda` otherwise
(vllm/model_executor/layers/kda.py KimiDeltaAttention._forward, fla ops in
vllm/model_executor/layers/fla/ops/kda.py); the fuse rule and the pricing are in passes/fuse/vllm.py and
costing/kda.py.
"""

from __future__ import annotations

import torch

# The chunk of fla's chunked KDA (vllm/model_executor/layers/fla/ops/utils.py FLA_CHUNK_SIZE = 64, used by
# chunk_kda_fwd) and of transformers' torch fallback (chunk_kimi_delta_attention chunk_size=64).
KDA_CHUNK = 64


@torch.library.custom_op("graphsim::kda", mutates_args=())
def kda_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    initial_state: torch.Tensor | None, l2norm_qk: bool, chunked: bool, chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q,k [B,S,H,Dk], v [B,S,H,Dv], g [B,S,H,Dk], beta [B,S,H] → (o [B,S,H,Dv] in q's dtype, state [B,H,Dk,Dv]
    fp32). `chunked` and `chunk_size` say which engine kernel the call stands for; the result is the same."""
    dtype = q.dtype
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if l2norm_qk:  # fla's l2norm: x / sqrt(Σx² + eps) (transformers kimi_linear l2norm)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * q.shape[-1] ** -0.5
    b, s, h, dk = k.shape
    dv = v.shape[-1]
    state = torch.zeros(b, h, dk, dv) if initial_state is None else initial_state.float().clone()
    out = torch.empty(b, s, h, dv)
    for t in range(s):
        state = state * g[:, t].exp()[..., None]  # per key channel
        kv_mem = (state * k[:, t, :, :, None]).sum(-2)
        delta = (v[:, t] - kv_mem) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (state * q[:, t, :, :, None]).sum(-2)
    return out.to(dtype), state


@kda_op.register_fake
def _kda_fake(q, k, v, g, beta, initial_state, l2norm_qk, chunked, chunk_size):
    b, s, h, dk = k.shape
    return q.new_empty((b, s, h, v.shape[-1])), q.new_empty((b, h, dk, v.shape[-1]), dtype=torch.float32)


def chunk_kda(query, key, value, g, beta, chunk_size=KDA_CHUNK, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, **kwargs):
    """Drop-in for transformers' `chunk_kimi_delta_attention` (same signature and results)."""
    out, state = torch.ops.graphsim.kda(query, key, value, g, beta, initial_state, bool(use_qk_l2norm_in_kernel),
                                        True, int(chunk_size))
    return out, (state if output_final_state else None)


def recurrent_kda(query, key, value, g, beta, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, **kwargs):
    """Drop-in for transformers' `recurrent_kimi_delta_attention` (same signature and results)."""
    out, state = torch.ops.graphsim.kda(query, key, value, g, beta, initial_state, bool(use_qk_l2norm_in_kernel),
                                        False, KDA_CHUNK)
    return out, (state if output_final_state else None)


# module-global names the modelling files call, keyed by role (custom_ops.LOOP_KERNELS)
KDA_KERNELS = {"chunk_kimi_delta_attention": chunk_kda, "recurrent_kimi_delta_attention": recurrent_kda}

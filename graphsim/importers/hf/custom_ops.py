"""Semantic custom ops that keep attention, MoE experts and linear attention whole in a trace.

transformers dispatches attention through `AttentionInterface` and routed experts through
`ExpertsInterface`; registering a `graphsim` implementation of each, backed by a
`torch.library` custom op with a fake (shape-only) kernel, turns every attention call into one
`graphsim::attention` node and every MoE block's experts into one `graphsim::moe_experts` node
that carries the 3-D expert weights as inputs. Python-loop kernels (the gated delta rule's
chunked fallback, the Mamba2 chunked scan) are swapped for `graphsim::gated_delta_rule` and
`graphsim::ssm_scan` while tracing.

The real (CPU) kernels are reference implementations, so a tiny random model traced through
these ops still computes the same numbers as transformers' own paths.
"""

from __future__ import annotations

import contextlib
import re
import sys
import types
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from graphsim.importers.hf.block_sparse_ops import block_keep_mask, block_sparse_patches
from graphsim.importers.hf.compressed_ops import compressed_patches
from graphsim.importers.hf.kda_ops import KDA_KERNELS
from graphsim.importers.hf.lightning_ops import lightning_patches
from graphsim.importers.hf.looped_experts import looped_experts_patches
from graphsim.importers.hf.mamba1_ops import MAMBA1_KERNELS
from graphsim.importers.hf.refusals import check_traceable
from graphsim.importers.hf.table_attention import table_attention_patches

IMPL_NAME = "graphsim"


# --- attention -----------------------------------------------------------------------------
@torch.library.custom_op("graphsim::attention", mutates_args=())
def attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor | None,
    scale: float,
    causal: bool,
    sliding_window: int,
    softcap: float,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    indices: torch.Tensor | None = None,
    block_indices: torch.Tensor | None = None,
    block_size: int = 0,
) -> torch.Tensor:
    """q [B,H,S,D], k [B,KVH,S,D], v [B,KVH,S,Dv] → [B,S,H,Dv]. 0 means 'not set' for ints/floats. `indices`
    [B,S,topk] (DSA's sparse attention): each query attends only to those keys (-1 = none). `block_indices`
    [B,Hi,S,topk] (MiniMax-M3, block_sparse_ops.py): each query head only to the keys of its index head's picked
    blocks of `block_size` keys."""
    b, h, s, _ = q.shape
    kvh = k.shape[1]
    k = k.repeat_interleave(h // kvh, dim=1)
    v = v.repeat_interleave(h // kvh, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    allowed = torch.ones(s, k.shape[2], dtype=torch.bool, device=q.device)
    if causal:
        allowed &= j <= i
    if sliding_window:
        allowed &= (i - j) < sliding_window
    mask = ~allowed
    if indices is not None:
        picked = torch.zeros(b, s + 1, k.shape[2] + 1, dtype=torch.bool, device=q.device)
        idx = torch.where(indices < 0, k.shape[2], indices).long()
        picked[:, :s].scatter_(-1, idx, True)
        mask = mask | ~picked[:, None, :s, : k.shape[2]]
    if block_indices is not None:
        mask = mask | ~block_keep_mask(block_indices, block_size, h, k.shape[2])
    scores = scores.masked_fill(mask, float("-inf"))
    if sinks is not None:
        sink = sinks.float().reshape(1, h, 1, 1).expand(b, h, s, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v.float()).to(q.dtype)
    return out.transpose(1, 2).contiguous()


@attention_op.register_fake
def _attention_fake(q, k, v, sinks, scale, causal, sliding_window, softcap, kv_lora_rank, qk_rope_head_dim,
                    indices=None, block_indices=None, block_size=0):
    b, h, s, _ = q.shape
    return q.new_empty((b, s, h, v.shape[-1]))


def graphsim_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                               sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """An `AttentionInterface` entry: one semantic node, no materialised mask."""
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    causal = bool(getattr(module, "is_causal", True))
    out = torch.ops.graphsim.attention(
        query, key, value, s_aux, scale, causal, int(sliding_window or 0), float(softcap or 0.0),
        int(getattr(module, "kv_lora_rank", 0) or 0), int(getattr(module, "qk_rope_head_dim", 0) or 0),
        kwargs.get("indices"), kwargs.get("block_indices"),
        int(getattr(getattr(module, "indexer", None), "block_size", 0) or 0),
    )
    return out, None


# --- MoE experts -----------------------------------------------------------------------------
@torch.library.custom_op("graphsim::moe_experts", mutates_args=())
def moe_experts_op(
    hidden: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    b_up: torch.Tensor | None,
    b_down: torch.Tensor | None,
    num_experts: int,
    gated: bool,
    transposed: bool,
    concatenated: bool,
    activation: str,
    weight_on_input: bool = False,
    w_gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reference routed-experts kernel: Σ_k w_k · down_e(act(gate_e(x)) · up_e(x)), or Σ_k down_e(act(gate_e(w_k·x))
    · up_e(w_k·x)) with `weight_on_input` (Llama-4; vLLM's FusedMoE apply_router_weight_on_input). `w_gate`: the gate
    projections stored apart from the up ones (`w_up` then holds up only; DBRX's w1 / v1, looped_experts.py)."""
    act = {"silu": F.silu, "gelu": F.gelu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
           "relu": F.relu, "relu2": lambda x: F.relu(x).square()}.get(activation)
    if act is None:
        raise NotImplementedError(f"graphsim::moe_experts has no reference kernel for activation '{activation}'")
    out = torch.zeros_like(hidden, dtype=torch.float32)
    for t in range(hidden.shape[0]):
        for slot in range(top_k_index.shape[-1]):
            e = int(top_k_index[t, slot])
            if e >= num_experts:
                continue
            wu = w_up[e] if transposed else w_up[e].t()
            x = hidden[t].float() * top_k_weights[t, slot].float() if weight_on_input else hidden[t].float()
            h = x @ wu.float()
            if b_up is not None:
                h = h + b_up[e].float()
            if w_gate is not None:
                h = act(x @ (w_gate[e] if transposed else w_gate[e].t()).float()) * h
            elif gated:
                if concatenated:
                    g, u = h.chunk(2, dim=-1)
                else:
                    g, u = h[..., ::2], h[..., 1::2]
                h = act(g) * u
            else:
                h = act(h)
            wd = w_down[e] if transposed else w_down[e].t()
            y = h @ wd.float()
            if b_down is not None:
                y = y + b_down[e].float()
            out[t] += y if weight_on_input else top_k_weights[t, slot].float() * y
    return out.to(hidden.dtype)


@moe_experts_op.register_fake
def _moe_experts_fake(hidden, top_k_index, top_k_weights, w_up, w_down, b_up, b_down, num_experts, gated,
                      transposed, concatenated, activation, weight_on_input=False, w_gate=None):
    return torch.empty_like(hidden)


def _activation_name(module) -> str:
    """The experts' activation: the ACT2FN name of the module's own `act_fn` (Nemotron-H's experts use
    config.mlp_hidden_act, relu2), else the config's hidden_act / hidden_activation, else silu."""
    from transformers.activations import ACT2CLS

    act = getattr(module, "act_fn", None)
    if act is not None:
        for name, entry in ACT2CLS.items():
            cls = entry[0] if isinstance(entry, tuple) else entry
            if type(act) is cls:
                return name
    cfg = getattr(module, "config", None)
    for key in ("hidden_act", "hidden_activation"):
        if cfg is not None and isinstance(getattr(cfg, key, None), str):
            return getattr(cfg, key)
    return "silu"


def graphsim_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """An `ExpertsInterface` entry: one node per MoE layer with the expert weights as inputs."""
    gated = bool(getattr(self, "has_gate", True))
    w_up = self.gate_up_proj if gated else self.up_proj
    has_bias = bool(getattr(self, "has_bias", False))
    b_up = (self.gate_up_proj_bias if gated else self.up_proj_bias) if has_bias else None
    b_down = self.down_proj_bias if has_bias else None
    # A class that defines its own gate (e.g. a clamped SwiGLU) is named as such; the reference
    # kernel only implements the standard activations.
    custom_gate = type(self)._apply_gate.__qualname__.split(".")[0] == type(self).__name__
    activation = f"custom_gate:{type(self).__name__}" if custom_gate else _activation_name(self)
    return torch.ops.graphsim.moe_experts(
        hidden_states, top_k_index, top_k_weights, w_up, self.down_proj, b_up, b_down,
        int(self.num_experts), gated, bool(getattr(self, "is_transposed", False)),
        bool(getattr(self, "is_concatenated", True)), activation,
    )


# --- linear attention (gated delta rule) ------------------------------------------------------
@torch.library.custom_op("graphsim::gated_delta_rule", mutates_args=())
def gated_delta_rule_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    initial_state: torch.Tensor | None, l2norm_qk: bool, chunked: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q,k [B,S,Hk,Dk], v [B,S,Hv,Dv], g,beta [B,S,Hv] → (out [B,S,Hv,Dv], state [B,Hv,Dk,Dv]).

    Reference recurrence: S_t = exp(g_t)·S_{t-1} + β_t·k_t ⊗ (v_t − (exp(g_t)·S_{t-1})ᵀk_t); o_t = S_tᵀ q_t.
    """
    b, s, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    if hk != hv:
        q = q.repeat_interleave(hv // hk, dim=2)
        k = k.repeat_interleave(hv // hk, dim=2)
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if l2norm_qk:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * dk ** -0.5
    state = torch.zeros(b, hv, dk, dv) if initial_state is None else initial_state.float().clone()
    out = torch.empty(b, s, hv, dv)
    for t in range(s):
        state = state * g[:, t].exp()[..., None, None]
        kv_mem = (state * k[:, t, :, :, None]).sum(-2)
        delta = (v[:, t] - kv_mem) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (state * q[:, t, :, :, None]).sum(-2)
    return out.to(v.dtype), state


@gated_delta_rule_op.register_fake
def _gated_delta_rule_fake(q, k, v, g, beta, initial_state, l2norm_qk, chunked):
    b, s, _, dk = k.shape
    hv, dv = v.shape[-2:]
    return v.new_empty((b, s, hv, dv)), v.new_empty((b, hv, dk, dv), dtype=torch.float32)


def _make_delta_rule(chunked: bool):
    def delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, **kwargs):
        out, state = torch.ops.graphsim.gated_delta_rule(
            query, key, value, g, beta, initial_state, bool(use_qk_l2norm_in_kernel), chunked
        )
        return out, (state if output_final_state else None)

    return delta_rule


# --- Mamba2 selective state-space scan (SSD) -------------------------------------------------
@torch.library.custom_op("graphsim::ssm_scan", mutates_args=())
def ssm_scan_op(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
    D: torch.Tensor | None, dt_bias: torch.Tensor | None, initial_state: torch.Tensor | None,
    dt_softplus: bool, dt_min: float, dt_max: float, chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B,S,H,P], dt [B,S,H], A [H], B,C [B,S,G,N] → (y [B,S,H,P] in x's dtype, state [B,H,P,N] fp32).

    Reference recurrence (Mamba2, arXiv:2405.21060 §3): Δ_t = clamp(softplus(dt_t + dt_bias));
    S_t = exp(Δ_t·A)·S_{t-1} + Δ_t·x_t ⊗ B_t; y_t = S_t·C_t + D·x_t. `chunk_size` is the chunk of the
    engine's SSD kernel (it changes the work, not the result)."""
    b, s, h, p = x.shape
    g, n = B.shape[-2:]
    delta = dt.float()
    if dt_bias is not None:
        delta = delta + dt_bias.float()
    if dt_softplus:
        delta = F.softplus(delta)
    delta = delta.clamp(min=dt_min, max=dt_max)
    xf = x.float()
    Bh = B.float().repeat_interleave(h // g, dim=2)
    Ch = C.float().repeat_interleave(h // g, dim=2)
    state = torch.zeros(b, h, p, n) if initial_state is None else initial_state.float().clone()
    out = torch.empty(b, s, h, p)
    for t in range(s):
        decay = torch.exp(delta[:, t] * A.float())  # [B,H]
        state = state * decay[..., None, None] + (delta[:, t, :, None] * xf[:, t])[..., None] * Bh[:, t, :, None, :]
        y = (state * Ch[:, t, :, None, :]).sum(-1)
        if D is not None:
            y = y + D.float()[:, None] * xf[:, t]
        out[:, t] = y
    return out.to(x.dtype), state


@ssm_scan_op.register_fake
def _ssm_scan_fake(x, dt, A, B, C, D, dt_bias, initial_state, dt_softplus, dt_min, dt_max, chunk_size):
    b, _, h, p = x.shape
    return torch.empty_like(x), x.new_empty((b, h, p, B.shape[-1]), dtype=torch.float32)


def _mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None,
                       dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
    """Drop-in for transformers' `mamba2_chunk_scan` (modeling_mamba2 / nemotron_h / bamba / falcon_h1 /
    zamba2 / granitemoehybrid): one `graphsim::ssm_scan` node whose token count stays symbolic (the torch
    fallback pads to a chunk multiple, which pins the trace to a fixed token count)."""
    out, state = torch.ops.graphsim.ssm_scan(
        hidden_states, dt, A, B, C, D, dt_bias, initial_states, bool(dt_softplus), float(dt_limit[0]),
        float(dt_limit[1]), int(chunk_size),
    )
    return (out, state) if return_final_states else out


# --- DSA lightning indexer (DeepSeek-V3.2, GLM-5) ---------------------------------------------
@torch.library.custom_op("graphsim::dsa_indexer", mutates_args=())
def dsa_indexer_op(q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, topk: int, scale: float) -> torch.Tensor:
    """q [B,S,H,D] and k [B,S,D] (RoPE applied), weights [B,S,H] → the int32 indices [B,S,topk] of the keys with
    the highest Σ_h weights_h·H^-½·relu(scale·q_h·k) among the query's causal prefix; -1 pads when the
    sequence has fewer than `topk` keys (the fixed width keeps the token count symbolic)."""
    b, s, h, _ = q.shape
    scores = torch.relu(torch.einsum("bshd,btd->bsht", q.float(), k.float()) * scale)
    index = torch.einsum("bsh,bsht->bst", weights.float() * h ** -0.5, scores)
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    index = index.masked_fill(~causal, float("-inf"))
    kept = min(topk, s)
    out = torch.full((b, s, topk), -1, dtype=torch.int32, device=q.device)
    out[..., :kept] = index.topk(kept, dim=-1).indices.to(torch.int32)
    return out


@dsa_indexer_op.register_fake
def _dsa_indexer_fake(q, k, weights, topk, scale):
    return q.new_empty((q.shape[0], q.shape[1], topk), dtype=torch.int32)


def _rotary_of(indexer: torch.nn.Module):
    """The RoPE function the indexer's own forward calls (half-split for DeepSeek-V3.2, interleaved for GLM-5),
    looked up in its modelling module."""
    import inspect

    mod = sys.modules[type(indexer).__module__]
    src = inspect.getsource(type(indexer).forward)
    name = "apply_rotary_pos_emb_interleave" if "apply_rotary_pos_emb_interleave" in src else "apply_rotary_pos_emb"
    return getattr(mod, name)


def _dsa_indexer_forward(self, hidden_states, q_resid, position_embeddings, attention_mask=None, position_ids=None,
                         cache=None, **kwargs):
    """The indexer's projections as transformers writes them (wq_b on the query latent, wk + k_norm on the hidden
    states, RoPE on the first qk_rope_head_dim dims or, where the model's own forward splits them there, the last,
    weights_proj), then one `graphsim::dsa_indexer` node in place of its [T, T] score matrix and its top-k of
    min(index_topk, T) (a guard on the token count)."""
    b, s, _ = hidden_states.shape
    cos, sin = position_embeddings
    rope = self.qk_rope_head_dim
    q = self.wq_b(q_resid).view(b, s, self.n_heads, self.head_dim)
    k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)
    r = 1 if _rope_last(self) else 0  # HunYuan-V4 ropes the head's last dims, DeepSeek-V3.2 / GLM-5 its first
    sizes = [self.head_dim - rope, rope] if r else [rope, self.head_dim - rope]
    qs, ks = list(torch.split(q, sizes, dim=-1)), list(torch.split(k, sizes, dim=-1))
    qs[r], ks[r] = _rotary_of(self)(qs[r], ks[r], cos, sin, unsqueeze_dim=2)
    q = torch.cat(qs, dim=-1)
    k = torch.cat(ks, dim=-1).squeeze(2)
    weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype))
    return torch.ops.graphsim.dsa_indexer(q, k, weights, int(self.index_topk), float(self.softmax_scale))


def _rope_last(indexer: torch.nn.Module) -> bool:
    """Whether the indexer's own forward ropes the head's last qk_rope_head_dim dims (HunYuan-V4's HYV4Indexer:
    `q_pass, q_rot = torch.split(q, [self.head_dim - self.qk_rope_head_dim, self.qk_rope_head_dim])`; DeepSeek-V3.2
    and GLM-5 rope the first ones). Swapping the halves keeps the shapes (and the price), not the picks: with the
    wrong half roped, the tiny HunYuan-V4's logits moved by 0.007 on logits of ~0.13 from transformers' own."""
    import inspect

    src = inspect.getsource(type(indexer).forward)
    return re.search(r"torch\.split\(\s*q\s*,\s*\[\s*self\.head_dim\s*-\s*self\.qk_rope_head_dim", src) is not None


def _is_dsa_indexer(m: torch.nn.Module) -> bool:
    return all(hasattr(m, a) for a in ("index_topk", "wq_b", "wk", "k_norm", "weights_proj", "softmax_scale"))


def _mask_stub(module, args, kwargs):
    """DSA attention slices `attention_mask[:, 0]` for its indexer before any attention call, but graphsim's
    attention materialises no mask (None): hand it a [B,1,1,1] placeholder, which the semantic indexer and
    attention ignore (both apply causality themselves)."""
    hidden = kwargs.get("hidden_states", args[0] if args else None)
    if kwargs.get("attention_mask", args[2] if len(args) > 2 else 0) is None and hidden is not None:
        stub = torch.zeros((hidden.shape[0], 1, 1, 1), dtype=torch.bool, device=hidden.device)
        if "attention_mask" in kwargs or len(args) <= 2:
            kwargs["attention_mask"] = stub
        else:
            args = (*args[:2], stub, *args[3:])
    return args, kwargs


def _is_dense_routed_moe(m: torch.nn.Module) -> bool:
    """An MoE block that runs every expert on every token, weighted by a router score that is zero off the top-k
    (Llama-4's Llama4TextMoe: `experts(routed_in)` with 3-D gate_up_proj / down_proj and no experts interface)."""
    import inspect

    ex = getattr(m, "experts", None)
    if ex is None or not all(hasattr(m, a) for a in ("router", "shared_expert", "top_k")):
        return False
    w = getattr(ex, "gate_up_proj", None)
    return (isinstance(w, torch.Tensor) and w.dim() == 3 and isinstance(getattr(ex, "down_proj", None), torch.Tensor)
            and len(inspect.signature(ex.forward).parameters) == 1)


def _dense_routed_moe_forward(self, hidden_states):
    """The same routing (top-k of the router's logits, sigmoid of the picked logits, applied to the expert's input:
    Llama4TextMoe / vLLM's Llama4MoE.custom_routing_function with apply_router_weight_on_input) with one
    `graphsim::moe_experts` node instead of a bmm of every expert over every token."""
    x = hidden_states.reshape(-1, hidden_states.shape[-1])
    logits = F.linear(x, self.router.weight, getattr(self.router, "bias", None))
    top_w, top_i = torch.topk(logits, self.top_k, dim=1)
    top_w = torch.sigmoid(top_w.float()).to(x.dtype)
    ex = self.experts
    routed = torch.ops.graphsim.moe_experts(x, top_i, top_w, ex.gate_up_proj, ex.down_proj, None, None,
                                            int(ex.gate_up_proj.shape[0]), True, True, True, _activation_name(ex), True)
    return self.shared_expert(x) + routed, logits


@contextlib.contextmanager
def _dsa_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each DSA indexer's forward for the semantic one and give its attention a mask placeholder."""
    hooks, swapped = [], []
    for name, m in model.named_modules():
        if _is_dsa_indexer(m):
            m.forward = types.MethodType(_dsa_indexer_forward, m)
            swapped.append((m, name))
        elif _is_dense_routed_moe(m):
            m.forward = types.MethodType(_dense_routed_moe_forward, m)
            swapped.append((m, name))
        elif any(_is_dsa_indexer(c) for c in m.children()):
            hooks.append(m.register_forward_pre_hook(_mask_stub, with_kwargs=True))
    try:
        yield sorted({f"{type(m).__module__}.{type(m).__name__}.forward" for m, _ in swapped})
    finally:
        for h in hooks:
            h.remove()
        for m, _ in swapped:
            del m.forward


# Python-loop kernels that transformers' modelling files call by module-global name, and the
# semantic op that replaces each while tracing (keyed by the kernel's role, not by model).
LOOP_KERNELS = {
    "torch_chunk_gated_delta_rule": _make_delta_rule(chunked=True),
    "torch_recurrent_gated_delta_rule": _make_delta_rule(chunked=False),
    "mamba2_chunk_scan": _mamba2_chunk_scan,
    **KDA_KERNELS,  # Kimi Delta Attention (kda_ops.py)
    **MAMBA1_KERNELS,  # Mamba-1's selective scan (mamba1_ops.py)
}


@contextlib.contextmanager
def semantic_kernels(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap Python-loop kernels in the model's modelling modules for semantic ops; restore after."""
    check_traceable(model)  # mechanisms no semantic op covers yet: one line naming each (refusals.py)
    patched: list[tuple[object, str, object]] = []
    modules = {type(m).__module__ for m in model.modules()}
    for mod_name in sorted(modules):
        mod = sys.modules.get(mod_name)
        if mod is None:
            continue
        for fn_name, repl in LOOP_KERNELS.items():
            if hasattr(mod, fn_name):
                patched.append((mod, fn_name, getattr(mod, fn_name)))
                setattr(mod, fn_name, repl)
    try:
        with _dsa_patches(model) as dsa, compressed_patches(model) as compressed, block_sparse_patches(model) as blocks, \
                lightning_patches(model) as lightning, looped_experts_patches(model) as looped, \
                table_attention_patches(model) as tables:
            yield ([f"{getattr(m, '__name__', m)}.{n}" for m, n, _ in patched] + dsa + compressed + blocks + lightning
                   + looped + tables)
    finally:
        for mod, name, orig in patched:
            setattr(mod, name, orig)


_REGISTERED = False


def register() -> None:
    """Register the graphsim attention and experts implementations with transformers (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.integrations.moe import ExpertsInterface

    AttentionInterface.register(IMPL_NAME, graphsim_attention_forward)
    ExpertsInterface.register(IMPL_NAME, graphsim_experts_forward)
    _REGISTERED = True

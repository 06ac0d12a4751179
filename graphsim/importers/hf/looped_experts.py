"""Routed experts written as a Python loop over the experts the batch hits, made one `graphsim::moe_experts` node.

Most transformers MoE classes dispatch their experts through `ExpertsInterface` (`@use_experts_implementation`), which
graphsim's implementation turns into one node (custom_ops.py). A few write the experts as an eager loop instead:

    expert_hit = (one_hot(top_k_index).sum(...) > 0).nonzero()
    for expert_idx in expert_hit:                       # data-dependent: how many, and which
        idx, token_idx = torch.where(expert_mask[expert_idx])
        ... index_add_(0, token_idx, expert(hidden[token_idx]) * top_k_weights[token_idx, idx])

which cannot be traced with a symbolic token count (the loop's length and every gather's size depend on the routing).
Such a module is recognised by what it is, not by its model: its forward takes `(hidden_states, top_k_index,
top_k_weights)` (the experts half of the ExpertsInterface contract: the routing, i.e. the router logits, their top-k
and its weights, stays the block's own, traced as written), it is not dispatched through ExpertsInterface (no
`is_concatenated` attribute, which `use_experts_implementation` sets), and it holds per-expert MLP weights in one of
the layouts below. Its forward is swapped while tracing for the same sum, Σ_k w_k · down_e(act(gate_e(x)) · up_e(x)),
as one `graphsim::moe_experts` node: vLLM runs these experts as its FusedMoE kernel (`fused_moe`).

Layouts (the weights are laid out as vLLM's FusedMoE loads them, w13 [E, 2F, H] / w2 [E, H, F], under their own
names; the parameter count is the transformers model's, read before tracing):

- **3-D `gate_up_proj` [E', 2F, H] and `down_proj` [E, H, F]** (or both transposed; told apart by their shapes):
  transformers' experts contract (integrations/moe.py), written as a loop by LongCat-Flash
  (`LongcatFlashExperts`) and Step-3.7 (`Step3p7Experts`). When `gate_up_proj` has more experts than `down_proj`
  (E' > E), the extra ids are **zero-computation experts**: with an `nn.Identity` child they return their input
  (LongCat-Flash's `identity_expert`: expert ids ≥ n_routed_experts), else they are skipped. Only the E real experts'
  gate/up rows are kept as the node's weight (transformers allocates `gate_up_proj` for all E' ids, vLLM's
  `longcat_flash.py LongcatMoe` builds its FusedMoE with `num_experts=n_routed_experts`), and each token's identity
  term Σ_{k: id ≥ E} w_k · x is elementwise work beside the node, as vLLM's
  `layers/fused_moe/zero_expert_fused_moe.py ZeroExpertFusedMoE.forward` adds `zero_experts_compute_triton`'s
  result to the fused experts' output.
- **Megablocks GLU: a child with 2-D `w1`, `v1`, `w2`, each [E·F, H]** (DBRX's `DbrxExpertGLU`: gate
  `x @ w1_eᵀ`, up `x @ v1_eᵀ`, down `h @ w2_e`): w1 and v1 are viewed [E, F, H] (the gate passed apart from the up
  projection, `w_gate`), w2 [E, F, H] transposed to [E, H, F] — vLLM's `dbrx.py DbrxExperts.weight_loader` puts w1
  and v1 into the halves of `ws` [E, 2F, H] and loads w2 as `reshape(-1, F, H).transpose(1, 2)` into `w2s`.
  E is the module's `num_experts`.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from graphsim.errors import UnsupportedArchitectureError
from graphsim.importers.hf.refusals import no_vllm

_CONTRACT = ("hidden_states", "top_k_index", "top_k_weights")


@dataclass
class _Layout:
    up: torch.Tensor  # [E, 2F, H] gate and up stacked, or [E, F, H] up only when `gate` is set (transposed: [E, H, ·])
    down: torch.Tensor  # [E, H, F] (transposed: [E, F, H])
    gate: torch.Tensor | None
    transposed: bool
    num_experts: int
    identity: bool  # ids ≥ num_experts return their input (zero-computation experts)
    activation: str
    # (field, owner, parameter name) of each weight: the forward reads them from their module while tracing
    # (torch.export swaps a module's parameters for its own tensors by name; a tensor held elsewhere is a constant)
    where: tuple[tuple[str, torch.nn.Module, str], ...] = ()
    relay: tuple[str, ...] = ()  # the fields that are views to install as their parameter while tracing


def _takes_routed_tokens(m: torch.nn.Module) -> bool:
    try:
        params = list(inspect.signature(m.forward).parameters)
    except (TypeError, ValueError):
        return False
    return params[:3] == list(_CONTRACT) and not hasattr(m, "is_concatenated")


def _param(m: torch.nn.Module, name: str, rank: int) -> torch.nn.Parameter | None:
    p = m._parameters.get(name)
    return p if isinstance(p, torch.nn.Parameter) and p.dim() == rank else None


def _activation(m: torch.nn.Module) -> str:
    """The experts' activation by its ACT2FN name (the first activation module the experts hold: `act_fn`,
    DBRX's `mlp.activation_fn`); a class that defines its own `_apply_gate` (a clamped SwiGLU) is named as such."""
    from transformers.activations import ACT2CLS

    if "_apply_gate" in vars(type(m)):
        return f"custom_gate:{type(m).__name__}"
    for sub in m.modules():
        for name, entry in ACT2CLS.items():
            cls = entry[0] if isinstance(entry, tuple) else entry
            if type(sub) is cls:
                return name
    from graphsim.importers.hf.custom_ops import _activation_name

    return _activation_name(m)


def layout(m: torch.nn.Module) -> _Layout | None:
    """The per-expert weights of a looped experts module, laid out as vLLM's FusedMoE holds them; None when `m` is
    not one (module docstring)."""
    if not _takes_routed_tokens(m):
        return None
    gate_up, down = _param(m, "gate_up_proj", 3), _param(m, "down_proj", 3)
    if gate_up is not None and down is not None:
        (_, a, b), (e, c, d) = gate_up.shape[:], down.shape[:]
        if a == 2 * d and b == c:
            transposed = False
        elif b == 2 * c and a == d:
            transposed = True
        else:
            return None
        extra = gate_up.shape[0] > e
        identity = extra and any(isinstance(c, torch.nn.Identity) for c in m.children())
        return _Layout(gate_up[:e] if extra else gate_up, down, None, transposed, int(e), identity, _activation(m),
                       (("up", m, "gate_up_proj"), ("down", m, "down_proj")), ("up",) if extra else ())
    for child in m.children():
        w1, v1, w2 = (_param(child, n, 2) for n in ("w1", "v1", "w2"))
        num = getattr(m, "num_experts", None)
        if w1 is None or v1 is None or w2 is None or not isinstance(num, int) or num <= 0:
            continue
        if not (w1.shape == v1.shape == w2.shape) or w1.shape[0] % num:
            continue
        f, h = w1.shape[0] // num, w1.shape[1]
        return _Layout(v1.view(num, f, h), w2.view(num, f, h).transpose(1, 2), w1.view(num, f, h), False, num,
                       False, _activation(m), (("up", child, "v1"), ("down", child, "w2"), ("gate", child, "w1")),
                       ("up", "down", "gate"))
    return None


def _forward(lay: _Layout):
    def forward(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        idx = top_k_index.reshape(x.shape[0], -1)
        w = top_k_weights.reshape(x.shape[0], -1)
        weights = {field: getattr(owner, name) for field, owner, name in lay.where}
        out = torch.ops.graphsim.moe_experts(x, idx, w, weights["up"], weights["down"], None, None, lay.num_experts,
                                             True, lay.transposed, True, lay.activation, False, weights.get("gate"))
        if lay.identity:  # zero-computation experts: Σ_{k: id ≥ E} w_k · x (vLLM zero_experts_compute_triton)
            kept = torch.where(idx >= lay.num_experts, w, torch.zeros_like(w))
            out = out + (x * kept.sum(dim=-1, keepdim=True)).to(out.dtype)
        return out.view(hidden_states.shape)

    return forward


def _relaid(owner: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    """`tensor` (a view of owner.name) installed as that parameter while tracing, so the traced weight has vLLM's
    layout under the checkpoint's name."""
    setattr(owner, name, torch.nn.Parameter(tensor, requires_grad=False))


def _is_attention_experts(m: torch.nn.Module) -> bool:
    """A mixture of attention experts (JetMoE's `JetMoeMoA`, models/jetmoe/modeling_jetmoe.py): `map` / `reduce`
    methods around the attention and ScatterMoE-style `input_linear` / `output_linear` experts called with per-expert
    token counts (`expert_size`, a `.tolist()` of the routing)."""
    def takes_sizes(c) -> bool:
        try:
            return isinstance(c, torch.nn.Module) and "expert_size" in inspect.signature(c.forward).parameters
        except (TypeError, ValueError):
            return False

    return (all(callable(getattr(m, a, None)) for a in ("map", "reduce"))
            and takes_sizes(getattr(m, "input_linear", None)) and takes_sizes(getattr(m, "output_linear", None)))


@contextlib.contextmanager
def looped_experts_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each looped experts module's forward for one `graphsim::moe_experts` node (weights re-laid as views of
    the originals); restore after."""
    swapped: list[torch.nn.Module] = []
    restore: list[tuple[torch.nn.Module, str, torch.nn.Parameter | None]] = []
    try:
        for m in model.modules():
            if _is_attention_experts(m):
                raise UnsupportedArchitectureError(
                    f"graphsim cannot trace {type(model).__name__} yet: its attention is a mixture of attention "
                    f"experts ({type(m).__name__}.map / .reduce: each token's top-k query and output projections come "
                    "from routed experts and stay apart per slot around the attention), which no graphsim semantic "
                    "op expresses (graphsim::moe_experts sums its slots)" + no_vllm(model) + "; graphsim work / kv "
                    "may still account it from the config")
            lay = layout(m)
            if lay is None:
                continue
            for field, owner, name in lay.where:
                if field in lay.relay:
                    restore.append((owner, name, owner._parameters[name]))
                    _relaid(owner, name, getattr(lay, field))
            m.forward = types.MethodType(_forward(lay), m)
            swapped.append(m)
        yield sorted({f"{type(m).__module__}.{type(m).__name__}.forward" for m in swapped})
    finally:
        for m in swapped:
            del m.forward
        for owner, name, p in reversed(restore):
            setattr(owner, name, p)

"""Checkpoints whose config asks for mechanisms transformers' class of the same name does not build.

A remote-code checkpoint may name a class transformers ships (`architectures[0]`) while its own modelling code
reads config keys that class ignores. Building transformers' class would then trace a different model, silently:
the mechanism missing, its weights uncounted. Such configs are refused by name before building, each key with
the mechanism it stands for, read from the pinned transformers' modelling file (which reads none of them).

- Kimi-K3 (`moonshotai/Kimi-K3`, text model `KimiLinearForCausalLM`, remote `modeling_kimi_linear`): transformers
  5.24 models/kimi_linear/modeling_kimi_linear.py reads none of `routed_expert_hidden_size` (the routed experts in
  a latent width between routed_expert_down_proj / up_proj), `attn_res_block_size` (attention residuals) or
  `mla_use_output_gate` (the MLA output gate g_proj); vLLM runs all three (vllm 0.33.0 models/kimi_k3), and the work
  accountant counts them from the config (graphsim/work/builders/linear_attn.py).
- Its `hidden_act` "situ" is no activation of transformers' ACT2FN: vLLM's SituAndMul
  (model_executor/layers/activation.py, vllm 0.33.0) computes β·tanh(g/β)·sigmoid(g) · β_lin·tanh(u/β_lin)
  (`activation_situ_beta`, `activation_situ_linear_beta`): it clips the up projection too, so it is not the
  one-input activation transformers' MLP applies to the gate (`act_fn(gate_proj(x)) * up_proj(x)`); defining it
  there would compute another function.
"""

from __future__ import annotations

from typing import Any

# class → {config key: the mechanism transformers' class does not build}
UNBUILT_KEYS: dict[str, dict[str, str]] = {
    "KimiLinearForCausalLM": {
        "routed_expert_hidden_size": "the latent MoE",
        "attn_res_block_size": "the attention residuals",
        "mla_use_output_gate": "the MLA output gate",
    },
}
# activations configs name that transformers' ACT2FN lacks, with what they are
UNKNOWN_ACTIVATIONS: dict[str, str] = {
    "situ": "vLLM's SituAndMul, β·tanh(g/β)·sigmoid(g)·β_lin·tanh(u/β_lin), clips the up projection too: no "
            "one-input ACT2FN activation",
}
_ACT_KEYS = ("hidden_act", "hidden_activation")


def unknown_activation(cfg: dict[str, Any]) -> str | None:
    """The config's activation name when transformers' ACT2FN lacks it (None otherwise)."""
    from transformers.activations import ACT2FN

    for key in _ACT_KEYS:
        name = cfg.get(key)
        if isinstance(name, str) and name not in ACT2FN:
            return name
    return None


def activation_note(name: str) -> str:
    """`its activation 'situ' (what it is)` for an activation ACT2FN lacks."""
    what = UNKNOWN_ACTIVATIONS.get(name, "not in transformers' ACT2FN")
    return f"its activation '{name}' ({what})"


def unbuilt_reason(arch: str, cfg: dict[str, Any]) -> str | None:
    """Why transformers' `arch` would not build the model this config describes (None when it would, as far as
    `UNBUILT_KEYS` knows): the mechanisms of the keys the config sets, and an activation ACT2FN lacks."""
    keys = UNBUILT_KEYS.get(arch, {})
    missing = [f"{what} ({key})" for key, what in keys.items() if cfg.get(key) not in (None, False, 0)]
    if not missing:
        return None
    act = unknown_activation(cfg)
    if act is not None:
        missing.append(activation_note(act))
    import transformers

    head = f"transformers {transformers.__version__}'s {arch} does not build "
    return head + (", ".join(missing[:-1]) + " or " + missing[-1] if len(missing) > 1 else missing[0])

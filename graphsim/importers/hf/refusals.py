"""Mechanisms graphsim cannot trace yet, refused by name before the trace (one line each, not the traceback line of
whatever the meta-device forward trips over first). Each is recognised by what the model holds:

- **Codebook-interleaved token streams** (Musicgen / Musicgen-Melody: models/musicgen/modeling_musicgen.py
  `MusicgenDecoder`, `num_codebooks` embedding tables summed per position and `input_ids` of shape
  [batch · num_codebooks, T]): graphsim traces one text-token stream.
- **Layers spread over parallel per-layer lists** (XLM: models/xlm/modeling_xlm.py `XLMModel`, `attentions`, `ffns`,
  `layer_norm1`, `layer_norm2` indexed by `i in range(self.n_layers)`): graphsim's one-layer-per-type plan holds one
  stack of layer modules.
- **Per-language adapters chosen by `lang_ids`** (X-MOD: models/xmod/modeling_xmod.py `XmodOutput.adapter_modules`,
  a gather of each language's tokens): a data-dependent split with no semantic op.

- **mLSTM matrix-memory cells** (xLSTM: models/xlstm/modeling_xlstm.py `xLSTMBackend`, whose chunkwise / step
  kernel functions run the exponentially gated recurrence over per-head C, n, m states in Python): no semantic op
  holds that recurrence yet.

- **Speculative drafters that read their target's KV** (Gemma-4's assistants: models/gemma4_assistant
  `Gemma4AssistantForCausalLM.forward(..., shared_kv_states)`, Q-only decoder layers): refused by what the forward
  needs. vLLM runs them only as a draft (vllm 0.33.0 config/speculative.py turns model_type gemma4_assistant /
  gemma4_unified_assistant into `Gemma4MTPModel`, models/gemma4_mtp.py "shares KV cache with the target").

vLLM has an implementation of none of the first four: vllm 0.33.0's model registry (model_executor/models/registry.py) lists no
MusicgenForCausalLM, MusicgenMelodyForCausalLM, XLMWithLMHeadModel, XmodForCausalLM or xLSTMForCausalLM (nor
JetMoeForCausalLM, refused in looped_experts.py). Each line says so (`no_vllm`), and whether vLLM's generic
Transformers backend would take the class at all: `_try_resolve_transformers` (same file) accepts a transformers
class only if `is_backend_compatible()` or `_can_set_attn_implementation()`, else raises "The Transformers
implementation of ... is not compatible with vLLM"; the same two class methods answer here.
"""

from __future__ import annotations

import inspect

import torch

from graphsim.errors import UnsupportedArchitectureError

_TAIL = "; graphsim work / kv may still account it from the config"


def no_vllm(model: torch.nn.Module) -> str:
    """'vLLM has no implementation of <class>', and what its generic Transformers backend would do with it."""
    cls, arch = type(model), type(model).__name__
    try:
        generic = bool(cls.is_backend_compatible() or cls._can_set_attn_implementation())  # pyright: ignore
    except Exception:  # (not a transformers PreTrainedModel)
        generic = False
    fallback = ("only its generic Transformers backend would run transformers' own forward" if generic else
                "and its Transformers backend refuses the class as not compatible with vLLM")
    return f"; vLLM has no implementation of {arch} (none in vllm 0.33.0's model registry; {fallback})"


def _lists(m: torch.nn.Module) -> dict[str, torch.nn.ModuleList]:
    return {n: c for n, c in m.named_children() if isinstance(c, torch.nn.ModuleList)}


def check_traceable(model: torch.nn.Module) -> None:
    """Raise UnsupportedArchitectureError naming the first mechanism above that `model` holds."""
    arch = type(model).__name__
    if "shared_kv_states" in inspect.signature(type(model).forward).parameters:
        model_type = getattr(getattr(model, "config", None), "model_type", "?")
        raise UnsupportedArchitectureError(
            f"graphsim cannot trace {arch}: it is a speculative drafter whose forward reads its target model's KV "
            "states (shared_kv_states: its decoder layers have no K/V projections of their own), and graphsim traces "
            "no such draft yet; vLLM runs it only as the draft of its target, not on its own (vllm 0.33.0 "
            f"config/speculative.py maps model_type {model_type} to Gemma4MTPModel, models/gemma4_mtp.py); predict "
            "the target, alone or with an MTP / EAGLE draft graphsim traces")
    for m in model.modules():
        lists = _lists(m)
        books = getattr(m, "num_codebooks", None)
        embeds = lists.get("embed_tokens")
        if isinstance(books, int) and books > 1 and embeds is not None:  # (one embedding table per codebook)
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its decoder reads {books} codebook token streams per position "
                f"({type(m).__name__}: input_ids [batch x {books}, T], one embedding table and LM head per codebook), "
                "and graphsim traces one text-token stream" + no_vllm(model) + _TAIL)
        if {"attentions", "ffns"} <= set(lists):  # (by then the layer plan has cut one of them to its representatives)
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its layers are spread over parallel per-layer lists "
                f"({type(m).__name__}: {', '.join(sorted(lists))} indexed by layer number), and graphsim's "
                "one-layer-per-type plan holds one stack of layer modules" + no_vllm(model) + _TAIL)
        adapters = getattr(m, "adapter_modules", None)
        if isinstance(adapters, torch.nn.ModuleDict) and len(adapters) > 0:
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: each layer routes every token through its language's adapter "
                f"({type(m).__name__}.adapter_modules over {len(adapters)} language(s), chosen by lang_ids: a "
                "data-dependent split with no semantic op)" + no_vllm(model) + _TAIL)
        if callable(getattr(m, "chunkwise_kernel_fn", None)) and callable(getattr(m, "step_kernel_fn", None)):
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its layers run an mLSTM matrix-memory recurrence "
                f"({type(m).__name__}.chunkwise_kernel_fn / step_kernel_fn: exponentially gated per-head C, n, m "
                "states updated in Python), which no graphsim semantic op holds" + no_vllm(model) + _TAIL)

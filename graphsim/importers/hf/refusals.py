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

vLLM has no port of any of them.
"""

from __future__ import annotations

import torch

from graphsim.errors import UnsupportedArchitectureError

_TAIL = "; graphsim work / kv may still account it from the config"


def _lists(m: torch.nn.Module) -> dict[str, torch.nn.ModuleList]:
    return {n: c for n, c in m.named_children() if isinstance(c, torch.nn.ModuleList)}


def check_traceable(model: torch.nn.Module) -> None:
    """Raise UnsupportedArchitectureError naming the first mechanism above that `model` holds."""
    arch = type(model).__name__
    for m in model.modules():
        lists = _lists(m)
        books = getattr(m, "num_codebooks", None)
        embeds = lists.get("embed_tokens")
        if isinstance(books, int) and books > 1 and embeds is not None:  # (one embedding table per codebook)
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its decoder reads {books} codebook token streams per position "
                f"({type(m).__name__}: input_ids [batch x {books}, T], one embedding table and LM head per codebook), "
                "and graphsim traces one text-token stream" + _TAIL)
        if {"attentions", "ffns"} <= set(lists):  # (by then the layer plan has cut one of them to its representatives)
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its layers are spread over parallel per-layer lists "
                f"({type(m).__name__}: {', '.join(sorted(lists))} indexed by layer number), and graphsim's "
                "one-layer-per-type plan holds one stack of layer modules" + _TAIL)
        adapters = getattr(m, "adapter_modules", None)
        if isinstance(adapters, torch.nn.ModuleDict) and len(adapters) > 0:
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: each layer routes every token through its language's adapter "
                f"({type(m).__name__}.adapter_modules over {len(adapters)} language(s), chosen by lang_ids: a "
                "data-dependent split with no semantic op)" + _TAIL)

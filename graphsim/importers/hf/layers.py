"""Find the decoder stack, classify its layers into distinct types, and keep one of each.

A layer's type is its structural signature: every submodule's relative path and class, every
parameter's shape and dtype, and every plain attribute (sliding window, layer type, …) except
the layer index itself. Layers with equal signatures compute the same thing, so tracing one
representative per signature and recording the full schedule loses nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

_SIMPLE = (int, float, str, bool, type(None))
_IGNORED_ATTRS = {"training", "layer_idx", "layer_id", "layer_number", "idx", "_is_hf_initialized"}


def find_layer_stack(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """The ModuleList of decoder layers (path, list): the longest one held by a module whose config is the
    model's text config (its decoder: a multimodal wrapper also holds its vision tower's blocks, which may be
    more, e.g. Qwen3-VL-MoE's class defaults: 27 vision blocks, 24 text layers); else the longest of all."""
    modules = dict(model.named_modules())
    lists = [(n, m) for n, m in modules.items() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    if not lists:
        raise ValueError("model has no ModuleList of decoder layers")
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    own = [(n, m) for n, m in lists if text is not None and getattr(modules[n.rpartition(".")[0]], "config", None) is text]
    return max(own or lists, key=lambda item: len(item[1]))


def _plain_attrs(mod: torch.nn.Module) -> tuple:
    out = []
    for k, v in sorted(vars(mod).items()):
        if k.startswith("_") or k in _IGNORED_ATTRS:
            continue
        if isinstance(v, _SIMPLE):
            out.append((k, v))
        elif isinstance(v, (tuple, list)) and all(isinstance(x, _SIMPLE) for x in v) and len(v) < 64:
            out.append((k, tuple(v)))
    return tuple(out)


def layer_signature(layer: torch.nn.Module) -> str:
    parts = []
    for path, mod in layer.named_modules():
        parts.append((path, type(mod).__qualname__, _plain_attrs(mod)))
    for path, p in layer.named_parameters():
        parts.append((path, tuple(p.shape), str(p.dtype)))
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def _readable_tag(layer: torch.nn.Module) -> str:
    """A short name from what the layer does: its attention kind and FFN kind."""
    attn = None
    for _, v in sorted(vars(layer).items()):  # e.g. layer_type / attention_type / block_type
        if isinstance(v, str) and v.endswith("_attention"):
            attn = v
            break
    if attn is None:
        for _, mod in layer.named_modules():
            v = getattr(mod, "sliding_window", None)
            if isinstance(v, int) and v > 0:
                attn = "sliding_attention"
                break
    attn = attn or "full_attention"
    # stacked expert weights are 3-D; a depthwise conv's weight ([channels, 1, kernel]: Mamba2, GDN) is too
    convs = {id(p) for m in layer.modules() if isinstance(m, torch.nn.modules.conv._ConvNd) for p in m.parameters()}
    is_moe = any(p.dim() == 3 and id(p) not in convs for p in layer.parameters())
    return f"{attn.replace('_attention', '')}.{'moe' if is_moe else 'dense'}"


@dataclass(frozen=True)
class LayerPlan:
    stack_path: str  # e.g. "model.layers"
    tags: tuple[str, ...]  # one per layer, full depth
    representative: dict[str, int]  # tag → original layer index traced for it
    params_per_layer: tuple[int, ...]


def plan_layers(model: torch.nn.Module) -> LayerPlan:
    path, stack = find_layer_stack(model)
    sigs = [layer_signature(layer) for layer in stack]
    sig_tag: dict[str, str] = {}
    used: dict[str, int] = {}
    for i, s in enumerate(sigs):
        if s not in sig_tag:
            base = _readable_tag(stack[i])
            used[base] = used.get(base, 0) + 1
            sig_tag[s] = base if used[base] == 1 else f"{base}{used[base]}"
    tags = tuple(sig_tag[s] for s in sigs)
    rep: dict[str, int] = {}
    for i, t in enumerate(tags):
        rep.setdefault(t, i)
    params = tuple(sum(p.numel() for p in layer.parameters()) for layer in stack)
    return LayerPlan(path, tags, rep, params)


def keep_representatives(model: torch.nn.Module, plan: LayerPlan, config) -> list[int]:
    """Replace the layer stack by its representatives (in order); returns kept original indices.

    Per-layer config lists (`layer_types`) are cut to match, so the model's own forward still
    pairs each kept layer with its own type.
    """
    kept = sorted(plan.representative.values())
    parent_path, _, attr = plan.stack_path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    stack = getattr(parent, attr)
    setattr(parent, attr, torch.nn.ModuleList([stack[i] for i in kept]))
    for cfg in {id(c): c for c in _configs_of(model, config)}.values():
        n = getattr(cfg, "num_hidden_layers", None)
        if n == len(plan.tags):
            for key, val in list(vars(cfg).items()):
                if isinstance(val, (list, tuple)) and len(val) == n and key != "architectures":
                    setattr(cfg, key, type(val)(val[i] for i in kept))
            cfg.num_hidden_layers = len(kept)
    return kept


def skips_layers_by_position(model: torch.nn.Module, plan: LayerPlan) -> bool:
    """Whether the model's forward enumerates its stack and skips layers, or picks per-layer weights, by their
    position in it: MLlama's `MllamaTextModel.forward` skips `idx in self.cross_attention_layers` on a text-only
    request (as vLLM's mllama.py skips its cross-attention layers without image tokens); Zamba2's `Zamba2Model.forward`
    hands each layer its position, which the shared blocks map through `layer_dic` (built from the config's
    `hybrid_layer_ids`) to that hybrid layer's own LoRA adapter. Such a stack is traced whole: cut to its
    representatives the positions no longer match, and the fold pass then keeps the layers that ran, each type
    once."""
    parent_path = plan.stack_path.rpartition(".")[0]
    parent = model.get_submodule(parent_path) if parent_path else model
    cfg = getattr(parent, "config", None)
    for listed in (getattr(parent, "cross_attention_layers", None), getattr(cfg, "hybrid_layer_ids", None)):
        if isinstance(listed, (list, tuple)) and listed and all(isinstance(i, int) for i in listed):
            return True
    return False


def restore_depth(model: torch.nn.Module, config, depth: int, kept: int) -> bool:
    """Give the configs `keep_representatives` cut back their full `depth` (num_hidden_layers; the per-layer lists
    stay cut to the kept layers); whether any was cut."""
    restored = False
    for cfg in {id(c): c for c in _configs_of(model, config)}.values():
        if kept != depth and getattr(cfg, "num_hidden_layers", None) == kept:
            cfg.num_hidden_layers = depth
            restored = True
    return restored


def _configs_of(model: torch.nn.Module, config) -> list:
    out = [config]
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "num_hidden_layers"):
            out.append(c)
    return out

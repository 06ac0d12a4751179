"""Attention classes picked from a table keyed by `config._attn_implementation` that has no `graphsim` entry
(GPT-Neo's `GPT_NEO_ATTENTION_CLASSES`, GIT's `GIT_SELF_ATTENTION_CLASSES`: eager / flash only), traced as one
`graphsim::attention` node.

Without an entry the model cannot even be built with graphsim's attention implementation (KeyError 'graphsim').
`register_attention_tables` gives each table a `graphsim` entry, its eager class, and `table_attention_patches`
swaps that class's forward while tracing for its own projections and one `graphsim::attention` node, recognised by
what the module holds:

- **GPT-Neo** (models/gpt_neo/modeling_gpt_neo.py `GPTNeoSelfAttention`: `q_proj`, `k_proj`, `v_proj`, `out_proj`,
  `attention_type`, `_split_heads` / `_merge_heads`): `_attn` scores `q·kᵀ` **without the 1/√d scale** (GPT-Neo's
  mesh-tensorflow heritage; scale 1.0) in float32 under its `bias` table: causal, and for `attention_type == "local"`
  a sliding window of `config.window_size` keys (`bias ^ tril(bias, -window_size)`: key j is kept for query i when
  0 ≤ i − j < window_size, graphsim's `sliding_window`).
- **GIT** (models/git/modeling_git.py `GitSelfAttention`: BERT-style `query`, `key`, `value` with biases,
  `attention_head_size`): scores scaled by 1/√d with the mask `GitModel.forward` builds, which for a text-only
  request (no `pixel_values`: graphsim traces the text path) is causal; the image prefix's bidirectional block is
  not traced.

vLLM has no port of either (no `GPTNeoForCausalLM` / `GitForCausalLM` in its model registry), so they are priced as
vLLM's attention backend runs a causal (sliding-window for GPT-Neo's local layers) attention of these heads, like
every other traced attention. Tiny models give transformers' eager logits (tests/importers/test_table_attention.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from graphsim.importers.hf.swap import swapped_forwards

IMPL_NAME = "graphsim"


def register_attention_tables() -> None:
    """A `graphsim` entry (the eager class) in GPT-Neo's and GIT's attention tables, so the models build."""
    import transformers.models.git.modeling_git as git
    import transformers.models.gpt_neo.modeling_gpt_neo as gpt_neo

    gpt_neo.GPT_NEO_ATTENTION_CLASSES.setdefault(IMPL_NAME, gpt_neo.GPT_NEO_ATTENTION_CLASSES["eager"])
    git.GIT_SELF_ATTENTION_CLASSES.setdefault(IMPL_NAME, git.GIT_SELF_ATTENTION_CLASSES["eager"])


def _linears(m: torch.nn.Module, *names: str) -> bool:
    return all(isinstance(getattr(m, n, None), torch.nn.Linear) for n in names)


def _is_gpt_neo_attention(m: torch.nn.Module) -> bool:
    return (_linears(m, "q_proj", "k_proj", "v_proj", "out_proj") and getattr(m, "attention_type", None) in
            ("global", "local") and all(callable(getattr(m, a, None)) for a in ("_attn", "_split_heads", "_merge_heads")))


def _gpt_neo_forward(self, hidden_states, attention_mask=None, layer_past=None, use_cache=False,
                     output_attentions=False, **kwargs):
    """GPTNeoSelfAttention.forward with `_attn` as one attention node: scale 1.0, causal, the local layers' window."""
    q = self._split_heads(self.q_proj(hidden_states), self.num_heads, self.head_dim)
    k = self._split_heads(self.k_proj(hidden_states), self.num_heads, self.head_dim)
    v = self._split_heads(self.v_proj(hidden_states), self.num_heads, self.head_dim)
    window = int(self.config.window_size) if self.attention_type == "local" else 0
    out = torch.ops.graphsim.attention(q, k, v, None, 1.0, True, window, 0.0, 0, 0, None)  # [B, S, H, D]
    out = self.out_proj(out.reshape(*out.shape[:2], self.num_heads * self.head_dim))
    return self.resid_dropout(out), None


def _is_git_attention(m: torch.nn.Module) -> bool:
    return (_linears(m, "query", "key", "value") and isinstance(getattr(m, "attention_head_size", None), int)
            and isinstance(getattr(m, "num_attention_heads", None), int) and hasattr(m, "image_patch_tokens"))


def _git_forward(self, hidden_states, attention_mask=None, cache=None, **kwargs):
    """GitSelfAttention.forward on the text path: one causal attention node, scale 1/√d."""
    b, s, _ = hidden_states.shape
    h, d = self.num_attention_heads, self.attention_head_size
    q, k, v = (lin(hidden_states).view(b, s, h, d).transpose(1, 2) for lin in (self.query, self.key, self.value))
    out = torch.ops.graphsim.attention(q, k, v, None, 1.0 / math.sqrt(d), True, 0, 0.0, 0, 0, None)
    return out.reshape(b, s, h * d), None


@contextlib.contextmanager
def table_attention_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap GPT-Neo's and GIT's attention forwards for the semantic ones; restore after."""
    def choose(m: torch.nn.Module):
        return _gpt_neo_forward if _is_gpt_neo_attention(m) else _git_forward if _is_git_attention(m) else None

    with swapped_forwards(model, choose) as names:
        yield names

"""The config-class defaults of every registered architecture, as transformers defines them.

A config.json may omit any field; transformers then fills it from the keyword defaults of the
architecture's config class (`Qwen3Config(head_dim=128, …)`), and the model is built from those.
The accountant reads the same defaults from `config_defaults.json`, a table written from the
pinned transformers by `python -m graphsim.importers.hf.config_defaults` (the accountant itself
never imports transformers). `tests/work/test_work_config_defaults.py` holds the table against the
installed transformers and the accountant's resolved dimensions against transformers' resolved
config attributes, so the table cannot drift from the classes it copies.

A default of `None` means the class derives the value in code (Llama's `head_dim` is
hidden/heads, `num_key_value_heads` is the head count); the builders carry those rules.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

TABLE = "config_defaults.json"

# The fields that say which model this is. A config without them is not a checkpoint's config; a
# class default (Qwen3's 4096-wide, 32-layer shape) would price a different model without a word,
# so the accountant keeps these required.
FRAME_KEYS = frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"})


@cache
def _table() -> dict[str, Any]:
    text = resources.files("graphsim.work").joinpath(TABLE).read_text(encoding="utf-8")
    return json.loads(text)


def class_defaults(architecture: str) -> dict[str, Any]:
    """Keyword defaults of the architecture's transformers config class ({} if not in the table)."""
    entry = _table()["architectures"].get(architecture)
    return dict(entry["defaults"]) if entry else {}


def text_model_class(model_type: str) -> str | None:
    """The causal-LM class transformers builds for a config `model_type` (e.g. qwen3_5_text)."""
    return _table()["text_models"].get(model_type)


def class_aliases(architecture: str) -> dict[str, str]:
    """The config class's `attribute_map`: alias → attribute (MellumConfig: num_experts → num_local_experts)."""
    entry = _table()["architectures"].get(architecture)
    return dict(entry.get("aliases", {})) if entry else {}


def table_architectures() -> tuple[str, ...]:
    return tuple(sorted(_table()["architectures"]))


def table_source() -> str:
    return str(_table()["source"])

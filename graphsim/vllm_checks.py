"""vLLM's own refusals, worded once for every command that meets them (predict's tp pass, kv's layout)."""

from __future__ import annotations


def attention_heads_refusal(heads: int, tp: int) -> str | None:
    """vLLM's refusal of a tensor parallel size that does not divide the attention heads, or None when it divides
    them. vLLM checks this before it builds the model (ModelConfig.verify_with_parallel_config: vllm 0.10.1
    vllm/config/__init__.py, 0.33.0 vllm/config/model.py: "Total number of attention heads (...) must be divisible by
    tensor parallel size (...)"), so it comes before any per-layer check (kv heads, Mamba channels)."""
    if tp < 1 or heads % tp == 0:
        return None
    return (f"vLLM refuses this model at tensor parallel size {tp}: 'Total number of attention heads ({heads}) must "
            f"be divisible by tensor parallel size ({tp})' (ModelConfig.verify_with_parallel_config); choose a -tp "
            f"that divides {heads}")

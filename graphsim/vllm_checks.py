"""vLLM's own refusals, worded once for every command that meets them (predict's tp pass, kv / simulate's
deployment and KV layout)."""

from __future__ import annotations

# the other engines' even split of the query heads: SGLang 0.5.14 sglang/srt/models/llama.py LlamaAttention asserts
# total_num_heads % tp_size == 0 (an AssertionError at load, not a message); TensorRT-LLM's not checked
_OTHER = {"sglang": "SGLang's attention layers assert total_num_heads % tp_size == 0 (sglang/srt/models/llama.py "
                    "LlamaAttention)",
          "trtllm": "graphsim splits them evenly for TensorRT-LLM as for vLLM and SGLang (its check not read)"}


def attention_heads_refusal(heads: int, tp: int, engine: str = "vllm") -> str | None:
    """The refusal of a tensor parallel size that does not divide the attention heads, or None when it divides
    them. vLLM checks this before it builds the model (ModelConfig.verify_with_parallel_config: vllm 0.10.1
    vllm/config/__init__.py, 0.33.0 vllm/config/model.py: "Total number of attention heads (...) must be divisible by
    tensor parallel size (...)"), so it comes before any per-layer check (kv heads, Mamba channels)."""
    if tp < 1 or heads % tp == 0:
        return None
    if engine in _OTHER:
        return (f"{heads} attention heads do not split over tensor parallel size {tp}: {_OTHER[engine]}; choose a "
                f"-tp that divides {heads}")
    return (f"vLLM refuses this model at tensor parallel size {tp}: 'Total number of attention heads ({heads}) must "
            f"be divisible by tensor parallel size ({tp})' (ModelConfig.verify_with_parallel_config); choose a -tp "
            f"that divides {heads}")


def config_heads_refusal(text_config: dict, tp: int, engine: str = "vllm") -> str | None:
    """`attention_heads_refusal` for the heads the language model's config states, read as vLLM reads them
    (`getattr(hf_text_config, "num_attention_heads", 0)`: a config without the key, a pure Mamba, has none). A
    config naming them otherwise (GPT-2's n_head, which transformers' attribute_map maps) is left to the KV layout's
    own check."""
    heads = text_config.get("num_attention_heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        return None
    return attention_heads_refusal(heads, tp, engine)

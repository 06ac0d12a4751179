"""A multimodal wrapper class transformers does not have, around a language model it does.

Remote-code checkpoints wrap a language model transformers ships in a class of their own: Kimi-K2.5's
`KimiK25ForConditionalGeneration` (model_type "kimi_k25") holds a `text_config` whose `architectures` names
`DeepseekV3ForCausalLM`. transformers cannot build the wrapper, but a text-only request runs only the language
model (vLLM's multimodal models run the vision tower on image inputs alone), so graphsim traces that: the
`text_config` with the wrapper's top-level fields that apply to it (tied embeddings, dtype, quantization, as the
work accountant's `registry.language_model` reads them). A wrapper transformers does know is built whole and
its language model traced by `build.text_model`.
"""

from __future__ import annotations

from typing import Any

# Fields a wrapper states at its top level for the language model it wraps (graphsim.work.registry._INHERITED).
INHERITED = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config")


def _known_class(name: Any) -> bool:
    import transformers

    from graphsim.importers.hf.build import transformers_class_name

    return isinstance(name, str) and isinstance(getattr(transformers, transformers_class_name(name), None), type)


def unknown_wrapper_text_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The language model's config of a wrapper transformers does not know (None when the class is known, or when
    the config holds no text model transformers can build: the caller then fails on the class by name)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or _known_class(archs[0]):
        return None
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        return None
    named = text.get("architectures")
    arch = named[0] if isinstance(named, list) and named and _known_class(named[0]) else None
    model_type = text.get("model_type")
    if arch is None and isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        arch = causal if isinstance(causal, str) else None
    if arch is None or not isinstance(model_type, str):
        return None
    return {k: cfg[k] for k in INHERITED if k in cfg and k not in text} | text | {"architectures": [arch]}

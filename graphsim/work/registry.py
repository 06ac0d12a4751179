"""Architecture registry: the exact `architectures[0]` string → the builder for its `ModelSpec`.

An architecture not listed here is a hard failure naming the supported list; there is no
fallback to a similar family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.work.builders import (
    deepseek_v4, encoder_style, gemma4, gqa, hybrid, legacy, linear_attn, llama4, mimo, mla, modern_a, modern_b,
    nas_step, nemotron_h, ssm,
)
from graphsim.work.config import ConfigView
from graphsim.work.config_defaults import text_model_class
from graphsim.work.specs import ModelSpec

Builder = Callable[[ConfigView], ModelSpec]

BUILDERS: dict[str, Builder] = {
    "LlamaForCausalLM": partial(gqa.build_gqa_decoder, gqa.LLAMA),
    "MistralForCausalLM": partial(gqa.build_gqa_decoder, gqa.MISTRAL),
    "Qwen2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.QWEN2),
    "Qwen3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.QWEN3),
    "Phi3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.PHI3),
    "MixtralForCausalLM": partial(gqa.build_gqa_decoder, gqa.MIXTRAL),
    "Qwen3MoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.QWEN3_MOE),
    "Gemma2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.GEMMA2),
    "GptOssForCausalLM": partial(gqa.build_gqa_decoder, gqa.GPT_OSS),
    "DeepseekV2ForCausalLM": partial(mla.build_mla_decoder, mla.DEEPSEEK_V2),
    "DeepseekV3ForCausalLM": partial(mla.build_mla_decoder, mla.DEEPSEEK_V3),
    "DeepseekV32ForCausalLM": partial(mla.build_mla_decoder, mla.DEEPSEEK_V32),
    "GlmMoeDsaForCausalLM": partial(mla.build_mla_decoder, mla.DEEPSEEK_V32),
    "Qwen3NextForCausalLM": hybrid.build_qwen3_next,
    # The long tail (gqa.py documents each profile and where it was read).
    "GemmaForCausalLM": partial(gqa.build_gqa_decoder, gqa.GEMMA),
    "GraniteForCausalLM": partial(gqa.build_gqa_decoder, gqa.GRANITE),
    "Ernie4_5ForCausalLM": partial(gqa.build_gqa_decoder, gqa.ERNIE4_5),
    "HeliumForCausalLM": partial(gqa.build_gqa_decoder, gqa.HELIUM),
    "SeedOssForCausalLM": partial(gqa.build_gqa_decoder, gqa.SEED_OSS),
    "GlmForCausalLM": partial(gqa.build_gqa_decoder, gqa.GLM),
    "Glm4ForCausalLM": partial(gqa.build_gqa_decoder, gqa.GLM4),
    "Olmo2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.OLMO2),
    "Olmo3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.OLMO3),
    "MinistralForCausalLM": partial(gqa.build_gqa_decoder, gqa.MINISTRAL),
    "Ministral3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.MINISTRAL),
    "SmolLM3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.SMOLLM3),
    "CwmForCausalLM": partial(gqa.build_gqa_decoder, gqa.CWM),
    "Gemma3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.GEMMA3),
    "VaultGemmaForCausalLM": partial(gqa.build_gqa_decoder, gqa.VAULTGEMMA),
    "Exaone4ForCausalLM": partial(gqa.build_gqa_decoder, gqa.EXAONE4),
    "CohereForCausalLM": partial(gqa.build_gqa_decoder, gqa.COHERE),
    "Cohere2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.COHERE2),
    "HunYuanDenseV1ForCausalLM": partial(gqa.build_gqa_decoder, gqa.HUNYUAN_DENSE),
    "HyperCLOVAXForCausalLM": partial(gqa.build_gqa_decoder, gqa.HYPERCLOVAX),
    "Qwen2MoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.QWEN2_MOE),
    "OlmoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.OLMOE),
    "GraniteMoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.GRANITE_MOE),
    "GraniteMoeSharedForCausalLM": partial(gqa.build_gqa_decoder, gqa.GRANITE_MOE_SHARED),
    "Qwen3_5ForCausalLM": partial(hybrid.build_gated_hybrid, None),
    "Qwen3_5MoeForCausalLM": partial(hybrid.build_gated_hybrid, hybrid.QWEN3_5_MOE),
    "Llama4ForCausalLM": llama4.build_llama4_text,
    "MiMoV2FlashForCausalLM": mimo.build_mimo_v2_flash,
    "MiniMaxM2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.MINIMAX_M2),
    "ArceeForCausalLM": partial(gqa.build_gqa_decoder, gqa.ARCEE),
    "Starcoder2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.STARCODER2),
    "StableLmForCausalLM": partial(gqa.build_gqa_decoder, gqa.STABLELM),
    "Jais2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.JAIS2),
    "MellumForCausalLM": partial(gqa.build_gqa_decoder, gqa.MELLUM),
    "SolarOpenForCausalLM": partial(gqa.build_gqa_decoder, gqa.SOLAR_OPEN),
    "YoutuForCausalLM": partial(mla.build_mla_decoder, mla.YOUTU),
    "GPTNeoXForCausalLM": partial(gqa.build_gqa_decoder, gqa.GPT_NEOX),
    "Emu3ForCausalLM": partial(gqa.build_gqa_decoder, gqa.EMU3),
    "FlexOlmoForCausalLM": partial(gqa.build_gqa_decoder, gqa.FLEX_OLMO),
    "Glm4MoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.GLM4_MOE),
    "NemotronHForCausalLM": nemotron_h.build_nemotron_h,
    "Gemma4ForCausalLM": gemma4.build_gemma4_text,
    "Glm4MoeLiteForCausalLM": partial(mla.build_mla_decoder, mla.GLM4_MOE_LITE),
    "MiniCPM3ForCausalLM": partial(mla.build_mla_decoder, mla.MINICPM3),
    "GraniteSWAForCausalLM": partial(gqa.build_gqa_decoder, gqa.GRANITE_SWA),
    "GraniteMoeSWAForCausalLM": partial(gqa.build_gqa_decoder, gqa.GRANITE_MOE_SWA),
    "ApertusForCausalLM": partial(gqa.build_gqa_decoder, gqa.APERTUS),
    "Apertus1p5TextForCausalLM": partial(gqa.build_gqa_decoder, gqa.APERTUS),
    "PersimmonForCausalLM": partial(gqa.build_gqa_decoder, gqa.PERSIMMON),
    "PhiForCausalLM": partial(gqa.build_gqa_decoder, gqa.PHI),
    "OlmoForCausalLM": partial(gqa.build_gqa_decoder, gqa.OLMO),
    "NemotronForCausalLM": partial(gqa.build_gqa_decoder, gqa.NEMOTRON),
    "Ernie4_5_MoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.ERNIE4_5_MOE),
    "ExaoneMoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.EXAONE_MOE),
    "HunYuanMoEV1ForCausalLM": partial(gqa.build_gqa_decoder, gqa.HUNYUAN_MOE),
    "Dots1ForCausalLM": partial(gqa.build_gqa_decoder, gqa.DOTS1),
    **deepseek_v4.ARCHITECTURES,
    **legacy.ARCHITECTURES,
    **modern_a.ARCHITECTURES,
    **ssm.ARCHITECTURES,
    **linear_attn.ARCHITECTURES,
    **modern_b.ARCHITECTURES,
    **encoder_style.ARCHITECTURES,
    **nas_step.ARCHITECTURES,
}

# architectures[0] spellings a checkpoint uses for a transformers class of another name (the cross-checks build
# the transformers class; the accountant builds both names the same way)
TRANSFORMERS_CLASS: dict[str, str] = {**linear_attn.TRANSFORMERS_CLASS}
# registered architectures with no class in the pinned transformers (remote code only): no config-class defaults
# and no meta model; each builder says what it was checked against instead (builders/nas_step.py)
NO_TRANSFORMERS_CLASS: frozenset[str] = nas_step.NO_TRANSFORMERS_CLASS


def supported_architectures() -> tuple[str, ...]:
    return tuple(sorted(BUILDERS))


def architecture_of(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConfigError(
            "config.json is missing required field 'architectures' (a list naming the model class); add it"
        )
    return archs[0]


# Fields a multimodal wrapper states at its top level for the language model it wraps.
_INHERITED = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config")


def language_model(cfg: dict[str, Any], arch: str) -> tuple[str, dict[str, Any]] | None:
    """(causal-LM class, config) of the language model inside a multimodal wrapper, if registered.

    A `…ForConditionalGeneration` config holds its language model in `text_config`: the registered
    class its `architectures[0]` names, else the causal-LM class transformers builds for its
    `model_type` (the table's `text_models`, from transformers' AutoModelForCausalLM mapping).
    """
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        return None
    named = text.get("architectures")
    model_type = text.get("model_type")
    if isinstance(named, list) and named and named[0] in BUILDERS:
        text_arch = named[0]  # the class the text config names (Kimi-K2.5: DeepseekV3ForCausalLM, model_type kimi_k2)
    else:
        text_arch = text_model_class(model_type) if isinstance(model_type, str) else None
        if text_arch is None and isinstance(model_type, str):  # a remote-code text model (Step-3.7's step3p5)
            text_arch = nas_step.TEXT_MODEL_TYPES.get(model_type)
    if text_arch is None or text_arch not in BUILDERS:
        return None
    merged = {k: cfg[k] for k in _INHERITED if k in cfg and k not in text} | text
    return text_arch, merged


def language_model_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config the accountant builds from: a wrapper's registered language model, else `cfg` itself."""
    arch = architecture_of(cfg)
    if arch in modern_b.WRAPPERS:  # a registered wrapper (builders/modern_b.py): its text_config
        return modern_b.text_config_of(cfg) or cfg
    if arch in BUILDERS:
        return cfg
    inner = language_model(cfg, arch)
    return dict(inner[1], architectures=[inner[0]]) if inner is not None else cfg


def build_model(cfg: dict[str, Any]) -> ModelSpec:
    """Build the `ModelSpec` of a config dict; unknown architectures fail, naming the supported ones.

    A multimodal wrapper whose language model is registered is accounted as that language model,
    with a note saying so (the vision and audio towers are not counted).
    """
    arch = architecture_of(cfg)
    builder = BUILDERS.get(arch)
    if builder is not None:
        return builder(ConfigView(cfg, arch))
    inner = language_model(cfg, arch)
    if inner is not None:
        text_arch, text_cfg = inner
        spec = BUILDERS[text_arch](ConfigView(text_cfg, text_arch))
        note = f"{arch}: accounts its language model ({text_arch}, from text_config); other towers are not counted"
        return replace(spec, notes=(*spec.notes, note))
    if isinstance(cfg.get("auto_map"), dict) and cfg["auto_map"]:  # the model's own code (importers/hf/remote_code.py)
        raise UnsupportedArchitectureError(
            f"architecture '{arch}' is the model's own code (auto_map) and the work accountant has no builder for "
            "it, so graphsim work / analyze are unavailable; predict, kv and simulate use its traced graph "
            "(--trust-remote-code)")
    raise UnsupportedArchitectureError(
        f"architecture '{arch}' is not supported by the work accountant; supported: "
        f"{', '.join(supported_architectures())}"
    )

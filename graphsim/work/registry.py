"""Architecture registry: the exact `architectures[0]` string → the builder for its `ModelSpec`.

An architecture not listed here is a hard failure naming the supported list; there is no
fallback to a similar family.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.work.builders import gqa, hybrid, mla
from graphsim.work.config import ConfigView
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
    "MiniMaxM2ForCausalLM": partial(gqa.build_gqa_decoder, gqa.MINIMAX_M2),
    "Glm4MoeForCausalLM": partial(gqa.build_gqa_decoder, gqa.GLM4_MOE),
}


def supported_architectures() -> tuple[str, ...]:
    return tuple(sorted(BUILDERS))


def architecture_of(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConfigError(
            "config.json is missing required field 'architectures' (a list naming the model class); add it"
        )
    return archs[0]


def build_model(cfg: dict[str, Any]) -> ModelSpec:
    """Build the `ModelSpec` of a config dict; unknown architectures fail, naming the supported ones."""
    arch = architecture_of(cfg)
    builder = BUILDERS.get(arch)
    if builder is None:
        raise UnsupportedArchitectureError(
            f"architecture '{arch}' is not supported by the work accountant; supported: "
            f"{', '.join(supported_architectures())}"
        )
    return builder(ConfigView(cfg, arch))

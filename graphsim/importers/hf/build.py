"""Build a Hugging Face causal LM on the meta device (no weights) from a config dict."""

from __future__ import annotations

import copy
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.importers.hf import custom_ops, remote_code
from graphsim.importers.hf.unbuilt import activation_note, unbuilt_reason, unknown_activation
from graphsim.importers.hf.wrappers import unknown_wrapper_text_config
from graphsim.quantization import parse_quant_config, raw_quantization_config

_TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
}

REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size")


@dataclass
class BuiltModel:
    model: torch.nn.Module
    config: Any  # transformers PretrainedConfig
    dtype: torch.dtype
    architecture: str
    quantization: dict[str, Any] | None
    remote_code: str | None = None  # the snapshot directory whose own code built it (remote_code.py), else None


def config_dtype(cfg: dict[str, Any], override: str | None = None) -> torch.dtype:
    name = override or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if isinstance(name, str) and name.removeprefix("torch.") in _TORCH_DTYPES:
        return _TORCH_DTYPES[name.removeprefix("torch.")]
    raise ConfigError(f"unsupported dtype '{name}'; use one of bfloat16, float16, float32")


# Legacy keyword spellings a config class's __post_init__ takes for a field (BloomConfig, FalconConfig: n_embed), and
# fields it derives the value from (NemotronHConfig.__post_init__: the depth is len(layers_block_type); the
# Nemotron-3 Ultra configs carry no num_hidden_layers)
_LEGACY_NAMES = {"hidden_size": ("n_embed",), "num_hidden_layers": ("layers_block_type",)}


def _field_names(cfg: dict[str, Any], field: str) -> tuple[str, ...]:
    """`field` and the names its config class stores it under: the class's attribute_map (GPT2Config keeps
    hidden_size as n_embd) and legacy keywords."""
    names = (field, *_LEGACY_NAMES.get(field, ()))
    model_type = cfg.get("model_type")
    if isinstance(model_type, str):
        from transformers import CONFIG_MAPPING

        if model_type in CONFIG_MAPPING:
            stored = CONFIG_MAPPING[model_type].attribute_map.get(field)
            names += (stored,) if stored else ()
    return names


def _class_derives(cfg: dict[str, Any], field: str) -> bool:
    """Whether the config class of `cfg`'s model_type computes `field` (a property) from the fields `cfg` has
    (LongcatFlashConfig.num_hidden_layers is 2 × num_layers; LongCat-Flash's config.json has only num_layers). A
    plain class default does not count: a required field the config omits stays missing."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        return False
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        return False
    cls = CONFIG_MAPPING[model_type]
    if not isinstance(getattr(cls, field, None), property):
        return False
    kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "transformers_version")}
    try:
        value = getattr(cls(**kwargs), field, None)
    except Exception:  # a config its class refuses: the missing field is reported as missing
        return False
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_config(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures")
    if not archs or not isinstance(archs, list) or not isinstance(archs[0], str):
        raise ConfigError("config has no 'architectures' list; add e.g. \"architectures\": [\"LlamaForCausalLM\"]")
    if "model_type" not in cfg:
        raise ConfigError("config has no 'model_type'; add the model_type of the architecture (e.g. \"llama\")")
    text_cfg = cfg.get("text_config", cfg)
    missing = [f for f in REQUIRED_FIELDS if not any(n in text_cfg for n in _field_names(text_cfg, f))]
    if missing:
        missing = [f for f in missing if not _class_derives(text_cfg, f)]
    if missing:
        raise ConfigError(f"config is missing required field(s) {', '.join(missing)}; add them to config.json")
    return archs[0]


def make_hf_config(cfg: dict[str, Any]):
    import transformers
    from transformers import AutoConfig

    arch = check_config(cfg)
    raw = copy.deepcopy(cfg)
    raw.pop("quantization_config", None)  # weights are never loaded; quantisation is priced later
    model_type = raw.pop("model_type")
    model_type = _transformers_model_type(arch, model_type)
    try:
        hf_cfg = AutoConfig.for_model(model_type, **raw)
    except ValueError as e:
        if "Unrecognized model" in str(e) or "model_type" in str(e):
            raise UnsupportedArchitectureError(
                f"architecture {arch} (model_type '{model_type}') is not known to transformers "
                f"{transformers.__version__}; upgrade transformers or use a supported model"
            ) from None
        raise ConfigError(f"malformed config for {arch}: {e}") from None
    except Exception as e:  # transformers' own validators (strict dataclasses, ValueErrors)
        root = e
        while root.__cause__ is not None:
            root = root.__cause__
        msg = " ".join(str(root).split())
        raise ConfigError(f"inconsistent config for {arch}: {msg}; fix config.json") from None
    return hf_cfg


def transformers_class_name(arch: str) -> str:
    """The transformers class a checkpoint's `architectures[0]` spelling is built as: the accountant's alias table
    (graphsim.work.registry.TRANSFORMERS_CLASS: MiniMax-M3's remote-code MiniMaxM3ForCausalLM is transformers'
    MiniMaxM3VLForCausalLM, MiniMax-Text-01's MiniMaxText01ForCausalLM is MiniMaxForCausalLM), else itself."""
    from graphsim.work.registry import TRANSFORMERS_CLASS

    return TRANSFORMERS_CLASS.get(arch, arch)


def _transformers_model_type(arch: str, model_type: str) -> str:
    """The model_type to build the config with. A checkpoint's own model_type may be unknown to transformers while
    the class it names is one transformers has (remote code reusing a class: Kimi-K2's "kimi_k2" with
    DeepseekV3ForCausalLM; an aliased spelling: MiniMax-M3's "minimax_m3"): the class's config class's model_type,
    as transformers itself would build that class."""
    import transformers
    from transformers import CONFIG_MAPPING

    if model_type in CONFIG_MAPPING:
        return model_type
    cls = getattr(transformers, transformers_class_name(arch), None)
    if not isinstance(cls, type) or getattr(cls, "config_class", None) is None:
        return model_type
    return str(getattr(cls.config_class, "model_type", model_type))


def model_class(arch: str):
    import transformers
    from transformers.models.auto import modeling_auto

    arch = transformers_class_name(arch)
    cls = getattr(transformers, arch, None)
    if cls is None or not isinstance(cls, type):
        raise UnsupportedArchitectureError(
            f"architecture '{arch}' is not known to transformers {transformers.__version__}; "
            "check config.json's 'architectures' or upgrade transformers"
        )
    # Serving is autoregressive generation: the class must be one transformers lists as a causal LM
    # (its AutoModelForCausalLM mapping) or as an image/text-to-text generator. An encoder (BERT's
    # masked LM, a classifier) would otherwise be traced and priced as if it decoded tokens.
    generators = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) | set(
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values())
    if arch not in generators:
        raise UnsupportedArchitectureError(
            f"{arch} is not a causal (decoder) language model in transformers {transformers.__version__} "
            "(not in its AutoModelForCausalLM mapping): graphsim predicts autoregressive serving; "
            "pass the config of a …ForCausalLM model"
        )
    return cls


def text_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module a text-only request runs: the model itself when transformers lists its class as a causal LM;
    for an image/text-to-text wrapper (Llama-4's `…ForConditionalGeneration`: vision tower, projector and a
    `language_model` that is a `…ForCausalLM`), its one child that is a causal LM. vLLM runs a text-only prompt
    through the language model alone (the vision encoder runs only on image inputs)."""
    from transformers.models.auto import modeling_auto

    causal = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if type(model).__name__ in causal:
        return model
    lms = [c for c in model.children() if type(c).__name__ in causal]
    return lms[0] if len(lms) == 1 else model


def build_on_meta(cfg: dict[str, Any], dtype: str | None = None, code_dir: Path | None = None,
                  trust_remote_code: bool | None = None) -> BuiltModel:
    """Construct the model on the meta device with graphsim's semantic attention and experts (a wrapper class
    transformers lacks around a language model it has: that language model, wrappers.py). With trusted remote code
    and a snapshot directory `code_dir`, a config with auto_map is built from the snapshot's own files
    (remote_code.py); without trust, one transformers cannot build is refused in one line."""
    custom_ops.register()
    if remote_code.applies(cfg, code_dir, trust_remote_code):
        assert code_dir is not None
        return remote_code.build(cfg, dtype, code_dir)
    cfg = unknown_wrapper_text_config(cfg) or cfg
    arch = check_config(cfg)
    refused = remote_code.refusal(cfg, trust_remote_code, code_dir)
    if refused is not None:
        raise UnsupportedArchitectureError(refused)
    unbuilt = unbuilt_reason(arch, cfg)  # a remote-code model transformers' class of that name would not be
    if unbuilt is not None:
        raise UnsupportedArchitectureError(
            f"graphsim cannot trace this config as {arch}: {unbuilt}, so the trace would be another model; "
            "graphsim work / kv account it from the config")
    quant = quantization_of(cfg)
    hf_cfg = make_hf_config(cfg)
    cls = model_class(arch)
    torch_dtype = config_dtype(cfg, dtype)
    try:
        model = instantiate_on_meta(cls, hf_cfg, torch_dtype)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"cannot build {arch} from this config: {e}") from None
    except KeyError as e:
        if e.args == (custom_ops.IMPL_NAME,):  # (GPT-Neo's GPT_NEO_ATTENTION_CLASSES, Git's: eager / flash only)
            raise UnsupportedArchitectureError(
                f"graphsim cannot trace {arch} yet: its modelling file picks the attention class from a table keyed "
                f"by attn_implementation that has no '{custom_ops.IMPL_NAME}' entry; it needs one (as Falcon's, "
                "importers/hf/alibi_ops.py register_attention_tables); graphsim work / kv may still account it from "
                "the config") from None
        act = unknown_activation(cfg)
        if act is not None and e.args == (act,):
            raise ConfigError(f"cannot build {arch} from this config: {activation_note(act)}; "
                              "check hidden_act in config.json") from None
        raise ConfigError(f"cannot build {arch} from this config (KeyError: {e}); check config.json") from None
    except (AttributeError, IndexError, AssertionError, RuntimeError) as e:
        raise ConfigError(f"cannot build {arch} from this config ({type(e).__name__}: {e}); check config.json") from None
    model.eval()
    return BuiltModel(model, hf_cfg, torch_dtype, arch, quant)


def instantiate_on_meta(cls: Any, hf_cfg: Any, torch_dtype: Any) -> Any:
    """`cls` built from `hf_cfg` on the meta device with graphsim's attention and experts implementations (without
    the experts one when the class does not take it); transformers' warnings silenced. Errors propagate."""
    import torch

    from graphsim.importers.hf import custom_ops

    kwargs: dict[str, Any] = {
        "attn_implementation": custom_ops.IMPL_NAME,
        "experts_implementation": custom_ops.IMPL_NAME,
        "dtype": torch_dtype,
    }
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        try:
            return cls._from_config(hf_cfg, **kwargs)
        except (ValueError, TypeError) as e:
            if "experts_implementation" not in str(e):
                raise
            kwargs.pop("experts_implementation")
            return cls._from_config(hf_cfg, **kwargs)


def quantization_of(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The config's quantization_config (or its text_config's), checked by graphsim.quantization so that an
    unknown method is refused at import (ConfigError) instead of being priced in the model dtype later."""
    raw = raw_quantization_config(cfg)
    if raw is None:
        return None
    parse_quant_config(raw)
    return raw

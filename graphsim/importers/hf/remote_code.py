"""Models whose code is not in transformers: a snapshot directory whose config.json has `auto_map` and ships its own
`configuration_*.py` / `modeling_*.py` (transformers' "remote code"), built from those files when the user trusts
them (`--trust-remote-code`, vLLM's and transformers' name).

transformers builds such a model with `AutoConfig.from_pretrained(dir, trust_remote_code=True)` and
`AutoModelForCausalLM.from_config(...)`: `auto_map["AutoConfig"]` and `auto_map["AutoModelForCausalLM"]` name
`<module>.<Class>` in the snapshot, and `transformers.dynamic_module_utils.get_class_from_dynamic_module` copies the
module and its relative imports into transformers' module cache and imports it (`get_cached_module_file`: with a
local directory and `local_files_only=True` nothing is downloaded). graphsim does the same with the snapshot's own
files, then builds the class on the meta device (no weights) with graphsim's attention and experts implementations,
and the model goes through the same trace → IR → passes → pricing path as a transformers class.

- Without the flag, a config with `auto_map` that transformers cannot build itself (its model_type unknown and its
  `architectures[0]` no transformers class) is refused in one line naming the files and the flag. A config with
  `auto_map` that transformers can build (Kimi-K2: "kimi_k2" names `DeepseekV3ForCausalLM`) is built as before.
- With the flag, a config with `auto_map["AutoModelForCausalLM"]` from a local directory (a path or the local HF
  cache's snapshot) is built from the snapshot's code; a catalog entry has no code files and is built by
  transformers as without the flag. Code in another repository (`"repo--module.Class"`) is never fetched: refused.
- A failure inside the snapshot's code (import, config class, model constructor, forward under the trace) is one
  line naming the snapshot's file, the line and the error, never a traceback.
- The graph cache key holds the sha256 of every `.py` file of the snapshot (`code_digest`), so edited code is
  traced again.
- Attention must reach graphsim's attention node: remote code that calls transformers' attention interface
  (`ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`, as transformers' own classes since 4.48) does. A class that
  refuses graphsim's implementation, or whose attention is traced as plain tensor ops (a softmax or SDPA, no
  attention node), is refused in one line: it would be priced as unfused matmuls and show no KV cache.

The work accountant (graphsim/work) has no builder for such classes: `graphsim kv` / `simulate` lay the KV cache out
from the traced graph (graphsim/serving/graph_kv.py), and `graphsim work` / `analyze` say they are unavailable.
"""

from __future__ import annotations

import hashlib
import os
import traceback
import warnings
from pathlib import Path
from typing import Any

from graphsim.catalog import TRUST_REMOTE_CODE_ENV
from graphsim.errors import ConfigError, UnsupportedArchitectureError

TRUST_ENV = TRUST_REMOTE_CODE_ENV  # set by the CLI's --trust-remote-code (worker processes inherit it)
MODEL_KEY = "AutoModelForCausalLM"
CONFIG_KEY = "AutoConfig"
FLAG = "--trust-remote-code"


def trusted(explicit: bool | None = None) -> bool:
    """Whether remote code may run: `explicit` when given, else $GRAPHSIM_TRUST_REMOTE_CODE."""
    if explicit is not None:
        return explicit
    return os.environ.get(TRUST_ENV, "").strip().lower() not in ("", "0", "false", "no")


def auto_map(cfg: dict[str, Any]) -> dict[str, Any] | None:
    m = cfg.get("auto_map")
    return m if isinstance(m, dict) and m else None


def _ref(value: Any) -> str | None:
    """An auto_map entry's class reference (a tokenizer's entry is a pair; a model's a string)."""
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if isinstance(v, str)), None)
    return value if isinstance(value, str) else None


def _files(m: dict[str, Any]) -> list[str]:
    refs = [_ref(m.get(k)) for k in (CONFIG_KEY, MODEL_KEY)]
    return sorted({r.split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs if r})


def transformers_builds(cfg: dict[str, Any]) -> bool:
    """Whether transformers itself builds `cfg` (its model_type, or the class its `architectures[0]` names)."""
    import transformers
    from transformers import CONFIG_MAPPING

    from graphsim.importers.hf.build import transformers_class_name

    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        return True
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    return arch is not None and isinstance(getattr(transformers, transformers_class_name(arch), None), type)


def refusal(cfg: dict[str, Any], trust: bool | None = None, directory: Path | None = None) -> str | None:
    """The one-line refusal of a config whose model code is its own and that is not built from it (None when
    transformers builds it, or it has no auto_map): not trusted, no code directory, or no causal LM in its auto_map."""
    m = auto_map(cfg)
    if m is None or transformers_builds(cfg):
        return None
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else cfg.get("model_type")
    head = f"{arch} (model_type '{cfg.get('model_type')}') ships its own model code"
    if not trusted(trust):
        files = ", ".join(_files(m)) or ", ".join(f"{k}: {_ref(v)}" for k, v in m.items())
        return (f"{head} (auto_map → {files}) and is not in transformers; pass {FLAG} to run it (graphsim runs the "
                "snapshot's .py files on the meta device, offline)")
    if directory is None:
        return (f"{head} (auto_map), but this config comes with no code files; pass the snapshot directory that holds "
                "config.json and its .py files")
    if _ref(m.get(MODEL_KEY)) is None:
        return (f"{head}, but its auto_map names no {MODEL_KEY} (it names {', '.join(sorted(m))}); graphsim predicts "
                "autoregressive serving of a causal LM")
    return None


def code_dir(location: str, source: str) -> Path | None:
    """The directory holding a resolved model's code files: its config.json's directory for a path or an HF-cache
    snapshot; None for a catalog entry (no code files)."""
    if source not in ("path", "hf-cache"):
        return None
    p = Path(location)
    return p.parent if p.name.endswith(".json") else p


def missing_files(cfg: dict[str, Any], directory: Path) -> list[str]:
    """The auto_map's code files (configuration and causal LM) that `directory` does not hold."""
    return [f for f in _files(auto_map(cfg) or {}) if not (directory / f).is_file()]


def applies(cfg: dict[str, Any], directory: Path | None, trust: bool | None = None) -> bool:
    """Whether this config is built from its own code: trusted, an auto_map naming a causal LM, a code directory, and
    either the code files are there or transformers cannot build the config itself. (`vllm serve … --trust-remote-code`
    is habit for models transformers has, e.g. DeepSeek-V3, and a directory holding only their config.json is then
    built by transformers, as `transformers_fallback` says; without the files and without transformers, loading the
    code names the missing file.)"""
    m = auto_map(cfg)
    if not (trusted(trust) and directory is not None and m is not None and _ref(m.get(MODEL_KEY)) is not None):
        return False
    return not missing_files(cfg, directory) or not transformers_builds(cfg)


def transformers_fallback(cfg: dict[str, Any], directory: Path | None, trust: bool | None = None) -> str | None:
    """The notice for a trusted config whose code files are absent but that transformers builds (None otherwise)."""
    m = auto_map(cfg)
    if not trusted(trust) or directory is None or m is None or applies(cfg, directory, trust):
        return None
    missing = missing_files(cfg, directory)
    if not missing:
        return None
    return (f"{directory} holds no {', '.join(missing)} (auto_map): built with transformers' own class for "
            f"model_type '{cfg.get('model_type')}' instead of the model's code")


def code_digest(directory: Path) -> dict[str, str]:
    """sha256 of every .py file beside config.json (name → digest): part of the graph cache key. (Top level only, as a
    Hub snapshot keeps its code; a config.json passed from a large directory does not make this walk it.)"""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(directory.glob("*.py")) if f.is_file()}


def _modules_cache() -> Path:
    from transformers.utils.hub import HF_MODULES_CACHE

    return Path(HF_MODULES_CACHE).resolve()


def is_remote_frame(filename: str) -> bool:
    """A traceback frame in a snapshot's code (as transformers' module cache holds its copy)."""
    try:
        return Path(filename).resolve().is_relative_to(_modules_cache())
    except (OSError, ValueError):
        return False


def where_in_code(error: BaseException, directory: Path | None = None) -> str:
    """` in <snapshot>/modeling_x.py line N (source)` for the innermost frame of `error` in a snapshot's code, '' if
    none. The module cache's copy is named by the snapshot's file of the same name when `directory` holds one."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_remote_frame(f.filename)]
    if not frames and isinstance(error, SyntaxError) and error.filename and is_remote_frame(error.filename):
        name = Path(error.filename).name
        path = directory / name if directory is not None and (directory / name).is_file() else Path(name)
        return f" in {path} line {error.lineno}"
    if not frames:
        return ""
    f = frames[-1]
    name = Path(f.filename).name
    path = directory / name if directory is not None and (directory / name).is_file() else Path(name)
    return f" in {path} line {f.lineno} ({(f.line or '').strip()})"


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:240]


def _load_class(ref: str, directory: Path, what: str):
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    if "--" in ref:
        raise ConfigError(f"auto_map's {what} '{ref}' is code in another repository ({ref.split('--')[0]}); graphsim "
                          f"never downloads: copy that file into {directory} and name it without the 'repo--' prefix")
    module = ref.rsplit(".", 1)[0] + ".py"
    if not (directory / module).is_file():
        raise ConfigError(f"auto_map's {what} names {module}, which {directory} does not hold; graphsim never "
                          "downloads: place the model's .py files beside its config.json")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return get_class_from_dynamic_module(ref, str(directory), local_files_only=True)
    except (KeyboardInterrupt, ConfigError, UnsupportedArchitectureError):
        raise
    except FileNotFoundError as e:  # a relative import of a file the snapshot lacks (transformers copies them first)
        missing = Path(str(e.filename or "")).name or str(e)
        raise ConfigError(f"cannot load {what} {ref}: {module} imports {missing}, which {directory} does not hold; "
                          "graphsim never downloads: place all of the model's .py files beside its config.json") from None
    except Exception as e:  # the snapshot's code failed to import (transformers parses it first), or lacks the class
        where = where_in_code(e, directory) or f" in {directory / module}"
        raise ConfigError(f"cannot load {what} {ref}{where}: {_one_line(e)}; fix the model's code") from None


def build_config(cfg: dict[str, Any], directory: Path):
    """The snapshot's own config class built from config.json (quantization_config dropped: priced later)."""
    m = auto_map(cfg) or {}
    raw = {k: v for k, v in cfg.items() if k != "quantization_config"}
    ref = _ref(m.get(CONFIG_KEY))
    if ref is None:  # transformers would build the config class of its model_type; none here
        raise ConfigError(f"config.json's auto_map names no {CONFIG_KEY}; add the snapshot's configuration class")
    config_class = _load_class(ref, directory, CONFIG_KEY)
    try:
        with warnings.catch_warnings():  # (deprecation notices of transformers' config base class)
            warnings.simplefilter("ignore")
            return config_class.from_dict(raw)
    except (KeyboardInterrupt, ConfigError):
        raise
    except Exception as e:
        raise ConfigError(f"{ref} refused config.json{where_in_code(e, directory)}: {_one_line(e)}; "
                          "fix config.json or the model's code") from None


def model_class(cfg: dict[str, Any], directory: Path):
    ref = _ref((auto_map(cfg) or {}).get(MODEL_KEY))
    assert ref is not None  # (applies() checked it)
    return _load_class(ref, directory, MODEL_KEY)


def construct_failure(arch: str, error: BaseException, directory: Path) -> str:
    """One line for the snapshot's model class failing to build on the meta device."""
    from graphsim.importers.hf.custom_ops import IMPL_NAME

    text = str(error)
    table = isinstance(error, KeyError) and error.args == (IMPL_NAME,)  # a class table keyed by attn_implementation
    if table or "attn_implementation" in text or ("attention" in text.lower() and isinstance(error, ValueError)):
        return (f"graphsim cannot trace {arch}'s own code yet: it does not accept graphsim's attention implementation"
                f"{where_in_code(error, directory)} ({_one_line(error)}); graphsim needs the model's attention to "
                "call transformers' attention interface (ALL_ATTENTION_FUNCTIONS[config._attn_implementation])")
    return f"cannot build {arch} from its own code{where_in_code(error, directory)}: {_one_line(error)}"


def check_attention(graph, arch: str) -> None:
    """Refuse a remote-code graph whose attention was traced as plain tensor ops (softmax / SDPA and no attention
    node): priced as unfused matmuls with no KV cache, it would be another model's numbers."""
    from graphsim.ir import Op

    ops = {n.op for n in graph.nodes}
    if ops & {Op.ATTENTION, Op.LINEAR_ATTENTION}:
        return
    sdpa = [n.target for n in graph.nodes if "scaled_dot_product" in str(n.target) or "flash" in str(n.target)]
    if Op.SOFTMAX in ops or sdpa:
        raise UnsupportedArchitectureError(
            f"graphsim cannot trace {arch}'s own code yet: its attention was traced as plain tensor ops "
            f"({'scaled_dot_product_attention' if sdpa else 'matmul + softmax'}), not graphsim's attention node, so "
            "it would be priced unfused with no KV cache; graphsim needs the model's attention to call transformers' "
            "attention interface (ALL_ATTENTION_FUNCTIONS[config._attn_implementation])")


def build(cfg: dict[str, Any], dtype: str | None, directory: Path):
    """The snapshot's causal LM on the meta device with graphsim's attention and experts (a BuiltModel)."""
    from graphsim.importers.hf.build import BuiltModel, check_config, config_dtype, instantiate_on_meta, quantization_of

    arch = check_config(cfg)
    quant = quantization_of(cfg)
    hf_cfg = build_config(cfg, directory)
    cls = model_class(cfg, directory)
    torch_dtype = config_dtype(cfg, dtype)
    try:
        model = instantiate_on_meta(cls, hf_cfg, torch_dtype)
    except (KeyboardInterrupt, ConfigError, UnsupportedArchitectureError):
        raise
    except Exception as e:  # the snapshot's constructor failed: say where, in one line
        raise UnsupportedArchitectureError(construct_failure(arch, e, directory)) from None
    model.eval()
    return BuiltModel(model, hf_cfg, torch_dtype, arch, quant, remote_code=str(directory))

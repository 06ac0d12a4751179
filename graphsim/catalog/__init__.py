"""Offline model catalog and `<hf-model>` resolution, without torch.

A model argument resolves, in order, to:
1. a bundled catalog name (`llama-3.1-8b`, case-insensitive) or a catalog HF id
   (`meta-llama/Llama-3.1-8B`);
2. a path: a `config.json` file or a directory holding one;
3. an HF id found in the local Hugging Face hub cache (never the network): the snapshot `refs/main` (or
   `--revision`) names, in the directory huggingface_hub uses (HF_HUB_CACHE / HF_HOME / XDG_CACHE_HOME).
Anything else is an `UnknownModelError` that suggests close catalog names.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from graphsim.errors import ConfigError, UnknownModelError
from graphsim.validation import read_text


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hf_id: str
    file: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvedModel:
    """A model argument resolved to its config dict and where it came from."""

    name: str
    config: dict[str, Any]
    source: str  # "catalog", "path" or "hf-cache"
    location: str  # file the config was read from

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or []
        return archs[0] if archs else ""


def _catalog_dir():
    return resources.files("graphsim.catalog")


@lru_cache(maxsize=1)
def catalog() -> tuple[CatalogEntry, ...]:
    raw = json.loads((_catalog_dir() / "index.json").read_text())
    return tuple(
        CatalogEntry(e["name"], e["hf_id"], e["file"], tuple(e.get("aliases", ()))) for e in raw
    )


def catalog_config(entry: CatalogEntry) -> dict[str, Any]:
    return json.loads((_catalog_dir() / "configs" / entry.file).read_text())


def _find_entry(arg: str) -> CatalogEntry | None:
    key = arg.strip().lower()
    for e in catalog():
        if key in (e.name, e.hf_id.lower(), *(a.lower() for a in e.aliases)):
            return e
    return None


REVISION_ENV = "GRAPHSIM_HF_REVISION"  # set by --revision; resolve_model's default revision
TRUST_REMOTE_CODE_ENV = "GRAPHSIM_TRUST_REMOTE_CODE"  # set by --trust-remote-code (graphsim/importers/hf/remote_code.py)


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, as huggingface_hub resolves it (`huggingface_hub.constants.HF_HUB_CACHE`:
    HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, HF_HOME defaulting to
    $XDG_CACHE_HOME/huggingface, XDG_CACHE_HOME to ~/.cache). Without huggingface_hub the same rules, by hand."""
    try:
        from huggingface_hub import constants
    except ImportError:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~") / ".cache")
        hf_home = os.environ.get("HF_HOME") or str(Path(xdg) / "huggingface")
        default = str(Path(hf_home).expanduser() / "hub")
        return Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or default).expanduser()
    return Path(constants.HF_HUB_CACHE).expanduser()


def hf_cache_dirs() -> list[Path]:
    """Where downloaded models are looked for, read only (never fetched): the hub cache, then the legacy
    TRANSFORMERS_CACHE when it names another directory."""
    dirs = [hf_hub_cache()]
    legacy = os.environ.get("TRANSFORMERS_CACHE")
    if legacy and Path(legacy).expanduser() != dirs[0]:
        dirs.append(Path(legacy).expanduser())
    return dirs


def _cached_file(cache: Path, hf_id: str, revision: str) -> Path | None:
    """config.json of `hf_id` at `revision` (a branch or tag under refs/, or a commit hash) in one hub cache
    (huggingface_hub.try_to_load_from_cache; the same layout read by hand without it)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        repo = cache / ("models--" + hf_id.replace("/", "--"))
        ref = repo / "refs" / revision
        commit = ref.read_text().strip() if ref.is_file() else revision
        found = repo / "snapshots" / commit / "config.json"
        return found if found.is_file() else None
    try:
        found = try_to_load_from_cache(hf_id, "config.json", cache_dir=cache, revision=revision)
    except ValueError:  # an id huggingface_hub refuses (bad characters)
        return None
    return Path(found) if isinstance(found, str) else None


def cached_revisions(hf_id: str) -> list[str]:
    """The refs (`main`, tags) and snapshot commits cached for `hf_id`, for error messages."""
    out: list[str] = []
    for base in hf_cache_dirs():
        repo = base / ("models--" + hf_id.replace("/", "--"))
        if (repo / "refs").is_dir():
            out += sorted(f"{p.relative_to(repo / 'refs')} -> {p.read_text().strip()[:12]}"
                          for p in (repo / "refs").rglob("*") if p.is_file())
        if (repo / "snapshots").is_dir():
            out += sorted(p.name[:12] for p in (repo / "snapshots").iterdir() if p.is_dir())
    return out


def _find_in_hf_cache(hf_id: str, revision: str | None = None) -> Path | None:
    if hf_id.count("/") != 1:
        return None
    for base in hf_cache_dirs():
        found = _cached_file(base, hf_id, revision or "main")
        if found is not None:
            return found
    return None


def _no_constant(path: Path):
    """json's hook for NaN / Infinity / -Infinity. Infinity is a bound some real configs state
    (Nemotron-H's `time_step_limit: [0.0, Infinity]`, written by Python's json as transformers saves
    it) and is kept; NaN is no value a config may hold. A size field that is infinite is refused by
    `check_config_sizes`."""

    def convert(name: str) -> Any:
        if name == "Infinity":
            return math.inf
        if name == "-Infinity":
            return -math.inf
        raise ConfigError(f"malformed config {path}: it holds {name}, which is not a number a config may hold; fix the JSON")

    return convert


# Sizes a config may state, each bounded far above any published model (the largest in the
# bundled catalog, graphsim/catalog/configs: 94 layers, hidden 8,192, 512 experts, 262,144 positions): a value past the
# bound is a typo or a unit slip, and building or accounting it would run out of memory or time.
_SIZE_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000), "hidden_size": (1, 1_000_000), "intermediate_size": (1, 10_000_000),
    "moe_intermediate_size": (1, 10_000_000), "num_attention_heads": (1, 100_000), "num_key_value_heads": (1, 100_000),
    "head_dim": (1, 100_000), "vocab_size": (1, 100_000_000), "max_position_embeddings": (1, 1 << 40),
    "num_experts": (0, 1_000_000), "n_routed_experts": (0, 1_000_000), "num_local_experts": (0, 1_000_000),
}


def check_config_sizes(cfg: dict[str, Any], where: str) -> None:
    """ConfigError naming every size field that is not a whole number within its bound."""
    problems = []
    for key, (low, high) in _SIZE_BOUNDS.items():
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue  # absent, null or of another kind: the architecture's own reader decides
        if not math.isfinite(v) or v != int(v) or not low <= v <= high:
            problems.append(f"{key} = {v!r} (must be a whole number in [{low:,}, {high:,}])")
    problems += _shape_problems(cfg)
    if problems:
        raise ConfigError(f"implausible config {where}: {'; '.join(problems)}; fix the config")


def _shape_problems(cfg: dict[str, Any]) -> list[str]:
    """Fields whose kind or relation no model can have: model_type not a string, architectures not a list of
    class names, text_config or rope_scaling not an object, and query heads that KV heads do not divide (each KV head serves a
    whole group of query heads: transformers' `repeat_kv`, vLLM's `num_queries_per_kv`)."""
    out = []
    if "model_type" in cfg and not isinstance(cfg["model_type"], str):
        out.append(f"model_type = {cfg['model_type']!r} (must be a string, e.g. \"llama\")")
    arch = cfg.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        out.append(f"architectures = {arch!r} (must be a list of class names, e.g. [\"LlamaForCausalLM\"])")
    inner = cfg.get("text_config")
    if inner is not None and not isinstance(inner, dict):
        out.append(f"text_config = {inner!r} (must be an object: the text model's config, or null)")
    rope = cfg.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        out.append(f"rope_scaling = {rope!r} (must be an object, e.g. {{\"rope_type\": \"linear\", \"factor\": 2.0}}, "
                   "or null)")
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if (isinstance(heads, int) and isinstance(kv, int) and not isinstance(kv, bool) and heads > 0 and kv > 0
            and heads % kv):
        out.append(f"num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv}")
    topk = cfg.get("num_experts_per_tok")
    experts = next(((k, cfg[k]) for k in _EXPERT_COUNTS if _whole(cfg.get(k)) and cfg[k] > 0), None)
    if experts is not None and _whole(topk) and topk > experts[1]:  # a token's experts are distinct ones of them
        out.append(f"num_experts_per_tok = {topk} exceeds {experts[0]} = {experts[1]} (a token is routed to that many "
                   "distinct experts)")
    return out


_EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts")


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def load_config_file(path: Path) -> dict[str, Any]:
    try:
        text = read_text(path, "config", "pass a model's config.json or its directory")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    try:
        cfg = json.loads(text, parse_constant=_no_constant(path))
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"malformed config {path}: {e.msg} at line {e.lineno} column {e.colno}; fix the JSON"
        ) from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise ConfigError(f"malformed config {path}: its JSON nests too deeply to read; fix the JSON") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"malformed config {path}: top level is not a JSON object")
    check_config_sizes(cfg, str(path))
    return cfg


def hf_quant_config_beside(cfg_path: Path) -> Path | None:
    """NVIDIA ModelOpt's quantization file next to a config: `hf_quant_config.json` in the model
    directory, or `<stem>_hf_quant_config.json` beside a `<stem>_config.json` (aiconfigurator-core's
    model_configs layout)."""
    names = ["hf_quant_config.json"] if cfg_path.name == "config.json" else []
    if cfg_path.name.endswith("_config.json"):
        names.append(cfg_path.name.removesuffix("_config.json") + "_hf_quant_config.json")
    return next((cfg_path.parent / n for n in names if (cfg_path.parent / n).is_file()), None)


def load_model_config(cfg_path: Path) -> dict[str, Any]:
    """A config file, with a hf_quant_config.json beside it as its quantization_config when it states none."""
    cfg = load_config_file(cfg_path)
    quant_path = hf_quant_config_beside(cfg_path)
    if quant_path is None or cfg.get("quantization_config") is not None:
        return cfg
    from graphsim.quantization import merge_hf_quant_config

    return merge_hf_quant_config(cfg, load_config_file(quant_path))


def resolve_model(arg: str, revision: str | None = None) -> ResolvedModel:
    """Resolve a model argument (catalog name, HF id, config path, model dir) to its config.

    `revision` (default: $GRAPHSIM_HF_REVISION, which `--revision` sets): the branch, tag or commit of an HF id
    to read from the local hub cache (`main` when none is given); with one, a catalog name or id is looked up
    in the hub cache under its HF id instead of the bundled config."""
    revision = revision or os.environ.get(REVISION_ENV) or None
    entry = _find_entry(arg)
    if entry is not None and revision is not None:
        return _from_hf_cache(entry.hf_id, revision)
    if entry is not None:
        location = str(_catalog_dir() / "configs" / entry.file)
        return ResolvedModel(entry.name, catalog_config(entry), "catalog", location)
    path = Path(arg).expanduser()
    if len(os.fsencode(arg)) > 4096 or any(len(part) > 255 for part in map(os.fsencode, path.parts)):
        raise UnknownModelError(f"model argument '{arg[:40]}…' ({len(arg):,} characters) is too long to be a file name "
                                "(255 bytes a name); pass a catalog name, HF id, config.json or model directory")
    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise ConfigError(f"directory {path} has no config.json; pass a model directory or a config file")
        return ResolvedModel(path.resolve().name, load_model_config(cfg_path), "path", str(cfg_path))
    if path.is_file() and path.suffix.lower() == ".onnx":  # import, passes, predict and align take one; this does not
        raise ConfigError(f"{path} is an ONNX file, not a model config; this command reads a model's config.json or "
                          "its directory (graphsim import, passes, predict and align take ONNX files)")
    if path.is_file():
        name = path.resolve().parent.name if path.name == "config.json" else path.stem
        return ResolvedModel(name, load_model_config(path), "path", str(path))
    if arg.strip().count("/") == 1 and (revision is not None or cached_revisions(arg.strip())):
        return _from_hf_cache(arg.strip(), revision)
    raise UnknownModelError(_unknown_message(arg))


def _from_hf_cache(hf_id: str, revision: str | None) -> ResolvedModel:
    cached = _find_in_hf_cache(hf_id, revision)
    if cached is not None:
        return ResolvedModel(hf_id, load_model_config(cached), "hf-cache", str(cached))
    have = cached_revisions(hf_id)
    where = ", ".join(str(d) for d in hf_cache_dirs())
    held = f"it holds {', '.join(have)}" if have else "it holds no snapshot of it"
    raise UnknownModelError(
        f"{hf_id} at revision {revision or 'main'} is not in the local Hugging Face cache ({where}; {held}); "
        "graphsim never downloads: fetch it with `huggingface-cli download " + hf_id + " config.json"
        + (f" --revision {revision}" if revision else "") + "`, or pass --revision with a cached one")


def _unknown_message(arg: str) -> str:
    names = [e.name for e in catalog()] + [e.hf_id for e in catalog()]
    close = difflib.get_close_matches(arg.lower(), [n.lower() for n in names], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; run `graphsim models` for the catalog"
    return (
        f"unknown model '{arg}': not a catalog name, not a config.json or model directory, "
        f"and not in the local Hugging Face cache (graphsim never downloads){hint}"
    )

"""Write `graphsim/work/config_defaults.json` from the installed transformers' config classes.

Run `python -m graphsim.importers.hf.config_defaults` after changing the pinned transformers (the
table holds every causal-LM class it ships; `--coverage` prints how many of them the
accountant registers); `tests/work/test_work_config_defaults.py` fails until the table is
current. (The accountant reads the table and never imports transformers.)
"""

from __future__ import annotations

import inspect
import json
import sys
from importlib import resources
from typing import Any

from graphsim.atomic import publish
from graphsim.work.config_defaults import TABLE


def _literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_literal(v) for v in value)
    return False


def defaults_from_transformers(architecture: str) -> tuple[str, dict[str, Any]]:
    """(config class name, its JSON-literal keyword defaults) from the installed transformers."""
    import transformers

    model_class = getattr(transformers, architecture)
    config_class = model_class.config_class
    out: dict[str, Any] = {}
    for name, param in inspect.signature(config_class.__init__).parameters.items():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY or param.default is inspect.Parameter.empty:
            continue
        if _literal(param.default):
            default = param.default
            out[name] = list(default) if isinstance(default, tuple) else default
    return config_class.__name__, out


def write_table(architectures: list[str]) -> dict[str, Any]:
    import transformers

    table: dict[str, Any] = {
        "source": f"transformers {transformers.__version__}: keyword defaults of each config class's __init__",
        "architectures": {},
    }
    for arch in sorted(architectures):
        name, defaults = defaults_from_transformers(arch)
        aliases = dict(getattr(getattr(transformers, arch).config_class, "attribute_map", {}) or {})
        table["architectures"][arch] = {"config_class": name, "defaults": defaults, "aliases": aliases}
    # model_type → causal-LM class, for the text_config of multimodal wrappers (one class per model
    # type; the registry uses an entry only when it registers the class).
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    table["text_models"] = {
        model_type: cls
        for model_type, cls in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items())
        if isinstance(cls, str) and cls in architectures
    }
    return table


def causal_lm_classes() -> list[str]:
    """Every class name transformers maps as a causal LM (its AutoModelForCausalLM table)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update([value] if isinstance(value, str) else value)
    return sorted(names)


def coverage() -> str:
    from graphsim.work.registry import supported_architectures

    every = causal_lm_classes()
    registered = set(supported_architectures())
    missing = [name for name in every if name not in registered]
    share = len(registered & set(every)) / len(every)
    return (
        f"work accountant: {len(registered & set(every))} of {len(every)} causal-LM classes of transformers "
        f"registered ({share:.0%}); not registered: {', '.join(missing)}"
    )


def main() -> None:
    from graphsim.work.registry import NO_TRANSFORMERS_CLASS, TRANSFORMERS_CLASS, supported_architectures

    if sys.argv[1:] == ["--coverage"]:
        print(coverage())
        return

    path = str(resources.files("graphsim.work").joinpath(TABLE))
    # Every causal-LM class transformers ships (so registering one needs no new table), plus any
    # registered class outside that mapping.
    # (a checkpoint's own spelling of a class, registry.TRANSFORMERS_CLASS, reads its class's entry)
    # (registry.NO_TRANSFORMERS_CLASS: remote-code-only classes, which have no config class to read)
    registered = set(supported_architectures()) - set(TRANSFORMERS_CLASS) - NO_TRANSFORMERS_CLASS
    table = write_table(sorted(set(causal_lm_classes()) | registered))
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    publish(path + ".tmp", path)
    print(f"wrote {path} ({len(table['architectures'])} architectures)", file=sys.stderr)


if __name__ == "__main__":
    main()

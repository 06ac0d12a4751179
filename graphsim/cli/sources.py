"""Turn a command's model argument into a Graph: a saved graph, an ONNX file, or an HF model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from graphsim.cli.app import err_console

if TYPE_CHECKING:  # graphsim.ir pulls in sympy: the CLI starts (and reports a usage error) without it
    from graphsim.ir import Graph


def load_source(arg: str, dtype: str | None = None) -> Graph:
    """`*.json` → a saved graph, except a model config (`config.json`, `<name>_config.json` as aiconfigurator-core
    names them, or any JSON without the graph format tag that names an architecture or model type); `*.onnx` → the
    ONNX importer; anything else → the HF importer."""
    is_config = Path(arg).name == "config.json" or arg.endswith("_config.json")
    if arg.endswith(".json") and _is_file(arg) and not is_config:
        from graphsim.errors import GraphsimError
        from graphsim.ir import load_graph

        try:
            return load_graph(arg)
        except GraphsimError:
            if not _is_model_config(Path(arg)):
                raise
            # a model config saved under another name (graphsim's catalog configs, `Llama-3.1-8B.json`): as kv and
            # simulate read it
    if arg.endswith(".onnx"):
        from graphsim.importers.onnx_importer import import_onnx

        return import_onnx(arg)
    from graphsim.importers.hf import import_hf

    with err_console.status(f"loading {arg} (traced on the meta device unless the graph cache holds it)…"):
        graph, _ = import_hf(arg, dtype=dtype)
    return graph


def _is_file(arg: str) -> bool:
    try:
        return Path(arg).is_file()
    except OSError:  # a name the OS refuses to look up (too long): the model resolver names the problem
        return False


def _is_model_config(path: Path) -> bool:
    """A JSON object with no graphsim format tag that names an architecture or model type: a model's config.json
    under another file name."""
    import json

    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(d, dict) and "format" not in d and ("architectures" in d or "model_type" in d)

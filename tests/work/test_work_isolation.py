"""The accountant imports without torch, transformers or the importers (DESIGN §3, §5 rule 9)."""

from __future__ import annotations

import ast
import pathlib

import graphsim.work

FORBIDDEN = ("torch", "transformers", "graphsim.importers", "graphsim.passes", "graphsim.costing")


def test_import_pulls_in_no_torch_and_no_importers(modules_loaded_by):
    code = (
        "import sys, json\n"
        "import graphsim.work, graphsim.work.api, graphsim.cli.work_cmd\n"
        "from graphsim.work import accounting, parse_step\n"
        "from graphsim.catalog import resolve_model\n"
        "accounting(resolve_model('deepseek-v3').config).step(parse_step(['128@0'], ['4x64']))\n"
    )
    loaded = modules_loaded_by(code)
    for name in FORBIDDEN:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), f"{name} was imported"


def test_sources_import_no_forbidden_module():
    root = pathlib.Path(graphsim.work.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("torch", "transformers", "importers"), f"{path.name}: {name}"
                assert not name.startswith(FORBIDDEN[2:]), f"{path.name}: {name}"

"""The accountant and its analyzer import without torch, transformers, the importers, passes or
costing (DESIGN §3, §5 rule 9); the CLI layer hands the analyzer plain data."""

from __future__ import annotations

import ast
import pathlib

import pytest

import graphsim.work

FORBIDDEN = ("torch", "transformers", "graphsim.importers", "graphsim.passes", "graphsim.costing")

ACCOUNTANT = (
    "import graphsim.work, graphsim.work.api, graphsim.cli.work_cmd\n"
    "from graphsim.work import accounting, parse_step\n"
    "from graphsim.catalog import resolve_model\n"
    "accounting(resolve_model('deepseek-v3').config).step(parse_step(['128@0'], ['4x64']))\n"
)
ANALYZER = (
    "import graphsim.work.analyzer as a\n"
    "from graphsim.catalog import resolve_model\n"
    "from graphsim.work import accounting\n"
    "from graphsim.workload import parse_batch_spec\n"
    "rows = a.necessary_rows(accounting(resolve_model('deepseek-v3').config), parse_batch_spec('decode:8x64'),"
    " ['full.dense'] * 3 + ['full.moe'] * 58)\n"
    "assert a.reconcile(rows.rows, rows.report).ok and len(a.shipped_maps()) >= 10\n"
)


@pytest.mark.parametrize("code", [ACCOUNTANT, ANALYZER], ids=["accountant", "analyzer"])
def test_runs_without_torch_importers_passes_or_costing(modules_loaded_by, code):
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

"""The analyzer in `graphsim.work` stays free of torch, the importers, passes and costing (DESIGN §3);
the CLI layer hands it plain data."""

from __future__ import annotations

FORBIDDEN = ("torch", "transformers", "graphsim.importers", "graphsim.passes", "graphsim.costing")


def test_analyzer_imports_without_torch_or_costing(modules_loaded_by):
    code = (
        "import sys, json\n"
        "import graphsim.work.analyzer as a\n"
        "from graphsim.catalog import resolve_model\n"
        "from graphsim.work import accounting\n"
        "from graphsim.workload import parse_batch_spec\n"
        "rows = a.necessary_rows(accounting(resolve_model('deepseek-v3').config), parse_batch_spec('decode:8x64'),"
        " ['full.dense'] * 3 + ['full.moe'] * 58)\n"
        "assert a.reconcile(rows.rows, rows.report).ok and len(a.shipped_maps()) >= 10\n"
    )
    loaded = modules_loaded_by(code)
    for name in FORBIDDEN:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), f"{name} was imported"

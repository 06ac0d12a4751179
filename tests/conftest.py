import copy

import pytest

from graphsim.catalog import catalog


@pytest.fixture(scope="session")
def catalog_names() -> list[str]:
    return [e.name for e in catalog()]


@pytest.fixture(scope="session")
def hf_import():
    """`hf_import(name)` → (graph, report) of the HF importer, traced once per test session.

    Callers get a copy of the graph, so a test that edits it cannot disturb another."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = import_hf(name)
        graph, report = cache[name]
        return copy.deepcopy(graph), report

    return get


@pytest.fixture(scope="session")
def modules_loaded_by():
    """`modules_loaded_by(code)` → the names in sys.modules after running `code` in a fresh Python."""
    import json
    import subprocess
    import sys

    def run(code: str) -> list[str]:
        code += "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run

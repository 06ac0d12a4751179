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

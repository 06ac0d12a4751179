import copy
import os
import shutil
import tempfile

import pytest

from graphsim.catalog import catalog

_HOME: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Every test (and the `graphsim` processes it starts) runs with its own empty GRAPHSIM_HOME, never the
    user's: no profile.db unless a test makes one, a graph cache of this session only, and no automatic
    profile build (a test that exercises it turns it back on)."""
    _HOME["old"] = os.environ.get("GRAPHSIM_HOME", "")
    _HOME["dir"] = tempfile.mkdtemp(prefix="graphsim-test-home-")
    os.environ["GRAPHSIM_HOME"] = _HOME["dir"]
    os.environ["GRAPHSIM_NO_AUTO_PROFILE"] = "1"
    os.environ.pop("GRAPHSIM_HF_REVISION", None)  # a revision of the user's would send catalog names to the HF cache


def pytest_unconfigure(config: pytest.Config) -> None:
    if _HOME.get("dir"):
        shutil.rmtree(_HOME["dir"], ignore_errors=True)
        if _HOME["old"]:
            os.environ["GRAPHSIM_HOME"] = _HOME["old"]
        else:
            os.environ.pop("GRAPHSIM_HOME", None)


@pytest.fixture(scope="session")
def catalog_names() -> list[str]:
    return [e.name for e in catalog()]


@pytest.fixture(scope="session")
def hf_import():
    """`hf_import(name)` → (graph, report) of the HF importer, traced once per test session (never read from
    the graph cache: these tests are about the trace).

    Callers get a copy of the graph, so a test that edits it cannot disturb another."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = import_hf(name, cache=False)
        graph, report = cache[name]
        return copy.deepcopy(graph), report

    return get


@pytest.fixture(scope="session")
def benchmark_script():
    """`benchmark_script(name)` → the module `benchmarks/<name>.py`, loaded once (the benchmarks are scripts,
    not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return sys.modules[name]

    return load


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


@pytest.fixture(scope="session")
def h200_vllm_db_path(tmp_path_factory):
    """aiconfigurator-core's H200 vLLM tables imported into a profile.db once per session (~30 s); every user opens
    it read-only (`ProfileDB.open`, or `--profile` on the command line)."""
    pytest.importorskip("aiconfigurator_core")
    from graphsim.costing import aiconfigurator_import as aic

    path = tmp_path_factory.mktemp("aic") / "h200.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", path)
    return path


@pytest.fixture(scope="module")
def h200_db(h200_vllm_db_path):
    """The session's H200 vLLM profile.db, open read-only for one module."""
    from graphsim.costing.profile_db import ProfileDB

    with ProfileDB.open(h200_vllm_db_path) as db:
        yield db


@pytest.fixture(scope="session")
def aic_config():
    """`aic_config(name)`: the path of aiconfigurator-core's shipped `model_configs/<name>_config.json` (the real
    public configs the issue-16/20 tests use); the test is skipped where the package or the file is missing."""
    from pathlib import Path

    def path_of(name: str) -> Path:
        aic = pytest.importorskip("aiconfigurator_core")
        path = Path(aic.__file__).parent / "model_configs" / f"{name}_config.json"
        if not path.is_file():
            pytest.skip(f"{path.name} not shipped by this aiconfigurator-core")
        return path

    return path_of

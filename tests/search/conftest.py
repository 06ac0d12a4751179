import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # search_helpers
sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))  # serving_helpers (AffineCost, small setups)


@pytest.fixture(scope="session")
def roofline_home(tmp_path_factory):
    """An empty GRAPHSIM_HOME for the session: no profile.db, every time a roofline estimate (deterministic)."""
    old = os.environ.get("GRAPHSIM_HOME")
    os.environ["GRAPHSIM_HOME"] = str(tmp_path_factory.mktemp("home"))
    yield os.environ["GRAPHSIM_HOME"]
    if old is None:
        os.environ.pop("GRAPHSIM_HOME", None)
    else:
        os.environ["GRAPHSIM_HOME"] = old


@pytest.fixture(scope="session")
def small_search(roofline_home, hf_import):
    """(spec, context) of a small search: Llama-3.1-8B on 4 H100s, traced once per session."""
    from search_helpers import small_spec

    from graphsim.catalog import resolve_model
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.search_eval import make_context
    from graphsim.serving.search_space import enumerate_candidates

    spec = small_spec()
    model, hw = resolve_model(spec.base.model), load_hardware(spec.base.hardware)
    cands, _ = enumerate_candidates(spec, model, hw)
    return spec, make_context(spec, model, hw, cands, graph=hf_import(spec.base.model)[0])


@pytest.fixture(scope="session")
def small_result(small_search):
    from graphsim.serving.search import run_search

    spec, ctx = small_search
    return run_search(spec, context=ctx)

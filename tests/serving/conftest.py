import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # serving_helpers


@pytest.fixture(scope="session")
def llama_tree():
    """Llama-3.1-8B fused for vLLM, compiled, priced on the H100 roofline (traced once per session)."""
    pytest.importorskip("torch")
    from graphsim.costing.cost_tree import build_tree, compile_tree
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.interpolate import KernelPricer
    from graphsim.costing.kernel_map import Dtypes
    from graphsim.importers.hf import import_hf
    from graphsim.passes import run_pipeline

    graph = run_pipeline(import_hf("llama-3.1-8b")[0], "fold,fuse{target=vllm}").graph
    hw = load_hardware("h100")
    return compile_tree(build_tree(graph)), KernelPricer(None, hw), Dtypes.for_graph(graph.meta)

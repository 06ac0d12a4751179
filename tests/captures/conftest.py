"""Shared fixtures: a tiny Llama config, its fused graphs, and a CPU torch.profiler trace of its real forward."""

import pytest
from capture_helpers import tiny_llama_config

from graphsim.catalog import ResolvedModel


@pytest.fixture(scope="session")
def tiny_cfg() -> dict:
    return tiny_llama_config()


@pytest.fixture(scope="session")
def tiny_graph(tiny_cfg):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    graph, _ = import_hf(ResolvedModel("tiny-llama", tiny_cfg, "path", "tests/captures"), dtype="float32")
    return graph


@pytest.fixture(scope="session")
def eager_graph(tiny_graph):
    from graphsim.passes import run_pipeline

    return run_pipeline(tiny_graph, "fold,fuse{target=eager}").graph


@pytest.fixture(scope="session")
def vllm_graph(tiny_graph):
    from graphsim.passes import run_pipeline

    return run_pipeline(tiny_graph, "fold,fuse{target=vllm}").graph


@pytest.fixture(scope="session")
def cpu_trace(tiny_cfg, tmp_path_factory):
    """A Chrome trace of two real forwards of the tiny Llama on CPU, each in a `prefill:1x8` range."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch.profiler import ProfilerActivity, profile, record_function

    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    model = model_class(tiny_cfg["architectures"][0])._from_config(make_hf_config(tiny_cfg), dtype=torch.float32,
                                                                      attn_implementation="sdpa").eval()
    ids = torch.randint(0, 97, (1, 8))
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(2):
                with record_function("prefill:1x8"):
                    model(input_ids=ids, use_cache=False)
    path = tmp_path_factory.mktemp("traces") / "tiny_cpu.json"
    prof.export_chrome_trace(str(path))
    return path

"""`build_cost_model`: the one recipe model → passes → compiled tree + pricer + dtypes (DESIGN §4)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.errors import GraphsimError
from graphsim.workload import parse_batch_spec

STEPS = [parse_batch_spec(s) for s in ("prefill:1x2048", "decode:64x2048", "mixed:1x512@1024+8x4096")]
FORBIDDEN = ("torch", "transformers", "graphsim.importers", "graphsim.passes")


@pytest.fixture(autouse=True)
def _no_default_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # no default profile.db: roofline only


def test_cost_model_modules_import_without_torch_importers_or_passes(modules_loaded_by):
    loaded = modules_loaded_by("import graphsim.costing.cost_model, graphsim.cost_model, graphsim.costing.predict\n")
    for name in FORBIDDEN:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), f"{name} was imported"


def _old_recipe(graph, pipeline, hardware, kv_dtype=None):
    """What every call site wrote out before the CostModel."""
    from graphsim.costing.cost_tree import build_tree, compile_tree
    from graphsim.costing.interpolate import KernelPricer
    from graphsim.costing.kernel_map import Dtypes
    from graphsim.passes import run_pipeline

    fused = run_pipeline(graph, pipeline).graph
    tree = compile_tree(build_tree(fused))
    return tree.evaluate(STEPS, KernelPricer(None, hardware), Dtypes.for_graph(fused.meta, kv_dtype)).total_us()


def test_model_to_cost_model_matches_the_recipe_it_replaces(hf_import):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.hardware import load_hardware

    graph, _ = hf_import("llama-3.1-8b")
    cm = build_cost_model(graph, "h200", tp=2, kv_dtype="fp8")
    h200 = load_hardware("h200")
    assert cm.pipeline == "fold,fuse{target=vllm},tp{size=2},inductor"  # vLLM's default compiled mode
    assert (cm.tp, cm.ep, cm.target, cm.kv_dtype, cm.hardware) == (2, 1, "vllm", "fp8", h200)
    assert cm.profile is None and cm.db is None and "roofline estimate" in cm.data_note
    assert cm.kernels == len(cm.tree.leaves) > 0
    expected = _old_recipe(graph, "fold,fuse{target=vllm},tp{size=2},inductor", h200, "fp8")
    np.testing.assert_array_equal(cm.evaluate(STEPS).total_us(), expected)


def test_a_fused_graph_gets_only_the_partition_passes_it_lacks(hf_import):
    from graphsim.cost_model import build_cost_model

    graph, _ = hf_import("qwen3-30b-a3b")
    fused = build_cost_model(graph, "h200", compiled=False)  # fold, fuse; not partitioned, not compiled
    assert fused.pipeline == "fold,fuse{target=vllm}" and (fused.tp, fused.ep) == (1, 1)
    split = build_cost_model(fused.graph, "h200", tp=2, ep=2)  # what search does per candidate
    assert split.pipeline == "tp{size=2},ep{size=2},inductor" and (split.tp, split.ep) == (2, 2)
    direct = build_cost_model(graph, "h200", tp=2, ep=2)
    np.testing.assert_array_equal(split.evaluate(STEPS).total_us(), direct.evaluate(STEPS).total_us())
    again = build_cost_model(split.graph, "h200")  # sizes of 1: the graph's own partition is kept
    assert again.pipeline == "" and (again.tp, again.ep) == (2, 2)
    with pytest.raises(GraphsimError, match="already partitioned with tp=2"):
        build_cost_model(split.graph, "h200", tp=4)
    # a compiled graph's merged kernels have no per-rank split: partitioning one is refused
    with pytest.raises(GraphsimError, match="compiled-mode kernels"):
        build_cost_model(build_cost_model(graph, "h200").graph, "h200", tp=2)


def test_explicit_pipeline_runs_verbatim(hf_import):
    from graphsim.cost_model import build_cost_model

    graph, _ = hf_import("llama-3.1-8b")
    cm = build_cost_model(graph, None, target="eager", pipeline="fold,fuse{target=eager},tp{size=1}")
    assert cm.pipeline == "fold,fuse{target=eager},tp{size=1}" and cm.target == "eager"
    assert cm.hardware is None and "missing" in cm.data_note


def test_bad_hardware_or_sizes_fail_before_the_model_is_loaded():
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.errors import HardwareSpecError

    def never():
        raise AssertionError("the model was loaded")

    with pytest.raises(HardwareSpecError):
        build_cost_model(never, "h900")
    with pytest.raises(GraphsimError, match="must be >= 1"):
        build_cost_model(never, "h200", tp=0)


def test_profile_data_names_what_the_numbers_rest_on(tmp_path):
    from graphsim.cost_model import profile_data
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    h200 = load_hardware("h200")
    assert profile_data(h200, None) == (None, profile_data(h200, None)[1])
    assert "no measured data for h200_sxm" in profile_data(h200, None)[1]
    assert profile_data(None, None) == (None, "no profile.db and no hardware spec: every time is missing")
    ProfileDB.create(tmp_path / "p.db", ProfileMeta(device="test gpu", engine="vllm")).close()
    db, note = profile_data(h200, str(tmp_path / "p.db"))
    assert db is not None and note == (f"measured rows from {tmp_path / 'p.db'} (test gpu); kernels without rows: "
                                       "roofline (too few bandwidth-bound rows in the profile for a derived price)")
    same, _ = profile_data(None, db)
    assert same is db


def test_a_hardware_spec_from_a_json_file_plans_a_deployment_and_a_cost_model(tmp_path, hf_import):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.hardware import HardwareSpec, load_hardware, save_hardware
    from graphsim.serving.config import DeploymentConfig, ParallelConfig
    from graphsim.serving.deployment import plan_deployment

    data = load_hardware("h100").to_json()
    data.update(id="lab_gpu", name="Lab GPU", aliases=[])
    path = save_hardware(HardwareSpec.from_json(data), tmp_path / "lab_gpu.json")
    hw = load_hardware(str(path))
    path.unlink()  # from here on the object is carried, never reloaded by its id or path
    config = DeploymentConfig(model="llama-3.1-8b", hardware=str(path), parallel=ParallelConfig(tensor_parallel_size=2))
    dep = plan_deployment(config, hardware=hw)
    assert dep.hardware is hw
    graph, _ = hf_import("llama-3.1-8b")
    cm = build_cost_model(graph, hw, tp=dep.tp)
    assert cm.hardware is hw and cm.pricer.hardware is hw

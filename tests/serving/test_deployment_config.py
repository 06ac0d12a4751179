"""Typed deployment configs (DeploymentConfig / ParallelConfig / EngineArgs / MemoryOverrides, SearchSpec):
every bad field named at once in one line, a JSON round trip, and plan_deployment, the simulator and the
search taking them. Expected values are derived by hand from vLLM's defaults and the fields given."""

from __future__ import annotations

import json
import math

import pytest
from serving_helpers import AffineCost

from graphsim.catalog import resolve_model
from graphsim.costing.hardware import load_hardware
from graphsim.serving import (
    ClosedLoop, DeploymentConfig, DeploymentConfigError, EngineArgs, Lengths, MemoryOverrides, ParallelConfig, simulate,
    summarize,
)
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.engine_config import EngineConfigError
from graphsim.serving.search_space import SearchSpec, SearchSpecError, enumerate_candidates

GiB = 1 << 30


def llama(**fields) -> DeploymentConfig:
    return DeploymentConfig.parse({"model": "llama-3.1-8b", "hardware": "h100", **fields})


# --- validation ---------------------------------------------------------------------------------------


def test_every_bad_field_is_named_at_once_on_one_line():
    bad = {"model": "", "hardware": "h100", "tp": 2, "kv_cache_dtype": "fp7",
           "parallel": {"tensor_parallel_size": 0, "data_parallel_size": 2},
           "engine": {"gpu_memory_utilization": 1.5, "max_num_seqs": 0, "block_size": "16x",
                      "kv_cache_memory_bytes": 0},
           "memory": {"activation_gib": math.nan, "overhead_gib": -1}}
    with pytest.raises(DeploymentConfigError) as e:
        DeploymentConfig.parse(bad)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("deployment config: ")
    for fragment in (
        "model: string should have at least 1 character (got '')",
        "kv_cache_dtype: unknown kv_cache_dtype 'fp7'",
        "parallel.tensor_parallel_size: input should be greater than or equal to 1 (got 0)",
        "engine.gpu_memory_utilization: input should be less than or equal to 1 (got 1.5)",
        "engine.max_num_seqs: input should be greater than or equal to 1 (got 0)",
        "engine.block_size: input should be a valid integer",
        "engine.kv_cache_memory_bytes: input should be greater than 0 (got 0)",
        "memory.activation_gib: input should be a finite number (got nan)",
        "memory.overhead_gib: input should be greater than or equal to 0 (got -1)",
        "tp: unknown field",
    ):
        assert fragment in msg, (fragment, msg)
    assert "data_parallel_size" not in msg  # 2 is fine
    assert msg.count(": ") >= 10


@pytest.mark.parametrize(("util", "ok"), [(1.0, True), (0.01, True), (0.0, False), (-0.5, False), (math.inf, False),
                                          (1.0000001, False)])
def test_gpu_memory_utilization_is_a_fraction_in_0_1(util, ok):
    if ok:
        assert llama(engine={"gpu_memory_utilization": util}).engine.gpu_memory_utilization == util
    else:
        with pytest.raises(DeploymentConfigError, match=r"engine\.gpu_memory_utilization"):
            llama(engine={"gpu_memory_utilization": util})


def test_missing_model_and_hardware_are_named():
    with pytest.raises(DeploymentConfigError, match=r"model: field required; hardware: field required"):
        DeploymentConfig.parse({})
    with pytest.raises(DeploymentConfigError, match=r"\(document\): input should be a valid dictionary"):
        DeploymentConfig.parse([1, 2])


def test_direct_construction_is_checked_too():
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        ParallelConfig(tensor_parallel_size=0)
    with pytest.raises(ValueError, match="max_model_len"):
        EngineArgs(max_model_len=-1)


def test_contradicting_settings_are_caught_when_resolved():
    # without chunked prefill a whole prompt must fit one batch: 4096 < 8192 is refused, as vLLM does
    cfg = llama(engine={"enable_chunked_prefill": False, "max_num_batched_tokens": 4096, "max_model_len": 8192})
    with pytest.raises(EngineConfigError, match=r"max_num_batched_tokens \(4096\) must be >= max_model_len \(8192\)"):
        plan_deployment(cfg)


# --- round trip ---------------------------------------------------------------------------------------


def test_json_round_trip():
    cfg = DeploymentConfig(model="qwen3-30b-a3b", hardware="h200", dtype="bf16", kv_cache_dtype="fp8",
                           parallel=ParallelConfig(tensor_parallel_size=2, data_parallel_size=3),
                           engine=EngineArgs(max_num_seqs=64, max_model_len=8192, block_size=32,
                                             enable_prefix_caching=False, gpu_memory_utilization=0.85,
                                             kv_cache_memory_bytes=20 * GiB),
                           memory=MemoryOverrides(activation_gib=1.5))
    text = json.dumps(cfg.to_json())
    again = DeploymentConfig.parse(json.loads(text))
    assert again == cfg and again.to_json() == cfg.to_json()
    assert cfg.parallel.world_size == 6
    # vLLM's `auto` is the model dtype (None), and stays so through a round trip
    auto = llama(kv_cache_dtype="auto", dtype="auto")
    assert auto.kv_cache_dtype is None and auto.dtype is None
    assert DeploymentConfig.parse(auto.to_json()) == auto


def test_derive_changes_and_checks_again():
    cfg = llama(kv_cache_dtype="fp8", engine={"max_model_len": 8192})
    d = cfg.derive(tensor_parallel_size=2, max_num_seqs=32)
    assert (d.parallel.tensor_parallel_size, d.engine.max_num_seqs, d.engine.max_model_len, d.kv_cache_dtype) == \
        (2, 32, 8192, "fp8")
    assert cfg.parallel.tensor_parallel_size == 1  # the original is unchanged (frozen)
    with pytest.raises(DeploymentConfigError, match=r"engine\.max_num_seqs"):
        cfg.derive(max_num_seqs=0)
    with pytest.raises(DeploymentConfigError, match=r"engine\.max_num_sqes: unknown field"):
        cfg.derive(max_num_sqes=4)


# --- plan_deployment / simulator / search take the configs ----------------------------------------------


def test_plan_deployment_takes_a_config_and_fills_in_vllm_defaults():
    dep = plan_deployment(llama(parallel={"tensor_parallel_size": 2}, engine={"max_model_len": 8192}))
    # H100 (80 GiB, not an A100): vllm serve's 8192 batched tokens and 1024 sequences
    assert (dep.engine.max_num_batched_tokens, dep.engine.max_num_seqs, dep.engine.max_model_len) == (8192, 1024, 8192)
    assert dep.tp == 2 and dep.layout.block_size == 16 and dep.kv_dtype is None
    assert dep.config.engine.max_num_seqs is None  # the config keeps what the user gave
    # KV memory given in bytes per rank replaces the budget; 32 layers × 8 KV heads / 2 ranks × 128 × 2 (K, V)
    # × 2 B = 64 KiB per token per rank, 16-token blocks of 1 MiB
    given = plan_deployment(llama(parallel={"tensor_parallel_size": 2}, engine={"kv_cache_memory_bytes": 10 * GiB}))
    assert given.budget.available_bytes == 10 * GiB and given.capacity.num_blocks == 10 * 1024
    # resolved objects are used as given (a search resolves the model once)
    model, hw = resolve_model("llama-3.1-8b"), load_hardware("h100")
    again = plan_deployment(llama(parallel={"tensor_parallel_size": 2}, engine={"max_model_len": 8192}),
                            model=model, hardware=hw)
    assert again.model is model and again.hardware is hw and again.capacity == dep.capacity


def test_memory_overrides_reach_the_budget():
    dep = plan_deployment(llama(memory={"activation_gib": 2.0, "overhead_gib": 1.0, "cudagraph_gib": 0.25}))
    terms = {t.name: t for t in dep.budget.terms}
    assert terms["activation peak"].bytes == 2 * GiB and terms["activation peak"].origin == "given"
    assert sum(t.bytes for t in dep.budget.terms if t.origin == "given") == int(3.25 * GiB)


def test_simulator_setup_takes_the_parallel_config():
    cfg = llama(parallel={"tensor_parallel_size": 1, "data_parallel_size": 2}, engine={"max_model_len": 8192})
    dep = plan_deployment(cfg)
    setup = dep.simulation_setup(AffineCost(), router="least-outstanding")
    assert setup.parallel == cfg.parallel and (setup.replicas, setup.tp, setup.gpus) == (2, 1, 2)
    assert dep.simulation_setup(AffineCost(), replicas=3).parallel == ParallelConfig(data_parallel_size=3)
    res = simulate(setup, ClosedLoop(8, 40, Lengths(512, 512), Lengths(16, 16)))
    s = summarize(res)
    assert s.completed == 40 and s.gpus == 2
    assert {r["replica"] for r in res.per_replica} == {0, 1}


def test_search_spec_takes_a_base_config_and_checks_its_ranges():
    spec = SearchSpec(base=llama(kv_cache_dtype="fp8", engine={"max_model_len": 8192}), gpus=2, modes=("agg",),
                      max_num_seqs=(16,), max_num_batched_tokens=(4096,))
    assert (spec.base.model, spec.base.hardware) == ("llama-3.1-8b", "h100")
    cands, _ = enumerate_candidates(spec, resolve_model(spec.base.model), load_hardware(spec.base.hardware))
    assert {c.pools[0].tp for c in cands} == {1, 2}
    for c in cands:  # each candidate is planned from the base with the search's own axes
        (pool,), (mem,) = c.pools, c.memory
        dep = plan_deployment(spec.base.derive(tensor_parallel_size=pool.tp, max_num_seqs=16, max_num_batched_tokens=4096))
        assert dep.kv_dtype == "fp8" and dep.engine.max_model_len == 8192
        assert mem.num_blocks == dep.capacity.num_blocks
    with pytest.raises(SearchSpecError) as e:
        SearchSpec.parse({"base": {"model": "llama-3.1-8b", "hardware": "h100", "engine": {"gpu_memory_utilization": 2}},
                          "gpus": 0, "modes": ("both",), "max_num_seqs": (), "tp": (1, 0), "kv_link_gbps": -1,
                          "verify": -1})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("search spec: ")
    for fragment in ("base.engine.gpu_memory_utilization: input should be less than or equal to 1 (got 2)",
                     "gpus: input should be greater than or equal to 1 (got 0)",
                     "modes.0: input should be 'agg', 'disagg', 'afd' or 'dp' (got 'both')",
                     "max_num_seqs: tuple should have at least 1 item",
                     "tp.1: input should be greater than or equal to 1 (got 0)",
                     "kv_link_gbps: input should be greater than 0 (got -1)",
                     "verify: input should be greater than or equal to 0 (got -1)"):
        assert fragment in msg, (fragment, msg)

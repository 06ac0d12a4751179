"""Steps above vLLM's CUDA-graph capture bound pay their kernels' host dispatch (graphsim/serving/eager.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
from serving_helpers import AffineCost, llama_layout

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.kernels import CollectiveKey, CollectiveOp, Measurement, MessagePoint
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.ir.geometry import AttentionGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, simulate
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.deployment import plan_deployment
from graphsim.serving.eager import EagerDispatch, eager_dispatch, eager_dispatch_us
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.host import EngineHost, HostModel
from graphsim.serving.pricing import IterationCost
from graphsim.serving.requests import RequestSpec

AR = CollectiveOp.ALL_REDUCE
EAGER = EagerDispatch(max_graph_tokens=512, launches=300, dispatch_us=20.0, source="test")


def test_dispatch_only_above_the_capture_bound():
    # 300 launches × 20 µs = 6,000 µs for a step of 513 tokens or more; a step of 512 replays its CUDA graph: 0
    assert EAGER.cpu_us(512) == 0.0
    assert EAGER.cpu_us(513) == pytest.approx(6000.0)
    assert EAGER.cpu_us(np.asarray([1, 512, 513, 8192])) == pytest.approx([0.0, 0.0, 6000.0, 6000.0])
    assert EagerDispatch(0, 10, 5.0, "enforce eager").cpu_us(1) == pytest.approx(50.0)  # bound 0: every step


@pytest.mark.parametrize(("overlap", "gpu_us", "tokens", "want_us"), [
    (True, 2000.0, 600, 6100.0),  # async: host 100 + dispatch 6,000 outlasts the 2,000 µs of kernels
    (True, 9000.0, 600, 9000.0),  # async: the kernels outlast both
    (True, 2000.0, 500, 2000.0),  # inside the bound: the graph replays, host 100 hidden
    (False, 2000.0, 600, 6100.0),  # sync: max(2,000, 6,000) + host 100
    (False, 9000.0, 600, 9100.0),  # sync: 9,000 + 100
    (False, 2000.0, 500, 2100.0)])  # sync inside the bound: 2,000 + 100
def test_dispatch_with_and_without_async_scheduling(overlap, gpu_us, tokens, want_us):
    # host 100 µs a step, no per-sequence term, no sampling (vocab 0)
    host = EngineHost(HostModel("t", 100.0, 0.0, 0.0, 0.0, overlap), vocab=0, bandwidth_bytes_per_s=2e12, eager=EAGER)
    assert host.iteration_us(gpu_us, tokens, 4) == pytest.approx(want_us)
    arr = host.iteration_us(np.asarray([gpu_us, gpu_us]), tokens, 4)  # a decode run prices arrays
    assert arr == pytest.approx([want_us, want_us])


def test_a_long_prompt_step_is_dispatch_bound_in_the_simulator():
    # one 600-token prompt, 3 outputs, 1 ms of kernels an iteration, async host of 0: the prompt's step (600 > 512
    # tokens) takes max(1,000, 6,000) = 6 ms; the two decodes (1 token) 1 ms each → first token 6 ms, last 8 ms;
    # host_s logs the 5 ms the dispatch added beyond the kernels
    cfg = EngineConfig(8192, 64, 8192, enable_prefix_caching=False)
    host = EngineHost(HostModel("t", 0.0, 0.0, 0.0, 0.0, True), vocab=0, bandwidth_bytes_per_s=2e12, eager=EAGER)
    setup = SimulationSetup(cfg, llama_layout(), 2000, AffineCost(1000.0, 0.0, 0.0, 0.0), ParallelConfig(),
                            fast_forward=False, host=host)
    res = simulate(setup, [RequestSpec(0.0, 600, 3)])
    (r,) = res.requests
    assert (r.first_token_t * 1e3, r.finish_t * 1e3) == pytest.approx((6.0, 8.0))
    assert res.iterations["host_s"] * 1e3 == pytest.approx([5.0, 0.0, 0.0])


@pytest.fixture
def eager_db(tmp_path):
    rows = [(CollectiveKey(AR, 2, D.BF16, "vllm_custom_eager"), 256, 25.0),
            (CollectiveKey(AR, 2, D.BF16, "vllm_custom_eager"), 1 << 20, 30.0),
            (CollectiveKey(AR, 4, D.BF16, "vllm_custom_eager"), 512, 22.0),
            (CollectiveKey(AR, 2, D.BF16, "vllm_custom_graph"), 256, 4.0),  # graphed: not a dispatch
            (CollectiveKey(AR, 2, D.FP16, "nccl"), 256, 9.0)]
    path = tmp_path / "h100.db"
    with ProfileDB.create(path, ProfileMeta(device="NVIDIA H100", hardware="h100_sxm", engine="vllm")) as db:
        db.put_many([(k, MessagePoint(n), Measurement(t)) for k, n, t in rows])
    db = ProfileDB.open(path)
    yield db
    db.close()


def test_dispatch_is_the_profiles_smallest_eager_vllm_row(eager_db):
    found = eager_dispatch_us(eager_db)  # min(25, 30, 22) over the vllm_custom_eager rows; graph / nccl ignored
    assert found is not None
    t, why = found
    assert t == 22.0
    assert "512 B, 4 GPUs" in why
    # launches: the cost tree's leaves × their multiplicity, 1 + 28 + 28 = 57
    cost = SimpleNamespace(tree=SimpleNamespace(multiplicity=np.asarray([1.0, 28.0, 28.0])),
                           pricer=SimpleNamespace(db=eager_db))
    e = eager_dispatch(cost, 512)
    assert e is not None
    assert (e.max_graph_tokens, e.launches, e.dispatch_us) == (512, 57, 22.0)


def test_a_flash_attention_kernel_launches_its_kv_cache_write_too(eager_db):
    # leaves: a GEMM ×28, vLLM's FlashAttention ×28 (+28 reshape_and_cache_flash launches), an MLA attention ×2 (its
    # write is not counted apart), an embedding ×1: 28 + 2 × 28 + 2 + 1 = 87 launches
    def leaf(kind, name, geometry):
        return SimpleNamespace(attrs=SimpleNamespace(kind=kind, name=name, geometry=geometry))

    gqa = AttentionGeometry(num_heads=16, num_kv_heads=8, head_dim=128, v_head_dim=128, window=0, causal=True)
    mla = AttentionGeometry(num_heads=16, num_kv_heads=1, head_dim=192, v_head_dim=128, window=0, causal=True,
                            kv_lora_rank=512, qk_rope_head_dim=64)
    tree = SimpleNamespace(multiplicity=np.asarray([28.0, 28.0, 2.0, 1.0]),
                           leaves=[leaf(KernelKind.GEMM, "qkv_proj", None),
                                   leaf(KernelKind.ATTENTION, "flash_attn_varlen", gqa),
                                   leaf(KernelKind.ATTENTION, "mla_attention", mla),
                                   leaf(KernelKind.EMBEDDING, "embedding", None)])
    e = eager_dispatch(SimpleNamespace(tree=tree, pricer=SimpleNamespace(db=eager_db)), 512)
    assert e is not None and e.launches == 87


def test_no_eager_rows_no_floor(tmp_path):
    path = tmp_path / "empty.db"
    ProfileDB.create(path, ProfileMeta(device="test gpu", engine="vllm")).close()
    with ProfileDB.open(path) as db:
        assert eager_dispatch_us(db) is None
        assert eager_dispatch(SimpleNamespace(tree=SimpleNamespace(multiplicity=np.ones(3)),
                                              pricer=SimpleNamespace(db=db)), 512) is None
    assert eager_dispatch(AffineCost(1.0, 0.0, 0.0, 0.0), 512) is None  # a cost without a tree


@pytest.mark.parametrize(("engine", "has_floor"), [("vllm==0.19.0", True), ("vllm==0.10.1", True),
                                                   ("vllm==0.6.3", False)])
def test_v1_engines_get_the_floor_at_their_capture_bound(eager_db, engine, has_floor):
    # vLLM V1 replays graphs up to min(max_num_seqs × 2, 512, max_num_batched_tokens): 512 with H100's defaults;
    # V0 (0.6.3) captured decode batches only and its host model has its own constants: no floor
    dep = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100",
                                           engine=EngineArgs(engine=engine, max_model_len=8192)))
    cost = SimpleNamespace(tree=SimpleNamespace(multiplicity=np.ones(10)), pricer=SimpleNamespace(db=eager_db))
    eager = dep.engine_host(cast(IterationCost, cost)).eager
    assert (eager is not None) == has_floor
    if eager is not None:
        assert (eager.max_graph_tokens, eager.launches) == (512, 10)
    assert dep.engine_host().eager is None  # no cost given: not modelled

"""Collectives: vLLM's all-reduce choice, the rows that price it, and the interconnect topology.

Every expected value is derived by hand from vLLM's source (custom_all_reduce.py, symm_mem.py,
all_reduce_utils.py; see graphsim/costing/collectives.py) or from the bundled specs' figures."""

import numpy as np
import pytest

import graphsim.costing.hardware as hw_mod
from graphsim.costing.collectives import (
    AllReduceImpl, CollectiveContext, choose_all_reduce, plan_collective, plan_steps,
)
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.errors import HardwareSpecError
from graphsim.costing.hardware import InterconnectOverrides, LinkKind, Topology, load_hardware
from graphsim.costing.interpolate import SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows
from graphsim.costing.kernels import CollectiveKey, CollectiveOp, Measurement, MessagePoint
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.roofline import collective_roofline_us
from graphsim.costing.timing import TimeSource
from graphsim.ir.geometry import CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.serving.disagg import KvLink
from graphsim.workload import parse_batch_spec

MiB, KiB = 1 << 20, 1 << 10
NVSWITCH = Topology(LinkKind.NVSWITCH, 450e9, 5.0, 8, 50e9, 10.0)
AR = AllReduceImpl


def impl(nbytes, world, topo=NVSWITCH, cc="9.0", **kw):
    return choose_all_reduce(nbytes, world, topo, compute_capability=cc, **kw).impl


# sm 9.0 with symmetric memory: custom AR below min(CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"][w], 8 MiB) (strict <),
# then symmetric memory up to SYMM_MEM_ALL_REDUCE_MAX_SIZES["9.0"][w] (<=), then NCCL.
@pytest.mark.parametrize(("nbytes", "world", "want"), [
    (1 * MiB, 4, AR.CUSTOM),  # 1 MiB < min(32 MiB, 8 MiB)
    (8 * MiB - 16, 4, AR.CUSTOM),  # just below the 8 MiB limit, a multiple of 16
    (8 * MiB, 4, AR.SYMM_MEM),  # at the limit: `inp_size < max_size` fails; 8 MiB <= 32 MiB
    (32 * MiB, 4, AR.SYMM_MEM),  # symmetric memory's bound is inclusive
    (32 * MiB + 16, 4, AR.NCCL),  # above both
    (128 * KiB, 8, AR.CUSTOM),  # world 8: custom limit min(256 KiB, 8 MiB) = 256 KiB
    (256 * KiB, 8, AR.SYMM_MEM),  # at 256 KiB: symmetric memory (<= 64 MiB)
    (64 * MiB + 16, 8, AR.NCCL),
    (1 * MiB, 3, AR.NCCL),  # world 3: neither custom AR (2, 4, 6, 8) nor symmetric memory (2, 4, 6, 8)
    (1000, 4, AR.SYMM_MEM),  # 1000 % 16 = 8: no custom AR; 1000 % 4 = 0: symmetric memory
    (1 * MiB, 16, AR.NCCL),  # 16 GPUs over two 8-GPU nodes: both disabled across nodes
])
def test_choice_on_an_nvswitch_hopper_node(nbytes, world, want):
    assert impl(nbytes, world) is want


def test_choice_without_symmetric_memory_or_peer_access():
    # sm 8.0 (A100) is in neither size table: custom AR up to its 8 MiB default, NCCL above
    assert impl(8 * MiB - 16, 4, cc="8.0") is AR.CUSTOM
    assert impl(16 * MiB, 4, cc="8.0") is AR.NCCL
    # symmetric memory reduces bf16 only (SymmMemCommunicator.dtype)
    assert impl(16 * MiB, 4, dtype=D.FP16) is AR.NCCL
    # vLLM's --disable-custom-all-reduce: a 1 MiB message goes to symmetric memory instead
    assert impl(1 * MiB, 4, custom_all_reduce=False) is AR.SYMM_MEM
    p2p = Topology(LinkKind.PCIE_P2P, 32e9, 5.0, 8)
    assert impl(1 * MiB, 2, p2p) is AR.CUSTOM  # two PCIe GPUs with peer access: custom AR
    assert impl(1 * MiB, 4, p2p) is AR.NCCL  # "not supported on more than two PCIe-only GPUs"
    no_p2p = Topology(LinkKind.PCIE, 32e9, 5.0, 8)
    assert impl(1 * MiB, 2, no_p2p) is AR.NCCL  # no peer access: custom AR disabled
    # no multicast without NVSwitch: no symmetric memory on directly linked NVLink GPUs
    assert impl(16 * MiB, 4, Topology(LinkKind.NVLINK, 450e9, 5.0, 8)) is AR.NCCL


def _attrs(width: int, world: int = 4) -> KernelAttrs:
    geo = CollectiveGeometry(num_gpus=world, group="tp", width=width, bytes_per_row=2 * width, reason="row_parallel")
    return KernelAttrs(KernelKind.ALL_REDUCE, "all_reduce", geo, "bf16")


@pytest.fixture
def a100_db(tmp_path):
    """A100 rows: NCCL in fp16 only (as aiconfigurator's nccl_perf), vLLM's own all-reduce in bf16."""
    ar = CollectiveOp.ALL_REDUCE
    rows = [(CollectiveKey(ar, 4, D.FP16, "nccl"), 8 * MiB, 60.0), (CollectiveKey(ar, 4, D.FP16, "nccl"), 16 * MiB, 100.0),
            (CollectiveKey(ar, 4, D.BF16, "vllm_custom_graph"), 1 * MiB, 12.0),
            (CollectiveKey(ar, 4, D.BF16, "vllm_custom_eager"), 2 * MiB, 20.0)]
    path = tmp_path / "a100.db"
    with ProfileDB.create(path, ProfileMeta(device="NVIDIA A100", hardware="a100_sxm", engine="vllm")) as db:
        db.put_many([(k, MessagePoint(n), Measurement(t)) for k, n, t in rows])
    db = ProfileDB.open(path)
    yield db
    db.close()


def _price(attrs, spec, pricer):
    step = parse_batch_spec(spec)
    rows = kernel_rows(attrs, StepArrays.of([step]), Dtypes(), CollectiveContext.of(pricer))
    (part,) = rows.parts
    assert isinstance(part.key, CollectiveKey)
    t, s = pricer.times(part.key, part.coords)
    return part.key, part, float(t[0]), SOURCES[int(s[0])]


def _roofline_us(spec, key, nbytes):
    t = collective_roofline_us(spec, key, np.asarray([[nbytes]], dtype=np.float64))
    assert t is not None
    return float(t[0])


def test_bf16_nccl_message_priced_from_fp16_rows_of_equal_bytes(a100_db):
    pricer = KernelPricer(a100_db, load_hardware("a100"))
    # 1024 tokens × 8192 bf16 = 16 MiB >= the 8 MiB custom limit; sm 8.0 has no symmetric memory → NCCL;
    # no bf16 NCCL rows, so the fp16 row at 16 MiB (equal bytes) prices it: 100 µs, measured
    key, part, t, src = _price(_attrs(8192), "prefill:1x1024", pricer)
    assert key == CollectiveKey(CollectiveOp.ALL_REDUCE, 4, D.FP16, "nccl")
    assert part.coords[0, 0] == 16 * MiB
    assert (t, src) == (100.0, TimeSource.MEASURED)
    assert "bf16 from fp16 rows of equal bytes" in part.note and part.note.startswith("nccl")


def test_custom_all_reduce_uses_vllm_rows_graph_or_eager(a100_db):
    pricer = KernelPricer(a100_db, load_hardware("a100"))
    # decode of 64 tokens × 8192 × 2 B = 1 MiB < 8 MiB: custom AR; 64 <= 512 tokens: a CUDA graph
    key, part, t, src = _price(_attrs(8192), "decode:64x2048", pricer)
    assert key.implementation == "vllm_custom_graph" and (t, src) == (12.0, TimeSource.MEASURED)
    assert part.note.startswith("custom_ar") and "graph" in part.note
    # 1024 tokens × 1024 × 2 B = 2 MiB: custom AR; 1024 > 512 tokens: eager
    key, part, t, src = _price(_attrs(1024), "prefill:1x1024", pricer)
    assert key.implementation == "vllm_custom_eager" and (t, src) == (20.0, TimeSource.MEASURED)


def test_rows_from_another_link_are_not_used(a100_db):
    hw = InterconnectOverrides(link=LinkKind.PCIE).apply(load_hardware("a100"))
    pricer = KernelPricer(a100_db, hw)
    key, part, t, src = _price(_attrs(8192), "prefill:1x1024", pricer)
    # PCIe without peer access: NCCL through host memory, at PCIE_SHM_BANDWIDTH_SHARE (0.25) of a100's PCIe Gen4
    # 32 GB/s per direction = 8 GB/s, PCIE_SHM_LATENCY_US (60) µs:
    # 60 + 2·3/4 · 16 MiB / 8e9 s = 60 + 1.5 · 16777216 / 8e9 · 1e6 = 60 + 3145.728 = 3205.728 µs
    assert (hw_mod.PCIE_SHM_BANDWIDTH_SHARE, hw_mod.PCIE_SHM_LATENCY_US) == (0.25, 60.0)  # fitted: fit_engine_links.py
    assert src is TimeSource.ROOFLINE and t == pytest.approx(3205.728)
    assert key.implementation == "nccl@pcie"  # a name no imported rows carry
    assert "no rows" in part.note and "nvswitch" in part.note


def test_tp_across_nodes_is_priced_on_the_network():
    h200 = InterconnectOverrides(gpus_per_node=2).apply(load_hardware("h200"))
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 4, D.BF16, "nccl@nvswitch")
    # 4 GPUs over 2 nodes: the ring's network hop at 50 GB/s per GPU (400 Gb/s NDR); latency 5 (link) + the network's
    # 10 at each of the all-reduce's 2·(2 − 1) = 2 network steps (NCCL's nInterSteps) = 25 µs:
    # 25 + 2·3/4 · 16 MiB / 50e9 s = 25 + 1.5 · 16777216 / 50e9 · 1e6 = 25 + 503.316 = 528.316 µs
    t = _roofline_us(h200, key, 16 * MiB)
    assert t == pytest.approx(528.31648)
    # inside one node the same message runs on NVLink: 5 + 1.5 · 16777216 / 450e9 · 1e6 = 5 + 55.924 = 60.924 µs
    t1 = _roofline_us(load_hardware("h200"), key, 16 * MiB)
    assert t1 == pytest.approx(60.92405)
    assert choose_all_reduce(1 * MiB, 4, h200.topology(), compute_capability="9.0").impl is AR.NCCL


def test_pcie_without_p2p_tp2():
    l40s = load_hardware("l40s")  # bundled as pcie (no peer access): NCCL through host memory
    assert l40s.topology().link is LinkKind.PCIE
    plan = plan_collective(CollectiveOp.ALL_REDUCE, 2, D.BF16, 16 * MiB, 1024, CollectiveContext(l40s.topology(), "8.9"))
    assert plan.key.implementation == "nccl" and "peer-to-peer" in plan.note
    # its datasheet PCIe 32 GB/s through host memory: 0.25 · 32e9 = 8e9 B/s, 60 µs (hardware.PCIE_SHM_*):
    # 60 + 2·1/2 · 16 MiB / 8e9 s = 60 + 16777216 / 8e9 · 1e6 = 60 + 2097.152 = 2157.152 µs
    t = _roofline_us(l40s, plan.key, 16 * MiB)
    assert t == pytest.approx(2157.152)


def test_a_measured_pcie_link_is_taken_as_given():
    # --link-bandwidth states what NCCL achieves: no host-memory share on top of it (latency: the spec's 5.2 µs)
    l40s = InterconnectOverrides(link=LinkKind.PCIE, link_bandwidth_gb_s=12.5).apply(load_hardware("l40s"))
    assert l40s.link_measured and l40s.topology().link_bandwidth_bytes_per_s == 12.5e9
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "nccl")
    # 5.2 + 16777216 / 12.5e9 · 1e6 = 5.2 + 1342.17728 = 1347.37728 µs
    assert _roofline_us(l40s, key, 16 * MiB) == pytest.approx(1347.37728)
    back = type(l40s).from_json(l40s.to_json())
    assert back.link_measured and back.topology() == l40s.topology()


def test_kv_link_follows_the_topology():
    h200 = load_hardware("h200")
    inside = KvLink.from_hardware(h200, gpus=8)  # 8 GPUs fit one 8-GPU node: NVLink 450 GB/s, 5 µs
    assert (inside.bandwidth_bytes_per_s, inside.latency_s) == (450e9, pytest.approx(5e-6))
    across = KvLink.from_hardware(h200, gpus=16)  # two nodes: the network, 50 GB/s per GPU, 10 µs
    assert (across.bandwidth_bytes_per_s, across.latency_s) == (50e9, pytest.approx(10e-6))
    assert "network" in across.describe
    assert KvLink.from_hardware(h200, 100.0, gpus=16).bandwidth_bytes_per_s == 100e9  # a given bandwidth wins


def test_overrides_and_spec_fields():
    h200 = load_hardware("h200")
    assert h200.topology() == Topology(LinkKind.NVSWITCH, 450e9, 5.0, 8, 50e9, 10.0)
    assert h200.compute_capability == "9.0"
    pcie = InterconnectOverrides(link=LinkKind.PCIE_P2P).apply(h200)
    assert pcie.topology().link_bandwidth_bytes_per_s == 64e9  # the spec's PCIe Gen5 x16, per direction
    given = InterconnectOverrides(link=LinkKind.PCIE, link_bandwidth_gb_s=12.5).apply(h200)
    assert given.topology().link_bandwidth_bytes_per_s == 12.5e9
    with pytest.raises(HardwareSpecError, match="no NVLink"):
        InterconnectOverrides(link=LinkKind.NVLINK).apply(load_hardware("l40s"))
    assert InterconnectOverrides().apply(h200) is h200
    back = type(h200).from_json(h200.to_json())
    assert back.topology() == h200.topology() and back.compute_capability == "9.0"


def test_steps_grouped_by_the_limits_they_cross():
    """H200 TP4, 16 KiB per token (hidden 8192, bf16): custom AR while T·16 KiB < 8 MiB (T < 512), symmetric memory
    while T·16 KiB <= 32 MiB (T <= 2048), NCCL above; CUDA graphs up to 512 tokens."""
    ctx = CollectiveContext(load_hardware("h200").topology(), "9.0", None, lambda _key: True)
    tokens = np.arange(1, 4097)
    plans = plan_steps(CollectiveOp.ALL_REDUCE, 4, D.BF16, tokens * 16 * KiB, tokens, ctx)
    got = sorted((int(tokens[idx[0]]), int(tokens[idx[-1]]), p.key.implementation, p.note.split(" ")[0])
                 for p, idx in plans)
    assert got == [(1, 511, "vllm_custom_graph", "custom_ar"), (512, 512, "vllm_custom_graph", "symm_mem"),
                   (513, 2048, "vllm_custom_eager", "symm_mem"), (2049, 4096, "nccl", "nccl")]
    assert sum(len(idx) for _, idx in plans) == len(tokens)


def test_disabled_custom_all_reduce_does_not_reuse_its_rows():
    """The vllm_custom rows time vLLM's default dispatch; without custom AR a small message runs something else."""
    h200 = load_hardware("h200")
    ctx = CollectiveContext(h200.topology(), "9.0", h200.topology(), lambda _key: True, custom_all_reduce=False)
    plan = plan_collective(CollectiveOp.ALL_REDUCE, 4, D.BF16, 1 * MiB, 64, ctx)
    assert plan.key.implementation == "symm_mem@nvswitch" and "timed custom_ar" in plan.note
    # 16 MiB ran symmetric memory either way: its rows still apply
    plan = plan_collective(CollectiveOp.ALL_REDUCE, 4, D.BF16, 16 * MiB, 1024, ctx)
    assert plan.key.implementation == "vllm_custom_eager"


@pytest.mark.parametrize(("field", "value"), [("link", "infiniband"), ("compute_capability", "sm90"),
                                              ("network_bandwidth_bytes_per_s", -1.0)])
def test_bad_topology_fields_in_a_hardware_json_are_named(field, value):
    doc = dict(load_hardware("h200").to_json(), **{field: value})
    with pytest.raises(HardwareSpecError, match=field):
        type(load_hardware("h200")).from_json(doc, "my.json")

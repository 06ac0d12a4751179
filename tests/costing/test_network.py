"""Networks between nodes: TCP goodput of an Ethernet link, NCCL's network steps per collective, and a TP group
priced over TCP sockets. Expected values are derived by hand in the comments (graphsim/costing/network.py)."""

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import InterconnectOverrides, load_hardware
from graphsim.costing.kernels import CollectiveKey, CollectiveOp
from graphsim.costing.network import TcpNetwork, network_steps, tcp_goodput_bytes_per_s, tree_network_steps
from graphsim.costing.roofline import collective_roofline_us


def _us(hw, key, message_bytes: int) -> float:
    t = collective_roofline_us(hw, key, np.array([message_bytes]))
    assert t is not None
    return float(t[0])


def test_tcp_goodput_of_an_ethernet_link():
    # 10 GbE, MTU 1500: payload 1500 − 20 (IPv4) − 20 (TCP) − 12 (timestamps) = 1448 B of 1500 + 38 = 1538 B on
    # the wire: 10e9 / 8 · 1448 / 1538 = 1.25e9 · 0.941482... = 1,176,853,055 B/s
    assert tcp_goodput_bytes_per_s(10) == pytest.approx(1.25e9 * 1448 / 1538)
    assert tcp_goodput_bytes_per_s(10) == pytest.approx(1.176853e9, rel=1e-6)
    # jumbo frames: 9000 − 52 = 8948 of 9038: 25 GbE → 3.125e9 · 8948 / 9038 = 3.093881e9 B/s
    assert tcp_goodput_bytes_per_s(25, mtu=9000) == pytest.approx(3.093881e9, rel=1e-6)
    with pytest.raises(ValueError, match="MTU"):
        tcp_goodput_bytes_per_s(10, mtu=40)


@pytest.mark.parametrize(("op", "nodes", "want"), [
    (CollectiveOp.ALL_REDUCE, 1, 0),  # inside a node: no network step
    (CollectiveOp.ALL_REDUCE, 2, 2),  # 2·(2 − 1): a reduce-scatter step and an all-gather step
    (CollectiveOp.ALL_REDUCE, 4, 6),  # 2·(4 − 1)
    (CollectiveOp.ALL_GATHER, 2, 1),  # 2 − 1
    (CollectiveOp.REDUCE_SCATTER, 4, 3),  # 4 − 1
    (CollectiveOp.SEND_RECV, 2, 1),
    (CollectiveOp.ALL_TO_ALL, 4, 1),
])
def test_network_steps(op, nodes, want):
    assert network_steps(op, nodes) == want


def test_tp2_across_two_nodes_over_tcp_sockets():
    net = TcpNetwork(10)
    assert net.interconnect() == {"network_bandwidth_gb_s": net.bandwidth_gb_s, "network_latency_us": 45.82}
    a100 = InterconnectOverrides(gpus_per_node=1, network_bandwidth_gb_s=net.bandwidth_gb_s,
                                 network_latency_us=net.latency_us).apply(load_hardware("a100"))
    topo = a100.topology()
    assert topo.nodes(2) == 2 and topo.network_latency_us == 45.82
    assert "45.82 µs a network step" in topo.describe()
    link_lat = topo.link_latency_us  # the spec's in-node figure, kept under the network's
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "nccl@nvswitch")
    # Qwen2-7B decode of 10 tokens: 10 × 3584 × 2 B = 71,680 B per all-reduce. Ring on 2 GPUs: bus factor
    # 2·(2 − 1)/2 = 1, at 1,176,853,055 B/s: 71,680 / 1.176853e9 · 1e6 = 60.908 µs; latency link + 2 × 45.82 µs
    t = _us(a100, key, 71680)
    assert t == pytest.approx(link_lat + 91.64 + 60.908, abs=1e-3)
    # an all-gather of 1,520,640 B (nccl-tests' size: the gathered output), factor (2 − 1)/2, one network step:
    # 0.5 · 1,520,640 / 1.176853e9 · 1e6 = 646.062 µs + link + 45.82 µs
    gather = CollectiveKey(CollectiveOp.ALL_GATHER, 2, D.BF16, "nccl@nvswitch")
    tg = _us(a100, gather, 1520640)
    assert tg == pytest.approx(link_lat + 45.82 + 646.062, abs=1e-3)
    # the same group inside one node is priced on the node's link, not the network
    inside = _us(load_hardware("a100"), key, 71680)
    assert inside < 20.0 < t


def test_tcp_network_describes_its_figures():
    s = TcpNetwork(10).describe()
    assert "10 GbE" in s and "1.177 GB/s" in s and "45.82" in s


def test_tcp_network_takes_the_hop_latency_of_the_network_priced():
    # a pod network's figure replaces the bare-VM default in the interconnect fields and the description
    net = TcpNetwork(10, hop_latency_us=240.1)
    assert net.interconnect()["network_latency_us"] == 240.1
    assert "240.1 µs per NCCL socket hop" in net.describe()
    assert TcpNetwork(10).latency_us == 45.82


def test_an_all_reduce_over_four_nodes_takes_nccl_s_tree_when_small():
    net = TcpNetwork(10)
    hw = InterconnectOverrides(gpus_per_node=1, network_bandwidth_gb_s=net.bandwidth_gb_s,
                               network_latency_us=net.latency_us).apply(load_hardware("a100"))
    link_lat = hw.topology().link_latency_us
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 4, D.BF16, "nccl@nvswitch")
    # 5,760 B (gpt-oss-120b, one token: 2880 × 2 B). Tree: 2·log2(4) = 4 steps × 45.82 = 183.28 µs + 5,760 /
    # (0.5 · 0.92 · 1,176,853,056 B/s) = 10.640 µs → 193.920; ring: 6 × 45.82 = 274.92 + 1.5 · 5,760 / 1.176853e9 =
    # 7.342 µs → 282.262. The tree is faster.
    assert _us(hw, key, 5760) == pytest.approx(link_lat + 193.920, abs=1e-3)
    # 10 MB: ring 274.92 + 1.5e7 / 1.176853e9 · 1e6 = 13,020.776 µs; tree 183.28 + 1e7 / (0.46 · 1.176853e9) · 1e6 =
    # 18,655.536 µs. The ring is faster.
    assert _us(hw, key, 10_000_000) == pytest.approx(link_lat + 13020.776, abs=1e-2)
    # over 2 nodes both take 2 steps and the ring's bandwidth is higher: the ring's 152.548 µs for 71,680 B
    two = CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "nccl@nvswitch")
    assert _us(hw, two, 71680) == pytest.approx(link_lat + 152.548, abs=1e-3)
    assert tree_network_steps(2) == 2 and tree_network_steps(4) == 4 and tree_network_steps(8) == 6

"""Networks between nodes as NCCL runs on them: the figures a collective that spans nodes is priced with
(`Topology.network_bandwidth_bytes_per_s` / `network_latency_us`, `roofline.collective_roofline_us`).

The GPU specs state an RDMA network (InfiniBand, one NIC per GPU, as aiconfigurator's system files do). Where the
GPUs' processes see no RDMA device, NCCL sends over TCP sockets (its NET/Socket transport, logged as
"NCCL INFO Using network Socket"): e.g. Kubernetes pods on the pod network without an RDMA device plugin or a
secondary network. Its figures:

- bandwidth: the TCP goodput ceiling of the Ethernet line rate (`tcp_goodput_bytes_per_s`, RFC 6349 §3.3.1's
  method): the payload bytes of a full frame over the bytes it takes on the wire. NCCL's socket transport
  stages every byte through host memory (`ncclSocketPtrSupport`: NCCL_PTR_HOST only, NCCL src/transport/
  net_socket.cc) and can reach less than this on fast links (NVIDIA/nccl issue 209: "not more than 60 % of wire
  speed over 32 Gbps"); on 10 GbE the ceiling is the bound.
- latency: one NCCL NET/Socket transfer of a small message between two nodes, end to end
  (`NCCL_SOCKET_HOP_LATENCY_US`), charged once per network step of the collective (`network_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphsim.costing.kernels import CollectiveOp

# IEEE 802.3 framing of one frame on the wire besides its MTU-sized IP packet: preamble and start delimiter 8,
# MAC header 14, frame check sequence 4, inter-frame gap 12 bytes (RFC 6349 §3.3.1 counts the same 38).
ETHERNET_FRAME_OVERHEAD_BYTES = 38
# IPv4 header 20 + TCP header 20 + the timestamp option 12 Linux sends by default (net.ipv4.tcp_timestamps = 1,
# Documentation/networking/ip-sysctl.rst); RFC 6349's table leaves the option out (1460-byte payloads).
IPV4_TCP_HEADER_BYTES = 52
# One NCCL NET/Socket transfer of a small message between two nodes, launch to completion: nccl-tests
# broadcast_perf of 8 B between 2 nodes x 1 GPU over TCP on eth0 (NCCL_IB_DISABLE=1, NCCL 2.9.6, Azure VMs,
# V100): 45.82 µs out of place, 38.17 µs in place (https://github.com/NVIDIA/nccl-tests/issues/82). A public
# measurement of another cluster, not of the deployment priced: TCP latency varies with the NIC, the switch and
# the hosts' network stack (a Kubernetes overlay adds an encapsulation on each side).
NCCL_SOCKET_HOP_LATENCY_US = 45.82


def tcp_goodput_bytes_per_s(line_rate_gbit_s: float, mtu: int = 1500) -> float:
    """The most a TCP stream carries over an Ethernet link, bytes/s: line rate × (MTU − IPv4/TCP headers) /
    (MTU + framing). 10 GbE at MTU 1500: 10e9 / 8 × 1448 / 1538 = 1.17685e9 B/s (9.41 Gbit/s)."""
    if line_rate_gbit_s <= 0 or mtu <= IPV4_TCP_HEADER_BYTES:
        raise ValueError(f"line rate {line_rate_gbit_s} Gbit/s, MTU {mtu}: give a positive rate and an MTU above "
                         f"{IPV4_TCP_HEADER_BYTES} bytes")
    return line_rate_gbit_s * 1e9 / 8 * (mtu - IPV4_TCP_HEADER_BYTES) / (mtu + ETHERNET_FRAME_OVERHEAD_BYTES)


@dataclass(frozen=True)
class TcpNetwork:
    """Nodes joined by Ethernet that NCCL uses through TCP sockets (NET/Socket), one link per node."""

    line_rate_gbit_s: float
    mtu: int = 1500
    # one NCCL NET/Socket transfer between two nodes, launch to completion: NCCL_SOCKET_HOP_LATENCY_US (a public
    # measurement of bare VMs) unless a figure of the network priced is given (e.g. a Kubernetes pod network's)
    hop_latency_us: float = NCCL_SOCKET_HOP_LATENCY_US

    @property
    def bandwidth_gb_s(self) -> float:
        """Per GPU, one direction, GB/s (one GPU per node: the node's link is the GPU's)."""
        return tcp_goodput_bytes_per_s(self.line_rate_gbit_s, self.mtu) / 1e9

    @property
    def latency_us(self) -> float:
        return self.hop_latency_us

    def interconnect(self) -> dict[str, float]:
        """The `InterconnectOverrides` fields of this network."""
        return {"network_bandwidth_gb_s": self.bandwidth_gb_s, "network_latency_us": self.latency_us}

    def describe(self) -> str:
        return (f"TCP over {self.line_rate_gbit_s:g} GbE (MTU {self.mtu}): {self.bandwidth_gb_s:.4g} GB/s goodput, "
                f"{self.latency_us:g} µs per NCCL socket hop")


def network_steps(op: CollectiveOp, nodes: int) -> int:
    """Sequential network crossings of one collective over `nodes` nodes, each charged the network's latency:
    NCCL's ring latency model (src/graph/tuning.cc, `ncclTopoTuneModel` in 2.8 and `ncclTuningRing::tuningLat`
    now: nInterSteps = 2 (nNodes − 1) for all-reduce, nNodes − 1 for all-gather and reduce-scatter; releases
    2.19-2.27 count 2·nNodes for all-reduce). With one GPU per node it is the ring's step count (a 2-GPU
    all-reduce: a reduce-scatter step and an all-gather step, each a transfer over the network). A send/recv or
    an all-to-all's pairwise transfers cross once."""
    if nodes <= 1:
        return 0
    if op is CollectiveOp.ALL_REDUCE:
        return 2 * (nodes - 1)
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
        return nodes - 1
    return 1


# NCCL's tree all-reduce across nodes (src/graph/tuning.cc `ncclTopoTuneModel`): its latency counts
# 2 · log2i(nNodes) network steps (a reduce up and a broadcast down the double binary tree), its bus bandwidth is the
# ring's × .92 and its algorithm bandwidth half that (each of the two trees carries half the data): an all-reduce of
# S bytes moves in S / (0.5 · 0.92 · bw). NCCL picks, per size, the algorithm its model finds fastest.
TREE_ALLREDUCE_BUS_SHARE = 0.92
TREE_ALGBW_RATIO = 0.5


def tree_network_steps(nodes: int) -> int:
    """Sequential network crossings of NCCL's tree all-reduce over `nodes` nodes: 2 · floor(log2(nodes))."""
    return 2 * int(math.log2(nodes)) if nodes > 1 else 0


def tree_allreduce_seconds_per_byte(bandwidth_bytes_per_s: float) -> float:
    """Seconds per message byte of NCCL's tree all-reduce on links of `bandwidth_bytes_per_s` per direction."""
    return 1.0 / (TREE_ALGBW_RATIO * TREE_ALLREDUCE_BUS_SHARE * bandwidth_bytes_per_s)

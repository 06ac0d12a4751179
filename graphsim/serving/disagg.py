"""Disaggregated prefill/decode serving (xPyD): a prefill pool and a decode pool, each of its own TP and
engine settings, joined by a KV transfer over a link.

What happens to a request (vLLM's P/D split with a KV connector, e.g. NixlConnector, and the proxy of
examples/online_serving/disaggregated_serving):

1. the router sends it to a prefill instance as a request for one token (`max_tokens=1`); that instance
   runs the prompt like any engine (chunked prefill, prefix caching) and its token is discarded;
2. its KV blocks go to a decode instance (picked by the decode router when the prefill ends) over the
   link: `latency + bytes / bandwidth`, where bytes are the prompt's KV bytes per rank on the busier
   side (`KvLayout.bytes_for_request`: a prefill rank sends its shard, a decode rank receives its
   shard, so with tp_p = 1 and tp_d = 4 the prefill GPU sends four decode ranks' worth). Transfers
   through one prefill instance's egress or one decode instance's ingress queue one after another;
3. the decode instance admits it with `num_prompt_tokens − 1` tokens already computed (vLLM recomputes the last
   prompt token: a prefix hit is at most `num_tokens − 1`), so its first step is one token that
   yields the first output token — TTFT therefore includes prefill, transfer, the decode-side queue
   and that step; then it decodes as usual. A request preempted on the decode side recomputes its
   prompt there (the remote KV is gone).

Aggregated serving (one pool, chunked prefill: `simulator.simulate`) stays the default; both run in the
same event loop (simulator.py), with the same engines, routers, records and arrival handling; the decode
instances are `scheduler.DecodeEngine`s. The link comes from the hardware spec's topology (`KvLink.from_hardware`:
the node's link while both pools fit in one node, the network between nodes otherwise; an estimate, reported
as `roofline`) or is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.requests import ClosedLoop, RequestSpec
from graphsim.serving.simulator import SimulationError, SimulationResult, SimulationSetup, run_result


class KvLinkError(GraphsimError):
    pass


@dataclass(frozen=True)
class KvLink:
    """The path KV blocks take from a prefill GPU to a decode GPU (per GPU, one direction)."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = "roofline"  # "roofline" (a spec figure) or "given"
    describe: str = ""

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0 or self.latency_s < 0:
            raise KvLinkError(f"KV link bandwidth {self.bandwidth_bytes_per_s:g} B/s, latency {self.latency_s:g} s; "
                              "give a bandwidth > 0 (--kv-link-gbps) and a latency >= 0")

    def transfer_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    @classmethod
    def from_hardware(cls, hw: HardwareSpec, bandwidth_gb_per_s: float | None = None,
                      latency_us: float | None = None, gpus: int = 1) -> KvLink:
        """The link of the spec's topology (`HardwareSpec.topology`) for a deployment of `gpus` GPUs in all
        (both pools, placed node by node): the node's link while they fit in one node, else the network
        between nodes (a prefill rank's shard leaves through its own NIC), unless a bandwidth or latency is given."""
        topo = hw.topology()
        cross = topo.nodes(gpus) > 1
        spec_bw = topo.network_bandwidth_bytes_per_s if cross else topo.link_bandwidth_bytes_per_s
        spec_lat = topo.network_latency_us if cross else topo.link_latency_us
        bw = bandwidth_gb_per_s * 1e9 if bandwidth_gb_per_s else spec_bw
        lat = latency_us if latency_us is not None else spec_lat
        if not bw:
            where = "network bandwidth between nodes" if cross else "interconnect bandwidth"
            raise KvLinkError(f"the {hw.id} spec has no {where}; give --kv-link-gbps")
        given = bandwidth_gb_per_s is not None or latency_us is not None
        spec = (f"network between nodes, {gpus} GPUs over {topo.nodes(gpus)} nodes of {topo.gpus_per_node}" if cross
                else f"{hw.interconnect or topo.link.value} inside one node")
        what = f"{bw / 1e9:,.0f} GB/s, {lat:g} µs" + (" (given)" if given else f" ({spec}; {hw.id} spec)")
        return cls(bw, lat * 1e-6, "given" if given else "roofline", what)


@dataclass(frozen=True)
class DisaggSetup:
    prefill: SimulationSetup  # replicas = prefill instances (x of xPyD)
    decode: SimulationSetup  # replicas = decode instances (y)
    link: KvLink

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def replicas(self) -> int:
        """Engines in both pools (prefill instances first, as they are numbered in the iteration log)."""
        return self.prefill.replicas + self.decode.replicas

    def transfer_bytes(self, prompt_tokens: int) -> int:
        """Bytes through the busier GPU's link for one prompt's KV (per rank, prefill or decode side)."""
        return max(self.prefill.layout.bytes_for_request(prompt_tokens),
                   self.decode.layout.bytes_for_request(prompt_tokens))

    def transfer_s(self, prompt_tokens: int) -> float:
        return self.link.transfer_s(self.transfer_bytes(prompt_tokens))

    def label(self) -> str:
        p, d = self.prefill, self.decode
        return f"{p.replicas}P(tp{p.tp}) {d.replicas}D(tp{d.tp})"


@dataclass(frozen=True, repr=False)  # SimulationResult's short repr, not every request
class DisaggResult(SimulationResult):
    """A SimulationResult of a disaggregated run: `requests` are the decode-side records, `iterations` hold
    both pools (replica < prefill instances is a prefill instance)."""

    setup: DisaggSetup
    prefill_done_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per request id (NaN if none)
    transfer_start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_tokens: int = 0  # tokens the prefill pool computed
    decode_tokens: int = 0  # tokens the decode pool computed

    def transfer_stats_ms(self) -> dict[str, float]:
        ok = ~np.isnan(self.transfer_end_s)
        if not ok.any():
            return {"mean": math.nan, "max": math.nan, "queue_mean": math.nan}
        duration = (self.transfer_end_s - self.prefill_done_s)[ok] * 1e3
        queue = (self.transfer_start_s - self.prefill_done_s)[ok] * 1e3
        return {"mean": float(duration.mean()), "max": float(duration.max()), "queue_mean": float(queue.mean()),
                "bytes_mean": float(self.transfer_bytes[ok].mean())}


def simulate_disagg(setup: DisaggSetup, workload: list[RequestSpec] | ClosedLoop,
                    progress: Callable[[int, int], None] | None = None) -> DisaggResult:
    """Run the workload through the prefill pool, the link and the decode pool; deterministic."""
    p, d = setup.prefill, setup.decode
    if p.replicas < 1 or d.replicas < 1:
        raise SimulationError(f"{p.replicas} prefill and {d.replicas} decode instances; give at least one of each")
    loop, common = run_result(setup, workload, progress, lambda e: {
        "replica": e.index, "pool": "prefill" if e.index < p.replicas else "decode", "iterations": e.iterations,
        "preemptions": e.preemptions})
    by_replica = common["iteration_totals"].tokens_by_replica  # replica < prefill instances: a prefill instance
    kv = loop.kv
    return DisaggResult(**common, prefill_done_s=kv.prefill_done_s, transfer_start_s=kv.start_s,
                        transfer_end_s=kv.end_s, transfer_bytes=kv.bytes,
                        prefill_tokens=sum(v for k, v in by_replica.items() if k < p.replicas),
                        decode_tokens=sum(v for k, v in by_replica.items() if k >= p.replicas))

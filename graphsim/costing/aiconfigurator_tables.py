"""Converters from aiconfigurator-core's measured tables to profile.db rows (pure; no I/O).

Each converter takes one table as columns (`{column: values}`, e.g. `pyarrow.Table.to_pydict()`)
and returns typed rows. Conversions: `latency` milliseconds → `time_us` microseconds;
`message_size` elements → `message_bytes` with the row's dtype; attention `step` (tokens already
cached) + `isl` (new tokens) → `kv_len`. Rows with an unknown dtype, beam search, or a coordinate
below 1 are skipped and counted; repeated rows are averaged, and of several kernels for one point the
fastest is kept (both counted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsInt

from graphsim.costing.dtypes import KernelDtype, parse_kernel_dtype
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, CollectiveKey, CollectiveOp,
    DsaModuleDecodeKey, DsaModulePrefillKey, GemmKey, GemmPoint, KernelKey, Measurement, MessagePoint, MlaDecodeKey,
    MlaModuleDecodeKey, MlaModulePrefillKey, MlaPrefillKey, MoeKey, MoeRouting, Point, TokensPoint, check_point,
)

Columns = Mapping[str, Sequence[object]]
Row = tuple[KernelKey, Point, Measurement]

MS_TO_US = 1000.0

_COLLECTIVE_OPS = {
    "all_reduce": CollectiveOp.ALL_REDUCE, "allreduce": CollectiveOp.ALL_REDUCE,
    "all_gather": CollectiveOp.ALL_GATHER, "allgather": CollectiveOp.ALL_GATHER,
    "reduce_scatter": CollectiveOp.REDUCE_SCATTER, "reducescatter": CollectiveOp.REDUCE_SCATTER,
    "alltoall": CollectiveOp.ALL_TO_ALL, "all_to_all": CollectiveOp.ALL_TO_ALL,
}


@dataclass(frozen=True)
class MlaGeometry:
    """MLA dimensions of the model a table was measured with (from its config.json)."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    hidden_size: int
    q_lora_rank: int  # 0 when the model has no low-rank query projection
    # DSA's indexer (DeepSeek-V3.2's index_n_heads, index_head_dim, index_topk); 0 for dense MLA
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> MlaGeometry:
        return cls(
            kv_lora_rank=int(config["kv_lora_rank"]),  # type: ignore[call-overload]
            qk_nope_head_dim=int(config["qk_nope_head_dim"]),  # type: ignore[call-overload]
            qk_rope_head_dim=int(config["qk_rope_head_dim"]),  # type: ignore[call-overload]
            v_head_dim=int(config["v_head_dim"]),  # type: ignore[call-overload]
            hidden_size=int(config["hidden_size"]),  # type: ignore[call-overload]
            q_lora_rank=int(config.get("q_lora_rank") or 0),  # type: ignore[call-overload]
            index_n_heads=int(config.get("index_n_heads") or 0),  # type: ignore[call-overload]
            index_head_dim=int(config.get("index_head_dim") or 0),  # type: ignore[call-overload]
            index_topk=int(config.get("index_topk") or 0),  # type: ignore[call-overload]
        )


@dataclass
class Converted:
    rows: list[Row] = field(default_factory=list)
    read: int = 0
    repeats: int = 0  # extra rows repeating a (key, point, kernel): averaged
    alternatives: int = 0  # rows of other kernels for the same (key, point): the fastest kernel kept
    skipped: Counter[str] = field(default_factory=Counter)  # reason → count

    def summary(self) -> str:
        parts = [f"{self.read} read", f"{len(self.rows)} rows"]
        if self.repeats:
            parts.append(f"{self.repeats} repeated measurements averaged")
        if self.alternatives:
            parts.append(f"{self.alternatives} slower alternative kernels dropped")
        parts += [f"{n} skipped: {reason}" for reason, n in sorted(self.skipped.items())]
        return ", ".join(parts)


class _Skip(Exception):
    pass


class _Builder:
    """Collects rows. Repeats of one (key, point, kernel) are averaged (time_us = mean, std_us
    across repeats, samples = number of repeats); of several kernels for one (key, point) the
    fastest is kept, as the engine would pick it."""

    def __init__(self) -> None:
        self.out = Converted()
        self._times: dict[tuple[KernelKey, Point], dict[str, list[float]]] = {}

    def add(self, make: Callable[[], tuple[KernelKey, Point]], latency_ms: object, kernel: object) -> None:
        self.out.read += 1
        try:
            key, point = make()
            check_point(key, point)
            time_us = float(latency_ms) * MS_TO_US  # type: ignore[arg-type]
            if not (time_us > 0 and time_us < float("inf")):
                raise _Skip("non-positive or non-finite latency")
        except _Skip as e:
            self.out.skipped[str(e)] += 1
            return
        except ValueError as e:
            self.out.skipped[str(e).split(" (known")[0]] += 1
            return
        self._times.setdefault((key, point), {}).setdefault(str(kernel or ""), []).append(time_us)

    def done(self) -> Converted:
        rows = []
        for (key, point), by_kernel in self._times.items():
            means = {k: sum(ts) / len(ts) for k, ts in by_kernel.items()}
            kernel = min(means, key=lambda k: (means[k], k))
            ts = by_kernel[kernel]
            self.out.repeats += sum(len(v) - 1 for v in by_kernel.values())
            self.out.alternatives += len(by_kernel) - 1
            if len(ts) > 1:
                mean = means[kernel]
                std = (sum((t - mean) ** 2 for t in ts) / len(ts)) ** 0.5
                m = Measurement(mean, std_us=std, samples=len(ts), kernel=kernel)
            else:
                m = Measurement(ts[0], kernel=kernel)
            rows.append((key, point, m))
        self.out.rows = rows
        return self.out


def _col(cols: Columns, name: str, n: int, default: object = None) -> Sequence[object]:
    if name in cols:
        return cols[name]
    if default is None:
        raise KeyError(f"column '{name}' missing (columns: {', '.join(cols)})")
    return [default] * n


def _n(cols: Columns) -> int:
    return len(cols["latency"])


def _dtype(name: object) -> KernelDtype:
    return parse_kernel_dtype(str(name))


def _rows(cols: Columns, names: Sequence[str], defaults: Mapping[str, object] | None = None):
    n = _n(cols)
    defaults = defaults or {}
    return zip(*(_col(cols, c, n, defaults.get(c)) for c in names), strict=True)


def convert_gemm(cols: Columns) -> Converted:
    b = _Builder()
    for dt, m, n, k, lat, ks in _rows(cols, ("gemm_dtype", "m", "n", "k", "latency", "kernel_source"), {"kernel_source": ""}):
        b.add(lambda: (GemmKey(int(n), int(k), _dtype(dt)), GemmPoint(int(m))), lat, ks)
    return b.done()


_ATTN = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "beam_width", "attn_dtype",
         "kv_cache_dtype", "step", "window_size", "latency", "kernel_source")
_ATTN_DEFAULTS = {"beam_width": 1, "step": 0, "window_size": 0, "kernel_source": ""}


def _attention_row(key_cls: Callable[..., KernelKey], geo: tuple[object, ...], bs: Any, isl: Any,
                   step: Any) -> tuple[KernelKey, Point]:
    """Key and point of one attention row: a decode key's point has one new token per sequence, a
    prefill key's `isl`; kv_len counts the cached `step` tokens and the new ones."""
    key = key_cls(*geo)
    kv_len = int(step) + int(isl)
    if key.POINT is AttentionDecodePoint:
        return key, AttentionDecodePoint(int(bs), kv_len)
    return key, AttentionPrefillPoint(int(bs), int(isl), kv_len)


def _attention(cols: Columns, decode: bool) -> Converted:
    b = _Builder()
    for bs, isl, h, kvh, hd, beam, dt, kvdt, step, win, lat, ks in _rows(cols, _ATTN, _ATTN_DEFAULTS):
        def make():
            if int(beam) != 1:
                raise _Skip("beam search rows")
            geo = (int(h), int(kvh), int(hd), _dtype(dt), _dtype(kvdt), int(win))
            return _attention_row(AttentionDecodeKey if decode else AttentionPrefillKey, geo, bs, isl, step)
        b.add(make, lat, ks)
    return b.done()


def convert_context_attention(cols: Columns) -> Converted:
    return _attention(cols, decode=False)


def convert_generation_attention(cols: Columns) -> Converted:
    return _attention(cols, decode=True)


_MLA = ("batch_size", "isl", "num_heads", "mla_dtype", "kv_cache_dtype", "step", "latency", "kernel_source")


def _mla(cols: Columns, geometry: MlaGeometry, decode: bool) -> Converted:
    b = _Builder()
    g = geometry
    for bs, isl, h, dt, kvdt, step, lat, ks in _rows(cols, _MLA, {"step": 0, "kernel_source": ""}):
        def make():
            geo = (int(h), g.kv_lora_rank, g.qk_nope_head_dim, g.qk_rope_head_dim, g.v_head_dim, _dtype(dt), _dtype(kvdt))
            return _attention_row(MlaDecodeKey if decode else MlaPrefillKey, geo, bs, isl, step)
        b.add(make, lat, ks)
    return b.done()


def convert_context_mla(cols: Columns, geometry: MlaGeometry) -> Converted:
    return _mla(cols, geometry, decode=False)


def convert_generation_mla(cols: Columns, geometry: MlaGeometry) -> Converted:
    return _mla(cols, geometry, decode=True)


def _mla_module(cols: Columns, geometry_of: Callable[[str], MlaGeometry | None], decode: bool,
                dsa: bool = False) -> Converted:
    b = _Builder()
    names = (*_MLA, "model", "gemm_type")
    key_cls: Callable[..., KernelKey]
    if dsa:
        key_cls = DsaModuleDecodeKey if decode else DsaModulePrefillKey
    else:
        key_cls = MlaModuleDecodeKey if decode else MlaModulePrefillKey
    for bs, isl, h, dt, kvdt, step, lat, ks, model, gemm in _rows(cols, names, {"step": 0, "kernel_source": ""}):
        def make():
            g = geometry_of(str(model))
            if g is None:
                raise _Skip(f"model {model} not in the graphsim catalog (its MLA geometry is unknown)")
            geo: tuple[object, ...] = (int(h), g.kv_lora_rank, g.qk_nope_head_dim, g.qk_rope_head_dim, g.v_head_dim,
                                       _dtype(dt), _dtype(kvdt), g.hidden_size, g.q_lora_rank, _dtype(gemm))
            if dsa:
                if not g.index_topk:
                    raise _Skip(f"model {model}'s config has no DSA indexer (index_topk)")
                geo = (*geo, g.index_n_heads, g.index_head_dim, g.index_topk)
            # the module collector logs a decode row's `step` as the sequence length *including* the new token
            # (collector/vllm/collect_mla_module.py run_mla_module: BatchSpec(seq_lens=[seq_len], query_lens=[1]),
            # step=seq_len), unlike the attention tables' cached length: kv_len = step, not step + 1
            cached = int(step) - int(isl) if decode else step
            return _attention_row(key_cls, geo, bs, isl, cached)
        b.add(make, lat, ks)
    return b.done()


def convert_mla_context_module(cols: Columns, geometry_of: Callable[[str], MlaGeometry | None]) -> Converted:
    return _mla_module(cols, geometry_of, decode=False)


def convert_mla_generation_module(cols: Columns, geometry_of: Callable[[str], MlaGeometry | None]) -> Converted:
    return _mla_module(cols, geometry_of, decode=True)


def convert_dsa_context_module(cols: Columns, geometry_of: Callable[[str], MlaGeometry | None]) -> Converted:
    """aiconfigurator's `dsa_context_module_perf` (sparse_attention/<backend>/<v>/): the same collector and columns as
    the MLA module tables (collector/vllm/collect_mla_module.py, DSA chosen by the config's `index_topk`), its `step`
    the cached prefix (0 or 128 tokens) → DSA module prefill rows keyed with the model's indexer geometry."""
    return _mla_module(cols, geometry_of, decode=False, dsa=True)


def convert_dsa_generation_module(cols: Columns, geometry_of: Callable[[str], MlaGeometry | None]) -> Converted:
    return _mla_module(cols, geometry_of, decode=True, dsa=True)


def convert_moe(cols: Columns) -> Converted:
    b = _Builder()
    names = ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
             "moe_ep_size", "distribution", "latency", "kernel_source")
    for dt, tok, hid, inter, topk, ne, tp, ep, dist, lat, ks in _rows(cols, names, {"distribution": "balanced", "kernel_source": ""}):
        def make():
            try:
                routing = MoeRouting(str(dist))
            except ValueError:
                raise _Skip(f"routing distribution {dist}") from None
            key = MoeKey(int(hid), int(inter), int(topk), int(ne), int(tp), int(ep), _dtype(dt), routing)
            return key, TokensPoint(int(tok))
        b.add(make, lat, ks)
    return b.done()


def _int(cell: object) -> int:
    """A table cell as an int (cells are numpy or Python numbers, or numeric strings)."""
    if isinstance(cell, (SupportsInt, str)):
        return int(cell)
    raise _Skip(f"non-numeric cell {cell!r}")


def _collective(op_name: object, num_gpus: object, dtype_name: object, elements: object, implementation: str):
    op = _COLLECTIVE_OPS.get(str(op_name).lower())
    if op is None:
        raise _Skip(f"collective op {op_name}")
    dt = _dtype(dtype_name)
    nbytes = _int(elements) * dt.element_bytes
    if nbytes != int(nbytes):
        raise _Skip("message of a fractional byte count")
    return CollectiveKey(op, _int(num_gpus), dt, implementation), MessagePoint(int(nbytes))


def convert_nccl(cols: Columns) -> Converted:
    b = _Builder()
    names = ("op_name", "num_gpus", "nccl_dtype", "message_size", "latency", "kernel_source")
    for op, ng, dt, size, lat, ks in _rows(cols, names, {"kernel_source": "NCCL"}):
        b.add(lambda: _collective(op, ng, dt, size, "nccl"), lat, ks)
    return b.done()


def convert_custom_allreduce(cols: Columns) -> Converted:
    b = _Builder()
    names = ("op_name", "num_gpus", "allreduce_dtype", "message_size", "latency", "kernel_source")
    for op, ng, dt, size, lat, ks in _rows(cols, names, {"op_name": "all_reduce", "kernel_source": "custom"}):
        b.add(lambda: _collective(op, ng, dt, size, str(ks).lower()), lat, ks)
    return b.done()


def convert_moe_a2a(cols: Columns) -> Converted:
    """vLLM's DeepEP dispatch/combine rows (`comm/vllm/<v>/moe_a2a_perf.parquet`, aiconfigurator's wideep_vllm
    collector) → all-to-all collective rows of `ep_size` GPUs whose implementation names backend, phase and MoE
    geometry (`costing.all2all.implementation`), at the message a rank sends (`costing.all2all.exchange_bytes`:
    num_tokens per rank × topk × hidden × 2 bytes). This table's `latency` is in microseconds (it equals its
    `transmit_us` + `notify_us` columns), not the milliseconds of the other tables. Rows of more than one node
    are skipped (graphsim's collective rows describe one node)."""
    from graphsim.costing.all2all import exchange_bytes, implementation

    b = _Builder()
    names = ("comm_backend", "phase", "ep_size", "node_num", "hidden_size", "topk", "num_experts", "num_tokens",
             "latency", "kernel_source")
    for be, phase, ep, nodes, hid, topk, ne, tok, lat_us, ks in _rows(cols, names, {"node_num": 1, "kernel_source": "deepep"}):
        def make(be=be, phase=phase, ep=ep, nodes=nodes, hid=hid, topk=topk, ne=ne, tok=tok):
            if _int(nodes) != 1:
                raise _Skip("exchange across nodes")
            impl = implementation(str(be), str(phase), _int(hid), _int(topk), _int(ne))
            key = CollectiveKey(CollectiveOp.ALL_TO_ALL, _int(ep), KernelDtype.BF16, impl)
            return key, MessagePoint(exchange_bytes(_int(tok), _int(hid), _int(topk)))
        b.add(make, float(lat_us) / MS_TO_US if isinstance(lat_us, (int, float)) else lat_us, ks)  # µs → the builder's ms
    return b.done()


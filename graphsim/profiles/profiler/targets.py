"""What to measure: the distinct profile.db keys of a kernel graph.

Every kernel node is mapped with `costing.kernel_map.key_for` (attention twice: prefill and
decode), exactly as the cost tree looks rows up, so rows written under these keys are found.
Kernels without a key (e.g. a bool or complex dtype that has no kernel dtype), collectives on a
single device, and kinds the user left out are returned as `Skipped` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import KernelKey
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Op
from graphsim.ir.geometry import CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows

# --kinds accepts KernelKind values and these names.
KIND_ALIASES: dict[str, tuple[str, ...]] = {
    "moe": (KernelKind.MOE_EXPERTS.value,),
    "norm": (KernelKind.RMS_NORM.value, KernelKind.FUSED_ADD_RMS_NORM.value, KernelKind.LAYER_NORM.value),
    "attention_prefill": (KernelKind.ATTENTION.value,),
    "attention_decode": (KernelKind.ATTENTION.value,),
    "collective": tuple(k.value for k in KernelKind if k.is_collective),
}


@dataclass
class KernelTarget:
    """One profile.db key and the kernel nodes (attrs) that map to it."""

    key: KernelKey
    attrs: KernelAttrs  # the first kernel seen: the geometry the benchmark is built from
    nodes: list[str] = field(default_factory=list)
    once_only: bool = True  # every node runs once per step (Rows.ONCE): only tokens=1 is looked up
    variants: list[KernelAttrs] = field(default_factory=list)  # other attrs with the same key

    @property
    def table(self) -> str:
        return self.key.KIND.value

    def describe(self) -> str:
        return describe_key(self.key)

    def geometry_conflicts(self) -> list[str]:
        """Geometry fields that differ between kernels sharing this key (measured with the first)."""
        first = self.attrs.geometry.as_dict()
        out = []
        for v in self.variants:
            other = v.geometry.as_dict()
            diff = sorted(k for k in set(first) | set(other) if first.get(k) != other.get(k))
            if diff:
                out.append(", ".join(f"{k}: {first.get(k)!r} vs {other.get(k)!r}" for k in diff))
        return sorted(set(out))


@dataclass(frozen=True)
class Skipped:
    """Kernels that are not measured, and why."""

    kernel: str  # e.g. "all_reduce (num_gpus=2, bf16)"
    reason: str
    nodes: int = 1


def describe_key(key: KernelKey) -> str:
    parts = []
    for name, value in vars(key).items():
        parts.append(f"{name}={getattr(value, 'value', value)}")
    return f"{key.KIND.value}({', '.join(parts)})"


def describe_attrs(a: KernelAttrs) -> str:
    geo = " ".join(f"{k}={v}" for k, v in a.geometry.items())
    return f"{a.kind.value} {a.name} [{geo}] {a.dtype}"


def parse_kinds(text: str | None) -> set[str] | None:
    """`gemm,attention,...` → KernelKind values (None: all). Unknown names are a one-line error."""
    if not text:
        return None
    known = {k.value for k in KernelKind}
    out: set[str] = set()
    for raw in (p.strip().lower() for p in text.split(",")):
        if not raw:
            continue
        if raw in known:
            out.add(raw)
        elif raw in KIND_ALIASES:
            out.update(KIND_ALIASES[raw])
        else:
            names = ", ".join(sorted(known | set(KIND_ALIASES)))
            raise GraphsimError(f"unknown kernel kind '{raw}' in --kinds; known: {names}")
    return out


def attention_phases(text: str | None) -> tuple[bool, bool]:
    """(prefill, decode) wanted: `--kinds attention_decode` alone measures only decode."""
    if not text:
        return True, True
    names = {p.strip().lower() for p in text.split(",")}
    if "attention" in names or not names & {"attention_prefill", "attention_decode"}:
        return True, True
    return "attention_prefill" in names, "attention_decode" in names


def collect_targets(graph: Graph, dtypes: Dtypes, *, kinds: set[str] | None = None, prefill: bool = True,
                    decode: bool = True, devices: int = 1) -> tuple[list[KernelTarget], list[Skipped]]:
    """The distinct keys of `graph`'s kernel nodes in first-seen order, and what is skipped."""
    targets: dict[KernelKey, KernelTarget] = {}
    skipped: dict[tuple[str, str], int] = {}

    def skip(kernel: str, reason: str) -> None:
        skipped[(kernel, reason)] = skipped.get((kernel, reason), 0) + 1

    for node in graph.nodes:
        if node.op is not Op.KERNEL or not isinstance(node.attrs, KernelAttrs):
            continue
        a = node.attrs
        if kinds is not None and a.kind.value not in kinds:
            continue
        if a.kind.is_collective:
            n = a.geometry.num_gpus if isinstance(a.geometry, CollectiveGeometry) else 1
            what = f"{a.kind.value} (num_gpus={n}, {a.dtype})"
            if devices < n:
                skip(what, f"collectives need {n} devices; this machine has {devices}")
            else:
                skip(what, "collective timing is not implemented in the profiler; import measured NCCL tables "
                           "with `graphsim profiles import-aiconfigurator`")
            continue
        phases = [True, False] if a.kind is KernelKind.ATTENTION else [True]
        for is_prefill in phases:
            if a.kind is KernelKind.ATTENTION and not (prefill if is_prefill else decode):
                continue
            try:
                key = key_for(a, dtypes, prefill=is_prefill)
            except (KeyError, ValueError) as e:
                skip(describe_attrs(a), f"no profile.db key: {e}")
                continue
            t = targets.get(key)
            if t is None:
                t = targets[key] = KernelTarget(key, a)
            elif a != t.attrs and a not in t.variants:
                t.variants.append(a)
            t.nodes.append(node.name)
            t.once_only = t.once_only and a.rows is Rows.ONCE
    return list(targets.values()), [Skipped(k, r, n) for (k, r), n in skipped.items()]

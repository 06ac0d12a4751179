"""CostTree locations as plain data: which kernel leaf, where, how often, its time and its work.

A location is named `<region>/<scope role>/<kernel>`: the fold region (layer tag such as
`full.moe`, or `outside` before and after the layers), the kernel's module scope relative to its
layer (`self_attn`, `mlp.experts`, `input_layernorm`; `[layer]` for the layer itself, `[stack]`
for a kernel whose ops span two layers, e.g. an input norm fused with the previous layer's residual
add; the full scope outside the layers, the text model holding the layers called `model`), and the
name the fuse pass gave the kernel (`qkv_proj`, `fused_moe`). A kernel that repeats with the same role and name within a region gets
`#2`, `#3`, … in order. Names depend on how the fuse pass names kernels and on the module tree,
never on the model's name.

This module takes plain values; the CLI layer reads them off a kernel graph and a priced cost
tree (`graphsim.analysis.sites`), so `graphsim.work` stays free of torch, importers and costing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LAYER_ROLE = "[layer]"
STACK_ROLE = "[stack]"


TEXT_MODEL = "model"  # the text model's scope outside the layers, whatever wrapper holds it


def scope_role(scope: str, layer_stack: str, in_layer: bool) -> str:
    """The scope relative to its decoder layer (`model.layers.3.mlp.gate` → `mlp.gate`).

    Outside the layers the scope is kept whole, except that the text model holding the layer stack is
    always called `model`: a multimodal wrapper's `model.language_model.embed_tokens` (Qwen3-VL, Qwen3.5,
    Gemma-4: transformers' `*ForConditionalGeneration` holds the decoder as `model.language_model`) is
    `model.embed_tokens`, as in the plain causal LM, so one map serves both spellings of one decoder."""
    if not in_layer:
        root = layer_stack.rpartition(".")[0]
        if root and root != TEXT_MODEL and (scope == root or scope.startswith(root + ".")):
            scope = TEXT_MODEL + scope[len(root):]
        return scope or "[model]"
    m = re.match(re.escape(layer_stack) + r"(?:\.(\d+))?(?:\.(.+))?$", scope) if layer_stack else None
    if m is None:
        return scope or "[model]"
    if m.group(2):
        return m.group(2) if m.group(1) is not None else f"{STACK_ROLE}.{m.group(2)}"
    return LAYER_ROLE if m.group(1) is not None else STACK_ROLE


def location_ids(keys: list[tuple[str, str, str]]) -> list[str]:
    """`region/role/kernel` per (region, role, kernel) key, with `#k` on the k-th repeat (k ≥ 2).

    A kernel named with its shape after a `/` (DeepSeek-V4's `mhc_pre/n4.d4096`,
    `deepseek_compressor/d512.c2.m4.e584`: costing/compressed.py prices the op from those numbers) is located
    by the kernel alone (`mhc_pre`): the shape is the kernel's geometry, not another kernel, and a map keyed to
    it would fit one model size only (V4-Flash's d4096, not V4-Pro's d7168). Two such kernels of one role
    are told apart by `#k` in trace order, like any repeat."""
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for region, role, kernel in keys:
        key = (region, role, kernel.partition("/")[0])
        seen[key] = seen.get(key, 0) + 1
        k = seen[key]
        out.append("/".join(key) + (f"#{k}" if k > 1 else ""))
    return out


def split_location(location: str) -> tuple[str, str]:
    """(region, rest) of `region/role/kernel`."""
    region, _, rest = location.partition("/")
    return region, rest


@dataclass(frozen=True)
class Performed:
    """Work a kernel performs by its cost model (FLOPs, DRAM bytes split by what they move)."""

    flops: float = 0.0
    param_bytes: float = 0.0  # weights read
    state_bytes: float = 0.0  # KV cache / recurrent state read or written
    activation_bytes: float = 0.0  # activations read and written between kernels

    @property
    def bytes(self) -> float:
        return self.param_bytes + self.state_bytes + self.activation_bytes

    def scaled(self, factor: float) -> Performed:
        return Performed(self.flops * factor, self.param_bytes * factor, self.state_bytes * factor,
                         self.activation_bytes * factor)

    def __add__(self, other: Performed) -> Performed:
        return Performed(self.flops + other.flops, self.param_bytes + other.param_bytes,
                         self.state_bytes + other.state_bytes, self.activation_bytes + other.activation_bytes)


@dataclass(frozen=True)
class Member:
    """One kernel a generated kernel replaced (vLLM's compiled mode: passes/fuse/vllm_inductor.py merges norms,
    rotary, activations and elementwise ops into `triton_fused` kernels), located as the custom-op graph locates it
    (`full.moe/self_attn.k_norm/rms_norm`): location maps name it there, and the generated kernel takes its rows."""

    location: str
    kind: str
    kernel: str
    leads: bool = False  # its region's first kernel in the custom-op graph (a next layer's input norm in a layer's tail)


@dataclass(frozen=True)
class Site:
    """One CostTree leaf of one rank, with everything the analyzer needs about it.

    `count` is the leaf's multiplicity (layers its region stands for); `time_us` the predicted time of
    all `count` instances on one rank (None when missing); `performed` the work of all instances on
    one rank; `peak_flops_per_s` the hardware's dense peak for the kernel's dtype (None: no such path).
    """

    location: str
    kernel: str
    kind: str
    communication: bool
    count: int
    time_us: float | None
    source: str
    performed: Performed = Performed()
    peak_flops_per_s: float | None = None
    notes: tuple[str, ...] = field(default=())
    members: tuple[Member, ...] = ()  # the kernels a generated kernel replaced, in order (else empty)

    @property
    def region(self) -> str:
        return split_location(self.location)[0]


def member_sites(sites: list[Site]) -> list[Site]:
    """`sites` with each generated kernel replaced by the kernels it stands for (its `members`, each a site of the
    member's location and kind, with no time or work of its own): the custom-op graph's locations and kinds, which
    the derived map's rules place rows on (`derived.derive_map`), in the custom-op graph's order: a member that
    `leads` its region goes before the region's other kernels."""
    out: list[Site] = []
    lead: list[Site] = []
    for s in sites:
        mine = [(m.leads, Site(m.location, m.kernel, m.kind, False, s.count, None, s.source)) for m in s.members]
        out += [x for leads, x in mine if not leads] if mine else [s]
        lead += [x for leads, x in mine if leads]
    for x in lead:
        at = next(i for i, s in enumerate(out) if s.region == x.region)
        out.insert(at, x)
    return out

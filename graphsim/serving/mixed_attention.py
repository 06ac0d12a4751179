"""vLLM V1's FlashAttention-2 in a step with a prefill chunk: the decodes lose their GQA packing.

vLLM V1 runs every request of a step, prefill chunks and decodes alike, through one `flash_attn_varlen_func`
call (vllm/v1/attention/backends/flash_attn.py `FlashAttentionImpl.forward`, checked at the 0.10 / 0.11 line). On
compute capability 8.x that call is FlashAttention-2 (vllm/attention/utils/fa_utils.py
`get_flash_attn_version`: version 3 only on 9.0). FA2's `mha_varlen_fwd` (vllm-project/flash-attention
csrc/flash_attn/flash_api.cpp) packs the query heads that share a KV head into one query tile
(`seqlenq_ngroups_swapped`, "FlashDecoding") only when `max_seqlen_q == 1`: in a step of decodes only. vLLM's own
`use_cascade_attention` (same flash_attn.py) states the criterion: `use_flash_decoding = num_queries_per_kv > 1
and not use_sliding_window and not use_alibi and np.all(query_lens == 1)`. In a step with a prefill chunk every
decode's query head is a CTA of its own: the paged KV forces FA2's split-KV kernel (`run_mha_fwd(params, stream,
paged_KV)`; `run_mha_fwd_splitkv_dispatch`, kBlockM 64) with one split on grid (m_block, batch, head)
(flash_fwd_launch_template.h `run_flash_splitkv_fwd`), and that CTA streams its KV head's keys and values itself.
The query heads of one KV head are `num_m_block × batch` CTAs apart in launch order, so each re-reads the KV from
HBM unless the decodes' KV of one KV head in one layer stays in L2 meanwhile.

Priced here: in a step with a prefill chunk (some query length > 1), a FlashAttention-2 kernel's decode attention
is the decode-only table time × the query heads per KV head (the table measures the packed kernel, one KV read)
when the decodes' KV of one head (Σ context × (head_dim + v_head_dim) × KV bytes) is larger than the GPU's L2
(`HardwareSpec.l2_cache_bytes`; unknown: taken as larger); else the decode-only time (L2 serves the re-reads). The
work of the 64-row tiles (4 × 64 × context × head_dim FLOPs a query head: 64 FLOP per byte read) stays under
the memory side on every 8.x GPU (A100: 312 TFLOPS / 2.04 TB/s = 153 FLOP/B), so the bytes bound it. Labelled
derived. Not modelled: FA3 (9.0) packs GQA heads whenever the KV cache is paged (hopper/flash_api.cpp
`get_pack_gqa`), so Hopper keeps the decode-only price; MLA and sliding-window kernels (no packing in either step
kind); V0 (separate prefill and decode calls); trees priced by `MemoCost`, pipeline stages and speculative costs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphsim.costing.cost_tree import CompiledTree
from graphsim.costing.hardware import HardwareSpec
from graphsim.ir.geometry import AttentionGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.serving.engine_versions import EngineProfile

FA2_KERNEL = "flash_attn_varlen"  # vLLM's FlashAttention kernel after the fuse pass (passes/fuse/vllm.py)


@dataclass(frozen=True)
class MixedDecode:
    """Per attention leaf of a tree (all leaves; 1 / 0 where nothing changes): the query heads per KV head that
    each re-read the KV in a mixed step, and the KV bytes of one token of one KV head; the GPU's L2 bytes."""

    groups: np.ndarray  # float, per leaf: q heads per KV head (1: no change)
    head_token_bytes: np.ndarray  # float, per leaf: K + V bytes of one token of one KV head
    l2_bytes: float  # 0: unknown (taken as too small to hold the working set)

    def multipliers(self, batch: int, ctx: np.ndarray) -> np.ndarray:
        """(leaves, len(ctx)) factor on each leaf's decode-only time for `batch` decodes at each context."""
        ws = batch * np.asarray(ctx, dtype=np.float64)[None, :] * self.head_token_bytes[:, None]
        spills = ws > self.l2_bytes
        return np.where(spills, self.groups[:, None], 1.0)


def fa2_applies(profile: EngineProfile, hardware: HardwareSpec) -> bool:
    """vLLM's V1 engine (one varlen call a step) on a GPU whose FlashAttention is version 2 (compute capability
    8.x)."""
    return profile.is_vllm and profile.family != "v0" and hardware.compute_capability.startswith("8.")


def mixed_decode(tree: CompiledTree, profile: EngineProfile, hardware: HardwareSpec,
                 kv_bytes: float) -> MixedDecode | None:
    """The mixed-step decode model for `tree`'s FlashAttention-2 leaves, or None where it does not apply (not
    vLLM V1 on an 8.x GPU, or no GQA FlashAttention kernel in the tree)."""
    if not fa2_applies(profile, hardware):
        return None
    n = len(tree.leaves)
    groups, tok = np.ones(n), np.zeros(n)
    for i, lf in enumerate(tree.leaves):
        g = lf.attrs.geometry
        if (lf.attrs.kind is not KernelKind.ATTENTION or lf.attrs.name != FA2_KERNEL
                or not isinstance(g, AttentionGeometry) or g.is_mla or g.window or g.alibi
                or g.num_kv_heads <= 0 or g.num_heads <= g.num_kv_heads):
            continue
        groups[i] = g.num_heads / g.num_kv_heads
        tok[i] = (g.head_dim + g.v_head_dim) * kv_bytes
    if not (groups > 1).any():
        return None
    return MixedDecode(groups, tok, float(hardware.l2_cache_bytes))

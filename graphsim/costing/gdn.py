"""Work of the gated delta rule kernels vLLM runs (Qwen3-Next, Qwen3.5: gated DeltaNet), keyed as elementwise rows
whose op names the geometry.

vLLM's QwenGatedDeltaNetAttention._forward_core (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py)
runs, per layer and step (no speculation): `chunk_gated_delta_rule` over every token of the step when the step
holds a prefill (`if attn_metadata.num_prefills > 0`: its decode tokens too, as one-token sequences of the varlen
batch), with each sequence's state read before and written after; else `fused_sigmoid_gating_delta_rule_update`
over the decode tokens. Per value head of Dk key and Dv value channels (q and k come in Hk ≤ Hv heads, shared by
Hv / Hk value heads; the work is per value head, whose state and beta are its own):

- `fused_recurrent_gated_delta_rule/<geometry>`, one row per decode token (= per decode sequence):
  vllm/model_executor/layers/fla/ops/fused_sigmoid_gating.py fused_sigmoid_gating_delta_rule_update_kernel:
  the state S (Dk × Dv) decayed by exp(g) (Dk·Dv: one multiply per element — the scalar gate still touches the
  whole state), read with the key (2·Dk·Dv), the rank-1 delta update (2·Dk·Dv) and read with the query
  (2·Dk·Dv): 7·Dk·Dv FLOPs. Bytes: q and k (Hk heads) and v (Hv) read and o written in the activation dtype,
  a and b (one each per value head) read, and the whole state read and written in place.
- `chunk_gated_delta_rule/<geometry>`, one row per token of a step with a prefill: vLLM's fla/ops/chunk.py
  chunk_gated_delta_rule_fwd with chunk C (FLA_CHUNK_SIZE 64): chunk_scaled_dot_kkt_fwd builds β·k·kᵀ inside the
  chunk (causal: C·Dk per token), solve_tril inverts the unit-triangular C × C block (C²/3 per token),
  recompute_w_u_fwd forms w = A·(β·k) and u = A·(β·v) (causal: C·Dk + C·Dv), chunk_gated_delta_rule_fwd_h carries
  the state across chunks (v_new = u − w·S and S ← γ·S + kᵀ·v_new: 4·Dk·Dv) and chunk_fwd_o writes
  o = q·S + (q·kᵀ ∘ mask)·v_new (2·Dk·Dv + C·Dk + C·Dv): 6·Dk·Dv + 3·C·Dk + 2·C·Dv + C²/3 FLOPs — the KDA count
  (costing/kda.py), the gate being a scalar per head instead of a vector. Bytes: the io above (g and β in
  fp32), plus what the stages hand each other through memory: A in fp32 (written and read: 2·C·4), its inverse
  in the activation dtype (2·C), w and u (written and read: 2·(Dk + Dv)), v_new (2·Dv) and the chunk states h
  (written and read once per chunk: 2·Dk·Dv/C), in the activation dtype.
- `chunk_gated_delta_rule.state/<geometry>`, one row per sequence of a step with a prefill: its initial state
  read and its final state written (2·Dk·Dv per value head, in the state dtype).

The accountant (work/attention_work.py, gated delta net) counts 6·Hv·Dk·Dv a token: the recurrent form's reads
and rank-1 update, the decay being elementwise. So the decode kernel performs 7/6 of it (the decay multiply over
the state) and the chunked prefill more (the intra-chunk C × C products and the triangular solve, about 1.43×
for Dk = Dv = 128, C = 64): work of the chunked algorithm the recurrence itself does not need, left as the
kernel's. The op name carries the geometry: `h<Hv>.hk<Hk>.k<Dk>.v<Dv>.c<chunk>.s<state dtype>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from graphsim.costing import kda

DECODE = "fused_recurrent_gated_delta_rule"
PREFILL = "chunk_gated_delta_rule"
PREFILL_STATE = "chunk_gated_delta_rule.state"
KINDS = (DECODE, PREFILL, PREFILL_STATE)
DEFAULT_CHUNK = 64  # vllm/model_executor/layers/fla/ops/utils.py FLA_CHUNK_SIZE (chunk_gated_delta_rule_fwd)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.hk(?P<hk>\d+)\.k(?P<k>\d+)\.v(?P<v>\d+)\.c(?P<c>\d+)"
                  r"\.s(?P<s>\w+)$")


@dataclass(frozen=True)
class GdnShape:
    """One rank's gated delta rule: `heads` value heads (each its own state), `k_heads` query/key heads, `k_dim`
    key and `v_dim` value channels, chunk `chunk`, the recurrent state in `state_dtype` (a DType value)."""

    heads: int
    k_heads: int
    k_dim: int
    v_dim: int
    chunk: int
    state_dtype: str

    def tag(self) -> str:
        return f"h{self.heads}.hk{self.k_heads}.k{self.k_dim}.v{self.v_dim}.c{self.chunk}.s{self.state_dtype}"

    @property
    def state_elements(self) -> int:
        return self.heads * self.k_dim * self.v_dim

    @property
    def io_elements(self) -> int:
        """Per token, in the activation dtype: q and k read (key heads), v read and o written (value heads)."""
        return 2 * self.k_heads * self.k_dim + 2 * self.heads * self.v_dim

    @property
    def gate_bytes(self) -> float:
        """Per token: the gate and beta of each value head in fp32."""
        return self.heads * 2 * 4.0


def op_name(kernel: str, shape: GdnShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, GdnShape] | None:
    """(kernel, shape) of an op name made by `op_name`; None for any other op."""
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), GdnShape(int(m.group("h")), int(m.group("hk")), int(m.group("k")), int(m.group("v")),
                                       int(m.group("c")), m.group("s"))


def flops_per_row(kernel: str, s: GdnShape) -> float:
    """FLOPs per row (see the module docstring for each term; KDA's, kda.delta_rule_flops)."""
    if kernel in (DECODE, PREFILL):
        return kda.delta_rule_flops(kernel == DECODE, s.heads, s.k_dim, s.v_dim, s.chunk)
    return 0.0


def bytes_per_row(kernel: str, s: GdnShape, act_bytes: float) -> float:
    """KDA's byte model (kda.delta_rule_bytes) with one fp32 value a chunk position and one key row handed off."""
    decode = True if kernel == DECODE else False if kernel == PREFILL else None
    return kda.delta_rule_bytes(decode, s, act_bytes, fp32_per_position=1, key_copies=1)


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for a gated delta rule op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    return rows * flops_per_row(kernel, shape), rows * bytes_per_row(kernel, shape, act_bytes)


def rows_per_step(g_step: np.ndarray, g_new: np.ndarray, g_count: np.ndarray, n_steps: int) -> dict[str, np.ndarray]:
    """Rows of each kernel per step: the KDA layer's dispatch (kda.rows_per_step) is the same test on the same
    metadata (`if attn_metadata.num_prefills > 0` in qwen_gdn_linear_attn.py _forward_core)."""
    rows = kda.rows_per_step(g_step, g_new, g_count, n_steps)
    return {DECODE: rows[kda.DECODE], PREFILL: rows[kda.PREFILL], PREFILL_STATE: rows[kda.PREFILL_STATE]}

"""Work of the Kimi Delta Attention (KDA) kernels vLLM runs, keyed as elementwise rows whose op names the geometry.

vLLM's KimiDeltaAttention._forward (vllm/model_executor/layers/kda.py) runs, per layer and step:
`chunk_kda` over every token of the step when the step holds a prefill (`attn_metadata.num_prefills > 0`: its
decode tokens too, as one-token sequences of the varlen batch), else `fused_recurrent_kda` over the decode
tokens. The fla ops (vllm/model_executor/layers/fla/ops/kda.py) do, per head of Dk key and Dv value channels:

- `fused_recurrent_kda/<geometry>`, one row per decode token (= per decode sequence, no speculation):
  fused_recurrent_gated_delta_rule_fwd_kernel with IS_KDA: the state S (Dk × Dv) is decayed per key channel
  (Dk·Dv), read with the key (2·Dk·Dv), takes the rank-1 delta update (2·Dk·Dv) and is read with the query
  (2·Dk·Dv): 7·Dk·Dv FLOPs. Bytes: q, k, v read and o written in the activation dtype, the fp32 decay g (Dk)
  and beta (1) read, and the whole fp32 state read and written in place (2·Dk·Dv·4).
- `chunk_kda/<geometry>`, one row per token of a step with a prefill: chunk_kda_fwd with chunk C
  (FLA_CHUNK_SIZE 64): chunk_kda_scaled_dot_kkt_fwd builds the gated k·kᵀ and q·kᵀ blocks inside the chunk
  (causal: C·Dk each per token), solve_tril inverts the unit-triangular C × C block (C³/3 per chunk: C²/3
  per token), recompute_w_u_fwd forms w = A·(β·k·Γ) and u = A·(β·v) (causal: C·Dk + C·Dv),
  chunk_gated_delta_rule_fwd_h carries the state across chunks (v_new = u − w·S and S ← Γ·S + kgᵀ·v_new:
  4·Dk·Dv) and chunk_gla_fwd_o_gk writes o = (q·Γ)·S + Aqk·v_new (2·Dk·Dv + C·Dv):
  6·Dk·Dv + 3·C·Dk + 2·C·Dv + C²/3 FLOPs. Bytes: the io above, plus what the stages hand each other through
  memory: A and Aqk in fp32 (written and read: 2·2·C·4), A's inverse in the activation dtype (2·C), w, kg and u
  (written and read: 2·(2·Dk + Dv)), v_new (2·Dv) and the chunk states h (written and read once per chunk:
  2·Dk·Dv/C), the last three in the activation dtype.
- `chunk_kda.state/<geometry>`, one row per sequence of a step with a prefill: its initial state read and
  its final state written (2·Dk·Dv·4 per head).

The recurrent state is float32 (vllm/model_executor/layers/mamba/mamba_utils.py
MambaStateDtypeCalculator.kda_state_dtype); the op name carries it anyway (`.s<dtype>`), with the heads,
the head dims and the chunk: `h<heads>.k<Dk>.v<Dv>.c<chunk>.s<state dtype>`.

Against the accountant (builders/linear_attn.py KDA: 6·H·Dk·Dv FLOPs a token, the recurrent form's two reads and
rank-1 update, the per-channel decay elementwise): `fused_recurrent_kda` performs 7/6 of it (the decay multiply over
the state) and `chunk_kda` about 1.43× at Dk = Dv = 128, C = 64 (the intra-chunk k·kᵀ, q·kᵀ, the triangular solve
and the w/u products of the chunked algorithm). Both are the kernels' work, which the recurrence does not need,
and are left here (`graphsim analyze`, tiny Kimi-Linear sweep config, tp 1: 1.167 decode, 1.431 prefill).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphsim.ir.tensor import DType

DECODE = "fused_recurrent_kda"
PREFILL = "chunk_kda"
PREFILL_STATE = "chunk_kda.state"
KINDS = (DECODE, PREFILL, PREFILL_STATE)
DEFAULT_CHUNK = 64  # vllm/model_executor/layers/fla/ops/utils.py FLA_CHUNK_SIZE (chunk_kda_fwd)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.k(?P<k>\d+)\.v(?P<v>\d+)\.c(?P<c>\d+)\.s(?P<s>\w+)$")


@dataclass(frozen=True)
class KdaShape:
    """One rank's KDA: `heads` of `k_dim` key and `v_dim` value channels, chunk `chunk`, the recurrent state in
    `state_dtype` (a DType value)."""

    heads: int
    k_dim: int
    v_dim: int
    chunk: int
    state_dtype: str

    def tag(self) -> str:
        return f"h{self.heads}.k{self.k_dim}.v{self.v_dim}.c{self.chunk}.s{self.state_dtype}"

    @property
    def state_elements(self) -> int:
        return self.heads * self.k_dim * self.v_dim

    @property
    def io_elements(self) -> int:
        """Per token, in the activation dtype: q, k, v read and o written."""
        return self.heads * (2 * self.k_dim + 2 * self.v_dim)

    @property
    def gate_bytes(self) -> float:
        """Per token: the fp32 per-channel decay and the fp32 beta (fused_kda_gate's and the sigmoid's outputs)."""
        return self.heads * (self.k_dim + 1) * 4.0


def op_name(kernel: str, shape: KdaShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, KdaShape] | None:
    """(kernel, shape) of an op name made by `op_name`; None for any other op."""
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), KdaShape(int(m.group("h")), int(m.group("k")), int(m.group("v")), int(m.group("c")),
                                       m.group("s"))


def delta_rule_flops(decode: bool, heads: int, k: int, v: int, c: int) -> float:
    """FLOPs per token of a delta-rule recurrence over `heads` states of k × v: the recurrent step (decode) or the
    chunked form with chunk `c` (see the module docstring for each term). The gated delta rule (gdn.py) has the
    same terms."""
    if decode:
        return 7.0 * heads * k * v
    return heads * (6.0 * k * v + 3.0 * c * k + 2.0 * c * v + c * c / 3.0)


def flops_per_row(kernel: str, s: KdaShape) -> float:
    """FLOPs per row (see the module docstring for each term)."""
    if kernel in (DECODE, PREFILL):
        return delta_rule_flops(kernel == DECODE, s.heads, s.k_dim, s.v_dim, s.chunk)
    return 0.0


def delta_rule_bytes(decode: bool | None, s: Any, act_bytes: float, fp32_per_position: int,
                     key_copies: int) -> float:
    """Bytes per row of a delta-rule kernel on shape `s` (heads, k_dim, v_dim, chunk, state_dtype, io_elements,
    gate_bytes, state_elements): the recurrent step (`decode` True: its I/O and the state read and written), the
    chunked form (False: its I/O and the chunk hand-off between its kernels: `fp32_per_position` fp32 values a chunk
    position, written and read; the chunk, `key_copies` key and one value row, a value row and the k × v / c state
    share, each written and read in the activation dtype) or the per-sequence state pass (None). KDA hands off two
    fp32 values a position and two key rows (the decayed key), the gated delta rule (gdn.py) one and one."""
    state_bytes = DType(s.state_dtype).bytes_per_element
    io = s.io_elements * act_bytes + s.gate_bytes
    if decode:
        return io + 2.0 * s.state_elements * state_bytes
    if decode is False:
        k, v, c = s.k_dim, s.v_dim, s.chunk
        handoff = s.heads * (2.0 * fp32_per_position * c * 4.0
                             + (2.0 * c + 2.0 * (key_copies * k + v) + 2.0 * v + 2.0 * k * v / c) * act_bytes)
        return io + handoff
    return 2.0 * s.state_elements * state_bytes


def bytes_per_row(kernel: str, s: KdaShape, act_bytes: float) -> float:
    decode = True if kernel == DECODE else False if kernel == PREFILL else None
    return delta_rule_bytes(decode, s, act_bytes, fp32_per_position=2, key_copies=2)


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for a KDA op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    return rows * flops_per_row(kernel, shape), rows * bytes_per_row(kernel, shape, act_bytes)


def rows_per_step(g_step: np.ndarray, g_new: np.ndarray, g_count: np.ndarray, n_steps: int) -> dict[str, np.ndarray]:
    """Rows of each KDA kernel per step from its sequence groups (step, new tokens, count): a step with any
    prefill group runs every token on chunk_kda and every sequence's state once; a decode-only step runs its
    tokens on fused_recurrent_kda (kda.py KimiDeltaAttention._forward: `if attn_metadata.num_prefills > 0`)."""
    has_prefill = np.bincount(g_step[g_new > 1], minlength=n_steps) > 0
    tokens = np.bincount(g_step, weights=g_new * g_count, minlength=n_steps)
    seqs = np.bincount(g_step, weights=g_count, minlength=n_steps)
    return {
        DECODE: np.where(has_prefill, 0.0, tokens),
        PREFILL: np.where(has_prefill, tokens, 0.0),
        PREFILL_STATE: np.where(has_prefill, seqs, 0.0),
    }

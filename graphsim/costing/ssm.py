"""Work of the Mamba2 (SSD) scan kernels vLLM runs, keyed as elementwise rows whose op names the geometry.

vLLM's MambaMixer2 (model_executor/layers/mamba/mamba_mixer2.py, forward: prefill tokens through
`mamba_chunk_scan_combined_varlen`, decode tokens through `selective_state_update`, ops/ssd_combined.py and
ops/mamba_ssm.py) does three kinds of work per step, each a part of the scan kernel's price
(`kernel_map.kernel_rows`):

- `selective_state_update/<geometry>`, one row per decode token (= per decode sequence): reads x, B, C, dt,
  writes y, and reads and writes the sequence's whole temporal state (heads × head_dim × state in the
  mamba_ssm_cache_dtype): S ← exp(Δ·A)·S + Δ·x⊗B; y = S·C + D·x, about 5 FLOPs per state element.
- `mamba_chunk_scan_combined/<geometry>`, one row per prefill token: the SSD chunked algorithm (Mamba2 paper,
  arXiv:2405.21060 §6; vLLM's five Triton kernels _chunk_cumsum, _chunk_state, _state_passing, _bmm_chunk,
  _chunk_scan). Per token with chunk Q, H heads of P, state N, G groups:
  CB within the chunk 2·Q·N·G; the causal intra-chunk product (CB∘L)·x Q·P·H (half of 2·Q·P·H: the kernel
  skips blocks above the diagonal); chunk states Bᵀx 2·N·P·H; state → output C·S 2·N·P·H; inter-chunk
  passing 2·N·P·H/Q. Bytes: x, B, C, dt read and y written in the activation dtype, the fp32 CB block
  (written and read: 2·Q·G·4) and the fp32 chunk states (written by _chunk_state, read and written by
  _state_passing, read by _chunk_scan: 4·H·P·N/Q·4).
- `mamba_chunk_scan_combined.state/<geometry>`, one row per prefill sequence: its initial state read and its
  final state written (2 × heads × head_dim × state in the state dtype).

The op name carries the geometry (`h<heads>.p<head_dim>.n<state>.g<groups>.c<chunk>.s<state dtype>`), as
`rms_norm/dim128` does for per-head norms: the elementwise key's width alone does not say what the kernel
costs, so a measured row must be keyed on all of it.

Against the accountant (work/attention_work.py, Mamba2: 4·H·P·N FLOPs a token, the recurrent form's rank-1 update
and read-out, the decay exp(Δ·A)·h counted as elementwise): `selective_state_update` performs 5/4 of it (the decay
multiply over the whole state, which the kernel does and the accountant's convention leaves out) and the chunked
scan more (the intra-chunk CB and (CB∘L)·x products of the SSD algorithm, §6, which the recurrence does not need:
1.63× on the tiny Mamba2 sweep config at prefill:4x512). Both are the kernels' work, not an accountant error, and
are left here; `graphsim analyze` shows them as the scan's excess (measured 2026-12-01, tp 1, derived map).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from graphsim.ir.tensor import DType

DECODE = "selective_state_update"
PREFILL = "mamba_chunk_scan_combined"
PREFILL_STATE = "mamba_chunk_scan_combined.state"
KINDS = (DECODE, PREFILL, PREFILL_STATE)
DEFAULT_CHUNK = 256  # MambaMixer2's chunk_size default when a config states none (mamba_mixer2.py __init__)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.p(?P<p>\d+)\.n(?P<n>\d+)\.g(?P<g>\d+)\.c(?P<c>\d+)\.s(?P<s>\w+)$")


@dataclass(frozen=True)
class SsmShape:
    """One rank's Mamba2 scan: `heads` of `head_dim`, `state` per head, `groups` of B/C, chunk `chunk`, the
    temporal state stored in `state_dtype` (a DType value: f32, bf16, f16)."""

    heads: int
    head_dim: int
    state: int
    groups: int
    chunk: int
    state_dtype: str

    def tag(self) -> str:
        return f"h{self.heads}.p{self.head_dim}.n{self.state}.g{self.groups}.c{self.chunk}.s{self.state_dtype}"

    @property
    def state_elements(self) -> int:
        return self.heads * self.head_dim * self.state

    @property
    def io_elements(self) -> int:
        """Per token: x, B, C and dt read, y written."""
        return 2 * self.heads * self.head_dim + 2 * self.groups * self.state + self.heads


def op_name(kernel: str, shape: SsmShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, SsmShape] | None:
    """(kernel, shape) of an op name made by `op_name`; None for any other op."""
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), SsmShape(int(m.group("h")), int(m.group("p")), int(m.group("n")), int(m.group("g")),
                                       int(m.group("c")), m.group("s"))


def flops_per_token(kernel: str, s: SsmShape) -> float:
    """FLOPs per row (see the module docstring for each term)."""
    h, p, n, g, q = s.heads, s.head_dim, s.state, s.groups, s.chunk
    if kernel == DECODE:
        return 5.0 * h * p * n
    if kernel == PREFILL:
        return 2.0 * q * n * g + q * p * h + 4.0 * n * p * h + 2.0 * n * p * h / q
    return 0.0


def bytes_per_row(kernel: str, s: SsmShape, act_bytes: float) -> float:
    state_bytes = DType(s.state_dtype).bytes_per_element
    if kernel == DECODE:
        return s.io_elements * act_bytes + 2.0 * s.state_elements * state_bytes
    if kernel == PREFILL:
        return s.io_elements * act_bytes + 2.0 * s.chunk * s.groups * 4.0 + 4.0 * s.state_elements / s.chunk * 4.0
    return 2.0 * s.state_elements * state_bytes


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for a scan op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    return rows * flops_per_token(kernel, shape), rows * bytes_per_row(kernel, shape, act_bytes)

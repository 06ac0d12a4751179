"""Work of the Mamba-1 selective-scan kernels vLLM runs, keyed as elementwise rows whose op names the geometry.

vLLM's MambaMixer (model_executor/layers/mamba/mamba_mixer.py, forward_cuda: prefill tokens through
`selective_scan_fn`, decode tokens through `selective_state_update`, ops/mamba_ssm.py; the CUDA scan is
csrc/mamba/mamba_ssm/selective_scan_fwd.cu) does three kinds of work per step, each a part of the scan kernel's
price (`kernel_map.kernel_rows`). One rank holds D channels (intermediate_size / tp), each with a state of N
(ssm_state_size); B and C are one group of N shared by every channel.

- `selective_state_update/<geometry>`, one row per decode token (= per decode sequence): reads x, dt, z and B, C,
  writes y, and reads and writes the sequence's whole state (D × N in the mamba_ssm_cache_dtype).
- `selective_scan_fn/<geometry>`, one row per prefill token: the same recurrence run along the sequence with the
  state in registers (selective_scan_fwd.cu keeps it on chip across its chunks of 2048 tokens), so per token only
  x, dt, z, B, C are read and y written.
- `selective_scan_fn.state/<geometry>`, one row per prefill sequence: its initial state read and its final state
  written (2 × D × N in the state dtype).

FLOPs per token and channel (Mamba, arXiv:2312.00752 Algorithm 2; the kernel computes exp(Δ·A) per state element,
as A is D × N): per state element Δ·A, its exp, Δ·B, ·x, the decay multiply, the add, ·C and the sum over N —
8 · D · N; per channel the bias add, softplus (exp, log1p, add: 3), the D skip (mul, add) and the silu gate (exp,
add, div, mul) — 10 · D.

Each decode or prefill launch also reads the parameters once: A (D × N fp32, stored so by MambaMixer's
A_weight_loader), D and the dt bias (D each; counted at fp32, the `.float()` the prefill path passes; decode passes
D in the model dtype: at most 2·D bytes over). They are added once per step that has such rows, not per row.

The op name carries the geometry (`d<channels>.n<state>.s<state dtype>`) so a measured row is keyed on all of it.
Not modelled: the intermediate states vLLM's prefix-caching mode writes every mamba_block_size tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from graphsim.ir.tensor import DType

DECODE = "selective_state_update"
PREFILL = "selective_scan_fn"
PREFILL_STATE = "selective_scan_fn.state"
KINDS = (DECODE, PREFILL, PREFILL_STATE)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/d(?P<d>\d+)\.n(?P<n>\d+)\.s(?P<s>\w+)$")


@dataclass(frozen=True)
class Mamba1Shape:
    """One rank's Mamba-1 scan: `channels` (intermediate_size / tp), `state` per channel (ssm_state_size), the state
    stored in `state_dtype` (a DType value)."""

    channels: int
    state: int
    state_dtype: str

    def tag(self) -> str:
        return f"d{self.channels}.n{self.state}.s{self.state_dtype}"

    @property
    def state_elements(self) -> int:
        return self.channels * self.state

    @property
    def io_elements(self) -> int:
        """Per token: x, dt, z read and y written (D each), B and C read (N each)."""
        return 4 * self.channels + 2 * self.state

    @property
    def param_bytes(self) -> float:
        """A (D × N), D and the dt bias (D each), fp32, read once per launch."""
        return 4.0 * (self.state_elements + 2 * self.channels)


def op_name(kernel: str, shape: Mamba1Shape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, Mamba1Shape] | None:
    """(kernel, shape) of an op name made by `op_name`; None for any other op."""
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), Mamba1Shape(int(m.group("d")), int(m.group("n")), m.group("s"))


def flops_per_row(kernel: str, s: Mamba1Shape) -> float:
    """FLOPs per decode or prefill token (the module docstring's terms); none for the state rows."""
    if kernel in (DECODE, PREFILL):
        return 8.0 * s.channels * s.state + 10.0 * s.channels
    return 0.0


def bytes_per_row(kernel: str, s: Mamba1Shape, act_bytes: float) -> float:
    state_bytes = DType(s.state_dtype).bytes_per_element
    if kernel == DECODE:
        return s.io_elements * act_bytes + 2.0 * s.state_elements * state_bytes
    if kernel == PREFILL:
        return s.io_elements * act_bytes
    return 2.0 * s.state_elements * state_bytes


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` (one launch each) for a Mamba-1 scan op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    once = np.where(rows > 0, shape.param_bytes, 0.0) if kernel != PREFILL_STATE else 0.0
    return rows * flops_per_row(kernel, shape), rows * bytes_per_row(kernel, shape, act_bytes) + once

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

The kernels compute in fp32 on the CUDA cores (selective_scan_fwd.cu: `weight_t` float, inputs converted to float;
the Triton `selective_state_update` casts to tl.float32), so the key's dtype is fp32 (its compute term runs at the
spec's fp32 peak) and the op name carries the activation dtype the io is read and written in. FLOPs are counted as
fp32-FMA-pipe equivalents: an exp / log / reciprocal runs on the special-function units at 16 results per clock per SM
against 128 fp32 FMAs (= 256 FLOPs) on compute capability 8.x–9.0 (CUDA C++ Programming Guide, "Arithmetic
Instructions", throughput table: exp2f / __log2f / reciprocal vs 32-bit add, multiply, multiply-add), so each counts
`SFU_FLOPS` = 16. Per token (Mamba, arXiv:2312.00752 Algorithm 2; exp(Δ·A) is per state element, as A is D × N):

- per state element, decode (`selective_state_update`): Δ·A 1, its exp 16, Δ·B 1, ·x 1, the decay FMA 2, y += h·C 2
  — 23; prefill (`selective_scan_fn`: `exp2f(delta * A)`, `B * delta_u`, then cub's BlockScan applies the (a, b)
  combine — a multiply and an FMA, 3 — about twice per element: a thread's reduce, then its scan with the carried
  prefix; y += h·C 2) — 1 + 16 + 1 + 2·3 + 2 = 26;
- per channel, both: the dt bias 1, softplus (exp, log1p, add) 33, Δ·x 1, the D skip FMA 2, the silu gate
  (exp, add, reciprocal, two multiplies) 35 — 72.

The op name carries the geometry (`d<channels>.n<state>.s<state dtype>.a<activation dtype>`) so a measured row is keyed
on all of it.
Not modelled: the intermediate states vLLM's prefix-caching mode writes every mamba_block_size tokens.

Against the accountant (work/attention_work.py, Mamba-1: 4·D·N FLOPs a token, the rank-1 update and read-out, the
decay and the per-channel work elementwise) these counts are 6.9× (decode) and 7.6× (prefill) on the tiny Mamba
sweep config (`graphsim analyze`, tp 1, 2026-12-01): the per-element exp(Δ·A) weighted as 16 FMA-pipe FLOPs, the
decay multiply and the per-channel softplus, skip and gate. They are the kernels' work in the unit that prices
them on CUDA cores (fp32 FMA-pipe equivalents), not the accountant's matrix-shaped FLOPs, and are left as they are.
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

SFU_FLOPS = 16.0  # an exp / log / reciprocal in fp32-FLOP equivalents (module docstring)
COMPUTE_DTYPE = "fp32"  # the KernelDtype of the scan's key: the math runs in fp32 on CUDA cores

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/d(?P<d>\d+)\.n(?P<n>\d+)\.s(?P<s>[a-z0-9]+)\.a(?P<a>[a-z0-9]+)$")


@dataclass(frozen=True)
class Mamba1Shape:
    """One rank's Mamba-1 scan: `channels` (intermediate_size / tp), `state` per channel (ssm_state_size), the state
    stored in `state_dtype`, x / dt / z / B / C / y in `act_dtype` (DType values)."""

    channels: int
    state: int
    state_dtype: str
    act_dtype: str

    def tag(self) -> str:
        return f"d{self.channels}.n{self.state}.s{self.state_dtype}.a{self.act_dtype}"

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
    return m.group("kernel"), Mamba1Shape(int(m.group("d")), int(m.group("n")), m.group("s"), m.group("a"))


def flops_per_row(kernel: str, s: Mamba1Shape) -> float:
    """fp32 FLOP equivalents per decode or prefill token (the module docstring's terms); none for the state rows."""
    per_channel = 2.0 * SFU_FLOPS + 1 + 1 + 1 + 2 + (2.0 * SFU_FLOPS + 3)  # bias, softplus, Δ·x, D skip, gate: 72
    if kernel == DECODE:
        return (1 + SFU_FLOPS + 1 + 1 + 2 + 2) * s.state_elements + per_channel * s.channels  # 23 per element
    if kernel == PREFILL:
        return (1 + SFU_FLOPS + 1 + 2 * 3 + 2) * s.state_elements + per_channel * s.channels  # 26 per element
    return 0.0


def bytes_per_row(kernel: str, s: Mamba1Shape) -> float:
    state_bytes = DType(s.state_dtype).bytes_per_element
    act_bytes = DType(s.act_dtype).bytes_per_element
    if kernel == DECODE:
        return s.io_elements * act_bytes + 2.0 * s.state_elements * state_bytes
    if kernel == PREFILL:
        return s.io_elements * act_bytes
    return 2.0 * s.state_elements * state_bytes


def work(op: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(fp32 FLOP equivalents, bytes) at `rows` (one launch each) for a Mamba-1 scan op name; None when `op` is not
    one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    once = np.where(rows > 0, shape.param_bytes, 0.0) if kernel != PREFILL_STATE else 0.0
    return rows * flops_per_row(kernel, shape), rows * bytes_per_row(kernel, shape) + once

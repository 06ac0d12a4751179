"""Work of MiniMax-Text-01's lightning-attention kernels as vLLM runs them, keyed as elementwise rows whose op names
the geometry.

vLLM's MiniMaxText01LinearAttention._forward (vllm/model_executor/layers/mamba/linear_attn.py) casts q, k, v to
float32 (`qkv32 = qkv.to(torch.float32)`, silu), runs every prefill sequence through `lightning_attention`
(`MiniMaxText01LinearKernel.jit_linear_forward_prefix`, vllm/model_executor/layers/lightning_attn.py, blocks of the
config's `block_size`) and the step's decode tokens through `linear_decode_forward_triton`, per head of D channels
with the per-head decay λ:

- `linear_decode_forward_triton/<geometry>`, one row per decode token: S ← λ·S + kᵀv (decay D², outer product
  and add 2·D²) and o = q·S (2·D²): 5·D² FLOPs per head. Bytes: q, k, v read and o written in float32 (4·D·4) and
  the state read and written (2·D² in the state dtype).
- `lightning_attention/<geometry>`, one row per prefill token: within its block of B tokens the causal
  (q·kᵀ ∘ decay)·v (B·D + B·D: the kernel skips the blocks above the diagonal), with the carried state q·S (2·D²)
  and the state update kᵀv (2·D²): 4·D² + 2·B·D FLOPs per head. Bytes: the fp32 io (4·D·4) and the fp32 state
  carried between blocks (written and read once per block: 2·D²·4/B).
- `lightning_attention.state/<geometry>`, one row per prefill sequence: its state read and written once
  (`kv_history`, 2·D² in the state dtype).

The state is kept in the model dtype (vllm/model_executor/layers/mamba/mamba_utils.py
MambaStateDtypeCalculator.linear_attention_state_dtype: the mamba cache dtype, "auto" = the model's). Op names:
`h<heads>.d<head_dim>.b<block>.s<state dtype>`.

Against the accountant (builders/linear_attn.py lightning attention: 4·H·D² FLOPs a token, the state update and
read-out, the decay elementwise): the decode kernel performs 5/4 of it (the decay λ·S over the state) and the prefill
kernel 1 + B/(2·D) of it (the intra-block (q·kᵀ ∘ decay)·v: 2.0× on the tiny MiniMax-Text-01 sweep config, B = 2·D).
Both are the kernels' work, which the recurrence does not need, and are left here (`graphsim analyze`, tp 1,
2026-12-01).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from graphsim.ir.tensor import DType

DECODE = "linear_decode_forward_triton"
PREFILL = "lightning_attention"
PREFILL_STATE = "lightning_attention.state"
KINDS = (DECODE, PREFILL, PREFILL_STATE)
DEFAULT_BLOCK = 256  # MiniMaxConfig.block_size's default (transformers models/minimax), vLLM's self.BLOCK

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.d(?P<d>\d+)\.b(?P<b>\d+)\.s(?P<s>\w+)$")


@dataclass(frozen=True)
class LightningShape:
    heads: int
    head_dim: int
    block: int
    state_dtype: str

    def tag(self) -> str:
        return f"h{self.heads}.d{self.head_dim}.b{self.block}.s{self.state_dtype}"

    @property
    def state_elements(self) -> int:
        return self.heads * self.head_dim * self.head_dim

    @property
    def io_bytes(self) -> float:
        """Per token: q, k, v read and o written, in float32."""
        return 4.0 * self.heads * self.head_dim * 4.0


def op_name(kernel: str, shape: LightningShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, LightningShape] | None:
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), LightningShape(int(m.group("h")), int(m.group("d")), int(m.group("b")), m.group("s"))


def flops_per_row(kernel: str, s: LightningShape) -> float:
    d, b = s.head_dim, s.block
    if kernel == DECODE:
        return 5.0 * s.heads * d * d
    if kernel == PREFILL:
        return s.heads * (4.0 * d * d + 2.0 * b * d)
    return 0.0


def bytes_per_row(kernel: str, s: LightningShape) -> float:
    state_bytes = DType(s.state_dtype).bytes_per_element
    if kernel == DECODE:
        return s.io_bytes + 2.0 * s.state_elements * state_bytes
    if kernel == PREFILL:
        return s.io_bytes + 2.0 * s.state_elements * 4.0 / s.block
    return 2.0 * s.state_elements * state_bytes


def work(op: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for a lightning-attention op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, shape = parsed
    return rows * flops_per_row(kernel, shape), rows * bytes_per_row(kernel, shape)

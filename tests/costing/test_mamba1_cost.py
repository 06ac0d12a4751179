"""Pricing of Mamba-1's selective scan (graphsim/costing/mamba1.py): FLOPs and bytes of one scan step by hand, the
split of a step's rows into vLLM's decode, prefill and prefill-state work, and the roofline reading the same work."""

from __future__ import annotations

import numpy as np

from graphsim.costing import mamba1, ssm
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows
from graphsim.costing.kernels import ElementwiseKey
from graphsim.costing.roofline import kernel_work
from graphsim.ir.geometry import LinearAttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step

# 8 channels, state 4, the state kept in fp32; activations bf16 (2 bytes)
SHAPE = mamba1.Mamba1Shape(channels=8, state=4, state_dtype="f32", act_dtype="bf16")


def _work(kernel: str, rows: list[float]) -> tuple[list[float], list[float]]:
    w = mamba1.work(mamba1.op_name(kernel, SHAPE), np.array(rows))
    assert w is not None
    return list(w[0]), list(w[1])


def test_one_scan_step_by_hand():
    # fp32 FLOP equivalents per token, an exp / log / reciprocal counted 16 (SFU: 16 a clock against 256 FMA FLOPs):
    # per channel 72 (dt bias 1, softplus 2·16 + 1, Δ·x 1, D skip 2, silu gate 2·16 + 3) × 8 channels = 576;
    # per state element, decode 23 (Δ·A 1, exp 16, Δ·B 1, ·x 1, decay FMA 2, ·C FMA 2) × 32 = 736 → 1312;
    # prefill 26 (Δ·A 1, exp 16, B·Δx 1, two scan combines 2·3, ·C FMA 2) × 32 = 832 → 1408.
    # io elements: x, dt, z, y 4·8 + B, C 2·4 = 40 → 80 bytes in bf16; state 8·4 = 32 elements, fp32.
    # Parameters once per launch: A 32 + D 8 + dt bias 8 = 48 fp32 values = 192 bytes.
    flops, nbytes = _work(mamba1.DECODE, [1.0, 3.0])
    # decode reads and writes each sequence's state: 80 + 2·32·4 = 336 bytes a token, + 192 once
    assert flops == [1312.0, 3936.0]
    assert nbytes == [336.0 + 192.0, 3 * 336.0 + 192.0]
    flops, nbytes = _work(mamba1.PREFILL, [1.0, 3.0])
    # prefill keeps the state on chip along the sequence: 80 bytes a token, + 192 once
    assert flops == [1408.0, 4224.0]
    assert nbytes == [80.0 + 192.0, 240.0 + 192.0]
    flops, nbytes = _work(mamba1.PREFILL_STATE, [1.0, 3.0])
    # per prefill sequence: its initial state read and final state written, 2·32·4 = 256 bytes
    assert flops == [0.0, 0.0] and nbytes == [256.0, 768.0]
    # a step without such rows reads no parameters either
    assert _work(mamba1.DECODE, [0.0]) == ([0.0], [0.0])


def test_op_names_do_not_collide_with_the_mamba2_scan():
    name = mamba1.op_name(mamba1.DECODE, SHAPE)
    assert name == "selective_state_update/d8.n4.sf32.abf16"
    assert mamba1.parse(name) == (mamba1.DECODE, SHAPE)
    assert ssm.parse(name) is None  # the Mamba2 key's geometry is h.p.n.g.c.s
    assert mamba1.parse("selective_state_update/h2.p4.n8.g1.c4.sf32") is None
    assert mamba1.work("rms_norm/dim128", np.array([1.0])) is None


def test_roofline_reads_the_same_work():
    # the key is fp32 (the kernels' math dtype: its compute term at the fp32 peak); the io bytes follow the op name
    key = ElementwiseKey(mamba1.op_name(mamba1.DECODE, SHAPE), SHAPE.io_elements, KernelDtype.FP32)
    w = kernel_work(key, np.array([[3.0]]))
    assert w is not None and list(w.flops) == [3936.0] and list(w.bytes) == [3 * 336.0 + 192.0]


def test_kernel_rows_split_decode_prefill_and_state():
    # one rank of a Mamba-1 mixer: 8 channels (heads of one value), state 4, one B/C group
    geo = LinearAttentionGeometry(num_k_heads=1, num_v_heads=8, k_head_dim=4, v_head_dim=1, kind="mamba1",
                                  state_dtype="f32")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "selective_scan_fn", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    rows = kernel_rows(a, StepArrays.of(steps), Dtypes())
    ops = [p.key.op for p in rows.parts if isinstance(p.key, ElementwiseKey)]
    assert len(ops) == len(rows.parts) == 3
    got = {op.split("/")[0]: (list(p.coords[:, 0]), list(p.step)) for op, p in zip(ops, rows.parts, strict=True)}
    # step 0: 3 decode tokens, 2 × 10 prefill tokens, 2 prefill states; step 1: 5 decode tokens only
    assert got == {"selective_state_update": ([3.0, 5.0], [0, 1]), "selective_scan_fn": ([20.0], [0]),
                   "selective_scan_fn.state": ([2.0], [0])}
    assert all(op.endswith("/d8.n4.sf32.abf16") for op in ops)
    assert {p.key.dtype for p in rows.parts} == {KernelDtype.FP32}

"""Op groups and TensorSpec / dim / dtype basics."""

from __future__ import annotations

from collections import Counter

import pytest
import sympy

from graphsim.ir import OP_GROUPS, DType, Op, OpGroup, T, TensorSpec, dim_symbol, parse_dim, parse_dtype
from graphsim.ir.attrs import ATTRS_FOR_OP
from graphsim.ir.ops import _GROUP_MEMBERS, VIEW_LIKE


def test_every_op_is_in_exactly_one_group():
    membership = Counter(op for members in _GROUP_MEMBERS.values() for op in members)
    assert set(membership) == set(Op)
    assert [op for op, n in membership.items() if n != 1] == []
    assert set(OP_GROUPS) == set(Op)
    for op in Op:
        assert op in _GROUP_MEMBERS[op.group]


def test_every_group_has_members():
    assert all(_GROUP_MEMBERS.get(g) for g in OpGroup)


def test_group_spot_checks():
    assert Op.LINEAR.group is OpGroup.MATMUL
    assert Op.ATTENTION.group is OpGroup.ATTENTION
    assert Op.RMS_NORM.group is OpGroup.NORM
    assert Op.ALL_REDUCE.group is OpGroup.COLLECTIVE
    assert Op.MOE_EXPERTS.group is OpGroup.MOE
    assert Op.OPAQUE.group is OpGroup.OPAQUE
    assert {op for op in Op if op.group is OpGroup.DATA_MOVEMENT} >= VIEW_LIKE
    assert set(ATTRS_FOR_OP) <= set(Op)


# --- dims --------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("4096", 4096),
    ("T", T),
    ("2*T", 2 * T),
    ("T + 7", T + 7),
    ("floor(T/2)", sympy.floor(T / 2)),
    ("batch*T", dim_symbol("batch") * T),
])
def test_parse_dim(text, expected):
    assert parse_dim(text) == expected
    assert parse_dim(str(expected)) == expected


@pytest.mark.parametrize("name", ["batch", "E", "I", "N", "S", "Q", "beta", "gamma", "pi", "seq_len"])
def test_named_dims_stay_positive_integer_symbols(name):
    """Names sympy knows (E, I, beta, ...) must still read back as the dim symbol that was written."""
    sym = dim_symbol(name)
    assert sym.is_positive and sym.is_integer
    assert parse_dim(name) == sym
    assert parse_dim(str(3 * sym + T)) == 3 * sym + T


def test_dim_symbol_T_is_the_workload_symbol():
    assert dim_symbol("T") is T


def test_dim_symbol_rejects_non_identifiers():
    for bad in ("a-b", "lambda", "1x", ""):
        with pytest.raises(ValueError):
            dim_symbol(bad)


def test_parse_dim_rejects_garbage():
    for bad in ("2*(", "lambda", "a b c"):
        with pytest.raises((ValueError, SyntaxError, TypeError)):
            parse_dim(bad)


# --- TensorSpec --------------------------------------------------------------------------------
def test_numel_and_bytes():
    s = TensorSpec((T, 4096), DType.BFLOAT16)
    assert s.numel == 4096 * T
    assert s.nbytes == 8192 * T
    assert s.is_symbolic and s.rank == 2
    assert s.evaluate({"T": 3}) == (3, 4096)


def test_fractional_bytes():
    assert DType.FLOAT4.bytes == 0.5 and DType.INT4.bytes == 0.5
    assert TensorSpec((4096, 14336), DType.FLOAT4).nbytes == 4096 * 14336 // 2
    assert TensorSpec((3,), DType.INT4).nbytes == sympy.Rational(3, 2)
    assert TensorSpec((T, 3), DType.FLOAT4).nbytes == sympy.Rational(3, 2) * T


def test_integer_exprs_normalise_to_int():
    s = TensorSpec((sympy.Integer(5), T - T + 2), DType.FLOAT32)
    assert s.shape == (5, 2) and all(type(d) is int for d in s.shape)
    assert not s.is_symbolic


@pytest.mark.parametrize("spec", [
    TensorSpec((), DType.FLOAT32),
    TensorSpec((T,), DType.INT64),
    TensorSpec((2 * T, 8, T + 7), DType.FLOAT4),
    TensorSpec((sympy.Max(dim_symbol("batch"), T), 3), DType.BOOL),
    TensorSpec((sympy.floor(T / 64), dim_symbol("E")), DType.FLOAT8_E4M3),
])
def test_spec_string_round_trip(spec):
    assert TensorSpec.from_str(spec.to_str()) == spec
    assert str(TensorSpec.from_str(str(spec))) == str(spec)


def test_parse_dtype_aliases():
    assert parse_dtype("torch.bfloat16") is DType.BFLOAT16
    assert parse_dtype("float16") is DType.FLOAT16
    assert parse_dtype("f8e4m3") is DType.FLOAT8_E4M3
    assert parse_dtype("fp4") is DType.FLOAT4
    with pytest.raises(ValueError):
        parse_dtype("float7")

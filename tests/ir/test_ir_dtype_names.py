"""One element-dtype enum: the IR, the accountant and the kernel dtypes read the same names."""

from __future__ import annotations

import pytest

from graphsim.costing.dtypes import KernelDtype, kernel_dtype_of, parse_kernel_dtype
from graphsim.errors import ConfigError
from graphsim.ir import DType
from graphsim.work import dtypes as work_dtypes


def test_the_accountant_uses_the_ir_enum():
    assert work_dtypes.DType is DType
    # vLLM's --kv-cache-dtype spellings and torch's names land on the same members everywhere.
    for name, member in [("fp8", DType.FLOAT8_E4M3), ("fp8_e4m3", DType.FLOAT8_E4M3), ("e4m3", DType.FLOAT8_E4M3),
                         ("float8_e4m3fn", DType.FLOAT8_E4M3), ("fp8_e5m2", DType.FLOAT8_E5M2),
                         ("torch.bfloat16", DType.BFLOAT16), ("half", DType.FLOAT16), ("int4", DType.INT4)]:
        assert work_dtypes.parse_dtype(name) is member, name


def test_labels_and_sizes():
    # Labels are the config / vLLM names the accountant prints; sizes are bytes per element.
    assert [d.label for d in work_dtypes.ACCOUNTED] == ["fp32", "bf16", "fp16", "fp8", "fp8_e5m2", "int8", "int4"]
    assert [d.bytes_per_element for d in work_dtypes.ACCOUNTED] == [4.0, 2.0, 2.0, 1.0, 1.0, 1.0, 0.5]


def test_the_accountant_refuses_types_that_hold_no_model_state():
    for name in ("bool", "int64", "complex64", "fp7"):
        with pytest.raises(ConfigError, match="use one of bf16, fp16, fp32, fp8, fp8_e5m2, int4, int8"):
            work_dtypes.parse_dtype(name)


def test_kernel_modes_follow_the_element_type():
    assert kernel_dtype_of(DType.FLOAT8_E5M2) is KernelDtype.FP8  # same bytes, same fp8 peak as e4m3
    assert parse_kernel_dtype("e5m2") is KernelDtype.FP8 and parse_kernel_dtype("f16") is KernelDtype.FP16
    assert parse_kernel_dtype("sq") is KernelDtype.INT8_SQ and parse_kernel_dtype("w4afp8") is KernelDtype.W4AFP8
    with pytest.raises(ValueError, match="no kernel dtype runs int4"):
        kernel_dtype_of(DType.INT4)  # 4-bit weights need a scheme (int4_wo, nvfp4, mxfp4)
    with pytest.raises(ValueError, match="unknown kernel dtype 'int4'"):
        parse_kernel_dtype("int4")

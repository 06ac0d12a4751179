"""A checkpoint's quantization reaches the kernels: fp8 GEMM keys, halved roofline bytes, fp8 KV by default."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("torch")

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes, key_for
from graphsim.costing.kernels import GemmKey
from graphsim.costing.roofline import kernel_work
from graphsim.errors import ConfigError
from graphsim.ir.kernel import KernelKind

FP8_PER_TENSOR = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                  "exclude_modules": ["lm_head"]}


def _tiny(quant: dict | None) -> ResolvedModel:
    cfg = copy.deepcopy(resolve_model("qwen3-32b").config)
    cfg.pop("quantization_config", None)
    # Qwen3-32B's head_dim 128 with 4 query / 2 KV heads: qkv_proj n = (4 + 2 + 2) × 128 = 1024, k = 64
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
               max_position_embeddings=256, num_hidden_layers=1)
    if quant is not None:
        cfg["quantization_config"] = quant
    return ResolvedModel("tiny-qwen3", cfg, "path", "test")


@pytest.fixture(scope="module")
def fused():
    from graphsim.importers.hf import import_hf
    from graphsim.passes import run_pipeline

    graph, _ = import_hf(_tiny(FP8_PER_TENSOR))
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


def test_quantized_linears_are_fp8_gemms_and_the_excluded_head_stays_bf16(fused):
    dtypes = {n.kernel.name: n.kernel.dtype for n in fused.nodes if n.kernel.kind is KernelKind.GEMM}
    assert dtypes == {"qkv_proj": "fp8", "o_proj": "fp8", "gate_up_proj": "fp8", "down_proj": "fp8",
                      "lm_head": "bf16"}


def test_fp8_gemm_key_halves_the_roofline_bytes_and_kv_is_fp8(fused):
    dt = Dtypes.for_graph(fused.meta)
    assert dt.kv is KernelDtype.FP8  # kv_cache_quant_algo: FP8, no --kv-cache-dtype given
    assert Dtypes.for_graph(fused.meta, "bf16").kv is KernelDtype.BF16  # the user's choice wins
    qkv = next(n.kernel for n in fused.nodes if n.kernel.name == "qkv_proj")
    key = key_for(qkv, dt)
    assert key == GemmKey(1024, 64, KernelDtype.FP8)
    # one token (m = 1): bf16 reads 64 × 2 + 64 × 1024 × 2 and writes 1024 × 2 = 133,248 B;
    # fp8 reads 64 × 1 + 64 × 1024 × 1 and writes 1024 × 2 (bf16 output) = 67,648 B
    fp8 = kernel_work(key, np.array([[1.0]]))
    bf16 = kernel_work(GemmKey(1024, 64, KernelDtype.BF16), np.array([[1.0]]))
    assert fp8 is not None and bf16 is not None
    assert (float(fp8.bytes[0]), float(bf16.bytes[0])) == (67_648.0, 133_248.0)


def test_an_unknown_method_is_refused_at_import():
    from graphsim.importers.hf import import_hf

    with pytest.raises(ConfigError, match="'bitsandbytes' is not supported"):
        import_hf(_tiny({"quant_method": "bitsandbytes"}))


def test_the_prediction_states_which_rows_and_kv_dtype(fused):
    from graphsim.costing.kernel_map import quantization_summary
    from graphsim.ir.kernel import KernelAttrs

    kernels = [n.attrs for n in fused.nodes if isinstance(n.attrs, KernelAttrs)]
    s = quantization_summary(kernels, fused.meta, Dtypes.for_graph(fused.meta))
    # four quantized GEMMs per layer (qkv, o, gate_up, down), the excluded lm_head in bf16
    assert s is not None and s.gemm_rows == {"fp8": 4, "bf16": 1} and (s.kv, s.kv_source) == ("fp8", "checkpoint")
    given = quantization_summary(kernels, fused.meta, Dtypes.for_graph(fused.meta, "bf16"), "bf16")
    assert given is not None and (given.kv, given.kv_source) == ("bf16", "--kv-cache-dtype")

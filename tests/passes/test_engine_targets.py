"""Fuse targets sglang and trtllm on real layer graphs: which kernels each engine launches (passes/fuse/sglang.py,
trtllm.py cite the sources)."""

import pytest
from passes_helpers import kernels_of_layer

from graphsim.catalog import catalog
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelAttrs
from graphsim.passes import run_pipeline

ALL = [e.name for e in catalog()]


@pytest.fixture
def imported(hf_import):
    return lambda name: hf_import(name)[0]


def _layer(graph, target):
    out = run_pipeline(graph, f"fold,fuse{{target={target}}}").graph
    out.verify("test")
    return out, [(n.kernel.kind.value, n.kernel.name) for n in kernels_of_layer(out, 0)]


def test_sglang_llama_layer(imported):
    # SGLang LlamaDecoderLayer: RMSNorm (sgl_kernel rmsnorm), fused qkv GEMM, apply_rope_with_cos_sin_cache_inplace,
    # FA3 attention (Hopper default), o_proj, fused_add_rmsnorm, gate_up GEMM, silu_and_mul, down_proj
    out, seq = _layer(imported("llama-3.1-8b"), "sglang")
    assert seq == [
        ("rms_norm", "rmsnorm"), ("gemm", "qkv_proj"), ("rotary", "apply_rope_with_cos_sin_cache_inplace"),
        ("attention", "flash_attn_with_kvcache"), ("gemm", "o_proj"), ("fused_add_rms_norm", "fused_add_rmsnorm"),
        ("gemm", "gate_up_proj"), ("act_and_mul", "silu_and_mul"), ("gemm", "down_proj"),
    ]
    geo = {n.kernel.name: n.kernel.geometry for n in kernels_of_layer(out, 0)}
    # the same packing as vLLM: q 4096 + k 1024 + v 1024 = 6144 outputs
    assert geo["qkv_proj"] == GemmGeometry(n=6144, k=4096, q_features=4096, num_kv_heads=8)
    assert out.meta.fuse_target == "sglang"


def test_trtllm_llama_layer_fuses_rope_into_attention(imported):
    # TensorRT-LLM: rope_fusion puts RoPE inside the attention op, so one kernel fewer per layer than vLLM
    out, seq = _layer(imported("llama-3.1-8b"), "trtllm")
    assert seq == [
        ("rms_norm", "flashinfer_rmsnorm"), ("gemm", "qkv_proj"), ("attention", "trtllm_attention"),
        ("gemm", "o_proj"), ("fused_add_rms_norm", "flashinfer_fused_add_rmsnorm"), ("gemm", "gate_up_proj"),
        ("act_and_mul", "swiglu"), ("gemm", "down_proj"),
    ]
    vllm = run_pipeline(imported("llama-3.1-8b"), "fold,fuse{target=vllm}").graph
    assert len(kernels_of_layer(vllm, 0)) - len(kernels_of_layer(out, 0)) == 1


def test_moe_kernels_are_named_per_engine(imported):
    g = imported("qwen3-30b-a3b")
    names = {t: {n.kernel.name for n in kernels_of_layer(run_pipeline(g, f"fold,fuse{{target={t}}}").graph, 0)}
             for t in ("vllm", "sglang", "trtllm")}
    assert "fused_moe" in names["vllm"] and "fused_moe" in names["sglang"]
    assert "cutlass_fused_moe" in names["trtllm"]


@pytest.mark.slow  # traces every catalog model (about 2 min alone)
@pytest.mark.parametrize("name", ALL)
def test_engine_targets_fuse_and_partition_every_catalog_model(name, imported):
    g = imported(name)
    for target in ("sglang", "trtllm"):
        for pipe in (f"fold,fuse{{target={target}}}", f"fold,fuse{{target={target}}},tp{{size=2}}"):
            out = run_pipeline(g, pipe).graph
            out.verify("test")
            assert all(isinstance(n.attrs, KernelAttrs) for n in out.nodes)
            assert out.meta.fuse_target == target

"""Test helpers: the tiny Llama config, and realistic CUDA kernel names of a vLLM bf16 forward (as nsys and
kineto print them) per graph kernel, to build captures from."""

import copy
import json

from graphsim.catalog import resolve_model
from graphsim.costing.align import iteration_kernels


def tiny_llama_config() -> dict:
    cfg = copy.deepcopy(resolve_model("llama-3.1-8b").config)
    cfg.pop("rope_scaling", None)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
               num_hidden_layers=2, vocab_size=97, max_position_embeddings=256, bos_token_id=None,
               eos_token_id=None)
    return cfg


def write_json(path, data):
    path.write_text(json.dumps(data))
    return path


NAMES = {
    "embedding": ["void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, "
                  "2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, long)"],
    "rms_norm": ["void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, long, "
                 "c10::BFloat16 const*, float, int, int)"],
    "fused_add_rms_norm": ["void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, "
                           "c10::BFloat16*, c10::BFloat16 const*, float, int, int)"],
    "gemm": ["nvjet_tst_128x64_64x8_2x1_v_bz_coopB_TNN"],
    "rotary_embedding": ["void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, "
                         "c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)"],
    "flash_attn_varlen": [
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
        "(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, "
        "long, long, int, int, int, float const*, float const*)",
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 128, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<64, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
        "false, true, true, false, false>(flash::Flash_fwd_params)",
        "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<64, 64, 128, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<64, 64, 128, 4, cutlass::bfloat16_t> >, 4, 1, true>"
        "(flash::Flash_fwd_params)",
    ],
    "silu_and_mul": ["void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>"
                     "(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"],
}
MEMCPY_IN = "Memcpy HtoD (Pinned -> Device)"
SAMPLING = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
            "unsigned int, long, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)")
MEMCPY_OUT = "Memcpy DtoH (Device -> Pinned)"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")


def vllm_kernel_names(graph) -> list[tuple[str, str]]:
    """(graph node, kernel name) for one iteration of `graph` (a vllm-target fused graph), in order."""
    out = []
    for g in iteration_kernels(graph):
        key = "gemm" if g.attrs.kind.value == "gemm" else g.attrs.name
        for name in NAMES[key]:
            out.append((g.node, name))
    return out


def kernel_list(names: list[str], label: str = "decode:4x100", us: float = 5.0) -> dict:
    kernels = [{"name": n, "duration_us": us * (1 + i % 3), "stream": 7} for i, n in enumerate(names)]
    return {"format": "graphsim.kernels/1", "device": "NVIDIA H200", "iterations": [{"label": label,
                                                                                   "kernels": kernels}]}

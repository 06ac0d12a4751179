"""Plain JSON kernel lists, and kernel-name classification of the kernels vLLM launches."""

import pytest
from capture_helpers import ADD, MEMCPY_IN, NAMES, SAMPLING, write_json

from graphsim.importers.captures import CaptureError, LaunchClass, load_capture
from graphsim.importers.captures.classify import classify_cpu_op, classify_kernel, short_kernel_name


def test_iterations_format(tmp_path):
    data = {"format": "graphsim.kernels/1", "device": "NVIDIA H200", "iterations": [
        {"label": "prefill:1x2048", "kernels": [{"name": NAMES["gemm"][0], "duration_us": 100.0},
                                                {"name": NAMES["rms_norm"][0], "duration_ns": 5000}]},
        {"label": "decode:64x2048", "kernels": [{"name": NAMES["gemm"][0], "duration_us": 20.0, "start_us": 50.0,
                                                 "stream": 7, "shapes": [[64, 4096], [4096, 6144]]}]},
    ]}
    cap = load_capture(write_json(tmp_path / "k.json", data))
    assert cap.format == "kernel-list" and cap.device == "NVIDIA H200"
    assert [it.phase for it in cap.iterations] == ["prefill:1x2048", "decode:64x2048"]
    pre, dec = cap.iterations
    assert [x.duration_us for x in pre.launches] == [100.0, 5.0]
    assert pre.launches[1].start_us == 100.0  # back to back without start_us
    assert dec.launches[0].shapes == ((64, 4096), (4096, 6144)) and dec.launches[0].stream == "7"
    assert cap.select(phase="decode:64x2048") is dec
    assert load_capture(tmp_path / "k.json", iteration_pattern="^decode").iterations[0].label == "decode:64x2048"


def test_bare_list_and_flat_iterations(tmp_path):
    cap = load_capture(write_json(tmp_path / "a.json", [{"name": "my_kernel", "duration_us": 1}]))
    assert cap.iterations[0].label == "capture" and cap.iterations[0].launches[0].klass is LaunchClass.ELEMENTWISE
    flat = [{"name": NAMES["gemm"][0], "duration_us": 3, "iteration": i, "phase": "decode"} for i in range(3)]
    cap = load_capture(write_json(tmp_path / "b.json", flat))
    assert len(cap.iterations) == 3 and set(cap.phases()) == {"decode"}


@pytest.mark.parametrize("data, msg", [
    ({"kernels": []}, "non-empty 'kernels'"),
    ({"kernels": [{"duration_us": 1}]}, "needs a non-empty 'name'"),
    ([{"name": "k", "duration_us": -1}], "duration_us >= 0"),
    ({"kernels": [{"name": "k", "duration_us": "fast"}]}, "non-numeric duration_us"),
    ({"iterations": [{"label": "x", "kernels": [{"name": "k", "duration_us": 1, "shapes": [["a"]]}]}]},
     "malformed shapes"),
])
def test_bad_lists_are_one_line_errors(tmp_path, data, msg):
    with pytest.raises(CaptureError) as e:
        load_capture(write_json(tmp_path / "bad.json", data))
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_iteration_out_of_range(tmp_path):
    cap = load_capture(write_json(tmp_path / "a.json", [{"name": "k", "duration_us": 1}]))
    with pytest.raises(CaptureError, match="out of range"):
        cap.select(iteration=3)
    with pytest.raises(CaptureError, match="no phase 'decode'"):
        cap.select(phase="decode")


@pytest.mark.parametrize("name, klass, op", [
    (NAMES["rms_norm"][0], LaunchClass.NORM, "rms_norm"),
    (NAMES["fused_add_rms_norm"][0], LaunchClass.NORM, "fused_add_rms_norm"),
    (NAMES["gemm"][0], LaunchClass.GEMM, "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     LaunchClass.GEMM, "gemm"),
    (NAMES["rotary_embedding"][0], LaunchClass.ROTARY, "rotary"),
    (NAMES["flash_attn_varlen"][0], LaunchClass.KV_CACHE_WRITE, "kv_cache_write"),
    (NAMES["flash_attn_varlen"][1], LaunchClass.ATTENTION, "attention"),
    (NAMES["flash_attn_varlen"][2], LaunchClass.ATTENTION_AUX, "attention_aux"),
    (NAMES["silu_and_mul"][0], LaunchClass.ACT_AND_MUL, "silu_and_mul"),
    (NAMES["embedding"][0], LaunchClass.ELEMENTWISE, "index"),
    (ADD, LaunchClass.ELEMENTWISE, "add"),
    ("fused_moe_kernel", LaunchClass.MOE, "moe"),
    ("void vllm::moe::topkGatingSoftmax<8, 128, 4, 16, 32, int>(float const*, bool const*, float*, int)",
     LaunchClass.MOE_ROUTER, "moe_router"),
    ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int)",
     LaunchClass.MOE_AUX, "moe_aux"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", LaunchClass.COLLECTIVE,
     "all_reduce"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals)",
     LaunchClass.COLLECTIVE, "all_reduce"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", LaunchClass.NORM, "fused_add_rms_norm"),
    ("triton_poi_fused_mul_silu_1", LaunchClass.ACT_AND_MUL, "silu_and_mul"),
    (MEMCPY_IN, LaunchClass.PLUMBING, "memcpy"),
    ("[CUDA memset]", LaunchClass.PLUMBING, "memset"),
    (SAMPLING, LaunchClass.PLUMBING, "sampling"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, at::detail::Array<char*, 1> >"
     "(int, at::native::FillFunctor<int>, at::detail::Array<char*, 1>)", LaunchClass.PLUMBING, "fill"),
    ("some_unknown_thing", LaunchClass.OTHER, ""),
])
def test_kernel_names(name, klass, op):
    got_class, got_op, label, plumbing = classify_kernel(name)
    assert (got_class, got_op) == (klass, op)
    assert "(" not in label or label.startswith(("[", "Memcpy"))
    assert bool(plumbing) == (klass is LaunchClass.PLUMBING)


def test_short_names():
    assert short_kernel_name(NAMES["rms_norm"][0]) == "vllm::rms_norm_kernel"
    assert short_kernel_name(NAMES["embedding"][0]) == "at::native::anon::indexSelectLargeIndex"


@pytest.mark.parametrize("name, nested, klass, op", [
    ("aten::linear", ["aten::t", "aten::addmm"], LaunchClass.GEMM, "linear"),
    ("aten::to", [], LaunchClass.PLUMBING, "no-op"),
    ("aten::to", ["aten::_to_copy", "aten::empty_strided", "aten::copy_"], LaunchClass.ELEMENTWISE, "cast"),
    ("aten::reshape", ["aten::view"], LaunchClass.PLUMBING, "no-op"),
    ("aten::reshape", ["aten::clone", "aten::copy_"], LaunchClass.ELEMENTWISE, "copy"),
    ("aten::transpose", ["aten::as_strided"], LaunchClass.PLUMBING, "view"),
    ("aten::scaled_dot_product_attention", ["aten::_scaled_dot_product_flash_attention_for_cpu"],
     LaunchClass.ATTENTION, "attention"),
    ("aten::add_", [], LaunchClass.ELEMENTWISE, "add"),
    ("aten::zeros", ["aten::empty", "aten::zero_"], LaunchClass.PLUMBING, "fill"),
    ("aten::rms_norm", [], LaunchClass.NORM, "rms_norm"),
    ("aten::frobnicate", [], LaunchClass.OTHER, "frobnicate"),
])
def test_cpu_ops(name, nested, klass, op):
    got = classify_cpu_op(name, nested)
    assert (got[0], got[1]) == (klass, op)

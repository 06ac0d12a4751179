"""torch.profiler Chrome traces: a real CPU trace of a tiny Llama, and a hand-built kineto GPU trace."""

import gzip
import json

import pytest
from capture_helpers import write_json

from graphsim.importers.captures import CaptureError, LaunchClass, load_capture
from graphsim.importers.captures.summary import find_fold, summarize


def test_cpu_trace_iterations_and_top_level_ops(cpu_trace):
    cap = load_capture(cpu_trace)
    assert cap.format == "torch-trace" and cap.device == "cpu"
    assert [it.label for it in cap.iterations] == ["prefill:1x8", "prefill:1x8"]
    assert {it.phase for it in cap.iterations} == {"prefill:1x8"}
    it = cap.select()
    assert it.index == 1 and it.batch_spec() == "prefill:1x8"
    names = [x.name for x in it.launches]
    # top-level ops only: the addmm/mm inside aten::linear is not a launch of its own
    assert "aten::linear" in names and not {"aten::addmm", "aten::mm", "aten::t"} & set(names)
    assert [x.start_us for x in it.launches] == sorted(x.start_us for x in it.launches)
    assert all(x.duration_us >= 0 for x in it.launches)
    assert it.launch_us <= it.wall_us * 1.001
    by_name = {}
    for x in it.launches:
        by_name.setdefault(x.name, set()).add(x.klass)
    assert by_name["aten::linear"] == {LaunchClass.GEMM}
    assert by_name["aten::scaled_dot_product_attention"] == {LaunchClass.ATTENTION}
    assert by_name["aten::transpose"] == {LaunchClass.PLUMBING}
    assert by_name["aten::embedding"] == {LaunchClass.EMBEDDING}
    # 2 layers × (q, k, v, o, gate, up, down) + lm_head
    assert sum(1 for x in it.launches if x.klass is LaunchClass.GEMM) == 15
    linear = next(x for x in it.launches if x.name == "aten::linear")
    assert linear.shapes is not None and linear.dtypes is not None
    assert linear.shapes[:2] == ((1, 8, 64), (64, 64)) and linear.dtypes[0] == "float"


def test_cpu_trace_fold_finds_the_layer_block(cpu_trace):
    (s,) = summarize(load_capture(cpu_trace))
    assert s.fold is not None and s.fold.repeats == 2
    assert sum(1 for x in s.fold.block if x == "aten::linear") == 7
    assert s.groups[0].total_us >= s.groups[-1].total_us
    assert abs(sum(s.share(g) for g in s.groups) - 1.0) < 1e-9


def test_range_pattern_that_matches_nothing_is_one_line(cpu_trace):
    with pytest.raises(CaptureError) as e:
        load_capture(cpu_trace, iteration_pattern="^decode")
    msg = str(e.value)
    assert "\n" not in msg and "prefill:1x8" in msg


def test_find_fold():
    seq = ["emb"] + ["a", "b", "c"] * 4 + ["head"]
    f = find_fold(seq)
    assert f is not None
    assert (f.start, f.period, f.repeats, f.block) == (1, 3, 4, ("a", "b", "c"))
    assert find_fold(["x", "y", "z"]) is None


def _gpu_trace():
    """A kineto trace shape: ProfilerStep ⊃ user range; kernels tied to runtime calls by correlation and
    to aten ops by External id."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": "decode:4x100", "pid": 1, "tid": 1, "ts": 10, "dur": 900},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 30,
         "args": {"External id": 5, "Input Dims": [[4, 64], [64, 192]], "Input type": ["c10::BFloat16"] * 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 25, "dur": 5,
         "args": {"correlation": 100, "External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 60, "dur": 5,
         "args": {"correlation": 101}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2000, "dur": 5,
         "args": {"correlation": 102}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "pid": 0, "tid": 7, "ts": 40,
         "dur": 12.5, "args": {"correlation": 100, "External id": 5, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7, "ts": 70,
         "dur": 2.0, "args": {"correlation": 101, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "kernel", "name": "void vllm::rms_norm_kernel<c10::BFloat16>(int)", "pid": 0, "tid": 7,
         "ts": 2010, "dur": 3.0, "args": {"correlation": 102, "stream": 7, "device": 0}},
    ]
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}


def test_gpu_trace_places_kernels_by_their_launch(tmp_path):
    cap = load_capture(write_json(tmp_path / "gpu.json", _gpu_trace()))
    assert cap.device == "NVIDIA H200" and "GPU kernel time" in cap.timebase
    (it,) = cap.iterations  # innermost matching range; the kernel launched at 2000 lies outside it
    assert it.label == "decode:4x100"
    gemm, memcpy = it.launches
    assert gemm.klass is LaunchClass.GEMM and gemm.duration_us == 12.5 and gemm.stream == "7"
    assert gemm.shapes == ((4, 64), (64, 192)) and gemm.scope == "aten::mm"
    assert memcpy.klass is LaunchClass.PLUMBING and memcpy.plumbing == "memcpy"
    assert any("outside every iteration range" in n for n in cap.notes)


def test_gzipped_trace_and_explicit_range(tmp_path):
    p = tmp_path / "gpu.json.gz"
    p.write_bytes(gzip.compress(json.dumps(_gpu_trace()).encode()))
    cap = load_capture(p, iteration_pattern=r"^ProfilerStep")
    assert [it.label for it in cap.iterations] == ["ProfilerStep#7"]
    assert cap.iterations[0].phase == "ProfilerStep"


def test_not_a_trace(tmp_path):
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(CaptureError, match="not valid JSON"):
        load_capture(tmp_path / "x.json")
    with pytest.raises(CaptureError, match="no capture file"):
        load_capture(tmp_path / "missing.json")
    with pytest.raises(CaptureError, match="not a Chrome trace"):
        load_capture(write_json(tmp_path / "y.json", {"hello": 1}))

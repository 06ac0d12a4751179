"""benchmarks/validate_cpu.py runs end to end on a tiny model: profile → predict → real forward → finite errors.
(The ≤ 10 % median error is a benchmark figure on the real sizes, not asserted here.)"""

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
profiler = pytest.importorskip("graphsim.profiles.profiler")



def test_validation_loop_runs_and_errors_are_finite(tmp_path, benchmark_script):
    V = benchmark_script("validate_cpu")
    spec = V.ModelSpec("tiny", "llama-3.1-8b", dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        vocab_size=97, max_position_embeddings=256))
    fast = profiler.TimingOptions(warmup_calls=1, warmup_time_s=0.0, min_samples=3, min_time_s=0.0,
                                  max_time_s=0.005, floor_samples=1)
    cases = ["prefill:1x8", "prefill:2x4@4", "decode:3x12"]
    run = V.validate_model(spec, cases, tmp_path, timing=fast, min_repeats=2, min_time_s=0.0)
    assert [c.case for c in run.cases] == cases
    for c in run.cases:
        assert c.measured_us > 0 and c.predicted_us is not None and c.predicted_us > 0, c
        assert c.error is not None and math.isfinite(c.error)
        assert c.predicted_source in ("measured", "interpolated")
    s = V.summary([run])
    assert s["with_prediction"] == 3 and math.isfinite(s["median_abs_error"])
    assert (tmp_path / "tiny" / "config.json").is_file() and (tmp_path / "tiny.db").is_file()


def test_case_grid_covers_every_case_with_generic_points(benchmark_script):
    V = benchmark_script("validate_cpu")
    from graphsim.workload import parse_batch_spec

    steps = [parse_batch_spec(s) for s in ("prefill:1x512", "prefill:4x128", "prefill:1x256@256", "decode:16x512")]
    g = V.case_grid(steps)
    generic = set(profiler.pow2_and_midpoints(1, 1 << 16))
    for axis in (g.gemm_m, g.tokens, g.prefill_batch, g.prefill_q, g.decode_batch, g.decode_kv):
        assert set(axis) <= generic
    assert max(g.gemm_m) >= 512 and max(g.prefill_batch) >= 4 and max(g.decode_batch) >= 16
    assert min(g.decode_kv) <= 513 <= max(g.decode_kv) and g.prefill_max_kv >= 512
    assert any(p.q_len == 256 and p.kv_len == 512 for p in g.prefill_points())

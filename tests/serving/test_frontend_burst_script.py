"""benchmarks/frontend_burst.py's pieces that run without vLLM: the stand-in engine's source with its log and step
bound in, and the rank statistic it prints (the burst itself needs an interpreter with vLLM: the script's
docstring)."""

from __future__ import annotations


def test_engine_code_binds_the_log_and_the_step(benchmark_script):
    fb = benchmark_script("frontend_burst")
    code = fb.engine_code("/tmp/x/arrivals.log", 0.25)
    assert "sys.argv[3]" not in code and "sys.argv[4]" not in code
    assert "open('/tmp/x/arrivals.log', \"a\", buffering=1)" in code
    assert "step_s = 0.25" in code
    compile(code, "<engine>", "exec")  # still Python after the substitution
    # the ZMQ addresses stay arguments, as host_frontend._serve passes them
    assert "inp.connect(sys.argv[1])" in code and "out.connect(sys.argv[2])" in code


def test_pct_is_the_nearest_rank(benchmark_script):
    fb = benchmark_script("frontend_burst")
    # 11 values 0..10: q 0.1 → index round(0.1 × 10) = 1 → 1.0; the median index 5 → 5.0; q 1 → the last, 10.0
    xs = [float(v) for v in (10, 0, 9, 1, 8, 2, 7, 3, 6, 4, 5)]
    assert fb._pct(xs, 0.1) == 1.0
    assert fb._pct(xs, 0.5) == 5.0
    assert fb._pct(xs, 1.0) == 10.0

"""The API server's serial front end per vLLM version (graphsim/serving/host.py `frontend_for`), by hand.

The anchor is vLLM 0.10.1's: 12,500 µs a request (fitted, host.py FRONTEND_US) + 2.0 µs a prompt token (1e6 / 500k
tokens/s, cited). benchmarks/host_frontend.py timed vLLM's own API server of 0.10.1 and 0.19.0 on one CPU: per request
no different (0.971, 1.033), per prompt token 0.19.0 / 0.10.1 = 2.279 / 1.556 = 1.46465 and 1.394 / 0.953 = 1.46275,
mean 1.46370, so from 0.19.0 on the tokenising term is 2.0 × 1.46370 = 2.92740 µs a token. Versions between the two
measured ones take 0.10.1's; versions before 0.10.1 keep it, stated as not measured; `--frontend-us` replaces the
per-request term of every version.
"""

from __future__ import annotations

import pytest

from graphsim.serving import EngineConfig
from graphsim.serving.engine_config import EngineArgs
from graphsim.serving.engine_versions import parse_engine

PER_TOKEN_0_19 = 2.92740  # 2.0 × (2.279 / 1.556 + 1.394 / 0.953) / 2, by hand (above)


@pytest.mark.parametrize(("engine", "per_token_us"), [
    ("vllm==0.10.1", 2.0),  # the fit runs' version: the anchor itself
    ("vllm==0.13", 2.0),  # between the measured two (no renderer in 0.14.0's sources): 0.10.1's
    ("vllm==0.18", 2.0),  # not inspected, before the first release seen with the renderer: 0.10.1's
    ("vllm==0.19", PER_TOKEN_0_19),  # measured
    ("vllm==0.25", PER_TOKEN_0_19),  # newer than 0.19: the nearer measured one
    ("vllm", PER_TOKEN_0_19),  # the newest profile (0.33.0)
    ("vllm==0.8", 2.0),  # V1 before 0.10.1: not measured, the anchor
    ("vllm==0.6.3", 2.0),  # V0: not measured, the anchor
    ("vllm==0.5.4", 2.0),  # V0 before 0.6 ("v0-sync" host): not measured, the anchor
])
def test_the_front_end_follows_the_engine_version(engine, per_token_us):
    h = parse_engine(engine).host
    assert h.frontend_per_token_us == pytest.approx(per_token_us, rel=1e-5)
    assert h.frontend_us == 12_500.0  # per request: measured no different between 0.10.1 and 0.19.0
    assert h.frontend_latency_us == 10_000.0  # not serial, fitted, the same everywhere


def test_a_burst_reaches_the_engine_later_on_0_19():
    # serial service of a 1,024-token prompt: 0.10.1 12,500 + 2.0 × 1024 = 14,548 µs;
    # 0.19 12,500 + 2.92740 × 1024 = 15,497.66 µs (+6.5 %)
    from graphsim.serving.frontend import FrontEnd

    for engine, want_us in (("vllm==0.10.1", 14_548.0), ("vllm==0.19", 15_497.66)):
        h = parse_engine(engine).host
        fe = FrontEnd(h.frontend_us, h.frontend_per_token_us, h.frontend_latency_us)
        assert fe.service_s(1024) * 1e6 == pytest.approx(want_us, abs=0.05)


def test_the_json_says_where_the_front_end_comes_from():
    new = parse_engine("vllm==0.19").to_json()["host"]
    assert new["frontend_per_token_us"] == pytest.approx(PER_TOKEN_0_19, rel=1e-5)
    assert "0.19.0" in new["frontend_basis"] and "measured" in new["frontend_basis"]
    old = parse_engine("vllm==0.10.1").to_json()["host"]
    assert "fitted" in old["frontend_basis"] and "not measured" not in old["frontend_basis"]
    assert "not measured" in parse_engine("vllm==0.6.3").to_json()["host"]["frontend_basis"]


def test_frontend_us_overrides_every_version():
    for engine in ("vllm==0.10.1", "vllm==0.19", "vllm", "vllm==0.5.4"):
        args = EngineArgs(engine=engine, frontend_us=3_000.0)
        cfg = EngineConfig(8192, 64, 8192, profile=args.profile, frontend_us=args.frontend_us)
        assert cfg.host.frontend_us == 3_000.0
        assert cfg.host.frontend_basis == "given (--frontend-us)"


def test_other_engines_keep_the_anchor():
    # SGLang / TensorRT-LLM borrow vLLM V1's host figures (assumed), not a measured vLLM version's front end
    for engine in ("sglang", "trtllm"):
        h = parse_engine(engine).host
        assert (h.frontend_us, h.frontend_per_token_us) == (12_500.0, 2.0)

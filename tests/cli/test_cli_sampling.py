"""`graphsim simulate --temperature / --top-k / --top-p` (vllm bench serve's sampling options; serving/sampler.py)."""

from __future__ import annotations

import pytest
from cli_helpers import entry_point, run_cli

pytestmark = pytest.mark.skipif(entry_point() is None, reason="the graphsim script is not installed")


def test_a_bad_top_p_fails_in_one_line_before_tracing():
    # the other values parse_sampling rejects are in tests/serving/test_sampler.py (one process start here: ~4 s)
    r = run_cli(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "-n", "5", "--top-p", "1.5"])
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert "--top-p 1.5: must be in (0, 1] (1: off)" in r.stderr + r.stdout

"""Scaling invariants over every catalog model (hypothesis picks the workloads)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from work_helpers import catalog_stems, load_config

from graphsim.work import Accounting, SeqGroup, Step, WorkReport, accounting

STEMS = catalog_stems()
FAST = settings(max_examples=12, deadline=None)


@cache
def acc(stem: str) -> Accounting:
    return accounting(load_config(stem))


def run(stem: str, *groups: SeqGroup) -> WorkReport:
    return acc(stem).step(Step(tuple(groups)))


@pytest.mark.parametrize("stem", STEMS)
@FAST
@given(n=st.integers(1, 4096), p=st.integers(0, 8192))
def test_matmul_flops_linear_in_new_tokens(stem, n, p):
    f = [run(stem, SeqGroup(k * n, p)).matmul_flops for k in (1, 2, 3)]
    assert f[2] - f[1] == f[1] - f[0] > 0


@pytest.mark.parametrize("stem", ["Llama-3.1-8B", "Qwen3-8B", "Mixtral-8x7B-v0.1", "DeepSeek-V3"])
@FAST
@given(n=st.integers(1, 20_000))
def test_attention_flops_quadratic_without_window(stem, n):
    # prefill from an empty cache: every layer scores n(n+1)/2 pairs per head
    f1, f2 = run(stem, SeqGroup(n, 0)).attention_flops, run(stem, SeqGroup(2 * n, 0)).attention_flops
    assert f2 * (n * (n + 1)) == f1 * (2 * n * (2 * n + 1))


@pytest.mark.parametrize("stem,window", [("Gemma-2-9b", 4096), ("gpt-oss-20b", 128), ("Phi-3-mini-4k-instruct", 2047)])
@FAST
@given(data=st.data())
def test_sliding_window_attention_quadratic_then_linear(stem, window, data):
    sliding = "layers[sliding].attn.core" if stem != "Phi-3-mini-4k-instruct" else "layers.attn.core"

    def core(n: int) -> int:
        return run(stem, SeqGroup(n, 0)).segment(sliding).flops

    below = data.draw(st.integers(1, window - 2))
    d1, d2 = core(below + 1) - core(below), core(below + 2) - core(below + 1)
    assert d2 > d1  # growing increments: quadratic below the window
    above = data.draw(st.integers(window, 4 * window))
    e1, e2 = core(above + 1) - core(above), core(above + 2) - core(above + 1)
    assert e1 == e2 > 0  # constant increments: linear beyond it


@pytest.mark.parametrize("stem,window", [("Gemma-2-9b", 4096), ("gpt-oss-20b", 128)])
@FAST
@given(c=st.integers(0, 200_000), b=st.integers(1, 64))
def test_sliding_window_caps_kv_reads(stem, window, c, b):
    def reads(context: int, segment: str) -> float:
        return run(stem, SeqGroup(1, context, b)).segment(segment).state_read_bytes

    sliding, full = "layers[sliding].attn.core", "layers[full].attn.core"
    if c >= window - 1:  # the window already holds W - 1 cached positions: no more are read
        assert reads(c + 10_000, sliding) == reads(c, sliding)
    else:
        assert reads(c + 10_000, sliding) > reads(c, sliding)
    assert reads(c + 10_000, full) > reads(c, full)


@pytest.mark.parametrize("stem", STEMS)
@FAST
@given(b=st.integers(1, 4), c=st.integers(0, 2048))
def test_decode_bytes_dominated_by_parameters_at_small_batch(stem, b, c):
    t = run(stem, SeqGroup(1, c, b)).total
    assert t.param_read_bytes > 2 * (t.state_read_bytes + t.state_write_bytes)


@pytest.mark.parametrize("stem", STEMS)
@FAST
@given(b=st.integers(1, 512), c=st.integers(0, 32_768), extra=st.integers(1, 4096))
def test_more_context_never_means_less_work(stem, b, c, extra):
    short, long = run(stem, SeqGroup(1, c, b)).total, run(stem, SeqGroup(1, c + extra, b)).total
    assert long.flops >= short.flops and long.state_read_bytes >= short.state_read_bytes
    assert long.param_read_bytes == short.param_read_bytes


@pytest.mark.parametrize("stem", STEMS)
@FAST
@given(n=st.integers(1, 8192), p=st.integers(0, 8192), b=st.integers(1, 256), c=st.integers(0, 8192))
def test_mixed_step_adds_flops_and_state(stem, n, p, b, c):
    pre, dec = SeqGroup(n, p), SeqGroup(1, c, b)
    mixed, a, d = run(stem, pre, dec).total, run(stem, pre).total, run(stem, dec).total
    assert mixed.flops == a.flops + d.flops
    assert mixed.state_read_bytes == pytest.approx(a.state_read_bytes + d.state_read_bytes)
    assert mixed.state_write_bytes == pytest.approx(a.state_write_bytes + d.state_write_bytes)
    # parameters are read once per step, not once per part
    assert mixed.param_read_bytes <= a.param_read_bytes + d.param_read_bytes
    assert mixed.param_read_bytes <= mixed.param_read_bytes_worst


@pytest.mark.parametrize("stem", ["Mixtral-8x7B-v0.1", "Qwen3-30B-A3B", "DeepSeek-V3", "gpt-oss-20b", "Qwen3-Next-80B-A3B"])
@FAST
@given(b=st.integers(1, 2048))
def test_moe_parameter_reads_grow_with_batch_up_to_all_experts(stem, b):
    small, big = run(stem, SeqGroup(1, 1024, b)).total, run(stem, SeqGroup(1, 1024, b + 1)).total
    assert small.param_read_bytes <= big.param_read_bytes <= big.param_read_bytes_worst
    stored = acc(stem).params().stored_bytes
    assert big.param_read_bytes_worst <= stored

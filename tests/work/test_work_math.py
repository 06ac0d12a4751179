"""Property tests for the counting formulas and the workload grammar."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsim.work.attention_math import cached_tokens_read, causal_pairs, new_tokens_kept
from graphsim.work.routing import expected_experts_touched, max_experts_touched
from graphsim.workload import SeqGroup, WorkloadError, parse_decode, parse_prefill, parse_step

windows = st.one_of(st.none(), st.integers(1, 300))


def _attends(q: int, k: int, w: int | None) -> bool:
    """HF mask: causal, and with a window W, kv_idx > q_idx - W."""
    return k <= q and (w is None or k > q - w)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 120), p=st.integers(0, 200), w=windows)
def test_causal_pairs_matches_the_mask(n, p, w):
    brute = sum(1 for q in range(p, p + n) for k in range(p + n) if _attends(q, k, w))
    assert causal_pairs(n, p, w) == brute


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 80), p=st.integers(0, 150), w=windows)
def test_cache_reads_and_writes_match_the_mask(n, p, w):
    new = range(p, p + n)
    read = {k for q in new for k in range(p) if _attends(q, k, w)}
    assert cached_tokens_read(n, p, w) == len(read)
    # positions of this step that some later query (at p+n or beyond) still attends to
    later = range(p + n, p + n + (w or 1) + 1)
    kept = {k for q in later for k in new if _attends(q, k, w)}
    assert new_tokens_kept(n, p, w) == len(kept)


@given(n=st.integers(1, 10_000), p=st.integers(0, 10_000))
def test_full_attention_pairs_closed_form(n, p):
    assert causal_pairs(n, p) == n * p + n * (n + 1) // 2


@given(n=st.integers(1, 5000), p=st.integers(0, 5000), w=st.integers(1, 5000))
def test_window_never_adds_pairs(n, p, w):
    assert causal_pairs(n, p, w) <= causal_pairs(n, p) and causal_pairs(n, p, w) <= n * w


@pytest.mark.parametrize("experts,top_k,tokens", [(4, 2, 1), (4, 2, 2), (5, 2, 2), (4, 1, 3), (6, 3, 2)])
def test_expected_experts_by_enumeration(experts, top_k, tokens):
    choices = list(itertools.combinations(range(experts), top_k))
    outcomes = list(itertools.product(choices, repeat=tokens))
    mean = sum(len(set().union(*o)) for o in outcomes) / len(outcomes)
    assert expected_experts_touched(experts, top_k, tokens) == pytest.approx(mean, rel=1e-12)


@given(e=st.integers(1, 512), data=st.data(), t=st.integers(1, 100_000))
def test_expected_experts_bounds(e, data, t):
    k = data.draw(st.integers(1, e))
    exp = expected_experts_touched(e, k, t)
    assert k - 1e-9 <= exp <= max_experts_touched(e, k, t) + 1e-9
    assert expected_experts_touched(e, k, t + 1) >= exp
    assert expected_experts_touched(e, k, 1) == pytest.approx(k)


@given(n=st.integers(1, 10**6), p=st.integers(0, 10**6), b=st.integers(1, 4096), c=st.integers(0, 10**6))
def test_workload_labels_round_trip(n, p, b, c):
    g = parse_prefill(f"{n}@{p}")
    assert (g.new_tokens, g.cached_tokens, g.count) == (n, p, 1)
    d = parse_decode(f"{b}x{c}")
    assert (d.new_tokens, d.cached_tokens, d.count) == (1, c, b)
    for group in (g, d):  # a label parses back to its group
        label = group.label()
        assert (parse_prefill(label) if "@" in label else parse_decode(label)) == group
    step = parse_step([f"{n}@{p}"], [f"{b}x{c}"])
    assert step.tokens == n + b and step.sequences == 1 + b


def test_workload_suffixes_and_repeats():
    assert parse_prefill("8k@0") == SeqGroup(8192, 0)
    assert parse_prefill("4*1024@2_048") == SeqGroup(1024, 2048, 4)
    assert parse_decode("64X32k") == SeqGroup(1, 32768, 64)


@pytest.mark.parametrize("bad", ["", "8192", "8192@", "@0", "a@b", "8192@-1", "1.5@0", "0@0", "8192@0@1"])
def test_malformed_prefill(bad):
    with pytest.raises(WorkloadError):
        parse_prefill(bad)


@pytest.mark.parametrize("bad", ["", "256", "256x", "x4096", "0x4096", "256*4096", "2x3x4"])
def test_malformed_decode(bad):
    with pytest.raises(WorkloadError):
        parse_decode(bad)


def test_empty_step():
    with pytest.raises(WorkloadError):
        parse_step([], [])
